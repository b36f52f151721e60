//! Verification: the distributed step against the serial one, tensor by tensor. A tensor
//! passes when its largest absolute difference is within tolerance: f64 relative 1e-9 of
//! the largest serial magnitude; f32 1e-5 of it plus 1e-7.

use super::run::Log;
use super::tensor::Tensor;
use crate::ir::DType;
use serde::Serialize;

/// One compared tensor.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Check {
    pub tensor: String,
    pub max_abs_diff: f64,
    pub tolerance: f64,
    pub pass: bool,
}

/// The tolerance for a tensor of `dtype` whose largest serial magnitude is `max_ref`.
pub fn tolerance(dtype: DType, max_ref: f64) -> f64 {
    match dtype {
        DType::F64 => 1e-9 * max_ref,
        _ => 1e-5 * max_ref + 1e-7,
    }
}

/// Compares two tensors.
pub fn compare(name: &str, serial: &Tensor, dist: &Tensor) -> Check {
    let (a, b) = (serial.to_f64(), dist.to_f64());
    let max_ref = a.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let tol = tolerance(serial.dtype(), max_ref);
    let diff = if a.len() != b.len() || serial.shape != dist.shape {
        f64::INFINITY
    } else {
        a.iter().zip(&b).fold(0.0f64, |m, (x, y)| {
            if x.is_nan() || y.is_nan() {
                f64::INFINITY
            } else {
                m.max((x - y).abs())
            }
        })
    };
    Check {
        tensor: name.to_string(),
        max_abs_diff: diff,
        tolerance: tol,
        pass: diff <= tol,
    }
}

/// Every loss, first-step gradient and final parameter, serial against distributed.
pub fn verify(serial: &Log, dist: &Log) -> Vec<Check> {
    let mut checks = Vec::new();
    let dtype = serial.first_loss.as_ref().map_or(DType::F32, Tensor::dtype);
    for (i, (a, b)) in serial.losses.iter().zip(&dist.losses).enumerate() {
        let t = |v: f64| Tensor::float(dtype, vec![], vec![v]);
        checks.push(compare(&format!("loss (step {})", i + 1), &t(*a), &t(*b)));
    }
    for ((name, a), (_, b)) in serial.grads.iter().zip(&dist.grads) {
        checks.push(compare(&format!("{name}@GRAD (step 1)"), a, b));
    }
    for ((name, a), (_, b)) in serial.params.iter().zip(&dist.params) {
        checks.push(compare(
            &format!("{name} (after step {})", serial.losses.len()),
            a,
            b,
        ));
    }
    checks
}
