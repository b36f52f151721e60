//! The Mixture-of-Experts routing ops' forward and grad (`exec::kernels::moe`).

use super::Rank;
use crate::exec::kernels::moe::{combine, combine_grad, dispatch, dispatch_grad, Routing};
use crate::ir::Op;

type Res = Result<(), crate::exec::op_error::OpError>;

fn routing(op: &Op) -> Routing {
    let at_least_one = |name| op.attr_int(name, 1).max(1) as usize;
    Routing {
        k: at_least_one("k"),
        capacity: at_least_one("capacity"),
        group_size: at_least_one("group_size"),
    }
}

impl Rank<'_> {
    pub(super) fn moe_dispatch(&mut self, op: &Op) -> Res {
        let (out, weights, index) =
            dispatch(self.slot(op, "X")?, self.slot(op, "Gates")?, routing(op));
        self.set(op, "Out", out);
        self.set(op, "Weights", weights);
        self.set(op, "Index", index);
        Ok(())
    }

    pub(super) fn moe_dispatch_grad(&mut self, op: &Op) -> Res {
        let (dx, dg) = dispatch_grad(
            self.slot(op, "X")?,
            self.slot(op, "Gates")?,
            self.slot(op, "Index")?,
            self.opt_slot(op, "Out@GRAD"),
            self.opt_slot(op, "Weights@GRAD"),
            routing(op),
        );
        self.set(op, "X@GRAD", dx);
        self.set(op, "Gates@GRAD", dg);
        Ok(())
    }

    pub(super) fn moe_combine(&mut self, op: &Op) -> Res {
        let out = combine(
            self.slot(op, "X")?,
            self.slot(op, "Weights")?,
            self.slot(op, "Index")?,
            routing(op),
        );
        self.set(op, "Out", out);
        Ok(())
    }

    pub(super) fn moe_combine_grad(&mut self, op: &Op) -> Res {
        let (dx, dw) = combine_grad(
            self.slot(op, "X")?,
            self.slot(op, "Weights")?,
            self.slot(op, "Index")?,
            self.slot(op, "Out@GRAD")?,
            routing(op),
        );
        self.set(op, "X@GRAD", dx);
        self.set(op, "Weights@GRAD", dw);
        Ok(())
    }
}
