//! Why an op's output types cannot be inferred: one variant per failure, carrying the
//! slot, attribute and types at fault, so a caller can say where without reading the text.
//! The op itself is added by the caller (`ProgramError::Infer`, `verify`, `rebatch`).

use super::op_type::OpType;
use super::types::TensorType;

/// Why inference refused an op; `Display` is the message the user reads. Behind a pointer:
/// inference runs for every op a builder adds, and a `Result` as wide as the widest failure
/// (four tensor types) would be copied on every success. An `Arc`, not a `Box`: errors are
/// cloned with the plans that carry them, and a deep clone of every kind would be code the
/// playground's page module downloads for nothing (4.5 KB of it).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct InferError(std::sync::Arc<InferErrorKind>);

impl InferError {
    /// Which failure, with its fields.
    pub fn kind(&self) -> &InferErrorKind {
        &self.0
    }
}

impl From<InferErrorKind> for InferError {
    fn from(kind: InferErrorKind) -> InferError {
        InferError(std::sync::Arc::new(kind))
    }
}

/// The failures of inference, one per way an op can be ill-formed.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum InferErrorKind {
    // --- Slots: how many variables an input holds.
    #[error("missing input slot")]
    MissingSlot,
    #[error("input {slot} must hold exactly one variable")]
    NotOne { slot: &'static str },
    #[error("{slot} holds more than one variable")]
    MoreThanOne { slot: &'static str },
    #[error("{slot} must hold at least one variable")]
    NoneGiven { slot: &'static str },
    #[error("{slot} needs its forward input ({count} variables) among the inputs")]
    GradWithoutForward { slot: &'static str, count: usize },
    #[error("{0} is not a planner op")]
    NotPlannerOp(OpType),

    // --- Attributes on their own.
    #[error("attribute {0} is required")]
    MissingAttr(&'static str),
    #[error("{attr} `{name}` is not one of f32, f64, i64")]
    UnknownDType { attr: &'static str, name: String },
    #[error("shape {0:?} must have positive dims")]
    NonPositiveDims(Vec<i64>),
    #[error("{what} {axis} is out of range for rank {rank}")]
    AxisOutOfRange {
        what: &'static str,
        axis: i64,
        rank: usize,
    },
    #[error("dropout_prob {0} must be in [0, 1)")]
    DropoutProb(f64),
    #[error("repeats {0} must be at least 1")]
    Repeats(i64),
    #[error("attribute group must list at least one rank")]
    EmptyGroup,
    #[error("dim {0:?} repeats an axis")]
    RepeatedDim(Vec<i64>),
    #[error("axes, starts and ends must have the same length")]
    SliceLengths,

    // --- One input against its attributes.
    #[error("{slot} must be f32 or f64, got {got}")]
    NotFloat { slot: &'static str, got: TensorType },
    #[error("repeats {repeats} makes dim {axis} of X {x} too large")]
    RepeatsTooLarge {
        repeats: usize,
        axis: usize,
        x: TensorType,
    },
    #[error("begin_norm_axis {begin} must be in [1, {}) for X {x}", x.rank())]
    BeginNormAxis { begin: i64, x: TensorType },
    #[error("X must end in two equal dims (a [.., seq, seq] score matrix), got {0}")]
    NotScoreMatrix(TensorType),
    #[error("X must be [batch, seq, heads, head_dim], got {0}")]
    NotRopeLayout(TensorType),
    #[cfg(feature = "context-parallel")]
    #[error("{slot} must be [batch, seq, heads, head_dim], got {x}")]
    NotAttentionLayout { slot: &'static str, x: TensorType },
    #[cfg(feature = "context-parallel")]
    #[error("{slot} {got} does not fit Q {q}: same dtype, batch and head_dim, heads dividing Q's, and (causal) Q's sequence length")]
    AttentionOperand {
        slot: &'static str,
        q: TensorType,
        got: TensorType,
    },
    #[error("{0} is planned by the command-line tool (`shardlab plan`); the playground does not carry it yet")]
    NotInThisBuild(&'static str),
    #[cfg(feature = "context-parallel")]
    #[error("zigzag {zigzag} must be 0 or an even number of chunks dividing the sequence ({seq})")]
    Zigzag { zigzag: i64, seq: usize },
    #[error("head_dim {head_dim} of X {x} must be even (elements rotate in pairs)")]
    OddHeadDim { head_dim: usize, x: TensorType },
    #[error("W must be a [vocab, width] table, got {0}")]
    NotTable(TensorType),
    #[error("Ids must be i64, got {0}")]
    IdsNotI64(TensorType),
    #[error("padding_idx {index} is outside the vocabulary [0, {vocab})")]
    PaddingIdx { index: i64, vocab: usize },
    #[error("shape[{index}] is 0 (copy) but X {x} has no dim {index}")]
    CopyDimMissing { index: usize, x: TensorType },
    #[error("shape {0:?} has more than one -1")]
    TwoInferredDims(Vec<i64>),
    #[error("shape[{index}] = {dim} is invalid")]
    BadTargetDim { index: usize, dim: i64 },
    #[error("shape {0:?} has more elements than a tensor may hold ({max})", max = crate::ir::MAX_ELEMENTS_TEXT)]
    TargetTooLarge(Vec<i64>),
    #[error("X {0} has more elements than a tensor may hold ({max})", max = crate::ir::MAX_ELEMENTS_TEXT)]
    InputTooLarge(TensorType),
    #[error("cannot infer -1 in {target:?}: {elements} elements of X {x}")]
    CannotInferDim {
        target: Vec<i64>,
        elements: u64,
        x: TensorType,
    },
    #[error("shape {target:?} has {total} elements but X {x} has {elements}")]
    ElementCount {
        target: Vec<i64>,
        total: u64,
        x: TensorType,
        elements: u64,
    },
    #[error("axis {perm:?} repeats {axis}")]
    RepeatedPermAxis { perm: Vec<i64>, axis: usize },
    #[error("axis {perm:?} is not a permutation of the {} dims of X {x}", x.rank())]
    NotPermutation { perm: Vec<i64>, x: TensorType },
    #[error("num {num} does not divide dim {axis} ({dim}) of X {x}")]
    NumDoesNotDivide {
        num: usize,
        axis: usize,
        dim: usize,
        x: TensorType,
    },
    #[error("sections {0:?} must be positive with at most one -1")]
    BadSections(Vec<i64>),
    #[error("sections {sections:?} do not add up to dim {axis} ({dim}) of X {x}")]
    SectionsSum {
        sections: Vec<i64>,
        axis: usize,
        dim: usize,
        x: TensorType,
    },
    #[error("exactly one of num (> 0) and sections (non-empty) must be given")]
    SplitSpec,
    #[error("{what} {axis} of X {x} does not divide by the group size {group}")]
    GroupDoesNotDivide {
        what: &'static str,
        axis: usize,
        x: TensorType,
        group: usize,
    },
    #[error("slice [{start}, {end}) is not inside dim {axis} of size {size}")]
    SliceOutside {
        start: i64,
        end: i64,
        axis: usize,
        size: i64,
    },
    #[error("pad_size must be a count of zeros to append (0 or more)")]
    NegativePad,
    #[error("numel {numel} is smaller than X {x}'s {} elements", x.numel())]
    NumelTooSmall { numel: i64, x: TensorType },
    #[error("X {x} must be a flat buffer of at least {shape:?}'s elements")]
    NotFlatBuffer { x: TensorType, shape: Vec<i64> },

    // --- Two inputs against each other.
    #[error("X is {x} but Y is {y}: dtypes differ")]
    DTypesDiffer { x: TensorType, y: TensorType },
    #[error("X ({x}) and Y ({y}) must have rank at least 1")]
    ScalarMatmul { x: TensorType, y: TensorType },
    #[error(
        "contraction dims differ: X is {x} (k = {kx}), Y is {y} (k = {ky}) \
         with trans_x={trans_x}, trans_y={trans_y}"
    )]
    Contraction {
        x: TensorType,
        y: TensorType,
        kx: usize,
        ky: usize,
        trans_x: bool,
        trans_y: bool,
    },
    #[error("batch dims of X ({x}) and Y ({y}) do not broadcast")]
    BatchBroadcast { x: TensorType, y: TensorType },
    #[error("X ({x}) and Y ({y}) do not broadcast")]
    Broadcast { x: TensorType, y: TensorType },
    #[error("axis {axis} cannot align Y ({y}) inside X ({x})")]
    Align {
        axis: i64,
        x: TensorType,
        y: TensorType,
    },
    /// A layer norm's Scale or Bias, or an RMS norm's Scale.
    #[error("{slot} must be {}[{normalized}] (the normalised size of X {x}), got {got}", x.dtype)]
    NormParam {
        slot: &'static str,
        normalized: usize,
        x: TensorType,
        got: TensorType,
    },
    #[error("{slot} must be {want} (one row per position of X {x}), got {got}")]
    RopeTable {
        slot: &'static str,
        want: TensorType,
        x: TensorType,
        got: TensorType,
    },
    #[error("X[{index}] ({x}) does not match X[0] ({first}) outside the concat axis {axis}")]
    ConcatMismatch {
        index: usize,
        x: TensorType,
        first: TensorType,
        axis: usize,
    },
    #[error("a soft Label must match Logits {logits}, got {label}")]
    SoftLabel {
        logits: TensorType,
        label: TensorType,
    },
    #[error(
        "a hard Label must be {want} (Logits {logits} with axis {axis} of size 1), got {label}"
    )]
    HardLabel {
        want: TensorType,
        logits: TensorType,
        axis: usize,
        label: TensorType,
    },
    #[error("Loss@GRAD must be the loss shape of Softmax {softmax}, got {got}")]
    LossGrad {
        softmax: TensorType,
        got: TensorType,
    },
    #[error("Grad ({grad}) must match Param ({param})")]
    GradParam { grad: TensorType, param: TensorType },
    #[error("every X must be {first}, found {other}")]
    SumMismatch {
        first: TensorType,
        other: TensorType,
    },
    #[error("W must be a [rows, width] table and Ids i64, got {w} and {ids}")]
    ShardTable { w: TensorType, ids: TensorType },
    #[error(
        "W must be a [rows, width] table, Ids i64 and Out@GRAD {want:?}, got {w}, {ids} and {got}"
    )]
    ShardTableGrad {
        want: Vec<usize>,
        w: TensorType,
        ids: TensorType,
        got: TensorType,
    },
    #[error("the tensors of a bucket must share a dtype")]
    BucketDTypes,
    #[error("the bucket's size overflows")]
    BucketOverflow,
    #[error("FusedOutput {fused} must be a flat buffer of the inputs' {total} elements")]
    FusedOutput { fused: TensorType, total: u64 },
    // --- Mixture-of-Experts routing.
    #[error("attribute `{name}` must be from 1 to {most}, got {value}")]
    MoeAttr {
        name: &'static str,
        value: i64,
        most: usize,
    },
    #[error("expected {want}, got {got}")]
    MoeShape { want: &'static str, got: TensorType },
}
