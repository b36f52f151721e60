//! Normalisations over the dims from `begin_norm_axis` on: `layer_norm`
//! (`(x − mean) / sqrt(var + ε) · scale + bias`) and `rms_norm`.
//!
//! Facets outside the IR: the rules `spmd::layer_norm` (both), the kernels
//! `exec::kernels::normalize` and their bounds `exec::bound::norm`, the grad's completion
//! (the Scale and Bias gradients are
//! partial over the axes that split the leading dims) in `passes::complete_backward`, and
//! `layer_norm` and `rms_norm` in the exporter's prelude.

use super::{Family, Flops, Numel, OpDef};
use crate::ir::attr::AttrKind::{Float, Int};
use crate::ir::infer::forward as infer;
use crate::ir::schema::{attr, one, opt};

pub const LAYER_NORM: OpDef = OpDef {
    name: "layer_norm",
    grad_name: "layer_norm_grad",
    pir_name: "pd_op.layer_norm",
    family: Family::Norm,
    inputs: &[one("X"), opt("Scale"), opt("Bias")],
    outputs: &[one("Y"), one("Mean"), one("Variance")],
    attrs: &[attr("begin_norm_axis", Int), attr("epsilon", Float)],
    infer: infer::layer_norm,
    saves: &["Mean", "Variance"],
    differentiates: &["X", "Scale", "Bias"],
    shape_only: &["Bias"],
    // Mean, variance, normalise, scale and shift; the grad's two reductions and the
    // parameter gradients.
    flops: Flops {
        forward: &[(8.0, Numel::Out("Y"))],
        grad: &[(15.0, Numel::In("Y@GRAD"))],
    },
};

/// `rms_norm` (Llama's): `x / sqrt(mean(x²) + ε) · scale` over the dims from
/// `begin_norm_axis` on. `InvVar` is the saved `1 / sqrt(mean(x²) + ε)` per row. Paddle's
/// kernel is `rms_norm` (its SPMD rule is registered as `fused_rms_norm`).
pub const RMS_NORM: OpDef = OpDef {
    name: "rms_norm",
    grad_name: "rms_norm_grad",
    pir_name: "pd_op.rms_norm",
    family: Family::Norm,
    inputs: &[one("X"), one("Scale")],
    outputs: &[one("Y"), one("InvVar")],
    attrs: &[attr("begin_norm_axis", Int), attr("epsilon", Float)],
    infer: infer::rms_norm,
    saves: &["InvVar"],
    differentiates: &["X", "Scale"],
    shape_only: &[],
    // Square and add per element, then two multiplies (by the row's 1/rms and the scale);
    // the grad: dy·scale, its product with x̂ and the row sum, the correction, the scale's
    // gradient and its sum.
    flops: Flops {
        forward: &[(4.0, Numel::Out("Y"))],
        grad: &[(8.0, Numel::In("Y@GRAD"))],
    },
};
