//! The pieces the transformer presets share: a projection `x @ {p}.w`, projections split
//! into heads, and attention's core `softmax(mask(q·kᵀ / √d))·v` merged back to the model
//! width.
//! Variable names (`{p}.q.heads`, `{p}.scores`, `{p}.probs`, `{p}.ctx`, ...) are the same in
//! every preset, so annotations and recomputation find them by name.

use super::ModelError;
use crate::ir::{Attr, Builder, DType, OpRole, OpType, VarId};

type Res<T> = Result<T, ModelError>;

/// `x @ {p}.w` (`{p}.mm`) with a new parameter `{p}.w` `[inp, out]`.
pub fn projection(
    b: &mut Builder,
    dtype: DType,
    p: &str,
    x: VarId,
    (inp, out): (usize, usize),
) -> Res<VarId> {
    let w = b.param(&format!("{p}.w"), dtype, &[inp, out])?;
    Ok(b.op1(OpType::MatmulV2, &[&[x], &[w]], &[], &format!("{p}.mm"))?)
}

/// `[batch, seq, n·head_dim]` as `[batch, seq, n, head_dim]` (`{p}.heads`).
pub fn to_heads(b: &mut Builder, p: &str, x: VarId, n: usize, head_dim: usize) -> Res<VarId> {
    Ok(b.op1(
        OpType::Reshape2,
        &[&[x]],
        &[("shape", Attr::Ints(vec![0, 0, n as i64, head_dim as i64]))],
        &format!("{p}.heads"),
    )?)
}

/// `[batch, seq, heads, head_dim]` ↔ `[batch, heads, seq, head_dim]`.
pub fn swap_seq_heads(b: &mut Builder, name: &str, x: VarId) -> Res<VarId> {
    Ok(b.op1(
        OpType::Transpose2,
        &[&[x]],
        &[("axis", Attr::Ints(vec![0, 2, 1, 3]))],
        name,
    )?)
}

/// `softmax(mask(q·kᵀ / √head_dim))·v` over `[batch, heads, seq, head_dim]` operands,
/// merged back to `[batch, seq, hidden]` (`{p}.ctx.merged`).
pub fn causal_core(
    b: &mut Builder,
    p: &str,
    (q, k, v): (VarId, VarId, VarId),
    head_dim: usize,
    hidden: usize,
) -> Res<VarId> {
    let scores = b.op1(
        OpType::MatmulV2,
        &[&[q], &[k]],
        &[
            ("trans_x", Attr::Bool(false)),
            ("trans_y", Attr::Bool(true)),
        ],
        &format!("{p}.scores"),
    )?;
    let scale = [
        ("scale", Attr::Float(1.0 / (head_dim as f64).sqrt())),
        ("bias", Attr::Float(0.0)),
    ];
    let scaled = b.op1(
        OpType::Scale,
        &[&[scores]],
        &scale,
        &format!("{p}.scores.scaled"),
    )?;
    let probs = b.op1(
        OpType::FusedSoftmaxMaskUpperTriangle,
        &[&[scaled]],
        &[],
        &format!("{p}.probs"),
    )?;
    let ctx = b.op1(
        OpType::MatmulV2,
        &[&[probs], &[v]],
        &[],
        &format!("{p}.ctx"),
    )?;
    let ctx_t = swap_seq_heads(b, &format!("{p}.ctx.t"), ctx)?;
    Ok(b.op1(
        OpType::Reshape2,
        &[&[ctx_t]],
        &[("shape", Attr::Ints(vec![0, 0, hidden as i64]))],
        &format!("{p}.ctx.merged"),
    )?)
}

/// A language model's loss: softmax cross-entropy of `logits` against next-token `label`
/// (`logits.softmax`, `loss.tokens`), then their mean `loss`, marked as the loss.
pub fn lm_loss(b: &mut Builder, logits: VarId, label: VarId) -> Res<()> {
    let outs = b.op(
        OpType::SoftmaxWithCrossEntropy,
        &[&[logits], &[label]],
        &[("axis", Attr::Int(-1)), ("soft_label", Attr::Bool(false))],
        &["logits.softmax", "loss.tokens"],
    )?;
    b.set_role(OpRole::Loss);
    b.op1(OpType::Mean, &[&[outs[1]]], &[], "loss")?;
    Ok(())
}
