//! Rewriting one op for one rank: the local op (attributes turned to local shapes, the
//! vocab-parallel embedding turned into `c_embedding` and its grad into `c_embedding_grad`,
//! the grad of `scale` into a `scale`, as Paddle names them), and the communication an
//! implementation adds after it.

use super::rank::{PartitionError, RankBuilder};
use super::reshard::reshard;
use super::stamp::RankAttrs;
use crate::dist::MeshAxis;
use crate::dist::{DistImpl, OperatorDistAttr, TensorDistAttr};
use crate::ir::{Attr, Op, OpType, Purpose, VarId};
use crate::passes::dist_program::DistProgram;
use std::sync::Arc;

/// `local` (a softmax_with_cross_entropy or its grad, inputs resharded) as Paddle's
/// `c_softmax_with_cross_entropy` or its grad, and the recipe of its rank-dependent
/// attributes: the class axis (the last) is split, so the op reduces over the ranks that
/// hold the other columns of the same rows.
fn vocab_cross_entropy(b: &RankBuilder, local: &Op) -> Result<(Op, RankAttrs), PartitionError> {
    let forward = local.ty == OpType::SoftmaxWithCrossEntropy;
    let x = if forward { "Logits" } else { "Softmax" };
    let v = *local.input(x).first().ok_or(PartitionError::MissingSlot {
        ty: local.ty,
        slot: x,
    })?;
    let axes = b.cur[v.index()].dims.last().cloned().unwrap_or_default();
    let cols = b.global_shape(v).last().copied().unwrap_or(0);
    let mut c = if forward {
        let mut c = Op::new(OpType::CSoftmaxWithCrossEntropy);
        c.inputs = crate::slots![
            local.input("Logits").to_vec(),
            local.input("Label").to_vec(),
        ];
        c.outputs = crate::slots![
            local.output("Softmax").to_vec(),
            local.output("Loss").to_vec(),
        ];
        c
    } else {
        let mut c = Op::new(OpType::CSoftmaxWithCrossEntropyGrad);
        c.inputs = crate::slots![
            local.input("Softmax").to_vec(),
            local.input("Label").to_vec(),
            local.input("Loss@GRAD").to_vec(),
        ];
        c.outputs = crate::slots![local.output("Logits@GRAD").to_vec()];
        c
    };
    c.role = local.role;
    c.namescope = local.namescope.clone();
    Ok((c, RankAttrs::VocabCrossEntropy { axes, cols }))
}

/// A mean (or its grad) over a dim split unevenly, appended as a sum scaled by `K/n` (`K`
/// the shards of the reduced dims, `n` their global elements); false for any other op.
///
/// Why: the mean leaves an average over the `K` ranks (an AVG partial), which equals the
/// global mean only when every rank averages as many elements. A rank's `sum·K/n`
/// averages to `sum/n` whatever its share, an empty shard (6 rows on 4 ranks) included,
/// and its gradient `K/n` per element, once the data-parallel sync has summed and divided
/// by `K`, is the serial `1/n`.
fn uneven_mean(b: &mut RankBuilder, op: &Arc<Op>) -> Result<bool, PartitionError> {
    let forms = [
        (OpType::Mean, OpType::ReduceSum, true),
        (OpType::ReduceMean, OpType::ReduceSum, false),
        (OpType::MeanGrad, OpType::ReduceSumGrad, true),
        (OpType::ReduceMeanGrad, OpType::ReduceSumGrad, false),
    ];
    let Some(&(_, sum_ty, all)) = forms.iter().find(|f| f.0 == op.ty) else {
        return Ok(false);
    };
    let Some(&x) = op.input("X").first() else {
        return Ok(false);
    };
    let global = b.global_shape(x).to_vec();
    let reduced: Vec<usize> = if all || op.attr_bool("reduce_all", false) {
        (0..global.len()).collect()
    } else {
        crate::ir::infer::reduce_axes(op, global.len()).unwrap_or_default()
    };
    let layout = &b.cur[x.index()];
    let uneven = reduced
        .iter()
        .any(|&d| !crate::dist::chunk::even(global[d], &layout.dims[d], b.mesh));
    if !uneven {
        return Ok(false);
    }
    let shards: usize = reduced
        .iter()
        .flat_map(|&d| layout.dims[d].iter())
        .map(|&a| b.mesh.axis_size(a))
        .product();
    // In u64: the browser's usize is 32 bits, and a mean over a real size's dims exceeds it.
    let n: u64 = reduced.iter().map(|&d| global[d] as u64).product();
    let slot = if sum_ty == OpType::ReduceSum {
        "Out"
    } else {
        "X@GRAD"
    };
    let Some(&out) = op.output(slot).first() else {
        return Ok(false);
    };
    let produced = b.cur[out.index()].clone();
    let sum = b.temp(out, &produced, "SUM")?;
    let mut s = Op::clone(op);
    s.ty = sum_ty;
    if all {
        s.attrs.insert("reduce_all".into(), Attr::Bool(true));
    }
    s.outputs = crate::slots![[sum]];
    b.local(s);
    let mut scale = Op::new(OpType::Scale);
    scale.inputs = crate::slots![[sum]];
    scale.outputs = crate::slots![[out]];
    scale.role = op.role;
    scale.namescope = op.namescope.clone();
    let factor = shards as f64 / n.max(1) as f64;
    scale.attrs.insert("scale".into(), Attr::Float(factor));
    scale.attrs.insert("bias".into(), Attr::Float(0.0));
    scale
        .attrs
        .insert("bias_after_scale".into(), Attr::Bool(true));
    b.local(scale);
    Ok(true)
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
    let fixups = redirect_outputs(b, &mut local, attr, declared)?;
    let saved = cfg!(feature = "context-parallel") && local.ty == OpType::FlashAttn;
    if let Some(axes) = super::ring::ring_axes(b, &local) {
        super::ring::lower(b, &local, axes)?;
    } else {
        let (local, recipe) = rewrite(b, local, attr, imp)?;
        match recipe {
            Some(r) => b.rank_dependent(Arc::unwrap_or_clone(local), r),
            None => {
                if !uneven_mean(b, &local)? {
                    b.local(local)
                }
            }
        }
    }
    // The grad of `flash_attn` reads its output as the op produced it (Ulysses' heads
    // split), as DeepSpeed-Ulysses keeps it inside the attention: not moved back again.
    for (t, v) in fixups {
        if saved {
            let produced = b.cur[t.index()].layout.clone();
            b.reshard_cache.insert((v, produced), t);
        }
        let target = DistProgram::settled(&declared[v.index()]);
        let r = reshard(b, t, &target)?;
        let mut assign = Op::new(OpType::Assign);
        assign.inputs = crate::slots![[r]];
        assign.outputs = crate::slots![[v]];
        assign.namescope = Purpose::Reshard.namescope().into();
        b.local(assign);
        b.cur[v.index()] = target;
    }
    Ok(())
}

/// Records the layout each output is produced in; an output produced in another layout
/// than its variable's is written to a temporary instead. Returns (temporary, variable)
/// pairs for the caller to reshard back.
fn redirect_outputs(
    b: &mut RankBuilder,
    local: &mut Arc<Op>,
    attr: &OperatorDistAttr,
    declared: &[TensorDistAttr],
) -> Result<Vec<(VarId, VarId)>, PartitionError> {
    let mut fixups = Vec::new();
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
                Arc::make_mut(local).outputs[k][j] = t;
            } else {
                b.cur[v.index()] = produced.clone();
            }
        }
    }
    Ok(fixups)
}

/// The op a rank runs for `local` under implementation `imp` (shape attributes made
/// local, Paddle's rank-program op names), and the recipe of its rank-dependent
/// attributes if it has any.
fn rewrite(
    b: &mut RankBuilder,
    mut local: Arc<Op>,
    attr: &OperatorDistAttr,
    imp: DistImpl,
) -> Result<(Arc<Op>, Option<RankAttrs>), PartitionError> {
    let mut recipe = None;
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
            s.inputs = crate::slots![local.input("Out@GRAD").to_vec()];
            s.outputs = crate::slots![local.output("X@GRAD").to_vec()];
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
                let rows = b.global_shape(w).first().copied().unwrap_or(0);
                let axes = w_attr.dims.first().cloned().unwrap_or_default();
                recipe = Some(RankAttrs::TableStart { axes, rows });
                if local.ty == OpType::LookupTableV2 {
                    let mut c = Op::new(OpType::CEmbedding);
                    c.inputs = local.inputs.clone();
                    c.outputs = local.outputs.clone();
                    c.namescope = local.namescope.clone();
                    local = Arc::new(c);
                } else {
                    let mut c = Op::new(OpType::CEmbeddingGrad);
                    c.inputs = crate::slots![
                        local.input("W").to_vec(),
                        local.input("Ids").to_vec(),
                        local.input("Out@GRAD").to_vec(),
                    ];
                    c.outputs = crate::slots![local.output("W@GRAD").to_vec()];
                    c.role = local.role;
                    c.namescope = local.namescope.clone();
                    local = Arc::new(c);
                }
            }
        }
        (OpType::SoftmaxWithCrossEntropy, DistImpl::CrossEntropyVocab)
        | (OpType::SoftmaxWithCrossEntropyGrad, DistImpl::CrossEntropyVocab) => {
            let (c, r) = vocab_cross_entropy(b, &local)?;
            local = Arc::new(c);
            recipe = Some(r);
        }
        _ => {}
    }
    Ok((local, recipe))
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
