//! One ONNX operator as ShardLab ops (the table of `onnx::SUPPORTED` but for `Constant`,
//! `Identity` and `Dropout`, which make no op). A scalar constant operand of an
//! elementwise op folds into a `scale` (attention's `1/√d`), a Gemm's transposes into
//! `matmul_v2`'s, a Gather of a weight by integer ids is an embedding lookup.

use super::onnx::{attr, float, float_attr, int_attr, Translate};
use super::onnx_proto::NodeProto;
use super::ImportError;
use crate::ir::{Attr, OpType, VarId};

type Res = Result<VarId, ImportError>;

pub(super) fn error(node: &str, ty: &str, message: impl std::fmt::Display) -> ImportError {
    ImportError::Node {
        node: node.to_string(),
        op_type: ty.to_string(),
        message: message.to_string(),
    }
}

/// The node's `k`-th input name (empty when absent: an optional input left out).
pub(super) fn input(node: &NodeProto, k: usize) -> &str {
    node.input.get(k).map(String::as_str).unwrap_or("")
}

/// Appends `ty` with one output named after the node's first output.
fn op1(
    t: &mut dyn Translate,
    name: &str,
    node: &NodeProto,
    ty: OpType,
    inputs: Vec<Vec<VarId>>,
    attrs: &[(&str, Attr)],
) -> Res {
    let out = t.fresh(input_or(node.output.first(), name));
    let onnx_type = node.op_type.as_deref().unwrap_or("?");
    let slots: Vec<&[VarId]> = inputs.iter().map(Vec::as_slice).collect();
    t.builder()
        .op1(ty, &slots, attrs, &out)
        .map_err(|e| error(name, onnx_type, e))
}

fn input_or<'a>(s: Option<&'a String>, default: &'a str) -> &'a str {
    s.map(String::as_str).unwrap_or(default)
}

/// Translates `node` (of type `ty`, named `name`); returns its (first) output.
pub(super) fn translate(t: &mut dyn Translate, name: &str, ty: &str, node: &NodeProto) -> Res {
    match ty {
        "MatMul" => {
            let (x, y) = (t.var(name, input(node, 0))?, t.var(name, input(node, 1))?);
            op1(t, name, node, OpType::MatmulV2, vec![vec![x], vec![y]], &[])
        }
        "Gemm" => gemm(t, name, node),
        "Add" | "Sub" | "Mul" | "Div" => binary(t, name, ty, node),
        "Relu" => unary(t, name, node, OpType::Relu),
        "Sigmoid" => unary(t, name, node, OpType::Sigmoid),
        "Gelu" => {
            let x = t.var(name, input(node, 0))?;
            let tanh = attr(node, "approximate")
                .and_then(|a| a.s.as_deref())
                .is_some_and(|s| s == b"tanh");
            op1(
                t,
                name,
                node,
                OpType::Gelu,
                vec![vec![x]],
                &[("approximate", Attr::Bool(tanh))],
            )
        }
        "Softmax" => {
            let x = t.var(name, input(node, 0))?;
            let axis = int_attr(node, "axis", -1);
            op1(
                t,
                name,
                node,
                OpType::Softmax,
                vec![vec![x]],
                &[("axis", Attr::Int(axis))],
            )
        }
        "LayerNormalization" => layer_norm(t, name, node),
        "Reshape" => reshape(t, name, node),
        "Transpose" => {
            let x = t.var(name, input(node, 0))?;
            let perm = match attr(node, "perm") {
                Some(a) => a.ints.clone(),
                None => (0..t.rank(x) as i64).rev().collect(),
            };
            op1(
                t,
                name,
                node,
                OpType::Transpose2,
                vec![vec![x]],
                &[("axis", Attr::Ints(perm))],
            )
        }
        "Gather" => gather(t, name, node),
        "Concat" => {
            let xs = node
                .input
                .iter()
                .map(|x| t.var(name, x))
                .collect::<Result<Vec<_>, _>>()?;
            let axis = int_attr(node, "axis", 0);
            op1(
                t,
                name,
                node,
                OpType::Concat,
                vec![xs],
                &[("axis", Attr::Int(axis))],
            )
        }
        "Cast" => Err(error(
            name,
            "Cast",
            "only casts between float types import (ShardLab prices every float alike)",
        )),
        "ReduceMean" | "ReduceSum" => reduce(t, name, ty, node),
        other => Err(error(name, other, "not an operator ShardLab imports")),
    }
}

/// A one-input op without attributes.
fn unary(t: &mut dyn Translate, name: &str, node: &NodeProto, ty: OpType) -> Res {
    let x = t.var(name, input(node, 0))?;
    op1(t, name, node, ty, vec![vec![x]], &[])
}

/// Paddle's operators with no ONNX equivalent ShardLab translates one for one: only the
/// PIR import writes them, as nodes of the `pd_op` domain (`super::pir`).
pub const PADDLE_ONLY: &[&str] = &[
    "matmul",
    "silu",
    "cross_entropy_with_softmax",
    "split",
    "stack",
    "moe_dispatch",
    "moe_combine",
];

/// A `pd_op` node (see [`PADDLE_ONLY`]); returns its outputs.
pub(super) fn translate_paddle(
    t: &mut dyn Translate,
    name: &str,
    ty: &str,
    node: &NodeProto,
) -> Result<Vec<VarId>, ImportError> {
    let x = t.var(name, input(node, 0))?;
    match ty {
        "matmul" => {
            let y = t.var(name, input(node, 1))?;
            let trans = |k: &str| Attr::Bool(int_attr(node, k, 0) != 0);
            let attrs = [
                ("trans_x", trans("transpose_x")),
                ("trans_y", trans("transpose_y")),
            ];
            Ok(vec![op1(
                t,
                name,
                node,
                OpType::MatmulV2,
                vec![vec![x], vec![y]],
                &attrs,
            )?])
        }
        "silu" => Ok(vec![unary(t, name, node, OpType::Silu)?]),
        "split" | "stack" => super::onnx_moe::pieces(t, name, ty, node, x),
        "moe_dispatch" | "moe_combine" => super::onnx_moe::routing(t, name, ty, node, x),
        "cross_entropy_with_softmax" => {
            let label = t.var(name, input(node, 1))?;
            let outs: Vec<String> = (0..2)
                .map(|k| t.fresh(input_or(node.output.get(k), name)))
                .collect();
            let attrs = [
                (
                    "soft_label",
                    Attr::Bool(int_attr(node, "soft_label", 0) != 0),
                ),
                ("axis", Attr::Int(int_attr(node, "axis", -1))),
            ];
            t.builder()
                .op(
                    OpType::SoftmaxWithCrossEntropy,
                    &[&[x], &[label]],
                    &attrs,
                    &[&outs[0], &outs[1]],
                )
                .map_err(|e| error(name, ty, e))
        }
        other => Err(error(name, other, "not an operator ShardLab imports")),
    }
}

/// `ReduceMean`/`ReduceSum` over `axes` (an attribute before opset 18, a constant input
/// since; none or empty: every axis) as `reduce_mean`/`reduce_sum`.
fn reduce(t: &mut dyn Translate, name: &str, ty: &str, node: &NodeProto) -> Res {
    let x = t.var(name, input(node, 0))?;
    let axes = match (attr(node, "axes"), input(node, 1)) {
        (Some(a), _) => a.ints.clone(),
        (None, "") => Vec::new(),
        (None, axes) => t
            .ints(axes)
            .ok_or_else(|| error(name, ty, "the axes are not a constant"))?,
    };
    if axes.is_empty() && int_attr(node, "noop_with_empty_axes", 0) != 0 {
        return Err(error(
            name,
            ty,
            "noop_with_empty_axes (a reduction over nothing)",
        ));
    }
    let op = if ty == "ReduceSum" {
        OpType::ReduceSum
    } else {
        OpType::ReduceMean
    };
    let keep = Attr::Bool(int_attr(node, "keepdims", 1) != 0);
    op1(
        t,
        name,
        node,
        op,
        vec![vec![x]],
        &[("dim", Attr::Ints(axes)), ("keep_dim", keep)],
    )
}

/// `Y = alpha · A' · B' + beta · C` as `matmul_v2` (with its transposes), a `scale` for
/// `alpha ≠ 1`, and an `elementwise_add` of `C` (scaled for `beta ≠ 1`).
fn gemm(t: &mut dyn Translate, name: &str, node: &NodeProto) -> Res {
    let (a, b) = (t.var(name, input(node, 0))?, t.var(name, input(node, 1))?);
    let attrs = [
        ("trans_x", Attr::Bool(int_attr(node, "transA", 0) != 0)),
        ("trans_y", Attr::Bool(int_attr(node, "transB", 0) != 0)),
    ];
    let alpha = float_attr(node, "alpha", 1.0);
    let beta = float_attr(node, "beta", 1.0);
    let mm_name = t.fresh(&format!("{}.mm", input_or(node.output.first(), name)));
    let mut y = t
        .builder()
        .op1(OpType::MatmulV2, &[&[a], &[b]], &attrs, &mm_name)
        .map_err(|e| error(name, "Gemm", e))?;
    if alpha != 1.0 {
        let s = t.fresh(&format!("{mm_name}.alpha"));
        y = scale(t, name, y, f64::from(alpha), 0.0, &s)?;
    }
    if input(node, 2).is_empty() {
        return Ok(y);
    }
    let mut c = t.var(name, input(node, 2))?;
    if beta != 1.0 {
        let s = t.fresh(&format!("{mm_name}.beta"));
        c = scale(t, name, c, f64::from(beta), 0.0, &s)?;
    }
    op1(
        t,
        name,
        node,
        OpType::ElementwiseAdd,
        vec![vec![y], vec![c]],
        &[("axis", Attr::Int(-1))],
    )
}

fn scale(t: &mut dyn Translate, node: &str, x: VarId, s: f64, bias: f64, out: &str) -> Res {
    t.builder()
        .op1(
            OpType::Scale,
            &[&[x]],
            &[
                ("scale", Attr::Float(s)),
                ("bias", Attr::Float(bias)),
                ("bias_after_scale", Attr::Bool(true)),
            ],
            out,
        )
        .map_err(|e| error(node, "scale", e))
}

/// An elementwise op; with a scalar constant operand, a `scale` (`x + c`, `x − c`,
/// `c − x`, `x · c`, `c · x`, `x / c`).
fn binary(t: &mut dyn Translate, name: &str, ty: &str, node: &NodeProto) -> Res {
    let (l, r) = (input(node, 0), input(node, 1));
    let (ls, rs) = (t.scalar(l), t.scalar(r));
    let folded = match (ty, ls, rs) {
        ("Add", _, Some(c)) => Some((l, 1.0, c)),
        ("Add", Some(c), None) => Some((r, 1.0, c)),
        ("Sub", _, Some(c)) => Some((l, 1.0, -c)),
        ("Sub", Some(c), None) => Some((r, -1.0, c)),
        ("Mul", _, Some(c)) => Some((l, c, 0.0)),
        ("Mul", Some(c), None) => Some((r, c, 0.0)),
        ("Div", _, Some(c)) if c != 0.0 => Some((l, 1.0 / c, 0.0)),
        _ => None,
    };
    if let Some((x, s, b)) = folded {
        let x = t.var(name, x)?;
        let out = t.fresh(input_or(node.output.first(), name));
        t.note(format!(
            "{name}: {ty} by a constant is a scale (scale {s}, bias {b})"
        ));
        return scale(t, name, x, s, b, &out);
    }
    let op = match ty {
        "Add" => OpType::ElementwiseAdd,
        "Sub" => OpType::ElementwiseSub,
        "Mul" => OpType::ElementwiseMul,
        _ => OpType::ElementwiseDiv,
    };
    let (x, y) = (t.operand(name, l)?, t.operand(name, r)?);
    op1(
        t,
        name,
        node,
        op,
        vec![vec![x], vec![y]],
        &[("axis", Attr::Int(-1))],
    )
}

/// `LayerNormalization(X, Scale, B)` over the dims from `axis` on as `layer_norm`, whose
/// statistics outputs are named after its output.
fn layer_norm(t: &mut dyn Translate, name: &str, node: &NodeProto) -> Res {
    let x = t.var(name, input(node, 0))?;
    let rank = t.rank(x) as i64;
    let axis = int_attr(node, "axis", -1);
    let axis = if axis < 0 { axis + rank } else { axis };
    if !(0..rank).contains(&axis) {
        return Err(error(
            name,
            "LayerNormalization",
            format!("axis {axis} of a rank-{rank} input"),
        ));
    }
    let mut inputs = vec![vec![x]];
    for k in 1..3 {
        let v = input(node, k);
        inputs.push(if v.is_empty() {
            Vec::new()
        } else {
            vec![t.var(name, v)?]
        });
    }
    let y = t.fresh(input_or(node.output.first(), name));
    let (mean, var) = (t.fresh(&format!("{y}.mean")), t.fresh(&format!("{y}.var")));
    let eps = float(float_attr(node, "epsilon", 1e-5));
    let outs = t
        .builder()
        .op(
            OpType::LayerNorm,
            &inputs.iter().map(Vec::as_slice).collect::<Vec<_>>(),
            &[("begin_norm_axis", Attr::Int(axis)), ("epsilon", eps)],
            &[&y, &mean, &var],
        )
        .map_err(|e| error(name, "LayerNormalization", e))?;
    Ok(outs[0])
}

/// `Reshape(data, shape)` with a constant `shape` as `reshape2` (0 copies a dim, −1 is
/// inferred, as in Paddle; `allowzero` is refused).
fn reshape(t: &mut dyn Translate, name: &str, node: &NodeProto) -> Res {
    let x = t.var(name, input(node, 0))?;
    let shape = t.ints(input(node, 1)).ok_or_else(|| {
        error(
            name,
            "Reshape",
            "the target shape is not a constant (a shape computed at run time)",
        )
    })?;
    if int_attr(node, "allowzero", 0) != 0 && shape.contains(&0) {
        return Err(error(name, "Reshape", "allowzero with a 0 in the shape"));
    }
    op1(
        t,
        name,
        node,
        OpType::Reshape2,
        vec![vec![x]],
        &[("shape", Attr::Ints(shape))],
    )
}

/// `Gather(weight, ids)` on axis 0 of a 2-D weight: an embedding lookup.
fn gather(t: &mut dyn Translate, name: &str, node: &NodeProto) -> Res {
    let (w, ids) = (input(node, 0), input(node, 1));
    if int_attr(node, "axis", 0) != 0 || !t.is_float_weight(w) {
        return Err(error(
            name,
            "Gather",
            "only an embedding lookup (a float weight gathered on axis 0 by ids) imports",
        ));
    }
    let (w, ids) = (t.var(name, w)?, t.var(name, ids)?);
    if t.rank(w) != 2 {
        return Err(error(name, "Gather", "an embedding table is 2-D"));
    }
    op1(
        t,
        name,
        node,
        OpType::LookupTableV2,
        vec![vec![w], vec![ids]],
        &[("padding_idx", Attr::Int(-1))],
    )
}

/// An op's type, input slots, attributes and output names.
type OpParts<'a> = (OpType, Vec<Vec<VarId>>, Vec<(&'a str, Attr)>, Vec<String>);

/// A fused pattern's op (`onnx_fuse`) on `x`, its outputs named `outs`.
pub(super) fn fused(
    t: &mut dyn Translate,
    name: &str,
    f: &super::onnx_fuse::Fused,
    x: VarId,
    outs: &[&str],
) -> Result<Vec<VarId>, ImportError> {
    use super::onnx_fuse::FusedOp;
    let rank = t.rank(x);
    let (ty, inputs, attrs, names): OpParts = match &f.op {
        FusedOp::Gelu => (
            OpType::Gelu,
            vec![vec![x]],
            vec![("approximate", Attr::Bool(false))],
            vec![outs[0].to_string()],
        ),
        FusedOp::Silu => (
            OpType::Silu,
            vec![vec![x]],
            vec![],
            vec![outs[0].to_string()],
        ),
        FusedOp::RmsNorm { weight, epsilon } => {
            let w = t.var(name, weight)?;
            let inv = t.fresh(&format!("{}.inv_var", outs[0]));
            (
                OpType::RmsNorm,
                vec![vec![x], vec![w]],
                vec![
                    ("begin_norm_axis", Attr::Int(rank as i64 - 1)),
                    ("epsilon", Attr::Float(*epsilon)),
                ],
                vec![outs[0].to_string(), inv],
            )
        }
        FusedOp::Halves { axis, .. } => (
            OpType::Split,
            vec![vec![x]],
            vec![("num", Attr::Int(2)), ("axis", Attr::Int(*axis))],
            outs.iter().map(|s| s.to_string()).collect(),
        ),
        FusedOp::RepeatHeads { axis, repeats, .. } => (
            OpType::RepeatInterleave,
            vec![vec![x]],
            vec![("repeats", Attr::Int(*repeats)), ("axis", Attr::Int(*axis))],
            vec![outs[0].to_string()],
        ),
    };
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let made = t
        .builder()
        .op(
            ty,
            &inputs.iter().map(Vec::as_slice).collect::<Vec<_>>(),
            &attrs,
            &names,
        )
        .map_err(|e| error(name, ty.name(), e))?;
    check_fused(t, name, f, &made)?;
    Ok(made.into_iter().take(outs.len()).collect())
}

/// What a fusion's shapes must be: two halves of equal size (a Slice pair that is not
/// halves is refused), repeated heads of the shape the Reshape wanted.
fn check_fused(
    t: &mut dyn Translate,
    name: &str,
    f: &super::onnx_fuse::Fused,
    made: &[VarId],
) -> Result<(), ImportError> {
    use super::onnx_fuse::FusedOp;
    let shape = |t: &mut dyn Translate, v: VarId| t.builder().program().var(v).ty.shape.to_vec();
    match &f.op {
        FusedOp::RepeatHeads { shape: want, .. } => {
            let got = shape(t, made[0]);
            let fits = got.len() == want.len()
                && got.iter().zip(want).all(|(&g, &w)| w <= 0 || g as i64 == w);
            if !fits {
                return Err(error(
                    name,
                    "Expand",
                    format!("repeated heads of shape {got:?}, where the Reshape wants {want:?}"),
                ));
            }
        }
        FusedOp::Halves { axis, half } => {
            let a = shape(t, made[0]);
            let k = if *axis < 0 {
                *axis + a.len() as i64
            } else {
                *axis
            };
            if a.get(k as usize).map(|&d| d as i64) != Some(*half) {
                return Err(error(
                    name,
                    "Slice",
                    "two Slices that are not the halves of their axis",
                ));
            }
        }
        FusedOp::Gelu | FusedOp::Silu | FusedOp::RmsNorm { .. } => {}
    }
    Ok(())
}
