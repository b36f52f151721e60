//! The lower bound on a family's full-depth step time, from a planning at one block per
//! stage: what lets the screen drop a family before planning it deeper.

use crate::cost::estimate::Estimate;
use crate::ir::{OpRole, Purpose};
use crate::passes::driver::Passes;
use std::sync::Arc;

/// A lower bound of the step time at `layers_per_stage` blocks per stage, from a plan
/// with one block per stage. Every rank runs its ops one after another, so the step is at
/// least any rank's busy time; a block adds the same ops each time, so the busy time at
/// full depth is the one-block busy time plus a block's share per further block. Only ops
/// surely repeated per micro-batch (forward and backward compute and their tensor-parallel
/// collectives) are multiplied by the micro-batch count; the others count once, and the
/// pipeline's sends not at all, which can only lower the bound.
pub fn lower_bound(p: &Passes, e: &Estimate, layers_per_stage: usize) -> f64 {
    BoundWeights::of(p).bound(&e.step, e.pipeline.is_some(), layers_per_stage)
}

/// Per rank program, per op: (counted, repeated per micro-batch, in a block). Ranks with the
/// first rank's dataflow share its flags.
pub(super) struct BoundWeights {
    flags: Vec<Arc<Vec<(bool, bool, bool)>>>,
    micro_batches: f64,
}

impl BoundWeights {
    pub(super) fn of(p: &Passes) -> BoundWeights {
        let flags = crate::cost::simulate::shared_per_dataflow(&p.partitioned.ranks, |rank| {
            rank.program
                .ops()
                .iter()
                .map(|op| {
                    let purpose = op.purpose();
                    let repeated =
                        matches!(op.role, OpRole::Forward | OpRole::Backward | OpRole::Loss)
                            && matches!(purpose, None | Some(Purpose::TensorParallel));
                    (
                        purpose != Some(Purpose::Pipeline),
                        repeated,
                        in_block(rank, op),
                    )
                })
                .collect()
        });
        BoundWeights {
            flags,
            micro_batches: p.micro_batches() as f64,
        }
    }

    pub(super) fn bound(
        &self,
        step: &crate::cost::simulate::StepTime,
        pipelined: bool,
        layers_per_stage: usize,
    ) -> f64 {
        let m = if pipelined { self.micro_batches } else { 1.0 };
        let extra = layers_per_stage.saturating_sub(1) as f64;
        let mut bound: f64 = 0.0;
        for (flags, time) in self.flags.iter().zip(&step.ranks) {
            let (mut busy, mut block) = (0.0, 0.0);
            for (&(counted, repeated, in_block), &s) in flags.iter().zip(&time.op_s) {
                if !counted {
                    continue;
                }
                let s = if repeated { s * m } else { s };
                busy += s;
                if in_block {
                    block += s;
                }
            }
            bound = bound.max(busy + extra * block);
        }
        bound
    }
}

/// Whether an op belongs to a transformer block (its first output is named `h<i>.…`).
fn in_block(rank: &crate::passes::partition::RankProgram, op: &crate::ir::Op) -> bool {
    rank.program.layer_of(op).is_some()
}
