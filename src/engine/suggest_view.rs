//! The Suggest panel's answer as the page shows it: the search runs in the engine, and the
//! page gets the table already formatted (so it needs none of the search's types).

use crate::protocol::{Failure, SuggestRow, SuggestView};
use crate::session::Session;
use crate::suggest::report::{human_bytes, human_seconds};
use crate::suggest::{Row, Search, Suggestion};

/// The auto-planner under way on a session's model: a step at a time, so the worker can
/// answer other jobs between steps.
pub struct Searching {
    search: Search,
    model: crate::models::Model,
}

impl Searching {
    /// The search of `session`'s model (devices: the mesh's by default; memory: GB per
    /// device, the device's by default).
    pub(super) fn new(
        session: &Session,
        devices: Option<usize>,
        memory_gb: Option<f64>,
    ) -> Result<Searching, Failure> {
        let req = session.suggest_request(devices, memory_gb);
        let (problem, mine, top) = req.problem().map_err(|e| Failure {
            message: e.to_string(),
        })?;
        let model = problem.model;
        let search = Search::new(problem, top, mine).map_err(|e| Failure {
            message: e.to_string(),
        })?;
        Ok(Searching { search, model })
    }

    /// One step; after the last, the answer.
    pub(super) fn step(&mut self) -> Option<Result<SuggestView, Failure>> {
        let done = self.search.step()?;
        Some(done.map(|s| view(&s, self.model)).map_err(|e| Failure {
            message: e.to_string(),
        }))
    }

    /// Work done and in all.
    pub(super) fn progress(&self) -> (usize, usize) {
        self.search.progress()
    }
}

fn row(model: crate::models::Model, r: &Row) -> SuggestRow {
    let t = &r.terms;
    let (mesh, strategy, zero, schedule, recompute) = match &r.candidate {
        Some(c) => (
            c.mesh.spec(),
            c.strategy(model),
            c.zero.to_string(),
            if c.micro_batches > 1 {
                format!("{}×{}", c.micro_batches, c.schedule.name())
            } else {
                "-".into()
            },
            c.recompute.name().to_string(),
        ),
        None => (
            "your plan".into(),
            "as written".into(),
            String::new(),
            String::new(),
            String::new(),
        ),
    };
    SuggestRow {
        mine: r.candidate.is_none(),
        mesh,
        strategy,
        zero,
        schedule,
        recompute,
        compute: human_seconds(t.compute_s),
        comm: human_seconds(t.comm_total()),
        bubble: human_seconds(t.bubble_s),
        peak: human_bytes(t.peak_bytes),
        step: human_seconds(t.step_s),
    }
}

/// The answer as the panel shows it.
pub fn view(s: &Suggestion, model: crate::models::Model) -> SuggestView {
    let st = &s.stats;
    SuggestView {
        rows: s
            .table
            .iter()
            .chain(s.mine.iter())
            .map(|r| row(model, r))
            .collect(),
        reason: s.reason.clone(),
        stats: format!(
            "{} families planned, {} cut by the bound, {} escalated for memory, {} ZeRO 2-3 \
             skipped as a lower stage fits, {} priced exactly.",
            st.families, st.bounded, st.escalations, st.dominated, st.exact
        ),
        plan: s.plan.to_string(),
    }
}
