//! Grad ops as Python: the explicit ones by group, the rest as the `jax.vjp` of their
//! forward expression.

use super::planner;
use super::*;

/// A grad op: the explicit ones by group, the rest as the vjp of their forward.
pub(super) fn grad(e: &Emit) -> Result<Vec<String>, ExportError> {
    use OpType as T;
    match e.op.ty {
        T::CastGrad
        | T::AssignGrad
        | T::Reshape2Grad
        | T::SplitGrad
        | T::ConcatGrad
        | T::DropoutGrad
        | T::ReluGrad => grad_shape(e),
        T::SoftmaxGrad
        | T::FusedSoftmaxMaskUpperTriangleGrad
        | T::LayerNormGrad
        | T::RmsNormGrad
        | T::SoftmaxWithCrossEntropyGrad
        | T::MoeDispatchGrad
        | T::MoeCombineGrad
        | T::FlashAttnGrad
        | T::CSoftmaxWithCrossEntropyGrad
        | T::CEmbeddingGrad => grad_nn(e),
        T::Grad(f) => vjp_grad(e, f),
        T::Forward(_)
        | T::FillConstant
        | T::Math(_)
        | T::Optimizer(_)
        | T::Amp(_)
        | T::Collective(_)
        | T::RankLocal(_) => Err(e.err("is not a grad op")),
    }
}

/// Grads that reshape, cut, cast or mask the output gradient.
fn grad_shape(e: &Emit) -> Result<Vec<String>, ExportError> {
    let op = e.op;
    let dout = || e.x("Out@GRAD");
    let dx = || e.out("X@GRAD");
    match op.ty {
        OpType::CastGrad => {
            let x = e.x("X")?;
            Ok(e.assign(&[dx()], format!("{}.astype({x}.dtype)", dout()?)))
        }
        OpType::AssignGrad | OpType::Reshape2Grad => {
            let x = e.input("X")?;
            Ok(e.assign(&[dx()], format!("jnp.reshape({}, {})", dout()?, e.shape(x))))
        }
        OpType::DropoutGrad => Ok(e.assign(&[dx()], format!("{} * {}", dout()?, e.x("Mask")?))),
        OpType::SplitGrad => {
            let x = e.input("X")?;
            let (a, _) = split_sections(op, e.ty(x)).map_err(|m| e.err(m))?;
            Ok(e.assign(
                &[dx()],
                format!("jnp.concatenate({}, axis={a})", e.list("Out@GRAD")),
            ))
        }
        OpType::ConcatGrad => {
            let first = e.input("X")?;
            let a = e.axis_of(first, "axis", 0)?;
            let sizes: Vec<usize> = op.input("X").iter().map(|&v| e.ty(v).shape[a]).collect();
            let mut lhs = e.outs("X@GRAD");
            if lhs.len() == 1 {
                lhs[0].push(',');
            }
            Ok(e.assign(
                &lhs,
                format!("split({}, {a}, {})", dout()?, py::ints(sizes)),
            ))
        }
        OpType::ReluGrad => Ok(e.assign(
            &[dx()],
            format!(
                "{} * ({} > 0).astype({}.dtype)",
                dout()?,
                e.x("X")?,
                dout()?
            ),
        )),
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

/// The grads of softmaxes, layer_norm, the cross-entropies and the vocab-parallel table.
fn grad_nn(e: &Emit) -> Result<Vec<String>, ExportError> {
    let op = e.op;
    let dout = || e.x("Out@GRAD");
    let dx = || e.out("X@GRAD");
    match op.ty {
        OpType::SoftmaxGrad => {
            let y = e.input("Out")?;
            let a = e.axis_of(y, "axis", -1)?;
            Ok(e.assign(
                &[dx()],
                format!("softmax_grad({}, {}, {a})", e.var(y), dout()?),
            ))
        }
        OpType::FusedSoftmaxMaskUpperTriangleGrad => Ok(e.assign(
            &[dx()],
            format!("softmax_grad({}, {}, -1)", e.x("Out")?, dout()?),
        )),
        OpType::LayerNormGrad => layer_norm_grad(e),
        OpType::RmsNormGrad => rms_norm_grad(e),
        OpType::MoeDispatchGrad | OpType::MoeCombineGrad => moe_grad(e),
        OpType::FlashAttnGrad => Ok(e.assign(
            &[e.out("Q@GRAD"), e.out("K@GRAD"), e.out("V@GRAD")],
            format!(
                "flash_attn_grad({}, {}, {})",
                e.xs(&["Q", "K", "V"])?,
                e.x("Out@GRAD")?,
                super::attention_attrs(e)
            ),
        )),
        OpType::SoftmaxWithCrossEntropyGrad => {
            let sm = e.input("Softmax")?;
            Ok(e.assign(
                &[e.out("Logits@GRAD")],
                format!(
                    "softmax_ce_grad({}, {}, {}, {}, {})",
                    e.var(sm),
                    e.x("Label")?,
                    e.x("Loss@GRAD")?,
                    e.axis_of(sm, "axis", -1)?,
                    e.b("soft_label", false)
                ),
            ))
        }
        OpType::CSoftmaxWithCrossEntropyGrad => Ok(e.assign(
            &[e.out("Logits@GRAD")],
            format!(
                "c_softmax_ce_grad({}, {}, {}, {})",
                e.x("Softmax")?,
                e.x("Label")?,
                e.x("Loss@GRAD")?,
                e.env.rank_int(e.index, "start_index", 0)?
            ),
        )),
        OpType::CEmbeddingGrad => {
            let body = planner::c_embedding(e, "a0")?;
            Ok(e.assign(
                &[format!("{},", e.out("W@GRAD"))],
                format!("vjp(lambda a0: {body}, ({},), {})", e.x("W")?, dout()?),
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

/// A grad op as the vjp of its forward expression over its differentiable inputs.
fn vjp_grad(e: &Emit, f: ForwardOp) -> Result<Vec<String>, ExportError> {
    let slots = f.def().differentiates;
    let params: Vec<String> = (0..slots.len()).map(|i| format!("a{i}")).collect();
    let Lowering::Expr(body) = forward_expr(e, f, &params)? else {
        return Err(e.err("has no forward expression to differentiate"));
    };
    let primals = slots
        .iter()
        .map(|s| e.x(s))
        .collect::<Result<Vec<_>, _>>()?;
    let outs: Vec<String> = slots.iter().map(|s| e.out(&format!("{s}@GRAD"))).collect();
    let mut lhs = outs;
    if lhs.len() == 1 {
        lhs[0].push(',');
    }
    let dout = e.x("Out@GRAD")?;
    Ok(e.assign(
        &lhs,
        format!(
            "vjp(lambda {}: {body}, {}, {dout})",
            params.join(", "),
            py::tuple(primals)
        ),
    ))
}

/// layer_norm's `(dX, dScale, dBias)`.
fn layer_norm_grad(e: &Emit) -> Result<Vec<String>, ExportError> {
    let op = e.op;
    let x = e.input("X")?;
    let begin = op.attr_int("begin_norm_axis", 1);
    let width: u64 = e.ty(x).shape[begin.max(0) as usize..]
        .iter()
        .map(|&d| d as u64)
        .product();
    let bias = match op.input("Bias").first() {
        Some(&b) => e.var(b),
        None if e.has_out("Bias@GRAD") => {
            format!("jnp.zeros(({width},), {}.dtype)", e.var(x))
        }
        None => "None".into(),
    };
    Ok(e.assign(
        &[e.out("X@GRAD"), e.out("Scale@GRAD"), e.out("Bias@GRAD")],
        format!(
            "layer_norm_grad({}, {}, {bias}, {}, {begin}, {})",
            e.var(x),
            e.opt("Scale"),
            e.x("Y@GRAD")?,
            e.f("epsilon", 1e-5)
        ),
    ))
}

/// rms_norm's `(dX, dScale)`.
fn rms_norm_grad(e: &Emit) -> Result<Vec<String>, ExportError> {
    let op = e.op;
    Ok(e.assign(
        &[e.out("X@GRAD"), e.out("Scale@GRAD")],
        format!(
            "rms_norm_grad({}, {}, {}, {}, {})",
            e.x("X")?,
            e.x("Scale")?,
            e.x("Y@GRAD")?,
            op.attr_int("begin_norm_axis", 1),
            e.f("epsilon", 1e-5)
        ),
    ))
}

/// The Mixture-of-Experts routing ops' grads: the prelude's `jax.vjp` of each.
fn moe_grad(e: &Emit) -> Result<Vec<String>, ExportError> {
    let dx = e.out("X@GRAD");
    if e.op.ty == OpType::MoeDispatchGrad {
        return Ok(e.assign(
            &[dx, e.out("Gates@GRAD")],
            format!(
                "moe_dispatch_grad({}, {}, {}, {}, {})",
                e.x("X")?,
                e.x("Gates")?,
                e.opt("Out@GRAD"),
                e.opt("Weights@GRAD"),
                super::moe_attrs(e, true)
            ),
        ));
    }
    Ok(e.assign(
        &[dx, e.out("Weights@GRAD")],
        format!(
            "moe_combine_grad({}, {}, {}, {}, {})",
            e.x("X")?,
            e.x("Weights")?,
            e.x("Index")?,
            e.x("Out@GRAD")?,
            super::moe_attrs(e, false)
        ),
    ))
}
