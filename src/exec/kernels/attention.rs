//! Attention's kernels: one block of keys attended by a block of queries, merged into a
//! running result by the online softmax (FlashAttention's rescaling), and the gradient of a
//! block given the whole row's log-sum-exp. The serial `flash_attn` is one block holding
//! every key; ring attention's rank programs run one block per ring step. Positions are the
//! original ones (`ir::ops::attention::positions`), so a zig-zag stored sequence is masked
//! by where its tokens really are. Computed in f64, stored in the inputs' precision.
//!
//! Layouts: q and out `[b, s_q, h, d]`, k and v `[b, s_k, h_kv, d]`, lse `[b, h, s_q]`.

use crate::exec::tensor::Tensor;

/// The operands of one block: queries and keys with their original positions.
pub struct Block<'a> {
    pub q: &'a Tensor,
    pub k: &'a Tensor,
    pub v: &'a Tensor,
    pub q_pos: &'a [usize],
    pub k_pos: &'a [usize],
    pub causal: bool,
}

/// Sizes `(b, s_q, h, d, s_k, h_kv)`, or `None` when the shapes do not fit together.
fn dims(blk: &Block) -> Option<(usize, usize, usize, usize, usize, usize)> {
    let [b, sq, h, d] = blk.q.shape[..] else {
        return None;
    };
    let [kb, sk, hk, kd] = blk.k.shape[..] else {
        return None;
    };
    let ok = kb == b
        && kd == d
        && hk > 0
        && h % hk == 0
        && blk.v.shape == blk.k.shape
        && blk.q_pos.len() == sq
        && blk.k_pos.len() == sk;
    ok.then_some((b, sq, h, d, sk, hk))
}

/// Why a block's shapes are refused (the verifier keeps planned programs from it).
pub fn shape_error(blk: &Block) -> Option<String> {
    dims(blk).is_none().then(|| {
        format!(
            "attention operands do not fit: q {:?}, k {:?}, v {:?}, {} query and {} key positions",
            blk.q.shape,
            blk.k.shape,
            blk.v.shape,
            blk.q_pos.len(),
            blk.k_pos.len()
        )
    })
}

/// The block attended and merged into `acc` (`(out, lse)` so far; `None` for the first
/// block). A row that sees no key of this block keeps its running result (the first block
/// gives it out 0 and lse −∞).
pub fn attend(blk: &Block, acc: Option<(&Tensor, &Tensor)>) -> Option<(Tensor, Tensor)> {
    let (b, sq, h, d, sk, hk) = dims(blk)?;
    let (q, k, v) = (blk.q.to_f64(), blk.k.to_f64(), blk.v.to_f64());
    let scale = 1.0 / (d as f64).sqrt();
    let (mut out, mut lse) = match acc {
        Some((o, l)) if o.shape == blk.q.shape && l.shape == [b, h, sq] => (o.to_f64(), l.to_f64()),
        Some(_) => return None,
        None => (
            vec![0.0; b * sq * h * d],
            vec![f64::NEG_INFINITY; b * h * sq],
        ),
    };
    let group = h / hk;
    let mut s = vec![0.0; sk];
    for bi in 0..b {
        for hi in 0..h {
            let g = hi / group;
            for i in 0..sq {
                let qo = ((bi * sq + i) * h + hi) * d;
                let mut m = f64::NEG_INFINITY;
                for (j, sj) in s.iter_mut().enumerate() {
                    *sj = if blk.causal && blk.k_pos[j] > blk.q_pos[i] {
                        f64::NEG_INFINITY
                    } else {
                        let ko = ((bi * sk + j) * hk + g) * d;
                        scale * (0..d).map(|c| q[qo + c] * k[ko + c]).sum::<f64>()
                    };
                    m = m.max(*sj);
                }
                if m == f64::NEG_INFINITY {
                    continue;
                }
                let mut sum = 0.0;
                let mut o = vec![0.0; d];
                for (j, &sj) in s.iter().enumerate() {
                    let p = (sj - m).exp();
                    sum += p;
                    let vo = ((bi * sk + j) * hk + g) * d;
                    for (c, oc) in o.iter_mut().enumerate() {
                        *oc += p * v[vo + c];
                    }
                }
                let l_blk = m + sum.ln();
                let li = (bi * h + hi) * sq + i;
                let l_old = lse[li];
                let l_new = if l_old == f64::NEG_INFINITY {
                    l_blk
                } else {
                    let top = l_old.max(l_blk);
                    top + ((l_old - top).exp() + (l_blk - top).exp()).ln()
                };
                let (w_old, w_blk) = if l_old == f64::NEG_INFINITY {
                    (0.0, 1.0)
                } else {
                    ((l_old - l_new).exp(), (l_blk - l_new).exp())
                };
                for c in 0..d {
                    out[qo + c] = w_old * out[qo + c] + w_blk * o[c] / sum;
                }
                lse[li] = l_new;
            }
        }
    }
    let dt = blk.q.dtype();
    Some((
        Tensor::float(dt, blk.q.shape.clone(), out),
        Tensor::float(dt, vec![b, h, sq], lse),
    ))
}

/// The whole row's result a block's gradient needs: the output, its log-sum-exp and the
/// output's gradient.
pub struct Row<'a> {
    pub out: &'a Tensor,
    pub lse: &'a Tensor,
    pub dout: &'a Tensor,
}

/// The block's contributions `(dq, dk, dv)`: with `p = exp(q·kᵀ/√d − lse)` (the whole
/// row's probabilities restricted to the block) and `D = Σ dout·out` per row,
/// `dv = pᵀ·dout`, `ds = p ∘ (dout·vᵀ − D)`, `dq = ds·k/√d`, `dk = dsᵀ·q/√d`.
pub fn attend_grad(blk: &Block, row: &Row) -> Option<(Tensor, Tensor, Tensor)> {
    let (b, sq, h, d, sk, hk) = dims(blk)?;
    if row.out.shape != blk.q.shape || row.dout.shape != blk.q.shape || row.lse.shape != [b, h, sq]
    {
        return None;
    }
    let (q, k, v) = (blk.q.to_f64(), blk.k.to_f64(), blk.v.to_f64());
    let (o, l, dout) = (row.out.to_f64(), row.lse.to_f64(), row.dout.to_f64());
    let scale = 1.0 / (d as f64).sqrt();
    let (mut dq, mut dk, mut dv) = (vec![0.0; q.len()], vec![0.0; k.len()], vec![0.0; v.len()]);
    let group = h / hk;
    for bi in 0..b {
        for hi in 0..h {
            let g = hi / group;
            for i in 0..sq {
                let qo = ((bi * sq + i) * h + hi) * d;
                let li = l[(bi * h + hi) * sq + i];
                let dd: f64 = (0..d).map(|c| dout[qo + c] * o[qo + c]).sum();
                for j in 0..sk {
                    if blk.causal && blk.k_pos[j] > blk.q_pos[i] {
                        continue;
                    }
                    let ko = ((bi * sk + j) * hk + g) * d;
                    let s = scale * (0..d).map(|c| q[qo + c] * k[ko + c]).sum::<f64>();
                    let p = (s - li).exp();
                    let dp: f64 = (0..d).map(|c| dout[qo + c] * v[ko + c]).sum();
                    let ds = p * (dp - dd) * scale;
                    for c in 0..d {
                        dv[ko + c] += p * dout[qo + c];
                        dq[qo + c] += ds * k[ko + c];
                        dk[ko + c] += ds * q[qo + c];
                    }
                }
            }
        }
    }
    let dt = blk.q.dtype();
    Some((
        Tensor::float(dt, blk.q.shape.clone(), dq),
        Tensor::float(dt, blk.k.shape.clone(), dk),
        Tensor::float(dt, blk.v.shape.clone(), dv),
    ))
}
