//! `matmul_v2`: `Out = X · Y` over the last two dims (optionally transposed), batched over
//! the leading ones.
//!
//! Facets outside the IR: the rule `spmd::matmul`, the kernel `exec::kernels::matmul`, the
//! implementations `DistImpl::Matmul{Column,Row,Replicate}` chosen in
//! `passes::complete::choose_impl`, and the lowering `jnp.matmul` in `export::ops`.

use super::{Family, Flops, Numel, OpDef};
use crate::ir::attr::AttrKind::Bool;
use crate::ir::infer::forward as infer;
use crate::ir::schema::{attr, one};

pub const MATMUL_V2: OpDef = OpDef {
    name: "matmul_v2",
    grad_name: "matmul_v2_grad",
    pir_name: "pd_op.matmul",
    family: Family::Matmul,
    inputs: &[one("X"), one("Y")],
    outputs: &[one("Out")],
    attrs: &[attr("trans_x", Bool), attr("trans_y", Bool)],
    infer: infer::matmul,
    saves: &[],
    differentiates: &["X", "Y"],
    shape_only: &[],
    // A multiply and an add per term; the grad is two matmuls of the same size.
    flops: Flops {
        forward: &[(2.0, Numel::MatmulTerms)],
        grad: &[(4.0, Numel::MatmulTerms)],
    },
};
