//! The closed set of operator types, in two levels: a family, then the op within it.
//!
//! - `Forward(f)`: the differentiable ops a plan is written with; `Grad(f)` is the op the
//!   backward pass emits for `f` (`<name>_grad`), so every forward op has exactly one grad op
//!   and a match can take every grad op at once (`OpType::Grad(_)`).
//! - `FillConstant`: the one forward op without a grad (a constant source).
//! - `Math`, `Optimizer`, `Amp`, `Collective`, `RankLocal`: the ops the planner adds.
//!
//! Every `match` over [`OpType`] and its families is exhaustive (no `_` arm; the crate
//! denies `clippy::wildcard_enum_match_arm`), so a new op type does not compile until it
//! has a schema, shape inference and everything downstream. The flat names
//! (`OpType::MatmulV2Grad`) are constants for comparisons; a `match` names the families.

pub use super::ops::ForwardOp;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// An operator type, named as in Paddle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpType {
    /// A differentiable op a plan is written with.
    Forward(ForwardOp),
    /// A constant source (no inputs, no grad).
    FillConstant,
    /// The grad op of a forward op.
    Grad(ForwardOp),
    Math(MathOp),
    Optimizer(OptimizerOp),
    Amp(AmpOp),
    Collective(CollectiveOp),
    RankLocal(RankLocalOp),
}

/// Helpers the planner emits: gradient accumulation and clipping arithmetic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MathOp {
    Sum,
    Sqrt,
    ElementwiseMax,
    SquaredL2Norm,
}

/// Parameter updates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OptimizerOp {
    Sgd,
    Momentum,
    Adam,
    AdamW,
}

/// Dynamic loss scaling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AmpOp {
    CheckFiniteAndUnscale,
    UpdateLossScaling,
}

/// Communication between ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CollectiveOp {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    Send,
    Recv,
    /// Every member sends its tensors to the member `shift` places on in the group's ring
    /// and receives the tensors of the member `shift` places back (JAX's `ppermute`, XLA's
    /// collective-permute): ring attention's K/V steps.
    Ppermute,
}

/// Ops of per-rank programs only: a reshard's local slice, the vocab-parallel embedding and cross-entropy (Paddle's `c_*` ops) and their grads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RankLocalOp {
    Slice,
    /// `pad_size` zeros appended to `X` along `axis`: an uneven shard brought to the
    /// padded length a collective needs (DTensor's `pad_tensor`; `slice` unpads).
    Pad,
    CEmbedding,
    CEmbeddingGrad,
    CSoftmaxWithCrossEntropy,
    CSoftmaxWithCrossEntropyGrad,
    /// ZeRO's flat buffer: the tensor flattened and zero-padded to `numel` elements (a
    /// multiple of the sharding group's size, so every rank's shard has the same length).
    FlattenPad,
    /// The inverse of `flatten_pad`: the first elements of a flat buffer, reshaped to
    /// `shape` (a parameter all-gathered from its ZeRO shards).
    UnpadReshape,
    /// A gradient bucket: tensors flattened into one buffer (Paddle's `coalesce_tensor`).
    CoalesceTensor,
    /// A bucket's buffer back into its tensors, in place.
    UncoalesceTensor,
    /// One step of ring attention: the rank's queries attend one block of keys and values
    /// (at stored offsets `q_offset` and `kv_offset`), merged into the running result by
    /// the online softmax.
    RingAttnBlock,
    /// One step of ring attention's backward: the block's gradient contributions added to
    /// the running dq and to the dk, dv that travel with the block.
    RingAttnBlockGrad,
}

impl MathOp {
    /// Every op of the family, in declaration order.
    pub const ALL: [MathOp; 4] = [
        MathOp::Sum,
        MathOp::Sqrt,
        MathOp::ElementwiseMax,
        MathOp::SquaredL2Norm,
    ];

    /// Paddle's op type name.
    pub fn name(self) -> &'static str {
        match self {
            MathOp::Sum => "sum",
            MathOp::Sqrt => "sqrt",
            MathOp::ElementwiseMax => "elementwise_max",
            MathOp::SquaredL2Norm => "squared_l2_norm",
        }
    }
}

impl OptimizerOp {
    /// Every op of the family, in declaration order.
    pub const ALL: [OptimizerOp; 4] = [
        OptimizerOp::Sgd,
        OptimizerOp::Momentum,
        OptimizerOp::Adam,
        OptimizerOp::AdamW,
    ];

    /// Paddle's op type name.
    pub fn name(self) -> &'static str {
        match self {
            OptimizerOp::Sgd => "sgd",
            OptimizerOp::Momentum => "momentum",
            OptimizerOp::Adam => "adam",
            OptimizerOp::AdamW => "adamw",
        }
    }
}

impl AmpOp {
    /// Every op of the family, in declaration order.
    pub const ALL: [AmpOp; 2] = [AmpOp::CheckFiniteAndUnscale, AmpOp::UpdateLossScaling];

    /// Paddle's op type name.
    pub fn name(self) -> &'static str {
        match self {
            AmpOp::CheckFiniteAndUnscale => "check_finite_and_unscale",
            AmpOp::UpdateLossScaling => "update_loss_scaling",
        }
    }
}

impl CollectiveOp {
    /// Every op of the family, in declaration order.
    pub const ALL: [CollectiveOp; 7] = [
        CollectiveOp::AllReduce,
        CollectiveOp::AllGather,
        CollectiveOp::ReduceScatter,
        CollectiveOp::AllToAll,
        CollectiveOp::Send,
        CollectiveOp::Recv,
        CollectiveOp::Ppermute,
    ];

    /// Paddle's op type name.
    pub fn name(self) -> &'static str {
        match self {
            CollectiveOp::AllReduce => "all_reduce",
            CollectiveOp::AllGather => "all_gather",
            CollectiveOp::ReduceScatter => "reduce_scatter",
            CollectiveOp::AllToAll => "all_to_all",
            CollectiveOp::Send => "send",
            CollectiveOp::Recv => "recv",
            CollectiveOp::Ppermute => "ppermute",
        }
    }
}

impl RankLocalOp {
    /// Every op of the family, in declaration order.
    pub const ALL: [RankLocalOp; 12] = [
        RankLocalOp::Slice,
        RankLocalOp::Pad,
        RankLocalOp::CEmbedding,
        RankLocalOp::CEmbeddingGrad,
        RankLocalOp::CSoftmaxWithCrossEntropy,
        RankLocalOp::CSoftmaxWithCrossEntropyGrad,
        RankLocalOp::FlattenPad,
        RankLocalOp::UnpadReshape,
        RankLocalOp::CoalesceTensor,
        RankLocalOp::UncoalesceTensor,
        RankLocalOp::RingAttnBlock,
        RankLocalOp::RingAttnBlockGrad,
    ];

    /// Paddle's op type name.
    pub fn name(self) -> &'static str {
        match self {
            RankLocalOp::Slice => "slice",
            RankLocalOp::Pad => "pad",
            RankLocalOp::CEmbedding => "c_embedding",
            RankLocalOp::CEmbeddingGrad => "c_embedding_grad",
            RankLocalOp::CSoftmaxWithCrossEntropy => "c_softmax_with_cross_entropy",
            RankLocalOp::CSoftmaxWithCrossEntropyGrad => "c_softmax_with_cross_entropy_grad",
            RankLocalOp::FlattenPad => "flatten_pad",
            RankLocalOp::UnpadReshape => "unpad_reshape",
            RankLocalOp::CoalesceTensor => "coalesce_tensor",
            RankLocalOp::UncoalesceTensor => "uncoalesce_tensor",
            RankLocalOp::RingAttnBlock => "ring_attn_block",
            RankLocalOp::RingAttnBlockGrad => "ring_attn_block_grad",
        }
    }
}

/// The flat names of the planner's ops (the forward and grad ops' are made with their
/// declarations in `ir::ops`).
#[allow(non_upper_case_globals)]
impl OpType {
    pub const Sum: OpType = OpType::Math(MathOp::Sum);
    pub const Sqrt: OpType = OpType::Math(MathOp::Sqrt);
    pub const ElementwiseMax: OpType = OpType::Math(MathOp::ElementwiseMax);
    pub const SquaredL2Norm: OpType = OpType::Math(MathOp::SquaredL2Norm);
    pub const Sgd: OpType = OpType::Optimizer(OptimizerOp::Sgd);
    pub const Momentum: OpType = OpType::Optimizer(OptimizerOp::Momentum);
    pub const Adam: OpType = OpType::Optimizer(OptimizerOp::Adam);
    pub const AdamW: OpType = OpType::Optimizer(OptimizerOp::AdamW);
    pub const CheckFiniteAndUnscale: OpType = OpType::Amp(AmpOp::CheckFiniteAndUnscale);
    pub const UpdateLossScaling: OpType = OpType::Amp(AmpOp::UpdateLossScaling);
    pub const AllReduce: OpType = OpType::Collective(CollectiveOp::AllReduce);
    pub const AllGather: OpType = OpType::Collective(CollectiveOp::AllGather);
    pub const ReduceScatter: OpType = OpType::Collective(CollectiveOp::ReduceScatter);
    pub const AllToAll: OpType = OpType::Collective(CollectiveOp::AllToAll);
    pub const Send: OpType = OpType::Collective(CollectiveOp::Send);
    pub const Recv: OpType = OpType::Collective(CollectiveOp::Recv);
    pub const Ppermute: OpType = OpType::Collective(CollectiveOp::Ppermute);
    pub const Slice: OpType = OpType::RankLocal(RankLocalOp::Slice);
    pub const Pad: OpType = OpType::RankLocal(RankLocalOp::Pad);
    pub const CEmbedding: OpType = OpType::RankLocal(RankLocalOp::CEmbedding);
    pub const CEmbeddingGrad: OpType = OpType::RankLocal(RankLocalOp::CEmbeddingGrad);
    pub const CSoftmaxWithCrossEntropy: OpType =
        OpType::RankLocal(RankLocalOp::CSoftmaxWithCrossEntropy);
    pub const CSoftmaxWithCrossEntropyGrad: OpType =
        OpType::RankLocal(RankLocalOp::CSoftmaxWithCrossEntropyGrad);
    pub const FlattenPad: OpType = OpType::RankLocal(RankLocalOp::FlattenPad);
    pub const UnpadReshape: OpType = OpType::RankLocal(RankLocalOp::UnpadReshape);
    pub const CoalesceTensor: OpType = OpType::RankLocal(RankLocalOp::CoalesceTensor);
    pub const UncoalesceTensor: OpType = OpType::RankLocal(RankLocalOp::UncoalesceTensor);
    pub const RingAttnBlock: OpType = OpType::RankLocal(RankLocalOp::RingAttnBlock);
    pub const RingAttnBlockGrad: OpType = OpType::RankLocal(RankLocalOp::RingAttnBlockGrad);
}

impl OpType {
    /// How many op types there are.
    pub const COUNT: usize = 2 * ForwardOp::ALL.len()
        + 1
        + MathOp::ALL.len()
        + OptimizerOp::ALL.len()
        + AmpOp::ALL.len()
        + CollectiveOp::ALL.len()
        + RankLocalOp::ALL.len();

    /// Every op type: forward ops, `fill_constant`, grad ops, then the planner's families.
    pub const ALL: [OpType; OpType::COUNT] = {
        let mut all = [OpType::FillConstant; OpType::COUNT];
        let mut i = 0;
        while i < ForwardOp::ALL.len() {
            all[i] = OpType::Forward(ForwardOp::ALL[i]);
            all[ForwardOp::ALL.len() + 1 + i] = OpType::Grad(ForwardOp::ALL[i]);
            i += 1;
        }
        let mut k = 2 * ForwardOp::ALL.len() + 1;
        let mut j = 0;
        while j < MathOp::ALL.len() {
            all[k] = OpType::Math(MathOp::ALL[j]);
            k += 1;
            j += 1;
        }
        let mut j = 0;
        while j < OptimizerOp::ALL.len() {
            all[k] = OpType::Optimizer(OptimizerOp::ALL[j]);
            k += 1;
            j += 1;
        }
        let mut j = 0;
        while j < AmpOp::ALL.len() {
            all[k] = OpType::Amp(AmpOp::ALL[j]);
            k += 1;
            j += 1;
        }
        let mut j = 0;
        while j < CollectiveOp::ALL.len() {
            all[k] = OpType::Collective(CollectiveOp::ALL[j]);
            k += 1;
            j += 1;
        }
        let mut j = 0;
        while j < RankLocalOp::ALL.len() {
            all[k] = OpType::RankLocal(RankLocalOp::ALL[j]);
            k += 1;
            j += 1;
        }
        all
    };

    /// Paddle's op type name.
    pub fn name(self) -> &'static str {
        match self {
            OpType::Forward(f) => f.names().0,
            OpType::Grad(f) => f.names().1,
            OpType::FillConstant => "fill_constant",
            OpType::Math(o) => o.name(),
            OpType::Optimizer(o) => o.name(),
            OpType::Amp(o) => o.name(),
            OpType::Collective(o) => o.name(),
            OpType::RankLocal(o) => o.name(),
        }
    }

    /// Looks an op type up by its Paddle name.
    pub fn from_name(name: &str) -> Option<OpType> {
        OpType::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The differentiable op of a forward op (`None` for every other op).
    pub fn as_forward(self) -> Option<ForwardOp> {
        match self {
            OpType::Forward(f) => Some(f),
            OpType::FillConstant
            | OpType::Grad(_)
            | OpType::Math(_)
            | OpType::Optimizer(_)
            | OpType::Amp(_)
            | OpType::Collective(_)
            | OpType::RankLocal(_) => None,
        }
    }

    /// The differentiable op of a forward op or of its grad op.
    pub fn differentiated(self) -> Option<ForwardOp> {
        match self {
            OpType::Forward(f) | OpType::Grad(f) => Some(f),
            OpType::FillConstant
            | OpType::Math(_)
            | OpType::Optimizer(_)
            | OpType::Amp(_)
            | OpType::Collective(_)
            | OpType::RankLocal(_) => None,
        }
    }

    /// The grad op the backward pass emits for this forward op (`None` if it has none or
    /// is not a forward op).
    pub fn grad(self) -> Option<OpType> {
        self.as_forward().map(OpType::Grad)
    }

    /// The forward op of a grad op (`None` for every other op).
    pub fn forward(self) -> Option<OpType> {
        match self {
            OpType::Grad(f) => Some(OpType::Forward(f)),
            OpType::Forward(_)
            | OpType::FillConstant
            | OpType::Math(_)
            | OpType::Optimizer(_)
            | OpType::Amp(_)
            | OpType::Collective(_)
            | OpType::RankLocal(_) => None,
        }
    }

    /// What family an op belongs to.
    pub fn class(self) -> OpClass {
        match self {
            OpType::Forward(_) | OpType::FillConstant => OpClass::Forward,
            OpType::Grad(_) => OpClass::Grad,
            OpType::Math(_) => OpClass::Math,
            OpType::Optimizer(_) => OpClass::Optimizer,
            OpType::Amp(_) => OpClass::Amp,
            OpType::Collective(_) => OpClass::Collective,
            OpType::RankLocal(_) => OpClass::RankLocal,
        }
    }

    /// A forward op applied element by element (unary, or binary with broadcasting).
    pub fn is_elementwise(self) -> bool {
        matches!(self, OpType::Forward(f) if f.is_elementwise())
    }
}

/// Serialized as Paddle's name.
impl Serialize for OpType {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for OpType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<OpType, D::Error> {
        let name = String::deserialize(d)?;
        OpType::from_name(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown op type `{name}`")))
    }
}

/// Families of op types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum OpClass {
    /// Written in plans; has an SPMD rule.
    Forward,
    /// Emitted by the backward pass (`<type>_grad`).
    Grad,
    /// Helpers the planner emits (gradient accumulation, clipping math).
    Math,
    /// Parameter updates.
    Optimizer,
    /// Loss scaling.
    Amp,
    /// Communication between ranks.
    Collective,
    /// Ops of per-rank programs only (local slice, vocab-parallel embedding).
    RankLocal,
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
