//! The pipeline panel's model: the schedule, micro-batches and chunks of the plan's
//! options, the stage boundaries (dragged in the program view), and the schedule in time.

use super::*;
use crate::cost::pipeline_cost::{pipeline_cost, PipelineCost};
use crate::plan::PlanOptions;

/// The most micro-batches the playground's slider offers.
pub const MAX_BROWSER_MICRO_BATCHES: usize = 64;

impl Session {
    /// The pipeline panel's actions.
    pub(super) fn pipeline_action(&mut self, action: PipelineAction) {
        match action {
            PipelineAction::SetSchedule(k) => self.set_options(|o| o.schedule = k),
            PipelineAction::SetMicroBatches(m) => self.set_options(|o| o.micro_batches = m),
            PipelineAction::SetChunks(v) => self.set_options(|o| o.chunks = v),
            PipelineAction::SetGanttIdeal(on) => self.gantt_ideal = on,
            PipelineAction::MoveStageBoundary { stage, first_op } => {
                self.move_stage_boundary(stage, first_op)
            }
        }
    }

    /// Changes the plan's options with `f` and re-plans (an invalid combination shows as
    /// the plan's error, which names what to change).
    pub(super) fn set_options(&mut self, f: impl FnOnce(&mut PlanOptions)) {
        let before = self.plan.options.clone();
        f(&mut self.plan.options);
        let o = &self.plan.options;
        if o.micro_batches == 0
            || o.micro_batches > MAX_BROWSER_MICRO_BATCHES
            || o.chunks == 0
            || o.chunks > 8
        {
            self.message = Some(format!(
                "micro-batches go from 1 to {MAX_BROWSER_MICRO_BATCHES} and chunks from 1 to 8 here"
            ));
            self.plan.options = before;
            return;
        }
        if self.plan.options != before {
            if self.plan.options.chunks != before.chunks {
                // Virtual stages changed: the old boundaries no longer fit; split again.
                self.plan.stages.clear();
            }
            self.plan_changed();
        }
    }

    /// Whether the plan has pipeline stages or micro-batches (the pipeline panel shows).
    pub fn is_pipelined(&self) -> bool {
        self.pipeline.as_ref().is_some_and(|p| p.is_pipelined())
    }

    /// The first forward op of each virtual stage (from the planned pipeline's op attrs).
    pub fn stage_starts(&self) -> Vec<usize> {
        let Some(p) = &self.pipeline else {
            return Vec::new();
        };
        let n = crate::plan::forward_ops(&p.full.program);
        let mut starts: Vec<Option<usize>> = vec![None; p.stages.virtual_count()];
        for (i, a) in p.full.ops.iter().enumerate().take(n) {
            let k = crate::passes::pipeline::stages::virtual_stage(&p.stages, a);
            if let Some(slot) = starts.get_mut(k) {
                slot.get_or_insert(i);
            }
        }
        starts.into_iter().map(|s| s.unwrap_or(n)).collect()
    }

    /// The virtual stage of forward op `i` (0 without a pipeline).
    pub fn stage_of_op(&self, i: usize) -> usize {
        self.pipeline
            .as_ref()
            .and_then(|p| {
                p.full
                    .ops
                    .get(i)
                    .map(|a| crate::passes::pipeline::stages::virtual_stage(&p.stages, a))
            })
            .unwrap_or(0)
    }

    /// Moves stage `stage`'s first op to `first_op`, between its neighbours' first ops.
    pub(super) fn move_stage_boundary(&mut self, stage: usize, first_op: usize) {
        let mut starts = self.stage_starts();
        let n = crate::plan::forward_ops(&self.plan.program);
        if stage == 0 || stage >= starts.len() {
            self.message = Some(format!("stage {stage} has no boundary to move"));
            return;
        }
        let lo = starts[stage - 1] + 1;
        let hi = starts.get(stage + 1).copied().unwrap_or(n);
        if first_op < lo || first_op >= hi {
            self.message = Some(format!(
                "stage {stage} must start after op {} and before op {hi}: every stage keeps at \
                 least one op",
                lo - 1
            ));
            return;
        }
        starts[stage] = first_op;
        if let Err(m) = self.set_stage_starts(starts) {
            self.message = Some(m.to_string());
        }
    }

    /// Places the stages at these first ops (strictly increasing, stage 0 at op 0).
    pub(super) fn set_stage_starts(&mut self, starts: Vec<usize>) -> Result<(), SessionError> {
        let n = crate::plan::forward_ops(&self.plan.program);
        let want = self.stage_starts().len();
        if starts.len() != want {
            return Err(SessionError::StageCount {
                got: starts.len(),
                want,
            });
        }
        if starts.first() != Some(&0)
            || starts.windows(2).any(|w| w[0] >= w[1])
            || starts.last().is_some_and(|&l| l >= n)
        {
            return Err(SessionError::StageStarts { starts, ops: n });
        }
        self.plan.stages = crate::plan::stage_ranges(&starts, n);
        self.plan_changed();
        Ok(())
    }

    /// The schedule in time: the cost model's job times on the session's topology, or the
    /// ideal units.
    pub fn pipeline_cost(&self) -> Result<PipelineCost, SessionError> {
        let p = self.pipeline.as_ref().ok_or(SessionError::PlanHasError)?;
        if !p.is_pipelined() {
            return Err(SessionError::NoPipeline);
        }
        if self.gantt_ideal {
            let full = super::cost::all_ranks(p, &self.partition_options(None))?;
            return Ok(pipeline_cost(
                &full,
                None,
                crate::cost::work::ElementBytes(4.0),
            )?);
        }
        self.cost()?.pipeline.ok_or(SessionError::NoSchedule)
    }
}
