//! Experts written one op chain each (an imported Mixture of Experts: PaddleFormers' loop
//! over `nn.Linear` experts) rewritten as one chain of batched ops over stacked weights
//! `[experts, in, out]`, the form expert parallelism splits (`--parallel ...,ep=N`) and
//! Megatron's grouped GEMM computes.
//!
//! The pattern, from a `moe_dispatch`'s output `R [E, slots, h]` to the `moe_combine` that
//! reads the same routing:
//!
//! ```text
//! split(R) {axis=0, num=E} -> r_0 .. r_E-1                   each [1, slots, h]
//! expert e: reshape2(r_e) -> [slots, h], then matmuls with 2-D weights and elementwise
//!           ops, then reshape2 -> c_e [1, slots, h]
//! concat(c_0 .. c_E-1) {axis=0} -> C [E, slots, h]            read by moe_combine
//! ```
//!
//! Every expert's chain must be the first's with other weights (same ops, attributes and
//! shapes); the rewrite is then `matmul(R, W) ...` with `W` the experts' weights stacked
//! (`experts.{first weight's name}`), writing `C`. The batched program computes the same
//! values: a batched matmul is the experts' matmuls side by side. A layer that does not
//! match is left as it is.

use crate::ir::{Attr, Op, OpType, Program, Var, VarId, VarKind};
use std::collections::HashMap;

/// The ops an expert's chain may hold between its two reshapes.
fn batchable(ty: OpType) -> bool {
    matches!(
        ty,
        OpType::MatmulV2
            | OpType::Silu
            | OpType::Gelu
            | OpType::Relu
            | OpType::Sigmoid
            | OpType::ElementwiseMul
            | OpType::ElementwiseAdd
    )
}

/// One matched layer: the split, the concat, and each expert's chain (op indices).
struct Layer {
    split: usize,
    concat: usize,
    chains: Vec<Vec<usize>>,
}

/// `program` with every matching layer's experts stacked (unchanged when none matches).
pub fn stack_experts(program: &Program) -> Program {
    stack_experts_with_sources(program).0
}

/// [`stack_experts`], and each stacked weight's name with the weights it stacks, in
/// expert order (to stack their values: `run` with a model's own weights).
pub fn stack_experts_with_sources(program: &Program) -> (Program, Vec<(String, Vec<String>)>) {
    let layers = find_layers(program);
    if layers.is_empty() {
        return (program.clone(), Vec::new());
    }
    let out = rebuild(program, &layers);
    let ops = program.ops();
    let mut sources = Vec::new();
    for l in &layers {
        for (k, &i) in l.chains[0].iter().enumerate() {
            for (s, slot) in ops[i].inputs.iter().enumerate() {
                for (j, &v) in slot.iter().enumerate() {
                    if program.var(v).kind != VarKind::Parameter {
                        continue;
                    }
                    let parts = l.chains.iter().map(|c| ops[c[k]].inputs[s][j]);
                    let names = parts.map(|w| program.var(w).name.to_string()).collect();
                    sources.push((format!("experts.{}", program.var(v).name), names));
                }
            }
        }
    }
    (out, sources)
}

/// The readers of each variable (op indices).
fn readers(program: &Program) -> HashMap<VarId, Vec<usize>> {
    let mut out: HashMap<VarId, Vec<usize>> = HashMap::new();
    for (i, op) in program.ops().iter().enumerate() {
        for v in op.all_inputs() {
            out.entry(v).or_default().push(i);
        }
    }
    out
}

fn find_layers(program: &Program) -> Vec<Layer> {
    let ops = program.ops();
    let readers = readers(program);
    let mut layers = Vec::new();
    for (s, split) in ops.iter().enumerate() {
        let Some(&r) = split.input("X").first() else {
            continue;
        };
        let from_dispatch = ops
            .iter()
            .any(|o| o.ty == OpType::MoeDispatch && o.output("Out") == [r]);
        if split.ty != OpType::Split || !from_dispatch || split.attr_int("axis", -1) != 0 {
            continue;
        }
        let parts = split.output("Out");
        let chains: Option<Vec<Vec<usize>>> =
            parts.iter().map(|&p| chain(program, &readers, p)).collect();
        let Some(chains) = chains else { continue };
        // The chains end in one concat, in expert order, on dim 0.
        let ends: Vec<VarId> = chains
            .iter()
            .filter_map(|c| {
                c.last()
                    .and_then(|&i| ops[i].output("Out").first().copied())
            })
            .collect();
        let concat = ends
            .first()
            .and_then(|e| readers.get(e))
            .and_then(|r| r.first());
        let Some(&concat) = concat else { continue };
        let c = &ops[concat];
        if c.ty != OpType::Concat || c.input("X") != ends.as_slice() || c.attr_int("axis", -1) != 0
        {
            continue;
        }
        if chains.iter().all(|ch| same_chain(program, &chains[0], ch)) {
            layers.push(Layer {
                split: s,
                concat,
                chains,
            });
        }
    }
    layers
}

/// The ops of one expert's chain from `part` (`[1, slots, h]`): a reshape dropping the
/// leading 1, batchable ops reading only the chain's values and 2-D parameters, a reshape
/// adding it back. `None` when the chain is anything else.
fn chain(
    program: &Program,
    readers: &HashMap<VarId, Vec<usize>>,
    part: VarId,
) -> Option<Vec<usize>> {
    let ops = program.ops();
    let first = *readers.get(&part)?.first()?;
    let shape = &program.var(part).ty.shape;
    let squeezed =
        |v: Option<&VarId>| v.is_some_and(|&v| program.var(v).ty.shape[..] == shape[1..]);
    if readers[&part].len() != 1
        || ops[first].ty != OpType::Reshape2
        || shape.first() != Some(&1)
        || !squeezed(ops[first].output("Out").first())
    {
        return None;
    }
    let mut inside: Vec<VarId> = ops[first].output("Out").to_vec();
    let mut out = vec![first];
    for (i, op) in ops.iter().enumerate().skip(first + 1) {
        let reads_chain = op.all_inputs().any(|v| inside.contains(&v));
        if !reads_chain {
            continue;
        }
        let closed = op.all_inputs().all(|v| {
            inside.contains(&v) || {
                let var = program.var(v);
                var.kind == VarKind::Parameter && var.ty.rank() == 2
            }
        });
        if op.ty == OpType::Reshape2 && closed {
            out.push(i);
            let end = op.output("Out").first().copied()?;
            let only = readers.get(&end).map(Vec::len) == Some(1);
            return (only && program.var(end).ty.shape == *shape).then_some(out);
        }
        let plain = op.ty != OpType::MatmulV2
            || !(op.attr_bool("trans_x", false) || op.attr_bool("trans_y", false));
        if !closed || !batchable(op.ty) || !plain {
            return None;
        }
        inside.extend(op.all_outputs());
        out.push(i);
    }
    None
}

/// Whether chain `b` is chain `a` with other weights: the same op types and attributes,
/// the same variable shapes, values read from the same places in the chain.
fn same_chain(program: &Program, a: &[usize], b: &[usize]) -> bool {
    let ops = program.ops();
    let position = |chain: &[usize], v: VarId| {
        chain
            .iter()
            .position(|&i| ops[i].all_outputs().any(|o| o == v))
    };
    a.len() == b.len()
        && a.iter().zip(b).all(|(&i, &j)| {
            let (x, y) = (&ops[i], &ops[j]);
            x.ty == y.ty
                && x.attrs == y.attrs
                && x.all_inputs().count() == y.all_inputs().count()
                && x.all_inputs().zip(y.all_inputs()).all(|(u, w)| {
                    program.var(u).ty == program.var(w).ty && position(a, u) == position(b, w)
                })
        })
}

/// The program with each layer's split, chains and concat replaced by the batched chain.
fn rebuild(program: &Program, layers: &[Layer]) -> Program {
    let ops = program.ops();
    let mut dropped_ops = vec![false; ops.len()];
    let mut dropped_vars = vec![false; program.vars().len()];
    for l in layers {
        dropped_ops[l.split] = true;
        for &i in l.chains.iter().flatten() {
            dropped_ops[i] = true;
            for v in ops[i].all_outputs() {
                dropped_vars[v.index()] = true;
            }
            for v in ops[i].all_inputs() {
                if program.var(v).kind == VarKind::Parameter {
                    dropped_vars[v.index()] = true;
                }
            }
        }
        for v in ops[l.split].all_outputs() {
            dropped_vars[v.index()] = true;
        }
    }
    let mut ids: Vec<Option<VarId>> = Vec::with_capacity(program.vars().len());
    let mut kept = Vec::new();
    for (i, v) in program.vars().iter().enumerate() {
        ids.push((!dropped_vars[i]).then_some(VarId(kept.len() as u32)));
        if !dropped_vars[i] {
            kept.push(v.clone());
        }
    }
    let mut out = Program::with_vars(kept);
    let remap = |op: &Op, ids: &[Option<VarId>]| -> Op {
        let mut op = Op::clone(op);
        for v in op.inputs.iter_mut().chain(op.outputs.iter_mut()).flatten() {
            *v = ids[v.index()].unwrap_or(*v);
        }
        op
    };
    for (i, op) in ops.iter().enumerate() {
        if let Some(l) = layers.iter().find(|l| l.concat == i) {
            batched(program, &mut out, l, &ids);
        } else if !dropped_ops[i] {
            out.push_op(remap(op, &ids));
        }
    }
    out
}

/// Appends layer `l`'s batched chain to `out`: from the split's input to the concat's
/// output, each weight stacked.
fn batched(program: &Program, out: &mut Program, l: &Layer, ids: &[Option<VarId>]) {
    let ops = program.ops();
    let experts = l.chains.len();
    let template = &l.chains[0];
    let id = |v: VarId| ids[v.index()].unwrap_or(v);
    let mut map: HashMap<VarId, VarId> = HashMap::new();
    // The first reshape's output is the dispatched tensor itself.
    let first_out = ops[template[0]].output("Out")[0];
    map.insert(first_out, id(ops[l.split].input("X")[0]));
    let last_in = ops[template[template.len() - 1]].input("X")[0];
    let concat_out = id(ops[l.concat].output("Out")[0]);
    for (k, &i) in template.iter().enumerate().take(template.len() - 1).skip(1) {
        let mut op = Op::clone(&ops[i]);
        for (s, slot) in op.inputs.iter_mut().enumerate() {
            for (j, v) in slot.iter_mut().enumerate() {
                *v = match map.get(v) {
                    Some(&b) => b,
                    None => {
                        let weights: Vec<VarId> =
                            l.chains.iter().map(|c| ops[c[k]].inputs[s][j]).collect();
                        stacked(program, out, &weights)
                    }
                };
            }
        }
        for v in op.outputs.iter_mut().flatten() {
            let b = if *v == last_in {
                concat_out
            } else {
                with_experts(out, program.var(*v), experts, VarKind::Activation)
            };
            map.insert(*v, b);
            *v = b;
        }
        if op.ty == OpType::ElementwiseAdd || op.ty == OpType::ElementwiseMul {
            op.attrs.insert("axis".into(), Attr::Int(-1));
        }
        out.push_op(op);
    }
}

/// The experts' weights `weights` (each `[in, out]`) as one `[experts, in, out]` parameter.
fn stacked(program: &Program, out: &mut Program, weights: &[VarId]) -> VarId {
    let first = program.var(weights[0]);
    with_experts(out, first, weights.len(), VarKind::Parameter)
}

/// A new `experts.{var}` in `out`: `var` with a leading dim of `experts` (a parameter is
/// persistable, as the weights it stacks are).
fn with_experts(out: &mut Program, var: &Var, experts: usize, kind: VarKind) -> VarId {
    let mut shape = vec![experts];
    shape.extend_from_slice(&var.ty.shape);
    out.add_var_unchecked(Var {
        name: format!("experts.{}", var.name).into(),
        ty: crate::ir::TensorType::new(var.ty.dtype, shape),
        kind,
        persistable: kind == VarKind::Parameter,
    })
}
