//! The bounds of the softmax cross-entropy, forward and grad.

use super::*;

/// softmax_with_cross_entropy_grad: d (p Σlabel − label).
pub(super) fn softmax_ce_grad(a: &At) -> Vec<(VarId, f64)> {
    let (op, u) = (a.op, a.u);
    let soft = op.attr_bool("soft_label", false);
    let axis = op.attr_int("axis", -1);
    let label_l1 = if soft {
        row_abs_sum(a.val("Label"), axis)
    } else {
        1.0
    };
    let (es, el, ed) = (a.e("Softmax"), a.e("Label"), a.e("Loss@GRAD"));
    let (ms, ml, md) = (
        a.m("Softmax"),
        if soft { a.m("Label") } else { 1.0 },
        a.m("Loss@GRAD"),
    );
    let n = axis_len(a.val("Softmax"), axis) as f64;
    // d (p Σlabel − label): the label total is summed in f64 (n terms).
    let inner = ms * label_l1 + ml;
    a.stored(
        "Logits@GRAD",
        ed * inner + md * (es * label_l1 + el * (n * ms + 1.0)) + (n + 2.0) * u * md * inner,
    )
}

/// The largest Σ|x| along `axis` (the L1 norm of a soft-label row).
fn row_abs_sum(t: Option<&Tensor>, axis: i64) -> f64 {
    let Some(t) = t else { return 0.0 };
    let n = axis_len(Some(t), axis);
    let r = t.shape.len() as i64;
    let a = usize::try_from(if axis < 0 { axis + r } else { axis }).unwrap_or(0);
    let inner: usize = t.shape.iter().skip(a + 1).product();
    let v = t.to_f64();
    let outer = v.len() / (n * inner).max(1);
    let mut best: f64 = 0.0;
    for o in 0..outer {
        for i in 0..inner {
            let s: f64 = (0..n).map(|j| v[o * n * inner + j * inner + i].abs()).sum();
            best = best.max(s);
        }
    }
    best
}

pub(super) fn softmax_ce(op: &Op, view: &View, u: f64) -> Vec<(VarId, f64)> {
    let get = |s: &str| op.input(s).first().copied();
    let Some(logits) = get("Logits").and_then(|v| view.value(v)) else {
        return unbounded(op);
    };
    let e = |s: &str| get(s).map_or(0.0, |v| view.e(v));
    let a = op.attr_int("axis", -1);
    let n = axis_len(Some(logits), a) as f64;
    let soft = op.attr_bool("soft_label", false);
    let sm_out = op.output("Softmax").first().copied();
    let sm = sm_out.and_then(|v| view.after(v));
    let mp = max_abs(sm);
    let el = e("Logits");
    let ml = max_abs(Some(logits));
    let mut v: Vec<(VarId, f64)> = sm_out
        .map(|o| (o, (2.0 * mp * el + (n + 4.0) * u * mp).min(1.0) + u * mp))
        .into_iter()
        .collect();
    // −log p_c = logsumexp(x) − x_c moves by at most 2 E(x); with soft labels the row
    // total of |label| multiplies it, and a label error meets max |log p|.
    let min_p = sm.map_or(1.0, |t| {
        t.to_f64()
            .iter()
            .fold(1.0f64, |m, &p| m.min(p.max(f64::MIN_POSITIVE)))
    });
    let max_log = -min_p.ln();
    let (label_l1, label_e) = if soft {
        (
            row_abs_sum(get("Label").and_then(|v| view.value(v)), a),
            e("Label"),
        )
    } else {
        (1.0, 0.0)
    };
    let loss_out = op.output("Loss").first().copied();
    let ml_out = max_abs(loss_out.and_then(|v| view.after(v)));
    let bound = label_l1 * (2.0 * el + (n + 4.0) * u * (ml + max_log + 1.0))
        + label_e * n * max_log
        + u * ml_out;
    v.extend(loss_out.map(|o| (o, bound)));
    v
}
