//! Why a rule refused: one variant per failure, with the op, attribute, ranks and mesh axes
//! at fault. Where Paddle raises in the same situation the message is Paddle's own words,
//! so a reader can match ours to theirs (the probe cases compare them).

use crate::dist::MeshAxis;
use crate::ir::infer::InferError;
use crate::ir::OpType;

/// A rule failure (Paddle raises in the same situations).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SpmdError {
    /// An attribute the IR's inference refuses, read while choosing the rule.
    #[error("{op}: {error}")]
    Attr { op: OpType, error: InferError },
    #[error("{op}: {attr} {value} must not be negative")]
    Negative {
        op: OpType,
        attr: &'static str,
        value: i64,
    },
    #[error("{0}: missing X")]
    MissingInput(OpType),
    #[error(
        "{0}: is emitted by the planner; a plan's program holds forward ops (completion of the \
         backward and optimizer ops copies from their forward ops)"
    )]
    PlannerOp(OpType),
    /// An op whose planning this build leaves out (the playground's modules, under their
    /// size budget).
    #[error("{0} is planned by the command-line tool (`shardlab plan`); the playground does not carry it yet")]
    NotInThisBuild(&'static str),
    #[error("{rule}: expected at least {want} tensors, got {got}")]
    Arity {
        rule: &'static str,
        want: usize,
        got: usize,
    },
    #[error("{what}: the tensor's rank [{rank}] and its dims_mapping size [{dims}] do not match")]
    RankMismatch {
        what: &'static str,
        rank: usize,
        dims: usize,
    },
    #[error("{what} must have rank 4 ([batch, seq, heads, head_dim]), got rank {rank}")]
    RotaryRank { what: &'static str, rank: usize },
    #[error(
        "Row-wise parallel of embedding table does NOT support Padding Idx, but got padding_idx \
         [{padding_idx}] and row axis of embedding table is sharded by mesh dimension [{}].",
        joined(.axes)
    )]
    PaddedVocabSharded {
        padding_idx: i64,
        axes: Vec<MeshAxis>,
    },
    #[error("matmul: unsupported ranks x {x}, y {y}")]
    MatmulRanks { x: usize, y: usize },
    #[error(
        "matmul: the max rank of the inputs [{inputs}] should equal the output rank [{output}]"
    )]
    MatmulOutputRank { inputs: usize, output: usize },
    #[error(
        "Trying to shard the softmax_normalize axis of the input tensor, but the soft_label is \
         set as True, which is not supported yet!"
    )]
    SoftLabelSharded,
    #[error("The class axis [{axis}] of the input can be sharded only when it is the last axis (rank {rank}).")]
    ClassAxisNotLast { axis: usize, rank: usize },
    #[error("reshape: shapes {src:?} and {dst:?} hold different numbers of elements")]
    ReshapeElements { src: Vec<usize>, dst: Vec<usize> },
    #[error("transpose: perm {perm:?} is not a permutation of {rank} dims")]
    NotPermutation { perm: Vec<usize>, rank: usize },
    #[error("Multiple Tensor Axes [{}] is sharded by same mesh dimension [{mesh_axis}].", joined(.letters))]
    SharedMeshAxis {
        letters: Vec<char>,
        mesh_axis: MeshAxis,
    },
    #[error(
        "Tensor Axis[{letter}] is Sharded by two different mesh dimension [{}] and [{}].",
        joined(.new), joined(.current)
    )]
    TwoMeshAxes {
        letter: char,
        new: Vec<MeshAxis>,
        current: Vec<MeshAxis>,
    },
    #[error("concat/stack: inputs must have the same rank as their dims mappings")]
    ConcatRank,
    #[error("stack: axis {axis} is out of range for rank {rank}")]
    StackAxis { axis: usize, rank: usize },
}

/// `a,b,c`, as Paddle prints a list in its messages.
fn joined<T: std::fmt::Display>(items: &[T]) -> String {
    items
        .iter()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(",")
}
