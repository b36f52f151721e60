//! A pipeline schedule in time: every stage runs its job list in order; a job starts when
//! its stage is free and what it needs has arrived. The result is each job's start and end,
//! the step time, and each stage's bubble (the time it waits).
//!
//! Dependencies, over virtual stages (chunk `c` of stage `s` is virtual stage `c·p + s`,
//! Megatron's interleaving): a forward needs the forward of the same micro-batch on the
//! virtual stage before it; a backward (or its input half, `backward_b`) needs the backward
//! on the virtual stage after it, and, on the last virtual stage, its own forward; a
//! `backward_w` needs its `backward_b`. Crossing from one physical stage to another costs
//! the send/recv time. `recv_forward` and `send_backward` jobs take no time of their own:
//! the transfer is the edge. Job times are per micro-batch for a whole stage; a chunk's job
//! takes 1/chunks of it.

use crate::passes::pipeline::schedule::{job_list, Job, JobKind, Schedule, ScheduleError};
use crate::passes::pipeline::schedule_check::{
    check_complete, check_order, family, needs, virtual_of, DepKey, OrderError,
};
use serde::{Deserialize, Serialize};

/// How long a stage's jobs take for one micro-batch (any consistent unit).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobTimes {
    pub forward: f64,
    /// A whole backward; a split one is `backward_b` + `backward_w`.
    pub backward: f64,
    /// The weight-gradient part of the backward (the rest is the input gradient).
    pub backward_w: f64,
    /// Moving an activation or its gradient to the next stage.
    pub send_recv: f64,
    pub optimizer: f64,
}

impl JobTimes {
    /// The classic teaching figures: forward 1, backward 2 (half of it the weight
    /// gradient), free transfers, no optimizer time.
    pub fn unit() -> JobTimes {
        JobTimes {
            forward: 1.0,
            backward: 2.0,
            backward_w: 1.0,
            send_recv: 0.0,
            optimizer: 0.0,
        }
    }

    fn of(&self, kind: JobKind) -> f64 {
        match kind {
            JobKind::Forward => self.forward,
            JobKind::Backward => self.backward,
            JobKind::BackwardB => self.backward - self.backward_w,
            JobKind::BackwardW => self.backward_w,
            JobKind::Optimizer => self.optimizer,
            JobKind::RecvForward | JobKind::SendBackward => 0.0,
        }
    }
}

/// One job placed in time.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Placed {
    pub job: Job,
    pub start: f64,
    pub end: f64,
}

/// A whole step of the pipeline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    /// Per stage, its jobs in order.
    pub stages: Vec<Vec<Placed>>,
    /// When the last stage finishes.
    pub step: f64,
    /// Per stage, the fraction of the step it is not running a job.
    pub bubble: Vec<f64>,
}

impl Timeline {
    /// The largest stage bubble.
    pub fn max_bubble(&self) -> f64 {
        self.bubble.iter().copied().fold(0.0, f64::max)
    }
}

/// Why a schedule cannot be laid out in time.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PipelineTimeError {
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    #[error(transparent)]
    Order(#[from] OrderError),
    #[error("{0} stages but job times for {1}")]
    Times(usize, usize),
    /// The lay-out stalled on an order its check passes (the two replay the same
    /// dependencies: a bug, reported rather than looped on).
    #[error("the pipeline's lay-out stalled on an order that checks")]
    Stalled,
}

/// The schedule, its order and the micro-batches are the options'.
impl crate::plan::Located for PipelineTimeError {
    fn subject(&self) -> Option<crate::plan::PlanSubject> {
        Some(crate::plan::PlanSubject::Options)
    }
}

/// The fraction of `step` a stage running `jobs` is idle.
fn bubble(jobs: &[Placed], step: f64) -> f64 {
    let busy: f64 = jobs.iter().map(|p| p.end - p.start).sum();
    if step > 0.0 {
        1.0 - busy / step
    } else {
        0.0
    }
}

/// Lays `schedule` out in time for `stages` stages and `micro_batches` micro-batches, every
/// stage taking `times`.
pub fn pipeline_timeline(
    schedule: Schedule,
    stages: usize,
    micro_batches: usize,
    times: JobTimes,
) -> Result<Timeline, PipelineTimeError> {
    if stages == 0 {
        return Err(ScheduleError::Empty.into());
    }
    let lists: Vec<Vec<Job>> = (0..stages)
        .map(|s| job_list(schedule, stages, s, micro_batches))
        .collect::<Result<_, _>>()?;
    let chunks = schedule.chunks();
    lay_out(&lists, micro_batches, chunks, &vec![times; stages])
}

/// Lays job lists (one per stage, e.g. hand-written) out in time, stage `s` taking
/// `times[s]`. Each list must be complete (`schedule_check`); a deadlock stalls the
/// lay-out, and is then reported by the order's check, naming its cycle (run only then:
/// it replays the same dependencies, and pricing lays out thousands of orders).
pub fn lay_out(
    lists: &[Vec<Job>],
    micro_batches: usize,
    chunks: usize,
    times: &[JobTimes],
) -> Result<Timeline, PipelineTimeError> {
    let stages = lists.len();
    if times.len() != stages {
        return Err(PipelineTimeError::Times(stages, times.len()));
    }
    check_complete(lists, micro_batches, chunks)?;
    let virtual_stages = stages * chunks.max(1);
    let total: usize = lists.iter().map(Vec::len).sum();
    let mut done: rustc_hash::FxHashMap<DepKey, f64> =
        rustc_hash::FxHashMap::with_capacity_and_hasher(total, Default::default());
    let mut placed: Vec<Vec<Placed>> = vec![Vec::new(); stages];
    let mut free = vec![0.0f64; stages];
    let mut pc = vec![0usize; stages];
    while (0..stages).any(|s| pc[s] < lists[s].len()) {
        let before: usize = pc.iter().sum();
        for s in 0..stages {
            while let Some(job) = lists[s].get(pc[s]) {
                let v = virtual_of(job, s, stages);
                let m = job.micro_batch;
                // When what the job needs has arrived (None: not computed yet).
                let arrived = needs(job, v, s, stages, virtual_stages).iter().try_fold(
                    free[s],
                    |ready, (key, from)| {
                        let hop = if *from == s { 0.0 } else { times[s].send_recv };
                        done.get(key).map(|&t| ready.max(t + hop))
                    },
                );
                let Some(ready) = arrived else {
                    break;
                };
                let share = job.chunk.map_or(1.0, |_| chunks as f64);
                let end = ready + times[s].of(job.kind) / share;
                if let Some(f) = family(job.kind) {
                    done.insert((f, m, v), end);
                }
                placed[s].push(Placed {
                    job: *job,
                    start: ready,
                    end,
                });
                free[s] = end;
                pc[s] += 1;
            }
        }
        if pc.iter().sum::<usize>() == before {
            // Stalled: the order deadlocks (the check names the cycle).
            check_order(lists, micro_batches, chunks)?;
            return Err(PipelineTimeError::Stalled);
        }
    }
    let step = free.iter().copied().fold(0.0, f64::max);
    let bubble = placed.iter().map(|jobs| bubble(jobs, step)).collect();
    Ok(Timeline {
        stages: placed,
        step,
        bubble,
    })
}
