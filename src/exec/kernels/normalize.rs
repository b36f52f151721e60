//! Softmax (plain and causal), softmax cross-entropy, layer_norm and reductions, with
//! their gradients. Reductions work on an (outer, axis, inner) view of the tensor.

use crate::exec::tensor::Tensor;

type Res<T> = Result<T, crate::exec::op_error::OpError>;

/// (outer, len, inner) sizes around `axis`.
fn around(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    let outer = shape[..axis].iter().product();
    let inner = shape[axis + 1..].iter().product();
    (outer, shape[axis], inner)
}

/// Softmax along `axis`; `causal` masks `j > i` over the last two dims first.
pub fn softmax(x: &Tensor, axis: usize, causal: bool) -> Tensor {
    let mut v = x.to_f64();
    let r = x.shape.len();
    if causal && r >= 2 {
        let (rows, cols) = (x.shape[r - 2], x.shape[r - 1]);
        for (k, e) in v.iter_mut().enumerate() {
            let (i, j) = ((k / cols) % rows, k % cols);
            if j > i {
                *e = f64::NEG_INFINITY;
            }
        }
    }
    let (outer, len, inner) = around(&x.shape, axis);
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| o * len * inner + j * inner + i;
            let max = (0..len).map(|j| v[at(j)]).fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = (0..len).map(|j| (v[at(j)] - max).exp()).sum();
            for j in 0..len {
                v[at(j)] = (v[at(j)] - max).exp() / sum;
            }
        }
    }
    Tensor::float(x.dtype(), x.shape.clone(), v)
}

/// dX of softmax from its output: `y * (dy - sum(dy * y))` along `axis`.
pub fn softmax_grad(y: &Tensor, dy: &Tensor, axis: usize) -> Tensor {
    let (yv, dv) = (y.to_f64(), dy.to_f64());
    let mut out = vec![0.0; yv.len()];
    let (outer, len, inner) = around(&y.shape, axis);
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| o * len * inner + j * inner + i;
            let dot: f64 = (0..len).map(|j| yv[at(j)] * dv[at(j)]).sum();
            for j in 0..len {
                out[at(j)] = yv[at(j)] * (dv[at(j)] - dot);
            }
        }
    }
    Tensor::float(y.dtype(), y.shape.clone(), out)
}

/// softmax_with_cross_entropy: (softmax, loss) with hard (index) or soft labels.
pub fn softmax_ce(
    logits: &Tensor,
    label: &Tensor,
    axis: usize,
    soft: bool,
) -> Res<(Tensor, Tensor)> {
    let sm = softmax(logits, axis, false);
    let s = sm.to_f64();
    let lab = label.to_f64();
    let (outer, len, inner) = around(&logits.shape, axis);
    let mut loss = vec![0.0; outer * inner];
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| o * len * inner + j * inner + i;
            loss[o * inner + i] = if soft {
                -(0..len)
                    .map(|j| lab[at(j)] * s[at(j)].max(f64::MIN_POSITIVE).ln())
                    .sum::<f64>()
            } else {
                let c = lab[o * inner + i] as i64;
                if c < 0 || c as usize >= len {
                    return Err(crate::exec::op_error::OpError::Label {
                        label: c,
                        classes: len,
                    });
                }
                -s[at(c as usize)].max(f64::MIN_POSITIVE).ln()
            };
        }
    }
    let mut loss_shape = logits.shape.clone();
    loss_shape[axis] = 1;
    Ok((sm, Tensor::float(logits.dtype(), loss_shape, loss)))
}

/// dLogits of softmax_with_cross_entropy from the softmax and dLoss.
pub fn softmax_ce_grad(
    sm: &Tensor,
    label: &Tensor,
    dloss: &Tensor,
    axis: usize,
    soft: bool,
) -> Tensor {
    let (s, lab, dl) = (sm.to_f64(), label.to_f64(), dloss.to_f64());
    let (outer, len, inner) = around(&sm.shape, axis);
    let mut out = vec![0.0; s.len()];
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| o * len * inner + j * inner + i;
            let d = dl[o * inner + i];
            let total: f64 = if soft {
                (0..len).map(|j| lab[at(j)]).sum()
            } else {
                1.0
            };
            for j in 0..len {
                let target = if soft {
                    lab[at(j)]
                } else {
                    f64::from(lab[o * inner + i] as usize == j)
                };
                out[at(j)] = d * (s[at(j)] * total - target);
            }
        }
    }
    Tensor::float(sm.dtype(), sm.shape.clone(), out)
}

/// layer_norm: (y, mean, variance) normalising the dims from `begin` on.
pub fn layer_norm(
    x: &Tensor,
    scale: Option<&Tensor>,
    bias: Option<&Tensor>,
    begin: usize,
    eps: f64,
) -> (Tensor, Tensor, Tensor) {
    let v = x.to_f64();
    let rows: usize = x.shape[..begin].iter().product();
    let cols: usize = x.shape[begin..].iter().product();
    let (sc, bi) = (scale.map(Tensor::to_f64), bias.map(Tensor::to_f64));
    let (mut y, mut means, mut vars) = (vec![0.0; v.len()], vec![0.0; rows], vec![0.0; rows]);
    for r in 0..rows {
        let row = &v[r * cols..(r + 1) * cols];
        let mean = row.iter().sum::<f64>() / cols as f64;
        let var = row.iter().map(|a| (a - mean) * (a - mean)).sum::<f64>() / cols as f64;
        let rstd = 1.0 / (var + eps).sqrt();
        for c in 0..cols {
            let mut o = (row[c] - mean) * rstd;
            if let Some(s) = &sc {
                o *= s[c];
            }
            if let Some(b) = &bi {
                o += b[c];
            }
            y[r * cols + c] = o;
        }
        means[r] = mean;
        vars[r] = var;
    }
    let stats = x.shape[..begin].to_vec();
    (
        Tensor::float(x.dtype(), x.shape.clone(), y),
        Tensor::float(x.dtype(), stats.clone(), means),
        Tensor::float(x.dtype(), stats, vars),
    )
}

/// layer_norm_grad: (dX, dScale, dBias).
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_grad(
    x: &Tensor,
    scale: Option<&Tensor>,
    mean: &Tensor,
    var: &Tensor,
    dy: &Tensor,
    begin: usize,
    eps: f64,
) -> (Tensor, Vec<f64>, Vec<f64>) {
    let (v, d, mv, vv) = (x.to_f64(), dy.to_f64(), mean.to_f64(), var.to_f64());
    let rows: usize = x.shape[..begin].iter().product();
    let cols: usize = x.shape[begin..].iter().product();
    let sc = scale.map(Tensor::to_f64).unwrap_or_else(|| vec![1.0; cols]);
    let (mut dx, mut ds, mut db) = (vec![0.0; v.len()], vec![0.0; cols], vec![0.0; cols]);
    // One row's normalised input and scaled gradient, reused from row to row.
    let (mut xhat, mut g) = (vec![0.0; cols], vec![0.0; cols]);
    for r in 0..rows {
        let rstd = 1.0 / (vv[r] + eps).sqrt();
        for c in 0..cols {
            xhat[c] = (v[r * cols + c] - mv[r]) * rstd;
            g[c] = d[r * cols + c] * sc[c];
        }
        let mean_g = g.iter().sum::<f64>() / cols as f64;
        let mean_gx = g.iter().zip(&xhat).map(|(a, b)| a * b).sum::<f64>() / cols as f64;
        for c in 0..cols {
            dx[r * cols + c] = rstd * (g[c] - mean_g - xhat[c] * mean_gx);
            ds[c] += d[r * cols + c] * xhat[c];
            db[c] += d[r * cols + c];
        }
    }
    (Tensor::float(x.dtype(), x.shape.clone(), dx), ds, db)
}

/// Sum (or mean) over `axes`, keeping them as size 1 if `keep`.
pub fn reduce(x: &Tensor, axes: &[usize], keep: bool, mean: bool) -> Tensor {
    let v = x.to_f64();
    let out_full: Vec<usize> = x
        .shape
        .iter()
        .enumerate()
        .map(|(d, &s)| if axes.contains(&d) { 1 } else { s })
        .collect();
    let mut acc = crate::exec::tensor::reduce_to(&v, &x.shape, &out_full);
    if mean {
        let count: usize = axes.iter().map(|&a| x.shape[a]).product();
        acc.iter_mut().for_each(|a| *a /= count.max(1) as f64);
    }
    let shape = if keep {
        out_full
    } else {
        x.shape
            .iter()
            .enumerate()
            .filter(|(d, _)| !axes.contains(d))
            .map(|(_, &s)| s)
            .collect()
    };
    Tensor::float(x.dtype(), shape, acc)
}

/// dX of a sum (or mean) over `axes`: dOut broadcast back (divided by the count for a mean).
pub fn reduce_grad(x: &Tensor, dout: &Tensor, axes: &[usize], mean: bool) -> Tensor {
    let kept: Vec<usize> = x
        .shape
        .iter()
        .enumerate()
        .map(|(d, &s)| if axes.contains(&d) { 1 } else { s })
        .collect();
    let idx = crate::exec::tensor::broadcast_index(&kept, &x.shape);
    let d = dout.to_f64();
    let count: usize = if mean {
        axes.iter().map(|&a| x.shape[a]).product()
    } else {
        1
    };
    let v = idx
        .iter()
        .map(|&i| d.get(i).copied().unwrap_or(0.0) / count.max(1) as f64)
        .collect();
    Tensor::float(x.dtype(), x.shape.clone(), v)
}
