//! `repeat_interleave`: every slice of dim `axis` repeated `repeats` times in place. Grouped-
//! query attention repeats each key/value head for the query heads that share it.
//!
//! Facets outside the IR: the rule `Rule::Repeat` (the repeated dim keeps its split: a
//! rank's block of key/value heads repeats into exactly its block of query heads), the
//! kernels `exec::kernels::decoder::repeat_interleave{,_grad}`, their bound in
//! `exec::bound::decoder`, and `jnp.repeat` in `export::ops`.

use super::{Family, Flops, Numel, OpDef};
use crate::ir::attr::AttrKind::Int;
use crate::ir::infer::forward as infer;
use crate::ir::schema::{attr, one, req};

pub const REPEAT_INTERLEAVE: OpDef = OpDef {
    name: "repeat_interleave",
    grad_name: "repeat_interleave_grad",
    pir_name: "pd_op.repeat_interleave",
    family: Family::Repeat,
    inputs: &[one("X")],
    outputs: &[one("Out")],
    attrs: &[req("repeats", Int), attr("axis", Int)],
    infer: infer::repeat_interleave,
    saves: &[],
    differentiates: &["X"],
    shape_only: &["X"],
    // A copy; the grad adds each slice's copies.
    flops: Flops {
        forward: &[],
        grad: &[(1.0, Numel::In("Out@GRAD"))],
    },
};
