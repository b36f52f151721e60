//! Which distributed implementation an op runs (Paddle's `DistributedOperatorImpl`, named by
//! its container and index). Completion chooses one and stores it on the op's dist attr;
//! the partitioner looks up its compatibility and lowering by this value. It is the one form
//! of an op's implementation: Paddle's `(impl_type, impl_idx)` pair exists only at the
//! boundary (`paddle_id`), in JSON and in the comparison with Paddle's dumps.

use serde::{Deserialize, Serialize};

/// One implementation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DistImpl {
    /// `matmul_v2` #0: Y split on its columns (`[-, mp]`).
    MatmulColumn,
    /// `matmul_v2` #1: Y split on the contracted dim (`[mp, -]`): all-reduce after.
    MatmulRow,
    /// `matmul_v2` #2: Y whole.
    MatmulReplicate,
    /// `lookup_table_v2` #0: the table split on its rows (`c_embedding`, then all-reduce).
    EmbeddingVocab,
    /// `softmax_with_cross_entropy` #1: the class axis split
    /// (`c_softmax_with_cross_entropy`).
    CrossEntropyVocab,
    /// `reshape2` #0: the shape attribute rewritten to local shapes.
    Reshape,
    /// `softmax` #0: the softmax axis whole.
    Softmax,
    /// `transpose2` #0.
    Transpose,
    /// `elementwise` #0: inputs and outputs laid out alike.
    Elementwise,
    /// `default` #0: computes on local shards; partial outputs stay partial.
    #[default]
    Default,
}

impl DistImpl {
    /// Every implementation.
    pub const ALL: [DistImpl; 10] = [
        DistImpl::MatmulColumn,
        DistImpl::MatmulRow,
        DistImpl::MatmulReplicate,
        DistImpl::EmbeddingVocab,
        DistImpl::CrossEntropyVocab,
        DistImpl::Reshape,
        DistImpl::Softmax,
        DistImpl::Transpose,
        DistImpl::Elementwise,
        DistImpl::Default,
    ];

    /// Paddle's container name and index.
    pub fn paddle_id(self) -> (&'static str, usize) {
        match self {
            DistImpl::MatmulColumn => ("matmul_v2", 0),
            DistImpl::MatmulRow => ("matmul_v2", 1),
            DistImpl::MatmulReplicate => ("matmul_v2", 2),
            DistImpl::EmbeddingVocab => ("lookup_table_v2", 0),
            // Paddle's impl 0 (class axis whole) is what `default` does.
            DistImpl::CrossEntropyVocab => ("softmax_with_cross_entropy", 1),
            DistImpl::Reshape => ("reshape2", 0),
            DistImpl::Softmax => ("softmax", 0),
            DistImpl::Transpose => ("transpose2", 0),
            DistImpl::Elementwise => ("elementwise", 0),
            DistImpl::Default => ("default", 0),
        }
    }

    /// The implementation Paddle names `(container, index)`.
    pub fn from_paddle_id(container: &str, index: usize) -> Option<DistImpl> {
        DistImpl::ALL
            .into_iter()
            .find(|i| i.paddle_id() == (container, index))
    }

    /// What it does, in a word or two (the completion printout).
    pub fn describe(self) -> &'static str {
        match self {
            DistImpl::MatmulColumn => "column parallel",
            DistImpl::MatmulRow => "row parallel",
            DistImpl::MatmulReplicate => "replicate parallel",
            DistImpl::EmbeddingVocab | DistImpl::CrossEntropyVocab => "vocab parallel",
            DistImpl::Elementwise => "elementwise",
            DistImpl::Reshape | DistImpl::Softmax | DistImpl::Transpose | DistImpl::Default => {
                "default"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paddle_ids_are_distinct_and_round_trip() {
        for i in DistImpl::ALL {
            let (c, k) = i.paddle_id();
            assert_eq!(DistImpl::from_paddle_id(c, k), Some(i));
        }
        assert_eq!(DistImpl::from_paddle_id("matmul_v2", 3), None);
    }
}
