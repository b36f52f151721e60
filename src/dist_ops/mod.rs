//! Distributed operator implementations (Paddle's `DistributedOperatorImplContainer` and
//! `DistributedOperatorImpl`): per op type a container of implementations, each saying
//! which dist attrs it accepts and how it rewrites the op for one rank. Lookup goes through
//! the op's own container, then the `elementwise` container, then `default`, as in the seed.
//!
//! | container | impls |
//! |---|---|
//! | `matmul_v2` | 0 column parallel (`Y [-, mp]`), 1 row parallel (`Y [mp, -]`: all_reduce after), 2 replicate parallel |
//! | `lookup_table_v2` | 0 vocab parallel (`c_embedding` with this rank's `start_index`, then all_reduce) |
//! | `softmax_with_cross_entropy` | 1 vocab parallel (class axis split: `c_softmax_with_cross_entropy`, three all-reduces inside, logits never gathered) |
//! | `reshape2` | 0 (shape attribute rewritten to local shapes) |
//! | `softmax` | 0 (softmax axis replicated) |
//! | `transpose2` | 0 |
//! | `elementwise` | 0 (inputs and outputs with identical mappings) |
//! | `default` | 0 (computes on local shards; partial outputs stay partial for the consumer) |
//!
//! Grad ops use their forward op's container and implementation.

mod lower;

pub use lower::{after, lower};

use crate::dist::OperatorDistAttr;
use crate::ir::{Op, OpType, Program};

/// One implementation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Impl {
    MatmulColumn,
    MatmulRow,
    MatmulReplicate,
    EmbeddingVocab,
    CrossEntropyVocab,
    Reshape,
    Softmax,
    Transpose,
    Elementwise,
    Default,
}

impl Impl {
    /// Paddle's container name and index.
    pub fn id(self) -> (&'static str, usize) {
        match self {
            Impl::MatmulColumn => ("matmul_v2", 0),
            Impl::MatmulRow => ("matmul_v2", 1),
            Impl::MatmulReplicate => ("matmul_v2", 2),
            Impl::EmbeddingVocab => ("lookup_table_v2", 0),
            // Paddle's impl 0 (class axis whole) is what `default` does.
            Impl::CrossEntropyVocab => ("softmax_with_cross_entropy", 1),
            Impl::Reshape => ("reshape2", 0),
            Impl::Softmax => ("softmax", 0),
            Impl::Transpose => ("transpose2", 0),
            Impl::Elementwise => ("elementwise", 0),
            Impl::Default => ("default", 0),
        }
    }

    /// Whether the op's wanted input attrs suit this implementation.
    pub fn is_input_compatible(self, op: &Op, attr: &OperatorDistAttr) -> bool {
        let input = |slot: usize| attr.inputs.get(slot).and_then(|s| s.first());
        match self {
            Impl::MatmulColumn | Impl::MatmulRow | Impl::MatmulReplicate => {
                let Some(y) = input(1) else { return false };
                let n = y.dims.len();
                if n < 2 {
                    return self == Impl::MatmulReplicate;
                }
                let (k, col) = if op.attr_bool("trans_y", false) {
                    (n - 1, n - 2)
                } else {
                    (n - 2, n - 1)
                };
                match self {
                    Impl::MatmulColumn => y.dims[k].is_empty() && !y.dims[col].is_empty(),
                    Impl::MatmulRow => !y.dims[k].is_empty(),
                    _ => y.dims[k].is_empty() && y.dims[col].is_empty(),
                }
            }
            Impl::EmbeddingVocab => {
                input(0).is_some_and(|w| w.dims.first().is_some_and(|a| !a.is_empty()))
            }
            Impl::CrossEntropyVocab => {
                let Some(logits) = input(0) else { return false };
                let n = logits.rank();
                let axis = crate::ir::infer::axis(op.attr_int("axis", -1), n, "axis");
                !op.attr_bool("soft_label", false)
                    && axis.is_ok_and(|a| a + 1 == n && !logits.dims[a].is_empty())
            }
            Impl::Softmax => {
                let Some(x) = input(0) else { return false };
                let axis = crate::ir::infer::axis(op.attr_int("axis", -1), x.rank(), "axis");
                axis.is_ok_and(|a| x.dims[a].is_empty())
            }
            Impl::Elementwise => {
                let all: Vec<_> = attr.inputs.iter().flatten().map(|a| &a.dims).collect();
                all.windows(2).all(|w| w[0] == w[1])
            }
            Impl::Reshape | Impl::Transpose | Impl::Default => true,
        }
    }

    /// Whether the op's output attrs suit this implementation.
    pub fn is_output_compatible(self, attr: &OperatorDistAttr) -> bool {
        match self {
            Impl::Elementwise => {
                let first = attr.inputs.iter().flatten().next().map(|a| &a.dims);
                attr.outputs
                    .iter()
                    .flatten()
                    .all(|o| first.is_none_or(|d| *d == o.dims))
            }
            _ => true,
        }
    }

    /// Both.
    pub fn is_compatible(self, op: &Op, attr: &OperatorDistAttr) -> bool {
        self.is_input_compatible(op, attr) && self.is_output_compatible(attr)
    }
}

/// The container of an op type (grad ops use their forward op's).
pub fn container_of(ty: OpType) -> &'static [Impl] {
    match ty.forward().unwrap_or(ty) {
        OpType::MatmulV2 => &[Impl::MatmulColumn, Impl::MatmulRow, Impl::MatmulReplicate],
        OpType::LookupTableV2 => &[Impl::EmbeddingVocab],
        OpType::SoftmaxWithCrossEntropy => &[Impl::CrossEntropyVocab],
        OpType::Reshape2 => &[Impl::Reshape],
        OpType::Softmax => &[Impl::Softmax],
        OpType::Transpose2 => &[Impl::Transpose],
        _ => &[],
    }
}

/// The implementation for `op`: the one completion chose if it fits, else the first that
/// fits in the op's container, then `elementwise`, then `default`. A grad op is checked
/// against its forward op's attrs (`fwd`).
pub fn find_impl(
    op: &Op,
    attr: &OperatorDistAttr,
    fwd: Option<(&Op, &OperatorDistAttr)>,
    _program: &Program,
) -> Impl {
    let (check_op, check_attr) = fwd.unwrap_or((op, attr));
    let own = container_of(op.ty);
    let chosen = own
        .iter()
        .copied()
        .find(|i| i.id() == (attr.impl_type.as_str(), attr.impl_idx));
    if let Some(i) = chosen.filter(|i| i.is_compatible(check_op, check_attr)) {
        return i;
    }
    own.iter()
        .copied()
        .chain([Impl::Elementwise, Impl::Default])
        .find(|i| {
            // The elementwise container only takes the ops it was written for.
            let elementwise_op = matches!(
                check_op.ty,
                OpType::ElementwiseAdd
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
            );
            (*i != Impl::Elementwise || elementwise_op) && i.is_compatible(check_op, check_attr)
        })
        .unwrap_or(Impl::Default)
}
