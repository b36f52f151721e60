//! A Mixture-of-Experts layer's routing, GShard's way: `moe_dispatch` sends each token to
//! its top-k experts, at most `capacity` tokens per expert and group, and `moe_combine`
//! brings the experts' outputs back, weighted by the gates. The experts themselves are
//! ordinary ops between the two.
//!
//! The drop rule, which serial and distributed runs share (`docs/moe.md`):
//! - tokens are taken in groups of `group_size` (the token dim `S` is a whole number of
//!   groups; a group is what one rank routes when the token dim is split);
//! - in a group, the entries (choice j, token s) are ranked choice-major — every token's
//!   first choice, in token order, then every second choice — as GShard and Paddle's
//!   `moe_gate_dispatch` rank them, so a first choice is never dropped for a second;
//! - an entry's position is the number of earlier entries of its group with the same
//!   expert; it is kept if that is below `capacity`, and dropped (weight 0, index −1)
//!   otherwise.
//!
//! Facets outside the IR: the rules `spmd::moe`, the kernels `exec::kernels::moe`, their
//! bounds in `exec::bound::moe`, and the prelude's `moe_dispatch`/`moe_combine` in the
//! exporter.

use super::{Family, Flops, Numel, OpDef};
use crate::ir::attr::AttrKind::Int;
use crate::ir::infer::moe as infer;
use crate::ir::schema::{one, req};

/// `X [S, H]`, `Gates [S, E]` (probabilities) → `Out [E, G·C, H]` (expert e's tokens, group
/// by group, C slots each, zero where unfilled), `Weights [S, k]` (the kept choices' gates),
/// `Index [k, S]` (i64: `e·C + position` within the token's group, −1 if dropped).
pub const MOE_DISPATCH: OpDef = OpDef {
    name: "moe_dispatch",
    grad_name: "moe_dispatch_grad",
    pir_name: "pd_op.moe_gate_dispatch",
    family: Family::MoeDispatch,
    inputs: &[one("X"), one("Gates")],
    outputs: &[one("Out"), one("Weights"), one("Index")],
    attrs: &[req("k", Int), req("capacity", Int), req("group_size", Int)],
    infer: infer::dispatch,
    saves: &["Index"],
    differentiates: &["X", "Gates"],
    shape_only: &["X", "Gates"],
    // The top-k scan compares each gate once per choice (counted as 2 per gate); the rows
    // are copies. The grad gathers the rows back and scatters the weights' gradients.
    flops: Flops {
        forward: &[(2.0, Numel::In("Gates"))],
        grad: &[(1.0, Numel::In("Out@GRAD"))],
    },
};

/// `X [E, G·C, H]` (the experts' outputs), `Weights [S, k]`, `Index [k, S]` → `Out [S, H]`:
/// each token's kept choices' rows, weighted by their gates and summed.
pub const MOE_COMBINE: OpDef = OpDef {
    name: "moe_combine",
    grad_name: "moe_combine_grad",
    pir_name: "pd_op.moe_combine",
    family: Family::MoeCombine,
    inputs: &[one("X"), one("Weights"), one("Index")],
    outputs: &[one("Out")],
    attrs: &[req("capacity", Int), req("group_size", Int)],
    infer: infer::combine,
    saves: &[],
    differentiates: &["X", "Weights"],
    shape_only: &[],
    // A multiply-add per kept choice and element (S·k·H, counted as the weights' elements
    // times the width); the grad does it twice (the rows' and the weights' gradients).
    flops: Flops {
        forward: &[(2.0, Numel::CombineTerms)],
        grad: &[(4.0, Numel::CombineTerms)],
    },
};
