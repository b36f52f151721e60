//! Why one op could not run on a rank: the kernels' and the interpreter's errors, typed.
//! `ExecError::Op` adds the rank and the op.

use super::comm::CommError;

/// An op's failure on one rank.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum OpError {
    #[error("`{0}` has no value (not fed and not computed)")]
    NoValue(String),
    #[error("missing input {0}")]
    MissingInput(String),
    #[error("missing group")]
    MissingGroup,
    #[error("rank {rank} is not in its group {group:?}")]
    NotInGroup { rank: u32, group: Vec<i64> },
    #[error("the member is not in its group")]
    MemberNotInGroup,
    #[error("the group's members contributed different shapes ({mine:?} and {other:?})")]
    Contributions { mine: Vec<usize>, other: Vec<usize> },
    /// A collective's group delivered mismatched shapes: a member skipped or added one.
    #[error(
        "group {group:?} is out of step: rank {odd} contributed shape {odd_shape:?} where rank \
         {common} contributed {shape:?}: {who}, so this and every later collective of the \
         group are mismatched"
    )]
    OutOfStep {
        group: Vec<u32>,
        odd: u32,
        odd_shape: Vec<usize>,
        common: u32,
        shape: Vec<usize>,
        who: String,
    },
    #[error("group {group:?}: {source}")]
    Exchange { group: Vec<u32>, source: CommError },
    #[error("send on {group:?}: {source}")]
    Send { group: Vec<u32>, source: CommError },
    #[error("recv on {group:?}: {source}")]
    Recv { group: Vec<u32>, source: CommError },
    #[error("an empty send")]
    EmptySend,
    #[error("recv on {group:?}: got shape {got:?}, expected {want:?}")]
    RecvShape {
        group: Vec<u32>,
        got: Vec<usize>,
        want: Vec<usize>,
    },
    #[error("bad {0}")]
    BadAttr(&'static str),
    /// An attribute the IR's inference refuses (an axis out of range, ...).
    #[error("{0}")]
    Attr(crate::ir::infer::InferError),
    #[error("{0} of nothing")]
    Empty(&'static str),
    #[error("cannot concatenate {first:?} and {other:?} along axis {axis}")]
    Concat {
        first: Vec<usize>,
        other: Vec<usize>,
        axis: usize,
    },
    #[error("matmul: contraction sizes differ ({0} vs {1})")]
    Contraction(usize, usize),
    #[error("matmul: batch dims do not broadcast")]
    MatmulBatch,
    #[error("matmul: operand smaller than its shape")]
    MatmulOperand,
    #[error("matmul: operands must both be f32 or both f64")]
    MatmulDtype,
    #[error("shapes do not broadcast")]
    Broadcast,
    #[error("{what}: {x:?} and its gradient {grad:?} differ in size")]
    GradShape {
        what: &'static str,
        x: Vec<usize>,
        grad: Vec<usize>,
    },
    #[error("label {label} is outside the {classes} classes")]
    Label { label: i64, classes: usize },
    #[error("Label and the row max need {rows} rows, got {label} and {max}")]
    VocabRows {
        rows: usize,
        label: usize,
        max: usize,
    },
    #[error("token id {id} is outside the {rows} rows of the embedding table")]
    TokenId { id: i64, rows: i64 },
    #[error("numel {numel} is smaller than X's {x}")]
    FlattenPad { numel: usize, x: usize },
    #[error("shape {shape:?} needs more than the buffer's {numel} elements")]
    UnpadReshape { shape: Vec<usize>, numel: usize },
    #[error("shape entry {0} is negative")]
    NegativeDim(i64),
    #[error("{0}")]
    Attention(String),
}
