//! Shape and dtype inference for the ops the planner emits: grad ops (each `<In>@GRAD` has
//! the type of its forward input), gradient accumulation, optimizers, AMP, clipping math,
//! collectives and rank-local ops.

use super::infer::{axis, broadcast};
use super::op_type::{AmpOp, CollectiveOp, MathOp, OpType, RankLocalOp};
use super::program::Op;
use super::types::{DType, TensorType};

type Res<T> = Result<T, String>;

/// Grad op: output slot k (`<In>@GRAD`) gets the types of input slot k (the forward `In`).
pub fn infer_grad(op: &Op, inputs: &[Vec<&TensorType>]) -> Res<Vec<Vec<TensorType>>> {
    let names = op.ty.output_slots();
    op.outputs
        .iter()
        .enumerate()
        .map(|(k, outs)| {
            if outs.is_empty() {
                return Ok(Vec::new());
            }
            let fwd = inputs
                .get(k)
                .filter(|v| v.len() == outs.len())
                .ok_or_else(|| {
                    let name = names.get(k).map_or("?", |s| s.name);
                    format!(
                        "{name} needs its forward input ({} variables) among the inputs",
                        outs.len()
                    )
                })?;
            Ok(fwd.iter().map(|t| (*t).clone()).collect())
        })
        .collect()
}

fn one<'a>(inputs: &'a [Vec<&'a TensorType>], slot: usize, name: &str) -> Res<&'a TensorType> {
    match inputs.get(slot).map(|v| v.as_slice()) {
        Some([t]) => Ok(t),
        _ => Err(format!("input {name} must hold exactly one variable")),
    }
}

/// One output slot holding one variable of type `t`.
fn single(t: TensorType) -> Res<Vec<Vec<TensorType>>> {
    Ok(vec![vec![t]])
}

fn group_size(op: &Op) -> Res<usize> {
    match op.attr_ints("group") {
        Some(g) if !g.is_empty() => Ok(g.len()),
        _ => Err("attribute group must list at least one rank".into()),
    }
}

/// Inference for the non-grad planner ops.
pub fn infer_planner_op(op: &Op, inputs: &[Vec<&TensorType>]) -> Res<Vec<Vec<TensorType>>> {
    match op.ty {
        OpType::Math(o) => math(o, inputs),
        OpType::Amp(o) => amp(o, inputs),
        OpType::Collective(o) => collective(op, o, inputs),
        OpType::RankLocal(o) => rank_local(op, o, inputs),
        OpType::Optimizer(_) => {
            let (param, grad) = (one(inputs, 0, "Param")?, one(inputs, 1, "Grad")?);
            if param != grad {
                return Err(format!("Grad ({grad}) must match Param ({param})"));
            }
            // Outputs mirror Param and the state inputs, in slot order.
            // Every input after Param and Grad but the learning rate is state (a moment, a
            // velocity, a beta power), and comes back out in slot order.
            let (slots, _) = op.ty.slots();
            let states: Vec<usize> = (2..slots.len())
                .filter(|&i| slots[i].name != "LearningRate")
                .collect();
            let mut outs = vec![vec![param.clone()]];
            for &s in &states {
                outs.push(vec![one(inputs, s, "state")?.clone()]);
            }
            Ok(outs)
        }
        // Forward ops and their grads are inferred in `infer.rs`.
        OpType::Forward(_) | OpType::FillConstant | OpType::Grad(_) => {
            Err(format!("{} is not a planner op", op.ty))
        }
    }
}

/// The planner's arithmetic: accumulation and clipping.
fn math(o: MathOp, inputs: &[Vec<&TensorType>]) -> Res<Vec<Vec<TensorType>>> {
    match o {
        MathOp::Sum => {
            let xs = inputs.first().map(|v| v.as_slice()).unwrap_or(&[]);
            let first = xs.first().ok_or("X must hold at least one variable")?;
            if let Some(other) = xs.iter().find(|t| **t != *first) {
                return Err(format!("every X must be {first}, found {other}"));
            }
            single((*first).clone())
        }
        MathOp::Sqrt => single(one(inputs, 0, "X")?.clone()),
        MathOp::SquaredL2Norm => single(TensorType::new(one(inputs, 0, "X")?.dtype, vec![])),
        MathOp::ElementwiseMax => {
            let (x, y) = (one(inputs, 0, "X")?, one(inputs, 1, "Y")?);
            let shape = broadcast(&x.shape, &y.shape)
                .ok_or_else(|| format!("X ({x}) and Y ({y}) do not broadcast"))?;
            single(TensorType::new(x.dtype, shape))
        }
    }
}

/// AMP's loss-scaling ops.
fn amp(o: AmpOp, inputs: &[Vec<&TensorType>]) -> Res<Vec<Vec<TensorType>>> {
    match o {
        AmpOp::CheckFiniteAndUnscale => {
            let xs: Vec<TensorType> = inputs
                .first()
                .map(|v| v.iter().map(|t| (*t).clone()).collect())
                .unwrap_or_default();
            Ok(vec![xs, vec![TensorType::new(DType::F32, vec![])]])
        }
        AmpOp::UpdateLossScaling => {
            let xs: Vec<TensorType> = inputs
                .first()
                .map(|v| v.iter().map(|t| (*t).clone()).collect())
                .unwrap_or_default();
            Ok(vec![
                xs,
                vec![one(inputs, 2, "PrevLossScaling")?.clone()],
                vec![one(inputs, 3, "InGoodSteps")?.clone()],
                vec![one(inputs, 4, "InBadSteps")?.clone()],
            ])
        }
    }
}

/// Collectives: the output's shape follows the group size and the gathered or scattered
/// axis.
fn collective(op: &Op, o: CollectiveOp, inputs: &[Vec<&TensorType>]) -> Res<Vec<Vec<TensorType>>> {
    match o {
        CollectiveOp::AllReduce => {
            group_size(op)?;
            single(one(inputs, 0, "X")?.clone())
        }
        CollectiveOp::AllGather | CollectiveOp::ReduceScatter => {
            let x = one(inputs, 0, "X")?;
            let n = group_size(op)?;
            let a = axis(op.attr_int("axis", 0), x.rank(), "axis")?;
            let mut shape = x.shape.clone();
            if op.ty == OpType::AllGather {
                shape[a] *= n;
            } else if shape[a] % n == 0 {
                shape[a] /= n;
            } else {
                return Err(format!(
                    "dim {a} of X {x} does not divide by the group size {n}"
                ));
            }
            single(TensorType::new(x.dtype, shape))
        }
        CollectiveOp::AllToAll => {
            let x = one(inputs, 0, "X")?;
            let n = group_size(op)?;
            let s = axis(op.attr_int("split_axis", 0), x.rank(), "split_axis")?;
            let c = axis(op.attr_int("concat_axis", 0), x.rank(), "concat_axis")?;
            let mut shape = x.shape.clone();
            if shape[s] % n != 0 {
                return Err(format!(
                    "split dim {s} of X {x} does not divide by the group size {n}"
                ));
            }
            shape[s] /= n;
            shape[c] *= n;
            single(TensorType::new(x.dtype, shape))
        }
        CollectiveOp::Send => {
            one(inputs, 0, "X")?;
            Ok(vec![])
        }
        CollectiveOp::Recv => {
            let dtype = op
                .attr_str("dtype")
                .and_then(DType::from_name)
                .ok_or("attribute dtype must be f32, f64 or i64")?;
            let shape = op.attr_ints("shape").unwrap_or(&[]);
            let dims = shape
                .iter()
                .map(|&d| usize::try_from(d).ok().filter(|&d| d > 0))
                .collect::<Option<Vec<_>>>();
            single(TensorType::new(
                dtype,
                dims.ok_or_else(|| format!("shape {shape:?} must have positive dims"))?,
            ))
        }
    }
}

/// The ops of per-rank programs.
fn rank_local(op: &Op, o: RankLocalOp, inputs: &[Vec<&TensorType>]) -> Res<Vec<Vec<TensorType>>> {
    match o {
        RankLocalOp::Slice => {
            let x = one(inputs, 0, "Input")?;
            let (axes, starts, ends) = (
                op.attr_ints("axes").unwrap_or(&[]),
                op.attr_ints("starts").unwrap_or(&[]),
                op.attr_ints("ends").unwrap_or(&[]),
            );
            if axes.len() != starts.len() || axes.len() != ends.len() {
                return Err("axes, starts and ends must have the same length".into());
            }
            let mut shape = x.shape.clone();
            for ((&a, &s), &e) in axes.iter().zip(starts).zip(ends) {
                let a = axis(a, x.rank(), "axes entry")?;
                let size = x.shape[a] as i64;
                if s < 0 || e > size || s >= e {
                    return Err(format!(
                        "slice [{s}, {e}) is not inside dim {a} of size {size}"
                    ));
                }
                shape[a] = (e - s) as usize;
            }
            single(TensorType::new(x.dtype, shape))
        }
        RankLocalOp::CEmbedding => {
            let (w, ids) = (one(inputs, 0, "W")?, one(inputs, 1, "Ids")?);
            if w.rank() != 2 || ids.dtype != DType::I64 {
                return Err(format!(
                    "W must be a [rows, width] table and Ids i64, got {w} and {ids}"
                ));
            }
            let mut shape = ids.shape.clone();
            shape.push(w.shape[1]);
            single(TensorType::new(w.dtype, shape))
        }
        RankLocalOp::CEmbeddingGrad => {
            let (w, ids, d) = (
                one(inputs, 0, "W")?,
                one(inputs, 1, "Ids")?,
                one(inputs, 2, "Out@GRAD")?,
            );
            let mut want = ids.shape.clone();
            want.push(w.shape.get(1).copied().unwrap_or(0));
            if w.rank() != 2 || ids.dtype != DType::I64 || d.shape != want {
                return Err(format!(
                    "W must be a [rows, width] table, Ids i64 and Out@GRAD {want:?}, got {w}, {ids} and {d}"
                ));
            }
            single(w.clone())
        }
        // The class axis is the last; labels are hard (the only case the vocab split allows).
        RankLocalOp::CSoftmaxWithCrossEntropy => {
            super::infer::softmax_ce(op, one(inputs, 0, "Logits")?, one(inputs, 1, "Label")?)
        }
        RankLocalOp::CSoftmaxWithCrossEntropyGrad => {
            let (sm, label, dloss) = (
                one(inputs, 0, "Softmax")?,
                one(inputs, 1, "Label")?,
                one(inputs, 2, "Loss@GRAD")?,
            );
            let outs = super::infer::softmax_ce(op, sm, label)?;
            if outs.get(1).and_then(|o| o.first()) != Some(dloss) {
                return Err(format!(
                    "Loss@GRAD must be the loss shape of Softmax {sm}, got {dloss}"
                ));
            }
            single(sm.clone())
        }
        RankLocalOp::FlattenPad | RankLocalOp::UnpadReshape => flat_buffer(op, o, inputs),
        RankLocalOp::CoalesceTensor | RankLocalOp::UncoalesceTensor => coalesce(o, inputs),
    }
}

/// ZeRO's flat buffers: `flatten_pad` (to `numel` elements) and `unpad_reshape` (to `shape`).
fn flat_buffer(op: &Op, o: RankLocalOp, inputs: &[Vec<&TensorType>]) -> Res<Vec<Vec<TensorType>>> {
    let x = one(inputs, 0, "X")?;
    if o == RankLocalOp::FlattenPad {
        let numel = op.attr_int("numel", 0);
        if numel < 0 || (numel as u64) < x.numel() as u64 {
            return Err(format!(
                "numel {numel} is smaller than X {x}'s {} elements",
                x.numel()
            ));
        }
        return single(TensorType::new(x.dtype, vec![numel as usize]));
    }
    let shape = op.attr_ints("shape").unwrap_or(&[]);
    let dims: Option<Vec<usize>> = shape
        .iter()
        .map(|&d| usize::try_from(d).ok().filter(|&d| d > 0))
        .collect();
    let dims = dims.ok_or_else(|| format!("shape {shape:?} must have positive dims"))?;
    let numel = dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    if x.rank() != 1 || numel.is_none_or(|n| n > x.numel()) {
        return Err(format!(
            "X {x} must be a flat buffer of at least {shape:?}'s elements"
        ));
    }
    single(TensorType::new(x.dtype, dims))
}

/// A gradient bucket: `coalesce_tensor` flattens its inputs into one buffer of the same
/// dtype; `uncoalesce_tensor` writes a buffer of their total size back into them.
fn coalesce(o: RankLocalOp, inputs: &[Vec<&TensorType>]) -> Res<Vec<Vec<TensorType>>> {
    let slot = usize::from(o == RankLocalOp::UncoalesceTensor);
    let parts = inputs.get(slot).ok_or("Input is missing")?;
    let first = parts.first().ok_or("Input needs at least one tensor")?;
    if parts.iter().any(|t| t.dtype != first.dtype) {
        return Err("the tensors of a bucket must share a dtype".into());
    }
    let total = parts
        .iter()
        .try_fold(0usize, |a, t| a.checked_add(t.numel()))
        .ok_or("the bucket's size overflows")?;
    if o == RankLocalOp::CoalesceTensor {
        return single(TensorType::new(first.dtype, vec![total]));
    }
    let fused = one(inputs, 0, "FusedOutput")?;
    if fused.rank() != 1 || fused.numel() != total || fused.dtype != first.dtype {
        return Err(format!(
            "FusedOutput {fused} must be a flat buffer of the inputs' {total} elements"
        ));
    }
    Ok(vec![parts.iter().map(|t| (*t).clone()).collect()])
}
