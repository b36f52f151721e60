//! The bounds of the rotary embedding and of repeat_interleave's grad.

use super::At;
use crate::ir::VarId;

/// `out_i = x_i cos_i ± x_p sin_i` (and its transpose for the grad, the same form): two
/// products and an add, with the tables' own errors.
pub(super) fn rope(a: &At, input: &str, output: &str) -> Vec<(VarId, f64)> {
    let (mc, ms) = (a.m("Cos"), a.m("Sin"));
    let (mx, ex) = (a.m(input), a.e(input));
    a.stored(
        output,
        ex * (mc + ms) + mx * (a.e("Cos") + a.e("Sin")) + 3.0 * a.u * mx * (mc + ms),
    )
}

/// Each input slice's gradient adds its `repeats` copies (√r for independent errors, as
/// the other sums).
pub(super) fn repeat_grad(a: &At) -> Vec<(VarId, f64)> {
    let r = a.op.attr_int("repeats", 1).max(1) as f64;
    a.stored(
        "X@GRAD",
        r.sqrt() * a.e("Out@GRAD") + r.sqrt() * a.u * r * a.m("Out@GRAD"),
    )
}
