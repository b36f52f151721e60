//! The op registry: every differentiable op declared once, in the file of its family.
//!
//! A declaration ([`OpDef`]) holds each facet that the IR can state as data or as a
//! function of the IR: its text and Paddle names and its grad op's, its slots and
//! attributes, its shape inference, the family that every layer above groups it by (the
//! SPMD rule, the distributed implementations, completion, the exporter's lowering
//! strategy), the forward outputs its grad reads, the inputs its grad differentiates, and
//! its FLOPs forward and backward. Predicates such as [`ForwardOp::is_elementwise`] come
//! from these declarations; no layer writes a list of op names again.
//!
//! What needs a layer above the IR (a kernel needs the executor's tensors, a lowering the
//! exporter's emitter, a rule body the SPMD vocabulary) is one exhaustive `match` over
//! [`ForwardOp`] or [`Family`] in that layer, so the compiler names every facet a new op
//! still lacks; ARCHITECTURE.md's "Anatomy of an op" lists them, with matmul as the worked
//! example.
//!
//! The one list of ops is the [`forward_ops!`] invocation below: it makes the enum, `ALL`,
//! the flat `OpType` constants and the dispatch to each declaration.

pub mod attention;
mod binary;
mod embedding;
mod loss;
mod matmul;
mod moe;
mod norm;
mod reduce;
mod repeat;
mod rotary;
mod shape;
mod softmax;
mod unary;

use super::op_type::OpType;
use super::program::Op;
use super::schema::{AttrSpec, SlotSpec};
use super::types::TensorType;

/// Shape and dtype inference: the output types per output slot from the input types per
/// input slot. Errors are messages naming the slot, shapes and attribute at fault.
pub type InferFn =
    fn(&Op, &[Vec<&TensorType>]) -> Result<Vec<Vec<TensorType>>, super::infer_error::InferError>;

/// What an op is, as the layers above group ops: each family shares an SPMD rule, a set of
/// distributed implementations, a completion of its grad and an export strategy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// `matmul_v2`: column-, row- or replicate-parallel.
    Matmul,
    /// Element by element with broadcasting (`elementwise_*`).
    ElementwiseBinary,
    /// Element by element, one input (the output has the input's shape and any layout).
    ElementwiseUnary,
    /// Softmax over one attribute-given axis.
    Softmax,
    /// Softmax over the last two axes with the upper triangle masked.
    MaskedSoftmax,
    /// A normalisation over the trailing dims from `begin_norm_axis` (layer_norm, rms_norm):
    /// the leading dims keep their layout, the normalised ones are replicated.
    Norm,
    /// A table lookup (`lookup_table_v2`): vocab-parallel when the table's rows are split.
    Embedding,
    Reshape,
    Transpose,
    Split,
    Concat,
    /// A sum or mean over attribute-given axes.
    Reduce,
    /// The mean of every element (a scalar).
    Mean,
    /// Softmax and cross-entropy fused: vocab-parallel when the class axis is split.
    CrossEntropy,
    /// A rotary position embedding: pairs within the last dim rotate together, so that dim
    /// is replicated.
    Rotary,
    /// Slices of one dim repeated in place (`repeat_interleave`).
    Repeat,
    /// A Mixture-of-Experts layer's routing: tokens to their top-k experts' slots.
    MoeDispatch,
    /// The experts' outputs back to their tokens, weighted by the gates.
    MoeCombine,
    /// Scaled-dot-product attention in one op (`flash_attn`): the planner's seam for
    /// context parallelism.
    Attention,
}

/// An element count an op's work is proportional to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Numel {
    /// The elements of an input slot (the grad op's `Out@GRAD` is an input).
    In(&'static str),
    /// The elements of an output slot.
    Out(&'static str),
    /// A matmul's multiply-adds: output elements × the contracted length.
    MatmulTerms,
    /// A `moe_combine`'s multiply-adds: the tokens' kept choices times the width (S·k·H).
    CombineTerms,
    /// Attention's multiply-adds per matmul: batch × heads × the (query, key) pairs the
    /// mask keeps × head_dim.
    AttentionTerms,
}

/// FLOPs as a sum of coefficients × element counts (the sources of each coefficient are in
/// `docs/cost.md`).
pub type Formula = &'static [(f64, Numel)];

/// The FLOPs of an op and of its grad op.
#[derive(Clone, Copy, Debug)]
pub struct Flops {
    pub forward: Formula,
    pub grad: Formula,
}

/// One differentiable op, every facet the IR can state.
#[derive(Debug)]
pub struct OpDef {
    /// The text name, which is Paddle's (the static graph's op type).
    pub name: &'static str,
    /// The grad op's name (`<name>_grad`).
    pub grad_name: &'static str,
    /// Paddle 3's PIR name (`pd_op.…`), what an imported program calls it.
    pub pir_name: &'static str,
    pub family: Family,
    pub inputs: &'static [SlotSpec],
    pub outputs: &'static [SlotSpec],
    /// The attributes the op takes (its grad op takes the same).
    pub attrs: &'static [AttrSpec],
    pub infer: InferFn,
    /// The forward outputs the grad reads besides the forward inputs (dropout's mask,
    /// softmax's output, layer norm's statistics).
    pub saves: &'static [&'static str],
    /// The input slots the grad differentiates (the others, such as ids and labels, are
    /// integer or constant).
    pub differentiates: &'static [&'static str],
    /// The forward inputs the grad takes only for their shapes, as Paddle declares them
    /// (`DECLARE_NO_NEED_BUFFER_VARS_INFERER`: an add's X and Y, a reshape's X, a lookup's
    /// table). The memory model does not keep them alive for the grad, so a layer's saved
    /// activations are what Korthikanti et al. count (`tests/activations.rs`).
    pub shape_only: &'static [&'static str],
    pub flops: Flops,
}

/// The list of ops: `Variant / GradConstant => declaration`. It makes [`ForwardOp`], its
/// `ALL`, the flat constants `OpType::Variant` and `OpType::GradConstant`, and
/// [`ForwardOp::def`].
macro_rules! forward_ops {
    ($($variant:ident / $grad:ident => $def:path,)*) => {
        /// The differentiable forward ops (each has one grad op, `OpType::Grad`).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum ForwardOp {
            $($variant,)*
        }

        impl ForwardOp {
            /// Every forward op, in declaration order.
            pub const ALL: &'static [ForwardOp] = &[$(ForwardOp::$variant,)*];

            /// The op's declaration.
            pub fn def(self) -> &'static OpDef {
                match self {
                    $(ForwardOp::$variant => &$def,)*
                }
            }
        }

        /// The flat names, for comparisons (`op.ty == OpType::MatmulV2Grad`); a `match`
        /// names the families so it stays exhaustive.
        #[allow(non_upper_case_globals)]
        impl OpType {
            $(
                pub const $variant: OpType = OpType::Forward(ForwardOp::$variant);
                pub const $grad: OpType = OpType::Grad(ForwardOp::$variant);
            )*
        }
    };
}

forward_ops! {
    MatmulV2 / MatmulV2Grad => matmul::MATMUL_V2,
    ElementwiseAdd / ElementwiseAddGrad => binary::ADD,
    ElementwiseSub / ElementwiseSubGrad => binary::SUB,
    ElementwiseMul / ElementwiseMulGrad => binary::MUL,
    ElementwiseDiv / ElementwiseDivGrad => binary::DIV,
    Relu / ReluGrad => unary::RELU,
    Gelu / GeluGrad => unary::GELU,
    Silu / SiluGrad => unary::SILU,
    Sigmoid / SigmoidGrad => unary::SIGMOID,
    Square / SquareGrad => unary::SQUARE,
    Scale / ScaleGrad => unary::SCALE,
    Cast / CastGrad => unary::CAST,
    Assign / AssignGrad => unary::ASSIGN,
    Dropout / DropoutGrad => unary::DROPOUT,
    Softmax / SoftmaxGrad => softmax::SOFTMAX,
    FusedSoftmaxMaskUpperTriangle / FusedSoftmaxMaskUpperTriangleGrad => softmax::MASKED,
    LayerNorm / LayerNormGrad => norm::LAYER_NORM,
    RmsNorm / RmsNormGrad => norm::RMS_NORM,
    LookupTableV2 / LookupTableV2Grad => embedding::LOOKUP_TABLE_V2,
    Reshape2 / Reshape2Grad => shape::RESHAPE2,
    Transpose2 / Transpose2Grad => shape::TRANSPOSE2,
    Split / SplitGrad => shape::SPLIT,
    Concat / ConcatGrad => shape::CONCAT,
    ReduceSum / ReduceSumGrad => reduce::REDUCE_SUM,
    ReduceMean / ReduceMeanGrad => reduce::REDUCE_MEAN,
    Mean / MeanGrad => reduce::MEAN,
    SoftmaxWithCrossEntropy / SoftmaxWithCrossEntropyGrad => loss::SOFTMAX_WITH_CROSS_ENTROPY,
    FusedRotaryPositionEmbedding / FusedRotaryPositionEmbeddingGrad => rotary::FUSED_ROTARY_POSITION_EMBEDDING,
    RepeatInterleave / RepeatInterleaveGrad => repeat::REPEAT_INTERLEAVE,
    MoeDispatch / MoeDispatchGrad => moe::MOE_DISPATCH,
    MoeCombine / MoeCombineGrad => moe::MOE_COMBINE,
    FlashAttn / FlashAttnGrad => attention::FLASH_ATTN,
}

impl ForwardOp {
    /// The op's family.
    pub fn family(self) -> Family {
        self.def().family
    }

    /// Paddle's names of the op and of its grad op.
    pub fn names(self) -> (&'static str, &'static str) {
        let def = self.def();
        (def.name, def.grad_name)
    }

    /// Unary ops applied element by element (the output has the input's shape and any
    /// layout of it).
    pub fn is_elementwise_unary(self) -> bool {
        self.family() == Family::ElementwiseUnary
    }

    /// Binary ops applied element by element with broadcasting (`elementwise_*`).
    pub fn is_elementwise_binary(self) -> bool {
        self.family() == Family::ElementwiseBinary
    }

    /// Element by element, unary or binary.
    pub fn is_elementwise(self) -> bool {
        self.is_elementwise_unary() || self.is_elementwise_binary()
    }
}
