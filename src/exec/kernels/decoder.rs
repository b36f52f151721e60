//! The kernels of a modern decoder's ops: `rms_norm`, the rotary position embedding and
//! `repeat_interleave` (grouped-query attention's shared key/value heads). Each computes in
//! f64 and stores in the input's precision.

use crate::exec::tensor::Tensor;

/// rms_norm: `y = x · r · scale` with `r = 1 / sqrt(mean(x²) + ε)` per row of the dims from
/// `begin` on. Returns `(y, r)`.
pub fn rms_norm(x: &Tensor, scale: &Tensor, begin: usize, eps: f64) -> (Tensor, Tensor) {
    let v = x.to_f64();
    let s = scale.to_f64();
    let cols: usize = x.shape[begin..].iter().product();
    let rows = v.len() / cols.max(1);
    let (mut y, mut inv) = (vec![0.0; v.len()], vec![0.0; rows]);
    for r in 0..rows {
        let row = &v[r * cols..(r + 1) * cols];
        let ms = row.iter().map(|a| a * a).sum::<f64>() / cols as f64;
        let rinv = 1.0 / (ms + eps).sqrt();
        for c in 0..cols {
            y[r * cols + c] = row[c] * rinv * s[c];
        }
        inv[r] = rinv;
    }
    (
        Tensor::float(x.dtype(), x.shape.clone(), y),
        Tensor::float(x.dtype(), x.shape[..begin].to_vec(), inv),
    )
}

/// rms_norm_grad: `(dX, dScale)`. With `x̂ = x·r` and `g = dy·scale`,
/// `dx = r · (g − x̂ · mean(g·x̂))` and `dscale = Σ_rows dy·x̂`.
pub fn rms_norm_grad(
    x: &Tensor,
    scale: &Tensor,
    inv: &Tensor,
    dy: &Tensor,
    begin: usize,
) -> (Tensor, Tensor) {
    let (v, d, s, iv) = (x.to_f64(), dy.to_f64(), scale.to_f64(), inv.to_f64());
    let cols: usize = x.shape[begin..].iter().product();
    let rows = v.len() / cols.max(1);
    let (mut dx, mut ds) = (vec![0.0; v.len()], vec![0.0; cols]);
    for (r, &rinv) in iv.iter().enumerate().take(rows) {
        let at = |c: usize| r * cols + c;
        let mean_gx = (0..cols)
            .map(|c| d[at(c)] * s[c] * v[at(c)] * rinv)
            .sum::<f64>()
            / cols as f64;
        for c in 0..cols {
            let xhat = v[at(c)] * rinv;
            dx[at(c)] = rinv * (d[at(c)] * s[c] - xhat * mean_gx);
            ds[c] += d[at(c)] * xhat;
        }
    }
    (
        Tensor::float(x.dtype(), x.shape.clone(), dx),
        Tensor::float(scale.dtype(), scale.shape.clone(), ds),
    )
}

/// The partner of element `i` of a head of width `d` in the rotation, and the sign its sine
/// term takes: adjacent pairs `(2j, 2j+1)` in the neox style, halves `(j, j + d/2)`
/// otherwise (Llama's `rotate_half`).
fn partner(i: usize, d: usize, neox: bool) -> (usize, f64) {
    if neox {
        if i.is_multiple_of(2) {
            (i + 1, -1.0)
        } else {
            (i - 1, 1.0)
        }
    } else if i < d / 2 {
        (i + d / 2, -1.0)
    } else {
        (i - d / 2, 1.0)
    }
}

/// The rotary position embedding of `x` `[batch, seq, heads, head_dim]` with `sin` and `cos`
/// `[1, seq, 1, head_dim]`: `out_i = x_i · cos_i + sign_i · x_partner(i) · sin_i`. With
/// `transpose` it applies the inverse rotation (the grad: `dx = R(−θ) · dout`).
pub fn rope(x: &Tensor, sin: &Tensor, cos: &Tensor, neox: bool, transpose: bool) -> Tensor {
    let (v, sn, cs) = (x.to_f64(), sin.to_f64(), cos.to_f64());
    let [_, seq, heads, d] = x.shape[..] else {
        return x.clone();
    };
    let mut out = vec![0.0; v.len()];
    for (k, o) in out.iter_mut().enumerate() {
        let i = k % d;
        let t = (k / (d * heads)) % seq;
        let (p, sign) = partner(i, d, neox);
        let base = k - i;
        // R pairs element i with its partner's value under sine i. Its transpose reads the
        // partner's row instead: the partner's sign and sine (p is an involution).
        let s = if transpose {
            partner(p, d, neox).1 * sn[t * d + p]
        } else {
            sign * sn[t * d + i]
        };
        *o = v[k] * cs[t * d + i] + s * v[base + p];
    }
    Tensor::float(x.dtype(), x.shape.clone(), out)
}

/// `repeat_interleave`: every slice of dim `axis` repeated `repeats` times in place
/// (`[a, b] → [a, a, b, b]`).
pub fn repeat_interleave(x: &Tensor, axis: usize, repeats: usize) -> Tensor {
    let v = x.to_f64();
    let inner: usize = x.shape[axis + 1..].iter().product();
    let dim = x.shape[axis];
    let outer = v.len() / (dim * inner).max(1);
    let mut out = Vec::with_capacity(v.len() * repeats);
    for o in 0..outer {
        for j in 0..dim {
            let slice = &v[(o * dim + j) * inner..(o * dim + j + 1) * inner];
            for _ in 0..repeats {
                out.extend_from_slice(slice);
            }
        }
    }
    let mut shape = x.shape.clone();
    shape[axis] *= repeats;
    Tensor::float(x.dtype(), shape, out)
}

/// The grad of `repeat_interleave`: each input slice's gradient is the sum of its copies'.
pub fn repeat_interleave_grad(dout: &Tensor, axis: usize, repeats: usize) -> Tensor {
    let d = dout.to_f64();
    let inner: usize = dout.shape[axis + 1..].iter().product();
    let dim = dout.shape[axis] / repeats.max(1);
    let outer = d.len() / (dim * repeats * inner).max(1);
    let mut dx = vec![0.0; outer * dim * inner];
    for o in 0..outer {
        for j in 0..dim {
            for t in 0..repeats {
                let src = ((o * dim + j) * repeats + t) * inner;
                let dst = (o * dim + j) * inner;
                for e in 0..inner {
                    dx[dst + e] += d[src + e];
                }
            }
        }
    }
    let mut shape = dout.shape.clone();
    shape[axis] = dim;
    Tensor::float(dout.dtype(), shape, dx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::DType;

    fn t(shape: &[usize], v: &[f64]) -> Tensor {
        Tensor::float(DType::F64, shape.to_vec(), v.to_vec())
    }

    #[test]
    fn rms_norm_divides_by_the_root_mean_square() {
        let (y, inv) = rms_norm(&t(&[1, 2], &[3.0, 4.0]), &t(&[2], &[1.0, 2.0]), 1, 0.0);
        // rms = sqrt((9 + 16) / 2) = sqrt(12.5).
        let r = 1.0 / 12.5f64.sqrt();
        assert_eq!(inv.to_f64(), vec![r]);
        assert_eq!(y.to_f64(), vec![3.0 * r, 8.0 * r]);
    }

    #[test]
    fn rope_rotates_pairs_by_their_angle_and_its_transpose_undoes_it() {
        // One position, one head, width 4; angle θ on every element.
        let th = 0.3f64;
        let (s, c) = (th.sin(), th.cos());
        let x = t(&[1, 1, 1, 4], &[1.0, 2.0, 3.0, 4.0]);
        let sin = t(&[1, 1, 1, 4], &[s; 4]);
        let cos = t(&[1, 1, 1, 4], &[c; 4]);
        // Halves: pairs (0, 2) and (1, 3).
        let out = rope(&x, &sin, &cos, false, false).to_f64();
        let want = [
            c - 3.0 * s,
            2.0 * c - 4.0 * s,
            3.0 * c + s,
            4.0 * c + 2.0 * s,
        ];
        for (a, b) in out.iter().zip(want) {
            assert!((a - b).abs() < 1e-12, "{out:?} vs {want:?}");
        }
        for neox in [false, true] {
            let there = rope(&x, &sin, &cos, neox, false);
            let back = rope(&there, &sin, &cos, neox, true).to_f64();
            for (a, b) in back.iter().zip(x.to_f64()) {
                assert!((a - b).abs() < 1e-12, "neox={neox}: {back:?}");
            }
        }
    }

    #[test]
    fn repeat_interleave_copies_in_place_and_its_grad_sums_the_copies() {
        let x = t(&[1, 2, 1], &[1.0, 2.0]);
        let y = repeat_interleave(&x, 1, 3);
        assert_eq!(y.shape, vec![1, 6, 1]);
        assert_eq!(y.to_f64(), vec![1.0, 1.0, 1.0, 2.0, 2.0, 2.0]);
        let d = repeat_interleave_grad(&t(&[1, 6, 1], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), 1, 3);
        assert_eq!(d.to_f64(), vec![6.0, 15.0]);
    }
}
