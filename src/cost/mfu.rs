//! Model FLOPs utilisation: the model's FLOPs (its serial forward and backward) over what
//! the devices could do in the step.

use super::device::{ComputeDType, Topology};
use super::work::{op_work, ElementBytes};
use crate::ir::Program;

/// Model FLOPs of a step: the forward and backward ops of `serial` (the unpartitioned
/// program), the numerator of MFU.
pub fn model_flops(serial: &Program, dtype: ComputeDType) -> f64 {
    serial
        .ops()
        .iter()
        .filter(|o| {
            matches!(
                o.ty.class(),
                crate::ir::OpClass::Forward | crate::ir::OpClass::Grad
            )
        })
        .map(|o| op_work(serial, o, ElementBytes(dtype.bytes())).flops)
        .sum()
}

/// Model FLOPs utilisation: model FLOPs / (step time × peak × devices used). `devices` is
/// the mesh's size, not the ranks simulated (symmetric ranks may be simulated once).
pub fn mfu(
    model_flops: f64,
    step_s: f64,
    devices: usize,
    topo: &Topology,
    dtype: ComputeDType,
) -> f64 {
    if step_s <= 0.0 {
        return 0.0;
    }
    model_flops / (step_s * topo.device.peak(dtype) * devices.max(1) as f64)
}
