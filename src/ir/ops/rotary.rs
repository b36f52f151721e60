//! `fused_rotary_position_embedding`: the rotary position embedding of one tensor
//! `[batch, seq, heads, head_dim]` by tables `Sin` and `Cos` `[1, seq, 1, head_dim]`:
//! each element is rotated with its partner (adjacent pairs in the neox style, the two
//! halves otherwise, Llama's `rotate_half`). Paddle's op takes q, k and v together; ShardLab
//! rotates each with its own op, which is Paddle's op with k and v absent.
//!
//! Facets outside the IR: the rule `spmd::rotary` (head_dim replicated; the sequence may
//! stay split, the tables follow it), the kernel `exec::kernels::decoder::rope`, its bound
//! in `exec::bound::decoder`, and `rope` in the exporter's prelude.

use super::{Family, Flops, Numel, OpDef};
use crate::ir::attr::AttrKind::Bool;
use crate::ir::infer::forward as infer;
use crate::ir::schema::{attr, one};

pub const FUSED_ROTARY_POSITION_EMBEDDING: OpDef = OpDef {
    name: "fused_rotary_position_embedding",
    grad_name: "fused_rotary_position_embedding_grad",
    pir_name: "pd_op.fused_rotary_position_embedding",
    family: Family::Rotary,
    inputs: &[one("X"), one("Sin"), one("Cos")],
    outputs: &[one("Out")],
    attrs: &[attr("use_neox_rotary_style", Bool)],
    infer: infer::rope,
    saves: &[],
    differentiates: &["X"],
    shape_only: &["X"],
    // Two multiplies and an add per element, forward and back (the grad is the inverse
    // rotation).
    flops: Flops {
        forward: &[(3.0, Numel::Out("Out"))],
        grad: &[(3.0, Numel::In("Out@GRAD"))],
    },
};
