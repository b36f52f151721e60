//! The bounds of the Mixture-of-Experts routing ops. Routing is discontinuous: where a
//! token's k-th and (k+1)-th gates are within twice the gates' bound of each other, a
//! rank's rounding could pick the other expert, which moves that token, and through the
//! capacity the later tokens of both experts. The bound then covers any routing: a slot
//! may hold any token's row or none (2·max|X| more), a weight any gate or none (max|gates|
//! more). Elsewhere the routing is the serial one, the rows are copies and the combine is a
//! k-term weighted sum.

use super::At;
use crate::ir::VarId;

/// The smallest gap between a token's k-th and (k+1)-th largest gate.
fn top_k_margin(a: &At, k: usize) -> f64 {
    let Some(g) = a.val("Gates") else {
        return 0.0;
    };
    let (e, v) = (g.shape.get(1).copied().unwrap_or(0), g.to_f64());
    if k >= e {
        return f64::INFINITY;
    }
    v.chunks(e.max(1))
        .map(|row| {
            let mut r = row.to_vec();
            crate::sort::sort_by(&mut r, |x, y| y.total_cmp(x));
            r[k - 1] - r[k]
        })
        .fold(f64::INFINITY, f64::min)
}

fn k(a: &At) -> f64 {
    a.op.attr_int("k", 1).max(1) as f64
}

pub(super) fn dispatch(a: &At) -> Vec<(VarId, f64)> {
    let choices = a.op.attr_int("k", 1).max(1) as usize;
    let may_flip = top_k_margin(a, choices) <= 2.0 * a.e("Gates");
    let (rows, gates) = if may_flip {
        (2.0 * a.m("X"), a.m("Gates"))
    } else {
        (0.0, 0.0)
    };
    let mut v = a.one("Out", a.e("X") + rows);
    v.extend(a.one("Weights", a.e("Gates") + gates));
    v.extend(a.one("Index", 0.0));
    v
}

pub(super) fn dispatch_grad(a: &At) -> Vec<(VarId, f64)> {
    // A token's row gradient adds its k slots' (√k for independent errors); a gate's
    // gradient is its weight's, copied.
    let k = k(a);
    let mut v = a.stored(
        "X@GRAD",
        k.sqrt() * a.e("Out@GRAD") + k.sqrt() * a.u * k * a.m("Out@GRAD"),
    );
    v.extend(a.one("Gates@GRAD", a.e("Weights@GRAD")));
    v
}

pub(super) fn combine(a: &At) -> Vec<(VarId, f64)> {
    let k = k(a);
    let (ex, mx, ew, mw) = (a.e("X"), a.m("X"), a.e("Weights"), a.m("Weights"));
    a.stored(
        "Out",
        k.sqrt() * (ew * mx + mw * ex + ew * ex) + (k.sqrt() + 1.0) * a.u * k * mw * mx,
    )
}

pub(super) fn combine_grad(a: &At) -> Vec<(VarId, f64)> {
    // A slot's gradient is one token's weighted output gradient; a weight's gradient is a
    // dot product over the width h.
    let h = a
        .val("X")
        .and_then(|x| x.shape.get(2).copied())
        .unwrap_or(1) as f64;
    let (ex, mx, ew, mw) = (a.e("X"), a.m("X"), a.e("Weights"), a.m("Weights"));
    let (ed, md) = (a.e("Out@GRAD"), a.m("Out@GRAD"));
    let mut v = a.stored("X@GRAD", ew * md + mw * ed + ew * ed + a.u * mw * md);
    v.extend(a.stored(
        "Weights@GRAD",
        h.sqrt() * (ex * md + mx * ed + ex * ed) + (h.sqrt() + 1.0) * a.u * h * mx * md,
    ));
    v
}
