//! `flash_attn` and ring attention's blocks, forward and grad: a block of queries attends a
//! block of keys (`kernels::attention`) at their original positions. The serial op is one
//! block holding every key (offsets 0, the whole sequence); a ring step's block has its
//! offsets into the stored sequence in `q_offset` and `kv_offset`, and merges into the
//! running result (or adds to the running gradients) it is given.

use super::Rank;
use crate::exec::kernels::attention::{attend, attend_grad, shape_error, Block, Row};
use crate::exec::op_error::OpError;
use crate::exec::tensor::Tensor;
use crate::ir::ops::attention::positions;
use crate::ir::Op;

type Res = Result<(), OpError>;

fn refused(blk: &Block) -> OpError {
    OpError::Attention(shape_error(blk).unwrap_or_else(|| "attention operands do not fit".into()))
}

/// The original positions of the queries and keys of `op`'s block: `seq` stored positions
/// (the queries' count without the attribute) in `zigzag` order, from the offsets (0
/// without them).
fn block_positions(op: &Op, q: &Tensor, k: &Tensor) -> (Vec<usize>, Vec<usize>) {
    let seq = op.attr_int("seq", seq_len(q) as i64).max(0) as usize;
    let at = |name: &str| op.attr_int(name, 0).max(0) as usize;
    let z = op.attr_int("zigzag", 0).max(0) as usize;
    (
        positions(at("q_offset"), seq_len(q), seq, z),
        positions(at("kv_offset"), seq_len(k), seq, z),
    )
}

impl Rank<'_> {
    /// `f` of the op's block (Q, K, V at their positions); a block the kernel refuses is
    /// an error naming its shapes.
    fn with_block<R>(&self, op: &Op, f: impl FnOnce(&Block) -> Option<R>) -> Result<R, OpError> {
        let (q, k, v) = (
            self.slot(op, "Q")?,
            self.slot(op, "K")?,
            self.slot(op, "V")?,
        );
        let (qp, kp) = block_positions(op, q, k);
        let blk = Block {
            q,
            k,
            v,
            q_pos: &qp,
            k_pos: &kp,
            causal: op.attr_bool("causal", true),
        };
        f(&blk).ok_or_else(|| refused(&blk))
    }

    /// `flash_attn`, or a ring step's block merged into the running `Acc`, `AccLse`.
    pub(super) fn attention(&mut self, op: &Op) -> Res {
        let acc = match (self.opt_slot(op, "Acc"), self.opt_slot(op, "AccLse")) {
            (Some(o), Some(l)) => Some((o, l)),
            _ => None,
        };
        let (out, lse) = self.with_block(op, |blk| attend(blk, acc))?;
        self.set(op, "Out", out);
        self.set(op, "SoftmaxLse", lse);
        Ok(())
    }

    /// The grad of `flash_attn`, or a ring step's block gradient added to the running
    /// `DQ`, `DK`, `DV` it carries.
    pub(super) fn attention_grad(&mut self, op: &Op) -> Res {
        let row = Row {
            out: self.slot(op, "Out")?,
            lse: self.slot(op, "SoftmaxLse")?,
            dout: self.slot(op, "Out@GRAD")?,
        };
        let grads = self.with_block(op, |blk| attend_grad(blk, &row))?;
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

/// Dim 1 of a `[b, s, h, d]` operand (0 for another rank; the kernel refuses it).
fn seq_len(t: &Tensor) -> usize {
    t.shape.get(1).copied().unwrap_or(0)
}
