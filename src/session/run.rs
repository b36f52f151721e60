//! Running the plan: every rank stepped cooperatively, checked against the serial run.
//! The page asks the engine for it (`crate::engine`); this is what the engine does.

use super::*;

impl Session {
    /// Runs every rank of the plan for two steps and verifies them against serial.
    pub(crate) fn compute_run(&mut self) -> Result<RunSummary, SessionError> {
        self.ensure_partitioned(None);
        let Some(p) = self.pipeline.clone() else {
            return Err(SessionError::NothingToRun);
        };
        if super::break_it::too_large(&p) {
            return Err(SessionError::TooLarge);
        }
        let opts = RunOptions {
            steps: 2,
            ..Default::default()
        };
        // Verified in f64: in f32 the derived tolerance cannot catch every error on a deep
        // model (`exec::precision`).
        let p = crate::exec::precision::in_precision(&p, crate::exec::precision::Precision::F64);
        let s = run_serial(&p, &opts).map_err(|e| SessionError::Run(e.to_string()))?;
        let d = run_distributed(&p, &opts, false).map_err(|e| SessionError::Run(e.to_string()))?;
        Ok(RunSummary {
            serial_losses: s.losses.clone(),
            dist_losses: d.losses.clone(),
            checks: verify(&s, &d),
            shrunk: Vec::new(),
        })
    }
}
