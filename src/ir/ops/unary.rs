//! Element-by-element ops of one input: activations, scale, cast, assign and dropout.
//!
//! Facets outside the IR: the rule `spmd::Rule::Unary` (any layout passes through), the
//! kernels `exec::kernels::pointwise::Unary` (dropout's mask in `exec::interp::forward`),
//! and the `jax.nn`/`jnp` expressions of `export::ops`.

use super::{Family, Flops, Formula, Numel, OpDef};
use crate::ir::attr::AttrKind::{Bool, Float, Int, Str};
use crate::ir::infer::forward as infer;
use crate::ir::schema::{attr, one, req, AttrSpec, SlotSpec};
use crate::ir::InferFn;

const X: &[SlotSpec] = &[one("X")];
const OUT: &[SlotSpec] = &[one("Out")];
const NONE: &[AttrSpec] = &[];
const O: Numel = Numel::Out("Out");
const D: Numel = Numel::In("Out@GRAD");
const FREE: Formula = &[];

#[allow(clippy::too_many_arguments)]
const fn unary(
    name: &'static str,
    grad_name: &'static str,
    pir_name: &'static str,
    attrs: &'static [AttrSpec],
    infer: InferFn,
    forward: Formula,
    grad: Formula,
) -> OpDef {
    OpDef {
        name,
        grad_name,
        pir_name,
        family: Family::ElementwiseUnary,
        inputs: X,
        outputs: OUT,
        attrs,
        infer,
        saves: &[],
        differentiates: &["X"],
        shape_only: &[],
        flops: Flops { forward, grad },
    }
}

pub const RELU: OpDef = unary(
    "relu",
    "relu_grad",
    "pd_op.relu",
    NONE,
    infer::same_float,
    &[(1.0, O)],
    &[(1.0, D)],
);
// tanh form: x³, a multiply-add, tanh, then 0.5·x·(1+t); the grad about twice that.
pub const GELU: OpDef = unary(
    "gelu",
    "gelu_grad",
    "pd_op.gelu",
    &[attr("approximate", Bool)],
    infer::same_float,
    &[(5.0, O)],
    &[(10.0, D)],
);
// x·σ(x): exp, add, divide, multiply; the grad σ(x)(1 + x(1−σ(x))) about twice that.
pub const SILU: OpDef = unary(
    "silu",
    "silu_grad",
    "pd_op.silu",
    NONE,
    infer::same_float,
    &[(4.0, O)],
    &[(8.0, D)],
);
// 1 / (1 + exp(−x)): negate-exp, add, divide; the grad dy·σ(1 − σ) from the output.
pub const SIGMOID: OpDef = unary(
    "sigmoid",
    "sigmoid_grad",
    "pd_op.sigmoid",
    NONE,
    infer::same_float,
    &[(3.0, O)],
    &[(3.0, D)],
);
pub const SQUARE: OpDef = unary(
    "square",
    "square_grad",
    "pd_op.square",
    NONE,
    infer::same_float,
    &[(1.0, O)],
    &[(2.0, D)],
);
pub const SCALE: OpDef = OpDef {
    shape_only: &["X"],
    ..unary(
        "scale",
        "scale_grad",
        "pd_op.scale",
        &[
            attr("scale", Float),
            attr("bias", Float),
            attr("bias_after_scale", Bool),
        ],
        infer::same_float,
        &[(2.0, O)],
        &[(1.0, D)],
    )
};
pub const CAST: OpDef = OpDef {
    shape_only: &["X"],
    ..unary(
        "cast",
        "cast_grad",
        "pd_op.cast",
        &[req("out_dtype", Str)],
        infer::cast,
        FREE,
        FREE,
    )
};
pub const ASSIGN: OpDef = OpDef {
    shape_only: &["X"],
    ..unary(
        "assign",
        "assign_grad",
        "pd_op.assign",
        NONE,
        infer::same,
        FREE,
        FREE,
    )
};
/// Dropout also writes its keep mask, which the grad reads.
pub const DROPOUT: OpDef = OpDef {
    outputs: &[one("Out"), one("Mask")],
    saves: &["Mask"],
    shape_only: &["X"],
    ..unary(
        "dropout",
        "dropout_grad",
        "pd_op.dropout",
        &[
            attr("dropout_prob", Float),
            attr("seed", Int),
            attr("is_test", Bool),
        ],
        infer::dropout,
        &[(2.0, O)],
        &[(1.0, D)],
    )
};
