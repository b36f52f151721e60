//! One collective with real values: every group member's input block and output block from
//! the executor (the first step from the seeded values), and for an all-reduce the ring
//! algorithm step by step (reduce-scatter, then all-gather) on those very numbers.

use super::*;
use crate::ir::OpClass;

/// A collective's values across its group.
#[derive(Clone, Debug, PartialEq)]
pub struct CollectiveView {
    /// The op's index in the selected rank's program, and its text.
    pub op: usize,
    pub label: String,
    pub group: Vec<u32>,
    /// Per group member (group order): rank, input block, output block.
    pub blocks: Vec<Block>,
    /// For an all-reduce: the ring's states, the first before any step.
    pub ring: Vec<RingStep>,
}

/// One rank's values around the op.
#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    pub rank: u32,
    pub in_shape: Vec<usize>,
    pub input: Vec<f64>,
    pub out_shape: Vec<usize>,
    pub output: Vec<f64>,
}

/// The ring after one step: what each member holds of each chunk.
#[derive(Clone, Debug, PartialEq)]
pub struct RingStep {
    /// "start", "reduce-scatter k/N-1", "all-gather k/N-1".
    pub title: String,
    /// (from, to, chunk) sent in this step, by group position.
    pub sends: Vec<(usize, usize, usize)>,
    /// `chunks[member][chunk]`: the member's copy of that chunk's elements.
    pub chunks: Vec<Vec<Vec<f64>>>,
}

/// The ring all-reduce (sum) of `inputs` (one flat vector per group member, in group order):
/// N − 1 reduce-scatter steps in which member i sends chunk (i − s) mod N to member i + 1,
/// which adds it, then N − 1 all-gather steps forwarding the finished chunks.
pub fn ring_all_reduce(inputs: &[Vec<f64>]) -> Vec<RingStep> {
    let n = inputs.len();
    let len = inputs.first().map_or(0, Vec::len);
    if n < 2 || inputs.iter().any(|v| v.len() != len) {
        return Vec::new();
    }
    let bounds = |c: usize| (c * len / n, (c + 1) * len / n);
    let mut state: Vec<Vec<Vec<f64>>> = inputs
        .iter()
        .map(|v| {
            (0..n)
                .map(|c| v[bounds(c).0..bounds(c).1].to_vec())
                .collect()
        })
        .collect();
    let mut steps = vec![RingStep {
        title: "start: each rank holds its own input".into(),
        sends: Vec::new(),
        chunks: state.clone(),
    }];
    for phase in 0..2 {
        for s in 0..n - 1 {
            let sends: Vec<(usize, usize, usize)> = (0..n)
                .map(|i| {
                    let chunk = if phase == 0 {
                        (i + n - s) % n
                    } else {
                        (i + 1 + n - s) % n
                    };
                    (i, (i + 1) % n, chunk)
                })
                .collect();
            let sent: Vec<Vec<f64>> = sends.iter().map(|&(i, _, c)| state[i][c].clone()).collect();
            for (&(_, to, c), data) in sends.iter().zip(sent) {
                let slot = &mut state[to][c];
                if phase == 0 {
                    slot.iter_mut().zip(data).for_each(|(a, b)| *a += b);
                } else {
                    *slot = data;
                }
            }
            let name = if phase == 0 {
                "reduce-scatter"
            } else {
                "all-gather"
            };
            steps.push(RingStep {
                title: format!("{name} step {}/{}", s + 1, n - 1),
                sends,
                chunks: state.clone(),
            });
        }
    }
    steps
}

impl Session {
    /// Shows op `op` of the selected rank's program with real values (`None` hides it).
    pub(super) fn show_values(&mut self, op: Option<usize>) {
        self.values = None;
        let Some(op) = op else {
            return;
        };
        self.ensure_partitioned(None);
        self.values = Some(self.collective_view(op));
    }

    fn collective_view(&self, op: usize) -> Result<CollectiveView, String> {
        let p = self.pipeline.as_ref().ok_or("the plan has an error")?;
        if let Some(why) = super::break_it::too_large(p) {
            return Err(why);
        }
        let rank = self
            .rank_program()
            .ok_or("the selected rank is not built")?;
        let o = rank
            .program
            .ops()
            .get(op)
            .ok_or(format!("rank {} has no op {op}", rank.rank))?;
        if o.ty.class() != OpClass::Collective {
            return Err(format!("op {op} ({}) is not a collective", o.ty));
        }
        let group: Vec<u32> = o
            .attr_ints("group")
            .map(|g| g.iter().map(|&r| r as u32).collect())
            .unwrap_or_else(|| vec![rank.rank]);
        let key = super::break_it::key_of(&rank.program, op).ok_or("no such op")?;
        let ops: Vec<(u32, usize)> = group
            .iter()
            .filter_map(|&g| {
                let r = p.partitioned.ranks.iter().find(|r| r.rank == g)?;
                Some((g, super::break_it::locate(&r.program, &key)?))
            })
            .collect();
        let opts = RunOptions::default();
        let values = crate::exec::run::values_around(p, &ops, &opts).map_err(|e| e.to_string())?;
        let blocks: Vec<Block> = values
            .into_iter()
            .map(|(rank, a, b)| Block {
                rank,
                in_shape: a.shape.clone(),
                input: a.to_f64(),
                out_shape: b.shape.clone(),
                output: b.to_f64(),
            })
            .collect();
        let is_sum = o.attr_str("reduce_type").unwrap_or("SUM") == "SUM";
        let ring = if o.ty == crate::ir::OpType::AllReduce && is_sum {
            ring_all_reduce(&blocks.iter().map(|b| b.input.clone()).collect::<Vec<_>>())
        } else {
            Vec::new()
        };
        let label = self
            .inserted_ops()
            .into_iter()
            .find(|i| i.op == op)
            .map_or_else(|| o.ty.to_string(), |i| i.label);
        Ok(CollectiveView {
            op,
            label,
            group,
            blocks,
            ring,
        })
    }
}
