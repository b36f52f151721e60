//! A Mixture-of-Experts MLP for the Llama family (Mixtral's): a router, top-k routing with
//! a fixed capacity (`moe_dispatch`, docs/moe.md), the experts' SwiGLU as batched matmuls
//! over stacked weights `[experts, in, out]` (Megatron's grouped GEMM), and `moe_combine`.
//!
//! Each sequence is a routing group (`group_size = seq`), so any data-parallel split of
//! the batch keeps the groups whole and a rank routes its own tokens, as GShard and
//! Megatron do; the capacity is `⌈seq · k · CAPACITY_FACTOR / experts⌉` slots per expert
//! and sequence. Mixtral trains dropless and renormalises its top-2 gates; the fixed
//! capacity and the raw gates are GShard's, which the routing ops implement (the shapes,
//! FLOPs and communication are Mixtral's).

use super::{ModelConfig, ModelError};
use crate::ir::{Attr, Builder, OpType, VarId};

type Res<T> = Result<T, ModelError>;

/// GShard's capacity factor for training (Lepikhin et al. 2020, and Megatron-Core's
/// `--moe-expert-capacity-factor` examples): 25% slack over a perfectly even routing.
pub const CAPACITY_FACTOR: f64 = 1.25;

/// The slots per expert and routing group of `group` tokens.
pub fn capacity(group: usize, k: usize, experts: usize) -> usize {
    let even = (group * k) as f64 / experts.max(1) as f64;
    ((even * CAPACITY_FACTOR).ceil() as usize).clamp(1, group)
}

/// The MoE MLP of `x [batch, seq, hidden]`, named under `p` (`{p}.router.w`, the experts'
/// `{p}.experts.gate.w`, `.up.w`, `.down.w`).
pub fn moe_swiglu(b: &mut Builder, cfg: &ModelConfig, p: &str, x: VarId) -> Res<VarId> {
    let (e, h, f) = (cfg.experts, cfg.hidden, cfg.ffn);
    let tokens = (cfg.batch * cfg.seq) as i64;
    let flat = b.op1(
        OpType::Reshape2,
        vec![vec![x]],
        &[("shape", Attr::Ints(vec![tokens, h as i64]))],
        &format!("{p}.tokens"),
    )?;
    let router = b.param(&format!("{p}.router.w"), cfg.dtype, &[h, e])?;
    let logits = b.op1(
        OpType::MatmulV2,
        vec![vec![flat], vec![router]],
        &[],
        &format!("{p}.router.mm"),
    )?;
    let gates = b.op1(
        OpType::Softmax,
        vec![vec![logits]],
        &[("axis", Attr::Int(-1))],
        &format!("{p}.gates"),
    )?;
    let cap = capacity(cfg.seq, cfg.top_k, e) as i64;
    let routing = [
        ("capacity", Attr::Int(cap)),
        ("group_size", Attr::Int(cfg.seq as i64)),
    ];
    let mut dispatch_attrs = vec![("k", Attr::Int(cfg.top_k as i64))];
    dispatch_attrs.extend(routing.iter().cloned());
    let names = [
        format!("{p}.routed"),
        format!("{p}.weights"),
        format!("{p}.index"),
    ];
    let outs = b.op(
        OpType::MoeDispatch,
        vec![vec![flat], vec![gates]],
        &dispatch_attrs,
        &names.iter().map(String::as_str).collect::<Vec<_>>(),
    )?;
    let [routed, weights, index] = [outs[0], outs[1], outs[2]];
    let expert = |b: &mut Builder, name: &str, x: VarId, (i, o): (usize, usize)| -> Res<VarId> {
        let w = b.param(&format!("{p}.experts.{name}.w"), cfg.dtype, &[e, i, o])?;
        let mm = format!("{p}.experts.{name}.mm");
        Ok(b.op1(OpType::MatmulV2, vec![vec![x], vec![w]], &[], &mm)?)
    };
    let gate = expert(b, "gate", routed, (h, f))?;
    let up = expert(b, "up", routed, (h, f))?;
    let act = b.op1(
        OpType::Silu,
        vec![vec![gate]],
        &[],
        &format!("{p}.experts.silu"),
    )?;
    let prod = b.op1(
        OpType::ElementwiseMul,
        vec![vec![act], vec![up]],
        &[],
        &format!("{p}.experts.swiglu"),
    )?;
    let down = expert(b, "down", prod, (f, h))?;
    let combined = b.op1(
        OpType::MoeCombine,
        vec![vec![down], vec![weights], vec![index]],
        &routing,
        &format!("{p}.combined"),
    )?;
    let shape = vec![cfg.batch as i64, cfg.seq as i64, h as i64];
    Ok(b.op1(
        OpType::Reshape2,
        vec![vec![combined]],
        &[("shape", Attr::Ints(shape))],
        &format!("{p}.out"),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_is_the_even_share_with_a_quarter_slack() {
        // Mixtral at 4,096 tokens per sequence: 4096 · 2 / 8 = 1024, × 1.25 = 1280.
        assert_eq!(capacity(4096, 2, 8), 1280);
        assert_eq!(capacity(16, 2, 8), 5);
        // Never more slots than tokens, never none.
        assert_eq!(capacity(2, 2, 1), 2);
        assert_eq!(capacity(1, 1, 64), 1);
    }
}
