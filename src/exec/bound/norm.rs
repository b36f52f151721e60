//! The bounds of the normalisations: layer_norm and rms_norm, forward and grad.

use super::{max_abs, unbounded, At, View};
use crate::exec::tensor::Tensor;
use crate::ir::{Op, VarId};

/// Normalised rows x̂ = (x − μ) / σ: (max |x̂|, min σ, row length).
fn normalised(x: &Tensor, var: Option<&Tensor>, begin: usize, eps: f64) -> (f64, f64, f64) {
    let cols: usize = x.shape.iter().skip(begin).product();
    let v = x.to_f64();
    let rows = v.len() / cols.max(1);
    let vars = var.map(Tensor::to_f64).unwrap_or_default();
    let (mut mx, mut min_sigma) = (0.0f64, f64::INFINITY);
    for r in 0..rows {
        let row = &v[r * cols..(r + 1) * cols];
        let mean = row.iter().sum::<f64>() / cols as f64;
        let var = vars.get(r).copied().unwrap_or_else(|| {
            row.iter().map(|a| (a - mean) * (a - mean)).sum::<f64>() / cols as f64
        });
        let sigma = (var + eps).sqrt();
        min_sigma = min_sigma.min(sigma);
        for a in row {
            mx = mx.max((a - mean).abs() / sigma);
        }
    }
    (mx, min_sigma, cols as f64)
}

pub(super) fn layer_norm(op: &Op, view: &View, u: f64) -> Vec<(VarId, f64)> {
    let get = |s: &str| op.input(s).first().copied();
    let Some(x) = get("X").and_then(|v| view.value(v)) else {
        return unbounded(op);
    };
    let e = |s: &str| get(s).map_or(0.0, |v| view.e(v));
    let m = |s: &str| get(s).map_or(1.0, |v| max_abs(view.value(v)));
    let begin = op.attr_int("begin_norm_axis", 1).max(0) as usize;
    let eps = op.attr_float("epsilon", 1e-5);
    let (mxh, sigma, n) = normalised(x, None, begin, eps);
    let ex = e("X");
    // Δx̂ ≤ (|Δx| + |Δμ| + |x̂| |Δσ|) / σ with |Δμ|, |Δσ| ≤ E(x); rounding of the row
    // mean and variance (n terms each) relative to max|x|.
    let exh = (ex * (2.0 + mxh) + 2.0 * n * u * max_abs(Some(x))) / sigma;
    let (scale, bias) = (
        if get("Scale").is_some() {
            m("Scale")
        } else {
            1.0
        },
        if get("Bias").is_some() {
            m("Bias")
        } else {
            0.0
        },
    );
    let y = exh * scale + mxh * e("Scale") + e("Bias") + 3.0 * u * (mxh * scale + bias);
    let ym = max_abs(op.output("Y").first().and_then(|&v| view.after(v)));
    let mut v: Vec<(VarId, f64)> = op.output("Y").iter().map(|&o| (o, y + u * ym)).collect();
    let mx = max_abs(Some(x));
    v.extend(op.output("Mean").iter().map(|&o| (o, ex + n * u * mx)));
    v.extend(
        op.output("Variance")
            .iter()
            .map(|&o| (o, 2.0 * mx * ex + ex * ex + 2.0 * n * u * mx * mx)),
    );
    v
}

pub(super) fn layer_norm_grad(op: &Op, view: &View, u: f64) -> Vec<(VarId, f64)> {
    let get = |s: &str| op.input(s).first().copied();
    let (Some(x), Some(dy)) = (
        get("X").and_then(|v| view.value(v)),
        get("Y@GRAD").and_then(|v| view.value(v)),
    ) else {
        return unbounded(op);
    };
    let e = |s: &str| get(s).map_or(0.0, |v| view.e(v));
    let begin = op.attr_int("begin_norm_axis", 1).max(0) as usize;
    let eps = op.attr_float("epsilon", 1e-5);
    let var = get("Variance").and_then(|v| view.value(v));
    let (mxh, sigma, n) = normalised(x, var, begin, eps);
    let rows = x.numel() as f64 / n.max(1.0);
    let (ex, edy) = (e("X"), e("Y@GRAD"));
    let mdy = max_abs(Some(dy));
    let (ms, es) = match get("Scale") {
        Some(v) => (max_abs(view.value(v)), view.e(v)),
        None => (1.0, 0.0),
    };
    let exh = (ex * (2.0 + mxh) + 2.0 * n * u * max_abs(Some(x))) / sigma;
    // dx = (1/σ)(dx̂ − mean(dx̂) − x̂ mean(dx̂ x̂)), dx̂ = dy γ. By Cauchy–Schwarz
    // |mean(dx̂ x̂)| ≤ max|dx̂| √mean(x̂²) ≤ max|dx̂|, so |dx| ≤ max|dx̂| (2 + max|x̂|) / σ.
    let (mdxh, edxh) = (mdy * ms, edy * ms + mdy * es);
    let gain = 2.0 + mxh;
    let dx = (edxh * gain + mdxh * exh * (1.0 + mxh)) / sigma
        + mdxh * gain * ex / (sigma * sigma)
        + (n + 4.0) * u * mdxh * gain / sigma;
    let mut v = Vec::new();
    let stored = |slot: &str, b: f64| {
        op.output(slot)
            .iter()
            .map(|&o| (o, b + u * max_abs(view.after(o))))
            .collect::<Vec<_>>()
    };
    v.extend(stored("X@GRAD", dx));
    v.extend(stored(
        "Scale@GRAD",
        rows.sqrt() * (edy * mxh + mdy * exh) + rows.sqrt() * u * rows * mdy * mxh,
    ));
    v.extend(stored(
        "Bias@GRAD",
        rows.sqrt() * edy + rows.sqrt() * u * rows * mdy,
    ));
    v
}

/// Per rms_norm: the largest `|x̂| = |x|·r`, the largest `r = 1/sqrt(mean(x²) + ε)` and
/// the row width.
fn rms_rows(x: &Tensor, begin: usize, eps: f64) -> (f64, f64, f64) {
    let cols: usize = x.shape.iter().skip(begin).product();
    let v = x.to_f64();
    let (mut mxh, mut mr) = (0.0f64, 0.0f64);
    for row in v.chunks(cols.max(1)) {
        let r = 1.0 / (row.iter().map(|a| a * a).sum::<f64>() / cols as f64 + eps).sqrt();
        mr = mr.max(r);
        mxh = row.iter().fold(mxh, |m, a| m.max(a.abs() * r));
    }
    (mxh, mr, cols as f64)
}

/// The error of `x̂ = x·r` and of `r`. `Δr = −r³ mean(x Δx)`, and `r · mean|x| ≤ 1`
/// (mean|x| ≤ rms(x) ≤ 1/r), so `|x Δr| ≤ |x̂| r E(x)` and `|Δr| ≤ r² E(x)`; the mean of n
/// squares rounds by n·u relative, the root and the products by a few u more.
fn rms_errors(a: &At, x: &Tensor) -> (f64, f64, f64, f64, f64) {
    let begin = a.op.attr_int("begin_norm_axis", 1).max(0) as usize;
    let (mxh, r, n) = rms_rows(x, begin, a.op.attr_float("epsilon", 1e-5));
    let ex = a.e("X");
    let exh = r * ex * (1.0 + mxh) + (n / 2.0 + 3.0) * a.u * mxh;
    let er = r * r * ex + (n / 2.0 + 3.0) * a.u * r;
    (mxh, r, n, exh, er)
}

/// y = x̂ · scale; InvVar = r.
pub(super) fn rms_norm(a: &At) -> Vec<(VarId, f64)> {
    let Some(x) = a.val("X") else {
        return unbounded(a.op);
    };
    let (mxh, _, _, exh, er) = rms_errors(a, x);
    let ms = a.m("Scale");
    let mut v = a.stored("Y", exh * ms + mxh * a.e("Scale") + a.u * mxh * ms);
    v.extend(a.stored("InvVar", er));
    v
}

/// dx = r (g − x̂ m) with g = dy·scale and m = mean(g x̂); |m| ≤ max|g| (mean|x̂| ≤ 1).
/// dscale = Σ_rows dy·x̂, bounded like layer_norm's (√rows for the independent terms).
pub(super) fn rms_norm_grad(a: &At) -> Vec<(VarId, f64)> {
    let (Some(x), Some(dy)) = (a.val("X"), a.val("Y@GRAD")) else {
        return unbounded(a.op);
    };
    let (mxh, r, n, exh, _) = rms_errors(a, x);
    // The grad reads the saved r, with its own bound.
    let er = a.e("InvVar");
    let (mdy, edy, ms, es) = (max_abs(Some(dy)), a.e("Y@GRAD"), a.m("Scale"), a.e("Scale"));
    let (mg, eg) = (mdy * ms, edy * ms + mdy * es);
    let gain = 1.0 + mxh;
    let dx = er * mg * gain + r * (eg * gain + 2.0 * mg * exh) + (n + 4.0) * a.u * r * mg * gain;
    let rows = x.numel() as f64 / n.max(1.0);
    let mut v = a.stored("X@GRAD", dx);
    v.extend(a.stored(
        "Scale@GRAD",
        rows.sqrt() * (edy * mxh + mdy * exh) + rows.sqrt() * a.u * rows * mdy * mxh,
    ));
    v
}
