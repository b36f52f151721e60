//! Pipeline schedules: the jobs each pipeline stage runs in one step, in order, as Paddle
//! 3.3.1's scheduler passes (`pipeline_scheduler_pass`, PIR mode) list them. A job is a
//! kind, a micro-batch and, under VPP, a model chunk.
//!
//! - `FThenB`: every forward, then every backward (GPipe).
//! - `1F1B`: `pp − stage` warm-up forwards (each after its `recv_forward`), then steady
//!   pairs `backward, recv_forward, send_backward, forward`, then the cool-down backwards
//!   (each before its `send_backward`).
//! - `VPP` (interleaved 1F1B, `chunks` model chunks per stage): micro-step `s` runs chunk
//!   `(s mod pp·chunks) / pp` (reversed for backward); `(pp − stage − 1)·2 + (chunks − 1)·pp`
//!   warm-up steps, plus one (capped at all of them), then the 1F1B steady and cool-down
//!   pattern with the chunk on every job.
//! - `ZB-H1` (zero bubble, Qi et al. 2023): backwards split into `backward_b` (the input
//!   gradient) and `backward_w` (the weight gradient) where that fills the bubble — Paddle
//!   splits only the first `stage` micro-batches' and the last one's on a later stage, and
//!   runs their `backward_w` at the end.
//!
//! Checked job for job against `tests/oracle/paddle/schedules.json`.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A pipeline schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Schedule {
    FThenB,
    OneFOneB,
    /// Interleaved 1F1B with this many model chunks per stage.
    Vpp {
        chunks: usize,
    },
    ZbH1,
    /// The zero-bubble paper's own H1 order (Qi et al. 2023): every backward split, each
    /// stage's weight halves filling its idle time, at most `p − stage` micro-batches in
    /// flight (1F1B's memory). Its bubble is the paper's (p−1)(T_F + T_B − T_W); Paddle's
    /// order (`ZbH1`) splits only some backwards and runs their weight halves last, which
    /// leaves more idle time on deep pipelines.
    ZbH1Paper,
}

impl Schedule {
    /// Model chunks per stage (1 unless interleaved).
    pub fn chunks(self) -> usize {
        match self {
            Schedule::Vpp { chunks } => chunks,
            Schedule::FThenB | Schedule::OneFOneB | Schedule::ZbH1 | Schedule::ZbH1Paper => 1,
        }
    }

    /// The schedule a plan's options name, with `chunks` model chunks per stage for vpp.
    pub fn of(kind: crate::plan::ScheduleKind, chunks: usize) -> Schedule {
        match kind {
            crate::plan::ScheduleKind::FThenB => Schedule::FThenB,
            crate::plan::ScheduleKind::OneFOneB => Schedule::OneFOneB,
            crate::plan::ScheduleKind::Vpp => Schedule::Vpp { chunks },
            crate::plan::ScheduleKind::ZbH1 => Schedule::ZbH1,
            crate::plan::ScheduleKind::ZbH1Paper => Schedule::ZbH1Paper,
        }
    }

    /// Paddle's name: `fthenb`, `1f1b`, `vpp`, `zbh1`.
    pub fn name(self) -> &'static str {
        match self {
            Schedule::FThenB => "fthenb",
            Schedule::OneFOneB => "1f1b",
            Schedule::Vpp { .. } => "vpp",
            Schedule::ZbH1 => "zbh1",
            Schedule::ZbH1Paper => "zbh1_paper",
        }
    }
}

/// What a job runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum JobKind {
    RecvForward,
    Forward,
    Backward,
    /// The input-gradient half of a backward (zero bubble).
    BackwardB,
    /// The weight-gradient half of a backward (zero bubble).
    BackwardW,
    SendBackward,
    Optimizer,
}

impl JobKind {
    /// Paddle's job type name.
    pub fn name(self) -> &'static str {
        match self {
            JobKind::RecvForward => "recv_forward",
            JobKind::Forward => "forward",
            JobKind::Backward => "backward",
            JobKind::BackwardB => "backward_b",
            JobKind::BackwardW => "backward_w",
            JobKind::SendBackward => "send_backward",
            JobKind::Optimizer => "optimizer",
        }
    }
}

/// One job of a stage's step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    pub kind: JobKind,
    pub micro_batch: usize,
    /// The model chunk under VPP.
    pub chunk: Option<usize>,
}

impl Job {
    fn new(kind: JobKind, micro_batch: usize, chunk: Option<usize>) -> Job {
        Job {
            kind,
            micro_batch,
            chunk,
        }
    }

    /// Paddle's job type: the kind, with the chunk appended under VPP (`forward1`).
    pub fn paddle_type(&self) -> String {
        match self.chunk {
            Some(c) => format!("{}{c}", self.kind.name()),
            None => self.kind.name().to_string(),
        }
    }
}

impl fmt::Display for Job {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.paddle_type(), self.micro_batch)
    }
}

/// Why a schedule cannot be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error(
        "{schedule} needs at least as many micro-batches as stages ({micro_batches} < {stages})"
    )]
    TooFewMicroBatches {
        schedule: &'static str,
        micro_batches: usize,
        stages: usize,
    },
    #[error("stage {stage} is not one of the {stages} stages")]
    NoSuchStage { stage: usize, stages: usize },
    #[error("a pipeline needs at least one stage, one micro-batch and one chunk")]
    Empty,
}

/// The jobs stage `stage` of `stages` runs in one step of `micro_batches` micro-batches.
pub fn job_list(
    schedule: Schedule,
    stages: usize,
    stage: usize,
    micro_batches: usize,
) -> Result<Vec<Job>, ScheduleError> {
    let chunks = schedule.chunks();
    if stages == 0 || micro_batches == 0 || chunks == 0 {
        return Err(ScheduleError::Empty);
    }
    if stage >= stages {
        return Err(ScheduleError::NoSuchStage { stage, stages });
    }
    if schedule != Schedule::FThenB && micro_batches < stages {
        return Err(ScheduleError::TooFewMicroBatches {
            schedule: schedule.name(),
            micro_batches,
            stages,
        });
    }
    let mut jobs = match schedule {
        Schedule::FThenB => fthenb(micro_batches),
        Schedule::OneFOneB => one_f_one_b(stages, stage, micro_batches),
        Schedule::Vpp { chunks } => vpp(stages, stage, micro_batches, chunks),
        Schedule::ZbH1 => zbh1(stages, stage, micro_batches),
        Schedule::ZbH1Paper => zbh1_paper(stages, micro_batches).swap_remove(stage),
    };
    jobs.push(Job::new(JobKind::Optimizer, 0, None));
    Ok(jobs)
}

fn fthenb(micro_batches: usize) -> Vec<Job> {
    (0..micro_batches)
        .map(|m| Job::new(JobKind::Forward, m, None))
        .chain((0..micro_batches).map(|m| Job::new(JobKind::Backward, m, None)))
        .collect()
}

/// The steady phase's order, Paddle's `jobs_in_stable_phase_in_pir`.
const STEADY: [JobKind; 4] = [
    JobKind::Backward,
    JobKind::RecvForward,
    JobKind::SendBackward,
    JobKind::Forward,
];

fn one_f_one_b(stages: usize, stage: usize, micro_batches: usize) -> Vec<Job> {
    let warmup = stages - stage;
    let mut jobs = Vec::new();
    for m in 0..warmup {
        jobs.push(Job::new(JobKind::RecvForward, m, None));
        jobs.push(Job::new(JobKind::Forward, m, None));
    }
    for k in 0..micro_batches - warmup {
        for kind in STEADY {
            let forward = matches!(kind, JobKind::Forward | JobKind::RecvForward);
            jobs.push(Job::new(kind, if forward { warmup + k } else { k }, None));
        }
    }
    for m in micro_batches - warmup..micro_batches {
        jobs.push(Job::new(JobKind::Backward, m, None));
        jobs.push(Job::new(JobKind::SendBackward, m, None));
    }
    jobs
}

fn vpp(stages: usize, stage: usize, micro_batches: usize, chunks: usize) -> Vec<Job> {
    let remainder = micro_batches % stages;
    let round = stages * chunks;
    // The chunk a micro-step runs (Paddle's `_get_virtual_pp_rank`).
    let chunk_of = |step: usize, forward: bool| {
        let v = step % round;
        let c = if step <= (micro_batches / stages) * round || remainder == 0 {
            v / stages
        } else {
            v / remainder
        };
        // Paddle indexes its counters with this; clamped so that an uneven micro-batch
        // count cannot name a chunk that does not exist.
        let c = c.min(chunks - 1);
        if forward {
            c
        } else {
            chunks - c - 1
        }
    };
    let total = micro_batches * chunks;
    let warmup = if micro_batches == stages {
        total
    } else {
        ((stages - stage - 1) * 2 + (chunks - 1) * stages).min(total)
    };
    let warmup = (warmup + 1).min(total);
    let (mut fwd_count, mut bwd_count) = (vec![0usize; chunks], vec![0usize; chunks]);
    let next = |counts: &mut Vec<usize>, c: usize| {
        counts[c] += 1;
        counts[c] - 1
    };
    let mut jobs = Vec::new();
    for step in 0..warmup {
        let c = chunk_of(step, true);
        let m = next(&mut fwd_count, c);
        jobs.push(Job::new(JobKind::RecvForward, m, Some(c)));
        jobs.push(Job::new(JobKind::Forward, m, Some(c)));
    }
    for step in 0..total - warmup {
        let fc = chunk_of(step + warmup, true);
        let fm = next(&mut fwd_count, fc);
        let bc = chunk_of(step, false);
        let bm = next(&mut bwd_count, bc);
        for kind in STEADY {
            let job = match kind {
                JobKind::Forward | JobKind::RecvForward => Job::new(kind, fm, Some(fc)),
                JobKind::Backward
                | JobKind::SendBackward
                | JobKind::BackwardB
                | JobKind::BackwardW
                | JobKind::Optimizer => Job::new(kind, bm, Some(bc)),
            };
            jobs.push(job);
        }
    }
    for step in total - warmup..total {
        let c = chunk_of(step, false);
        let m = next(&mut bwd_count, c);
        jobs.push(Job::new(JobKind::Backward, m, Some(c)));
        jobs.push(Job::new(JobKind::SendBackward, m, Some(c)));
    }
    jobs
}

fn zbh1(stages: usize, stage: usize, micro_batches: usize) -> Vec<Job> {
    let warmup = stages - stage;
    let mut jobs: Vec<Job> = (0..warmup)
        .map(|m| Job::new(JobKind::Forward, m, None))
        .collect();
    let (mut f, mut b) = (warmup, 0);
    for _ in 0..stage {
        jobs.push(Job::new(JobKind::BackwardB, b, None));
        jobs.push(Job::new(JobKind::Forward, f, None));
        (b, f) = (b + 1, f + 1);
    }
    for _ in 0..micro_batches - stages {
        jobs.push(Job::new(JobKind::Backward, b, None));
        jobs.push(Job::new(JobKind::Forward, f, None));
        (b, f) = (b + 1, f + 1);
    }
    for _ in 0..warmup - 1 {
        jobs.push(Job::new(JobKind::Backward, b, None));
        b += 1;
    }
    if stage > 0 {
        jobs.push(Job::new(JobKind::BackwardB, b, None));
        jobs.push(Job::new(JobKind::BackwardW, b, None));
    } else {
        jobs.push(Job::new(JobKind::Backward, b, None));
    }
    jobs.extend((0..stage).map(|m| Job::new(JobKind::BackwardW, m, None)));
    jobs
}

/// The paper's H1, built by running every stage in unit time steps (forward, input-grad
/// and weight-grad halves each one step, transfers free): a free stage runs the next input
/// gradient if it has arrived, else the next forward if it has arrived and fewer than
/// `p − stage` micro-batches are in flight, else a pending weight gradient. The order is
/// then fixed whatever the real job times are.
fn zbh1_paper(stages: usize, micro_batches: usize) -> Vec<Vec<Job>> {
    let (p, m) = (stages, micro_batches);
    // Per stage: when each micro-batch's forward and input gradient finished.
    let mut f_done = vec![vec![usize::MAX; m]; p];
    let mut b_done = vec![vec![usize::MAX; m]; p];
    let (mut nf, mut nb) = (vec![0usize; p], vec![0usize; p]);
    let mut w_queue: Vec<std::collections::VecDeque<usize>> = vec![Default::default(); p];
    let mut lists: Vec<Vec<Job>> = vec![Vec::new(); p];
    let mut t = 0usize;
    let total = 3 * m * p;
    while lists.iter().map(Vec::len).sum::<usize>() < total && t < 4 * total + 4 {
        for s in 0..p {
            let b_ready = nb[s] < m && {
                let k = nb[s];
                if s + 1 == p {
                    f_done[s][k] <= t
                } else {
                    b_done[s + 1][k] <= t
                }
            };
            let f_ready =
                nf[s] < m && nf[s] - nb[s] < p - s && (s == 0 || f_done[s - 1][nf[s]] <= t);
            let job = if b_ready {
                b_done[s][nb[s]] = t + 1;
                w_queue[s].push_back(nb[s]);
                nb[s] += 1;
                Job::new(JobKind::BackwardB, nb[s] - 1, None)
            } else if f_ready {
                f_done[s][nf[s]] = t + 1;
                nf[s] += 1;
                Job::new(JobKind::Forward, nf[s] - 1, None)
            } else if let Some(w) = w_queue[s].pop_front() {
                Job::new(JobKind::BackwardW, w, None)
            } else {
                continue;
            };
            lists[s].push(job);
        }
        t += 1;
    }
    lists
}
