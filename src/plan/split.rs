//! Splitting a program's forward ops over pipeline stages: by transformer layer when its
//! ops are named so (the presets' `h<i>.…` outputs; the embedding stays on the first stage,
//! the final norm, head and loss on the last), else by op count.

use super::{StagePlacement, StageTarget};
use crate::ir::{OpId, OpRole, Program};

/// The layer (`h<i>`) op `op` belongs to.
fn layer_of(program: &Program, op: usize) -> Option<usize> {
    program.layer_of(&program.ops()[op])
}

/// The forward ops (up to and including the loss).
pub fn forward_ops(program: &Program) -> usize {
    program
        .ops()
        .iter()
        .rposition(|o| o.role == OpRole::Loss)
        .map_or(program.ops().len(), |i| i + 1)
}

/// `stage` statements putting `per_stage[k]` layers on virtual stage `k` (the split
/// `--pp-split` asks for). Errors name what does not fit.
/// Why a program cannot be split into pipeline stages as asked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SplitError {
    #[error("the program has no layers (ops whose outputs are named h<i>.…) to split")]
    NoLayers,
    #[error(
        "the split {per_stage:?} places {asked} layers, but the program has {count}, and \
         every stage needs at least one"
    )]
    Layers {
        per_stage: Vec<usize>,
        asked: usize,
        count: usize,
    },
    #[error("{ops} forward ops cannot fill {stages} pipeline stages")]
    TooFewOps { ops: usize, stages: usize },
}

pub fn split_layers(
    program: &Program,
    per_stage: &[usize],
) -> Result<Vec<StagePlacement>, SplitError> {
    let n = forward_ops(program);
    let layers: Vec<Option<usize>> = (0..n).map(|i| layer_of(program, i)).collect();
    let count = layers.iter().flatten().max().map_or(0, |&l| l + 1);
    let asked: usize = per_stage.iter().sum();
    if count == 0 {
        return Err(SplitError::NoLayers);
    }
    if asked != count || per_stage.contains(&0) {
        return Err(SplitError::Layers {
            per_stage: per_stage.to_vec(),
            asked,
            count,
        });
    }
    // The first op of each stage after the first: its first layer's first op.
    let mut starts = Vec::with_capacity(per_stage.len());
    let mut first_layer = 0;
    for &k in per_stage {
        let start = layers
            .iter()
            .position(|l| *l == Some(first_layer))
            .unwrap_or(n);
        starts.push(start);
        first_layer += k;
    }
    Ok(ranges(&starts, n))
}

/// `stage` statements for ops `starts[k]..starts[k+1]` on stage `k`, for `k ≥ 1` (the ops
/// before stage 1's first are on stage 0 by default).
pub fn ranges(starts: &[usize], n: usize) -> Vec<StagePlacement> {
    let mut out = Vec::new();
    for (k, &start) in starts.iter().enumerate().skip(1) {
        let end = starts.get(k + 1).copied().unwrap_or(n);
        if start < end {
            out.push(StagePlacement {
                stage: k,
                target: StageTarget::Ops {
                    first: OpId(start as u32),
                    last: OpId(end as u32 - 1),
                },
            });
        }
    }
    out
}

/// An even split over `stages` virtual stages: layers as evenly as they go (earlier stages
/// take the remainder: the last one also holds the head and the loss), or, without layers,
/// forward ops by count (later stages take the remainder: the MLP on two stages splits
/// after its first activation, as in Paddle's pipeline example). Errors when there are
/// fewer forward ops than stages; with fewer layers than stages, ops are split by count.
pub fn split_evenly(program: &Program, stages: usize) -> Result<Vec<StagePlacement>, SplitError> {
    let n = forward_ops(program);
    let count = (0..n)
        .filter_map(|i| layer_of(program, i))
        .max()
        .map_or(0, |l| l + 1);
    let share = |total: usize, early: bool| -> Vec<usize> {
        let extra = total % stages;
        (0..stages)
            .map(|k| {
                let gets = if early {
                    k < extra
                } else {
                    k >= stages - extra
                };
                total / stages + usize::from(gets)
            })
            .collect()
    };
    if count >= stages {
        return split_layers(program, &share(count, true));
    }
    if n < stages {
        return Err(SplitError::TooFewOps { ops: n, stages });
    }
    let mut starts = Vec::with_capacity(stages);
    let mut at = 0;
    for k in share(n, false) {
        starts.push(at);
        at += k;
    }
    Ok(ranges(&starts, n))
}
