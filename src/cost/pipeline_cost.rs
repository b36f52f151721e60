//! A pipelined plan's step in time: each stage's job durations from the cost model (the
//! simulated time of the ops of its forward, backward and weight-gradient jobs on the
//! stage's first rank, one micro-batch), the transfer between stages from the α-β time of
//! its send, the schedule laid out with them (`pipeline.rs`), and the activation memory
//! each stage holds at its peak: one micro-batch's saved activations times the most
//! micro-batches in flight there (1F1B holds at most p − stage; FThenB all M).
//!
//! `ideal` durations are the textbook's: forward 1, backward 2 (half of it the weight
//! gradient), free transfers, so the bubble matches the closed forms.

use super::pipeline::{lay_out, JobTimes, PipelineTimeError, Timeline};
use super::simulate::StepTime;
use super::work::ElementBytes;
use crate::ir::{OpType, VarId};
use crate::passes::driver::Passes;
use crate::passes::pipeline::jobs::{cut, RankJobs};
use crate::passes::pipeline::schedule::{job_list, Job, JobKind};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

/// One stage's costs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StageCost {
    pub stage: usize,
    /// The rank its times were taken from (the stage's first).
    pub rank: u32,
    pub times: JobTimes,
    /// Bytes of activations one micro-batch's forward leaves for its backward.
    pub activation_bytes: f64,
    /// The most micro-batches whose activations are held at once under the schedule.
    pub in_flight: usize,
    pub peak_activation_bytes: f64,
}

/// The pipeline's step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PipelineCost {
    pub schedule: std::borrow::Cow<'static, str>,
    pub micro_batches: usize,
    pub chunks: usize,
    pub ideal: bool,
    pub stages: Vec<StageCost>,
    pub timeline: Timeline,
    /// Idle time over total time, all stages together.
    pub bubble: f64,
}

/// Sums the simulated times of `ops` (sends and recvs apart: they are the edges). A B or W
/// copy of a split op takes half of the op's time.
fn job_time(r: &RankJobs, ops: &[usize], op_s: &[f64]) -> f64 {
    let n = op_s.len();
    ops.iter()
        .filter(|&&i| !matches!(r.program.ops()[i].ty, OpType::Send | OpType::Recv))
        .map(|&i| match i.checked_sub(n) {
            None => op_s[i],
            Some(k) => r.copied_from.get(k).map_or(0.0, |&o| op_s[o] / 2.0),
        })
        .sum()
}

fn times_of(r: &RankJobs, op_s: &[f64]) -> JobTimes {
    let total = |lists: &[crate::passes::pipeline::jobs::OpList]| -> f64 {
        lists.iter().map(|l| job_time(r, l, op_s)).sum()
    };
    let send = r
        .program
        .ops()
        .iter()
        .zip(op_s)
        .filter(|(o, _)| o.ty == OpType::Send)
        .map(|(_, &t)| t)
        .fold(0.0, f64::max);
    let backward = total(&r.backward);
    JobTimes {
        forward: total(&r.forward),
        backward,
        backward_w: total(&r.backward_w).min(backward),
        send_recv: send,
        optimizer: job_time(r, &r.optimizer, op_s),
    }
}

/// Bytes of the variables forward jobs write and backward jobs read (one micro-batch).
fn activation_bytes(r: &RankJobs, elem: ElementBytes) -> f64 {
    let written: HashSet<VarId> = r
        .forward
        .iter()
        .flat_map(|l| l.iter())
        .flat_map(|&i| r.program.ops()[i].all_outputs().collect::<Vec<_>>())
        .collect();
    let read: HashSet<VarId> = r
        .backward
        .iter()
        .flat_map(|l| l.iter())
        .flat_map(|&i| r.program.ops()[i].all_inputs().collect::<Vec<_>>())
        .collect();
    written
        .intersection(&read)
        .map(|&v| super::memory::var_bytes(&r.program, v, elem))
        .sum()
}

/// The most micro-batches (of any chunk) forwarded and not yet backwarded, in `jobs`.
fn in_flight(jobs: &[Job]) -> usize {
    let (mut now, mut most) = (0usize, 0usize);
    for j in jobs {
        match j.kind {
            JobKind::Forward => {
                now += 1;
                most = most.max(now);
            }
            JobKind::Backward | JobKind::BackwardB => now = now.saturating_sub(1),
            JobKind::BackwardW
            | JobKind::RecvForward
            | JobKind::SendBackward
            | JobKind::Optimizer => {}
        }
    }
    most
}

/// A stage's jobs, cut from its first rank's program: what every pricing of one planning
/// shares (the schedule, the micro-batch count and the step's times vary; these do not).
#[derive(Clone, Debug)]
pub struct StageJobs {
    /// The stage's first rank, and its position in the partitioned ranks.
    pub rank: u32,
    pub index: usize,
    pub jobs: RankJobs,
    /// Bytes of activations one micro-batch's forward leaves for its backward.
    pub activation_bytes: f64,
}

/// Every stage's jobs.
pub fn stage_jobs(p: &Passes, elem: ElementBytes) -> Result<Vec<StageJobs>, PipelineTimeError> {
    let stages = p.stages.stages;
    let grads: HashSet<VarId> = p.backward.param_grads.iter().map(|&(_, g)| g).collect();
    (0..stages)
        .map(|s| {
            let first = p
                .stages
                .ranks_of(&p.full.mesh, s)
                .first()
                .copied()
                .unwrap_or(0);
            let index = p
                .partitioned
                .ranks
                .iter()
                .position(|r| r.rank == first)
                .ok_or(PipelineTimeError::Times(stages, s))?;
            let jobs = cut(&p.partitioned.ranks[index], &grads, p.stages.chunks);
            let activation_bytes = activation_bytes(&jobs, elem);
            Ok(StageJobs {
                rank: first,
                index,
                jobs,
                activation_bytes,
            })
        })
        .collect()
}

/// The pipeline cost of `p`, from `step` (its simulated single-micro-batch step), at
/// element size `elem`; without a step, the ideal (textbook) durations.
pub fn pipeline_cost(
    p: &Passes,
    step: Option<&StepTime>,
    elem: ElementBytes,
) -> Result<PipelineCost, PipelineTimeError> {
    pipeline_cost_of(p, &stage_jobs(p, elem)?, step)
}

/// [`pipeline_cost`] from the stages' jobs (`stage_jobs` of `p`).
pub fn pipeline_cost_of(
    p: &Passes,
    jobs: &[StageJobs],
    step: Option<&StepTime>,
) -> Result<PipelineCost, PipelineTimeError> {
    let ideal = step.is_none();
    let schedule = p.schedule();
    let (stages, m) = (p.stages.stages, p.micro_batches());
    let chunks = schedule.chunks();
    let mut costs = Vec::with_capacity(stages);
    let mut lists = Vec::with_capacity(stages);
    for s in 0..stages {
        let list = job_list(schedule, stages, s, m)?;
        let stage = jobs.get(s).ok_or(PipelineTimeError::Times(stages, s))?;
        let times = match step.and_then(|st| st.ranks.get(stage.index)) {
            Some(timing) => times_of(&stage.jobs, &timing.op_s),
            None => JobTimes::unit(),
        };
        let held = in_flight(&list);
        costs.push(StageCost {
            stage: s,
            rank: stage.rank,
            times,
            activation_bytes: stage.activation_bytes,
            in_flight: held,
            peak_activation_bytes: stage.activation_bytes * held as f64,
        });
        lists.push(list);
    }
    let times: Vec<JobTimes> = costs.iter().map(|c| c.times).collect();
    let timeline = lay_out(&lists, m, chunks, &times)?;
    let busy: f64 = timeline
        .stages
        .iter()
        .flatten()
        .map(|j| j.end - j.start)
        .sum();
    let total = timeline.step * stages as f64;
    Ok(PipelineCost {
        schedule: schedule.name().into(),
        micro_batches: m,
        chunks,
        ideal,
        stages: costs,
        bubble: if total > 0.0 { 1.0 - busy / total } else { 0.0 },
        timeline,
    })
}

/// A job's letter in text charts: F forward, B backward, b/w its input and weight halves, o
/// the optimizer (space for the recv and send jobs, which take no time).
pub fn letter(kind: JobKind) -> char {
    match kind {
        JobKind::Forward => 'F',
        JobKind::Backward => 'B',
        JobKind::BackwardB => 'b',
        JobKind::BackwardW => 'w',
        JobKind::Optimizer => 'o',
        JobKind::RecvForward | JobKind::SendBackward => ' ',
    }
}

/// One row of a text Gantt chart: per column, the job running at its middle (`.` idle).
pub fn chart_row(jobs: &[super::pipeline::Placed], columns: usize, width: f64) -> String {
    (0..columns)
        .map(|c| {
            let t = (c as f64 + 0.5) * width;
            jobs.iter()
                .find(|p| p.start <= t && t < p.end && letter(p.job.kind) != ' ')
                .map_or('.', |p| letter(p.job.kind))
        })
        .collect()
}

/// The text Gantt chart of `c`: a row per stage (F forward, B backward, b/w its input and
/// weight halves, o optimizer, . idle), each stage's jobs, then `bubble fraction: 0.273`
/// per stage and overall.
pub fn gantt_text(c: &PipelineCost, columns: usize) -> String {
    let tl = &c.timeline;
    let mut out = format!(
        "pipeline: {} on {} stages, {} micro-batches{}, step {}{}\n",
        c.schedule,
        c.stages.len(),
        c.micro_batches,
        if c.chunks > 1 {
            format!(", {} chunks", c.chunks)
        } else {
            String::new()
        },
        if c.ideal {
            format!("{} (ideal units: forward 1, backward 2)", tl.step)
        } else {
            format!("{:.3e} s", tl.step)
        },
        "",
    );
    let width = if tl.step > 0.0 {
        tl.step / columns.max(1) as f64
    } else {
        1.0
    };
    for (s, jobs) in tl.stages.iter().enumerate() {
        out.push_str(&format!(
            "stage {s:>2} |{}|\n",
            chart_row(jobs, columns.max(1), width)
        ));
    }
    for (s, b) in tl.bubble.iter().enumerate() {
        let st = &c.stages[s];
        out.push_str(&format!(
            "stage {s:>2} bubble fraction: {b:.3}  activations held: {} micro-batch(es) × {:.3e} B = {:.3e} B\n",
            st.in_flight, st.activation_bytes, st.peak_activation_bytes
        ));
    }
    out.push_str(&format!("bubble fraction: {:.3}\n", c.bubble));
    out
}
