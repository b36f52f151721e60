//! The decoder ops' forward and grad: `rms_norm`, the rotary embedding, `repeat_interleave`.

use super::Rank;
use crate::exec::kernels::decoder::{
    repeat_interleave, repeat_interleave_grad, rms_norm, rms_norm_grad, rope,
};
use crate::exec::op_error::OpError;
use crate::ir::infer::axis;
use crate::ir::Op;

type Res = Result<(), crate::exec::op_error::OpError>;

impl Rank<'_> {
    pub(super) fn rms_norm(&mut self, op: &Op) -> Res {
        let (y, inv) = rms_norm(
            self.slot(op, "X")?,
            self.slot(op, "Scale")?,
            op.attr_int("begin_norm_axis", 1).max(0) as usize,
            op.attr_float("epsilon", 1e-5),
        );
        self.set(op, "Y", y);
        self.set(op, "InvVar", inv);
        Ok(())
    }

    pub(super) fn rms_norm_grad(&mut self, op: &Op) -> Res {
        let (dx, ds) = rms_norm_grad(
            self.slot(op, "X")?,
            self.slot(op, "Scale")?,
            self.slot(op, "InvVar")?,
            self.slot(op, "Y@GRAD")?,
            op.attr_int("begin_norm_axis", 1).max(0) as usize,
        );
        self.set(op, "X@GRAD", dx);
        self.set(op, "Scale@GRAD", ds);
        Ok(())
    }

    /// The rotation forward, or its transpose for the grad (`dx = Rᵀ · dout`).
    pub(super) fn rope(&mut self, op: &Op, grad: bool) -> Res {
        let (x, out) = if grad {
            ("Out@GRAD", "X@GRAD")
        } else {
            ("X", "Out")
        };
        let t = rope(
            self.slot(op, x)?,
            self.slot(op, "Sin")?,
            self.slot(op, "Cos")?,
            op.attr_bool("use_neox_rotary_style", true),
            grad,
        );
        self.set(op, out, t);
        Ok(())
    }

    pub(super) fn repeat_interleave(&mut self, op: &Op, grad: bool) -> Res {
        let x = self.slot(op, if grad { "Out@GRAD" } else { "X" })?;
        let a = axis(op.attr_int("axis", 0), x.shape.len(), "axis").map_err(OpError::Attr)?;
        let r = op.attr_int("repeats", 1).max(1) as usize;
        if grad {
            let dx = repeat_interleave_grad(x, a, r);
            self.set(op, "X@GRAD", dx);
        } else {
            let out = repeat_interleave(x, a, r);
            self.set(op, "Out", out);
        }
        Ok(())
    }
}
