//! Verification: the distributed step against the serial one, tensor by tensor and copy by
//! copy.
//!
//! The rule: a tensor passes when every copy of it (every replica the mesh holds) is within
//! `TOLERANCE_FACTOR × E` of the serial value, where `E` is the error bound the serial run
//! carried for that tensor (`bound.rs`): how far rounding can have moved it, measured from
//! the magnitudes of the values that produced it. Both runs are within about `E` of the
//! exact value, so they are within `2E` of each other; the factor leaves a margin for the
//! first-order analysis and for the distributed run's own extra roundings (partial values
//! stored before they are summed). A floor of a few smallest normal numbers absorbs
//! underflow. No other constant enters: a tensor whose bound is `1e-20` is compared at
//! `1e-20`, so a missing synchronisation is caught however small the tensor is.
//!
//! Every copy must also equal every other copy of the same tensor, bit for bit. Our
//! collectives hand one result to every member (reduced in rank order, then copied), and
//! the replicas of a tensor run the same ops on the same inputs, so a correct plan's
//! replicas are identical (0.0 difference on every scenario, ZeRO stage and pipeline
//! checked; `verify_random` checks random plans). A synchronisation missing on one rank
//! breaks that at any depth, where the serial bound, which grows geometrically with depth,
//! may not see it.
//!
//! Verification also checks that it compared what it should: the serial and distributed
//! logs must record the same tensors under the same names (a missing or extra one is a
//! failed check), so "0 of 0" cannot pass.

use super::run::{Log, Record};
use super::tensor::Tensor;
use crate::ir::DType;
use serde::{Deserialize, Serialize};

/// How many serial error bounds a distributed value may differ by.
pub const TOLERANCE_FACTOR: f64 = 8.0;

/// One compared tensor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Check {
    pub tensor: String,
    /// The largest difference over every element of every copy.
    pub max_abs_diff: f64,
    pub tolerance: f64,
    /// How many copies of the tensor the distributed run holds (all compared).
    pub copies: usize,
    /// The largest difference between two copies (must be 0: replicas are identical).
    pub replica_diff: f64,
    pub pass: bool,
    /// Why a check that compares no values failed (the structural checks of
    /// `sync_check`); None for value comparisons.
    #[serde(default)]
    pub note: Option<String>,
}

/// The tolerance for a tensor of `dtype` whose serial error bound is `bound`.
pub fn tolerance(dtype: DType, bound: f64) -> f64 {
    let tiny = match dtype {
        DType::F32 => f64::from(f32::MIN_POSITIVE),
        DType::F64 | DType::I64 => f64::MIN_POSITIVE,
    };
    TOLERANCE_FACTOR * bound + 16.0 * tiny
}

/// The largest elementwise difference (∞ for a shape mismatch or a NaN).
pub fn max_difference(a: &Tensor, b: &Tensor) -> f64 {
    if a.shape != b.shape || a.numel() != b.numel() {
        return f64::INFINITY;
    }
    a.to_f64().iter().zip(b.to_f64()).fold(0.0f64, |m, (x, y)| {
        if x.is_nan() || y.is_nan() {
            f64::INFINITY
        } else {
            m.max((x - y).abs())
        }
    })
}

/// Compares every copy of a distributed tensor with the serial one. With per-element
/// bounds, each element is held to its own tolerance, and the check reports the element
/// closest to (or furthest beyond) its tolerance.
pub fn compare(name: &str, serial: &Record, dist: &Record) -> Check {
    let mut check = against_serial(name, serial, dist);
    check.replica_diff = replica_difference(dist);
    check.pass &= check.replica_diff == 0.0;
    check
}

/// The largest difference between the first copy and any other (∞ for a shape mismatch or
/// a NaN).
pub fn replica_difference(dist: &Record) -> f64 {
    let Some(first) = dist.copies.first() else {
        return 0.0;
    };
    dist.copies[1..]
        .iter()
        .map(|c| max_difference(first, c))
        .fold(0.0, f64::max)
}

/// Every copy against the serial value.
fn against_serial(name: &str, serial: &Record, dist: &Record) -> Check {
    let fail = |tolerance| Check {
        tensor: name.to_string(),
        max_abs_diff: f64::INFINITY,
        tolerance,
        copies: dist.copies.len(),
        replica_diff: 0.0,
        pass: false,
        note: None,
    };
    let Some(s) = serial.value() else {
        return fail(0.0);
    };
    if dist.copies.is_empty() {
        return fail(0.0);
    }
    let dtype = s.dtype();
    let tol = tolerance(dtype, serial.bound);
    let elems = serial.elem_bounds.as_ref().filter(|e| e.len() == s.numel());
    let Some(elems) = elems else {
        let diff = dist
            .copies
            .iter()
            .map(|d| max_difference(s, d))
            .fold(0.0, f64::max);
        return Check {
            pass: diff <= tol,
            max_abs_diff: diff,
            ..fail(tol)
        };
    };
    let base = s.to_f64();
    // The element with the largest diff / tolerance ratio.
    let (mut worst_ratio, mut worst) = (-1.0f64, (0.0, tolerance(dtype, 0.0)));
    for d in &dist.copies {
        if d.shape != s.shape {
            return fail(tol);
        }
        for ((a, b), e) in base.iter().zip(d.to_f64()).zip(elems) {
            let diff = if a.is_nan() || b.is_nan() {
                f64::INFINITY
            } else {
                (a - b).abs()
            };
            let t = tolerance(dtype, *e);
            let ratio = diff / t;
            if ratio > worst_ratio {
                (worst_ratio, worst) = (ratio, (diff, t));
            }
        }
    }
    Check {
        pass: worst_ratio <= 1.0,
        max_abs_diff: worst.0,
        tolerance: worst.1,
        ..fail(tol)
    }
}

fn missing(name: &str) -> Check {
    Check {
        tensor: name.to_string(),
        max_abs_diff: f64::INFINITY,
        tolerance: 0.0,
        copies: 0,
        replica_diff: 0.0,
        pass: false,
        note: None,
    }
}

fn pair(
    checks: &mut Vec<Check>,
    serial: &[Record],
    dist: &[Record],
    label: &dyn Fn(&str) -> String,
) {
    for s in serial {
        match dist.iter().find(|d| d.name == s.name) {
            Some(d) => checks.push(compare(&label(&s.name), s, d)),
            None => checks.push(missing(&format!(
                "{} (missing in the distributed run)",
                label(&s.name)
            ))),
        }
    }
    for d in dist
        .iter()
        .filter(|d| !serial.iter().any(|s| s.name == d.name))
    {
        checks.push(missing(&format!(
            "{} (missing in the serial run)",
            label(&d.name)
        )));
    }
}

/// Every loss, first-step gradient and final parameter, serial against distributed: one
/// check per step, per gradient and per parameter, or a failed check for what is missing.
pub fn verify(serial: &Log, dist: &Log) -> Vec<Check> {
    let mut checks = Vec::new();
    pair(
        &mut checks,
        &serial.loss_records,
        &dist.loss_records,
        &|n| n.to_string(),
    );
    pair(&mut checks, &serial.grads, &dist.grads, &|n| {
        format!("{n}@GRAD (step 1)")
    });
    let steps = serial.loss_records.len();
    pair(&mut checks, &serial.params, &dist.params, &|n| {
        format!("{n} (after step {steps})")
    });
    if checks.is_empty() {
        checks.push(missing("nothing was recorded"));
    }
    checks.extend(dist.structural.iter().cloned());
    checks
}
