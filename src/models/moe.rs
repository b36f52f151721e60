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
    let shape = |dims: &[usize]| Attr::Ints(dims.iter().map(|&d| d as i64).collect());
    let flat = op(
        b,
        OpType::Reshape2,
        &[&[x]],
        &[("shape", shape(&[cfg.batch * cfg.seq, h]))],
        p,
        "tokens",
    )?;
    let gates = router(b, cfg, p, flat)?;
    let routing = [
        ("k", Attr::Int(cfg.top_k as i64)),
        (
            "capacity",
            Attr::Int(capacity(cfg.seq, cfg.top_k, e) as i64),
        ),
        ("group_size", Attr::Int(cfg.seq as i64)),
    ];
    let names = ["routed", "weights", "index"].map(|n| format!("{p}.{n}"));
    let outs = b.op(
        OpType::MoeDispatch,
        &[&[flat], &[gates]],
        &routing,
        &names.each_ref().map(String::as_str),
    )?;
    let expert = |b: &mut Builder, name: &str, x: VarId, (i, o): (usize, usize)| {
        let w = b.param(&format!("{p}.experts.{name}.w"), cfg.dtype, &[e, i, o])?;
        op(
            b,
            OpType::MatmulV2,
            &[&[x], &[w]],
            &[],
            p,
            &format!("experts.{name}.mm"),
        )
    };
    let gate = expert(b, "gate", outs[0], (h, f))?;
    let up = expert(b, "up", outs[0], (h, f))?;
    let act = op(b, OpType::Silu, &[&[gate]], &[], p, "experts.silu")?;
    let prod = op(
        b,
        OpType::ElementwiseMul,
        &[&[act], &[up]],
        &[],
        p,
        "experts.swiglu",
    )?;
    let down = expert(b, "down", prod, (f, h))?;
    let combined = op(
        b,
        OpType::MoeCombine,
        &[&[down], &[outs[1]], &[outs[2]]],
        &routing[1..],
        p,
        "combined",
    )?;
    op(
        b,
        OpType::Reshape2,
        &[&[combined]],
        &[("shape", shape(&[cfg.batch, cfg.seq, h]))],
        p,
        "out",
    )
}

/// The router's gates `softmax(tokens · {p}.router.w)`, `[tokens, experts]`.
fn router(b: &mut Builder, cfg: &ModelConfig, p: &str, tokens: VarId) -> Res<VarId> {
    let w = b.param(
        &format!("{p}.router.w"),
        cfg.dtype,
        &[cfg.hidden, cfg.experts],
    )?;
    let logits = op(b, OpType::MatmulV2, &[&[tokens], &[w]], &[], p, "router.mm")?;
    let axis = [("axis", Attr::Int(-1))];
    op(b, OpType::Softmax, &[&[logits]], &axis, p, "gates")
}

/// One op writing `{p}.{name}` (not inlined: the page's module carries it once).
#[inline(never)]
fn op(
    b: &mut Builder,
    ty: OpType,
    inputs: &[&[VarId]],
    attrs: &[(&str, Attr)],
    p: &str,
    name: &str,
) -> Res<VarId> {
    Ok(b.op1(ty, inputs, attrs, &format!("{p}.{name}"))?)
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
