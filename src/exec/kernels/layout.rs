//! Data movement: transpose, split, concat, slice, embedding lookups.

use crate::exec::tensor::{strides, Data, Tensor};

use crate::exec::op_error::OpError;

type Res<T> = Result<T, OpError>;

/// Gathers elements: `out[i] = src[index[i]]`, keeping the dtype.
fn gather(t: &Tensor, shape: Vec<usize>, index: &[usize]) -> Tensor {
    let data = match &t.data {
        Data::F32(v) => Data::f32(index.iter().map(|&i| v[i]).collect()),
        Data::F64(v) => Data::f64(index.iter().map(|&i| v[i]).collect()),
        Data::I64(v) => Data::i64(index.iter().map(|&i| v[i]).collect()),
    };
    Tensor { shape, data }
}

/// `out[i] = x[perm[i]]` over dims.
pub fn transpose(x: &Tensor, perm: &[usize]) -> Tensor {
    let shape: Vec<usize> = perm.iter().map(|&p| x.shape[p]).collect();
    let xs = strides(&x.shape);
    let n = x.numel();
    let mut index = Vec::with_capacity(n);
    let mut idx = vec![0usize; shape.len()];
    for _ in 0..n {
        index.push(idx.iter().zip(perm).map(|(&i, &p)| i * xs[p]).sum());
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    gather(x, shape, &index)
}

/// The inverse permutation.
pub fn inverse(perm: &[usize]) -> Vec<usize> {
    let mut inv = vec![0; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        inv[p] = i;
    }
    inv
}

/// The slice `[start, end)` of `axis`, clamped as Python slices are (`end` to the length,
/// `start` to `end`: an empty slice, never a panic). An axis past the rank slices nothing.
pub fn slice_axis(x: &Tensor, axis: usize, start: usize, end: usize) -> Tensor {
    let Some(&len) = x.shape.get(axis) else {
        return x.clone();
    };
    let end = end.min(len);
    let start = start.min(end);
    let (outer, inner): (usize, usize) = (
        x.shape[..axis].iter().product(),
        x.shape[axis + 1..].iter().product(),
    );
    // Each outer index contributes one contiguous run of (end - start) * inner elements.
    fn runs<T: Copy>(
        v: &[T],
        outer: usize,
        len: usize,
        inner: usize,
        s: usize,
        e: usize,
    ) -> Vec<T> {
        let mut out = Vec::with_capacity(outer * (e - s) * inner);
        for o in 0..outer {
            out.extend_from_slice(&v[(o * len + s) * inner..(o * len + e) * inner]);
        }
        out
    }
    let data = match &x.data {
        Data::F32(v) => Data::f32(runs(v, outer, len, inner, start, end)),
        Data::F64(v) => Data::f64(runs(v, outer, len, inner, start, end)),
        Data::I64(v) => Data::i64(runs(v, outer, len, inner, start, end)),
    };
    let mut shape = x.shape.clone();
    shape[axis] = end - start;
    Tensor { shape, data }
}

/// `x` with `pad` zeros appended along `axis` (an uneven shard padded for a collective).
pub fn pad_axis(x: &Tensor, axis: usize, pad: usize) -> Res<Tensor> {
    if axis >= x.shape.len() {
        return Err(OpError::BadAttr("pad axis"));
    }
    let (outer, len, inner): (usize, usize, usize) = (
        x.shape[..axis].iter().product(),
        x.shape[axis],
        x.shape[axis + 1..].iter().product(),
    );
    let values = x.to_f64();
    let mut out = Vec::with_capacity(outer * (len + pad) * inner);
    for o in 0..outer {
        out.extend_from_slice(&values[o * len * inner..(o + 1) * len * inner]);
        out.extend(std::iter::repeat_n(0.0, pad * inner));
    }
    let mut shape = x.shape.clone();
    shape[axis] += pad;
    Ok(Tensor::float(x.dtype(), shape, out))
}

/// Concatenation along `axis`.
pub fn concat(xs: &[&Tensor], axis: usize) -> Res<Tensor> {
    let first = xs.first().ok_or(OpError::Empty("concat"))?;
    // Every part has the first's rank and the same sizes off the axis.
    let fits = |t: &Tensor| {
        t.shape.len() == first.shape.len()
            && axis < t.shape.len()
            && t.shape
                .iter()
                .zip(&first.shape)
                .enumerate()
                .all(|(d, (a, b))| d == axis || a == b)
    };
    if let Some(bad) = xs.iter().find(|t| !fits(t)) {
        return Err(OpError::Concat {
            first: first.shape.clone(),
            other: bad.shape.clone(),
            axis,
        });
    }
    let outer: usize = first.shape[..axis].iter().product();
    let inner: usize = first.shape[axis + 1..].iter().product();
    let mut shape = first.shape.clone();
    shape[axis] = xs.iter().map(|t| t.shape[axis]).sum();
    let mut parts: Vec<Vec<f64>> = Vec::new();
    for t in xs {
        parts.push(t.to_f64());
    }
    let mut out = Vec::with_capacity(shape.iter().product());
    for o in 0..outer {
        for (t, v) in xs.iter().zip(&parts) {
            let block = t.shape[axis] * inner;
            out.extend_from_slice(&v[o * block..(o + 1) * block]);
        }
    }
    Ok(Tensor::float(first.dtype(), shape, out))
}

/// Splits `x` along `axis` into pieces of `sizes`.
pub fn split(x: &Tensor, axis: usize, sizes: &[usize]) -> Vec<Tensor> {
    let mut start = 0;
    sizes
        .iter()
        .map(|&s| {
            let t = slice_axis(x, axis, start, start + s);
            start += s;
            t
        })
        .collect()
}

/// Embedding lookup of rows `[start, start + rows)` of the vocabulary: ids outside the
/// range (or equal to `padding_idx`) give zero rows.
pub fn lookup(w: &Tensor, ids: &Tensor, start: i64, padding_idx: i64) -> Tensor {
    let (rows, width) = (w.shape[0], w.shape[1]);
    let wv = w.to_f64();
    let mut out = Vec::with_capacity(ids.numel() * width);
    for id in ids.to_i64() {
        let r = id - start;
        if id == padding_idx || r < 0 || r as usize >= rows {
            out.extend(std::iter::repeat_n(0.0, width));
        } else {
            out.extend_from_slice(&wv[r as usize * width..(r as usize + 1) * width]);
        }
    }
    let mut shape = ids.shape.clone();
    shape.push(width);
    Tensor::float(w.dtype(), shape, out)
}

/// dW of a lookup: each id's output gradient added to its row (rows of this shard only).
pub fn lookup_grad(
    w: &Tensor,
    ids: &Tensor,
    dout: &Tensor,
    start: i64,
    padding_idx: i64,
) -> Tensor {
    let (rows, width) = (w.shape[0], w.shape[1]);
    let d = dout.to_f64();
    let mut g = vec![0.0; rows * width];
    for (k, id) in ids.to_i64().into_iter().enumerate() {
        let r = id - start;
        if id == padding_idx || r < 0 || r as usize >= rows {
            continue;
        }
        for c in 0..width {
            g[r as usize * width + c] += d[k * width + c];
        }
    }
    Tensor::float(w.dtype(), w.shape.clone(), g)
}
