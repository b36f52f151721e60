//! Dense row-major tensors: f32, f64 or i64. Float kernels read values as f64 and write
//! results back in the tensor's own precision, so f32 programs round like f32 while the
//! kernels are written once; matrix products run in the native precision.

use crate::ir::DType;
use serde::Serialize;

/// The elements of a tensor.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum Data {
    F32(Vec<f32>),
    F64(Vec<f64>),
    I64(Vec<i64>),
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
            DType::F32 => Data::F32(values.into_iter().map(|v| v as f32).collect()),
            DType::F64 => Data::F64(values),
            DType::I64 => Data::I64(values.into_iter().map(|v| v as i64).collect()),
        };
        Tensor { shape, data }
    }

    /// Zeros of `dtype`.
    pub fn zeros(dtype: DType, shape: Vec<usize>) -> Tensor {
        let n = shape.iter().product();
        match dtype {
            DType::F32 => Tensor {
                shape,
                data: Data::F32(vec![0.0; n]),
            },
            DType::F64 => Tensor {
                shape,
                data: Data::F64(vec![0.0; n]),
            },
            DType::I64 => Tensor {
                shape,
                data: Data::I64(vec![0; n]),
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
            Data::F64(v) => v.clone(),
            Data::I64(v) => v.iter().map(|&x| x as f64).collect(),
        }
    }

    /// The values as i64 (for ids and labels).
    pub fn to_i64(&self) -> Vec<i64> {
        match &self.data {
            Data::F32(v) => v.iter().map(|&x| x as i64).collect(),
            Data::F64(v) => v.iter().map(|&x| x as i64).collect(),
            Data::I64(v) => v.clone(),
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
            Data::F32(v) => Data::F32(take(v, start, end)),
            Data::F64(v) => Data::F64(take(v, start, end)),
            Data::I64(v) => Data::I64(take(v, start, end)),
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
