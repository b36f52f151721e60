//! `flash_attn`: causal scaled-dot-product attention in one op, as Paddle's `flash_attn`
//! (`[batch, seq, heads, head_dim]` operands, scale `1/√head_dim`, the log-sum-exp of each
//! query row kept for the backward pass). Key and value heads may be fewer than the query's
//! (grouped-query attention: query head `h` reads key head `h·kv_heads/heads`).
//!
//! Context parallelism plans through it. Attribute `cp_mode` says how a split sequence is
//! attended: `ulysses` moves the split to the heads (an all-to-all before and after),
//! `ring` keeps it and the partitioner lowers the op to a ring of blocks (K and V travel
//! around the context-parallel group); empty is Paddle's rule, the sequence gathered.
//! Attribute `zigzag` (0 for the natural order) says the sequence is stored as `zigzag`
//! chunks in zig-zag order, chunk `i` holding original chunk `i/2` when `i` is even and
//! `zigzag − 1 − (i−1)/2` when odd (rank `r` of a ring of `zigzag/2` holds chunks `r` and
//! `zigzag − 1 − r`, which balances the causal mask); the causal mask follows the original
//! positions, so only the order of storage changes, as Megatron's data loader permutes the
//! tokens for context parallelism.
//!
//! Facets outside the IR: the rule `spmd::attention`, the kernels
//! `exec::kernels::attention`, the bound `exec::bound::attention`, the ring lowering
//! `passes::partition::ring`.

use super::{Family, Flops, Numel, OpDef};
use crate::ir::attr::AttrKind::{Bool, Int, Str};
use crate::ir::infer::forward as infer;
use crate::ir::schema::{attr, one};

pub const FLASH_ATTN: OpDef = OpDef {
    name: "flash_attn",
    grad_name: "flash_attn_grad",
    pir_name: "pd_op.flash_attn",
    family: Family::Attention,
    inputs: &[one("Q"), one("K"), one("V")],
    outputs: &[one("Out"), one("SoftmaxLse")],
    attrs: &[
        attr("causal", Bool),
        attr("cp_mode", Str),
        attr("zigzag", Int),
    ],
    infer: infer::flash_attn,
    saves: &["Out", "SoftmaxLse"],
    differentiates: &["Q", "K", "V"],
    shape_only: &[],
    // Forward: q·kᵀ and p·v, 2 FLOPs per multiply-add each. Backward: the scores again,
    // dv = pᵀ·do, dp = do·vᵀ, dq = ds·k and dk = dsᵀ·q (FlashAttention-2's count).
    flops: Flops {
        forward: &[(4.0, Numel::AttentionTerms)],
        grad: &[(10.0, Numel::AttentionTerms)],
    },
};

/// The original position ranges `(start, len)` of the stored rows `[offset, offset + len)`
/// of a sequence of `seq` stored in `zigzag` chunks (0 or 1: the natural order).
pub fn original_ranges(
    offset: usize,
    len: usize,
    seq: usize,
    zigzag: usize,
) -> Vec<(usize, usize)> {
    if zigzag <= 1 || !seq.is_multiple_of(zigzag) {
        return vec![(offset, len)];
    }
    let c = seq / zigzag;
    let mut out: Vec<(usize, usize)> = Vec::new();
    let (mut t, end) = (offset, offset + len);
    while t < end {
        let i = t / c;
        let stop = ((i + 1) * c).min(end);
        let orig = if i.is_multiple_of(2) {
            i / 2
        } else {
            zigzag - 1 - (i - 1) / 2
        };
        let start = orig * c + (t - i * c);
        match out.last_mut() {
            Some((s, l)) if *s + *l == start => *l += stop - t,
            _ => out.push((start, stop - t)),
        }
        t = stop;
    }
    out
}

/// The original position of every stored row of `[offset, offset + len)`.
pub fn positions(offset: usize, len: usize, seq: usize, zigzag: usize) -> Vec<usize> {
    original_ranges(offset, len, seq, zigzag)
        .into_iter()
        .flat_map(|(s, l)| s..s + l)
        .collect()
}

/// How many (query, key) pairs a causal mask keeps between queries at the original
/// positions `q` and keys at `k` (key position ≤ query position), in closed form per pair
/// of ranges, so pricing a 128K context costs no loop over it.
pub fn causal_pairs(q: &[(usize, usize)], k: &[(usize, usize)]) -> u64 {
    let mut n = 0u64;
    for &(qs, ql) in q {
        for &(ks, kl) in k {
            // Σ over queries p in [qs, qs+ql) of |{j in [ks, ks+kl) : j ≤ p}|.
            for_each_clamped(qs, ql, ks, kl, &mut n);
        }
    }
    n
}

/// Adds to `n` the pairs of one query range and one key range.
fn for_each_clamped(qs: usize, ql: usize, ks: usize, kl: usize, n: &mut u64) {
    let (qs, ql, ks, kl) = (qs as u64, ql as u64, ks as u64, kl as u64);
    let q_end = qs + ql;
    // Queries before ks see nothing; from ks to ks+kl−1 they see p−ks+1; after, all kl.
    let lo = qs.max(ks);
    let hi = q_end.min(ks + kl);
    if hi > lo {
        // Σ_{p=lo}^{hi−1} (p − ks + 1)
        let a = lo - ks + 1;
        let b = hi - ks;
        *n += (a + b) * (b - a + 1) / 2;
    }
    let full_from = qs.max(ks + kl);
    if q_end > full_from {
        *n += (q_end - full_from) * kl;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zigzag_ranks_hold_chunks_r_and_mirror() {
        // 16 positions, 2·cp = 4 chunks of 4: rank 0 stores [0, 8) = chunks 0 and 3.
        assert_eq!(original_ranges(0, 8, 16, 4), vec![(0, 4), (12, 4)]);
        assert_eq!(original_ranges(8, 8, 16, 4), vec![(4, 8)]);
        assert_eq!(original_ranges(3, 4, 16, 0), vec![(3, 4)]);
        let all = positions(0, 16, 16, 4);
        let mut sorted = all.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..16).collect::<Vec<_>>());
    }

    #[test]
    fn causal_pairs_match_a_count() {
        for (seq, z) in [(16, 0), (16, 4), (24, 8), (12, 2)] {
            for (qo, ql, ko, kl) in [
                (0, seq, 0, seq),
                (0, seq / 2, seq / 2, seq / 2),
                (4, 4, 0, 8),
            ] {
                let q = positions(qo, ql, seq, z);
                let k = positions(ko, kl, seq, z);
                let brute = q
                    .iter()
                    .map(|p| k.iter().filter(|j| *j <= p).count() as u64)
                    .sum::<u64>();
                let got = causal_pairs(
                    &original_ranges(qo, ql, seq, z),
                    &original_ranges(ko, kl, seq, z),
                );
                assert_eq!(got, brute, "seq {seq} zigzag {z} q {qo}+{ql} k {ko}+{kl}");
            }
        }
        // The whole causal square: s(s+1)/2.
        assert_eq!(causal_pairs(&[(0, 100)], &[(0, 100)]), 5050);
    }
}
