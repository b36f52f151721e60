//! Where a step's time goes: each op's kernel time, summed per op family over every rank and
//! step (`bench --what step` prints the ranks' beside the serial step's, so the work a plan
//! adds — a data-parallel gradient's scale and all-reduce, layer norms every tensor-parallel
//! rank repeats — shows apart from what the executor itself costs). Natively only: wasm32
//! has no clock (`now` is `None` there and nothing is recorded).

use crate::ir::Op;
use std::collections::HashMap;
use std::time::Duration;

/// Kernel time per op family.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OpTimes {
    by_family: HashMap<String, Duration>,
}

/// An op's family: its type, with the data-parallel gradient synchronisation's ops apart
/// (a `scale` there is the 1/N of every gradient, not a model's scale).
pub fn family(op: &Op) -> String {
    if op.namescope.contains("data_parallel") {
        format!("{} (gradient sync)", op.ty)
    } else {
        op.ty.to_string()
    }
}

/// The clock's reading, where there is a clock.
pub fn now() -> Option<std::time::Instant> {
    #[cfg(not(target_arch = "wasm32"))]
    return Some(std::time::Instant::now());
    #[cfg(target_arch = "wasm32")]
    None
}

impl OpTimes {
    /// Adds the time since `start` to `op`'s family.
    pub fn add(&mut self, op: &Op, start: std::time::Instant) {
        *self.by_family.entry(family(op)).or_default() += start.elapsed();
    }

    /// Adds every family of `other`.
    pub fn merge(&mut self, other: &OpTimes) {
        for (f, d) in &other.by_family {
            *self.by_family.entry(f.clone()).or_default() += *d;
        }
    }

    /// The families and their seconds, longest first (ties by name).
    pub fn sorted(&self) -> Vec<(String, f64)> {
        let mut v: Vec<(String, f64)> = self
            .by_family
            .iter()
            .map(|(f, d)| (f.clone(), d.as_secs_f64()))
            .collect();
        crate::sort::sort_by(&mut v, |a, b| {
            b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0))
        });
        v
    }
}
