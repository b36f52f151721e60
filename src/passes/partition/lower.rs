//! Rewriting one op for one rank: the local op (attributes turned to local shapes, the
//! vocab-parallel embedding turned into `c_embedding` and its grad into `c_embedding_grad`,
//! the grad of `scale` into a `scale`, as Paddle names them), and the communication an
//! implementation adds after it.

use super::rank::{PartitionError, RankBuilder};
use super::reshard::reshard;
use crate::dist::MeshAxis;
use crate::dist::{DistImpl, OperatorDistAttr, TensorDistAttr};
use crate::ir::{Attr, Op, OpType, Purpose, VarId};
use crate::passes::dist_program::DistProgram;
use std::sync::Arc;

/// The vocab id of this rank's first table row when `w` splits rows over mesh axes.
fn start_index(b: &RankBuilder, w: &TensorDistAttr, local_rows: usize) -> i64 {
    block_start(b, &w.dims.first().cloned().unwrap_or_default(), local_rows)
}

/// The global index of this rank's first element of a dim split over `axes` in blocks of
/// `local` (the first axis is the major one, as in `local_shape`).
fn block_start(b: &RankBuilder, axes: &[MeshAxis], local: usize) -> i64 {
    let index = axes
        .iter()
        .fold(0usize, |acc, &a| acc * b.mesh.axis_size(a) + b.coord(a));
    (index * local) as i64
}

/// `local` (a softmax_with_cross_entropy or its grad, inputs resharded) as Paddle's
/// `c_softmax_with_cross_entropy` or its grad: the class axis (the last) is split, so the op
/// reduces over the ranks that hold the other columns of the same rows.
fn vocab_cross_entropy(b: &mut RankBuilder, local: &Op) -> Result<Op, PartitionError> {
    let forward = local.ty == OpType::SoftmaxWithCrossEntropy;
    let x = if forward { "Logits" } else { "Softmax" };
    let v = *local
        .input(x)
        .first()
        .ok_or_else(|| PartitionError::Layout(format!("{} has no {x}", local.ty)))?;
    let axes = b.cur[v.index()].dims.last().cloned().unwrap_or_default();
    let cols = b.program.var(v).ty.shape.last().copied().unwrap_or(0);
    let group = b.group(&axes);
    let me = group.iter().position(|&r| r == b.rank).unwrap_or(0);
    let mut c = if forward {
        let mut c = Op::new(OpType::CSoftmaxWithCrossEntropy);
        c.inputs = vec![
            local.input("Logits").to_vec(),
            local.input("Label").to_vec(),
        ];
        c.outputs = vec![
            local.output("Softmax").to_vec(),
            local.output("Loss").to_vec(),
        ];
        c
    } else {
        let mut c = Op::new(OpType::CSoftmaxWithCrossEntropyGrad);
        c.inputs = vec![
            local.input("Softmax").to_vec(),
            local.input("Label").to_vec(),
            local.input("Loss@GRAD").to_vec(),
        ];
        c.outputs = vec![local.output("Logits@GRAD").to_vec()];
        c
    };
    c.role = local.role;
    c.namescope = local.namescope.clone();
    let attrs = [
        ("start_index", Attr::Int(block_start(b, &axes, cols))),
        ("ring_id", Attr::Int(b.groups.ring_of(&group) as i64)),
        ("rank", Attr::Int(me as i64)),
        ("nranks", Attr::Int(group.len() as i64)),
        (
            "group",
            Attr::Ints(group.iter().map(|&r| i64::from(r)).collect()),
        ),
    ];
    for (k, a) in attrs {
        c.attrs.insert(k.into(), a);
    }
    Ok(c)
}

fn shape_attr(shape: &[usize]) -> Attr {
    Attr::Ints(shape.iter().map(|&d| d as i64).collect())
}

/// Appends the local op for `local` (inputs already resharded); records the layout of its
/// outputs. An output produced in another layout than its variable's goes through a
/// temporary and a reshard.
pub fn lower(
    b: &mut RankBuilder,
    mut local: Arc<Op>,
    attr: &OperatorDistAttr,
    imp: DistImpl,
    declared: &[TensorDistAttr],
) -> Result<(), PartitionError> {
    let mut fixups: Vec<(VarId, VarId)> = Vec::new();
    for (k, slot) in attr.outputs.iter().enumerate() {
        for (j, produced) in slot.iter().enumerate() {
            let Some(&v) = local.outputs.get(k).and_then(|s| s.get(j)) else {
                continue;
            };
            if local.all_inputs().any(|x| x == v) {
                continue; // in-place update keeps the variable's layout
            }
            if produced.dims != declared[v.index()].dims {
                let t = b.temp(v, produced, "OUT")?;
                fixups.push((t, v));
                Arc::make_mut(&mut local).outputs[k][j] = t;
            } else {
                b.cur[v.index()] = produced.clone();
            }
        }
    }
    match (local.ty, imp) {
        (OpType::Reshape2, _) | (OpType::FillConstant, _) => {
            if let Some(&out) = local.outputs.first().and_then(|s| s.first()) {
                let shape = shape_attr(&b.program.var(out).ty.shape);
                if local.attrs.get("shape") != Some(&shape) {
                    Arc::make_mut(&mut local)
                        .attrs
                        .insert("shape".into(), shape);
                }
            }
        }
        // Paddle's grad of `scale` is a `scale` of the output gradient (bias 0); so is ours
        // in a rank's program, where the op names are Paddle's.
        (OpType::ScaleGrad, _) => {
            let mut s = Op::new(OpType::Scale);
            s.inputs = vec![local.input("Out@GRAD").to_vec()];
            s.outputs = vec![local.output("X@GRAD").to_vec()];
            s.role = local.role;
            s.namescope = local.namescope.clone();
            s.attrs
                .insert("scale".into(), Attr::Float(local.attr_float("scale", 1.0)));
            s.attrs.insert("bias".into(), Attr::Float(0.0));
            s.attrs.insert("bias_after_scale".into(), Attr::Bool(true));
            local = Arc::new(s);
        }
        (OpType::LookupTableV2, DistImpl::EmbeddingVocab)
        | (OpType::LookupTableV2Grad, DistImpl::EmbeddingVocab) => {
            let w = local.input("W").first().copied();
            let w_attr = attr.inputs.first().and_then(|s| s.first());
            if let (Some(w), Some(w_attr)) = (w, w_attr) {
                let rows = b.program.var(w).ty.shape.first().copied().unwrap_or(0);
                let start = start_index(b, w_attr, rows);
                if local.ty == OpType::LookupTableV2 {
                    let mut c = Op::new(OpType::CEmbedding);
                    c.inputs = local.inputs.clone();
                    c.outputs = local.outputs.clone();
                    c.namescope = local.namescope.clone();
                    c.attrs.insert("start_index".into(), Attr::Int(start));
                    local = Arc::new(c);
                } else {
                    let mut c = Op::new(OpType::CEmbeddingGrad);
                    c.inputs = vec![
                        local.input("W").to_vec(),
                        local.input("Ids").to_vec(),
                        local.input("Out@GRAD").to_vec(),
                    ];
                    c.outputs = vec![local.output("W@GRAD").to_vec()];
                    c.role = local.role;
                    c.namescope = local.namescope.clone();
                    c.attrs.insert("start_index".into(), Attr::Int(start));
                    local = Arc::new(c);
                }
            }
        }
        (OpType::SoftmaxWithCrossEntropy, DistImpl::CrossEntropyVocab)
        | (OpType::SoftmaxWithCrossEntropyGrad, DistImpl::CrossEntropyVocab) => {
            local = Arc::new(vocab_cross_entropy(b, &local)?);
        }
        _ => {}
    }
    b.local(local);
    for (t, v) in fixups {
        let target = DistProgram::settled(&declared[v.index()]);
        let r = reshard(b, t, &target)?;
        let mut assign = Op::new(OpType::Assign);
        assign.inputs = vec![vec![r]];
        assign.outputs = vec![vec![v]];
        assign.namescope = Purpose::Reshard.namescope().into();
        b.local(assign);
        b.cur[v.index()] = target;
    }
    Ok(())
}

/// All-reduces `v` in place over its partial axes (tensor parallel).
fn all_reduce_partial(b: &mut RankBuilder, v: VarId) {
    let attr = b.cur[v.index()].clone();
    if attr.partial.is_empty() {
        return;
    }
    let axes: Vec<MeshAxis> = attr.partial_axes();
    let Some((_, reduce)) = attr.partial.first() else {
        return;
    };
    b.collective(
        OpType::AllReduce,
        v,
        v,
        &axes,
        vec![("reduce_type", Attr::Str(reduce.name().into()))],
        Purpose::TensorParallel,
    );
    b.cur[v.index()] = DistProgram::settled(&attr);
}

/// The communication an implementation adds after its op: the row-parallel matmul and the
/// vocab-parallel embedding all-reduce their output; the column-parallel matmul's backward
/// all-reduces the input's gradient.
pub fn after(b: &mut RankBuilder, op: &Op, imp: DistImpl) {
    match (imp, op.ty) {
        (DistImpl::MatmulRow, OpType::MatmulV2)
        | (DistImpl::EmbeddingVocab, OpType::LookupTableV2) => {
            if let Some(&out) = op.outputs.first().and_then(|s| s.first()) {
                all_reduce_partial(b, out);
            }
        }
        (DistImpl::MatmulColumn, OpType::MatmulV2Grad) => {
            if let Some(&xg) = op.outputs.first().and_then(|s| s.first()) {
                all_reduce_partial(b, xg);
            }
        }
        _ => {}
    }
}
