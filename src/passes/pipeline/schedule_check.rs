//! Checking a schedule statically: every stage runs each of its micro-batches' forward and
//! backward once, no job runs before what it needs has arrived, and the stages never wait
//! on each other in a circle. A deadlock is reported with the cycle of waits, so a
//! hand-written job order is never hung on.
//!
//! Dependencies, over virtual stages (chunk `c` of stage `s` is virtual stage `c·p + s`): a
//! forward needs the forward of the same micro-batch on the virtual stage before it; a
//! backward (or its input half, `backward_b`) needs the backward on the virtual stage after
//! it, and on the last virtual stage its own forward; a `backward_w` needs its `backward_b`.
//! Sends are buffered (`exec::comm`), so a job never waits for its own send to be received.

use super::schedule::{Job, JobKind};
use rustc_hash::FxHashSet as HashSet;
use std::fmt;

/// (kind family, micro-batch, virtual stage): what a dependency names.
pub type DepKey = (u8, usize, usize);

/// The family a job completes: 0 forward, 1 backward (or its B half), 2 its W half.
pub fn family(kind: JobKind) -> Option<u8> {
    match kind {
        JobKind::Forward => Some(0),
        JobKind::Backward | JobKind::BackwardB => Some(1),
        JobKind::BackwardW => Some(2),
        JobKind::RecvForward | JobKind::SendBackward | JobKind::Optimizer => None,
    }
}

/// What `job` (on physical stage `s`, virtual stage `v`) needs: (the job, the physical
/// stage that runs it).
pub fn needs(
    job: &Job,
    v: usize,
    s: usize,
    stages: usize,
    virtual_stages: usize,
) -> Vec<(DepKey, usize)> {
    let m = job.micro_batch;
    match job.kind {
        JobKind::Forward if v > 0 => vec![((0, m, v - 1), (v - 1) % stages)],
        JobKind::Backward | JobKind::BackwardB if v + 1 < virtual_stages => {
            vec![((1, m, v + 1), (v + 1) % stages)]
        }
        JobKind::Backward | JobKind::BackwardB => vec![((0, m, v), s)],
        JobKind::BackwardW => vec![((1, m, v), s)],
        JobKind::Forward | JobKind::RecvForward | JobKind::SendBackward | JobKind::Optimizer => {
            Vec::new()
        }
    }
}

/// The virtual stage of `job` on physical stage `s`.
pub fn virtual_of(job: &Job, s: usize, stages: usize) -> usize {
    job.chunk.unwrap_or(0) * stages + s
}

/// One stage waiting: at `job`, for `needs` on stage `on`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wait {
    pub stage: usize,
    pub job: String,
    pub needs: String,
    pub on: usize,
}

/// Why a job order cannot run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OrderError {
    /// The stages wait on each other in a circle.
    #[error("the schedule deadlocks: {}", show_cycle(.0))]
    Deadlock(Vec<Wait>),
    /// A stage waits for a job no stage runs.
    #[error("stage {} waits at {} for {} on stage {}, which never runs it", .0.stage, .0.job, .0.needs, .0.on)]
    Missing(Wait),
    /// A stage runs a job twice or leaves one out.
    #[error("stage {stage}: {message}")]
    Incomplete { stage: usize, message: String },
}

fn show_cycle(waits: &[Wait]) -> String {
    let mut out = String::new();
    for (i, w) in waits.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(&format!(
            "stage {} at {} waits for {} on stage {}",
            w.stage, w.job, w.needs, w.on
        ));
    }
    out
}

fn job_name(key: DepKey) -> String {
    let kind = match key.0 {
        0 => "forward",
        1 => "backward",
        _ => "backward_w",
    };
    format!("{kind}({}) of virtual stage {}", key.1, key.2)
}

/// Checks that each stage's list runs every micro-batch's forward and backward (whole or as
/// B then W) once per chunk.
pub fn check_complete(
    lists: &[Vec<Job>],
    micro_batches: usize,
    chunks: usize,
) -> Result<(), OrderError> {
    for (s, list) in lists.iter().enumerate() {
        let mut seen: HashSet<(u8, usize, usize)> = HashSet::default();
        for job in list {
            let Some(f) = family(job.kind) else {
                continue;
            };
            let c = job.chunk.unwrap_or(0);
            if job.micro_batch >= micro_batches || c >= chunks {
                return Err(OrderError::Incomplete {
                    stage: s,
                    message: format!("{job} names a micro-batch or chunk that does not exist"),
                });
            }
            if !seen.insert((f, job.micro_batch, c)) {
                return Err(OrderError::Incomplete {
                    stage: s,
                    message: format!("{job} runs twice"),
                });
            }
        }
        for m in 0..micro_batches {
            for c in 0..chunks {
                if !seen.contains(&(0, m, c)) || !seen.contains(&(1, m, c)) {
                    return Err(OrderError::Incomplete {
                        stage: s,
                        message: format!(
                            "micro-batch {m} (chunk {c}) lacks its forward or backward"
                        ),
                    });
                }
            }
        }
    }
    Ok(())
}

/// Checks `lists` (one job list per physical stage) by running them in dependency order.
pub fn check_order(
    lists: &[Vec<Job>],
    micro_batches: usize,
    chunks: usize,
) -> Result<(), OrderError> {
    check_complete(lists, micro_batches, chunks)?;
    let stages = lists.len();
    let virtual_stages = stages * chunks.max(1);
    let total: usize = lists.iter().map(Vec::len).sum();
    let mut done: HashSet<DepKey> = HashSet::with_capacity_and_hasher(total, Default::default());
    let mut pc = vec![0usize; stages];
    loop {
        let mut moved = false;
        for s in 0..stages {
            while let Some(job) = lists[s].get(pc[s]) {
                let v = virtual_of(job, s, stages);
                if needs(job, v, s, stages, virtual_stages)
                    .iter()
                    .any(|(k, _)| !done.contains(k))
                {
                    break;
                }
                if let Some(f) = family(job.kind) {
                    done.insert((f, job.micro_batch, v));
                }
                pc[s] += 1;
                moved = true;
            }
        }
        if (0..stages).all(|s| pc[s] >= lists[s].len()) {
            return Ok(());
        }
        if !moved {
            return Err(blame(lists, &pc, &done, chunks));
        }
    }
}

/// The cycle of waits among stuck stages (or the wait for a job nobody runs).
fn blame(lists: &[Vec<Job>], pc: &[usize], done: &HashSet<DepKey>, chunks: usize) -> OrderError {
    let stages = lists.len();
    let virtual_stages = stages * chunks.max(1);
    let wait_of = |s: usize| -> Option<(Wait, usize, DepKey)> {
        let job = lists[s].get(pc[s])?;
        let v = virtual_of(job, s, stages);
        let (key, on) = needs(job, v, s, stages, virtual_stages)
            .into_iter()
            .find(|(k, _)| !done.contains(k))?;
        let w = Wait {
            stage: s,
            job: job.to_string(),
            needs: job_name(key),
            on,
        };
        Some((w, on, key))
    };
    let mut s = (0..stages).find(|&s| pc[s] < lists[s].len()).unwrap_or(0);
    let mut path: Vec<Wait> = Vec::new();
    let mut visited: Vec<usize> = Vec::new();
    while let Some((w, on, key)) = wait_of(s) {
        let runs_it = lists[on].iter().any(|j| {
            family(j.kind) == Some(key.0)
                && j.micro_batch == key.1
                && virtual_of(j, on, stages) == key.2
        });
        if !runs_it {
            return OrderError::Missing(w);
        }
        if let Some(i) = visited.iter().position(|&t| t == s) {
            return OrderError::Deadlock(path.split_off(i));
        }
        visited.push(s);
        path.push(w);
        s = on;
    }
    OrderError::Deadlock(path)
}

/// Why a hand-written job order does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JobOrderError {
    #[error("stage {stage}, `{token}`: expected F, B, b or W then a micro-batch, like F3 or B0.1")]
    Kind { stage: usize, token: String },
    #[error("stage {stage}, `{token}`: `{number}` is not a micro-batch or chunk number")]
    Number {
        stage: usize,
        token: String,
        number: String,
    },
    #[error("stage {0} has no jobs")]
    Empty(usize),
}

/// Parses a hand-written job order: stages separated by `|`, jobs by spaces: `F3` forward
/// of micro-batch 3, `B3` backward, `b3` its input half, `W3` its weight half, an optional
/// `.c` for chunk `c` (`F3.1`). Each stage's optimizer job is appended.
pub fn parse_jobs(text: &str) -> Result<Vec<Vec<Job>>, JobOrderError> {
    text.split('|')
        .enumerate()
        .map(|(s, stage)| {
            let mut jobs: Vec<Job> = stage
                .split_whitespace()
                .map(|tok| parse_job(s, tok))
                .collect::<Result<_, _>>()?;
            if jobs.is_empty() {
                return Err(JobOrderError::Empty(s));
            }
            jobs.push(Job {
                kind: JobKind::Optimizer,
                micro_batch: 0,
                chunk: None,
            });
            Ok(jobs)
        })
        .collect()
}

fn parse_job(stage: usize, tok: &str) -> Result<Job, JobOrderError> {
    let mut chars = tok.chars();
    let kind = match chars.next() {
        Some('F') => JobKind::Forward,
        Some('B') => JobKind::Backward,
        Some('b') => JobKind::BackwardB,
        Some('W') => JobKind::BackwardW,
        _ => {
            return Err(JobOrderError::Kind {
                stage,
                token: tok.to_string(),
            })
        }
    };
    let rest: String = chars.collect();
    let (m, c) = match rest.split_once('.') {
        Some((m, c)) => (m, Some(c)),
        None => (rest.as_str(), None),
    };
    let number = |s: &str| {
        s.parse::<usize>()
            .ok()
            .filter(|&n| n < 1 << 20)
            .ok_or_else(|| JobOrderError::Number {
                stage,
                token: tok.to_string(),
                number: s.to_string(),
            })
    };
    Ok(Job {
        kind,
        micro_batch: number(m)?,
        chunk: c.map(number).transpose()?,
    })
}

impl fmt::Display for Wait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "stage {} at {} waits for {} on stage {}",
            self.stage, self.job, self.needs, self.on
        )
    }
}
