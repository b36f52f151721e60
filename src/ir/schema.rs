//! Each op type's input/output slots and attribute schema. Grad ops derive theirs from
//! their forward op: inputs are the forward inputs, the forward outputs and
//! `<Out>@GRAD` for each forward output; outputs are `<In>@GRAD` for each forward input;
//! attributes are the forward op's.

use super::attr::AttrKind::{self, Bool, Float, Int, Ints, Str};
use super::op_type::OpType;
use rustc_hash::FxHashMap as HashMap;
use std::sync::OnceLock;

/// How many variables a slot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arity {
    /// Exactly one variable.
    One,
    /// Zero or one variable (e.g. layer_norm's Scale).
    Optional,
    /// At least one (e.g. concat's X, split's Out).
    List,
    /// Any number, zero included (list slots of grad ops).
    Many,
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

pub(crate) const fn one(name: &'static str) -> SlotSpec {
    SlotSpec {
        name,
        arity: Arity::One,
    }
}
pub(crate) const fn opt(name: &'static str) -> SlotSpec {
    SlotSpec {
        name,
        arity: Arity::Optional,
    }
}
pub(crate) const fn list(name: &'static str) -> SlotSpec {
    SlotSpec {
        name,
        arity: Arity::List,
    }
}
pub(crate) const fn many(name: &'static str) -> SlotSpec {
    SlotSpec {
        name,
        arity: Arity::Many,
    }
}
pub(crate) const fn attr(name: &'static str, kind: AttrKind) -> AttrSpec {
    AttrSpec {
        name,
        kind,
        required: false,
    }
}
pub(crate) const fn req(name: &'static str, kind: AttrKind) -> AttrSpec {
    AttrSpec {
        name,
        kind,
        required: true,
    }
}

type Slots = (&'static [SlotSpec], &'static [SlotSpec]);
const X_OUT: Slots = (&[one("X")], &[one("Out")]);
const XY_OUT: Slots = (&[one("X"), one("Y")], &[one("Out")]);
const LOOKUP: Slots = (&[one("W"), one("Ids")], &[one("Out")]);
/// Paddle's `c_embedding_grad`: the vocab-parallel table's gradient rows for this rank.
const C_EMBEDDING_GRAD: Slots = (&[one("W"), one("Ids"), one("Out@GRAD")], &[one("W@GRAD")]);
const C_SOFTMAX_CE_GRAD: Slots = (
    &[one("Softmax"), one("Label"), one("Loss@GRAD")],
    &[one("Logits@GRAD")],
);
const CONCAT: Slots = (&[list("X")], &[one("Out")]);
const COALESCE: Slots = (&[list("Input")], &[one("FusedOutput")]);
const UNCOALESCE: Slots = (&[one("FusedOutput"), list("Input")], &[list("Output")]);
const SOFTMAX_CE: Slots = (
    &[one("Logits"), one("Label")],
    &[one("Softmax"), one("Loss")],
);
const FILL: Slots = (&[], &[one("Out")]);
const SGD: Slots = (
    &[one("Param"), one("Grad"), one("LearningRate")],
    &[one("ParamOut")],
);
const MOMENTUM: Slots = (
    &[
        one("Param"),
        one("Grad"),
        one("Velocity"),
        one("LearningRate"),
    ],
    &[one("ParamOut"), one("VelocityOut")],
);
const ADAM: Slots = (
    &[
        one("Param"),
        one("Grad"),
        one("LearningRate"),
        one("Moment1"),
        one("Moment2"),
        one("Beta1Pow"),
        one("Beta2Pow"),
    ],
    &[
        one("ParamOut"),
        one("Moment1Out"),
        one("Moment2Out"),
        one("Beta1PowOut"),
        one("Beta2PowOut"),
    ],
);
// X may be empty: with pipeline stages each stage checks (and on overflow zeroes) only its
// own gradients, and a stage can have none.
const CHECK_FINITE: Slots = (
    &[many("X"), one("Scale")],
    &[many("Out"), one("FoundInfinite")],
);
const UPDATE_SCALING: Slots = (
    &[
        many("X"),
        one("FoundInfinite"),
        one("PrevLossScaling"),
        one("InGoodSteps"),
        one("InBadSteps"),
    ],
    &[
        many("Out"),
        one("LossScaling"),
        one("OutGoodSteps"),
        one("OutBadSteps"),
    ],
);
const SEND: Slots = (&[one("X")], &[]);
const PPERMUTE: Slots = (&[list("X")], &[list("Out")]);
const RING_BLOCK: Slots = (
    &[one("Q"), one("K"), one("V"), opt("Acc"), opt("AccLse")],
    &[one("Out"), one("SoftmaxLse")],
);
const RING_BLOCK_GRAD: Slots = (
    &[
        one("Q"),
        one("K"),
        one("V"),
        one("Out"),
        one("SoftmaxLse"),
        one("Out@GRAD"),
        opt("DQ"),
        opt("DK"),
        opt("DV"),
    ],
    &[one("Q@GRAD"), one("K@GRAD"), one("V@GRAD")],
);
const SLICE: Slots = (&[one("Input")], &[one("Out")]);

const NONE: &[AttrSpec] = &[];
const AXIS: &[AttrSpec] = &[attr("axis", Int)];
const FILL_ATTRS: &[AttrSpec] = &[req("shape", Ints), attr("value", Float), req("dtype", Str)];
const MOMENTUM_ATTRS: &[AttrSpec] = &[attr("mu", Float), attr("use_nesterov", Bool)];
const ADAM_ATTRS: &[AttrSpec] = &[
    attr("beta1", Float),
    attr("beta2", Float),
    attr("epsilon", Float),
];
const ADAMW_ATTRS: &[AttrSpec] = &[
    attr("beta1", Float),
    attr("beta2", Float),
    attr("epsilon", Float),
    attr("coeff", Float),
];
const SCALING_ATTRS: &[AttrSpec] = &[
    attr("incr_every_n_steps", Int),
    attr("decr_every_n_nan_or_inf", Int),
    attr("incr_ratio", Float),
    attr("decr_ratio", Float),
];
const ALL_REDUCE_ATTRS: &[AttrSpec] = &[
    req("reduce_type", Str),
    req("group", Ints),
    attr("ring_id", Int),
];
const ALL_GATHER_ATTRS: &[AttrSpec] =
    &[attr("axis", Int), req("group", Ints), attr("ring_id", Int)];
const REDUCE_SCATTER_ATTRS: &[AttrSpec] = &[
    attr("axis", Int),
    req("reduce_type", Str),
    req("group", Ints),
    attr("ring_id", Int),
];
const ALL_TO_ALL_ATTRS: &[AttrSpec] = &[
    req("split_axis", Int),
    req("concat_axis", Int),
    req("group", Ints),
    attr("ring_id", Int),
];
const SEND_ATTRS: &[AttrSpec] = &[req("peer", Int), attr("group", Ints), attr("ring_id", Int)];
const RECV_ATTRS: &[AttrSpec] = &[
    req("peer", Int),
    req("shape", Ints),
    req("dtype", Str),
    attr("group", Ints),
    attr("ring_id", Int),
];
/// `shift`: each member receives from the member `shift` places back on the ring.
const PPERMUTE_ATTRS: &[AttrSpec] = &[req("shift", Int), req("group", Ints), attr("ring_id", Int)];
/// A ring step's block: the stored offsets of the queries and of the keys in the sequence
/// of `seq` positions stored in `zigzag` chunks.
const RING_BLOCK_ATTRS: &[AttrSpec] = &[
    req("q_offset", Int),
    req("kv_offset", Int),
    req("seq", Int),
    attr("zigzag", Int),
    attr("causal", Bool),
];
const SLICE_ATTRS: &[AttrSpec] = &[req("axes", Ints), req("starts", Ints), req("ends", Ints)];
const FLATTEN_PAD_ATTRS: &[AttrSpec] = &[req("numel", Int)];
const PAD_ATTRS: &[AttrSpec] = &[req("axis", Int), req("pad_size", Int)];
const UNPAD_RESHAPE_ATTRS: &[AttrSpec] = &[req("shape", Ints)];
const C_EMBEDDING_ATTRS: &[AttrSpec] = &[req("start_index", Int)];
/// The vocab-parallel cross-entropy: the class id of this rank's first column, and the group
/// its three all-reduces run over (Paddle's `ring_id`, `rank` in the group and `nranks`).
const C_SOFTMAX_CE_ATTRS: &[AttrSpec] = &[
    req("start_index", Int),
    req("group", Ints),
    attr("ring_id", Int),
    attr("rank", Int),
    attr("nranks", Int),
];

impl OpType {
    /// Input and output slots, in canonical order.
    pub fn slots(self) -> (&'static [SlotSpec], &'static [SlotSpec]) {
        match self {
            OpType::Forward(f) => (f.def().inputs, f.def().outputs),
            OpType::ElementwiseMax => XY_OUT,
            OpType::Sqrt
            | OpType::SquaredL2Norm
            | OpType::AllReduce
            | OpType::AllGather
            | OpType::ReduceScatter
            | OpType::AllToAll
            | OpType::FlattenPad
            | OpType::Pad
            | OpType::UnpadReshape => X_OUT,
            OpType::CEmbedding => LOOKUP,
            OpType::CEmbeddingGrad => C_EMBEDDING_GRAD,
            OpType::CSoftmaxWithCrossEntropy => SOFTMAX_CE,
            OpType::CSoftmaxWithCrossEntropyGrad => C_SOFTMAX_CE_GRAD,
            OpType::Sum => CONCAT,
            OpType::FillConstant | OpType::Recv => FILL,
            OpType::Sgd => SGD,
            OpType::Momentum => MOMENTUM,
            OpType::Adam | OpType::AdamW => ADAM,
            OpType::CheckFiniteAndUnscale => CHECK_FINITE,
            OpType::UpdateLossScaling => UPDATE_SCALING,
            OpType::Send => SEND,
            OpType::Ppermute => PPERMUTE,
            OpType::RingAttnBlock => RING_BLOCK,
            OpType::RingAttnBlockGrad => RING_BLOCK_GRAD,
            OpType::Slice => SLICE,
            OpType::CoalesceTensor => COALESCE,
            OpType::UncoalesceTensor => UNCOALESCE,
            OpType::Grad(_) => grad_slots(self),
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

    /// The attributes this op type accepts (a grad op takes its forward op's).
    pub fn attr_schema(self) -> &'static [AttrSpec] {
        if let Some(fwd) = self.forward() {
            return fwd.attr_schema();
        }
        match self {
            OpType::Forward(f) => f.def().attrs,
            OpType::ElementwiseMax => AXIS,
            OpType::Sum
            | OpType::Sqrt
            | OpType::SquaredL2Norm
            | OpType::Sgd
            | OpType::CheckFiniteAndUnscale => NONE,
            OpType::FillConstant => FILL_ATTRS,
            OpType::Momentum => MOMENTUM_ATTRS,
            OpType::Adam => ADAM_ATTRS,
            OpType::AdamW => ADAMW_ATTRS,
            OpType::UpdateLossScaling => SCALING_ATTRS,
            OpType::AllReduce => ALL_REDUCE_ATTRS,
            OpType::AllGather => ALL_GATHER_ATTRS,
            OpType::ReduceScatter => REDUCE_SCATTER_ATTRS,
            OpType::AllToAll => ALL_TO_ALL_ATTRS,
            OpType::Send => SEND_ATTRS,
            OpType::Recv => RECV_ATTRS,
            OpType::Ppermute => PPERMUTE_ATTRS,
            OpType::RingAttnBlock | OpType::RingAttnBlockGrad => RING_BLOCK_ATTRS,
            OpType::Slice => SLICE_ATTRS,
            OpType::FlattenPad => FLATTEN_PAD_ATTRS,
            OpType::Pad => PAD_ATTRS,
            OpType::UnpadReshape => UNPAD_RESHAPE_ATTRS,
            OpType::CoalesceTensor | OpType::UncoalesceTensor => NONE,
            OpType::CEmbedding | OpType::CEmbeddingGrad => C_EMBEDDING_ATTRS,
            OpType::CSoftmaxWithCrossEntropy | OpType::CSoftmaxWithCrossEntropyGrad => {
                C_SOFTMAX_CE_ATTRS
            }
            OpType::Grad(_) => NONE,
        }
    }
}

/// `name@GRAD`, leaked once per slot name so slot tables stay `&'static`.
fn grad_name(name: &str) -> &'static str {
    Box::leak(format!("{name}@GRAD").into_boxed_str())
}

fn optional(arity: Arity) -> Arity {
    match arity {
        Arity::One | Arity::Optional => Arity::Optional,
        Arity::List | Arity::Many => Arity::Many,
    }
}

/// The slots of a grad op, built once from its forward op's.
fn grad_slots(grad: OpType) -> Slots {
    static TABLE: OnceLock<HashMap<OpType, Slots>> = OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut table = HashMap::default();
        for fwd in OpType::ALL {
            let Some(g) = fwd.grad() else { continue };
            let (ins, outs) = fwd.slots();
            let mut inputs: Vec<SlotSpec> = ins
                .iter()
                .map(|s| SlotSpec {
                    name: s.name,
                    arity: optional(s.arity),
                })
                .collect();
            inputs.extend(outs.iter().map(|s| SlotSpec {
                name: s.name,
                arity: optional(s.arity),
            }));
            inputs.extend(outs.iter().map(|s| SlotSpec {
                name: grad_name(s.name),
                arity: optional(s.arity),
            }));
            let outputs: Vec<SlotSpec> = ins
                .iter()
                .map(|s| SlotSpec {
                    name: grad_name(s.name),
                    arity: optional(s.arity),
                })
                .collect();
            table.insert(g, (&*Vec::leak(inputs), &*Vec::leak(outputs)));
        }
        table
    });
    table.get(&grad).copied().unwrap_or((&[], &[]))
}
