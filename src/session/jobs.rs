//! The session's side of the engine boundary (`crate::engine`): Run, a broken run and a
//! collective's values become a job the page sends to the engine, and the reply lands
//! here. Only the job the session waits for is answered: a plan change drops the job, so a
//! late reply about the old plan is ignored.

use super::*;
use crate::protocol::{Job, Outcome, Reply, Task};

impl Session {
    /// A job doing `task` on this session (named by its link).
    pub fn job(&self, task: Task) -> Job {
        Job::new(self.to_hash(), task)
    }

    /// Asks the engine for `task` (replacing any job still waiting).
    pub(super) fn request(&mut self, task: Task) {
        self.job = Some(self.job(task));
    }

    /// Applies the engine's reply to the job the session waits for.
    pub(super) fn receive(&mut self, reply: &Reply) {
        if reply.outcome.is_progress() || self.job.as_ref().map(|j| j.id) != Some(reply.id) {
            return;
        }
        self.job = None;
        match &reply.outcome {
            Outcome::Run(Ok(r)) => self.run = Some(r.clone()),
            Outcome::Broken(Ok(r)) => self.break_report = Some(r.clone()),
            Outcome::Values(v) => self.values = Some(v.clone()),
            Outcome::Run(Err(e)) | Outcome::Broken(Err(e)) => self.message = Some(e.to_string()),
            Outcome::Failed(e) => self.message = Some(e.clone()),
            Outcome::Lesson { text, try_this } => {
                self.lesson_words = Some((text.clone(), try_this.clone()))
            }
            // The text is the printer's, so it parses; the editor would show it if not.
            Outcome::Import(v) => {
                self.edit_text(v.text.clone());
                self.message = Some(v.summary.clone());
            }
            // The export, cost, pipeline and suggest panels send their own jobs; the
            // session never waits for these.
            Outcome::Export(_)
            | Outcome::Cost(_)
            | Outcome::PipelineCost(_)
            | Outcome::Suggest(_)
            | Outcome::Progress { .. } => {}
        }
    }

    /// The task the session waits for the engine to finish, if any.
    pub fn waiting_for(&self) -> Option<&Task> {
        self.job.as_ref().map(|j| &j.task)
    }
}
