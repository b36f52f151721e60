//! The engine's work list in the worker: jobs answered in the order they came, except that
//! a search (seconds in the browser) goes a step at a time, and the jobs that come
//! meanwhile (the cost panel's figures for the plan being edited) are answered between its
//! steps rather than after it; a cancelled job is dropped, queued or under way. Pure: the
//! worker (`web/worker.rs`) feeds it messages and posts what it answers.

use super::{start, Job, Outcome, Reply, Request, Started, Underway};
use std::collections::VecDeque;

/// Jobs waiting and searches under way.
#[derive(Default)]
pub struct Queue {
    waiting: VecDeque<Job>,
    underway: VecDeque<(u64, Underway)>,
}

impl Queue {
    /// Takes a request: a job joins the end; a cancellation drops its job, waiting or under
    /// way (it is answered no more).
    pub fn push(&mut self, request: Request) {
        match request {
            Request::Job(job) => self.waiting.push_back(job),
            Request::Cancel(id) => {
                self.waiting.retain(|j| j.id != id);
                self.underway.retain(|(u, _)| *u != id);
            }
        }
    }

    /// Whether nothing is left to do.
    pub fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.underway.is_empty()
    }

    /// The next piece of work, and its reply: the oldest waiting job (done, or its search
    /// begun: its progress), else a step of the oldest search under way (its progress, or
    /// after the last step its outcome). `None` when idle.
    pub fn work(&mut self) -> Option<Reply> {
        if let Some(job) = self.waiting.pop_front() {
            let outcome = match start(&job) {
                Started::Done(outcome) => outcome,
                Started::Underway(work) => {
                    let (done, total) = work.progress();
                    self.underway.push_back((job.id, work));
                    Outcome::Progress { done, total }
                }
            };
            return Some(Reply {
                id: job.id,
                outcome,
            });
        }
        let (id, work) = self.underway.front_mut()?;
        let id = *id;
        let outcome = match work.step() {
            Some(outcome) => {
                self.underway.pop_front();
                outcome
            }
            None => {
                let (done, total) = work.progress();
                Outcome::Progress { done, total }
            }
        };
        Some(Reply { id, outcome })
    }
}
