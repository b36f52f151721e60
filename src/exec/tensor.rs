//! Dense row-major tensors: f32, f64 or i64. Float kernels read values as f64 and write
//! results back in the tensor's own precision, so f32 programs round like f32 while the
//! kernels are written once; matrix products run in the native precision.

use crate::ir::DType;
use serde::Serialize;
use std::sync::Arc;

/// The elements of a tensor, shared copy-on-write: a clone (a reshape, an assign, a
/// collective's contribution, a replicated value handed to every rank) costs nothing until
/// someone writes, and a write to an unshared one happens in place (`Arc::make_mut`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum Data {
    F32(Arc<Vec<f32>>),
    F64(Arc<Vec<f64>>),
    I64(Arc<Vec<i64>>),
}

impl Data {
    pub fn f32(v: Vec<f32>) -> Data {
        Data::F32(Arc::new(v))
    }

    pub fn f64(v: Vec<f64>) -> Data {
        Data::F64(Arc::new(v))
    }

    pub fn i64(v: Vec<i64>) -> Data {
        Data::I64(Arc::new(v))
    }

    /// Empty values of `dtype` with room for `n`.
    pub fn with_capacity(dtype: DType, n: usize) -> Data {
        match dtype {
            DType::F32 => Data::f32(Vec::with_capacity(n)),
            DType::F64 => Data::f64(Vec::with_capacity(n)),
            DType::I64 => Data::i64(Vec::with_capacity(n)),
        }
    }

    /// Appends f64 values, rounded to this precision.
    pub fn extend_f64(&mut self, values: &[f64]) {
        match self {
            Data::F32(v) => Arc::make_mut(v).extend(values.iter().map(|&x| x as f32)),
            Data::F64(v) => Arc::make_mut(v).extend_from_slice(values),
            Data::I64(v) => Arc::make_mut(v).extend(values.iter().map(|&x| x as i64)),
        }
    }
}

/// A dense row-major tensor.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Tensor {
    pub shape: Vec<usize>,
    pub data: Data,
}

impl Tensor {
    /// A float tensor of `dtype` from f64 values (rounded to f32 for an f32 tensor).
    pub fn float(dtype: DType, shape: Vec<usize>, values: Vec<f64>) -> Tensor {
        let data = match dtype {
            DType::F32 => Data::f32(values.into_iter().map(|v| v as f32).collect()),
            DType::F64 => Data::f64(values),
            DType::I64 => Data::i64(values.into_iter().map(|v| v as i64).collect()),
        };
        Tensor { shape, data }
    }

    /// Zeros of `dtype`.
    pub fn zeros(dtype: DType, shape: Vec<usize>) -> Tensor {
        let n = shape.iter().product();
        match dtype {
            DType::F32 => Tensor {
                shape,
                data: Data::f32(vec![0.0; n]),
            },
            DType::F64 => Tensor {
                shape,
                data: Data::f64(vec![0.0; n]),
            },
            DType::I64 => Tensor {
                shape,
                data: Data::i64(vec![0; n]),
            },
        }
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        match self.data {
            Data::F32(_) => DType::F32,
            Data::F64(_) => DType::F64,
            Data::I64(_) => DType::I64,
        }
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        match &self.data {
            Data::F32(v) => v.len(),
            Data::F64(v) => v.len(),
            Data::I64(v) => v.len(),
        }
    }

    /// The values as f64 (ids and labels too).
    pub fn to_f64(&self) -> Vec<f64> {
        match &self.data {
            Data::F32(v) => v.iter().map(|&x| x as f64).collect(),
            Data::F64(v) => v.to_vec(),
            Data::I64(v) => v.iter().map(|&x| x as f64).collect(),
        }
    }

    /// `f` of every value, computed in f64 and stored in the tensor's own precision: the
    /// values of `Tensor::float(dtype, shape, to_f64().map(f))` without its two f64 copies
    /// (the executor's elementwise ops were a third of a rank's step in conversions).
    pub fn map(&self, f: impl Fn(f64) -> f64) -> Tensor {
        let data = match &self.data {
            Data::F32(v) => Data::f32(v.iter().map(|&x| f(x as f64) as f32).collect()),
            Data::F64(v) => Data::f64(v.iter().map(|&x| f(x)).collect()),
            Data::I64(v) => Data::i64(v.iter().map(|&x| f(x as f64) as i64).collect()),
        };
        Tensor {
            shape: self.shape.clone(),
            data,
        }
    }

    /// [`Tensor::map`] in place: the same values, with no allocation when the values are
    /// not shared (a shared copy is mapped into a new one in one pass, not copied first).
    pub fn map_in_place(&mut self, f: impl Fn(f64) -> f64) {
        match &mut self.data {
            Data::F32(v) => match Arc::get_mut(v) {
                Some(v) => v.iter_mut().for_each(|x| *x = f(*x as f64) as f32),
                None => *v = Arc::new(v.iter().map(|&x| f(x as f64) as f32).collect()),
            },
            Data::F64(v) => match Arc::get_mut(v) {
                Some(v) => v.iter_mut().for_each(|x| *x = f(*x)),
                None => *v = Arc::new(v.iter().map(|&x| f(x)).collect()),
            },
            Data::I64(v) => match Arc::get_mut(v) {
                Some(v) => v.iter_mut().for_each(|x| *x = f(*x as f64) as i64),
                None => *v = Arc::new(v.iter().map(|&x| f(x as f64) as i64).collect()),
            },
        }
    }

    /// Each element `i` replaced by `f(i, value)`, computed in f64 and stored in the
    /// tensor's precision (an optimizer's update, which also writes its moments from `f`).
    pub fn update_indexed(&mut self, mut f: impl FnMut(usize, f64) -> f64) {
        match &mut self.data {
            Data::F32(v) => Arc::make_mut(v)
                .iter_mut()
                .enumerate()
                .for_each(|(i, x)| *x = f(i, *x as f64) as f32),
            Data::F64(v) => Arc::make_mut(v)
                .iter_mut()
                .enumerate()
                .for_each(|(i, x)| *x = f(i, *x)),
            Data::I64(v) => Arc::make_mut(v)
                .iter_mut()
                .enumerate()
                .for_each(|(i, x)| *x = f(i, *x as f64) as i64),
        }
    }

    /// Stores `value` at element `i`, in the tensor's precision.
    #[inline]
    pub fn put(&mut self, i: usize, value: f64) {
        match &mut self.data {
            Data::F32(v) => Arc::make_mut(v)[i] = value as f32,
            Data::F64(v) => Arc::make_mut(v)[i] = value,
            Data::I64(v) => Arc::make_mut(v)[i] = value as i64,
        }
    }

    /// `f(self[i], other[i])` for every element, computed in f64 and stored in `self`'s
    /// precision, when both are floats of one dtype and one size (the common case, in one
    /// typed loop); `None` otherwise, for the caller's general path.
    pub fn zip_map(&self, other: &Tensor, f: impl Fn(f64, f64) -> f64) -> Option<Tensor> {
        if self.numel() != other.numel() {
            return None;
        }
        let data = match (&self.data, &other.data) {
            (Data::F32(a), Data::F32(b)) => Data::f32(
                a.iter()
                    .zip(b.iter())
                    .map(|(&x, &y)| f(x as f64, y as f64) as f32)
                    .collect(),
            ),
            (Data::F64(a), Data::F64(b)) => {
                Data::f64(a.iter().zip(b.iter()).map(|(&x, &y)| f(x, y)).collect())
            }
            _ => return None,
        };
        Some(Tensor {
            shape: self.shape.clone(),
            data,
        })
    }

    /// A tensor of `shape` whose element `i` is `f(i)`, computed in f64 and stored in
    /// `dtype`'s precision: the values of `Tensor::float(dtype, shape, values)` without the
    /// f64 copy.
    pub fn from_fn(dtype: DType, shape: Vec<usize>, f: impl Fn(usize) -> f64) -> Tensor {
        let n: usize = shape.iter().product();
        let data = match dtype {
            DType::F32 => Data::f32((0..n).map(|i| f(i) as f32).collect()),
            DType::F64 => Data::f64((0..n).map(f).collect()),
            DType::I64 => Data::i64((0..n).map(|i| f(i) as i64).collect()),
        };
        Tensor { shape, data }
    }

    /// `self[i] = f(self[i], other[i])` in one typed loop, when both are floats of one
    /// dtype and one size; false (nothing changed) otherwise, for the caller's general path.
    /// Shared values are updated into a new copy in the same pass.
    pub fn zip_update(&mut self, other: &Tensor, f: impl Fn(f64, f64) -> f64) -> bool {
        fn update<T: Copy>(a: &mut Arc<Vec<T>>, b: &[T], f: impl Fn(T, T) -> T) {
            match Arc::get_mut(a) {
                Some(a) => a.iter_mut().zip(b).for_each(|(x, &y)| *x = f(*x, y)),
                None => *a = Arc::new(a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect()),
            }
        }
        if self.numel() != other.numel() {
            return false;
        }
        match (&mut self.data, &other.data) {
            (Data::F32(a), Data::F32(b)) => update(a, b, |x, y| f(x as f64, y as f64) as f32),
            (Data::F64(a), Data::F64(b)) => update(a, b, &f),
            _ => return false,
        }
        true
    }

    /// Combines the values from element `start` on into `acc` (`acc[i] = f(acc[i],
    /// self[start + i])`, as far as both go), reading this tensor's own precision in one
    /// typed loop.
    pub fn fold_into(&self, start: usize, acc: &mut [f64], f: impl Fn(f64, f64) -> f64) {
        fn fold<T: Copy>(v: &[T], start: usize, acc: &mut [f64], f: impl Fn(f64, T) -> f64) {
            let v = v.get(start..).unwrap_or_default();
            acc.iter_mut().zip(v).for_each(|(a, &x)| *a = f(*a, x));
        }
        match &self.data {
            Data::F32(v) => fold(v, start, acc, |a, x| f(a, x as f64)),
            Data::F64(v) => fold(v, start, acc, &f),
            Data::I64(v) => fold(v, start, acc, |a, x| f(a, x as f64)),
        }
    }

    /// Element `i` as f64 (for loops that read several tensors of any dtype at scattered
    /// places; a typed loop is faster where one applies).
    #[inline]
    pub fn at(&self, i: usize) -> f64 {
        match &self.data {
            Data::F32(v) => v[i] as f64,
            Data::F64(v) => v[i],
            Data::I64(v) => v[i] as f64,
        }
    }

    /// The values as i64 (for ids and labels).
    pub fn to_i64(&self) -> Vec<i64> {
        match &self.data {
            Data::F32(v) => v.iter().map(|&x| x as i64).collect(),
            Data::F64(v) => v.iter().map(|&x| x as i64).collect(),
            Data::I64(v) => v.to_vec(),
        }
    }

    /// The same values with another shape (same number of elements).
    pub fn reshaped(mut self, shape: Vec<usize>) -> Tensor {
        self.shape = shape;
        self
    }

    /// The one value of a one-element tensor.
    pub fn scalar(&self) -> f64 {
        self.to_f64().first().copied().unwrap_or(0.0)
    }

    /// Elements `[start, end)` of the flattened values, zero-padded past the end, as a
    /// flat tensor of `end - start` elements (ZeRO's flat buffers and their shards).
    pub fn flat_range(&self, start: usize, end: usize) -> Tensor {
        fn take<T: Copy + Default>(v: &[T], start: usize, end: usize) -> Vec<T> {
            (start..end)
                .map(|i| v.get(i).copied().unwrap_or_default())
                .collect()
        }
        let data = match &self.data {
            Data::F32(v) => Data::f32(take(v, start, end)),
            Data::F64(v) => Data::f64(take(v, start, end)),
            Data::I64(v) => Data::i64(take(v, start, end)),
        };
        Tensor {
            shape: vec![end.saturating_sub(start)],
            data,
        }
    }
}

/// Row-major strides of `shape`.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// For each element of `out_shape`, the index of the element of `shape` it broadcasts from
/// (numpy rules, aligned right).
pub fn broadcast_index(shape: &[usize], out_shape: &[usize]) -> Vec<usize> {
    let n: usize = out_shape.iter().product();
    if shape == out_shape {
        return (0..n).collect();
    }
    let r = out_shape.len();
    let offset = r.saturating_sub(shape.len());
    let in_strides = strides(shape);
    // The input stride of each output dim: 0 where the input is broadcast along it.
    let step: Vec<usize> = (0..r)
        .map(|d| match d.checked_sub(offset) {
            Some(k) if shape[k] != 1 => in_strides[k],
            _ => 0,
        })
        .collect();
    let mut out = Vec::with_capacity(n);
    let (Some(&last), Some(&last_step)) = (out_shape.last(), step.last()) else {
        out.push(0); // a scalar output
        return out;
    };
    if n == 0 {
        return out;
    }
    // Walk the outer dims with an odometer that keeps the input offset up to date, and fill
    // each innermost row in one go.
    let mut idx = vec![0usize; r - 1];
    let mut base = 0usize;
    for _ in 0..n / last {
        out.extend((0..last).map(|j| base + j * last_step));
        for d in (0..r - 1).rev() {
            idx[d] += 1;
            base += step[d];
            if idx[d] < out_shape[d] {
                break;
            }
            base -= step[d] * idx[d];
            idx[d] = 0;
        }
    }
    out
}

/// Sums `grad` (of `out_shape`) down to `shape` over the broadcast dims.
pub fn reduce_to(grad: &[f64], out_shape: &[usize], shape: &[usize]) -> Vec<f64> {
    if shape == out_shape {
        return grad.to_vec();
    }
    let map = broadcast_index(shape, out_shape);
    let mut acc = vec![0.0; shape.iter().product()];
    for (g, &i) in grad.iter().zip(&map) {
        acc[i] += g;
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition: for each output element, unravel its index and drop broadcast dims.
    fn reference(shape: &[usize], out_shape: &[usize]) -> Vec<usize> {
        let n: usize = out_shape.iter().product();
        let offset = out_shape.len() - shape.len();
        let in_strides = strides(shape);
        (0..n)
            .map(|mut flat| {
                let mut i = 0;
                for d in (0..out_shape.len()).rev() {
                    let c = flat % out_shape[d];
                    flat /= out_shape[d];
                    if d >= offset && shape[d - offset] != 1 {
                        i += c * in_strides[d - offset];
                    }
                }
                i
            })
            .collect()
    }

    #[test]
    fn broadcast_index_matches_its_definition() {
        let cases: &[(&[usize], &[usize])] = &[
            (&[], &[]),
            (&[], &[3]),
            (&[1], &[4]),
            (&[4], &[4]),
            (&[3], &[2, 3]),
            (&[2, 1], &[2, 3]),
            (&[1, 3], &[2, 3]),
            (&[2, 1, 4], &[2, 3, 4]),
            (&[1, 1, 4], &[2, 3, 4]),
            (&[3, 1], &[2, 3, 5]),
            (&[2, 3, 4], &[2, 3, 4]),
            (&[1], &[2, 0, 3]),
            (&[5, 1, 1], &[5, 2, 3]),
        ];
        for &(shape, out) in cases {
            assert_eq!(
                broadcast_index(shape, out),
                reference(shape, out),
                "{shape:?} -> {out:?}"
            );
        }
    }
}
