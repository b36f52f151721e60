//! Running the plan in the browser: every rank stepped cooperatively, checked against the
//! serial run.

use super::*;

impl Session {
    pub(super) fn run(&mut self) {
        self.ensure_partitioned(None);
        let Some(p) = self.pipeline.clone() else {
            self.message = Some("nothing to run: the plan has an error".into());
            return;
        };
        if let Some(why) = super::break_it::too_large(&p) {
            self.message = Some(why);
            return;
        }
        let opts = RunOptions {
            steps: 2,
            ..Default::default()
        };
        // Verified in f64: in f32 the derived tolerance cannot catch every error on a deep
        // model (`exec::precision`).
        let p = crate::exec::precision::in_precision(&p, crate::exec::precision::Precision::F64);
        let result =
            run_serial(&p, &opts).and_then(|s| run_distributed(&p, &opts, false).map(|d| (s, d)));
        match result {
            Ok((s, d)) => {
                self.run = Some(RunSummary {
                    serial_losses: s.losses.clone(),
                    dist_losses: d.losses.clone(),
                    checks: verify(&s, &d),
                })
            }
            Err(e) => self.message = Some(format!("run failed: {e}")),
        }
    }
}
