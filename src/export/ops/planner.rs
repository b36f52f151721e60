//! The planner's ops as Python: gradient math, parameter updates, loss scaling,
//! collectives and the rank-local ops (slices, vocab-parallel pieces, ZeRO's flat buffers,
//! gradient buckets).

use super::*;

/// The planner's arithmetic: sums, square roots, maxima, squared norms.
pub(super) fn compute_math(e: &Emit) -> Result<Vec<String>, ExportError> {
    let op = e.op;
    let out = || e.out("Out");
    let simple = |rhs: String| -> Result<Vec<String>, ExportError> { Ok(e.assign(&[out()], rhs)) };
    match op.ty {
        OpType::Sqrt => simple(format!("jnp.sqrt({})", e.x("X")?)),
        OpType::ElementwiseMax => {
            let (x, y) = (e.input("X")?, e.input("Y")?);
            let ys = aligned_y(&e.ty(x).shape, &e.ty(y).shape, op.attr_int("axis", -1));
            simple(format!(
                "binary(\"max\", {}, {}, {})",
                e.var(x),
                e.var(y),
                py::tuple(ys.iter().map(|d| d.to_string()))
            ))
        }
        OpType::Sum => simple(format!("add_n({})", e.list("X"))),
        OpType::SquaredL2Norm => simple(format!("squared_l2_norm({})", e.x("X")?)),
        OpType::Forward(_)
        | OpType::FillConstant
        | OpType::Grad(_)
        | OpType::Optimizer(_)
        | OpType::Amp(_)
        | OpType::Collective(_)
        | OpType::RankLocal(_) => Err(e.err(WRONG_FAMILY)),
    }
}

/// Parameter updates.
pub(super) fn update(e: &Emit) -> Result<Vec<String>, ExportError> {
    let op = e.op;
    match op.ty {
        OpType::Sgd => Ok(e.assign(
            &[e.out("ParamOut")],
            format!(
                "sgd({}, {}, {})",
                e.x("Param")?,
                e.x("Grad")?,
                e.x("LearningRate")?
            ),
        )),
        OpType::Momentum => Ok(e.assign(
            &[e.out("ParamOut"), e.out("VelocityOut")],
            format!(
                "momentum({}, {}, {}, {}, {}, {})",
                e.x("Param")?,
                e.x("Grad")?,
                e.x("Velocity")?,
                e.x("LearningRate")?,
                e.f("mu", 0.9),
                e.b("use_nesterov", false)
            ),
        )),
        OpType::Adam | OpType::AdamW => {
            let coeff = if op.ty == OpType::AdamW {
                op.attr_float("coeff", 0.01)
            } else {
                0.0
            };
            Ok(e.assign(
                &[
                    e.out("ParamOut"),
                    e.out("Moment1Out"),
                    e.out("Moment2Out"),
                    e.out("Beta1PowOut"),
                    e.out("Beta2PowOut"),
                ],
                format!(
                    "adam({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {})",
                    e.x("Param")?,
                    e.x("Grad")?,
                    e.x("Moment1")?,
                    e.x("Moment2")?,
                    e.x("Beta1Pow")?,
                    e.x("Beta2Pow")?,
                    e.x("LearningRate")?,
                    e.f("beta1", 0.9),
                    e.f("beta2", 0.999),
                    e.f("epsilon", 1e-8),
                    py::float(coeff)
                ),
            ))
        }
        OpType::Forward(_)
        | OpType::FillConstant
        | OpType::Grad(_)
        | OpType::Math(_)
        | OpType::Amp(_)
        | OpType::Collective(_)
        | OpType::RankLocal(_) => Err(e.err(WRONG_FAMILY)),
    }
}

/// AMP's dynamic loss scaling.
pub(super) fn loss_scaling(e: &Emit) -> Result<Vec<String>, ExportError> {
    let op = e.op;
    match op.ty {
        OpType::CheckFiniteAndUnscale => {
            let outs = e.outs("Out");
            let mut lines = vec![format!(
                "_xs, {} = check_finite_and_unscale({}, {})",
                e.out("FoundInfinite"),
                e.list("X"),
                e.x("Scale")?
            )];
            if !outs.is_empty() {
                lines.push(format!("{}, = _xs", outs.join(", ")));
            }
            Ok(lines)
        }
        OpType::UpdateLossScaling => {
            let outs = e.outs("Out");
            let mut lines = vec![format!(
                "_xs, {}, {}, {} = update_loss_scaling({}, {}, {}, {}, {}, {}, {}, {}, {})",
                e.out("LossScaling"),
                e.out("OutGoodSteps"),
                e.out("OutBadSteps"),
                e.list("X"),
                e.x("FoundInfinite")?,
                e.x("PrevLossScaling")?,
                e.x("InGoodSteps")?,
                e.x("InBadSteps")?,
                op.attr_int("incr_every_n_steps", 1000),
                op.attr_int("decr_every_n_nan_or_inf", 2),
                e.f("incr_ratio", 2.0),
                e.f("decr_ratio", 0.5)
            )];
            if !outs.is_empty() {
                lines.push(format!("{}, = _xs", outs.join(", ")));
            }
            Ok(lines)
        }
        OpType::Forward(_)
        | OpType::FillConstant
        | OpType::Grad(_)
        | OpType::Math(_)
        | OpType::Optimizer(_)
        | OpType::Collective(_)
        | OpType::RankLocal(_) => Err(e.err(WRONG_FAMILY)),
    }
}

/// Collectives over the mesh axes of their groups.
pub(super) fn collective(e: &Emit) -> Result<Vec<String>, ExportError> {
    let op = e.op;
    let out = || e.out("Out");
    let simple = |rhs: String| -> Result<Vec<String>, ExportError> { Ok(e.assign(&[out()], rhs)) };
    match op.ty {
        OpType::AllReduce => simple(format!(
            "all_reduce({}, {}, {}, tag={})",
            e.x("X")?,
            py::string(op.attr_str("reduce_type").unwrap_or("SUM")),
            e.env.axes(e.index)?,
            e.index
        )),
        OpType::AllGather => {
            let x = e.input("X")?;
            simple(format!(
                "all_gather({}, {}, {}, tag={})",
                e.var(x),
                e.axis_of(x, "axis", 0)?,
                e.env.axes(e.index)?,
                e.index
            ))
        }
        OpType::ReduceScatter => {
            let x = e.input("X")?;
            let kind = op.attr_str("reduce_type").unwrap_or("SUM");
            if kind != "SUM" {
                return Err(e.err(format!(
                    "a reduce-scatter with reduce_type {kind}: JAX's psum_scatter only sums"
                )));
            }
            simple(format!(
                "reduce_scatter({}, {}, {}, tag={})",
                e.var(x),
                e.axis_of(x, "axis", 0)?,
                e.env.axes(e.index)?,
                e.index
            ))
        }
        OpType::AllToAll => {
            let x = e.input("X")?;
            simple(format!(
                "all_to_all({}, {}, {}, {}, tag={})",
                e.var(x),
                e.axis_of(x, "split_axis", 0)?,
                e.axis_of(x, "concat_axis", 0)?,
                e.env.axes(e.index)?,
                e.index
            ))
        }
        OpType::Ppermute => {
            let mut lhs = e.outs("Out");
            if lhs.len() == 1 {
                lhs[0].push(',');
            }
            Ok(e.assign(
                &lhs,
                format!(
                    "ppermute({}, {}, {}, tag={})",
                    e.list("X"),
                    op.attr_int("shift", 1),
                    e.env.axes(e.index)?,
                    e.index
                ),
            ))
        }
        OpType::Send | OpType::Recv => Err(
            e.err("a pipeline send/recv outside a pipelined export (stages run as separate jobs)")
        ),
        OpType::Forward(_)
        | OpType::FillConstant
        | OpType::Grad(_)
        | OpType::Math(_)
        | OpType::Optimizer(_)
        | OpType::Amp(_)
        | OpType::RankLocal(_) => Err(e.err(WRONG_FAMILY)),
    }
}

/// The ops of per-rank programs only.
pub(super) fn rank_local(e: &Emit) -> Result<Vec<String>, ExportError> {
    let op = e.op;
    let out = || e.out("Out");
    let simple = |rhs: String| -> Result<Vec<String>, ExportError> { Ok(e.assign(&[out()], rhs)) };
    match op.ty {
        OpType::CEmbedding => simple(c_embedding(e, &e.x("W")?)?),
        OpType::CSoftmaxWithCrossEntropy => Ok(e.assign(
            &[e.out("Softmax"), e.out("Loss")],
            format!(
                "c_softmax_ce({}, {}, {}, {}, tag={})",
                e.x("Logits")?,
                e.x("Label")?,
                e.env.rank_int(e.index, "start_index", 0)?,
                e.env.axes(e.index)?,
                e.index
            ),
        )),
        OpType::Slice => slice(e),
        OpType::RingAttnBlock => Ok(e.assign(
            &[e.out("Out"), e.out("SoftmaxLse")],
            format!(
                "ring_attn_block({}, {}, {}, {})",
                e.xs(&["Q", "K", "V"])?,
                e.opt("Acc"),
                e.opt("AccLse"),
                ring_attrs(e)?
            ),
        )),
        OpType::RingAttnBlockGrad => Ok(e.assign(
            &[e.out("Q@GRAD"), e.out("K@GRAD"), e.out("V@GRAD")],
            format!(
                "ring_attn_block_grad({}, {}, {}, {}, {})",
                e.xs(&["Q", "K", "V", "Out", "SoftmaxLse", "Out@GRAD"])?,
                e.opt("DQ"),
                e.opt("DK"),
                e.opt("DV"),
                ring_attrs(e)?
            ),
        )),
        OpType::FlattenPad => simple(format!(
            "flatten_pad({}, {})",
            e.x("X")?,
            op.attr_int("numel", 0)
        )),
        OpType::UnpadReshape => simple(format!(
            "unpad_reshape({}, {})",
            e.x("X")?,
            py::tuple(
                op.attr_ints("shape")
                    .unwrap_or(&[])
                    .iter()
                    .map(|d| d.to_string())
            )
        )),
        OpType::CoalesceTensor => Ok(e.assign(
            &[e.out("FusedOutput")],
            format!("coalesce({})", e.list("Input")),
        )),
        OpType::UncoalesceTensor => {
            let mut lhs = e.outs("Output");
            if lhs.len() == 1 {
                lhs[0].push(',');
            }
            Ok(e.assign(
                &lhs,
                format!("uncoalesce({}, {})", e.x("FusedOutput")?, e.list("Input")),
            ))
        }
        OpType::Forward(_)
        | OpType::FillConstant
        | OpType::Grad(_)
        | OpType::Math(_)
        | OpType::Optimizer(_)
        | OpType::Amp(_)
        | OpType::Collective(_)
        | OpType::RankLocal(_) => Err(e.err(WRONG_FAMILY)),
    }
}

/// A ring step's offsets (per rank), sequence length, order and mask.
fn ring_attrs(e: &Emit) -> Result<String, ExportError> {
    Ok(format!(
        "{}, {}, {}, {}, {}",
        e.env.rank_int(e.index, "q_offset", 0)?,
        e.env.rank_int(e.index, "kv_offset", 0)?,
        e.op.attr_int("seq", 0),
        e.op.attr_int("zigzag", 0),
        e.b("causal", true)
    ))
}

/// A reshard's local slice: `lax.dynamic_slice_in_dim` per axis, the start per rank.
fn slice(e: &Emit) -> Result<Vec<String>, ExportError> {
    let x = e.input("Input")?;
    let axes = e.op.attr_ints("axes").unwrap_or(&[]);
    let (starts, ends) = (
        e.op.attr_ints("starts").unwrap_or(&[]),
        e.op.attr_ints("ends").unwrap_or(&[]),
    );
    let mut expr = e.var(x);
    for (k, ((&a, &s), &end)) in axes.iter().zip(starts).zip(ends).enumerate() {
        let a = axis(a, e.ty(x).rank(), "axes").map_err(|m| e.err(m))?;
        let size = end.min(e.ty(x).shape[a] as i64) - s;
        let start = e.env.rank_int(e.index, "starts", k)?;
        expr = format!("slice_({expr}, {a}, {start}, {size})");
    }
    Ok(e.assign(&[e.out("Out")], expr))
}

/// `c_embedding(W, Ids, start)` with `w` for the table.
pub(super) fn c_embedding(e: &Emit, w: &str) -> Result<String, ExportError> {
    Ok(format!(
        "c_embedding({w}, {}, {})",
        e.x("Ids")?,
        e.env.rank_int(e.index, "start_index", 0)?
    ))
}
