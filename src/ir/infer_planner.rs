//! Shape and dtype inference for the ops the planner emits: grad ops (each `<In>@GRAD` has
//! the type of its forward input), gradient accumulation, optimizers, AMP, clipping math,
//! collectives and rank-local ops.

use super::infer::{axis, broadcast, InferError, InferErrorKind as E};
use super::op_type::{AmpOp, CollectiveOp, MathOp, OpType, RankLocalOp};
use super::program::Op;
use super::types::{DType, TensorType};

type Res<T> = Result<T, InferError>;

fn fail<T>(kind: E) -> Res<T> {
    Err(kind.into())
}

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
                .ok_or_else(|| E::GradWithoutForward {
                    slot: names.get(k).map_or("?", |s| s.name),
                    count: outs.len(),
                })?;
            Ok(fwd.iter().map(|t| (*t).clone()).collect())
        })
        .collect()
}

fn one<'a>(
    inputs: &'a [Vec<&'a TensorType>],
    slot: usize,
    name: &'static str,
) -> Res<&'a TensorType> {
    match inputs.get(slot).map(|v| v.as_slice()) {
        Some([t]) => Ok(t),
        _ => fail(E::NotOne { slot: name }),
    }
}

/// One output slot holding one variable of type `t`.
fn single(t: TensorType) -> Res<Vec<Vec<TensorType>>> {
    Ok(vec![vec![t]])
}

fn group_size(op: &Op) -> Res<usize> {
    match op.attr_ints("group") {
        Some(g) if !g.is_empty() => Ok(g.len()),
        _ => fail(E::EmptyGroup),
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
                return fail(E::GradParam {
                    grad: grad.clone(),
                    param: param.clone(),
                });
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
        OpType::Forward(_) | OpType::FillConstant | OpType::Grad(_) => fail(E::NotPlannerOp(op.ty)),
    }
}

/// The planner's arithmetic: accumulation and clipping.
fn math(o: MathOp, inputs: &[Vec<&TensorType>]) -> Res<Vec<Vec<TensorType>>> {
    match o {
        MathOp::Sum => {
            let xs = inputs.first().map(|v| v.as_slice()).unwrap_or(&[]);
            let first = xs.first().ok_or(E::NoneGiven { slot: "X" })?;
            if let Some(other) = xs.iter().find(|t| **t != *first) {
                return fail(E::SumMismatch {
                    first: (*first).clone(),
                    other: (*other).clone(),
                });
            }
            single((*first).clone())
        }
        MathOp::Sqrt => single(one(inputs, 0, "X")?.clone()),
        MathOp::SquaredL2Norm => single(TensorType::new(one(inputs, 0, "X")?.dtype, vec![])),
        MathOp::ElementwiseMax => {
            let (x, y) = (one(inputs, 0, "X")?, one(inputs, 1, "Y")?);
            let shape = broadcast(&x.shape, &y.shape).ok_or_else(|| E::Broadcast {
                x: x.clone(),
                y: y.clone(),
            })?;
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
                return fail(E::GroupDoesNotDivide {
                    what: "dim",
                    axis: a,
                    x: x.clone(),
                    group: n,
                });
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
                return fail(E::GroupDoesNotDivide {
                    what: "split dim",
                    axis: s,
                    x: x.clone(),
                    group: n,
                });
            }
            shape[s] /= n;
            shape[c] *= n;
            single(TensorType::new(x.dtype, shape))
        }
        CollectiveOp::Send => {
            one(inputs, 0, "X")?;
            Ok(vec![])
        }
        CollectiveOp::Ppermute => {
            group_size(op)?;
            let xs = inputs.first().map(|v| v.as_slice()).unwrap_or(&[]);
            Ok(vec![xs.iter().map(|t| (*t).clone()).collect()])
        }
        CollectiveOp::Recv => {
            let dtype = super::infer::dtype_attr(op, "dtype")?;
            let shape = op.attr_ints("shape").unwrap_or(&[]);
            single(TensorType::new(dtype, super::infer::positive_dims(shape)?))
        }
    }
}

/// A ring attention step: the block's outputs are the whole op's for the rank's queries;
/// its grad's are its operands' types (the inputs are checked as flash_attn's).
fn ring_block(op: &Op, inputs: &[Vec<&TensorType>]) -> Res<Vec<Vec<TensorType>>> {
    let outs = super::infer::forward::flash_attn(op, &inputs[..3.min(inputs.len())])?;
    if op.ty == OpType::RingAttnBlock {
        return Ok(outs);
    }
    (0..3)
        .map(|k| Ok(vec![one(inputs, k, ["Q", "K", "V"][k])?.clone()]))
        .collect()
}

/// The ops of per-rank programs.
fn rank_local(op: &Op, o: RankLocalOp, inputs: &[Vec<&TensorType>]) -> Res<Vec<Vec<TensorType>>> {
    match o {
        // A block's outputs are the whole op's, for the rank's queries; its grad's are its
        // operands' types (the inputs are checked as flash_attn's).
        RankLocalOp::RingAttnBlock | RankLocalOp::RingAttnBlockGrad => ring_block(op, inputs),
        RankLocalOp::Slice => {
            let x = one(inputs, 0, "Input")?;
            let (axes, starts, ends) = (
                op.attr_ints("axes").unwrap_or(&[]),
                op.attr_ints("starts").unwrap_or(&[]),
                op.attr_ints("ends").unwrap_or(&[]),
            );
            if axes.len() != starts.len() || axes.len() != ends.len() {
                return fail(E::SliceLengths);
            }
            let mut shape = x.shape.clone();
            for ((&a, &s), &e) in axes.iter().zip(starts).zip(ends) {
                let a = axis(a, x.rank(), "axes entry")?;
                let size = x.shape[a] as i64;
                // An empty slice is an uneven split's empty shard (6 rows on 4 ranks).
                if s < 0 || e > size || s > e {
                    return fail(E::SliceOutside {
                        start: s,
                        end: e,
                        axis: a,
                        size,
                    });
                }
                shape[a] = (e - s) as usize;
            }
            single(TensorType::new(x.dtype, shape))
        }
        RankLocalOp::Pad => {
            let x = one(inputs, 0, "X")?;
            let a = axis(op.attr_int("axis", -1), x.rank(), "axis")?;
            let Ok(pad) = usize::try_from(op.attr_int("pad_size", -1)) else {
                return fail(E::NegativePad);
            };
            let mut shape = x.shape.clone();
            shape[a] += pad;
            single(TensorType::new(x.dtype, shape))
        }
        RankLocalOp::CEmbedding => {
            let (w, ids) = (one(inputs, 0, "W")?, one(inputs, 1, "Ids")?);
            if w.rank() != 2 || ids.dtype != DType::I64 {
                return fail(E::ShardTable {
                    w: w.clone(),
                    ids: ids.clone(),
                });
            }
            let mut shape = ids.shape.clone();
            shape.push(w.shape[1]);
            single(TensorType::new(w.dtype, shape))
        }
        RankLocalOp::CEmbeddingGrad => c_embedding_grad(inputs),
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
                return fail(E::LossGrad {
                    softmax: sm.clone(),
                    got: dloss.clone(),
                });
            }
            single(sm.clone())
        }
        RankLocalOp::FlattenPad | RankLocalOp::UnpadReshape => flat_buffer(op, o, inputs),
        RankLocalOp::CoalesceTensor | RankLocalOp::UncoalesceTensor => coalesce(o, inputs),
    }
}

/// The gradient of a vocabulary-parallel embedding: the table's shard.
fn c_embedding_grad(inputs: &[Vec<&TensorType>]) -> Res<Vec<Vec<TensorType>>> {
    let (w, ids, d) = (
        one(inputs, 0, "W")?,
        one(inputs, 1, "Ids")?,
        one(inputs, 2, "Out@GRAD")?,
    );
    let mut want = ids.shape.clone();
    want.push(w.shape.get(1).copied().unwrap_or(0));
    if w.rank() != 2 || ids.dtype != DType::I64 || d.shape != want {
        return fail(E::ShardTableGrad {
            want: want.to_vec(),
            w: w.clone(),
            ids: ids.clone(),
            got: d.clone(),
        });
    }
    single(w.clone())
}

/// ZeRO's flat buffers: `flatten_pad` (to `numel` elements) and `unpad_reshape` (to `shape`).
fn flat_buffer(op: &Op, o: RankLocalOp, inputs: &[Vec<&TensorType>]) -> Res<Vec<Vec<TensorType>>> {
    let x = one(inputs, 0, "X")?;
    if o == RankLocalOp::FlattenPad {
        let numel = op.attr_int("numel", 0);
        if numel < 0 || (numel as u64) < x.numel() {
            return fail(E::NumelTooSmall {
                numel,
                x: x.clone(),
            });
        }
        return single(TensorType::new(x.dtype, vec![numel as usize]));
    }
    let shape = op.attr_ints("shape").unwrap_or(&[]);
    let dims = super::infer::positive_dims(shape)?;
    let numel = dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d as u64));
    if x.rank() != 1 || numel.is_none_or(|n| n > x.numel()) {
        return fail(E::NotFlatBuffer {
            x: x.clone(),
            shape: shape.to_vec(),
        });
    }
    single(TensorType::new(x.dtype, dims))
}

/// A gradient bucket: `coalesce_tensor` flattens its inputs into one buffer of the same
/// dtype; `uncoalesce_tensor` writes a buffer of their total size back into them.
fn coalesce(o: RankLocalOp, inputs: &[Vec<&TensorType>]) -> Res<Vec<Vec<TensorType>>> {
    let slot = usize::from(o == RankLocalOp::UncoalesceTensor);
    let none = || E::NoneGiven { slot: "Input" };
    let parts = inputs.get(slot).ok_or_else(none)?;
    let first = parts.first().ok_or_else(none)?;
    if parts.iter().any(|t| t.dtype != first.dtype) {
        return fail(E::BucketDTypes);
    }
    let total = parts
        .iter()
        .try_fold(0u64, |a, t| a.checked_add(t.numel()))
        .filter(|&n| n <= crate::ir::MAX_ELEMENTS)
        .ok_or(E::BucketOverflow)?;
    if o == RankLocalOp::CoalesceTensor {
        let total = usize::try_from(total).map_err(|_| E::BucketOverflow)?;
        return single(TensorType::new(first.dtype, vec![total]));
    }
    let fused = one(inputs, 0, "FusedOutput")?;
    if fused.rank() != 1 || fused.numel() != total || fused.dtype != first.dtype {
        return fail(E::FusedOutput {
            fused: fused.clone(),
            total,
        });
    }
    Ok(vec![parts.iter().map(|t| (*t).clone()).collect()])
}
