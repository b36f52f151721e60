//! One collective with real values: every group member's input block and output block from
//! the executor (the first step from the seeded values), and for an all-reduce the ring
//! algorithm step by step (reduce-scatter, then all-gather) on those very numbers.

use super::*;
use crate::ir::OpClass;

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
    /// Op `op` of the selected rank's program with real values.
    pub(crate) fn compute_values(&mut self, op: usize) -> Result<CollectiveView, SessionError> {
        self.ensure_partitioned(None);
        self.collective_view(op)
    }

    /// The inserted op's label as the rank lens lists it (else its type).
    fn op_label(&self, op: usize, o: &crate::ir::Op) -> String {
        self.inserted_ops()
            .into_iter()
            .find(|i| i.op == op)
            .map_or_else(|| o.ty.to_string(), |i| i.label)
    }

    fn collective_view(&self, op: usize) -> Result<CollectiveView, SessionError> {
        let p = self.pipeline.as_ref().ok_or(SessionError::PlanHasError)?;
        if super::break_it::too_large(p) {
            return Err(SessionError::TooLarge);
        }
        let rank = self.rank_program().ok_or(SessionError::RankNotBuilt)?;
        let o = rank.program.ops().get(op).ok_or(SessionError::NoSuchOp {
            rank: rank.rank,
            op,
        })?;
        if o.ty.class() != OpClass::Collective {
            return Err(SessionError::NotCollective { op, ty: o.ty });
        }
        if matches!(o.ty, crate::ir::OpType::Send | crate::ir::OpType::Recv) {
            return p2p_view(p, rank, op, self.op_label(op, o));
        }
        let group: Vec<u32> = o
            .attr_ints("group")
            .map(|g| g.iter().map(|&r| r as u32).collect())
            .unwrap_or_else(|| vec![rank.rank]);
        let key = super::break_it::key_of(&rank.program, op).ok_or(SessionError::NoOpKey)?;
        let ops: Vec<(u32, usize)> = group
            .iter()
            .filter_map(|&g| {
                let r = p.partitioned.ranks.iter().find(|r| r.rank == g)?;
                Some((g, super::break_it::locate(&r.program, &key)?))
            })
            .collect();
        let opts = RunOptions::default();
        let values = crate::exec::values::values_around(p, &ops, &opts)
            .map_err(|e| SessionError::Values(e.to_string()))?;
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
        let label = self.op_label(op, o);
        Ok(CollectiveView {
            op,
            label,
            group,
            blocks,
            ring,
            pair: false,
            shrunk: Vec::new(),
        })
    }
}

/// A send or recv between pipeline stages with its values: the sender's block (what it
/// sent) and the receiver's (what arrived), from micro-batch 0 of the executor's first
/// step.
fn p2p_view(
    p: &Passes,
    rank: &crate::passes::partition::RankProgram,
    op: usize,
    label: String,
) -> Result<CollectiveView, SessionError> {
    if !p.is_fully_partitioned() {
        return Err(SessionError::NotPartitioned);
    }
    let (sender, receiver) = p2p_pair(p, rank, op)?;
    let values = crate::exec::run_pipe::first_micro_batch_values(
        p,
        &[sender, receiver],
        &RunOptions::default(),
    )
    .map_err(|e| SessionError::Values(e.to_string()))?;
    let [Some(a), Some(b)] = [
        values.first().cloned().flatten(),
        values.get(1).cloned().flatten(),
    ] else {
        return Err(SessionError::NoP2pValue);
    };
    Ok(CollectiveView {
        op,
        label,
        group: vec![sender.0, receiver.0],
        blocks: vec![
            Block {
                rank: sender.0,
                in_shape: a.shape.clone(),
                input: a.to_f64(),
                out_shape: Vec::new(),
                output: Vec::new(),
            },
            Block {
                rank: receiver.0,
                in_shape: Vec::new(),
                input: Vec::new(),
                out_shape: b.shape.clone(),
                output: b.to_f64(),
            },
        ],
        ring: Vec::new(),
        pair: true,
        shrunk: Vec::new(),
    })
}

/// A variable of one rank's program.
type RankVar = (u32, crate::ir::VarId);

/// The send and recv that op `op` of `rank` is one end of: the sender's rank and the
/// variable it sends, the receiver's rank and the variable it receives into. The pair
/// shares a ring id; the k-th send on a ring meets the k-th recv on it.
fn p2p_pair(
    p: &Passes,
    rank: &crate::passes::partition::RankProgram,
    op: usize,
) -> Result<(RankVar, RankVar), SessionError> {
    use crate::ir::OpType;
    let o = &rank.program.ops()[op];
    let ring = o.attr_int("ring_id", -1);
    let peer =
        u32::try_from(o.attr_int("peer", -1)).map_err(|_| SessionError::NoPeer { op, ty: o.ty })?;
    let on_ring = |program: &crate::ir::Program, ty: OpType| -> Vec<usize> {
        program
            .ops()
            .iter()
            .enumerate()
            .filter(|(_, x)| x.ty == ty && x.attr_int("ring_id", -1) == ring)
            .map(|(i, _)| i)
            .collect()
    };
    let other = if o.ty == OpType::Send {
        OpType::Recv
    } else {
        OpType::Send
    };
    let nth = on_ring(&rank.program, o.ty)
        .iter()
        .position(|&i| i == op)
        .ok_or(SessionError::NotOnRing)?;
    let peer_rank = p
        .partitioned
        .ranks
        .iter()
        .find(|r| r.rank == peer)
        .ok_or(SessionError::PeerNotBuilt(peer))?;
    let peer_op = *on_ring(&peer_rank.program, other)
        .get(nth)
        .ok_or(SessionError::NoPeerOp {
            peer,
            ty: other,
            ring,
        })?;
    let ((s, s_op), (r, r_op)) = if o.ty == OpType::Send {
        ((rank, op), (peer_rank, peer_op))
    } else {
        ((peer_rank, peer_op), (rank, op))
    };
    let sent = s.program.ops()[s_op].input("X").first().copied();
    let received = r.program.ops()[r_op].output("Out").first().copied();
    match (sent, received) {
        (Some(x), Some(y)) => Ok(((s.rank, x), (r.rank, y))),
        _ => Err(SessionError::P2pSlots),
    }
}
