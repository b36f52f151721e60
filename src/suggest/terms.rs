//! A priced plan's peak memory and where its step time goes on the busiest rank (the
//! table's terms: compute, communication by purpose, bubble).

use super::evaluate::{Busiest, Terms};
use crate::cost::estimate::Estimate;
use crate::cost::pipeline_cost::StageJobs;
use crate::ir::Purpose;
use crate::passes::driver::Passes;

/// The largest peak over the ranks (see [`crate::cost::estimate::peak_of`]).
pub fn peak_bytes(e: &Estimate) -> f64 {
    e.peak_bytes()
}

pub(super) use crate::cost::estimate::peak_of;

/// Where the step's time goes on the busiest rank (the one with the most compute and
/// communication): per-micro-batch ops counted once per micro-batch.
pub fn terms(p: &Passes, e: &Estimate) -> Terms {
    terms_with(p, e, &[])
}

/// [`terms`] with some ranks' jobs already cut (`stage_jobs` of `p`, which every order and
/// schedule of a planning shares); the other ranks are cut here.
pub(super) fn terms_with(p: &Passes, e: &Estimate, cut: &[StageJobs]) -> Terms {
    let mut best: Option<Busiest> = None;
    for (index, (rank, time)) in p.partitioned.ranks.iter().zip(&e.step.ranks).enumerate() {
        let mut compute = 0.0;
        let mut comm = [0.0; Purpose::ALL.len()];
        let jobs = cut.iter().find(|s| s.index == index).map(|s| &s.jobs);
        for (i, s) in op_times(p, e, rank, jobs, &time.op_s) {
            let op = &rank.program.ops()[i];
            match crate::cost::simulate::is_communication(&rank.program, op).then(|| op.purpose()) {
                Some(purpose) => {
                    let at = purpose
                        .and_then(|q| Purpose::ALL.iter().position(|&k| k == q))
                        .unwrap_or(0);
                    comm[at] += s;
                }
                None => compute += s,
            }
        }
        let busy = compute + comm.iter().sum::<f64>();
        if best.as_ref().is_none_or(|(b, _, _)| busy > *b) {
            let by_purpose = Purpose::ALL
                .iter()
                .zip(comm)
                .filter(|(_, s)| *s > 0.0)
                .map(|(&p, s)| (p, s))
                .collect();
            best = Some((busy, compute, by_purpose));
        }
    }
    let (busy, compute_s, comm_s) = best.unwrap_or((0.0, 0.0, Vec::new()));
    let step_s = e.step_s();
    Terms {
        step_s,
        compute_s,
        comm_s,
        bubble_s: (step_s - busy).max(0.0),
        peak_bytes: peak_bytes(e),
    }
}

/// Each op of a rank with its time over the step: once without micro-batches; with them,
/// as the schedule runs it (`passes::pipeline::jobs::cut`): forward and backward jobs once per
/// micro-batch, the optimizer job once, a B or W half of a split op at half its time, and
/// the pipeline's sends and receives left out (they are the schedule's edges: their time
/// shows as bubble).
fn op_times(
    p: &Passes,
    e: &Estimate,
    rank: &crate::passes::partition::RankProgram,
    cut: Option<&crate::passes::pipeline::jobs::RankJobs>,
    op_s: &[f64],
) -> Vec<(usize, f64)> {
    if e.pipeline.is_none() {
        return op_s.iter().copied().enumerate().collect();
    }
    let owned;
    let jobs = match cut {
        Some(jobs) => jobs,
        None => {
            let grads: std::collections::HashSet<crate::ir::VarId> =
                p.backward.param_grads.iter().map(|&(_, g)| g).collect();
            owned = crate::passes::pipeline::jobs::cut(rank, &grads, p.stages.chunks);
            &owned
        }
    };
    let n = op_s.len();
    let m = p.micro_batches() as f64;
    let mut out = Vec::new();
    let mut add = |list: &[usize], times: f64| {
        for &i in list {
            let (op, s) = match i.checked_sub(n) {
                None => (i, op_s.get(i).copied().unwrap_or(0.0)),
                Some(k) => {
                    let o = jobs.copied_from.get(k).copied().unwrap_or(0);
                    (o, op_s.get(o).copied().unwrap_or(0.0) / 2.0)
                }
            };
            let ty = rank.program.ops().get(op).map(|o| o.ty);
            if !matches!(ty, Some(crate::ir::OpType::Send | crate::ir::OpType::Recv)) {
                out.push((op, s * times));
            }
        }
    };
    for list in jobs.forward.iter().chain(&jobs.backward) {
        add(list, m);
    }
    add(&jobs.optimizer, 1.0);
    out
}
