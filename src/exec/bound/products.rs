//! The bounds of products: matmul and its grad (errors of the k terms add like independent
//! variables), and the grads of elementwise multiply and divide.

use super::*;

/// matmul: each output sums k products; errors of the k terms add like independent variables.
pub(super) fn matmul(a: &At) -> Vec<(VarId, f64)> {
    let (op, u) = (a.op, a.u);
    let (tx, ty) = (
        op.attr_bool("trans_x", false),
        op.attr_bool("trans_y", false),
    );
    let (Some(x), Some(y)) = (a.val("X"), a.val("Y")) else {
        return unbounded(op);
    };
    let mm = |a: &Tensor, b: &Tensor| {
        crate::exec::kernels::matmul::matmul(a, b, tx, ty)
            .map_or(f64::INFINITY, |t| max_abs(Some(&t)))
    };
    let k = contraction(x, tx, true);
    // Errors of the k terms add like independent variables: the gain of X's error is
    // the largest column norm of Y (√Σ y²), and the other way round.
    let terms = mm(&abs(x), &abs(y));
    let bound = a.e("X") * mm(&ones(x), &square(y)).sqrt()
        + mm(&square(x), &ones(y)).sqrt() * a.e("Y")
        + k.sqrt() * a.e("X") * a.e("Y")
        + (k.sqrt() + 1.0) * u * terms;
    a.stored("Out", bound)
}

/// matmul_grad: dX = dOut·Yᵀ sums over n (and broadcast batches), dY = Xᵀ·dOut over m.
pub(super) fn matmul_grad(a: &At) -> Vec<(VarId, f64)> {
    let (op, u) = (a.op, a.u);
    let (tx, ty) = (
        op.attr_bool("trans_x", false),
        op.attr_bool("trans_y", false),
    );
    let (Some(x), Some(y), Some(d)) = (a.val("X"), a.val("Y"), a.val("Out@GRAD")) else {
        return unbounded(op);
    };
    let g = |a: &Tensor, b: &Tensor, c: &Tensor| {
        crate::exec::kernels::matmul::matmul_grad(a, b, c, tx, ty)
            .map_or((f64::INFINITY, f64::INFINITY), |(p, q)| {
                (max_abs(Some(&p)), max_abs(Some(&q)))
            })
    };
    let (rx, ry) = g(&abs(x), &abs(y), &abs(d));
    let (from_d_x, from_d_y) = g(&square(x), &square(y), &ones(d));
    let (from_y, from_x) = g(&ones(x), &ones(y), &square(d));
    let (from_d_x, from_d_y, from_y, from_x) = (
        from_d_x.sqrt(),
        from_d_y.sqrt(),
        from_y.sqrt(),
        from_x.sqrt(),
    );
    // Contraction lengths: dX sums over n (and broadcast batches), dY over m.
    let n = d.numel().max(1) as f64 / x.numel().max(1) as f64 * contraction(x, tx, true);
    let mx = d.numel().max(1) as f64 / y.numel().max(1) as f64 * contraction(y, ty, false);
    let (ed, ex, ey) = (a.e("Out@GRAD"), a.e("X"), a.e("Y"));
    let mut v = a.stored(
        "X@GRAD",
        ed * from_d_x + from_y * ey + n.sqrt() * ed * ey + (n.sqrt() + 1.0) * u * rx,
    );
    v.extend(a.stored(
        "Y@GRAD",
        from_d_y * ed + from_x * ex + mx.sqrt() * ed * ex + (mx.sqrt() + 1.0) * u * ry,
    ));
    v
}

/// elementwise_mul_grad: each operand's gradient is dOut times the other operand, summed over its broadcast dims.
pub(super) fn mul_grad(a: &At) -> Vec<(VarId, f64)> {
    let u = a.u;
    let (ed, md) = (a.e("Out@GRAD"), a.m("Out@GRAD"));
    let mut v = Vec::new();
    for (slot, me, other) in [("X@GRAD", "X", "Y"), ("Y@GRAD", "Y", "X")] {
        let r = broadcast_ratio(a.val("Out@GRAD"), a.val(me));
        let (eo, mo) = (a.e(other), a.m(other));
        v.extend(a.stored(
            slot,
            r.sqrt() * (ed * mo + md * eo + ed * eo) + r.sqrt() * u * 2.0 * r * md * mo,
        ));
    }
    v
}

/// elementwise_div_grad: unbounded when Y's interval reaches 0.
pub(super) fn div_grad(a: &At) -> Vec<(VarId, f64)> {
    let (op, u) = (a.op, a.u);
    let lo = min_abs(a.val("Y")) - a.e("Y");
    if lo <= 0.0 {
        return unbounded(op);
    }
    let (ed, md, ex, mx, ey) = (
        a.e("Out@GRAD"),
        a.m("Out@GRAD"),
        a.e("X"),
        a.m("X"),
        a.e("Y"),
    );
    let rx = broadcast_ratio(a.val("Out@GRAD"), a.val("X"));
    let ry = broadcast_ratio(a.val("Out@GRAD"), a.val("Y"));
    let mut v = a.stored(
        "X@GRAD",
        rx * (ed / lo + md * ey / (lo * lo)) + rx * u * 2.0 * rx * md / lo,
    );
    v.extend(a.stored(
        "Y@GRAD",
        ry * (ed * mx / (lo * lo) + md * ex / (lo * lo) + 2.0 * md * mx * ey / lo.powi(3))
            + ry * u * 3.0 * ry * md * mx / (lo * lo),
    ));
    v
}

/// The contraction length of a matmul operand.
fn contraction(t: &Tensor, trans: bool, is_x: bool) -> f64 {
    let r = t.shape.len();
    let k = match r {
        0 => 1,
        1 => t.shape[0],
        _ => {
            let last = (is_x && !trans) || (!is_x && trans);
            if last {
                t.shape[r - 1]
            } else {
                t.shape[r - 2]
            }
        }
    };
    k.max(1) as f64
}
