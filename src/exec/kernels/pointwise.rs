//! Elementwise kernels: broadcasting binary ops, activations, and their gradients.

use crate::exec::tensor::{broadcast_index, reduce_to, Tensor};
use crate::ir::infer::broadcast;

type Res<T> = Result<T, crate::exec::op_error::OpError>;

/// The binary ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binary {
    Add,
    Sub,
    Mul,
    Div,
    Max,
}

/// Y's shape aligned to X for Paddle's legacy `axis` attribute.
pub fn aligned_y(x: &[usize], y: &[usize], axis: i64) -> Vec<usize> {
    if axis == -1 || y.len() == x.len() {
        return y.to_vec();
    }
    let start = axis.max(0) as usize;
    let mut s = vec![1; start];
    s.extend(y);
    s.resize(x.len().max(s.len()), 1);
    s
}

/// Forward of a broadcasting binary op.
pub fn binary(op: Binary, x: &Tensor, y: &Tensor, axis: i64) -> Res<Tensor> {
    let ys = aligned_y(&x.shape, &y.shape, axis);
    let out_shape = broadcast(&x.shape, &ys).ok_or(crate::exec::op_error::OpError::Broadcast)?;
    let f = |a: f64, b: f64| match op {
        Binary::Add => a + b,
        Binary::Sub => a - b,
        Binary::Mul => a * b,
        Binary::Div => a / b,
        Binary::Max => a.max(b),
    };
    if x.shape == out_shape && ys == out_shape {
        if let Some(t) = x.zip_map(y, f) {
            return Ok(t);
        }
    }
    let (xv, yv) = (x.to_f64(), y.to_f64());
    let (ix, iy) = (
        broadcast_index(&x.shape, &out_shape),
        broadcast_index(&ys, &out_shape),
    );
    let out = ix.iter().zip(&iy).map(|(&i, &j)| f(xv[i], yv[j])).collect();
    Ok(Tensor::float(x.dtype(), out_shape, out))
}

/// Gradients (dX, dY) of a broadcasting binary op (add, sub, mul, div).
pub fn binary_grad(
    op: Binary,
    x: &Tensor,
    y: &Tensor,
    dout: &Tensor,
    axis: i64,
) -> Res<(Tensor, Tensor)> {
    let ys = aligned_y(&x.shape, &y.shape, axis);
    let out_shape = dout.shape.clone();
    // Add and sub pass the gradient on scaled by ±1: one typed loop for an operand of the
    // output's shape (the residual stream's adds), a sum over the broadcast dims otherwise.
    let constant = match op {
        Binary::Add => Some((1.0, 1.0)),
        Binary::Sub => Some((1.0, -1.0)),
        Binary::Mul | Binary::Div | Binary::Max => None,
    };
    if let Some((gx, gy)) = constant {
        let side = |t: &Tensor, shape: &[usize], g: f64| {
            if shape == out_shape && t.dtype() == dout.dtype() {
                dout.map(|d| d * g).reshaped(t.shape.clone())
            } else {
                let full: Vec<f64> = dout.to_f64().iter().map(|d| d * g).collect();
                Tensor::float(
                    t.dtype(),
                    t.shape.clone(),
                    reduce_to(&full, &out_shape, shape),
                )
            }
        };
        return Ok((side(x, &x.shape, gx), side(y, &ys, gy)));
    }
    let (xv, yv, d) = (x.to_f64(), y.to_f64(), dout.to_f64());
    let (ix, iy) = (
        broadcast_index(&x.shape, &out_shape),
        broadcast_index(&ys, &out_shape),
    );
    let mut dx = vec![0.0; d.len()];
    let mut dy = vec![0.0; d.len()];
    for k in 0..d.len() {
        let (a, b) = (xv[ix[k]], yv[iy[k]]);
        let (gx, gy) = match op {
            Binary::Add => (1.0, 1.0),
            Binary::Sub => (1.0, -1.0),
            Binary::Mul => (b, a),
            Binary::Div => (1.0 / b, -a / (b * b)),
            Binary::Max => (f64::from(a >= b), f64::from(a < b)),
        };
        dx[k] = d[k] * gx;
        dy[k] = d[k] * gy;
    }
    let dx = reduce_to(&dx, &out_shape, &x.shape);
    let dy = reduce_to(&dy, &out_shape, &ys);
    Ok((
        Tensor::float(x.dtype(), x.shape.clone(), dx),
        Tensor::float(y.dtype(), y.shape.clone(), dy),
    ))
}

/// The activations.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Unary {
    Relu,
    Gelu {
        tanh: bool,
    },
    Silu,
    Sigmoid,
    Square,
    Scale {
        scale: f64,
        bias: f64,
        bias_after: bool,
    },
    Sqrt,
}

const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;

fn apply(u: Unary, x: f64) -> f64 {
    match u {
        Unary::Relu => x.max(0.0),
        Unary::Gelu { tanh: true } => {
            0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)).tanh())
        }
        Unary::Gelu { tanh: false } => 0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2)),
        Unary::Silu => x / (1.0 + (-x).exp()),
        Unary::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        Unary::Square => x * x,
        Unary::Scale {
            scale,
            bias,
            bias_after: true,
        } => scale * x + bias,
        Unary::Scale {
            scale,
            bias,
            bias_after: false,
        } => scale * (x + bias),
        Unary::Sqrt => x.sqrt(),
    }
}

fn derivative(u: Unary, x: f64) -> f64 {
    match u {
        Unary::Relu => f64::from(x > 0.0),
        Unary::Gelu { tanh: true } => {
            let inner = SQRT_2_OVER_PI * (x + 0.044715 * x * x * x);
            let t = inner.tanh();
            0.5 * (1.0 + t)
                + 0.5 * x * (1.0 - t * t) * SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044715 * x * x)
        }
        Unary::Gelu { tanh: false } => {
            let cdf = 0.5 * (1.0 + libm::erf(x / std::f64::consts::SQRT_2));
            let pdf = (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
            cdf + x * pdf
        }
        Unary::Silu => {
            let s = 1.0 / (1.0 + (-x).exp());
            s * (1.0 + x * (1.0 - s))
        }
        Unary::Sigmoid => {
            let s = 1.0 / (1.0 + (-x).exp());
            s * (1.0 - s)
        }
        Unary::Square => 2.0 * x,
        Unary::Scale { scale, .. } => scale,
        Unary::Sqrt => 0.5 / x.sqrt(),
    }
}

/// `scale · x + bias` when the activation is that affine map (the scale op with its bias
/// after), so the caller runs its own loop: the generic one re-dispatches on the kind per
/// element, which made the gradients' 1/N scale slow.
fn affine(u: Unary) -> Option<(f64, f64)> {
    match u {
        Unary::Scale {
            scale,
            bias,
            bias_after: true,
        } => Some((scale, bias)),
        Unary::Relu
        | Unary::Gelu { .. }
        | Unary::Silu
        | Unary::Sigmoid
        | Unary::Square
        | Unary::Scale { .. }
        | Unary::Sqrt => None,
    }
}

/// Forward of an activation.
pub fn unary(u: Unary, x: &Tensor) -> Tensor {
    match affine(u) {
        Some((a, b)) => x.map(|v| a * v + b),
        None => x.map(|v| apply(u, v)),
    }
}

/// An activation in place (an op whose output is its input, as the data-parallel 1/N
/// scale of every gradient is).
pub fn unary_in_place(u: Unary, x: &mut Tensor) {
    match affine(u) {
        Some((a, b)) => x.map_in_place(|v| a * v + b),
        None => x.map_in_place(|v| apply(u, v)),
    }
}

/// dX of an activation.
pub fn unary_grad(u: Unary, x: &Tensor, dout: &Tensor) -> Res<Tensor> {
    if x.numel() != dout.numel() {
        return Err(crate::exec::op_error::OpError::GradShape {
            what: "activation",
            x: x.shape.clone(),
            grad: dout.shape.clone(),
        });
    }
    if let Some(t) = x.zip_map(dout, |a, d| d * derivative(u, a)) {
        return Ok(t);
    }
    let v: Vec<f64> = x
        .to_f64()
        .iter()
        .zip(dout.to_f64())
        .map(|(&a, d)| d * derivative(u, a))
        .collect();
    Ok(Tensor::float(x.dtype(), x.shape.clone(), v))
}

/// A uniform number in [0, 1) from a seed and an element's global index (splitmix64), so a
/// sharded dropout draws the same mask as the serial one.
pub fn uniform(seed: u64, index: u64) -> f64 {
    let mut z = seed.wrapping_add(index.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// Dropout (upscale in train): returns (out, mask). `global` maps a local element index
/// to its index in the global tensor.
pub fn dropout(
    x: &Tensor,
    p: f64,
    seed: u64,
    is_test: bool,
    global: &dyn Fn(usize) -> usize,
) -> (Tensor, Tensor) {
    let keep = 1.0 - p;
    let mask: Vec<f64> = (0..x.numel())
        .map(|i| {
            if is_test || p == 0.0 {
                1.0
            } else if uniform(seed, global(i) as u64) >= p {
                1.0 / keep
            } else {
                0.0
            }
        })
        .collect();
    let out = x.to_f64().iter().zip(&mask).map(|(a, m)| a * m).collect();
    (
        Tensor::float(x.dtype(), x.shape.clone(), out),
        Tensor::float(x.dtype(), x.shape.clone(), mask),
    )
}

/// Elementwise product (dropout's backward: dOut * Mask).
pub fn mul_same(a: &Tensor, b: &Tensor) -> Tensor {
    let v = a
        .to_f64()
        .iter()
        .zip(b.to_f64())
        .map(|(x, y)| x * y)
        .collect();
    Tensor::float(a.dtype(), a.shape.clone(), v)
}
