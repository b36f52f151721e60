//! One op as Python: each op type's statement over the runtime in `prelude.py`, with the
//! op's static attributes resolved here (axes, shapes, split sizes) so the script does not
//! re-derive Paddle's attribute conventions. Grad ops of differentiable forward ops are the
//! `jax.vjp` of the same forward expression, so a forward op and its grad cannot disagree.
//!
//! What depends on the rank (a slice's offset, a vocabulary shard's first row) and what a
//! collective runs over (mesh axes) comes from the [`Env`]: in `shard_map` mode the ranks'
//! programs, in `gspmd` mode the serial program, which has neither.

mod grads;
mod planner;

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

    fn err(&self, message: impl std::fmt::Display) -> ExportError {
        ExportError::Op {
            index: self.index,
            ty: self.op.ty.to_string(),
            message: message.to_string(),
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

    /// The first variables of `slots`, comma-separated.
    fn xs(&self, slots: &[&str]) -> Result<String, ExportError> {
        let names: Result<Vec<String>, ExportError> = slots.iter().map(|s| self.x(s)).collect();
        Ok(names?.join(", "))
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

    fn axis_of(&self, v: VarId, name: &'static str, default: i64) -> Result<usize, ExportError> {
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
    lines.extend(if is_grad {
        grads::grad(&e)?
    } else {
        forward(&e)?
    });
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

/// How the exporter lowers a forward op: the export facet of each op's declaration.
enum Lowering {
    /// A `jax.numpy` expression; the grad is its `jax.vjp`.
    Expr(String),
    /// Written out with its explicit grad (`compute_nn`, `grad_nn`).
    Nn,
    /// A cast, copy, reshape, split or concat (`compute_shape`, `grad_shape`).
    Shape,
}

/// The lowering of a differentiable op `f` (the op's own type, or the forward op of a grad
/// op); an expression is over the Python names in `args` (one per differentiable input
/// slot, in the declaration's `differentiates` order).
fn forward_expr(e: &Emit, f: ForwardOp, args: &[String]) -> Result<Lowering, ExportError> {
    use ForwardOp as F;
    let a = |i: usize| args.get(i).cloned().unwrap_or_else(|| "None".into());
    let binary = |kind: &str| binary_expr(e, kind, &a(0), &a(1));
    let reduce = |f: &str| reduce_expr(e, f, &a(0));
    Ok(Lowering::Expr(match f {
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
        F::Sigmoid => format!("jax.nn.sigmoid({})", a(0)),
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
        F::FusedRotaryPositionEmbedding => format!(
            "rope({}, {}, {}, {})",
            a(0),
            e.x("Sin")?,
            e.x("Cos")?,
            e.b("use_neox_rotary_style", true)
        ),
        F::RepeatInterleave => {
            let rank = e.ty(e.input("X")?).rank();
            let ax = axis(e.op.attr_int("axis", 0), rank, "axis").map_err(|m| e.err(m))?;
            format!(
                "jnp.repeat({}, {}, axis={ax})",
                a(0),
                e.op.attr_int("repeats", 1)
            )
        }
        F::Dropout
        | F::Softmax
        | F::FusedSoftmaxMaskUpperTriangle
        | F::LayerNorm
        | F::RmsNorm
        | F::SoftmaxWithCrossEntropy
        | F::MoeDispatch
        | F::MoeCombine
        | F::FlashAttn => return Ok(Lowering::Nn),
        F::Cast | F::Assign | F::Reshape2 | F::Split | F::Concat => return Ok(Lowering::Shape),
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

/// A non-grad op: dispatched by family so each match below stays exhaustive and short.
fn forward(e: &Emit) -> Result<Vec<String>, ExportError> {
    match e.op.ty {
        OpType::Forward(f) => {
            let args: Vec<String> = f.def().differentiates.iter().map(|s| e.opt(s)).collect();
            match forward_expr(e, f, &args)? {
                Lowering::Expr(rhs) => Ok(e.assign(&[e.out("Out")], rhs)),
                Lowering::Nn => compute_nn(e),
                Lowering::Shape => compute_shape(e),
            }
        }
        OpType::FillConstant => compute_shape(e),
        OpType::Math(_) => planner::compute_math(e),
        OpType::Optimizer(_) => planner::update(e),
        OpType::Amp(_) => planner::loss_scaling(e),
        OpType::Collective(_) => planner::collective(e),
        OpType::RankLocal(_) => planner::rank_local(e),
        OpType::Grad(_) => Err(e.err(WRONG_FAMILY)),
    }
}

const WRONG_FAMILY: &str = "reached the wrong emitter (an internal error)";

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
        OpType::RmsNorm => Ok(e.assign(
            &[e.out("Y"), e.out("InvVar")],
            format!(
                "rms_norm({}, {}, {}, {})",
                e.x("X")?,
                e.x("Scale")?,
                op.attr_int("begin_norm_axis", 1),
                e.f("epsilon", 1e-5)
            ),
        )),
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
        OpType::MoeDispatch | OpType::MoeCombine => moe_forward(e),
        OpType::FlashAttn => flash_attn(e),
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

/// `flash_attn`: the prelude's function of the same name.
fn flash_attn(e: &Emit) -> Result<Vec<String>, ExportError> {
    Ok(e.assign(
        &[e.out("Out"), e.out("SoftmaxLse")],
        format!(
            "flash_attn({}, {})",
            e.xs(&["Q", "K", "V"])?,
            attention_attrs(e)
        ),
    ))
}

/// `flash_attn`'s mask attributes, as the prelude's functions take them.
fn attention_attrs(e: &Emit) -> String {
    format!("{}, {}", e.b("causal", true), e.op.attr_int("zigzag", 0))
}

/// The Mixture-of-Experts routing ops: the prelude's `moe_dispatch` and `moe_combine`.
fn moe_forward(e: &Emit) -> Result<Vec<String>, ExportError> {
    if e.op.ty == OpType::MoeDispatch {
        return Ok(e.assign(
            &[e.out("Out"), e.out("Weights"), e.out("Index")],
            format!(
                "moe_dispatch({}, {}, {})",
                e.x("X")?,
                e.x("Gates")?,
                moe_attrs(e, true)
            ),
        ));
    }
    Ok(e.assign(
        &[e.out("Out")],
        format!(
            "moe_combine({}, {}, {}, {})",
            e.x("X")?,
            e.x("Weights")?,
            e.x("Index")?,
            moe_attrs(e, false)
        ),
    ))
}

/// The routing attributes of a Mixture-of-Experts op, as the prelude's functions take them.
fn moe_attrs(e: &Emit, with_k: bool) -> String {
    let op = e.op;
    let (c, g) = (op.attr_int("capacity", 1), op.attr_int("group_size", 1));
    if with_k {
        format!("{}, {c}, {g}", op.attr_int("k", 1))
    } else {
        format!("{c}, {g}")
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
