//! The cost panel's model: the plan costed on a topology preset, the ZeRO stage, and a
//! pinned plan to compare against.

use super::*;
use crate::cost::device::Topology;
use crate::cost::diff::{diff, PlanDiff};
use crate::cost::estimate::{estimate, CostOptions, Estimate};

/// The topologies the playground offers (the browser does not measure its CPU, so `cpu`
/// has nominal figures).
pub const TOPOLOGIES: [&str; 4] = ["h100x8", "h100x8x4", "tpu-v5e-16", "cpu"];

/// A plan pinned for comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct Pinned {
    /// Its plan text, as pinned.
    pub text: String,
    /// Its session's link: the engine rebuilds and prices it from this (`crate::engine`).
    pub link: String,
}

/// `p` with every rank partitioned (a copy if it had only some).
pub(super) fn all_ranks(
    p: &Arc<Passes>,
    opts: &PartitionOptions,
) -> Result<Arc<Passes>, SessionError> {
    if p.is_fully_partitioned() {
        return Ok(Arc::clone(p));
    }
    let mut full = (**p).clone();
    let opts = PartitionOptions {
        ranks: None,
        ..opts.clone()
    };
    full.repartition(&opts)?;
    Ok(Arc::new(full))
}

impl Session {
    /// The topology preset the plan is costed on.
    pub fn topology(&self) -> Result<Topology, SessionError> {
        Ok(Topology::preset(&self.topology)?)
    }

    /// This session's plan (every rank) priced on `topo`.
    fn costed(&self, topo: &Topology) -> Result<(Arc<Passes>, Estimate), SessionError> {
        let p = self.pipeline.as_ref().ok_or(SessionError::PlanHasError)?;
        let full = all_ranks(p, &self.partition_options(None))?;
        let opts = CostOptions {
            mixed_precision: self.plan.options.amp,
            overlap_grad_sync: false,
        };
        let e = estimate(&full, topo, topo.default_dtype, opts)?;
        Ok((full, e))
    }

    /// The current plan's cost on the session's topology (every rank), or why there is none.
    pub fn cost(&self) -> Result<Estimate, SessionError> {
        self.costed(&self.topology()?).map(|c| c.1)
    }

    /// The pinned plan against the current one, both on the session's topology (`None`
    /// without a pinned plan).
    pub fn pinned_diff(&self) -> Option<Result<PlanDiff, SessionError>> {
        let pinned = self.pinned.as_ref()?;
        self.pipeline.as_ref()?;
        Some((|| {
            let topo = self.topology()?;
            let then = Session::from_hash(&pinned.link).map_err(SessionError::Pinned)?;
            let (pa, ea) = then.costed(&topo)?;
            let (pb, eb) = self.costed(&topo)?;
            Ok(diff(&pa, &ea, &pb, &eb))
        })())
    }

    /// Pins the current plan for comparison.
    pub(super) fn pin(&mut self) {
        if self.pipeline.is_none() {
            self.message = Some("nothing to pin: the plan has an error".into());
            return;
        }
        self.pinned = Some(Pinned {
            text: self.text.clone(),
            link: self.to_hash(),
        });
    }

    /// Sets the ZeRO stage in the plan's options.
    pub(super) fn set_zero(&mut self, stage: u8) {
        match crate::plan::PlanOptions::check_zero(i64::from(stage)) {
            Ok(z) if z != self.plan.options.zero => {
                self.plan.options.zero = z;
                self.plan_changed();
            }
            Ok(_) => {}
            Err(e) => self.message = Some(e.to_string()),
        }
    }
}
