//! Reductions: `reduce_sum` and `reduce_mean` over attribute-given axes, `mean` over all.
//!
//! Facets outside the IR: the rule `spmd::reduction` (a split reduced axis leaves a partial
//! sum), the kernels `exec::kernels::normalize`, and `jnp.{sum, mean}` in `export::ops`.

use super::{Family, Flops, Numel, OpDef};
use crate::ir::attr::AttrKind::{Bool, Ints};
use crate::ir::infer::forward as infer;
use crate::ir::schema::{attr, one};

// One add per input element; the grad broadcasts.
pub const REDUCE_SUM: OpDef = OpDef {
    name: "reduce_sum",
    grad_name: "reduce_sum_grad",
    pir_name: "pd_op.sum",
    family: Family::Reduce,
    inputs: &[one("X")],
    outputs: &[one("Out")],
    attrs: &[
        attr("dim", Ints),
        attr("keep_dim", Bool),
        attr("reduce_all", Bool),
    ],
    infer: infer::reduce,
    saves: &[],
    differentiates: &["X"],
    shape_only: &["X"],
    flops: Flops {
        forward: &[(1.0, Numel::In("X"))],
        grad: &[],
    },
};

pub const REDUCE_MEAN: OpDef = OpDef {
    name: "reduce_mean",
    grad_name: "reduce_mean_grad",
    pir_name: "pd_op.mean",
    ..REDUCE_SUM
};

// The grad divides every element by the count.
pub const MEAN: OpDef = OpDef {
    name: "mean",
    grad_name: "mean_grad",
    pir_name: "pd_op.mean_all",
    family: Family::Mean,
    attrs: &[],
    infer: infer::mean,
    flops: Flops {
        forward: &[(1.0, Numel::In("X"))],
        grad: &[(1.0, Numel::Out("X@GRAD"))],
    },
    ..REDUCE_SUM
};
