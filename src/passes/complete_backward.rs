//! Backward completion (Paddle's `complete_backward_annotation`): each grad op copies its
//! forward op's dist attrs and implementation — `X@GRAD` is laid out like the `X` the
//! forward op consumed, `Out@GRAD` like the `Out` it produced — and a gradient that sums
//! over split dims it does not have is partial on their mesh axes:
//!
//! ```text
//! matmul_v2_grad   x[dp,-] @ w[-,-]   =>  w@GRAD [-,-] partial(dp=SUM)   (batch is contracted)
//! matmul_v2_grad   x[-,-] @ w[-,mp]   =>  x@GRAD [-,-] partial(mp=SUM)   (n is contracted)
//! elementwise_add_grad out[dp,-] + b[-]  =>  b@GRAD [-] partial(dp=SUM)
//! layer_norm_grad, lookup_table_v2_grad: scale/bias/table grads partial on the batch axes
//! ```
//! Gradient accumulation (`sum`) adds complete contributions, as Paddle does.
//! Paddle marks these for matmul_v2_grad, elementwise_add_grad, layer_norm_grad and
//! lookup_table_v2_grad; we apply the same contraction rule to every broadcasting
//! elementwise grad (sub, mul, div), which Paddle would otherwise get wrong.

use super::backward::Backward;
use super::complete::Completed;
use super::dist_program::DistProgram;
use crate::dist::MeshAxis;
use crate::dist::MeshId;
use crate::dist::{ReduceType, TensorDistAttr};
use crate::ir::{Family, OpId, OpType, Program, VarId};
use crate::spmd::elementwise::operand_letters;
use crate::spmd::matmul::notation;
use rustc_hash::FxHashMap as HashMap;

/// The mesh axes that split `out` dims whose letters are missing from `letters`.
fn contracted_axes(out_letters: &str, out: &TensorDistAttr, letters: &str) -> Vec<MeshAxis> {
    let mut axes: Vec<MeshAxis> = out_letters
        .chars()
        .zip(&out.dims)
        .filter(|(l, _)| !letters.contains(*l))
        .flat_map(|(_, a)| a.iter().copied())
        .collect();
    axes.sort_unstable();
    axes.dedup();
    axes
}

/// Partial axes of each `<In>@GRAD` output of a grad op (by forward input slot and index).
fn grad_partials(
    program: &Program,
    forward: &crate::ir::Op,
    fwd_attr: &crate::dist::OperatorDistAttr,
) -> HashMap<(usize, usize), Vec<MeshAxis>> {
    let mut out = HashMap::default();
    let out_attr = || fwd_attr.outputs.first().and_then(|s| s.first());
    let OpType::Forward(f) = forward.ty else {
        return out;
    };
    match f.family() {
        Family::Matmul => {
            let (Some(o), Some(x), Some(y)) = (
                out_attr(),
                forward.input("X").first(),
                forward.input("Y").first(),
            ) else {
                return out;
            };
            if let Ok((xl, yl, ol)) = notation(program.var(*x).ty.rank(), program.var(*y).ty.rank())
            {
                out.insert((0, 0), contracted_axes(&ol, o, &xl));
                out.insert((1, 0), contracted_axes(&ol, o, &yl));
            }
        }
        Family::ElementwiseBinary => {
            let Some(o) = out_attr() else { return out };
            let out_shape = &program.var(forward.outputs[0][0]).ty.shape;
            let ol: &str = crate::spmd::einsum::letters(out_shape.len());
            for (slot, name) in [(0, "X"), (1, "Y")] {
                if let Some(v) = forward.input(name).first() {
                    let l = operand_letters(ol, out_shape, &program.var(*v).ty.shape);
                    // Broadcast dims: the letters the operand lacks or has as size 1.
                    out.insert((slot, 0), contracted_axes(ol, o, &l));
                }
            }
        }
        Family::Norm => {
            let x_attr = fwd_attr.inputs.first().and_then(|s| s.first());
            let begin = forward.attr_int("begin_norm_axis", 1).max(0) as usize;
            if let Some(x) = x_attr {
                let mut axes: Vec<MeshAxis> =
                    x.dims.iter().take(begin).flatten().copied().collect();
                axes.sort_unstable();
                out.insert((1, 0), axes.clone());
                out.insert((2, 0), axes);
            }
        }
        Family::Embedding => {
            if let Some(ids) = fwd_attr.inputs.get(1).and_then(|s| s.first()) {
                let mut axes: Vec<MeshAxis> = ids.dims.iter().flatten().copied().collect();
                axes.sort_unstable();
                out.insert((0, 0), axes);
            }
        }
        Family::ElementwiseUnary
        | Family::Softmax
        | Family::MaskedSoftmax
        | Family::Reshape
        | Family::Transpose
        | Family::Split
        | Family::Concat
        | Family::Reduce
        | Family::Mean
        | Family::Rotary
        | Family::Attention
        | Family::Repeat
        | Family::MoeDispatch
        | Family::MoeCombine
        | Family::CrossEntropy => {}
    }
    out
}

/// Dist attrs for the forward + backward program.
pub fn complete_backward(bw: &Backward, fwd: &Completed) -> DistProgram {
    let program = &bw.program;
    let mut dp = DistProgram {
        mesh: fwd.mesh.clone(),
        program: program.clone(),
        tensors: fwd.tensors.clone(),
        ops: fwd.ops.clone(),
    };
    // New variables start replicated; grad ops below lay them out.
    for v in program.vars().iter().skip(fwd.tensors.len()) {
        dp.tensors
            .push(TensorDistAttr::replicated(MeshId::JOB, v.ty.rank()));
    }
    for (i, op) in program.ops().iter().enumerate().skip(fwd.ops.len()) {
        let id = OpId(i as u32);
        let mut attr = dp.replicated_op_attr(op);
        if let Some(&f) = bw.forward_of.get(&id) {
            let forward = program.op(f);
            let fa = &fwd.ops[f.index()];
            let (fin, fout) = forward.ty.slots();
            let partials = grad_partials(program, forward, fa);
            for k in 0..fin.len() {
                // An input the grad reads for its shape only keeps its layout as it is
                // (a partial loss term is not reduced just to be measured).
                let shape_only = forward_shape_only(forward.ty, k);
                for (j, &v) in op.inputs[k].iter().enumerate() {
                    attr.inputs[k][j] = fa.inputs[k]
                        .get(j)
                        .cloned()
                        .map(|a| {
                            if shape_only {
                                a
                            } else {
                                DistProgram::settled(&a)
                            }
                        })
                        .unwrap_or_else(|| dp.tensors[v.index()].clone());
                }
            }
            for k in 0..fout.len() {
                for base in [fin.len(), fin.len() + fout.len()] {
                    for j in 0..op.inputs[base + k].len() {
                        if let Some(a) = fa.outputs[k].get(j) {
                            attr.inputs[base + k][j] = DistProgram::settled(a);
                        }
                    }
                }
            }
            for k in 0..fin.len() {
                for (j, &g) in op.outputs[k].iter().enumerate() {
                    let Some(a) = fa.inputs[k].get(j) else {
                        continue;
                    };
                    let mut ga = DistProgram::settled(a);
                    for &axis in partials.get(&(k, j)).map(Vec::as_slice).unwrap_or(&[]) {
                        ga.set_partial(axis, ReduceType::Sum);
                    }
                    dp.tensors[g.index()] = ga.clone();
                    attr.outputs[k][j] = ga;
                }
            }
            attr.imp = fa.imp;
        } else {
            accumulation_attr(&mut dp, program, op, &mut attr);
        }
        dp.ops.push(attr);
    }
    dp
}

/// fill_constant (d loss, zeros) and sum (gradient accumulation): laid out like the
/// forward variable their output is the gradient of.
fn accumulation_attr(
    dp: &mut DistProgram,
    program: &Program,
    op: &crate::ir::Op,
    attr: &mut crate::dist::OperatorDistAttr,
) {
    for (k, vars) in op.outputs.iter().enumerate() {
        for (j, &g) in vars.iter().enumerate() {
            let base = grad_base(program, g).map(|v| DistProgram::settled(&dp.tensors[v.index()]));
            let mut a = base.unwrap_or_else(|| dp.tensors[g.index()].clone());
            if op.ty == OpType::Sum {
                // Like Paddle, contributions are complete (non-partial) before they
                // are added: each producing implementation reduces its own partials.
                // Contributions that agree on a complete layout are added where they
                // are, and the sum moves once (an expert-parallel dispatch's input
                // gradient, from the gate and up matmuls: one all-to-all, not two).
                a = same_complete_layout(dp, &op.inputs[0])
                    .unwrap_or_else(|| DistProgram::settled(&a));
                attr.inputs[0] = op.inputs[0].iter().map(|_| a.clone()).collect();
            }
            dp.tensors[g.index()] = a.clone();
            attr.outputs[k][j] = a;
        }
    }
}

/// Whether forward input slot `k` of `ty` is one its grad reads for the shape only.
fn forward_shape_only(ty: OpType, k: usize) -> bool {
    let OpType::Forward(f) = ty else {
        return false;
    };
    let def = f.def();
    def.inputs
        .get(k)
        .is_some_and(|s| def.shape_only.contains(&s.name))
}

/// The layout every variable of `vars` has, when they agree on one and it has no partial
/// axes.
fn same_complete_layout(dp: &DistProgram, vars: &[VarId]) -> Option<TensorDistAttr> {
    let first = dp.tensors.get(vars.first()?.index())?;
    let agree = vars.iter().all(|v| dp.tensors[v.index()] == *first);
    (agree && first.partial.is_empty()).then(|| DistProgram::settled(first))
}

/// The forward variable `g` is (part of) the gradient of: `x` for `x@GRAD`, `x@GRAD@RENAME@1`...
pub fn grad_base(program: &Program, g: VarId) -> Option<VarId> {
    let name = &program.var(g).name;
    let base = name.split("@GRAD").next()?;
    (base.len() < name.len())
        .then(|| program.var_id(base))
        .flatten()
}
