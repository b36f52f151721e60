//! `llama`: a Llama-family decoder. Token embedding; blocks of rms_norm, grouped-query
//! attention with rotary embeddings and a SwiGLU MLP (`silu(x·W_gate) * (x·W_up)`), each
//! with its residual; a final rms_norm, an LM head and the softmax cross-entropy against
//! next-token labels. No biases, as in Llama. With `experts`, the MLP is a Mixture of
//! Experts (Mixtral's; [`super::moe`]).
//!
//! The rotary tables `rope.sin` and `rope.cos` `[1, seq, 1, head_dim]` are inputs, as in
//! Paddle's models (which compute them once outside the layers).

use super::layers::{causal_core, lm_loss, projection, swap_seq_heads, to_heads};
use super::{ModelConfig, ModelError};
use crate::ir::{Attr, Builder, DType, OpType, Program, VarId};

type Res<T> = Result<T, ModelError>;

/// The tensors every block reads besides its input.
struct Shared {
    sin: VarId,
    cos: VarId,
}

/// The whole model (see the module comment).
pub fn llama(cfg: &ModelConfig) -> Res<Program> {
    let mut b = Builder::new();
    let head_dim = cfg.hidden / cfg.heads;
    let ids = b.input("ids", DType::I64, &[cfg.batch, cfg.seq])?;
    let label = b.label("label", DType::I64, &[cfg.batch, cfg.seq, 1])?;
    let table = [1, cfg.seq, 1, head_dim];
    let shared = Shared {
        sin: b.input("rope.sin", cfg.dtype, &table)?,
        cos: b.input("rope.cos", cfg.dtype, &table)?,
    };
    let wte = b.param("wte", cfg.dtype, &[cfg.vocab, cfg.hidden])?;
    let mut h = b.op1(
        OpType::LookupTableV2,
        &[&[wte], &[ids]],
        &[("padding_idx", Attr::Int(-1))],
        "emb",
    )?;
    for i in 0..cfg.layers {
        h = block(&mut b, cfg, &shared, &format!("h{i}"), h)?;
    }
    let out = rms_norm(&mut b, cfg, "norm", h)?;
    let head = b.param("lm_head.w", cfg.dtype, &[cfg.hidden, cfg.vocab])?;
    let logits = b.op1(OpType::MatmulV2, &[&[out], &[head]], &[], "logits")?;
    lm_loss(&mut b, logits, label)?;
    Ok(b.finish())
}

/// One block: `x + attn(rms_norm(x))`, then `+ mlp(rms_norm(.))`.
fn block(b: &mut Builder, cfg: &ModelConfig, shared: &Shared, p: &str, x: VarId) -> Res<VarId> {
    let n1 = rms_norm(b, cfg, &format!("{p}.input_norm"), x)?;
    let attn = attention(b, cfg, shared, &format!("{p}.attn"), n1)?;
    let res1 = b.op1(
        OpType::ElementwiseAdd,
        &[&[x], &[attn]],
        &[],
        &format!("{p}.res_1"),
    )?;
    let n2 = rms_norm(b, cfg, &format!("{p}.post_norm"), res1)?;
    let mlp = if cfg.experts > 0 {
        super::moe::moe_swiglu(b, cfg, &format!("{p}.moe"), n2)?
    } else {
        swiglu(b, cfg, &format!("{p}.mlp"), n2)?
    };
    Ok(b.op1(
        OpType::ElementwiseAdd,
        &[&[res1], &[mlp]],
        &[],
        &format!("{p}.res_2"),
    )?)
}

/// `down(silu(x·W_gate) * (x·W_up))`.
fn swiglu(b: &mut Builder, cfg: &ModelConfig, p: &str, x: VarId) -> Res<VarId> {
    let gate = projection(b, cfg.dtype, &format!("{p}.gate"), x, (cfg.hidden, cfg.ffn))?;
    let up = projection(b, cfg.dtype, &format!("{p}.up"), x, (cfg.hidden, cfg.ffn))?;
    let act = b.op1(OpType::Silu, &[&[gate]], &[], &format!("{p}.silu"))?;
    let prod = b.op1(
        OpType::ElementwiseMul,
        &[&[act], &[up]],
        &[],
        &format!("{p}.swiglu"),
    )?;
    projection(
        b,
        cfg.dtype,
        &format!("{p}.down"),
        prod,
        (cfg.ffn, cfg.hidden),
    )
}

/// The rotary embedding of `[batch, seq, heads, head_dim]` (Llama's `rotate_half`, which
/// Paddle calls `use_neox_rotary_style=False`).
fn rotary(b: &mut Builder, shared: &Shared, p: &str, x: VarId) -> Res<VarId> {
    Ok(b.op1(
        OpType::FusedRotaryPositionEmbedding,
        &[&[x], &[shared.sin], &[shared.cos]],
        &[("use_neox_rotary_style", Attr::Bool(false))],
        &format!("{p}.rope"),
    )?)
}

/// Causal grouped-query attention: `kv_heads` key/value heads, each shared by
/// `heads / kv_heads` query heads (repeated in place, as PaddleFormers' `repeat_kv`).
fn attention(b: &mut Builder, cfg: &ModelConfig, shared: &Shared, p: &str, x: VarId) -> Res<VarId> {
    let head_dim = cfg.hidden / cfg.heads;
    let kv_width = cfg.kv_heads * head_dim;
    let q = projection(b, cfg.dtype, &format!("{p}.q"), x, (cfg.hidden, cfg.hidden))?;
    let k = projection(b, cfg.dtype, &format!("{p}.k"), x, (cfg.hidden, kv_width))?;
    let v = projection(b, cfg.dtype, &format!("{p}.v"), x, (cfg.hidden, kv_width))?;
    let q = to_heads(b, &format!("{p}.q"), q, cfg.heads, head_dim)?;
    let k = to_heads(b, &format!("{p}.k"), k, cfg.kv_heads, head_dim)?;
    let v = to_heads(b, &format!("{p}.v"), v, cfg.kv_heads, head_dim)?;
    let q = rotary(b, shared, &format!("{p}.q"), q)?;
    let mut k = rotary(b, shared, &format!("{p}.k"), k)?;
    let mut v = v;
    let group = cfg.heads / cfg.kv_heads;
    if group > 1 {
        let repeat = |b: &mut Builder, name: &str, t: VarId| -> Res<VarId> {
            Ok(b.op1(
                OpType::RepeatInterleave,
                &[&[t]],
                &[("repeats", Attr::Int(group as i64)), ("axis", Attr::Int(2))],
                &format!("{p}.{name}.repeated"),
            )?)
        };
        k = repeat(b, "k", k)?;
        v = repeat(b, "v", v)?;
    }
    let q = swap_seq_heads(b, &format!("{p}.q.t"), q)?;
    let k = swap_seq_heads(b, &format!("{p}.k.t"), k)?;
    let v = swap_seq_heads(b, &format!("{p}.v.t"), v)?;
    let merged = causal_core(b, p, (q, k, v), head_dim, cfg.hidden)?;
    projection(
        b,
        cfg.dtype,
        &format!("{p}.o"),
        merged,
        (cfg.hidden, cfg.hidden),
    )
}

/// rms_norm over the last dim with parameter `{p}.scale`.
fn rms_norm(b: &mut Builder, cfg: &ModelConfig, p: &str, x: VarId) -> Res<VarId> {
    let scale = b.param(&format!("{p}.scale"), cfg.dtype, &[cfg.hidden])?;
    let outs = b.op(
        OpType::RmsNorm,
        &[&[x], &[scale]],
        &[
            ("begin_norm_axis", Attr::Int(2)),
            ("epsilon", Attr::Float(1e-6)),
        ],
        &[&format!("{p}.out"), &format!("{p}.inv_var")],
    )?;
    Ok(outs[0])
}
