//! The backward timeline: backward and the optimizer complete their dist attrs op by op from
//! the forward ones (no rule search, so no trace of wishes); stepping through them shows
//! each op's outputs taking their layouts in program order, as the forward timeline does.

use super::*;

impl Session {
    /// The backward and optimizer ops, by index in the full program: `[first, end)`.
    pub fn backward_range(&self) -> Option<(usize, usize)> {
        let p = self.pipeline.as_ref()?;
        let program = &p.full.program;
        Some((crate::plan::forward_ops(program), program.ops().len()))
    }

    /// Steps on the Backward tab's timeline (one per backward or optimizer op).
    pub fn backward_events(&self) -> usize {
        self.backward_range().map_or(0, |(a, b)| b - a)
    }

    /// Whether full-program variable `v` has its layout yet at the backward timeline's
    /// position (forward variables always have).
    pub fn backward_done(&self, v: crate::ir::VarId) -> bool {
        let (Some(p), Some((first, _))) = (self.pipeline.as_ref(), self.backward_range()) else {
            return true;
        };
        let reached = first + self.backward_step.min(self.backward_events());
        let program = &p.full.program;
        match program
            .ops()
            .iter()
            .position(|o| o.all_outputs().any(|x| x == v))
        {
            Some(i) if i >= first => i < reached,
            Some(_) | None => true,
        }
    }

    /// The backward timeline's current op (the last one completed), if any.
    pub fn backward_current(&self) -> Option<usize> {
        let (first, _) = self.backward_range()?;
        let k = self.backward_step.min(self.backward_events());
        (k > 0).then(|| first + k - 1)
    }

    /// One line about backward step `k` (1-based): the op and its outputs' layouts.
    pub fn backward_event_text(&self, k: usize) -> Option<String> {
        let p = self.pipeline.as_ref()?;
        let (first, _) = self.backward_range()?;
        let i = first + k.checked_sub(1)?;
        let program = &p.full.program;
        let op = program.ops().get(i)?;
        let outs: Vec<String> = op
            .all_outputs()
            .map(|v| {
                format!(
                    "{} {}",
                    program.var(v).name,
                    crate::passes::complete::shard_text(&p.full.tensors[v.index()], &p.full.mesh)
                )
            })
            .collect();
        Some(format!(
            "op {i} {} ({}) · {}",
            op.ty,
            op.role.name(),
            outs.join(", ")
        ))
    }

    /// Moves the backward timeline (`Step`, `Seek`, `Tick` on the Backward tab).
    pub(super) fn backward_move(&mut self, to: i64) {
        let n = self.backward_events() as i64;
        self.backward_step = to.clamp(0, n) as usize;
    }
}
