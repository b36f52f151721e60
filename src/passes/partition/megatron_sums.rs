//! Megatron's backward sums (`PartitionOptions::defer_partial_sums`): a column-parallel
//! input gradient that is summed with others stays partial through the sum, which is
//! all-reduced once (2 tensor-parallel all-reduces per transformer layer backward instead
//! of Paddle's 4).

use super::rank::{PartitionError, RankBuilder};
use super::{Marks, PartitionOptions};
use crate::dist::{DistImpl, MeshAxis, OperatorDistAttr, ReduceType};
use crate::ir::{Attr, Op, OpType, Purpose};
use crate::passes::dist_program::DistProgram;
use std::sync::Arc;

/// Megatron sums: a column-parallel matmul's input gradient that is summed later stays
/// partial until the sum.
pub(super) fn defers_its_sum(
    opts: &PartitionOptions,
    imp: DistImpl,
    op: &Op,
    marks: &Marks,
) -> bool {
    opts.defer_partial_sums
        && imp == DistImpl::MatmulColumn
        && op.ty == OpType::MatmulV2Grad
        && op
            .outputs
            .first()
            .and_then(|s| s.first())
            .is_some_and(|g| marks.summed[g.index()])
}

/// A backward sum whose inputs are all partial over the same mesh axes (SUM) and already in
/// the output's dims: add them locally and all-reduce the sum once. Returns false (and
/// emits nothing) when that does not hold; the caller then settles each input first.
pub(super) fn sum_partials(
    b: &mut RankBuilder,
    op: &Arc<Op>,
    attr: &OperatorDistAttr,
    marks: &Marks,
) -> Result<bool, PartitionError> {
    let xs = op.input("X");
    let (Some(&first), Some(&out)) = (xs.first(), op.output("Out").first()) else {
        return Ok(false);
    };
    let Some(wanted_out) = attr.outputs.first().and_then(|s| s.first()) else {
        return Ok(false);
    };
    let partial = b.cur[first.index()].partial;
    if partial.is_empty()
        || partial.iter().any(|p| p.1 != ReduceType::Sum)
        || marks.param_grad[out.index()]
        || b.cur[out.index()].dims != wanted_out.dims
    {
        return Ok(false);
    }
    let all_alike = xs.iter().enumerate().all(|(j, x)| {
        let cur = &b.cur[x.index()];
        let wanted = attr.inputs.first().and_then(|s| s.get(j));
        cur.partial == partial
            && cur.dims == wanted_out.dims
            && wanted.is_some_and(|w| w.dims == cur.dims)
    });
    if !all_alike {
        return Ok(false);
    }
    b.local(Arc::clone(op));
    let axes: Vec<MeshAxis> = partial.iter().map(|p| p.0).collect();
    b.collective(
        OpType::AllReduce,
        out,
        out,
        &axes,
        vec![("reduce_type", Attr::Str("SUM".into()))],
        Purpose::TensorParallel,
    );
    b.cur[out.index()] = DistProgram::settled(wanted_out);
    Ok(true)
}
