//! The plan as a JAX script for the Export panel: every rank partitioned first (the
//! playground may have partitioned only the rank it shows).

use super::*;
use crate::export::{export_jax, Constrain, ExportMode, ExportOptions};

impl Session {
    /// The script of `mode`, or why there is none.
    pub fn export_script(&self, mode: ExportMode) -> Result<String, SessionError> {
        let mut s = self.clone();
        s.ensure_partitioned(None);
        let p = s.pipeline.as_ref().ok_or_else(|| {
            s.plan_error
                .clone()
                .map_or(SessionError::PlanHasError, SessionError::Planning)
        })?;
        export_jax(
            p,
            &ExportOptions {
                mode,
                constrain: Constrain::Annotated,
                source: format!("the ShardLab playground (scenario {})", self.scenario),
                init: Default::default(),
            },
        )
        .map_err(SessionError::from)
    }
}
