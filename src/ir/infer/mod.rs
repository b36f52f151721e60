//! Shape and dtype inference for every op type. Errors (`InferError`) name the slot, the
//! shapes and the attribute at fault; callers add which op it was.

pub use super::infer_error::{InferError, InferErrorKind};
use super::op_type::OpType;
use super::program::Op;
use super::types::{DType, Shape, TensorType};
use InferErrorKind as E;

type Res<T> = Result<T, InferError>;

/// Fails with `kind`.
fn fail<T>(kind: InferErrorKind) -> Res<T> {
    Err(kind.into())
}

/// Infers the output types of `op` from the types of its inputs (`inputs[slot][i]`).
/// Returns one list per output slot, in schema order.
pub fn infer_op(op: &Op, inputs: &[Vec<&TensorType>]) -> Res<Vec<Vec<TensorType>>> {
    match op.ty {
        OpType::Forward(f) => (f.def().infer)(op, inputs),
        OpType::Grad(_) => super::infer_planner::infer_grad(op, inputs),
        OpType::Math(_)
        | OpType::Optimizer(_)
        | OpType::Amp(_)
        | OpType::Collective(_)
        | OpType::RankLocal(_) => super::infer_planner::infer_planner_op(op, inputs),
        OpType::FillConstant => {
            let dtype = dtype_attr(op, "dtype")?;
            let shape = op.attr_ints("shape").ok_or(E::MissingAttr("shape"))?;
            Ok(vec![vec![TensorType::new(dtype, positive_dims(shape)?)]])
        }
    }
}

/// The element type an attribute names.
pub(crate) fn dtype_attr(op: &Op, attr: &'static str) -> Res<DType> {
    let name = op.attr_str(attr).unwrap_or("");
    DType::from_name(name).ok_or_else(|| {
        E::UnknownDType {
            attr,
            name: name.to_string(),
        }
        .into()
    })
}

/// A shape attribute whose every dim must be positive.
pub(crate) fn positive_dims(shape: &[i64]) -> Res<Vec<usize>> {
    shape
        .iter()
        .map(|&d| usize::try_from(d).ok().filter(|&d| d > 0))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| E::NonPositiveDims(shape.to_vec()).into())
}

/// The one variable of input slot `slot`.
fn one<'a>(op: &Op, inputs: &[Vec<&'a TensorType>], slot: usize) -> Res<&'a TensorType> {
    let spec = op.ty.input_slots().get(slot).ok_or(E::MissingSlot)?;
    match inputs.get(slot).map(|v| v.as_slice()) {
        Some([t]) => Ok(*t),
        _ => fail(E::NotOne { slot: spec.name }),
    }
}

pub mod forward;
pub mod moe;

fn float<'a>(t: &'a TensorType, slot: &'static str) -> Res<&'a TensorType> {
    if t.dtype.is_float() {
        Ok(t)
    } else {
        fail(E::NotFloat {
            slot,
            got: t.clone(),
        })
    }
}

/// Normalises a possibly negative axis against `rank`.
pub fn axis(a: i64, rank: usize, what: &'static str) -> Res<usize> {
    let r = rank as i64;
    if a < -r || a >= r.max(1) || (r == 0) {
        return fail(E::AxisOutOfRange {
            what,
            axis: a,
            rank,
        });
    }
    Ok(if a < 0 { (a + r) as usize } else { a as usize })
}

/// Numpy broadcasting of two shapes, aligned at the right.
pub fn broadcast(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let db = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return None,
        };
    }
    Some(out)
}

fn same_dtype(x: &TensorType, y: &TensorType) -> Res<DType> {
    if x.dtype == y.dtype {
        Ok(x.dtype)
    } else {
        fail(E::DTypesDiffer {
            x: x.clone(),
            y: y.clone(),
        })
    }
}

fn matmul(op: &Op, x: &TensorType, y: &TensorType) -> Res<TensorType> {
    let dtype = same_dtype(float(x, "X")?, float(y, "Y")?)?;
    if x.rank() == 0 || y.rank() == 0 {
        return fail(E::ScalarMatmul {
            x: x.clone(),
            y: y.clone(),
        });
    }
    let (tx, ty) = (
        op.attr_bool("trans_x", false),
        op.attr_bool("trans_y", false),
    );
    // Paddle: a rank-1 X is a row vector, a rank-1 Y a column vector; transposes apply to
    // the last two dims only.
    let (xb, m, kx) = x_matrix(&x.shape, tx);
    let (yb, ky, n) = y_matrix(&y.shape, ty);
    if kx != ky {
        return fail(E::Contraction {
            x: x.clone(),
            y: y.clone(),
            kx,
            ky,
            trans_x: tx,
            trans_y: ty,
        });
    }
    let mut shape = broadcast(xb, yb).ok_or_else(|| E::BatchBroadcast {
        x: x.clone(),
        y: y.clone(),
    })?;
    shape.extend(m);
    shape.extend(n);
    Ok(TensorType::new(dtype, shape))
}

/// X of a matmul as (batch dims, m, k); a vector has no m.
pub fn x_matrix(s: &[usize], trans: bool) -> (&[usize], Option<usize>, usize) {
    match s.len() {
        0 => (&[], None, 0),
        1 => (&[], None, s[0]),
        r if trans => (&s[..r - 2], Some(s[r - 1]), s[r - 2]),
        r => (&s[..r - 2], Some(s[r - 2]), s[r - 1]),
    }
}

/// Y of a matmul as (batch dims, k, n); a vector has no n.
pub fn y_matrix(s: &[usize], trans: bool) -> (&[usize], usize, Option<usize>) {
    match s.len() {
        0 => (&[], 0, None),
        1 => (&[], s[0], None),
        r if trans => (&s[..r - 2], s[r - 1], Some(s[r - 2])),
        r => (&s[..r - 2], s[r - 2], Some(s[r - 1])),
    }
}

fn elementwise(op: &Op, x: &TensorType, y: &TensorType) -> Res<TensorType> {
    let dtype = same_dtype(x, y)?;
    let a = op.attr_int("axis", -1);
    let y_shape = if a == -1 || y.rank() == x.rank() {
        y.shape.clone()
    } else {
        // Paddle's legacy alignment: Y's dims line up with X's starting at `axis`.
        let start = usize::try_from(a)
            .ok()
            .filter(|&s| s + y.rank() <= x.rank())
            .ok_or_else(|| E::Align {
                axis: a,
                x: x.clone(),
                y: y.clone(),
            })?;
        let mut s: Shape = smallvec::smallvec![1; start];
        s.extend_from_slice(&y.shape);
        s.resize(x.rank(), 1);
        s
    };
    let shape = broadcast(&x.shape, &y_shape).ok_or_else(|| E::Broadcast {
        x: x.clone(),
        y: y.clone(),
    })?;
    Ok(TensorType::new(dtype, shape))
}

fn layer_norm(op: &Op, inputs: &[Vec<&TensorType>]) -> Res<Vec<Vec<TensorType>>> {
    let x = match inputs.first().map(|v| v.as_slice()) {
        Some([x]) => float(x, "X")?,
        _ => return fail(E::NotOne { slot: "X" }),
    };
    let begin = begin_norm_axis(op, x)?;
    let normalized: usize = x.shape[begin..]
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .unwrap_or(usize::MAX); // a width past usize matches no parameter

    for (slot, name) in [(1, "Scale"), (2, "Bias")] {
        match inputs.get(slot).map(|v| v.as_slice()) {
            None | Some([]) => {}
            Some([p]) if p.shape[..] == [normalized] && p.dtype == x.dtype => {}
            Some([p]) => {
                return fail(E::NormParam {
                    slot: name,
                    normalized,
                    x: x.clone(),
                    got: (*p).clone(),
                })
            }
            Some(_) => return fail(E::MoreThanOne { slot: name }),
        }
    }
    let stats = TensorType::new(x.dtype, x.shape[..begin].to_vec());
    Ok(vec![vec![x.clone()], vec![stats.clone()], vec![stats]])
}

/// A normalisation's first normalised dim: in `[1, rank)`.
fn begin_norm_axis(op: &Op, x: &TensorType) -> Res<usize> {
    let b = op.attr_int("begin_norm_axis", 1);
    usize::try_from(b)
        .ok()
        .filter(|&b| b >= 1 && b < x.rank().max(1))
        .ok_or_else(|| {
            E::BeginNormAxis {
                begin: b,
                x: x.clone(),
            }
            .into()
        })
}

fn lookup(op: &Op, w: &TensorType, ids: &TensorType) -> Res<TensorType> {
    let w = float(w, "W")?;
    if w.rank() != 2 {
        return fail(E::NotTable(w.clone()));
    }
    if ids.dtype != DType::I64 {
        return fail(E::IdsNotI64(ids.clone()));
    }
    let p = op.attr_int("padding_idx", -1);
    if p != -1 && (p < 0 || p >= w.shape[0] as i64) {
        return fail(E::PaddingIdx {
            index: p,
            vocab: w.shape[0],
        });
    }
    let mut shape = ids.shape.clone();
    shape.push(w.shape[1]);
    Ok(TensorType::new(w.dtype, shape))
}

/// Resolves a reshape target (with Paddle's `0` = copy and `-1` = infer) against `x`.
pub fn reshape_target(x: &TensorType, target: &[i64]) -> Res<Vec<usize>> {
    let mut out = Vec::with_capacity(target.len());
    let mut infer_at = None;
    for (i, &d) in target.iter().enumerate() {
        match d {
            0 => out.push(*x.shape.get(i).ok_or_else(|| E::CopyDimMissing {
                index: i,
                x: x.clone(),
            })?),
            -1 if infer_at.is_none() => {
                infer_at = Some(i);
                out.push(1);
            }
            -1 => return fail(E::TwoInferredDims(target.to_vec())),
            d if d > 0 => out.push(d as usize),
            d => return fail(E::BadTargetDim { index: i, dim: d }),
        }
    }
    let too_many = || E::TargetTooLarge(target.to_vec());
    let elements = x
        .checked_numel()
        .ok_or_else(|| E::InputTooLarge(x.clone()))?;
    let known = TensorType::new(x.dtype, out.clone())
        .checked_numel()
        .ok_or_else(too_many)?;
    if let Some(i) = infer_at {
        if known == 0 || !elements.is_multiple_of(known) {
            return fail(E::CannotInferDim {
                target: target.to_vec(),
                elements,
                x: x.clone(),
            });
        }
        out[i] = usize::try_from(elements / known).map_err(|_| too_many())?;
    }
    let total = TensorType::new(x.dtype, out.clone())
        .checked_numel()
        .ok_or_else(too_many)?;
    if total != elements {
        return fail(E::ElementCount {
            target: target.to_vec(),
            total,
            x: x.clone(),
            elements,
        });
    }
    Ok(out)
}

fn reshape(op: &Op, x: &TensorType) -> Res<TensorType> {
    let target = op.attr_ints("shape").ok_or(E::MissingAttr("shape"))?;
    Ok(TensorType::new(x.dtype, reshape_target(x, target)?))
}

fn transpose(op: &Op, x: &TensorType) -> Res<TensorType> {
    let perm = op.attr_ints("axis").ok_or(E::MissingAttr("axis"))?;
    let mut seen = vec![false; x.rank()];
    let mut shape = Vec::with_capacity(x.rank());
    for &p in perm {
        let a = axis(p, x.rank(), "axis entry")?;
        if std::mem::replace(&mut seen[a], true) {
            return fail(E::RepeatedPermAxis {
                perm: perm.to_vec(),
                axis: a,
            });
        }
        shape.push(x.shape[a]);
    }
    if perm.len() != x.rank() {
        return fail(E::NotPermutation {
            perm: perm.to_vec(),
            x: x.clone(),
        });
    }
    Ok(TensorType::new(x.dtype, shape))
}

/// The sizes of split's outputs along its axis.
pub fn split_sections(op: &Op, x: &TensorType) -> Res<(usize, Vec<usize>)> {
    let a = axis(op.attr_int("axis", 0), x.rank(), "axis")?;
    let dim = x.shape[a];
    let num = op.attr_int("num", 0);
    match (num, op.attr_ints("sections")) {
        (n, None) if n > 0 => {
            let n = n as usize;
            if !dim.is_multiple_of(n) {
                return fail(E::NumDoesNotDivide {
                    num: n,
                    axis: a,
                    dim,
                    x: x.clone(),
                });
            }
            Ok((a, vec![dim / n; n]))
        }
        (0, Some(sections)) if !sections.is_empty() => {
            let infer = sections.iter().filter(|&&s| s == -1).count();
            if infer > 1 || sections.iter().any(|&s| s == 0 || s < -1) {
                return fail(E::BadSections(sections.to_vec()));
            }
            let known: i64 = sections.iter().filter(|&&s| s > 0).sum();
            let rest = dim as i64 - known;
            if (infer == 0 && rest != 0) || (infer == 1 && rest <= 0) {
                return fail(E::SectionsSum {
                    sections: sections.to_vec(),
                    axis: a,
                    dim,
                    x: x.clone(),
                });
            }
            Ok((
                a,
                sections
                    .iter()
                    .map(|&s| if s == -1 { rest as usize } else { s as usize })
                    .collect(),
            ))
        }
        _ => fail(E::SplitSpec),
    }
}

fn split(op: &Op, x: &TensorType) -> Res<Vec<TensorType>> {
    let (a, sections) = split_sections(op, x)?;
    Ok(sections
        .into_iter()
        .map(|s| {
            let mut shape = x.shape.clone();
            shape[a] = s;
            TensorType::new(x.dtype, shape)
        })
        .collect())
}

fn concat(op: &Op, xs: &[&TensorType]) -> Res<TensorType> {
    let first = xs.first().ok_or(E::NoneGiven { slot: "X" })?;
    let a = axis(op.attr_int("axis", 0), first.rank(), "axis")?;
    let mut shape = first.shape.clone();
    for (i, x) in xs.iter().enumerate().skip(1) {
        let compatible = x.dtype == first.dtype
            && x.rank() == first.rank()
            && (0..x.rank()).all(|d| d == a || x.shape[d] == first.shape[d]);
        if !compatible {
            return fail(E::ConcatMismatch {
                index: i,
                x: (*x).clone(),
                first: (*first).clone(),
                axis: a,
            });
        }
        shape[a] += x.shape[a];
    }
    Ok(TensorType::new(first.dtype, shape))
}

/// The normalised, sorted reduced axes of a reduce op (all when `reduce_all` or empty).
pub fn reduce_axes(op: &Op, rank: usize) -> Res<Vec<usize>> {
    let dims = op.attr_ints("dim").unwrap_or(&[]);
    if op.attr_bool("reduce_all", false) || dims.is_empty() {
        return Ok((0..rank).collect());
    }
    let mut axes = dims
        .iter()
        .map(|&d| axis(d, rank, "dim entry"))
        .collect::<Res<Vec<_>>>()?;
    axes.sort_unstable();
    if axes.windows(2).any(|w| w[0] == w[1]) {
        return fail(E::RepeatedDim(dims.to_vec()));
    }
    Ok(axes)
}

fn reduce(op: &Op, x: &TensorType) -> Res<TensorType> {
    let axes = reduce_axes(op, x.rank())?;
    let keep = op.attr_bool("keep_dim", false);
    let shape: Shape = (0..x.rank())
        .filter_map(|d| match (axes.contains(&d), keep) {
            (false, _) => Some(x.shape[d]),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect();
    Ok(TensorType::new(x.dtype, shape))
}

pub(crate) fn softmax_ce(
    op: &Op,
    logits: &TensorType,
    label: &TensorType,
) -> Res<Vec<Vec<TensorType>>> {
    let logits = float(logits, "Logits")?;
    let a = axis(op.attr_int("axis", -1), logits.rank(), "axis")?;
    let mut loss_shape = logits.shape.clone();
    loss_shape[a] = 1;
    if op.attr_bool("soft_label", false) {
        if label != logits {
            return fail(E::SoftLabel {
                logits: logits.clone(),
                label: label.clone(),
            });
        }
    } else if label.dtype != DType::I64 || label.shape != loss_shape {
        let want = TensorType::new(DType::I64, loss_shape);
        return fail(E::HardLabel {
            want,
            logits: logits.clone(),
            axis: a,
            label: label.clone(),
        });
    }
    Ok(vec![
        vec![logits.clone()],
        vec![TensorType::new(logits.dtype, loss_shape)],
    ])
}
