//! `elementwise_{add,sub,mul,div}`: element by element with NumPy broadcasting.
//!
//! Facets outside the IR: the rule `spmd::elementwise` (mul keeps X's partial sums), the
//! kernels `exec::kernels::pointwise`, and `jnp.{add,subtract,multiply,divide}` in
//! `export::ops`.

use super::{Family, Flops, Numel, OpDef};
use crate::ir::attr::AttrKind::Int;
use crate::ir::infer::forward as infer;
use crate::ir::schema::{attr, one, AttrSpec, SlotSpec};

const INPUTS: &[SlotSpec] = &[one("X"), one("Y")];
const OUTPUTS: &[SlotSpec] = &[one("Out")];
const ATTRS: &[AttrSpec] = &[attr("axis", Int)];
const OUT: Numel = Numel::Out("Out");
const DOUT: Numel = Numel::In("Out@GRAD");

const fn binary(
    name: &'static str,
    grad_name: &'static str,
    pir_name: &'static str,
    flops: Flops,
) -> OpDef {
    OpDef {
        name,
        grad_name,
        pir_name,
        family: Family::ElementwiseBinary,
        inputs: INPUTS,
        outputs: OUTPUTS,
        attrs: ATTRS,
        infer: infer::elementwise,
        saves: &[],
        differentiates: &["X", "Y"],
        shape_only: &[],
        flops,
    }
}

pub const ADD: OpDef = OpDef {
    shape_only: &["X", "Y"],
    ..binary(
        "elementwise_add",
        "elementwise_add_grad",
        "pd_op.add",
        Flops {
            forward: &[(1.0, OUT)],
            grad: &[(1.0, DOUT)],
        },
    )
};
pub const SUB: OpDef = OpDef {
    shape_only: &["X", "Y"],
    ..binary(
        "elementwise_sub",
        "elementwise_sub_grad",
        "pd_op.subtract",
        Flops {
            forward: &[(1.0, OUT)],
            grad: &[(1.0, DOUT)],
        },
    )
};
// dX = dOut·Y and dY = dOut·X.
pub const MUL: OpDef = binary(
    "elementwise_mul",
    "elementwise_mul_grad",
    "pd_op.multiply",
    Flops {
        forward: &[(1.0, OUT)],
        grad: &[(2.0, DOUT)],
    },
);
// dX = dOut/Y (one), dY = −dOut·X/Y² (four).
pub const DIV: OpDef = binary(
    "elementwise_div",
    "elementwise_div_grad",
    "pd_op.divide",
    Flops {
        forward: &[(1.0, OUT)],
        grad: &[(5.0, DOUT)],
    },
);
