//! The inference of each forward op, as its declaration (`ir::ops`) names it.

use super::{fail, one, Res, E};
use crate::ir::program::Op;
use crate::ir::types::TensorType;

type Outs = Res<Vec<Vec<TensorType>>>;

fn single(t: TensorType) -> Outs {
    Ok(vec![vec![t]])
}

pub fn matmul(op: &Op, ins: &[Vec<&TensorType>]) -> Outs {
    single(super::matmul(op, one(op, ins, 0)?, one(op, ins, 1)?)?)
}

pub fn elementwise(op: &Op, ins: &[Vec<&TensorType>]) -> Outs {
    single(super::elementwise(op, one(op, ins, 0)?, one(op, ins, 1)?)?)
}

/// A float output of the input's type.
pub fn same_float(op: &Op, ins: &[Vec<&TensorType>]) -> Outs {
    single(super::float(one(op, ins, 0)?, "X")?.clone())
}

/// The input's type, any dtype.
pub fn same(op: &Op, ins: &[Vec<&TensorType>]) -> Outs {
    single(one(op, ins, 0)?.clone())
}

pub fn cast(op: &Op, ins: &[Vec<&TensorType>]) -> Outs {
    let dtype = super::dtype_attr(op, "out_dtype")?;
    single(TensorType::new(dtype, one(op, ins, 0)?.shape.clone()))
}

pub fn dropout(op: &Op, ins: &[Vec<&TensorType>]) -> Outs {
    let x = super::float(one(op, ins, 0)?, "X")?;
    let p = op.attr_float("dropout_prob", 0.5);
    if !(0.0..1.0).contains(&p) {
        return fail(E::DropoutProb(p));
    }
    Ok(vec![vec![x.clone()], vec![x.clone()]])
}

pub fn softmax(op: &Op, ins: &[Vec<&TensorType>]) -> Outs {
    let x = super::float(one(op, ins, 0)?, "X")?;
    super::axis(op.attr_int("axis", -1), x.rank(), "axis")?;
    single(x.clone())
}

pub fn masked_softmax(op: &Op, ins: &[Vec<&TensorType>]) -> Outs {
    let x = super::float(one(op, ins, 0)?, "X")?;
    let r = x.rank();
    if r < 2 || x.shape[r - 1] != x.shape[r - 2] {
        return fail(E::NotScoreMatrix(x.clone()));
    }
    single(x.clone())
}

pub fn layer_norm(op: &Op, ins: &[Vec<&TensorType>]) -> Outs {
    super::layer_norm(op, ins)
}

pub fn rms_norm(op: &Op, ins: &[Vec<&TensorType>]) -> Outs {
    let x = super::float(one(op, ins, 0)?, "X")?;
    let begin = super::begin_norm_axis(op, x)?;
    let normalized: usize = x.shape[begin..]
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .unwrap_or(usize::MAX); // a width past usize matches no parameter

    let scale = one(op, ins, 1)?;
    if scale.shape[..] != [normalized] || scale.dtype != x.dtype {
        return fail(E::NormParam {
            slot: "Scale",
            normalized,
            x: x.clone(),
            got: scale.clone(),
        });
    }
    let inv_var = TensorType::new(x.dtype, x.shape[..begin].to_vec());
    Ok(vec![vec![x.clone()], vec![inv_var]])
}

pub fn rope(op: &Op, ins: &[Vec<&TensorType>]) -> Outs {
    let x = super::float(one(op, ins, 0)?, "X")?;
    let [_, seq, _, d] = x.shape[..] else {
        return fail(E::NotRopeLayout(x.clone()));
    };
    if d % 2 != 0 {
        return fail(E::OddHeadDim {
            head_dim: d,
            x: x.clone(),
        });
    }
    let want = TensorType::new(x.dtype, vec![1, seq, 1, d]);
    for (slot, name) in [(1, "Sin"), (2, "Cos")] {
        let t = one(op, ins, slot)?;
        if *t != want {
            return fail(E::RopeTable {
                slot: name,
                want,
                x: x.clone(),
                got: t.clone(),
            });
        }
    }
    single(x.clone())
}

pub fn repeat_interleave(op: &Op, ins: &[Vec<&TensorType>]) -> Outs {
    let x = one(op, ins, 0)?;
    let a = super::axis(op.attr_int("axis", 0), x.rank(), "axis")?;
    let r = op.attr_int("repeats", 0);
    let r = usize::try_from(r)
        .ok()
        .filter(|&r| r >= 1)
        .ok_or(E::Repeats(r))?;
    let mut shape = x.shape.clone();
    shape[a] = shape[a]
        .checked_mul(r)
        .filter(|&n| n as u64 <= crate::ir::MAX_ELEMENTS)
        .ok_or_else(|| E::RepeatsTooLarge {
            repeats: r,
            axis: a,
            x: x.clone(),
        })?;
    single(TensorType::new(x.dtype, shape))
}

pub fn lookup(op: &Op, ins: &[Vec<&TensorType>]) -> Outs {
    single(super::lookup(op, one(op, ins, 0)?, one(op, ins, 1)?)?)
}

pub fn reshape(op: &Op, ins: &[Vec<&TensorType>]) -> Outs {
    single(super::reshape(op, one(op, ins, 0)?)?)
}

pub fn transpose(op: &Op, ins: &[Vec<&TensorType>]) -> Outs {
    single(super::transpose(op, one(op, ins, 0)?)?)
}

pub fn split(op: &Op, ins: &[Vec<&TensorType>]) -> Outs {
    Ok(vec![super::split(op, one(op, ins, 0)?)?])
}

pub fn concat(op: &Op, ins: &[Vec<&TensorType>]) -> Outs {
    single(super::concat(
        op,
        ins.first().map(|v| v.as_slice()).unwrap_or(&[]),
    )?)
}

pub fn reduce(op: &Op, ins: &[Vec<&TensorType>]) -> Outs {
    single(super::reduce(op, super::float(one(op, ins, 0)?, "X")?)?)
}

pub fn mean(op: &Op, ins: &[Vec<&TensorType>]) -> Outs {
    let x = super::float(one(op, ins, 0)?, "X")?;
    single(TensorType::new(x.dtype, vec![]))
}

pub fn softmax_ce(op: &Op, ins: &[Vec<&TensorType>]) -> Outs {
    super::softmax_ce(op, one(op, ins, 0)?, one(op, ins, 1)?)
}

/// `flash_attn` in a build without its planning (the playground's modules).
#[cfg(not(feature = "context-parallel"))]
pub fn flash_attn(_: &Op, _: &[Vec<&TensorType>]) -> Outs {
    fail(E::NotInThisBuild("flash_attn"))
}

/// `flash_attn`: Q `[b, s, h, d]`, K and V `[b, s_kv, h_kv, d]` with `h_kv` dividing `h`
/// (and `s_kv = s` when causal); Out is Q's type, SoftmaxLse `[b, h, s]`.
#[cfg(feature = "context-parallel")]
pub fn flash_attn(op: &Op, ins: &[Vec<&TensorType>]) -> Outs {
    let q = super::float(one(op, ins, 0)?, "Q")?;
    let k = one(op, ins, 1)?;
    let v = one(op, ins, 2)?;
    let [b, s, h, d] = q.shape[..] else {
        return fail(E::NotAttentionLayout {
            slot: "Q",
            x: q.clone(),
        });
    };
    for (slot, t) in [("K", k), ("V", v)] {
        let [kb, ks, kh, kd] = t.shape[..] else {
            return fail(E::NotAttentionLayout { slot, x: t.clone() });
        };
        let causal = op.attr_bool("causal", true);
        if t.dtype != q.dtype || kb != b || kd != d || kh == 0 || h % kh != 0 || (causal && ks != s)
        {
            return fail(E::AttentionOperand {
                slot,
                q: q.clone(),
                got: t.clone(),
            });
        }
    }
    if k.shape != v.shape {
        return fail(E::AttentionOperand {
            slot: "V",
            q: q.clone(),
            got: v.clone(),
        });
    }
    // A ring step's block holds part of a sequence of `seq` stored positions.
    let total = usize::try_from(op.attr_int("seq", s as i64)).unwrap_or(0);
    let z = op.attr_int("zigzag", 0);
    if z < 0 || (z > 1 && (z % 2 != 0 || total % z as usize != 0)) {
        return fail(E::Zigzag {
            zigzag: z,
            seq: total,
        });
    }
    let lse = TensorType::new(q.dtype, vec![b, h, s]);
    Ok(vec![vec![q.clone()], vec![lse]])
}
