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

use crate::dist::{DistImpl, OperatorDistAttr};
use crate::ir::{Family, Op, OpType, Program};

/// Whether the op's wanted input attrs suit `imp`.
pub fn is_input_compatible(imp: DistImpl, op: &Op, attr: &OperatorDistAttr) -> bool {
    let input = |slot: usize| attr.inputs.get(slot).and_then(|s| s.first());
    match imp {
        DistImpl::MatmulColumn | DistImpl::MatmulRow | DistImpl::MatmulReplicate => {
            let Some(y) = input(1) else { return false };
            let n = y.dims.len();
            if n < 2 {
                return imp == DistImpl::MatmulReplicate;
            }
            let (k, col) = if op.attr_bool("trans_y", false) {
                (n - 1, n - 2)
            } else {
                (n - 2, n - 1)
            };
            let (k_split, col_split) = (!y.dims[k].is_empty(), !y.dims[col].is_empty());
            match imp {
                DistImpl::MatmulColumn => !k_split && col_split,
                DistImpl::MatmulRow => k_split,
                // The arm is entered for the three matmul impls only.
                DistImpl::MatmulReplicate
                | DistImpl::EmbeddingVocab
                | DistImpl::CrossEntropyVocab
                | DistImpl::Reshape
                | DistImpl::Softmax
                | DistImpl::Transpose
                | DistImpl::Elementwise
                | DistImpl::Default => !k_split && !col_split,
            }
        }
        DistImpl::EmbeddingVocab => {
            input(0).is_some_and(|w| w.dims.first().is_some_and(|a| !a.is_empty()))
        }
        DistImpl::CrossEntropyVocab => {
            let Some(logits) = input(0) else { return false };
            let n = logits.rank();
            let axis = crate::ir::infer::axis(op.attr_int("axis", -1), n, "axis");
            !op.attr_bool("soft_label", false)
                && axis.is_ok_and(|a| a + 1 == n && !logits.dims[a].is_empty())
        }
        DistImpl::Softmax => {
            let Some(x) = input(0) else { return false };
            let axis = crate::ir::infer::axis(op.attr_int("axis", -1), x.rank(), "axis");
            axis.is_ok_and(|a| x.dims[a].is_empty())
        }
        DistImpl::Elementwise => {
            let all: Vec<_> = attr.inputs.iter().flatten().map(|a| &a.dims).collect();
            all.windows(2).all(|w| w[0] == w[1])
        }
        DistImpl::Reshape | DistImpl::Transpose | DistImpl::Default => true,
    }
}

/// Whether the op's output attrs suit `imp`.
pub fn is_output_compatible(imp: DistImpl, attr: &OperatorDistAttr) -> bool {
    match imp {
        DistImpl::Elementwise => {
            let first = attr.inputs.iter().flatten().next().map(|a| &a.dims);
            attr.outputs
                .iter()
                .flatten()
                .all(|o| first.is_none_or(|d| *d == o.dims))
        }
        DistImpl::MatmulColumn
        | DistImpl::MatmulRow
        | DistImpl::MatmulReplicate
        | DistImpl::EmbeddingVocab
        | DistImpl::CrossEntropyVocab
        | DistImpl::Reshape
        | DistImpl::Softmax
        | DistImpl::Transpose
        | DistImpl::Default => true,
    }
}

/// Both.
pub fn is_compatible(imp: DistImpl, op: &Op, attr: &OperatorDistAttr) -> bool {
    is_input_compatible(imp, op, attr) && is_output_compatible(imp, attr)
}

/// The container of an op type (grad ops use their forward op's).
pub fn container_of(ty: OpType) -> &'static [DistImpl] {
    let Some(f) = ty.differentiated() else {
        return &[];
    };
    match f.family() {
        Family::Matmul => &[
            DistImpl::MatmulColumn,
            DistImpl::MatmulRow,
            DistImpl::MatmulReplicate,
        ],
        Family::Embedding => &[DistImpl::EmbeddingVocab],
        Family::CrossEntropy => &[DistImpl::CrossEntropyVocab],
        Family::Reshape => &[DistImpl::Reshape],
        Family::Softmax => &[DistImpl::Softmax],
        Family::Transpose => &[DistImpl::Transpose],
        Family::ElementwiseBinary
        | Family::ElementwiseUnary
        | Family::MaskedSoftmax
        | Family::Norm
        | Family::Split
        | Family::Concat
        | Family::Reduce
        | Family::Mean
        | Family::Rotary
        | Family::Attention
        | Family::Repeat
        | Family::MoeDispatch
        | Family::MoeCombine => &[],
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
) -> DistImpl {
    let (check_op, check_attr) = fwd.unwrap_or((op, attr));
    let own = container_of(op.ty);
    let chosen = own.iter().copied().find(|&i| i == attr.imp);
    if let Some(i) = chosen.filter(|&i| is_compatible(i, check_op, check_attr)) {
        return i;
    }
    own.iter()
        .copied()
        .chain([DistImpl::Elementwise, DistImpl::Default])
        .find(|i| {
            // The elementwise container only takes the ops it was written for.
            let elementwise_op = matches!(check_op.ty, OpType::Forward(f) if f.is_elementwise());
            (*i != DistImpl::Elementwise || elementwise_op)
                && is_compatible(*i, check_op, check_attr)
        })
        .unwrap_or(DistImpl::Default)
}
