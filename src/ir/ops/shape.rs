//! Ops that move elements without arithmetic: `reshape2`, `transpose2`, `split`, `concat`.
//!
//! Facets outside the IR: the rules `spmd::{reshape, transpose, split, concat}`, the
//! kernels `exec::kernels::layout`, `DistImpl::{Reshape, Transpose}`, and the `jnp`
//! expressions of `export::ops`.

use super::{Family, Flops, OpDef};
use crate::ir::attr::AttrKind::{Int, Ints};
use crate::ir::infer::forward as infer;
use crate::ir::schema::{attr, list, one, req};

const FREE: Flops = Flops {
    forward: &[],
    grad: &[],
};

pub const RESHAPE2: OpDef = OpDef {
    name: "reshape2",
    grad_name: "reshape2_grad",
    pir_name: "pd_op.reshape",
    family: Family::Reshape,
    inputs: &[one("X")],
    outputs: &[one("Out")],
    attrs: &[req("shape", Ints)],
    infer: infer::reshape,
    saves: &[],
    differentiates: &["X"],
    shape_only: &["X"],
    flops: FREE,
};

pub const TRANSPOSE2: OpDef = OpDef {
    name: "transpose2",
    grad_name: "transpose2_grad",
    pir_name: "pd_op.transpose",
    family: Family::Transpose,
    attrs: &[req("axis", Ints)],
    infer: infer::transpose,
    ..RESHAPE2
};

pub const SPLIT: OpDef = OpDef {
    name: "split",
    grad_name: "split_grad",
    pir_name: "pd_op.split",
    family: Family::Split,
    outputs: &[list("Out")],
    attrs: &[attr("num", Int), attr("sections", Ints), attr("axis", Int)],
    infer: infer::split,
    ..RESHAPE2
};

pub const CONCAT: OpDef = OpDef {
    name: "concat",
    grad_name: "concat_grad",
    pir_name: "pd_op.concat",
    family: Family::Concat,
    inputs: &[list("X")],
    attrs: &[attr("axis", Int)],
    infer: infer::concat,
    ..RESHAPE2
};
