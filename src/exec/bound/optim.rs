//! The bounds of parameter updates (SGD, momentum, Adam and AdamW) and of AMP's loss
//! scaling.

use super::*;

/// The bound of an optimizer update.
pub(super) fn optimizer(
    a: &At,
    o: OptimizerOp,
    per_element: &mut Option<(VarId, Vec<f64>)>,
) -> Vec<(VarId, f64)> {
    let (op, view, u) = (a.op, a.view, a.u);
    match o {
        OptimizerOp::Sgd => a.stored(
            "ParamOut",
            a.e("Param") + a.lr() * a.e("Grad") + u * (a.m("Param") + a.lr() * a.m("Grad")),
        ),
        OptimizerOp::Momentum => {
            let mu = op.attr_float("mu", 0.9).abs();
            let ev = mu * a.e("Velocity") + a.e("Grad");
            let mv = a.m_out("VelocityOut");
            let step = if op.attr_bool("use_nesterov", false) {
                a.e("Grad") + mu * ev
            } else {
                ev
            };
            let mut v = a.stored("VelocityOut", ev + u * (mu * a.m("Velocity") + a.m("Grad")));
            v.extend(a.stored(
                "ParamOut",
                a.e("Param") + a.lr() * step + u * (a.m("Param") + a.lr() * (a.m("Grad") + mv)),
            ));
            v
        }
        OptimizerOp::Adam | OptimizerOp::AdamW => adam(op, view, u, per_element),
    }
}

/// The bound of AMP's ops.
pub(super) fn amp(a: &At, o: AmpOp) -> Vec<(VarId, f64)> {
    let (op, view, u) = (a.op, a.view, a.u);
    match o {
        AmpOp::CheckFiniteAndUnscale => {
            let inv = 1.0 / max_abs(a.val("Scale")).max(f64::MIN_POSITIVE);
            let mut v: Vec<(VarId, f64)> = op
                .input("X")
                .iter()
                .zip(op.output("Out"))
                .map(|(&x, &o)| (o, inv * view.e(x) + u * max_abs(view.after(o))))
                .collect();
            v.extend(a.one("FoundInfinite", 0.0));
            v
        }
        AmpOp::UpdateLossScaling => {
            // An overflowing step zeroes every gradient exactly (their bounds, inf or NaN
            // after the overflow, no longer apply).
            let overflowed = max_abs(a.val("FoundInfinite")) != 0.0;
            let mut v: Vec<(VarId, f64)> = op
                .input("X")
                .iter()
                .zip(op.output("Out"))
                .map(|(&x, &o)| (o, if overflowed { 0.0 } else { view.e(x) }))
                .collect();
            for slot in ["LossScaling", "OutGoodSteps", "OutBadSteps"] {
                v.extend(a.one(slot, 0.0));
            }
            v
        }
    }
}

fn adam(
    op: &Op,
    view: &View,
    u: f64,
    per_element: &mut Option<(VarId, Vec<f64>)>,
) -> Vec<(VarId, f64)> {
    let get = |s: &str| op.input(s).first().copied();
    let val = |s: &str| get(s).and_then(|v| view.value(v));
    let e = |s: &str| get(s).map_or(0.0, |v| view.e(v));
    let (Some(g), Some(m1), Some(m2), Some(p)) =
        (val("Grad"), val("Moment1"), val("Moment2"), val("Param"))
    else {
        return unbounded(op);
    };
    let lr = max_abs(val("LearningRate"));
    let beta1 = op.attr_float("beta1", 0.9);
    let beta2 = op.attr_float("beta2", 0.999);
    let eps = op.attr_float("epsilon", 1e-8);
    let coeff = if op.ty == OpType::AdamW {
        op.attr_float("coeff", 0.01)
    } else {
        0.0
    };
    let b1p = max_abs(val("Beta1Pow"));
    let b2p = max_abs(val("Beta2Pow"));
    let (eg, em1, em2, ep) = (e("Grad"), e("Moment1"), e("Moment2"), e("Param"));
    let (gv, m1v, m2v) = (g.to_f64(), m1.to_f64(), m2.to_f64());
    let mg = max_abs(Some(g));
    let e_m1 = beta1 * em1 + (1.0 - beta1) * eg + 2.0 * u * (beta1 * max_abs(Some(m1)) + mg);
    let e_m2 = beta2 * em2
        + (1.0 - beta2) * (2.0 * mg * eg + eg * eg)
        + 3.0 * u * (beta2 * max_abs(Some(m2)) + mg * mg);
    // The step lr_t · m / (√v + ε) of each element moves by at most
    // (Δm + |r| Δs) / max(s − Δs, ε), s = √v + ε, Δs the bound of √v.
    let lr_t = lr * (1.0 - b2p).abs().sqrt() / (1.0 - b1p).abs().max(f64::MIN_POSITIVE);
    // Paddle scales epsilon by √(1 − β2^t) (see kernels/optim.rs).
    let eps_t = (eps * (1.0 - b2p).abs().sqrt()).max(f64::MIN_POSITIVE);
    // Whatever the gradients, |m| / √v ≤ (1−β1) / √((1−β2)(1−β1²/β2)) (Cauchy–Schwarz over
    // the moving averages, both started at 0), so a step moves by at most |r| + that.
    let cap = if beta1 * beta1 < beta2 && beta2 < 1.0 {
        (1.0 - beta1) / ((1.0 - beta2) * (1.0 - beta1 * beta1 / beta2)).sqrt()
    } else {
        f64::INFINITY
    };
    let ep_elems = get("Param")
        .and_then(|v| view.elems.get(v.index()))
        .and_then(Option::as_ref);
    let pv = p.to_f64();
    let mut elems = Vec::with_capacity(gv.len());
    let mut worst: f64 = 0.0;
    let mut largest: f64 = 0.0;
    for i in 0..gv.len().min(m1v.len()).min(m2v.len()) {
        let m = beta1 * m1v[i] + (1.0 - beta1) * gv[i];
        let v = beta2 * m2v[i] + (1.0 - beta2) * gv[i] * gv[i];
        let root = v.max(0.0).sqrt();
        let ds = e_m2.sqrt().min(if root > 0.0 {
            e_m2 / (2.0 * root)
        } else {
            f64::INFINITY
        });
        let s = root + eps_t;
        let r = m.abs() / s;
        largest = largest.max(r);
        let first_order = (e_m1 + r * ds) / (s - ds).max(eps_t);
        let step = first_order.min(r + cap) + 4.0 * u * r;
        worst = worst.max(step);
        let before = ep_elems.and_then(|e| e.get(i).copied()).unwrap_or(ep);
        let p_new = pv[i] * (1.0 - lr * coeff) - lr_t * m / s;
        elems.push(
            before * (1.0 - lr * coeff).abs()
                + lr_t * step
                + u * (pv[i].abs() * (1.0 + lr * coeff) + lr_t * r + p_new.abs()),
        );
    }
    let ep_out = ep * (1.0 - lr * coeff).abs()
        + lr_t * worst
        + u * (max_abs(Some(p)) * (1.0 + lr * coeff) + lr_t * largest);
    let after = |s: &str| {
        op.output(s)
            .first()
            .map(|&o| u * max_abs(view.after(o)))
            .unwrap_or(0.0)
    };
    let mut v = Vec::new();
    let mut put = |slot: &str, b: f64| {
        if let Some(&o) = op.output(slot).first() {
            v.push((o, b));
        }
    };
    if let Some(&o) = op.output("ParamOut").first() {
        *per_element = Some((o, elems));
    }
    put("ParamOut", ep_out + after("ParamOut"));
    put("Moment1Out", e_m1 + after("Moment1Out"));
    put("Moment2Out", e_m2 + after("Moment2Out"));
    put("Beta1PowOut", 0.0);
    put("Beta2PowOut", 0.0);
    v
}
