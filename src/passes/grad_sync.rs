//! Gradient synchronisation (the seed's `gradient_synchronization`): after a backward op
//! produces a parameter gradient, the gradient is all-reduced (SUM) in place over each
//! data-parallel group and, when gradient scaling is on, scaled by 1/|group|:
//!
//! ```text
//! op all_reduce(X=w@GRAD) -> (Out=w@GRAD) {group=[0, 4], reduce_type="SUM"} scope="/auto_parallel/data_parallel"
//! op scale(X=w@GRAD) -> (Out=w@GRAD) {scale=0.5} scope="/auto_parallel/data_parallel"
//! ```
//! The groups come from the gradient's partial axes (the partial-producing grad ops:
//! matmul_v2_grad, elementwise_*_grad, layer_norm_grad, lookup_table_v2_grad); otherwise
//! from the mesh axis that splits the batch dim of the op's activation input, if its size
//! is above 1 and the gradient is not itself split on it. Never for optimizer ops.

use super::dist_program::DistProgram;
use super::rank::{scope, RankBuilder};
use crate::dist::OperatorDistAttr;
use crate::ir::{Attr, Op, OpRole, OpType, Program, VarKind};

/// Inserts the synchronisation of the parameter gradients `op` produced.
pub fn sync_gradients(
    b: &mut RankBuilder,
    serial: &Program,
    op: &Op,
    attr: &OperatorDistAttr,
    is_param_grad: &[bool],
    scale: bool,
) {
    if op.role != OpRole::Backward || op.ty.forward().is_none() {
        return;
    }
    for g in op
        .all_outputs()
        .filter(|g| is_param_grad.get(g.index()).copied().unwrap_or(false))
    {
        let cur = b.cur[g.index()].clone();
        let groups: Vec<usize> = if cur.is_partial() {
            cur.partial_axes()
        } else {
            // The seed's fallback: the mesh axis splitting the activation input's batch dim.
            let activation = op
                .inputs
                .iter()
                .zip(&attr.inputs)
                .flat_map(|(vs, ats)| vs.iter().zip(ats))
                .find(|(v, _)| {
                    matches!(serial.var(**v).kind, VarKind::Activation | VarKind::Input)
                });
            let batch_axis =
                activation.and_then(|(_, a)| a.dims.first().and_then(|d| d.first().copied()));
            batch_axis
                .filter(|&a| b.mesh.axis_size(a) > 1 && !cur.dims.iter().flatten().any(|&x| x == a))
                .into_iter()
                .collect()
        };
        for axis in groups {
            let n = b.mesh.axis_size(axis);
            b.collective(
                OpType::AllReduce,
                g,
                g,
                &[axis],
                vec![("reduce_type", Attr::Str("SUM".into()))],
                scope::DATA_PARALLEL,
            );
            if scale {
                let mut s = Op::new(OpType::Scale);
                s.inputs = vec![vec![g]];
                s.outputs = vec![vec![g]];
                s.attrs.insert("scale".into(), Attr::Float(1.0 / n as f64));
                s.namescope = scope::DATA_PARALLEL.into();
                b.local(s);
            }
        }
        b.cur[g.index()] = DistProgram::settled(&cur);
    }
}

/// A data-parallel gradient scaling op (the seed's `is_data_parallel_scale_op`).
pub fn is_data_parallel_scale_op(op: &Op) -> bool {
    op.ty == OpType::Scale && op.namescope == scope::DATA_PARALLEL
}

/// A data-parallel gradient all-reduce (the seed's `is_data_parallel_reduce_op`).
pub fn is_data_parallel_reduce_op(op: &Op) -> bool {
    op.ty == OpType::AllReduce
        && op.namescope == scope::DATA_PARALLEL
        && op.attr_str("reduce_type") == Some("SUM")
}

/// The all-reduce (MAX) of AMP's `found_inf` flag (the seed's `is_amp_flag_sync_op`).
pub fn is_amp_flag_sync_op(op: &Op) -> bool {
    op.ty == OpType::AllReduce
        && op.namescope == scope::AMP
        && op.attr_str("reduce_type") == Some("MAX")
}

/// The all-reduce of global-norm partial sums (the seed's `is_global_norm_sync_op`).
pub fn is_global_norm_sync_op(op: &Op) -> bool {
    op.ty == OpType::AllReduce && op.namescope == scope::GLOBAL_NORM
}
