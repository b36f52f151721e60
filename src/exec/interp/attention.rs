//! `flash_attn` and its grad: one block holding every key (`kernels::attention`), the
//! positions those of the op's stored order (`zigzag`).

use super::Rank;
use crate::exec::kernels::attention::{attend, attend_grad, shape_error, Block, Row};
use crate::exec::op_error::OpError;
use crate::exec::tensor::Tensor;
use crate::ir::ops::attention::positions;
use crate::ir::Op;

type Res = Result<(), OpError>;

/// The original positions of `len` stored rows from `offset` of the op's sequence.
fn pos(op: &Op, offset: usize, len: usize, seq: usize) -> Vec<usize> {
    positions(offset, len, seq, op.attr_int("zigzag", 0).max(0) as usize)
}

fn refused(blk: &Block) -> OpError {
    OpError::Attention(shape_error(blk).unwrap_or_else(|| "attention operands do not fit".into()))
}

impl Rank<'_> {
    pub(super) fn flash_attn(&mut self, op: &Op) -> Res {
        let (q, k, v) = (
            self.slot(op, "Q")?,
            self.slot(op, "K")?,
            self.slot(op, "V")?,
        );
        let (sq, sk) = (seq_len(q), seq_len(k));
        let (qp, kp) = (pos(op, 0, sq, sq), pos(op, 0, sk, sk));
        let blk = Block {
            q,
            k,
            v,
            q_pos: &qp,
            k_pos: &kp,
            causal: op.attr_bool("causal", true),
        };
        let (out, lse) = attend(&blk, None).ok_or_else(|| refused(&blk))?;
        self.set(op, "Out", out);
        self.set(op, "SoftmaxLse", lse);
        Ok(())
    }

    pub(super) fn flash_attn_grad(&mut self, op: &Op) -> Res {
        let (q, k, v) = (
            self.slot(op, "Q")?,
            self.slot(op, "K")?,
            self.slot(op, "V")?,
        );
        let (sq, sk) = (seq_len(q), seq_len(k));
        let (qp, kp) = (pos(op, 0, sq, sq), pos(op, 0, sk, sk));
        let blk = Block {
            q,
            k,
            v,
            q_pos: &qp,
            k_pos: &kp,
            causal: op.attr_bool("causal", true),
        };
        let row = Row {
            out: self.slot(op, "Out")?,
            lse: self.slot(op, "SoftmaxLse")?,
            dout: self.slot(op, "Out@GRAD")?,
        };
        let (dq, dk, dv) = attend_grad(&blk, &row).ok_or_else(|| refused(&blk))?;
        for (slot, t) in [("Q@GRAD", dq), ("K@GRAD", dk), ("V@GRAD", dv)] {
            if !op.output(slot).is_empty() {
                self.set(op, slot, t);
            }
        }
        Ok(())
    }
}

/// Dim 1 of a `[b, s, h, d]` operand (0 for another rank; the kernel refuses it).
pub(super) fn seq_len(t: &Tensor) -> usize {
    t.shape.get(1).copied().unwrap_or(0)
}

/// A ring step's block: the rank's queries at `q_offset`, the visiting keys at
/// `kv_offset`, of the op's whole stored sequence.
fn ring_positions(op: &Op, q: &Tensor, k: &Tensor) -> (Vec<usize>, Vec<usize>) {
    let seq = op.attr_int("seq", 0).max(0) as usize;
    let at = |name: &str| op.attr_int(name, 0).max(0) as usize;
    (
        pos(op, at("q_offset"), seq_len(q), seq),
        pos(op, at("kv_offset"), seq_len(k), seq),
    )
}

impl Rank<'_> {
    pub(super) fn ring_attn_block(&mut self, op: &Op) -> Res {
        let (q, k, v) = (
            self.slot(op, "Q")?,
            self.slot(op, "K")?,
            self.slot(op, "V")?,
        );
        let (qp, kp) = ring_positions(op, q, k);
        let blk = Block {
            q,
            k,
            v,
            q_pos: &qp,
            k_pos: &kp,
            causal: op.attr_bool("causal", true),
        };
        let acc = match (self.opt_slot(op, "Acc"), self.opt_slot(op, "AccLse")) {
            (Some(o), Some(l)) => Some((o, l)),
            _ => None,
        };
        let (out, lse) = attend(&blk, acc).ok_or_else(|| refused(&blk))?;
        self.set(op, "Out", out);
        self.set(op, "SoftmaxLse", lse);
        Ok(())
    }

    pub(super) fn ring_attn_block_grad(&mut self, op: &Op) -> Res {
        let (q, k, v) = (
            self.slot(op, "Q")?,
            self.slot(op, "K")?,
            self.slot(op, "V")?,
        );
        let (qp, kp) = ring_positions(op, q, k);
        let blk = Block {
            q,
            k,
            v,
            q_pos: &qp,
            k_pos: &kp,
            causal: op.attr_bool("causal", true),
        };
        let row = Row {
            out: self.slot(op, "Out")?,
            lse: self.slot(op, "SoftmaxLse")?,
            dout: self.slot(op, "Out@GRAD")?,
        };
        let grads = attend_grad(&blk, &row).ok_or_else(|| refused(&blk))?;
        let mut outs = Vec::with_capacity(3);
        for (acc, t) in ["DQ", "DK", "DV"]
            .into_iter()
            .zip(<[Tensor; 3]>::from(grads))
        {
            outs.push(match self.opt_slot(op, acc) {
                Some(a) => a
                    .zip_map(&t, |x, y| x + y)
                    .ok_or_else(|| OpError::Attention(format!("{acc} does not match its block")))?,
                None => t,
            });
        }
        for (slot, t) in ["Q@GRAD", "K@GRAD", "V@GRAD"].into_iter().zip(outs) {
            self.set(op, slot, t);
        }
        Ok(())
    }
}
