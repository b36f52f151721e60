//! Why the planner inserted an op, and the namescope Paddle writes for it. Every inserted
//! op's namescope comes from `Purpose::namescope`, and every reader (the ledger, the web
//! view, the seed's predicates) decodes it with `Op::purpose`, so the strings live here only.

use super::{Op, OpType};
use serde::Serialize;

/// The purpose of an inserted op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Purpose {
    /// Gradient synchronisation over the batch axes (all-reduce + 1/N scale).
    DataParallel,
    /// Completing partial sums of a tensor-parallel op.
    TensorParallel,
    /// Changing a tensor's layout to what its consumer wants.
    Reshard,
    /// Moving activations and gradients between pipeline stages (send/recv). Paddle writes
    /// these under the reshard namescope, and so do we.
    Pipeline,
    /// Agreeing on AMP's found_inf across the mesh.
    AmpFlag,
    /// Summing the squared-norm shards for global-norm clipping.
    GlobalNorm,
    /// ZeRO / sharding: gradients reduce-scattered to their owners, parameters all-gathered
    /// from their shards (Paddle's sharding pass writes this namescope).
    Sharding,
    /// Summing a tied parameter's gradient over the pipeline stages that hold a copy
    /// (Megatron's embedding group; the namescope is ours: Paddle's static planner has no
    /// copies, see `passes::pipeline::tied`).
    TiedParameter,
    /// Ring attention's K/V blocks (and, backward, their gradients) passed around the
    /// context-parallel group (the namescope is ours: Paddle's static planner has no ring
    /// attention).
    ContextParallel,
}

impl Purpose {
    /// Every purpose.
    pub const ALL: [Purpose; 9] = [
        Purpose::DataParallel,
        Purpose::TensorParallel,
        Purpose::Reshard,
        Purpose::Pipeline,
        Purpose::AmpFlag,
        Purpose::GlobalNorm,
        Purpose::Sharding,
        Purpose::TiedParameter,
        Purpose::ContextParallel,
    ];

    /// Paddle's namescope for ops of this purpose.
    pub fn namescope(self) -> &'static str {
        match self {
            Purpose::DataParallel => "/auto_parallel/data_parallel",
            Purpose::TensorParallel => "/auto_parallel/tensor_parallel",
            Purpose::Reshard | Purpose::Pipeline => "/auto_parallel/reshard",
            Purpose::AmpFlag => "/auto_parallel/amp_flag_synchronization",
            Purpose::GlobalNorm => "/auto_parallel/global_norm_synchronization",
            Purpose::Sharding => "/auto_parallel/sharding",
            Purpose::TiedParameter => "/auto_parallel/tied_parameter",
            Purpose::ContextParallel => "/auto_parallel/context_parallel",
        }
    }

    /// A short name for people.
    pub fn name(self) -> &'static str {
        match self {
            Purpose::DataParallel => "data parallel",
            Purpose::TensorParallel => "tensor parallel",
            Purpose::Reshard => "reshard",
            Purpose::Pipeline => "pipeline",
            Purpose::AmpFlag => "AMP flag",
            Purpose::GlobalNorm => "global norm",
            Purpose::Sharding => "ZeRO sharding",
            Purpose::TiedParameter => "tied parameter",
            Purpose::ContextParallel => "context parallel",
        }
    }
}

impl Op {
    /// The purpose the op's namescope records, if it was inserted for one. Send and recv
    /// under the reshard namescope move tensors between pipeline stages.
    pub fn purpose(&self) -> Option<Purpose> {
        let p = Purpose::ALL
            .into_iter()
            .find(|p| *p != Purpose::Pipeline && p.namescope() == self.namescope)?;
        let stage_move = matches!(self.ty, OpType::Send | OpType::Recv);
        Some(if p == Purpose::Reshard && stage_move {
            Purpose::Pipeline
        } else {
            p
        })
    }

    /// Sets the namescope of `purpose`.
    pub fn with_purpose(mut self, purpose: Purpose) -> Op {
        self.namescope = purpose.namescope().into();
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namescopes_decode_to_their_purpose() {
        for p in Purpose::ALL {
            let ty = if p == Purpose::Pipeline {
                OpType::Send
            } else {
                OpType::AllReduce
            };
            assert_eq!(Op::new(ty).with_purpose(p).purpose(), Some(p));
        }
        assert_eq!(
            Op::new(OpType::Recv)
                .with_purpose(Purpose::Reshard)
                .purpose(),
            Some(Purpose::Pipeline)
        );
        assert_eq!(Op::new(OpType::AllReduce).purpose(), None);
    }
}
