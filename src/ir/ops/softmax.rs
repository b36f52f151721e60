//! `softmax` over one axis, and `fused_softmax_mask_upper_triangle` (causal attention's
//! scores: the upper triangle masked, softmax over the last axis of a `[.., s, s]` matrix).
//!
//! Facets outside the IR: the rule `spmd::softmax` (the softmax axes replicated), the
//! kernels `exec::kernels::normalize`, `DistImpl::Softmax`, and `jax.nn.softmax` in
//! `export::ops`.

use super::{Family, Flops, Numel, OpDef};
use crate::ir::attr::AttrKind::Int;
use crate::ir::infer::forward as infer;
use crate::ir::schema::{attr, one};

const O: Numel = Numel::Out("Out");
const D: Numel = Numel::In("Out@GRAD");

// max, subtract, exp, sum, divide; the grad y·(dy − Σ y·dy).
pub const SOFTMAX: OpDef = OpDef {
    name: "softmax",
    grad_name: "softmax_grad",
    pir_name: "pd_op.softmax",
    family: Family::Softmax,
    inputs: &[one("X")],
    outputs: &[one("Out")],
    attrs: &[attr("axis", Int)],
    infer: infer::softmax,
    saves: &["Out"],
    differentiates: &["X"],
    shape_only: &["X"],
    flops: Flops {
        forward: &[(5.0, O)],
        grad: &[(4.0, D)],
    },
};

// The mask adds a select per element.
pub const MASKED: OpDef = OpDef {
    name: "fused_softmax_mask_upper_triangle",
    grad_name: "fused_softmax_mask_upper_triangle_grad",
    pir_name: "pd_op.fused_softmax_mask_upper_triangle",
    family: Family::MaskedSoftmax,
    inputs: &[one("X")],
    outputs: &[one("Out")],
    attrs: &[],
    infer: infer::masked_softmax,
    saves: &["Out"],
    differentiates: &["X"],
    shape_only: &["X"],
    flops: Flops {
        forward: &[(6.0, O)],
        grad: &[(4.0, D)],
    },
};
