//! Transformer presets: `gpt` (pre-LN blocks, mean squared error loss), `embedding_lm`
//! (token embedding, blocks, LM head, softmax cross-entropy) and `gpt_lm` (GPT-2 and GPT-3:
//! token and learned position embeddings, blocks, an LM head tied to the token embedding).

use super::layers::{causal_core, lm_loss, swap_seq_heads, to_heads};
use super::{ModelConfig, ModelError};
use crate::ir::{Attr, Builder, DType, OpRole, OpType, Program, VarId};

type Res<T> = Result<T, ModelError>;

/// `x[batch, seq, hidden]` through `layers` blocks, a final layer_norm, and
/// `mean((out - y)^2)`.
pub fn gpt(cfg: &ModelConfig) -> Res<Program> {
    gpt_with(cfg, false)
}

/// `gpt` with Megatron's sequence-parallel gather points: after each block's layer norms an
/// `assign` (identity) op whose output the sequence-parallel scenario pins whole on the
/// sequence. The residual stream and layer norms stay split on the sequence over mp; the
/// planner then all-gathers before each column-parallel matmul and reduce-scatters the
/// row-parallel partial sums back onto the sequence split, as Megatron does (Paddle's models
/// call `dist.reshard` at the same points).
pub fn gpt_sequence_parallel(cfg: &ModelConfig) -> Res<Program> {
    gpt_with(cfg, true)
}

fn gpt_with(cfg: &ModelConfig, gather_points: bool) -> Res<Program> {
    let mut b = Builder::new();
    let shape = [cfg.batch, cfg.seq, cfg.hidden];
    let mut h = b.input("x", cfg.dtype, &shape)?;
    let y = b.label("y", cfg.dtype, &shape)?;
    for i in 0..cfg.layers {
        h = block(&mut b, cfg, &format!("h{i}"), h, gather_points)?;
    }
    let out = layer_norm(&mut b, cfg, "ln_f", h)?;
    let diff = b.op1(OpType::ElementwiseSub, &[&[out], &[y]], &[], "loss.diff")?;
    let sq = b.op1(OpType::Square, &[&[diff]], &[], "loss.sq")?;
    b.set_role(OpRole::Loss);
    b.op1(OpType::Mean, &[&[sq]], &[], "loss")?;
    Ok(b.finish())
}

/// Token ids through an embedding, `layers` blocks, a final layer_norm, an LM head and a
/// softmax cross-entropy against next-token labels.
pub fn embedding_lm(cfg: &ModelConfig) -> Res<Program> {
    let mut b = Builder::new();
    let ids = b.input("ids", DType::I64, &[cfg.batch, cfg.seq])?;
    let label = b.label("label", DType::I64, &[cfg.batch, cfg.seq, 1])?;
    let wte = b.param("wte", cfg.dtype, &[cfg.vocab, cfg.hidden])?;
    let mut h = b.op1(
        OpType::LookupTableV2,
        &[&[wte], &[ids]],
        &[("padding_idx", Attr::Int(-1))],
        "emb",
    )?;
    for i in 0..cfg.layers {
        h = block(&mut b, cfg, &format!("h{i}"), h, false)?;
    }
    let out = layer_norm(&mut b, cfg, "ln_f", h)?;
    let head = b.param("lm_head.w", cfg.dtype, &[cfg.hidden, cfg.vocab])?;
    let logits = b.op1(OpType::MatmulV2, &[&[out], &[head]], &[], "logits")?;
    lm_loss(&mut b, logits, label)?;
    Ok(b.finish())
}

/// GPT-2 and GPT-3 (Radford et al. 2019; Brown et al. 2020): token embedding plus a learned
/// position embedding, `layers` pre-LN blocks, a final layer_norm, and logits against the
/// token embedding itself (`wte` transposed: the head is tied, so a vocab-parallel `wte` is
/// a vocab-parallel head, as in Megatron), then a softmax cross-entropy.
///
/// The position table `wpe[seq, hidden]` is added whole, broadcast over the batch: the same
/// as looking up positions 0..seq (what GPT-2 does for an unpadded sequence) without a
/// position-ids input. At the published sequence length its size is the published
/// `n_positions`, so the parameter count is the published one.
pub fn gpt_lm(cfg: &ModelConfig) -> Res<Program> {
    let mut b = Builder::new();
    let ids = b.input("ids", DType::I64, &[cfg.batch, cfg.seq])?;
    let label = b.label("label", DType::I64, &[cfg.batch, cfg.seq, 1])?;
    let wte = b.param("wte", cfg.dtype, &[cfg.vocab, cfg.hidden])?;
    let wpe = b.param("wpe", cfg.dtype, &[cfg.seq, cfg.hidden])?;
    let tokens = b.op1(
        OpType::LookupTableV2,
        &[&[wte], &[ids]],
        &[("padding_idx", Attr::Int(-1))],
        "emb.tokens",
    )?;
    let mut h = b.op1(OpType::ElementwiseAdd, &[&[tokens], &[wpe]], &[], "emb")?;
    for i in 0..cfg.layers {
        h = block(&mut b, cfg, &format!("h{i}"), h, false)?;
    }
    let out = layer_norm(&mut b, cfg, "ln_f", h)?;
    let logits = b.op1(
        OpType::MatmulV2,
        &[&[out], &[wte]],
        &[("trans_y", Attr::Bool(true))],
        "logits",
    )?;
    lm_loss(&mut b, logits, label)?;
    Ok(b.finish())
}

/// The identity op at a sequence-parallel gather point (`{name}.gathered`), or `x` itself.
fn gather_point(b: &mut Builder, name: &str, x: VarId, on: bool) -> Res<VarId> {
    if !on {
        return Ok(x);
    }
    Ok(b.op1(OpType::Assign, &[&[x]], &[], &format!("{name}.gathered"))?)
}

/// One pre-LN block: `x + attn(ln_1(x))`, then `+ mlp(ln_2(.))`.
fn block(b: &mut Builder, cfg: &ModelConfig, p: &str, x: VarId, sp: bool) -> Res<VarId> {
    let ln1 = layer_norm(b, cfg, &format!("{p}.ln_1"), x)?;
    let ln1 = gather_point(b, &format!("{p}.ln_1"), ln1, sp)?;
    let attn = attention(b, cfg, &format!("{p}.attn"), ln1)?;
    let res1 = b.op1(
        OpType::ElementwiseAdd,
        &[&[x], &[attn]],
        &[],
        &format!("{p}.res_1"),
    )?;
    let ln2 = layer_norm(b, cfg, &format!("{p}.ln_2"), res1)?;
    let ln2 = gather_point(b, &format!("{p}.ln_2"), ln2, sp)?;
    let fc1 = linear(
        b,
        cfg,
        &format!("{p}.mlp.fc1"),
        ln2,
        cfg.hidden,
        4 * cfg.hidden,
    )?;
    let act = b.op1(
        OpType::Gelu,
        &[&[fc1]],
        &[("approximate", Attr::Bool(true))],
        &format!("{p}.mlp.gelu"),
    )?;
    let fc2 = linear(
        b,
        cfg,
        &format!("{p}.mlp.fc2"),
        act,
        4 * cfg.hidden,
        cfg.hidden,
    )?;
    Ok(b.op1(
        OpType::ElementwiseAdd,
        &[&[res1], &[fc2]],
        &[],
        &format!("{p}.res_2"),
    )?)
}

/// Causal multi-head self-attention with separate q, k, v projections.
fn attention(b: &mut Builder, cfg: &ModelConfig, p: &str, x: VarId) -> Res<VarId> {
    let head_dim = cfg.hidden / cfg.heads;
    let heads = |b: &mut Builder, name: &str| -> Res<VarId> {
        let proj = linear(b, cfg, &format!("{p}.{name}"), x, cfg.hidden, cfg.hidden)?;
        let split = to_heads(b, &format!("{p}.{name}"), proj, cfg.heads, head_dim)?;
        swap_seq_heads(b, &format!("{p}.{name}.t"), split)
    };
    let q = heads(b, "q")?;
    let k = heads(b, "k")?;
    let v = heads(b, "v")?;
    let merged = causal_core(b, p, (q, k, v), head_dim, cfg.hidden)?;
    linear(b, cfg, &format!("{p}.o"), merged, cfg.hidden, cfg.hidden)
}

/// `x @ w + b` with parameters `{p}.w` and `{p}.b`.
fn linear(
    b: &mut Builder,
    cfg: &ModelConfig,
    p: &str,
    x: VarId,
    inp: usize,
    out: usize,
) -> Res<VarId> {
    // The bias is declared before the product: gpt's variable order, which its goldens pin.
    let w = b.param(&format!("{p}.w"), cfg.dtype, &[inp, out])?;
    let bias = b.param(&format!("{p}.b"), cfg.dtype, &[out])?;
    let mm = b.op1(OpType::MatmulV2, &[&[x], &[w]], &[], &format!("{p}.mm"))?;
    Ok(b.op1(
        OpType::ElementwiseAdd,
        &[&[mm], &[bias]],
        &[],
        &format!("{p}.out"),
    )?)
}

/// layer_norm over the last dim with parameters `{p}.scale` and `{p}.bias`.
fn layer_norm(b: &mut Builder, cfg: &ModelConfig, p: &str, x: VarId) -> Res<VarId> {
    let scale = b.param(&format!("{p}.scale"), cfg.dtype, &[cfg.hidden])?;
    let bias = b.param(&format!("{p}.bias"), cfg.dtype, &[cfg.hidden])?;
    let outs = b.op(
        OpType::LayerNorm,
        &[&[x], &[scale], &[bias]],
        &[
            ("begin_norm_axis", Attr::Int(2)),
            ("epsilon", Attr::Float(1e-5)),
        ],
        &[
            &format!("{p}.out"),
            &format!("{p}.mean"),
            &format!("{p}.var"),
        ],
    )?;
    Ok(outs[0])
}
