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
mod import;
mod queue;
mod suggest_view;

pub use import::import_model;
pub use queue::Queue;

pub use suggest_view::Searching;

use crate::protocol::{BreakReport, CollectiveView, RunSummary};
pub use crate::protocol::{
    CostView, Failure, Job, Outcome, Reply, Request, SuggestRow, SuggestView, Task,
};
use crate::session::Session;

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
    if let Task::Lesson(n) = job.task {
        return Started::Done(match crate::session::lesson_words(n) {
            Some((text, try_this)) => Outcome::Lesson {
                text: text.into(),
                try_this: try_this.into(),
            },
            None => Outcome::Failed(format!("there is no lesson {n}")),
        });
    }
    if let Task::Import(f) = &job.task {
        return Started::Done(
            match import_model(&f.name, &f.bytes, &f.dims, &f.parallel) {
                Ok(view) => Outcome::Import(view),
                Err(e) => Outcome::Failed(e.message),
            },
        );
    }
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
    // A published model executes as its shrunk twin; everything else prices the real size.
    let executes = matches!(job.task, Task::Run | Task::RunBroken(_) | Task::Values(_));
    let shrunk = match executes.then(|| s.shrink_to_twin()).transpose() {
        Ok(said) => said.unwrap_or_default(),
        Err(e) => return Started::Done(failed_execution(&job.task, e)),
    };
    Started::Done(match &job.task {
        Task::Run => Outcome::Run(
            s.compute_run()
                .map(|r| RunSummary { shrunk, ..r })
                .map_err(Failure::from),
        ),
        Task::RunBroken(breaks) => {
            s.breaks = breaks.clone();
            Outcome::Broken(
                s.compute_broken()
                    .map(|r| BreakReport { shrunk, ..r })
                    .map_err(Failure::from),
            )
        }
        Task::Values(op) => Outcome::Values(
            s.compute_values(*op)
                .map(|v| CollectiveView { shrunk, ..v })
                .map_err(Failure::from),
        ),
        Task::Export(mode) => Outcome::Export(s.export_script(*mode).map_err(Failure::from)),
        Task::Cost { pinned } => {
            s.pinned = pinned.as_ref().map(|link| crate::session::Pinned {
                text: String::new(),
                link: link.clone(),
            });
            Outcome::Cost(Box::new(CostView {
                cost: s.cost().map_err(Failure::from),
                diff: s.pinned_diff().map(|d| d.map_err(Failure::from)),
            }))
        }
        Task::PipelineCost => Outcome::PipelineCost(s.pipeline_cost().map_err(Failure::from)),
        Task::Suggest { devices, memory_gb } => match Searching::new(&s, *devices, *memory_gb) {
            Ok(search) => return Started::Underway(Underway::Search(Box::new(search))),
            Err(e) => Outcome::Suggest(Err(e)),
        },
        // Done before the session is opened.
        Task::Import(_) | Task::Lesson(_) => {
            Outcome::Failed("an import or a lesson is not a task on a plan".into())
        }
    })
}

/// The outcome of an executing task whose plan could not be shrunk.
fn failed_execution(task: &Task, e: crate::session::SessionError) -> Outcome {
    let e = Failure::from(e);
    match task {
        Task::RunBroken(_) => Outcome::Broken(Err(e)),
        Task::Values(_) => Outcome::Values(Err(e)),
        Task::Run
        | Task::Export(_)
        | Task::Cost { .. }
        | Task::PipelineCost
        | Task::Suggest { .. }
        | Task::Import(_)
        | Task::Lesson(_) => Outcome::Run(Err(e)),
    }
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
        session = session.reduce(crate::session::Action::Reply(std::rc::Rc::new(Reply {
            id: job.id,
            outcome,
        })));
    }
    session
}
