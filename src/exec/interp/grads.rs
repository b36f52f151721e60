//! Grad ops: one method per family, each computing the input gradients from the forward
//! values it saved and the output gradients.

use super::{perm, Rank};
use crate::exec::kernels::layout::{concat, inverse, lookup_grad, split, transpose};
use crate::exec::kernels::matmul::matmul_grad;
use crate::exec::kernels::normalize::{
    layer_norm_grad, reduce_grad, softmax_ce_grad, softmax_grad,
};
use crate::exec::kernels::pointwise::{binary_grad, mul_same, unary_grad, Binary, Unary};
use crate::exec::kernels::vocab_ce;
use crate::exec::op_error::OpError;
use crate::exec::tensor::Tensor;
use crate::ir::infer::{axis, reduce_axes, split_sections};
use crate::ir::{Op, TensorType};

type Res = Result<(), crate::exec::op_error::OpError>;

impl Rank<'_> {
    pub(super) fn matmul_grad(&mut self, op: &Op) -> Res {
        let (dx, dy) = matmul_grad(
            self.slot(op, "X")?,
            self.slot(op, "Y")?,
            self.slot(op, "Out@GRAD")?,
            op.attr_bool("trans_x", false),
            op.attr_bool("trans_y", false),
        )?;
        self.set(op, "X@GRAD", dx);
        self.set(op, "Y@GRAD", dy);
        Ok(())
    }

    pub(super) fn binary_grad(&mut self, op: &Op, kind: Binary) -> Res {
        let (dx, dy) = binary_grad(
            kind,
            self.slot(op, "X")?,
            self.slot(op, "Y")?,
            self.slot(op, "Out@GRAD")?,
            op.attr_int("axis", -1),
        )?;
        self.set(op, "X@GRAD", dx);
        self.set(op, "Y@GRAD", dy);
        Ok(())
    }

    pub(super) fn unary_grad(&mut self, op: &Op, kind: Unary) -> Res {
        let g = unary_grad(kind, self.slot(op, "X")?, self.slot(op, "Out@GRAD")?)?;
        self.set(op, "X@GRAD", g);
        Ok(())
    }

    pub(super) fn cast_grad(&mut self, op: &Op) -> Res {
        let (t, d) = (self.slot(op, "X")?, self.slot(op, "Out@GRAD")?);
        let g = Tensor::float(t.dtype(), t.shape.clone(), d.to_f64());
        self.set(op, "X@GRAD", g);
        Ok(())
    }

    /// assign and reshape: the output gradient in the input's shape.
    pub(super) fn reshaped_grad(&mut self, op: &Op) -> Res {
        let (t, d) = (self.slot(op, "X")?, self.slot(op, "Out@GRAD")?);
        let g = d.clone().reshaped(t.shape.clone());
        self.set(op, "X@GRAD", g);
        Ok(())
    }

    pub(super) fn dropout_grad(&mut self, op: &Op) -> Res {
        let g = mul_same(self.slot(op, "Out@GRAD")?, self.slot(op, "Mask")?);
        self.set(op, "X@GRAD", g);
        Ok(())
    }

    /// The plain softmax's grad over `axis`, or the causal one's over the last dim.
    pub(super) fn softmax_grad(&mut self, op: &Op, causal: bool) -> Res {
        let y = self.slot(op, "Out")?;
        let a = if causal {
            y.shape.len().saturating_sub(1)
        } else {
            axis(op.attr_int("axis", -1), y.shape.len(), "axis").map_err(OpError::Attr)?
        };
        let g = softmax_grad(y, self.slot(op, "Out@GRAD")?, a);
        self.set(op, "X@GRAD", g);
        Ok(())
    }

    pub(super) fn layer_norm_grad(&mut self, op: &Op) -> Res {
        let t = self.slot(op, "X")?;
        let begin = op.attr_int("begin_norm_axis", 1) as usize;
        let (dx, ds, db) = layer_norm_grad(
            t,
            self.opt_slot(op, "Scale"),
            self.slot(op, "Mean")?,
            self.slot(op, "Variance")?,
            self.slot(op, "Y@GRAD")?,
            begin,
            op.attr_float("epsilon", 1e-5),
        );
        let width = vec![ds.len()];
        let dtype = t.dtype();
        self.set(op, "X@GRAD", dx);
        self.set(op, "Scale@GRAD", Tensor::float(dtype, width.clone(), ds));
        self.set(op, "Bias@GRAD", Tensor::float(dtype, width, db));
        Ok(())
    }

    /// The table's gradient: the plain lookup's (with its padding row) or the vocab
    /// shard's (rows from `start_index`, no padding).
    pub(super) fn lookup_grad(&mut self, op: &Op, vocab_shard: bool) -> Res {
        let pad = if vocab_shard {
            -1
        } else {
            op.attr_int("padding_idx", -1)
        };
        let g = lookup_grad(
            self.slot(op, "W")?,
            self.slot(op, "Ids")?,
            self.slot(op, "Out@GRAD")?,
            op.attr_int("start_index", 0),
            pad,
        );
        self.set(op, "W@GRAD", g);
        Ok(())
    }

    pub(super) fn transpose_grad(&mut self, op: &Op) -> Res {
        let d = self.slot(op, "Out@GRAD")?;
        let p = perm(op, d.shape.len())?;
        let g = transpose(d, &inverse(&p));
        self.set(op, "X@GRAD", g);
        Ok(())
    }

    pub(super) fn split_grad(&mut self, op: &Op) -> Res {
        let t = self.slot(op, "X")?;
        let parts = self.inputs(op, "Out@GRAD")?;
        let ty = TensorType::new(t.dtype(), t.shape.clone());
        let (a, _) = split_sections(op, &ty).map_err(OpError::Attr)?;
        let g = concat(&parts, a)?;
        self.set(op, "X@GRAD", g);
        Ok(())
    }

    pub(super) fn concat_grad(&mut self, op: &Op) -> Res {
        let xs = self.inputs(op, "X")?;
        let rank = xs.first().map_or(0, |t| t.shape.len());
        let a = axis(op.attr_int("axis", 0), rank, "axis").map_err(OpError::Attr)?;
        let sizes: Vec<usize> = xs.iter().map(|t| t.shape[a]).collect();
        let parts = split(self.slot(op, "Out@GRAD")?, a, &sizes);
        for (&v, p) in op.output("X@GRAD").iter().zip(parts) {
            self.set_var(v, p);
        }
        Ok(())
    }

    /// The grad of reduce_sum, reduce_mean (`mean`) or `mean` of every element (`all`).
    pub(super) fn reduce_grad(&mut self, op: &Op, mean: bool, all: bool) -> Res {
        let t = self.slot(op, "X")?;
        let axes = if all {
            (0..t.shape.len()).collect()
        } else {
            reduce_axes(op, t.shape.len()).map_err(OpError::Attr)?
        };
        let g = reduce_grad(t, self.slot(op, "Out@GRAD")?, &axes, mean);
        self.set(op, "X@GRAD", g);
        Ok(())
    }

    pub(super) fn softmax_ce_grad(&mut self, op: &Op) -> Res {
        let sm = self.slot(op, "Softmax")?;
        let a = axis(op.attr_int("axis", -1), sm.shape.len(), "axis").map_err(OpError::Attr)?;
        let g = softmax_ce_grad(
            sm,
            self.slot(op, "Label")?,
            self.slot(op, "Loss@GRAD")?,
            a,
            op.attr_bool("soft_label", false),
        );
        self.set(op, "Logits@GRAD", g);
        Ok(())
    }

    /// The vocab-parallel cross-entropy's grad: local, no communication.
    pub(super) fn vocab_ce_grad(&mut self, op: &Op) -> Res {
        let g = vocab_ce::grad(
            self.slot(op, "Softmax")?,
            self.slot(op, "Label")?,
            self.slot(op, "Loss@GRAD")?,
            op.attr_int("start_index", 0),
        );
        self.set(op, "Logits@GRAD", g);
        Ok(())
    }
}
