//! Activation recomputation (Chen et al. 2016; Korthikanti et al. 2022; Paddle's recompute
//! pass): the backward re-runs forward ops instead of keeping their outputs alive.
//!
//! Segments are transformer layers: the forward ops whose first output is named `h<i>.…`
//! (the presets' naming; a plan file that names its layers so gets the same), cut where the
//! layer crosses a pipeline stage or chunk: each (virtual) stage recomputes its own part
//! from what it received, as Megatron recomputes per stage. A segment spanning stages would
//! put one stage's copies in another stage's backward job, where their inputs never arrive
//! (the interleaved schedule deadlocked so). In a segment,
//! a variable that a forward op outside it reads is a checkpoint and stays alive (the
//! layer's output, which the next layer reads); every other variable the segment produces
//! is recomputed.
//!
//! - `full`: every op of the layer with an output to recompute.
//! - `selective`: attention's core only — the scores `q·kᵀ`, their scaling and the softmax,
//!   recomputed from q, k (and v, which the product with the probabilities reads): Korthikanti
//!   et al.'s selective recomputation (we have no attention dropout), whose outputs take the
//!   a·s²·b elements per layer that grow with the sequence.
//!
//! The copies run just before the first backward op that reads one of the segment's
//! recomputed variables, write `<name>@RECOMPUTE` (Paddle's suffix), carry the forward ops'
//! dist attrs (so the partitioner inserts the same communication again: a row-parallel
//! matmul's all-reduce is recomputed too), and the backward ops read the copies. The
//! forward outputs then die at their last forward use: the memory model sees the saving,
//! the cost model the extra FLOPs, and the executor runs the copies like any op.

use super::backward::Backward;
use super::dist_program::DistProgram;
use crate::ir::{Op, OpId, OpRole, Program, ProgramError, VarId};
use crate::plan::Recompute;
use std::collections::HashMap;
use std::sync::Arc;

/// The outputs of attention's core (selective recomputation): the scores, their scaling,
/// the softmax and the product with V. The product is read by the layer's next op, so it
/// is a checkpoint: it stays, and the three before it are recomputed.
const ATTENTION_CORE: [&str; 4] = [
    ".attn.scores",
    ".attn.scores.scaled",
    ".attn.probs",
    ".attn.ctx",
];

/// The layer (`h<i>`) an op belongs to, from its first output's name.
fn layer_of(program: &Program, op: &Op) -> Option<String> {
    program.layer_of(op).map(|l| format!("h{l}"))
}

/// A segment's key: its layer, and the stage mesh and chunk its ops run on.
type SegmentKey = (String, crate::dist::MeshId, usize);

/// The forward ops of each segment under `mode`, in program order. `attrs` are the ops'
/// dist attrs (their stage and chunk).
fn segments(
    program: &Program,
    attrs: &[crate::dist::OperatorDistAttr],
    mode: Recompute,
) -> Vec<Vec<usize>> {
    let mut order: Vec<SegmentKey> = Vec::new();
    let mut ops: HashMap<SegmentKey, Vec<usize>> = HashMap::new();
    for (i, op) in program.ops().iter().enumerate() {
        if op.role != OpRole::Forward {
            continue;
        }
        let Some(layer) = layer_of(program, op) else {
            continue;
        };
        let keep = match mode {
            Recompute::Off => false,
            Recompute::Full => true,
            Recompute::Selective => op.all_outputs().next().is_some_and(|v| {
                let name = &program.var(v).name;
                ATTENTION_CORE.iter().any(|s| name.ends_with(s))
            }),
        };
        let layer = match attrs.get(i) {
            Some(a) => (layer, a.mesh, a.chunk_id),
            None => (layer, crate::dist::MeshId::JOB, 0),
        };
        if keep {
            if !ops.contains_key(&layer) {
                order.push(layer.clone());
            }
            ops.entry(layer).or_default().push(i);
        }
    }
    order.into_iter().filter_map(|l| ops.remove(&l)).collect()
}

/// What recomputation adds: per segment, where its copies go (the index of the first
/// backward op reading one of its variables) and which forward ops it copies; each
/// recomputed variable's copy.
struct Copies {
    /// Per segment: where its copies go, the forward ops copied, and the copy of each of
    /// their outputs (which the copies read and write among themselves).
    inserts: Vec<(usize, Vec<usize>, HashMap<VarId, VarId>)>,
    /// The copy of each recomputed variable (not a checkpoint), which backward ops read.
    /// A checkpoint's copy is read only inside its segment: another segment's backward
    /// may run before that copy exists.
    renamed: HashMap<VarId, VarId>,
}

/// Plans the copies of `mode`'s segments, declaring each copy in `full`'s program (with
/// its original's dist attr).
fn plan_copies(full: &mut DistProgram, mode: Recompute) -> Result<Copies, ProgramError> {
    let program = full.program.clone();
    let mut copies = Copies {
        inserts: Vec::new(),
        renamed: HashMap::new(),
    };
    for seg in segments(&program, &full.ops, mode) {
        let inside = |i: usize| seg.contains(&i);
        let checkpoint = |v: VarId| {
            program.ops().iter().enumerate().any(|(j, o)| {
                !inside(j)
                    && matches!(o.role, OpRole::Forward | OpRole::Loss)
                    && o.all_inputs().any(|x| x == v)
            })
        };
        let recomputed: Vec<VarId> = seg
            .iter()
            .flat_map(|&i| program.ops()[i].all_outputs())
            .filter(|&v| !checkpoint(v))
            .collect();
        let Some(at) = program.ops().iter().position(|o| {
            o.role == OpRole::Backward && o.all_inputs().any(|v| recomputed.contains(&v))
        }) else {
            continue;
        };
        let ops: Vec<usize> = seg
            .iter()
            .copied()
            .filter(|&i| {
                program.ops()[i]
                    .all_outputs()
                    .any(|v| recomputed.contains(&v))
            })
            .collect();
        let mut own = HashMap::new();
        for v in ops.iter().flat_map(|&i| program.ops()[i].all_outputs()) {
            if own.contains_key(&v) {
                continue;
            }
            let var = program.var(v);
            let name = format!("{}@RECOMPUTE", var.name);
            let copy = full.program.declare(&name, var.ty.clone(), var.kind)?;
            full.tensors.push(full.tensors[v.index()].clone());
            own.insert(v, copy);
            if recomputed.contains(&v) {
                copies.renamed.insert(v, copy);
            }
        }
        copies.inserts.push((at, ops, own));
    }
    Ok(copies)
}

/// `op` reading (and, for a copy, writing) the recomputed variables.
fn renamed(op: &Op, renamed: &HashMap<VarId, VarId>, outputs_too: bool) -> Op {
    let mut o = op.clone();
    let slots = o
        .inputs
        .iter_mut()
        .chain(
            o.outputs
                .iter_mut()
                .take(if outputs_too { usize::MAX } else { 0 }),
        );
    for v in slots.flatten() {
        if let Some(&r) = renamed.get(v) {
            *v = r;
        }
    }
    o
}

/// Applies `mode` to `full` (forward + backward with dist attrs, before the optimizer)
/// and returns `backward` with its program and grad-op map updated to match.
pub fn apply_recompute(
    full: &mut DistProgram,
    mut backward: Backward,
    mode: Recompute,
) -> Result<Backward, ProgramError> {
    if mode == Recompute::Off {
        return Ok(backward);
    }
    let copies = plan_copies(full, mode)?;
    let program = &full.program;
    let n_ops = program.ops().len();
    let mut out = Program::with_vars(program.vars().to_vec());
    let mut op_attrs = Vec::with_capacity(n_ops);
    let mut new_index = vec![0usize; n_ops];
    for (i, op) in program.ops().iter().enumerate() {
        for (_, ops, own) in copies.inserts.iter().filter(|(at, _, _)| *at == i) {
            for &j in ops {
                let mut copy = renamed(&program.ops()[j], own, true);
                copy.role = OpRole::Backward;
                out.push_op(copy);
                op_attrs.push(full.ops[j].clone());
            }
        }
        new_index[i] = out.ops().len();
        if op.role == OpRole::Backward && op.all_inputs().any(|v| copies.renamed.contains_key(&v)) {
            out.push_op(renamed(op, &copies.renamed, false));
        } else {
            out.push_shared(Arc::clone(op));
        }
        op_attrs.push(full.ops[i].clone());
    }
    full.program = out;
    full.ops = op_attrs;
    let moved = |o: &OpId| OpId(new_index[o.index()] as u32);
    backward.forward_of = backward
        .forward_of
        .iter()
        .map(|(g, f)| (moved(g), moved(f)))
        .collect();
    if let Some(&first) = new_index.get(backward.first_backward_op) {
        backward.first_backward_op = first;
    }
    backward.program = full.program.clone();
    Ok(backward)
}
