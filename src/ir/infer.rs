//! Shape and dtype inference for every op type. Errors are plain messages naming the slot,
//! the shapes and the attribute at fault; callers add which op it was.

use super::op_type::OpType;
use super::program::Op;
use super::types::{DType, Shape, TensorType};

type Res<T> = Result<T, String>;

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
            let name = op.attr_str("dtype").unwrap_or("");
            let dtype = DType::from_name(name)
                .ok_or_else(|| format!("dtype `{name}` is not one of f32, f64, i64"))?;
            let shape = op.attr_ints("shape").ok_or("attribute shape is required")?;
            let dims = shape
                .iter()
                .map(|&d| usize::try_from(d).ok().filter(|&d| d > 0))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| format!("shape {shape:?} must have positive dims"))?;
            Ok(vec![vec![TensorType::new(dtype, dims)]])
        }
    }
}

/// The one variable of input slot `slot`.
fn one<'a>(op: &Op, inputs: &[Vec<&'a TensorType>], slot: usize) -> Res<&'a TensorType> {
    let spec = op.ty.input_slots().get(slot).ok_or("missing input slot")?;
    match inputs.get(slot).map(|v| v.as_slice()) {
        Some([t]) => Ok(*t),
        _ => Err(format!(
            "input {} must hold exactly one variable",
            spec.name
        )),
    }
}

/// The inference of each forward op, as its declaration (`ir::ops`) names it.
pub mod forward {
    use super::{one, Res};
    use crate::ir::program::Op;
    use crate::ir::types::{DType, TensorType};

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
        let name = op.attr_str("out_dtype").unwrap_or("");
        let dtype = DType::from_name(name)
            .ok_or_else(|| format!("out_dtype `{name}` is not one of f32, f64, i64"))?;
        single(TensorType::new(dtype, one(op, ins, 0)?.shape.clone()))
    }

    pub fn dropout(op: &Op, ins: &[Vec<&TensorType>]) -> Outs {
        let x = super::float(one(op, ins, 0)?, "X")?;
        let p = op.attr_float("dropout_prob", 0.5);
        if !(0.0..1.0).contains(&p) {
            return Err(format!("dropout_prob {p} must be in [0, 1)"));
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
            return Err(format!(
                "X must end in two equal dims (a [.., seq, seq] score matrix), got {x}"
            ));
        }
        single(x.clone())
    }

    pub fn layer_norm(op: &Op, ins: &[Vec<&TensorType>]) -> Outs {
        super::layer_norm(op, ins)
    }

    pub fn rms_norm(op: &Op, ins: &[Vec<&TensorType>]) -> Outs {
        let x = super::float(one(op, ins, 0)?, "X")?;
        let begin = super::begin_norm_axis(op, x)?;
        let normalized: usize = x.shape[begin..].iter().product();
        let scale = one(op, ins, 1)?;
        if scale.shape[..] != [normalized] || scale.dtype != x.dtype {
            return Err(format!(
                "Scale must be {}[{normalized}] (the normalised size of X {x}), got {scale}",
                x.dtype
            ));
        }
        let inv_var = TensorType::new(x.dtype, x.shape[..begin].to_vec());
        Ok(vec![vec![x.clone()], vec![inv_var]])
    }

    pub fn rope(op: &Op, ins: &[Vec<&TensorType>]) -> Outs {
        let x = super::float(one(op, ins, 0)?, "X")?;
        let [_, seq, _, d] = x.shape[..] else {
            return Err(format!("X must be [batch, seq, heads, head_dim], got {x}"));
        };
        if d % 2 != 0 {
            return Err(format!(
                "head_dim {d} of X {x} must be even (elements rotate in pairs)"
            ));
        }
        let want = TensorType::new(x.dtype, vec![1, seq, 1, d]);
        for (slot, name) in [(1, "Sin"), (2, "Cos")] {
            let t = one(op, ins, slot)?;
            if *t != want {
                return Err(format!(
                    "{name} must be {want} (one row per position of X {x}), got {t}"
                ));
            }
        }
        single(x.clone())
    }

    // On 32-bit wasm MAX_ELEMENTS is usize::MAX, where the comparison cannot fail.
    #[allow(clippy::absurd_extreme_comparisons)]
    pub fn repeat_interleave(op: &Op, ins: &[Vec<&TensorType>]) -> Outs {
        let x = one(op, ins, 0)?;
        let a = super::axis(op.attr_int("axis", 0), x.rank(), "axis")?;
        let r = op.attr_int("repeats", 0);
        let r = usize::try_from(r)
            .ok()
            .filter(|&r| r >= 1)
            .ok_or_else(|| format!("repeats {r} must be at least 1"))?;
        let mut shape = x.shape.clone();
        shape[a] = shape[a]
            .checked_mul(r)
            .filter(|&n| n <= crate::ir::MAX_ELEMENTS)
            .ok_or_else(|| format!("repeats {r} makes dim {a} of X {x} too large"))?;
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
}

fn float<'a>(t: &'a TensorType, slot: &str) -> Res<&'a TensorType> {
    if t.dtype.is_float() {
        Ok(t)
    } else {
        Err(format!("{slot} must be f32 or f64, got {t}"))
    }
}

/// Normalises a possibly negative axis against `rank`.
pub fn axis(a: i64, rank: usize, what: &str) -> Res<usize> {
    let r = rank as i64;
    if a < -r || a >= r.max(1) || (r == 0) {
        return Err(format!("{what} {a} is out of range for rank {rank}"));
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
        Err(format!("X is {x} but Y is {y}: dtypes differ"))
    }
}

fn matmul(op: &Op, x: &TensorType, y: &TensorType) -> Res<TensorType> {
    let dtype = same_dtype(float(x, "X")?, float(y, "Y")?)?;
    if x.rank() == 0 || y.rank() == 0 {
        return Err(format!("X ({x}) and Y ({y}) must have rank at least 1"));
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
        return Err(format!(
            "contraction dims differ: X is {x} (k = {kx}), Y is {y} (k = {ky}) \
             with trans_x={tx}, trans_y={ty}"
        ));
    }
    let mut shape = broadcast(xb, yb)
        .ok_or_else(|| format!("batch dims of X ({x}) and Y ({y}) do not broadcast"))?;
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
            .ok_or_else(|| format!("axis {a} cannot align Y ({y}) inside X ({x})"))?;
        let mut s: Shape = smallvec::smallvec![1; start];
        s.extend_from_slice(&y.shape);
        s.resize(x.rank(), 1);
        s
    };
    let shape = broadcast(&x.shape, &y_shape)
        .ok_or_else(|| format!("X ({x}) and Y ({y}) do not broadcast"))?;
    Ok(TensorType::new(dtype, shape))
}

fn layer_norm(op: &Op, inputs: &[Vec<&TensorType>]) -> Res<Vec<Vec<TensorType>>> {
    let x = match inputs.first().map(|v| v.as_slice()) {
        Some([x]) => float(x, "X")?,
        _ => return Err("input X must hold exactly one variable".into()),
    };
    let begin = begin_norm_axis(op, x)?;
    let normalized: usize = x.shape[begin..].iter().product();
    for (slot, name) in [(1, "Scale"), (2, "Bias")] {
        match inputs.get(slot).map(|v| v.as_slice()) {
            None | Some([]) => {}
            Some([p]) if p.shape[..] == [normalized] && p.dtype == x.dtype => {}
            Some([p]) => {
                return Err(format!(
                    "{name} must be {}[{normalized}] (the normalised size of X {x}), got {p}",
                    x.dtype
                ))
            }
            Some(_) => return Err(format!("{name} holds more than one variable")),
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
        .ok_or_else(|| format!("begin_norm_axis {b} must be in [1, {}) for X {x}", x.rank()))
}

fn lookup(op: &Op, w: &TensorType, ids: &TensorType) -> Res<TensorType> {
    let w = float(w, "W")?;
    if w.rank() != 2 {
        return Err(format!("W must be a [vocab, width] table, got {w}"));
    }
    if ids.dtype != DType::I64 {
        return Err(format!("Ids must be i64, got {ids}"));
    }
    let p = op.attr_int("padding_idx", -1);
    if p != -1 && (p < 0 || p >= w.shape[0] as i64) {
        return Err(format!(
            "padding_idx {p} is outside the vocabulary [0, {})",
            w.shape[0]
        ));
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
            0 => out.push(
                *x.shape
                    .get(i)
                    .ok_or_else(|| format!("shape[{i}] is 0 (copy) but X {x} has no dim {i}"))?,
            ),
            -1 if infer_at.is_none() => {
                infer_at = Some(i);
                out.push(1);
            }
            -1 => return Err(format!("shape {target:?} has more than one -1")),
            d if d > 0 => out.push(d as usize),
            d => return Err(format!("shape[{i}] = {d} is invalid")),
        }
    }
    let too_many = || format!("shape {target:?} has more elements than a tensor may hold (2^53)");
    let elements = x
        .checked_numel()
        .ok_or_else(|| format!("X {x} has more elements than a tensor may hold (2^53)"))?;
    let known = TensorType::new(x.dtype, out.clone())
        .checked_numel()
        .ok_or_else(too_many)?;
    if let Some(i) = infer_at {
        if known == 0 || !elements.is_multiple_of(known) {
            return Err(format!(
                "cannot infer -1 in {target:?}: {elements} elements of X {x}"
            ));
        }
        out[i] = elements / known;
    }
    let total = TensorType::new(x.dtype, out.clone())
        .checked_numel()
        .ok_or_else(too_many)?;
    if total != elements {
        return Err(format!(
            "shape {target:?} has {total} elements but X {x} has {elements}"
        ));
    }
    Ok(out)
}

fn reshape(op: &Op, x: &TensorType) -> Res<TensorType> {
    let target = op.attr_ints("shape").ok_or("attribute shape is required")?;
    Ok(TensorType::new(x.dtype, reshape_target(x, target)?))
}

fn transpose(op: &Op, x: &TensorType) -> Res<TensorType> {
    let perm = op.attr_ints("axis").ok_or("attribute axis is required")?;
    let mut seen = vec![false; x.rank()];
    let mut shape = Vec::with_capacity(x.rank());
    for &p in perm {
        let a = axis(p, x.rank(), "axis entry")?;
        if std::mem::replace(&mut seen[a], true) {
            return Err(format!("axis {perm:?} repeats {a}"));
        }
        shape.push(x.shape[a]);
    }
    if perm.len() != x.rank() {
        return Err(format!(
            "axis {perm:?} is not a permutation of the {} dims of X {x}",
            x.rank()
        ));
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
                return Err(format!("num {n} does not divide dim {a} ({dim}) of X {x}"));
            }
            Ok((a, vec![dim / n; n]))
        }
        (0, Some(sections)) if !sections.is_empty() => {
            let infer = sections.iter().filter(|&&s| s == -1).count();
            if infer > 1 || sections.iter().any(|&s| s == 0 || s < -1) {
                return Err(format!(
                    "sections {sections:?} must be positive with at most one -1"
                ));
            }
            let known: i64 = sections.iter().filter(|&&s| s > 0).sum();
            let rest = dim as i64 - known;
            if (infer == 0 && rest != 0) || (infer == 1 && rest <= 0) {
                return Err(format!(
                    "sections {sections:?} do not add up to dim {a} ({dim}) of X {x}"
                ));
            }
            Ok((
                a,
                sections
                    .iter()
                    .map(|&s| if s == -1 { rest as usize } else { s as usize })
                    .collect(),
            ))
        }
        _ => Err("exactly one of num (> 0) and sections (non-empty) must be given".into()),
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
    let first = xs.first().ok_or("X must hold at least one variable")?;
    let a = axis(op.attr_int("axis", 0), first.rank(), "axis")?;
    let mut shape = first.shape.clone();
    for (i, x) in xs.iter().enumerate().skip(1) {
        let compatible = x.dtype == first.dtype
            && x.rank() == first.rank()
            && (0..x.rank()).all(|d| d == a || x.shape[d] == first.shape[d]);
        if !compatible {
            return Err(format!(
                "X[{i}] ({x}) does not match X[0] ({first}) outside the concat axis {a}"
            ));
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
        return Err(format!("dim {dims:?} repeats an axis"));
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
            return Err(format!(
                "a soft Label must match Logits {logits}, got {label}"
            ));
        }
    } else if label.dtype != DType::I64 || label.shape != loss_shape {
        let want = TensorType::new(DType::I64, loss_shape);
        return Err(format!(
            "a hard Label must be {want} (Logits {logits} with axis {a} of size 1), got {label}"
        ));
    }
    Ok(vec![
        vec![logits.clone()],
        vec![TensorType::new(logits.dtype, loss_shape)],
    ])
}
