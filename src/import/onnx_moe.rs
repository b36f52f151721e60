//! The `pd_op` nodes of a Mixture-of-Experts layer (written by the Paddle-program import,
//! `pir_rewrite.rs`): the routing's `moe_dispatch` and `moe_combine`, and the experts'
//! `split` (one expert's slots each) and `stack` (their outputs back together).

use super::onnx::{int_attr, Translate};
use super::onnx_ops::{error, input};
use super::onnx_proto::NodeProto;
use super::ImportError;
use crate::ir::{Attr, OpType, VarId};

type Outs = Result<Vec<VarId>, ImportError>;

/// The node's output names, made fresh (`count` of them, at least one).
fn outputs(t: &mut dyn Translate, name: &str, node: &NodeProto, count: usize) -> Vec<String> {
    (0..count.max(1))
        .map(|k| {
            let o = node.output.get(k).map_or(name, String::as_str);
            t.fresh(o)
        })
        .collect()
}

/// `split` into `num` equal pieces along `axis`, and `stack` along a new `axis` (each
/// input given a size-1 dim there, then concatenated).
pub(super) fn pieces(
    t: &mut dyn Translate,
    name: &str,
    ty: &str,
    node: &NodeProto,
    x: VarId,
) -> Outs {
    let axis = int_attr(node, "axis", 0);
    if ty == "split" {
        let outs = outputs(t, name, node, node.output.len());
        let names: Vec<&str> = outs.iter().map(String::as_str).collect();
        let attrs = [
            ("axis", Attr::Int(axis)),
            ("num", Attr::Int(int_attr(node, "num", 1))),
        ];
        return t
            .builder()
            .op(OpType::Split, &[&[x]], &attrs, &names)
            .map_err(|e| error(name, ty, e));
    }
    let mut parts = Vec::with_capacity(node.input.len());
    for (k, input_name) in node.input.iter().enumerate() {
        let v = if k == 0 { x } else { t.var(name, input_name)? };
        let shape = t.builder().program().var(v).ty.shape.clone();
        let at = usize::try_from(axis)
            .ok()
            .filter(|&a| a <= shape.len())
            .ok_or_else(|| {
                error(
                    name,
                    ty,
                    format!("axis {axis} is outside a rank-{} input", shape.len()),
                )
            })?;
        let mut target: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        target.insert(at, 1);
        let piece = t.fresh(&format!("{name}.{k}"));
        let r = t
            .builder()
            .op1(
                OpType::Reshape2,
                &[&[v]],
                &[("shape", Attr::Ints(target))],
                &piece,
            )
            .map_err(|e| error(name, ty, e))?;
        parts.push(r);
    }
    let out = outputs(t, name, node, 1);
    t.builder()
        .op(
            OpType::Concat,
            &[&parts],
            &[("axis", Attr::Int(axis))],
            &[&out[0]],
        )
        .map_err(|e| error(name, ty, e))
}

/// `moe_dispatch(x, gates)` → `(out, weights, index)`; `moe_combine(x, weights, index)`.
pub(super) fn routing(
    t: &mut dyn Translate,
    name: &str,
    ty: &str,
    node: &NodeProto,
    x: VarId,
) -> Outs {
    let int = |k: &str| Attr::Int(int_attr(node, k, 1));
    if ty == "moe_dispatch" {
        let gates = t.var(name, input(node, 1))?;
        let outs = outputs(t, name, node, 3);
        let attrs = [
            ("k", int("k")),
            ("capacity", int("capacity")),
            ("group_size", int("group_size")),
        ];
        return t
            .builder()
            .op(
                OpType::MoeDispatch,
                &[&[x], &[gates]],
                &attrs,
                &[&outs[0], &outs[1], &outs[2]],
            )
            .map_err(|e| error(name, ty, e));
    }
    let (w, index) = (t.var(name, input(node, 1))?, t.var(name, input(node, 2))?);
    let out = outputs(t, name, node, 1);
    let attrs = [
        ("capacity", int("capacity")),
        ("group_size", int("group_size")),
    ];
    t.builder()
        .op(
            OpType::MoeCombine,
            &[&[x], &[w], &[index]],
            &attrs,
            &[&out[0]],
        )
        .map_err(|e| error(name, ty, e))
}
