//! The playground's heavy work behind a message boundary: running a plan on the CPU
//! executor (Run, break-it, a collective's values), exporting it to JAX, and the
//! auto-planner's search.
//!
//! Why a boundary: in the browser these run in a Web Worker built as its own wasm module
//! (`src/bin/engine.rs`), so the page's module carries neither the executor, the exporter
//! nor the search (a quarter of the code; docs/playground.md), and the page stays
//! live while they work. The page sends a [`Job`]; the worker answers with [`Reply`]s
//! (progress, then one outcome). Natively and in the browser tests the same [`handle`] runs
//! in-process.
//!
//! A job names the session by its link (`Session::to_hash`): the whole state round-trips
//! through it, so the worker rebuilds the page's plan, and [`handle`] refuses a link that
//! does not come back unchanged rather than answer for a different plan.

pub mod codec;
mod queue;
mod suggest_view;

pub use queue::Queue;

pub use suggest_view::{Searching, SuggestRow, SuggestView};

use crate::cost::diff::PlanDiff;
use crate::cost::estimate::Estimate;
use crate::cost::pipeline_cost::PipelineCost;
use crate::export::ExportMode;
use crate::session::{BreakReport, Breakage, BrokenOp, CollectiveView, RunSummary, Session};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};

/// One piece of work for the engine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// Unique in the page (see [`Job::new`]); the replies carry it.
    pub id: u64,
    /// The session's link (`Session::to_hash`).
    pub link: String,
    pub task: Task,
}

/// What to do with the session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Task {
    /// Run the plan (every rank) and verify it against serial.
    Run,
    /// Run the plan with these mistakes made and report what diverges.
    RunBroken(Vec<(BrokenOp, Breakage)>),
    /// Op `op` of the selected rank's program with real values.
    Values(usize),
    /// The plan as a JAX script.
    Export(ExportMode),
    /// The plan priced on the session's topology, and against the pinned plan (its link).
    Cost { pinned: Option<String> },
    /// The pipeline's schedule in time (the pipeline panel's Gantt chart).
    PipelineCost,
    /// The auto-planner on the session's model (devices: the mesh's by default; memory:
    /// GB per device, the device's by default).
    Suggest {
        devices: Option<usize>,
        memory_gb: Option<f64>,
    },
}

/// What the engine answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Outcome {
    /// Work done so far, of the total (the search sends these before its answer).
    Progress {
        done: usize,
        total: usize,
    },
    Run(Result<RunSummary, String>),
    Broken(Result<BreakReport, String>),
    Values(Result<CollectiveView, String>),
    Export(Result<String, String>),
    Cost(Box<CostView>),
    PipelineCost(Result<PipelineCost, String>),
    Suggest(Result<SuggestView, String>),
    /// The job could not be done at all (the link did not open, the worker failed).
    Failed(String),
}

impl Outcome {
    /// Whether more replies follow for the same job.
    pub fn is_progress(&self) -> bool {
        matches!(self, Outcome::Progress { .. })
    }
}

/// The cost panel's figures: the plan's estimate, and the comparison with the pinned plan
/// (`None` without one).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CostView {
    pub cost: Result<Estimate, String>,
    pub diff: Option<Result<PlanDiff, String>>,
}

/// One message from the engine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    pub id: u64,
    pub outcome: Outcome,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl Job {
    /// A job on `session` with a fresh id (ids never repeat in a page, even across the new
    /// sessions a preset or a link makes, so a late reply cannot land on a newer job).
    pub fn new(session: &Session, task: Task) -> Job {
        Job {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            link: session.to_hash(),
            task,
        }
    }
}

/// What the page sends the engine: a job, or the cancellation of one it no longer wants
/// (queued or under way, it is dropped unanswered).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Request {
    Job(Job),
    Cancel(u64),
}

/// A job under way: the auto-planner's search, done a step at a time (seconds in the
/// browser; the other tasks are done at once).
pub enum Underway {
    Search(Box<Searching>),
}

impl Underway {
    /// One step; after the last, the outcome.
    pub fn step(&mut self) -> Option<Outcome> {
        match self {
            Underway::Search(s) => s.step().map(Outcome::Suggest),
        }
    }

    /// Work done and in all.
    pub fn progress(&self) -> (usize, usize) {
        match self {
            Underway::Search(s) => s.progress(),
        }
    }
}

/// A job begun: its outcome, or the work under way.
pub enum Started {
    Done(Outcome),
    Underway(Underway),
}

/// Begins `job`: every task but the search is done at once.
pub fn start(job: &Job) -> Started {
    let mut s = match Session::from_hash(&job.link) {
        Ok(s) => s,
        Err(e) => {
            return Started::Done(Outcome::Failed(format!(
                "the engine could not open the plan: {e}"
            )))
        }
    };
    if s.to_hash() != job.link {
        return Started::Done(Outcome::Failed(
            "the engine rebuilt a different plan from the page's link; reload the page".into(),
        ));
    }
    Started::Done(match &job.task {
        Task::Run => Outcome::Run(s.compute_run()),
        Task::RunBroken(breaks) => {
            s.breaks = breaks.clone();
            Outcome::Broken(s.compute_broken())
        }
        Task::Values(op) => Outcome::Values(s.compute_values(*op)),
        Task::Export(mode) => Outcome::Export(s.export_script(*mode)),
        Task::Cost { pinned } => {
            s.pinned = pinned.as_ref().map(|link| crate::session::Pinned {
                text: String::new(),
                link: link.clone(),
            });
            Outcome::Cost(Box::new(CostView {
                cost: s.cost(),
                diff: s.pinned_diff(),
            }))
        }
        Task::PipelineCost => Outcome::PipelineCost(s.pipeline_cost()),
        Task::Suggest { devices, memory_gb } => match Searching::new(&s, *devices, *memory_gb) {
            Ok(search) => return Started::Underway(Underway::Search(Box::new(search))),
            Err(e) => Outcome::Suggest(Err(e)),
        },
    })
}

/// Does `job` to the end, reporting progress to `progress` (done, total) as it goes.
pub fn handle(job: &Job, progress: &mut dyn FnMut(usize, usize)) -> Outcome {
    match start(job) {
        Started::Done(outcome) => outcome,
        Started::Underway(mut work) => loop {
            if let Some(outcome) = work.step() {
                return outcome;
            }
            let (d, t) = work.progress();
            progress(d, t);
        },
    }
}

/// Does the job `session` waits for, in-process, and applies the answer (natively and in
/// tests, where there is no worker).
pub fn finish(mut session: Session) -> Session {
    while let Some(job) = session.job.clone() {
        let outcome = handle(&job, &mut |_, _| {});
        session = session.reduce(crate::session::Action::Reply(Reply {
            id: job.id,
            outcome,
        }));
    }
    session
}
