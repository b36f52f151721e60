//! A rank's program cut into a pipeline schedule's jobs: per model chunk, its forward ops,
//! its backward ops, and the backward split into input-gradient (B) and weight-gradient
//! (W) parts for the zero-bubble schedule; then the optimizer job.
//!
//! - Forward: ops of role forward or loss (with the recvs that feed them and the sends of
//!   what they produce).
//! - Backward: ops of role backward, except data-parallel gradient synchronisation and
//!   ZeRO's reduce-scatters (and gradient buckets): those run once, in the optimizer job,
//!   on the gradients accumulated over every micro-batch (Megatron's and Paddle's gradient
//!   merge: one all-reduce per step, not per micro-batch).
//! - B/W: an op whose outputs are all parameter gradients is W; one whose outputs are all
//!   other gradients is B; an op with both (a matmul's grad: dX and dW) is run twice, once
//!   with only its input-gradient outputs (in B) and once with only its weight-gradient
//!   outputs (in W). The two copies are appended to the job program; the rank program is
//!   unchanged.

use crate::ir::{OpRole, OpType, Program, Purpose, VarId};
use crate::passes::partition::RankProgram;
use std::collections::HashSet;
use std::sync::Arc;

/// Op indices of one job, in program order.
pub type OpList = Arc<Vec<usize>>;

/// A rank's jobs.
#[derive(Clone, Debug)]
pub struct RankJobs {
    /// The rank program plus the B and W copies of split ops.
    pub program: Program,
    /// Per chunk.
    pub forward: Vec<OpList>,
    pub backward: Vec<OpList>,
    pub backward_b: Vec<OpList>,
    pub backward_w: Vec<OpList>,
    pub optimizer: OpList,
    /// Variables each micro-batch has its own copy of: data inputs, and everything forward
    /// and backward jobs write.
    pub per_micro_batch: Vec<VarId>,
    /// Gradients summed over micro-batches (written by backward jobs, read by the
    /// optimizer job).
    pub accumulated: Vec<VarId>,
    /// For each appended B or W copy (op `rank_ops + k`), the op it was copied from.
    pub copied_from: Vec<usize>,
}

/// The variables each micro-batch has its own copy of, and the gradients accumulated over
/// micro-batches, both sorted.
fn variables(
    program: &Program,
    forward: &[Vec<usize>],
    backward: &[Vec<usize>],
    optimizer: &[usize],
) -> (Vec<VarId>, Vec<VarId>) {
    // Dense marks by variable index (a program has a few thousand variables; hashing them
    // was a fifth of the auto-planner's time).
    let n = program.vars().len();
    let mark = |ops: &mut dyn Iterator<Item = &usize>, outputs: bool| -> Vec<bool> {
        let mut marks = vec![false; n];
        for &i in ops {
            let op = &program.ops()[i];
            let vars: Box<dyn Iterator<Item = VarId>> = if outputs {
                Box::new(op.all_outputs())
            } else {
                Box::new(op.all_inputs())
            };
            for v in vars {
                if let Some(m) = marks.get_mut(v.index()) {
                    *m = true;
                }
            }
        }
        marks
    };
    let fwd_written = mark(&mut forward.iter().flatten(), true);
    let bwd_written = mark(&mut backward.iter().flatten(), true);
    let opt_read = mark(&mut optimizer.iter(), false);
    let ids = (0..n as u32).map(VarId);
    let per_micro_batch: Vec<VarId> = ids
        .clone()
        .filter(|v| {
            matches!(
                program.var(*v).kind,
                crate::ir::VarKind::Input | crate::ir::VarKind::Label
            ) || fwd_written[v.index()]
                || bwd_written[v.index()]
        })
        .collect();
    let accumulated: Vec<VarId> = ids
        .filter(|v| bwd_written[v.index()] && opt_read[v.index()])
        .collect();
    (per_micro_batch, accumulated)
}

/// Whether `op` waits for the optimizer job (runs once on accumulated gradients): gradient
/// buckets, and the data-parallel and ZeRO synchronisation of a parameter gradient (not
/// ZeRO stage 3's gathers of a parameter before its backward use).
fn deferred(op: &crate::ir::Op, is_weight: &dyn Fn(VarId) -> bool) -> bool {
    matches!(op.ty, OpType::CoalesceTensor | OpType::UncoalesceTensor)
        || (op.role == OpRole::Backward
            && matches!(
                op.purpose(),
                Some(Purpose::DataParallel | Purpose::Sharding)
            )
            && op.all_inputs().any(is_weight))
}

/// Cuts `r` into jobs over `chunks` chunks. `param_grads` are the serial program's
/// parameter gradients (what W computes).
pub fn cut(r: &RankProgram, param_grads: &HashSet<VarId>, chunks: usize) -> RankJobs {
    let chunks = chunks.max(1);
    let mut program = r.program.clone();
    // Dense marks by serial variable: looked up for every backward op's outputs.
    let mut grad_marks = vec![false; param_grads.iter().map(|g| g.index() + 1).max().unwrap_or(0)];
    for g in param_grads {
        grad_marks[g.index()] = true;
    }
    let is_weight = |v: VarId| {
        r.origin
            .get(v.index())
            .and_then(|o| grad_marks.get(o.index()))
            .is_some_and(|&m| m)
    };
    let mut forward = vec![Vec::new(); chunks];
    let mut backward = vec![Vec::new(); chunks];
    let mut b_ops = vec![Vec::new(); chunks];
    let mut w_ops = vec![Vec::new(); chunks];
    let mut optimizer = Vec::new();
    let mut copied_from = Vec::new();
    for (i, op) in r.program.ops().iter().enumerate() {
        let c = r
            .op_chunks
            .get(i)
            .map_or(0, |&c| c as usize)
            .min(chunks - 1);
        if op.role == OpRole::Optimize || deferred(op, &is_weight) {
            optimizer.push(i);
            continue;
        }
        if op.role != OpRole::Backward {
            forward[c].push(i);
            continue;
        }
        backward[c].push(i);
        let (outs, weights) = op
            .all_outputs()
            .fold((0, 0), |(n, w), v| (n + 1, w + usize::from(is_weight(v))));
        if weights == 0 || outs == 0 {
            b_ops[c].push(i);
        } else if weights == outs {
            w_ops[c].push(i);
        } else {
            let keep = |op: &crate::ir::Op, weight: bool| {
                let mut copy = op.clone();
                for slot in &mut copy.outputs {
                    slot.retain(|v| is_weight(*v) == weight);
                }
                copy
            };
            b_ops[c].push(program.ops().len());
            program.push_op(keep(op, false));
            w_ops[c].push(program.ops().len());
            program.push_op(keep(op, true));
            copied_from.extend([i, i]);
        }
    }
    let (per_micro_batch, accumulated) = variables(&program, &forward, &backward, &optimizer);
    let arc = |v: Vec<Vec<usize>>| v.into_iter().map(Arc::new).collect();
    RankJobs {
        program,
        forward: arc(forward),
        backward: arc(backward),
        backward_b: arc(b_ops),
        backward_w: arc(w_ops),
        optimizer: Arc::new(optimizer),
        per_micro_batch,
        accumulated,
        copied_from,
    }
}
