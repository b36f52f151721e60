//! Shape and dtype inference for every op type. Errors are plain messages naming the slot,
//! the shapes and the attribute at fault; callers add which op it was.

use super::op_type::OpType;
use super::program::Op;
use super::types::{DType, Shape, TensorType};

type Res<T> = Result<T, String>;

/// Infers the output types of `op` from the types of its inputs (`inputs[slot][i]`).
/// Returns one list per output slot, in schema order.
pub fn infer_op(op: &Op, inputs: &[Vec<&TensorType>]) -> Res<Vec<Vec<TensorType>>> {
    let one = |slot: usize| -> Res<&TensorType> {
        let spec = op.ty.input_slots().get(slot).ok_or("missing input slot")?;
        match inputs.get(slot).map(|v| v.as_slice()) {
            Some([t]) => Ok(*t),
            _ => Err(format!(
                "input {} must hold exactly one variable",
                spec.name
            )),
        }
    };
    let single = |t: TensorType| Ok(vec![vec![t]]);
    match op.ty {
        OpType::Grad(_) => super::infer_planner::infer_grad(op, inputs),
        OpType::Math(_)
        | OpType::Optimizer(_)
        | OpType::Amp(_)
        | OpType::Collective(_)
        | OpType::RankLocal(_) => super::infer_planner::infer_planner_op(op, inputs),
        OpType::MatmulV2 => single(matmul(op, one(0)?, one(1)?)?),
        OpType::ElementwiseAdd
        | OpType::ElementwiseSub
        | OpType::ElementwiseMul
        | OpType::ElementwiseDiv => single(elementwise(op, one(0)?, one(1)?)?),
        OpType::Relu | OpType::Gelu | OpType::Silu | OpType::Square | OpType::Scale => {
            single(float(one(0)?, "X")?.clone())
        }
        OpType::Assign => single(one(0)?.clone()),
        OpType::Cast => {
            let name = op.attr_str("out_dtype").unwrap_or("");
            let dtype = DType::from_name(name)
                .ok_or_else(|| format!("out_dtype `{name}` is not one of f32, f64, i64"))?;
            single(TensorType::new(dtype, one(0)?.shape.clone()))
        }
        OpType::Dropout => {
            let x = float(one(0)?, "X")?;
            let p = op.attr_float("dropout_prob", 0.5);
            if !(0.0..1.0).contains(&p) {
                return Err(format!("dropout_prob {p} must be in [0, 1)"));
            }
            Ok(vec![vec![x.clone()], vec![x.clone()]])
        }
        OpType::Softmax => {
            let x = float(one(0)?, "X")?;
            axis(op.attr_int("axis", -1), x.rank(), "axis")?;
            single(x.clone())
        }
        OpType::FusedSoftmaxMaskUpperTriangle => {
            let x = float(one(0)?, "X")?;
            let r = x.rank();
            if r < 2 || x.shape[r - 1] != x.shape[r - 2] {
                return Err(format!(
                    "X must end in two equal dims (a [.., seq, seq] score matrix), got {x}"
                ));
            }
            single(x.clone())
        }
        OpType::LayerNorm => layer_norm(op, inputs),
        OpType::LookupTableV2 => single(lookup(op, one(0)?, one(1)?)?),
        OpType::Reshape2 => single(reshape(op, one(0)?)?),
        OpType::Transpose2 => single(transpose(op, one(0)?)?),
        OpType::Split => Ok(vec![split(op, one(0)?)?]),
        OpType::Concat => single(concat(
            op,
            inputs.first().map(|v| v.as_slice()).unwrap_or(&[]),
        )?),
        OpType::ReduceSum | OpType::ReduceMean => single(reduce(op, float(one(0)?, "X")?)?),
        OpType::Mean => single(TensorType::new(float(one(0)?, "X")?.dtype, vec![])),
        OpType::SoftmaxWithCrossEntropy => softmax_ce(op, one(0)?, one(1)?),
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
            single(TensorType::new(dtype, dims))
        }
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
    let b = op.attr_int("begin_norm_axis", 1);
    let begin = usize::try_from(b)
        .ok()
        .filter(|&b| b >= 1 && b < x.rank().max(1))
        .ok_or_else(|| format!("begin_norm_axis {b} must be in [1, {}) for X {x}", x.rank()))?;
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
