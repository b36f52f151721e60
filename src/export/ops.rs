//! One op as Python: each op type's statement over the runtime in `prelude.py`, with the
//! op's static attributes resolved here (axes, shapes, split sizes) so the script does not
//! re-derive Paddle's attribute conventions. Grad ops of differentiable forward ops are the
//! `jax.vjp` of the same forward expression, so a forward op and its grad cannot disagree.
//!
//! What depends on the rank (a slice's offset, a vocabulary shard's first row) and what a
//! collective runs over (mesh axes) comes from the [`Env`]: in `shard_map` mode the ranks'
//! programs, in `gspmd` mode the serial program, which has neither.

use super::py;
use super::ExportError;
use crate::exec::kernels::pointwise::aligned_y;
use crate::ir::infer::{axis, reduce_axes, split_sections};
use crate::ir::{ForwardOp, Op, OpType, Program, TensorType, VarId};

/// Where an op's context comes from.
pub trait Env {
    /// The program the op belongs to (local shapes in `shard_map` mode).
    fn program(&self) -> &Program;
    /// An integer attribute as a Python expression: a literal, or this rank's entry of a
    /// per-rank table when ranks differ.
    fn rank_int(&self, op: usize, attr: &str, item: usize) -> Result<String, ExportError>;
    /// The mesh axes a collective op runs over, as a Python tuple of names.
    fn axes(&self, op: usize) -> Result<String, ExportError>;
    /// The dropout mask of op `op` (an input the script computes from the seed).
    fn mask(&self, op: usize) -> Result<String, ExportError>;
}

/// `v["name"]`.
pub fn var_ref(program: &Program, v: VarId) -> String {
    format!("v[{}]", py::string(&program.var(v).name))
}

struct Emit<'a> {
    env: &'a dyn Env,
    op: &'a Op,
    index: usize,
}

impl Emit<'_> {
    fn p(&self) -> &Program {
        self.env.program()
    }

    fn err(&self, message: impl Into<String>) -> ExportError {
        ExportError::Op {
            index: self.index,
            ty: self.op.ty.to_string(),
            message: message.into(),
        }
    }

    fn var(&self, v: VarId) -> String {
        var_ref(self.p(), v)
    }

    fn ty(&self, v: VarId) -> &TensorType {
        &self.p().var(v).ty
    }

    fn input(&self, slot: &str) -> Result<VarId, ExportError> {
        self.op
            .input(slot)
            .first()
            .copied()
            .ok_or_else(|| self.err(format!("no {slot} input")))
    }

    fn x(&self, slot: &str) -> Result<String, ExportError> {
        Ok(self.var(self.input(slot)?))
    }

    fn opt(&self, slot: &str) -> String {
        self.op
            .input(slot)
            .first()
            .map_or("None".into(), |&v| self.var(v))
    }

    fn list(&self, slot: &str) -> String {
        py::list(self.op.input(slot).iter().map(|&v| self.var(v)))
    }

    fn out(&self, slot: &str) -> String {
        self.op
            .output(slot)
            .first()
            .map_or("_".into(), |&v| self.var(v))
    }

    fn outs(&self, slot: &str) -> Vec<String> {
        self.op.output(slot).iter().map(|&v| self.var(v)).collect()
    }

    fn has_out(&self, slot: &str) -> bool {
        !self.op.output(slot).is_empty()
    }

    fn shape(&self, v: VarId) -> String {
        py::tuple(self.ty(v).shape.iter().map(|d| d.to_string()))
    }

    fn axis_of(&self, v: VarId, name: &str, default: i64) -> Result<usize, ExportError> {
        axis(self.op.attr_int(name, default), self.ty(v).rank(), name).map_err(|e| self.err(e))
    }

    fn b(&self, name: &str, default: bool) -> &'static str {
        py::boolean(self.op.attr_bool(name, default))
    }

    fn f(&self, name: &str, default: f64) -> String {
        py::float(self.op.attr_float(name, default))
    }

    /// `lhs = rhs`, with `_` for outputs the op does not write.
    fn assign(&self, lhs: &[String], rhs: String) -> Vec<String> {
        if lhs.iter().all(|l| l == "_") {
            return vec![format!("_ = {rhs}")];
        }
        vec![format!("{} = {rhs}", lhs.join(", "))]
    }
}

/// The Python statements of op `index` of the env's program.
pub fn emit(env: &dyn Env, index: usize, op: &Op) -> Result<Vec<String>, ExportError> {
    let e = Emit { env, op, index };
    let mut lines = vec![comment(env.program(), index, op)];
    let is_grad = matches!(op.ty, OpType::Grad(_))
        || matches!(
            op.ty,
            OpType::CEmbeddingGrad | OpType::CSoftmaxWithCrossEntropyGrad
        );
    lines.extend(if is_grad { grad(&e)? } else { forward(&e)? });
    Ok(lines)
}

/// `# op12 matmul_v2 (backward): X=x Y=w -> Out=h`.
fn comment(p: &Program, index: usize, op: &Op) -> String {
    let slots = |specs: &[crate::ir::schema::SlotSpec], s: &crate::ir::Slots| {
        specs
            .iter()
            .zip(s.iter())
            .filter(|(_, vars)| !vars.is_empty())
            .map(|(spec, vars)| {
                let names: Vec<&str> = vars.iter().map(|&v| &*p.var(v).name).collect();
                format!("{}={}", spec.name, names.join(","))
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    let line = format!(
        "# op{index} {} ({}): {} -> {}",
        op.ty,
        op.role.name(),
        slots(op.ty.input_slots(), &op.inputs),
        slots(op.ty.output_slots(), &op.outputs)
    );
    line.replace(['\n', '\r'], " ")
}

fn binary_kind(ty: OpType) -> Option<&'static str> {
    Some(match ty {
        OpType::ElementwiseAdd | OpType::ElementwiseAddGrad => "add",
        OpType::ElementwiseSub | OpType::ElementwiseSubGrad => "sub",
        OpType::ElementwiseMul | OpType::ElementwiseMulGrad => "mul",
        OpType::ElementwiseDiv | OpType::ElementwiseDivGrad => "div",
        OpType::ElementwiseMax => "max",
        OpType::Forward(_)
        | OpType::FillConstant
        | OpType::Grad(_)
        | OpType::Math(_)
        | OpType::Optimizer(_)
        | OpType::Amp(_)
        | OpType::Collective(_)
        | OpType::RankLocal(_) => return None,
    })
}

/// The forward expression of a differentiable op `f` (the op's own type, or the forward
/// op of a grad op), over the Python names in `args` (one per differentiable input slot,
/// in [`diff_slots`] order). `None` for ops whose grad is not a vjp.
fn forward_expr(e: &Emit, f: ForwardOp, args: &[String]) -> Result<Option<String>, ExportError> {
    use ForwardOp as F;
    let a = |i: usize| args.get(i).cloned().unwrap_or_else(|| "None".into());
    let binary = |kind: &str| binary_expr(e, kind, &a(0), &a(1));
    let reduce = |f: &str| reduce_expr(e, f, &a(0));
    Ok(Some(match f {
        F::MatmulV2 => format!(
            "matmul({}, {}, {}, {})",
            a(0),
            a(1),
            e.b("trans_x", false),
            e.b("trans_y", false)
        ),
        F::ElementwiseAdd => binary("add")?,
        F::ElementwiseSub => binary("sub")?,
        F::ElementwiseMul => binary("mul")?,
        F::ElementwiseDiv => binary("div")?,
        F::Relu => format!("jax.nn.relu({})", a(0)),
        F::Gelu => format!("gelu({}, {})", a(0), e.b("approximate", false)),
        F::Silu => format!("silu({})", a(0)),
        F::Square => format!("{0} * {0}", a(0)),
        F::Scale => format!(
            "scale({}, {}, {}, {})",
            a(0),
            e.f("scale", 1.0),
            e.f("bias", 0.0),
            e.b("bias_after_scale", true)
        ),
        F::LookupTableV2 => format!(
            "lookup({}, {}, {})",
            a(0),
            e.x("Ids")?,
            e.op.attr_int("padding_idx", -1)
        ),
        F::Transpose2 => transpose_expr(e, &a(0))?,
        F::ReduceSum => reduce("sum")?,
        F::ReduceMean => reduce("mean")?,
        F::Mean => format!("jnp.mean({})", a(0)),
        F::Cast
        | F::Assign
        | F::Dropout
        | F::Softmax
        | F::FusedSoftmaxMaskUpperTriangle
        | F::LayerNorm
        | F::Reshape2
        | F::Split
        | F::Concat
        | F::SoftmaxWithCrossEntropy => return Ok(None),
    }))
}

/// `binary(kind, x, y, y_shape)` with Y aligned to X by Paddle's legacy `axis`.
fn binary_expr(e: &Emit, kind: &str, x: &str, y: &str) -> Result<String, ExportError> {
    let (xv, yv) = (e.input("X")?, e.input("Y")?);
    let ys = aligned_y(&e.ty(xv).shape, &e.ty(yv).shape, e.op.attr_int("axis", -1));
    Ok(format!(
        "binary({}, {x}, {y}, {})",
        py::string(kind),
        py::tuple(ys.iter().map(|d| d.to_string()))
    ))
}

/// `jnp.sum` / `jnp.mean` over the op's resolved axes.
fn reduce_expr(e: &Emit, f: &str, x: &str) -> Result<String, ExportError> {
    let xv = e.input("X")?;
    let axes = reduce_axes(e.op, e.ty(xv).rank()).map_err(|m| e.err(m))?;
    Ok(format!(
        "jnp.{f}({x}, axis={}, keepdims={})",
        py::tuple(axes.iter().map(|d| d.to_string())),
        e.b("keep_dim", false)
    ))
}

/// `jnp.transpose` with the op's permutation resolved.
fn transpose_expr(e: &Emit, x: &str) -> Result<String, ExportError> {
    let rank = e.ty(e.input("X")?).rank();
    let perm: Vec<usize> =
        e.op.attr_ints("axis")
            .unwrap_or(&[])
            .iter()
            .map(|&p| axis(p, rank, "axis"))
            .collect::<Result<_, _>>()
            .map_err(|m| e.err(m))?;
    Ok(format!(
        "jnp.transpose({x}, {})",
        py::tuple(perm.iter().map(|p| p.to_string()))
    ))
}

/// The input slots a vjp grad differentiates.
fn diff_slots(f: ForwardOp) -> &'static [&'static str] {
    use ForwardOp as F;
    match f {
        F::MatmulV2
        | F::ElementwiseAdd
        | F::ElementwiseSub
        | F::ElementwiseMul
        | F::ElementwiseDiv => &["X", "Y"],
        F::LookupTableV2 => &["W"],
        F::Relu
        | F::Gelu
        | F::Silu
        | F::Square
        | F::Scale
        | F::Cast
        | F::Assign
        | F::Dropout
        | F::Softmax
        | F::FusedSoftmaxMaskUpperTriangle
        | F::LayerNorm
        | F::Reshape2
        | F::Transpose2
        | F::Split
        | F::Concat
        | F::ReduceSum
        | F::ReduceMean
        | F::Mean
        | F::SoftmaxWithCrossEntropy => &["X"],
    }
}

/// The forward expression of a forward op (one whose type is `Forward(f)`).
fn fwd(e: &Emit, args: &[String]) -> Result<String, ExportError> {
    let OpType::Forward(f) = e.op.ty else {
        return Err(e.err("is not a forward op"));
    };
    forward_expr(e, f, args)?.ok_or_else(|| e.err("has no forward expression"))
}

/// A non-grad op: dispatched by family so each match below stays exhaustive and short.
fn forward(e: &Emit) -> Result<Vec<String>, ExportError> {
    use OpType as T;
    let ty = e.op.ty;
    if matches!(ty, T::MatmulV2 | T::LookupTableV2) {
        return compute_simple(e);
    }
    if matches!(
        ty,
        T::Dropout
            | T::Softmax
            | T::FusedSoftmaxMaskUpperTriangle
            | T::LayerNorm
            | T::SoftmaxWithCrossEntropy
    ) {
        return compute_nn(e);
    }
    if matches!(
        ty,
        T::Cast | T::Assign | T::Reshape2 | T::Split | T::Concat | T::FillConstant
    ) {
        return compute_shape(e);
    }
    match ty {
        T::Forward(_) => {
            let args = if binary_kind(ty).is_some() {
                vec![e.x("X")?, e.x("Y")?]
            } else {
                vec![e.x("X")?]
            };
            Ok(e.assign(&[e.out("Out")], fwd(e, &args)?))
        }
        T::Math(_) => compute_math(e),
        T::Optimizer(_) => update(e),
        T::Amp(_) => loss_scaling(e),
        T::Collective(_) => collective(e),
        T::RankLocal(_) => rank_local(e),
        T::FillConstant | T::Grad(_) => Err(e.err(WRONG_FAMILY)),
    }
}

const WRONG_FAMILY: &str = "reached the wrong emitter (an internal error)";

/// The forward ops whose expression is `forward_expr`'s (so their grads are its vjp).
fn compute_simple(e: &Emit) -> Result<Vec<String>, ExportError> {
    let op = e.op;
    let out = || e.out("Out");
    let simple = |rhs: String| -> Result<Vec<String>, ExportError> { Ok(e.assign(&[out()], rhs)) };
    match op.ty {
        OpType::MatmulV2
        | OpType::ElementwiseAdd
        | OpType::ElementwiseSub
        | OpType::ElementwiseMul
        | OpType::ElementwiseDiv
        | OpType::Relu
        | OpType::Gelu
        | OpType::Silu
        | OpType::Square
        | OpType::Scale
        | OpType::Transpose2
        | OpType::ReduceSum
        | OpType::ReduceMean
        | OpType::Mean => {
            let args: Vec<String> = if binary_kind(op.ty).is_some() || op.ty == OpType::MatmulV2 {
                vec![e.x("X")?, e.x("Y")?]
            } else {
                vec![e.x("X")?]
            };
            simple(fwd(e, &args)?)
        }
        OpType::LookupTableV2 => simple(fwd(e, &[e.x("W")?])?),
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

/// Dropout, softmaxes, layer_norm and the softmax cross-entropy.
fn compute_nn(e: &Emit) -> Result<Vec<String>, ExportError> {
    let op = e.op;
    let out = || e.out("Out");
    let simple = |rhs: String| -> Result<Vec<String>, ExportError> { Ok(e.assign(&[out()], rhs)) };
    match op.ty {
        OpType::Dropout => {
            let x = e.x("X")?;
            let p = op.attr_float("dropout_prob", 0.5);
            let mask = if op.attr_bool("is_test", false) || p == 0.0 {
                format!("jnp.ones_like({x})")
            } else {
                e.env.mask(e.index)?
            };
            let mut lines = e.assign(&[e.out("Mask")], format!("{mask}.astype({x}.dtype)"));
            let m = if e.has_out("Mask") {
                e.out("Mask")
            } else {
                mask
            };
            lines.extend(e.assign(&[out()], format!("{x} * {m}")));
            Ok(lines)
        }
        OpType::Softmax => {
            let x = e.input("X")?;
            simple(format!(
                "softmax({}, {})",
                e.var(x),
                e.axis_of(x, "axis", -1)?
            ))
        }
        OpType::FusedSoftmaxMaskUpperTriangle => simple(format!("causal_softmax({})", e.x("X")?)),
        OpType::LayerNorm => {
            let x = e.input("X")?;
            Ok(e.assign(
                &[e.out("Y"), e.out("Mean"), e.out("Variance")],
                format!(
                    "layer_norm({}, {}, {}, {}, {})",
                    e.var(x),
                    e.opt("Scale"),
                    e.opt("Bias"),
                    op.attr_int("begin_norm_axis", 1),
                    e.f("epsilon", 1e-5)
                ),
            ))
        }
        OpType::SoftmaxWithCrossEntropy => {
            let l = e.input("Logits")?;
            Ok(e.assign(
                &[e.out("Softmax"), e.out("Loss")],
                format!(
                    "softmax_ce({}, {}, {}, {})",
                    e.var(l),
                    e.x("Label")?,
                    e.axis_of(l, "axis", -1)?,
                    e.b("soft_label", false)
                ),
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

/// Casts, copies, reshapes, splits and concats, and constants.
fn compute_shape(e: &Emit) -> Result<Vec<String>, ExportError> {
    let op = e.op;
    let out = || e.out("Out");
    let simple = |rhs: String| -> Result<Vec<String>, ExportError> { Ok(e.assign(&[out()], rhs)) };
    match op.ty {
        OpType::Cast => {
            let to = op.attr_str("out_dtype").unwrap_or("f32");
            simple(format!("{}.astype(dt({}))", e.x("X")?, py::string(to)))
        }
        OpType::Assign => simple(e.x("X")?),
        OpType::Reshape2 => {
            let o = op
                .output("Out")
                .first()
                .copied()
                .ok_or_else(|| e.err("no Out"))?;
            simple(format!("jnp.reshape({}, {})", e.x("X")?, e.shape(o)))
        }
        OpType::Split => {
            let x = e.input("X")?;
            let (a, sizes) = split_sections(op, e.ty(x)).map_err(|m| e.err(m))?;
            let mut lhs = e.outs("Out");
            if lhs.len() == 1 {
                lhs[0].push(',');
            }
            Ok(e.assign(
                &lhs,
                format!("split({}, {a}, {})", e.var(x), py::ints(sizes)),
            ))
        }
        OpType::Concat => {
            let first = e.input("X")?;
            let a = e.axis_of(first, "axis", 0)?;
            simple(format!("jnp.concatenate({}, axis={a})", e.list("X")))
        }
        OpType::FillConstant => {
            let shape = op.attr_ints("shape").unwrap_or(&[]);
            simple(format!(
                "jnp.full({}, {}, dt({}))",
                py::tuple(shape.iter().map(|d| d.to_string())),
                e.f("value", 0.0),
                py::string(op.attr_str("dtype").unwrap_or("f32"))
            ))
        }
        OpType::Forward(_)
        | OpType::Grad(_)
        | OpType::Math(_)
        | OpType::Optimizer(_)
        | OpType::Amp(_)
        | OpType::Collective(_)
        | OpType::RankLocal(_) => Err(e.err(WRONG_FAMILY)),
    }
}

/// The planner's arithmetic: sums, square roots, maxima, squared norms.
fn compute_math(e: &Emit) -> Result<Vec<String>, ExportError> {
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
fn update(e: &Emit) -> Result<Vec<String>, ExportError> {
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
fn loss_scaling(e: &Emit) -> Result<Vec<String>, ExportError> {
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
fn collective(e: &Emit) -> Result<Vec<String>, ExportError> {
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
fn rank_local(e: &Emit) -> Result<Vec<String>, ExportError> {
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

/// A grad op: the explicit ones by group, the rest as the vjp of their forward.
fn grad(e: &Emit) -> Result<Vec<String>, ExportError> {
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
        | T::SoftmaxWithCrossEntropyGrad
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
        OpType::LayerNormGrad => {
            let x = e.input("X")?;
            let begin = op.attr_int("begin_norm_axis", 1);
            let width: usize = e.ty(x).shape[begin.max(0) as usize..].iter().product();
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
            let body = c_embedding(e, "a0")?;
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

/// `c_embedding(W, Ids, start)` with `w` for the table.
fn c_embedding(e: &Emit, w: &str) -> Result<String, ExportError> {
    Ok(format!(
        "c_embedding({w}, {}, {})",
        e.x("Ids")?,
        e.env.rank_int(e.index, "start_index", 0)?
    ))
}

/// A grad op as the vjp of its forward expression over its differentiable inputs.
fn vjp_grad(e: &Emit, f: ForwardOp) -> Result<Vec<String>, ExportError> {
    let slots = diff_slots(f);
    let params: Vec<String> = (0..slots.len()).map(|i| format!("a{i}")).collect();
    let body = forward_expr(e, f, &params)?
        .ok_or_else(|| e.err("has no forward expression to differentiate"))?;
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
