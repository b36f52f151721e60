//! Executing a published model: its real size is priced and drawn, but Run, break-it and
//! the values view execute its shrunk twin (`models::twin`), the same ops, layouts,
//! meshes and collectives at sizes a browser can run. The twin carries the session's
//! annotations, options and stage boundaries, so what is executed is what is shown; the
//! engine swaps it in before it runs anything and says what shrank.

use super::*;
use crate::models::twin;

impl Session {
    /// Replaces the plan by its shrunk twin when the session shows a published model; what
    /// shrank, in words ("hidden 4096 → 64"; empty when the plan runs as it is).
    pub fn shrink_to_twin(&mut self) -> Result<Vec<String>, SessionError> {
        let Some(scenario) = Scenario::by_name(&self.scenario).filter(|s| s.published.is_some())
        else {
            return Ok(Vec::new());
        };
        let mesh = self.mesh().cloned().ok_or(SessionError::NothingToRun)?;
        let mut real = scenario.config();
        if let Some(n) = self.layers {
            real.layers = n;
        }
        // Stage boundaries placed by op number keep every layer (see `twin`).
        let stages = self
            .plan
            .stages
            .is_empty()
            .then(|| crate::dist::Stages::of(&mesh, self.plan.options.chunks).virtual_count());
        let (small, said) = twin::shrink(scenario.model, &real, mesh.size(), stages);
        let mut plan = Plan::from_program(scenario.program(&small)?);
        plan.set_mesh(mesh);
        for a in &self.plan.annotations {
            let name = &self.plan.program.var(a.var).name;
            if dropped_layer(name, small.layers) {
                continue;
            }
            let var = plan
                .program
                .var_id(name)
                .ok_or_else(|| SessionError::TwinVar(name.to_string()))?;
            plan.annotations.push(Annotation {
                var,
                attr: a.attr.clone(),
            });
        }
        plan.options = self.plan.options.clone();
        // With its layers kept, the twin is built by the same code in the same order: its
        // ops are the real program's, one for one, so stage boundaries by op carry over.
        plan.stages = self.plan.stages.clone();
        self.plan = plan;
        self.replan();
        match &self.plan_error {
            Some(e) => Err(SessionError::Planning(format!("the shrunk twin: {e}"))),
            None => Ok(said),
        }
    }
}

/// Whether `name` belongs to a layer the twin does not have (`h7.…` when it keeps 2).
fn dropped_layer(name: &str, kept: usize) -> bool {
    crate::ir::layer_of_name(name).is_some_and(|layer| layer >= kept)
}
