//! The closed set of operator types: the forward ops a plan is written with, the grad op
//! the backward pass emits for each of them, and the ops the planner adds (gradient
//! accumulation, optimizers, AMP, clipping, collectives, rank-local ops). Every `match` over
//! [`OpType`] in the crate is exhaustive, so a new op type does not compile until it has a
//! schema, shape inference and everything downstream.

use serde::{Deserialize, Serialize};
use std::fmt;

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
    MatmulV2Grad,
    ElementwiseAddGrad,
    ElementwiseSubGrad,
    ElementwiseMulGrad,
    ElementwiseDivGrad,
    ReluGrad,
    GeluGrad,
    SiluGrad,
    SquareGrad,
    ScaleGrad,
    CastGrad,
    AssignGrad,
    DropoutGrad,
    SoftmaxGrad,
    FusedSoftmaxMaskUpperTriangleGrad,
    LayerNormGrad,
    LookupTableV2Grad,
    Reshape2Grad,
    Transpose2Grad,
    SplitGrad,
    ConcatGrad,
    ReduceSumGrad,
    ReduceMeanGrad,
    MeanGrad,
    SoftmaxWithCrossEntropyGrad,
    Sum,
    Sqrt,
    ElementwiseMax,
    SquaredL2Norm,
    Sgd,
    Momentum,
    Adam,
    AdamW,
    CheckFiniteAndUnscale,
    UpdateLossScaling,
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    Send,
    Recv,
    Slice,
    CEmbedding,
    CEmbeddingGrad,
    CSoftmaxWithCrossEntropy,
    CSoftmaxWithCrossEntropyGrad,
}

impl OpType {
    /// Every op type, in declaration order.
    pub const ALL: [OpType; 72] = [
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
        OpType::MatmulV2Grad,
        OpType::ElementwiseAddGrad,
        OpType::ElementwiseSubGrad,
        OpType::ElementwiseMulGrad,
        OpType::ElementwiseDivGrad,
        OpType::ReluGrad,
        OpType::GeluGrad,
        OpType::SiluGrad,
        OpType::SquareGrad,
        OpType::ScaleGrad,
        OpType::CastGrad,
        OpType::AssignGrad,
        OpType::DropoutGrad,
        OpType::SoftmaxGrad,
        OpType::FusedSoftmaxMaskUpperTriangleGrad,
        OpType::LayerNormGrad,
        OpType::LookupTableV2Grad,
        OpType::Reshape2Grad,
        OpType::Transpose2Grad,
        OpType::SplitGrad,
        OpType::ConcatGrad,
        OpType::ReduceSumGrad,
        OpType::ReduceMeanGrad,
        OpType::MeanGrad,
        OpType::SoftmaxWithCrossEntropyGrad,
        OpType::Sum,
        OpType::Sqrt,
        OpType::ElementwiseMax,
        OpType::SquaredL2Norm,
        OpType::Sgd,
        OpType::Momentum,
        OpType::Adam,
        OpType::AdamW,
        OpType::CheckFiniteAndUnscale,
        OpType::UpdateLossScaling,
        OpType::AllReduce,
        OpType::AllGather,
        OpType::ReduceScatter,
        OpType::AllToAll,
        OpType::Send,
        OpType::Recv,
        OpType::Slice,
        OpType::CEmbedding,
        OpType::CEmbeddingGrad,
        OpType::CSoftmaxWithCrossEntropy,
        OpType::CSoftmaxWithCrossEntropyGrad,
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
            OpType::MatmulV2Grad => "matmul_v2_grad",
            OpType::ElementwiseAddGrad => "elementwise_add_grad",
            OpType::ElementwiseSubGrad => "elementwise_sub_grad",
            OpType::ElementwiseMulGrad => "elementwise_mul_grad",
            OpType::ElementwiseDivGrad => "elementwise_div_grad",
            OpType::ReluGrad => "relu_grad",
            OpType::GeluGrad => "gelu_grad",
            OpType::SiluGrad => "silu_grad",
            OpType::SquareGrad => "square_grad",
            OpType::ScaleGrad => "scale_grad",
            OpType::CastGrad => "cast_grad",
            OpType::AssignGrad => "assign_grad",
            OpType::DropoutGrad => "dropout_grad",
            OpType::SoftmaxGrad => "softmax_grad",
            OpType::FusedSoftmaxMaskUpperTriangleGrad => "fused_softmax_mask_upper_triangle_grad",
            OpType::LayerNormGrad => "layer_norm_grad",
            OpType::LookupTableV2Grad => "lookup_table_v2_grad",
            OpType::Reshape2Grad => "reshape2_grad",
            OpType::Transpose2Grad => "transpose2_grad",
            OpType::SplitGrad => "split_grad",
            OpType::ConcatGrad => "concat_grad",
            OpType::ReduceSumGrad => "reduce_sum_grad",
            OpType::ReduceMeanGrad => "reduce_mean_grad",
            OpType::MeanGrad => "mean_grad",
            OpType::SoftmaxWithCrossEntropyGrad => "softmax_with_cross_entropy_grad",
            OpType::Sum => "sum",
            OpType::Sqrt => "sqrt",
            OpType::ElementwiseMax => "elementwise_max",
            OpType::SquaredL2Norm => "squared_l2_norm",
            OpType::Sgd => "sgd",
            OpType::Momentum => "momentum",
            OpType::Adam => "adam",
            OpType::AdamW => "adamw",
            OpType::CheckFiniteAndUnscale => "check_finite_and_unscale",
            OpType::UpdateLossScaling => "update_loss_scaling",
            OpType::AllReduce => "all_reduce",
            OpType::AllGather => "all_gather",
            OpType::ReduceScatter => "reduce_scatter",
            OpType::AllToAll => "all_to_all",
            OpType::Send => "send",
            OpType::Recv => "recv",
            OpType::Slice => "slice",
            OpType::CEmbedding => "c_embedding",
            OpType::CEmbeddingGrad => "c_embedding_grad",
            OpType::CSoftmaxWithCrossEntropy => "c_softmax_with_cross_entropy",
            OpType::CSoftmaxWithCrossEntropyGrad => "c_softmax_with_cross_entropy_grad",
        }
    }

    /// Looks an op type up by its Paddle name.
    pub fn from_name(name: &str) -> Option<OpType> {
        OpType::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The grad op the backward pass emits for this forward op (`None` if it has none or
    /// is not a forward op).
    pub fn grad(self) -> Option<OpType> {
        match self {
            OpType::MatmulV2 => Some(OpType::MatmulV2Grad),
            OpType::ElementwiseAdd => Some(OpType::ElementwiseAddGrad),
            OpType::ElementwiseSub => Some(OpType::ElementwiseSubGrad),
            OpType::ElementwiseMul => Some(OpType::ElementwiseMulGrad),
            OpType::ElementwiseDiv => Some(OpType::ElementwiseDivGrad),
            OpType::Relu => Some(OpType::ReluGrad),
            OpType::Gelu => Some(OpType::GeluGrad),
            OpType::Silu => Some(OpType::SiluGrad),
            OpType::Square => Some(OpType::SquareGrad),
            OpType::Scale => Some(OpType::ScaleGrad),
            OpType::Cast => Some(OpType::CastGrad),
            OpType::Assign => Some(OpType::AssignGrad),
            OpType::Dropout => Some(OpType::DropoutGrad),
            OpType::Softmax => Some(OpType::SoftmaxGrad),
            OpType::FusedSoftmaxMaskUpperTriangle => {
                Some(OpType::FusedSoftmaxMaskUpperTriangleGrad)
            }
            OpType::LayerNorm => Some(OpType::LayerNormGrad),
            OpType::LookupTableV2 => Some(OpType::LookupTableV2Grad),
            OpType::Reshape2 => Some(OpType::Reshape2Grad),
            OpType::Transpose2 => Some(OpType::Transpose2Grad),
            OpType::Split => Some(OpType::SplitGrad),
            OpType::Concat => Some(OpType::ConcatGrad),
            OpType::ReduceSum => Some(OpType::ReduceSumGrad),
            OpType::ReduceMean => Some(OpType::ReduceMeanGrad),
            OpType::Mean => Some(OpType::MeanGrad),
            OpType::SoftmaxWithCrossEntropy => Some(OpType::SoftmaxWithCrossEntropyGrad),
            OpType::FillConstant => None,
            OpType::MatmulV2Grad
            | OpType::ElementwiseAddGrad
            | OpType::ElementwiseSubGrad
            | OpType::ElementwiseMulGrad
            | OpType::ElementwiseDivGrad
            | OpType::ReluGrad
            | OpType::GeluGrad
            | OpType::SiluGrad
            | OpType::SquareGrad
            | OpType::ScaleGrad
            | OpType::CastGrad
            | OpType::AssignGrad
            | OpType::DropoutGrad
            | OpType::SoftmaxGrad
            | OpType::FusedSoftmaxMaskUpperTriangleGrad
            | OpType::LayerNormGrad
            | OpType::LookupTableV2Grad
            | OpType::Reshape2Grad
            | OpType::Transpose2Grad
            | OpType::SplitGrad
            | OpType::ConcatGrad
            | OpType::ReduceSumGrad
            | OpType::ReduceMeanGrad
            | OpType::MeanGrad
            | OpType::SoftmaxWithCrossEntropyGrad
            | OpType::Sum
            | OpType::Sqrt
            | OpType::ElementwiseMax
            | OpType::SquaredL2Norm
            | OpType::Sgd
            | OpType::Momentum
            | OpType::Adam
            | OpType::AdamW
            | OpType::CheckFiniteAndUnscale
            | OpType::UpdateLossScaling
            | OpType::AllReduce
            | OpType::AllGather
            | OpType::ReduceScatter
            | OpType::AllToAll
            | OpType::Send
            | OpType::Recv
            | OpType::Slice
            | OpType::CEmbedding
            | OpType::CEmbeddingGrad
            | OpType::CSoftmaxWithCrossEntropy
            | OpType::CSoftmaxWithCrossEntropyGrad => None,
        }
    }

    /// The forward op of a grad op (`None` for every other op).
    pub fn forward(self) -> Option<OpType> {
        match self {
            OpType::MatmulV2Grad => Some(OpType::MatmulV2),
            OpType::ElementwiseAddGrad => Some(OpType::ElementwiseAdd),
            OpType::ElementwiseSubGrad => Some(OpType::ElementwiseSub),
            OpType::ElementwiseMulGrad => Some(OpType::ElementwiseMul),
            OpType::ElementwiseDivGrad => Some(OpType::ElementwiseDiv),
            OpType::ReluGrad => Some(OpType::Relu),
            OpType::GeluGrad => Some(OpType::Gelu),
            OpType::SiluGrad => Some(OpType::Silu),
            OpType::SquareGrad => Some(OpType::Square),
            OpType::ScaleGrad => Some(OpType::Scale),
            OpType::CastGrad => Some(OpType::Cast),
            OpType::AssignGrad => Some(OpType::Assign),
            OpType::DropoutGrad => Some(OpType::Dropout),
            OpType::SoftmaxGrad => Some(OpType::Softmax),
            OpType::FusedSoftmaxMaskUpperTriangleGrad => {
                Some(OpType::FusedSoftmaxMaskUpperTriangle)
            }
            OpType::LayerNormGrad => Some(OpType::LayerNorm),
            OpType::LookupTableV2Grad => Some(OpType::LookupTableV2),
            OpType::Reshape2Grad => Some(OpType::Reshape2),
            OpType::Transpose2Grad => Some(OpType::Transpose2),
            OpType::SplitGrad => Some(OpType::Split),
            OpType::ConcatGrad => Some(OpType::Concat),
            OpType::ReduceSumGrad => Some(OpType::ReduceSum),
            OpType::ReduceMeanGrad => Some(OpType::ReduceMean),
            OpType::MeanGrad => Some(OpType::Mean),
            OpType::SoftmaxWithCrossEntropyGrad => Some(OpType::SoftmaxWithCrossEntropy),
            OpType::MatmulV2
            | OpType::ElementwiseAdd
            | OpType::ElementwiseSub
            | OpType::ElementwiseMul
            | OpType::ElementwiseDiv
            | OpType::Relu
            | OpType::Gelu
            | OpType::Silu
            | OpType::Square
            | OpType::Scale
            | OpType::Cast
            | OpType::Assign
            | OpType::Dropout
            | OpType::Softmax
            | OpType::FusedSoftmaxMaskUpperTriangle
            | OpType::LayerNorm
            | OpType::LookupTableV2
            | OpType::Reshape2
            | OpType::Transpose2
            | OpType::Split
            | OpType::Concat
            | OpType::ReduceSum
            | OpType::ReduceMean
            | OpType::Mean
            | OpType::SoftmaxWithCrossEntropy
            | OpType::FillConstant
            | OpType::Sum
            | OpType::Sqrt
            | OpType::ElementwiseMax
            | OpType::SquaredL2Norm
            | OpType::Sgd
            | OpType::Momentum
            | OpType::Adam
            | OpType::AdamW
            | OpType::CheckFiniteAndUnscale
            | OpType::UpdateLossScaling
            | OpType::AllReduce
            | OpType::AllGather
            | OpType::ReduceScatter
            | OpType::AllToAll
            | OpType::Send
            | OpType::Recv
            | OpType::Slice
            | OpType::CEmbedding
            | OpType::CEmbeddingGrad
            | OpType::CSoftmaxWithCrossEntropy
            | OpType::CSoftmaxWithCrossEntropyGrad => None,
        }
    }

    /// What family an op belongs to.
    pub fn class(self) -> OpClass {
        match self {
            OpType::MatmulV2
            | OpType::ElementwiseAdd
            | OpType::ElementwiseSub
            | OpType::ElementwiseMul
            | OpType::ElementwiseDiv
            | OpType::Relu
            | OpType::Gelu
            | OpType::Silu
            | OpType::Square
            | OpType::Scale
            | OpType::Cast
            | OpType::Assign
            | OpType::Dropout
            | OpType::Softmax
            | OpType::FusedSoftmaxMaskUpperTriangle
            | OpType::LayerNorm
            | OpType::LookupTableV2
            | OpType::Reshape2
            | OpType::Transpose2
            | OpType::Split
            | OpType::Concat
            | OpType::ReduceSum
            | OpType::ReduceMean
            | OpType::Mean
            | OpType::SoftmaxWithCrossEntropy
            | OpType::FillConstant => OpClass::Forward,
            OpType::MatmulV2Grad
            | OpType::ElementwiseAddGrad
            | OpType::ElementwiseSubGrad
            | OpType::ElementwiseMulGrad
            | OpType::ElementwiseDivGrad
            | OpType::ReluGrad
            | OpType::GeluGrad
            | OpType::SiluGrad
            | OpType::SquareGrad
            | OpType::ScaleGrad
            | OpType::CastGrad
            | OpType::AssignGrad
            | OpType::DropoutGrad
            | OpType::SoftmaxGrad
            | OpType::FusedSoftmaxMaskUpperTriangleGrad
            | OpType::LayerNormGrad
            | OpType::LookupTableV2Grad
            | OpType::Reshape2Grad
            | OpType::Transpose2Grad
            | OpType::SplitGrad
            | OpType::ConcatGrad
            | OpType::ReduceSumGrad
            | OpType::ReduceMeanGrad
            | OpType::MeanGrad
            | OpType::SoftmaxWithCrossEntropyGrad => OpClass::Grad,
            OpType::Sum | OpType::Sqrt | OpType::ElementwiseMax | OpType::SquaredL2Norm => {
                OpClass::Math
            }
            OpType::Sgd | OpType::Momentum | OpType::Adam | OpType::AdamW => OpClass::Optimizer,
            OpType::CheckFiniteAndUnscale | OpType::UpdateLossScaling => OpClass::Amp,
            OpType::AllReduce
            | OpType::AllGather
            | OpType::ReduceScatter
            | OpType::AllToAll
            | OpType::Send
            | OpType::Recv => OpClass::Collective,
            OpType::Slice
            | OpType::CEmbedding
            | OpType::CEmbeddingGrad
            | OpType::CSoftmaxWithCrossEntropy
            | OpType::CSoftmaxWithCrossEntropyGrad => OpClass::RankLocal,
        }
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
