//! `softmax_with_cross_entropy`: the softmax of the logits and the cross-entropy against
//! hard or soft labels.
//!
//! Facets outside the IR: the rule `spmd::cross_entropy`, `DistImpl::CrossEntropyVocab`
//! (lowered to `c_softmax_with_cross_entropy` in `passes::partition::lower`), the kernels
//! `exec::kernels::normalize` and `exec::kernels::vocab_ce`, and the prelude's
//! `softmax_with_cross_entropy` in the exporter.

use super::{Family, Flops, Numel, OpDef};
use crate::ir::attr::AttrKind::{Bool, Int};
use crate::ir::infer::forward as infer;
use crate::ir::schema::{attr, one};

pub const SOFTMAX_WITH_CROSS_ENTROPY: OpDef = OpDef {
    name: "softmax_with_cross_entropy",
    grad_name: "softmax_with_cross_entropy_grad",
    pir_name: "pd_op.cross_entropy_with_softmax",
    family: Family::CrossEntropy,
    inputs: &[one("Logits"), one("Label")],
    outputs: &[one("Softmax"), one("Loss")],
    attrs: &[attr("soft_label", Bool), attr("axis", Int)],
    infer: infer::softmax_ce,
    saves: &["Softmax"],
    differentiates: &["Logits"],
    shape_only: &["Logits"],
    // The softmax (five per logit) and the picked log (two per loss); the grad is
    // softmax − one-hot, scaled by dLoss.
    flops: Flops {
        forward: &[(5.0, Numel::In("Logits")), (2.0, Numel::Out("Loss"))],
        grad: &[(2.0, Numel::In("Softmax"))],
    },
};
