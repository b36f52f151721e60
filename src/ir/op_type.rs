//! The closed set of operator types, with each type's input/output slots and attribute
//! schema. Every `match` over [`OpType`] in the crate is exhaustive, so a new op type does
//! not compile until it has a schema, shape inference and everything downstream.

use super::attr::AttrKind;
use serde::{Deserialize, Serialize};
use std::fmt;

/// How many variables a slot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arity {
    /// Exactly one variable.
    One,
    /// Zero or one variable (e.g. layer_norm's Scale).
    Optional,
    /// Any number, at least one (e.g. concat's X, split's Out).
    List,
}

/// A named input or output slot (Paddle's `X`, `Y`, `Out`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotSpec {
    pub name: &'static str,
    pub arity: Arity,
}

/// One attribute an op type accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttrSpec {
    pub name: &'static str,
    pub kind: AttrKind,
    /// Required attributes have no sensible default (reshape2's `shape`).
    pub required: bool,
}

const fn one(name: &'static str) -> SlotSpec {
    SlotSpec {
        name,
        arity: Arity::One,
    }
}
const fn opt(name: &'static str) -> SlotSpec {
    SlotSpec {
        name,
        arity: Arity::Optional,
    }
}
const fn list(name: &'static str) -> SlotSpec {
    SlotSpec {
        name,
        arity: Arity::List,
    }
}

/// An operator type, named as in Paddle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum OpType {
    MatmulV2,
    ElementwiseAdd,
    ElementwiseSub,
    ElementwiseMul,
    ElementwiseDiv,
    Relu,
    Gelu,
    Silu,
    Square,
    Scale,
    Cast,
    Assign,
    Dropout,
    Softmax,
    FusedSoftmaxMaskUpperTriangle,
    LayerNorm,
    LookupTableV2,
    Reshape2,
    Transpose2,
    Split,
    Concat,
    ReduceSum,
    ReduceMean,
    Mean,
    SoftmaxWithCrossEntropy,
    FillConstant,
}

type Slots = (&'static [SlotSpec], &'static [SlotSpec]);
const X_OUT: Slots = (&[one("X")], &[one("Out")]);
const XY_OUT: Slots = (&[one("X"), one("Y")], &[one("Out")]);
const DROPOUT: Slots = (&[one("X")], &[one("Out"), one("Mask")]);
const LAYER_NORM: Slots = (
    &[one("X"), opt("Scale"), opt("Bias")],
    &[one("Y"), one("Mean"), one("Variance")],
);
const LOOKUP: Slots = (&[one("W"), one("Ids")], &[one("Out")]);
const SPLIT: Slots = (&[one("X")], &[list("Out")]);
const CONCAT: Slots = (&[list("X")], &[one("Out")]);
const SOFTMAX_CE: Slots = (
    &[one("Logits"), one("Label")],
    &[one("Softmax"), one("Loss")],
);
const FILL: Slots = (&[], &[one("Out")]);

impl OpType {
    /// Every op type, in declaration order.
    pub const ALL: [OpType; 26] = [
        OpType::MatmulV2,
        OpType::ElementwiseAdd,
        OpType::ElementwiseSub,
        OpType::ElementwiseMul,
        OpType::ElementwiseDiv,
        OpType::Relu,
        OpType::Gelu,
        OpType::Silu,
        OpType::Square,
        OpType::Scale,
        OpType::Cast,
        OpType::Assign,
        OpType::Dropout,
        OpType::Softmax,
        OpType::FusedSoftmaxMaskUpperTriangle,
        OpType::LayerNorm,
        OpType::LookupTableV2,
        OpType::Reshape2,
        OpType::Transpose2,
        OpType::Split,
        OpType::Concat,
        OpType::ReduceSum,
        OpType::ReduceMean,
        OpType::Mean,
        OpType::SoftmaxWithCrossEntropy,
        OpType::FillConstant,
    ];

    /// Paddle's op type name.
    pub fn name(self) -> &'static str {
        match self {
            OpType::MatmulV2 => "matmul_v2",
            OpType::ElementwiseAdd => "elementwise_add",
            OpType::ElementwiseSub => "elementwise_sub",
            OpType::ElementwiseMul => "elementwise_mul",
            OpType::ElementwiseDiv => "elementwise_div",
            OpType::Relu => "relu",
            OpType::Gelu => "gelu",
            OpType::Silu => "silu",
            OpType::Square => "square",
            OpType::Scale => "scale",
            OpType::Cast => "cast",
            OpType::Assign => "assign",
            OpType::Dropout => "dropout",
            OpType::Softmax => "softmax",
            OpType::FusedSoftmaxMaskUpperTriangle => "fused_softmax_mask_upper_triangle",
            OpType::LayerNorm => "layer_norm",
            OpType::LookupTableV2 => "lookup_table_v2",
            OpType::Reshape2 => "reshape2",
            OpType::Transpose2 => "transpose2",
            OpType::Split => "split",
            OpType::Concat => "concat",
            OpType::ReduceSum => "reduce_sum",
            OpType::ReduceMean => "reduce_mean",
            OpType::Mean => "mean",
            OpType::SoftmaxWithCrossEntropy => "softmax_with_cross_entropy",
            OpType::FillConstant => "fill_constant",
        }
    }

    /// Looks an op type up by its Paddle name.
    pub fn from_name(name: &str) -> Option<OpType> {
        OpType::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Input and output slots, in canonical order.
    pub fn slots(self) -> (&'static [SlotSpec], &'static [SlotSpec]) {
        match self {
            OpType::MatmulV2
            | OpType::ElementwiseAdd
            | OpType::ElementwiseSub
            | OpType::ElementwiseMul
            | OpType::ElementwiseDiv => XY_OUT,
            OpType::Relu
            | OpType::Gelu
            | OpType::Silu
            | OpType::Square
            | OpType::Scale
            | OpType::Cast
            | OpType::Assign
            | OpType::Softmax
            | OpType::FusedSoftmaxMaskUpperTriangle
            | OpType::Reshape2
            | OpType::Transpose2
            | OpType::ReduceSum
            | OpType::ReduceMean
            | OpType::Mean => X_OUT,
            OpType::Dropout => DROPOUT,
            OpType::LayerNorm => LAYER_NORM,
            OpType::LookupTableV2 => LOOKUP,
            OpType::Split => SPLIT,
            OpType::Concat => CONCAT,
            OpType::SoftmaxWithCrossEntropy => SOFTMAX_CE,
            OpType::FillConstant => FILL,
        }
    }

    /// Input slots, in canonical order.
    pub fn input_slots(self) -> &'static [SlotSpec] {
        self.slots().0
    }

    /// Output slots, in canonical order.
    pub fn output_slots(self) -> &'static [SlotSpec] {
        self.slots().1
    }

    /// The attributes this op type accepts.
    pub fn attr_schema(self) -> &'static [AttrSpec] {
        use AttrKind::*;
        match self {
            OpType::MatmulV2 => &[
                AttrSpec {
                    name: "trans_x",
                    kind: Bool,
                    required: false,
                },
                AttrSpec {
                    name: "trans_y",
                    kind: Bool,
                    required: false,
                },
            ],
            OpType::ElementwiseAdd
            | OpType::ElementwiseSub
            | OpType::ElementwiseMul
            | OpType::ElementwiseDiv => &[AttrSpec {
                name: "axis",
                kind: Int,
                required: false,
            }],
            OpType::Relu
            | OpType::Silu
            | OpType::Square
            | OpType::Assign
            | OpType::Mean
            | OpType::FusedSoftmaxMaskUpperTriangle => &[],
            OpType::Gelu => &[AttrSpec {
                name: "approximate",
                kind: Bool,
                required: false,
            }],
            OpType::Scale => &[
                AttrSpec {
                    name: "scale",
                    kind: Float,
                    required: false,
                },
                AttrSpec {
                    name: "bias",
                    kind: Float,
                    required: false,
                },
                AttrSpec {
                    name: "bias_after_scale",
                    kind: Bool,
                    required: false,
                },
            ],
            OpType::Cast => &[AttrSpec {
                name: "out_dtype",
                kind: Str,
                required: true,
            }],
            OpType::Dropout => &[
                AttrSpec {
                    name: "dropout_prob",
                    kind: Float,
                    required: false,
                },
                AttrSpec {
                    name: "seed",
                    kind: Int,
                    required: false,
                },
                AttrSpec {
                    name: "is_test",
                    kind: Bool,
                    required: false,
                },
            ],
            OpType::Softmax => &[AttrSpec {
                name: "axis",
                kind: Int,
                required: false,
            }],
            OpType::LayerNorm => &[
                AttrSpec {
                    name: "begin_norm_axis",
                    kind: Int,
                    required: false,
                },
                AttrSpec {
                    name: "epsilon",
                    kind: Float,
                    required: false,
                },
            ],
            OpType::LookupTableV2 => &[AttrSpec {
                name: "padding_idx",
                kind: Int,
                required: false,
            }],
            OpType::Reshape2 => &[AttrSpec {
                name: "shape",
                kind: Ints,
                required: true,
            }],
            OpType::Transpose2 => &[AttrSpec {
                name: "axis",
                kind: Ints,
                required: true,
            }],
            OpType::Split => &[
                AttrSpec {
                    name: "num",
                    kind: Int,
                    required: false,
                },
                AttrSpec {
                    name: "sections",
                    kind: Ints,
                    required: false,
                },
                AttrSpec {
                    name: "axis",
                    kind: Int,
                    required: false,
                },
            ],
            OpType::Concat => &[AttrSpec {
                name: "axis",
                kind: Int,
                required: false,
            }],
            OpType::ReduceSum | OpType::ReduceMean => &[
                AttrSpec {
                    name: "dim",
                    kind: Ints,
                    required: false,
                },
                AttrSpec {
                    name: "keep_dim",
                    kind: Bool,
                    required: false,
                },
                AttrSpec {
                    name: "reduce_all",
                    kind: Bool,
                    required: false,
                },
            ],
            OpType::SoftmaxWithCrossEntropy => &[
                AttrSpec {
                    name: "soft_label",
                    kind: Bool,
                    required: false,
                },
                AttrSpec {
                    name: "axis",
                    kind: Int,
                    required: false,
                },
            ],
            OpType::FillConstant => &[
                AttrSpec {
                    name: "shape",
                    kind: Ints,
                    required: true,
                },
                AttrSpec {
                    name: "value",
                    kind: Float,
                    required: false,
                },
                AttrSpec {
                    name: "dtype",
                    kind: Str,
                    required: true,
                },
            ],
        }
    }
}

impl fmt::Display for OpType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where an op sits in the training step (Paddle's `op_role`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum OpRole {
    Forward,
    Backward,
    Optimize,
    Loss,
}

impl OpRole {
    /// All roles, in the order they are documented.
    pub const ALL: [OpRole; 4] = [
        OpRole::Forward,
        OpRole::Backward,
        OpRole::Optimize,
        OpRole::Loss,
    ];

    /// The keyword used in the text format.
    pub fn name(self) -> &'static str {
        match self {
            OpRole::Forward => "forward",
            OpRole::Backward => "backward",
            OpRole::Optimize => "optimize",
            OpRole::Loss => "loss",
        }
    }

    /// Parses a text-format keyword.
    pub fn from_name(name: &str) -> Option<OpRole> {
        OpRole::ALL.into_iter().find(|r| r.name() == name)
    }
}
