//! A planned pipeline's cost on a topology: the simulated step, every rank's memory and
//! MFU, as one value and as the JSON document `shardlab cost --format json` prints and the
//! JavaScript API returns.

use super::device::{ComputeDType, Topology};
use super::memory::{memory, Memory, Sizing};
use super::simulate::{mfu, model_flops, simulate_with, SimOptions, SimulateError, StepTime};
use super::work::ElementBytes;
use crate::passes::pipeline::Pipeline;
use serde_json::{json, Value};

/// A pipeline's cost on a topology.
#[derive(Clone, Debug, PartialEq)]
pub struct Estimate {
    pub topology: &'static str,
    pub placement: &'static str,
    pub dtype: ComputeDType,
    pub step: StepTime,
    /// Per rank, in the order of `step.ranks`.
    pub memory: Vec<Memory>,
    pub mfu: f64,
    pub overlap_grad_sync: bool,
}

/// How a pipeline is costed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CostOptions {
    /// Size memory by the mixed-precision (AMP) convention.
    pub mixed_precision: bool,
    /// Overlap gradient synchronisation with the backward compute after it.
    pub overlap_grad_sync: bool,
}

/// Costs `p` on `topo` at `dtype`.
pub fn estimate(
    p: &Pipeline,
    topo: &Topology,
    dtype: ComputeDType,
    opts: CostOptions,
) -> Result<Estimate, SimulateError> {
    let sim = SimOptions {
        overlap_grad_sync: opts.overlap_grad_sync,
    };
    let step = simulate_with(&p.partitioned.ranks, topo, dtype, sim)?;
    let sizing = Sizing {
        elem: ElementBytes(dtype.bytes()),
        mixed_precision: opts.mixed_precision,
        zero: Some(&p.partitioned.zero),
    };
    // Ranks with one dataflow have one memory timeline: computed once, copied.
    let memory =
        super::simulate::shared_per_dataflow(&p.partitioned.ranks, |r| memory(&r.program, sizing))
            .into_iter()
            .map(|m| (*m).clone())
            .collect();
    let mfu = mfu(model_flops(&p.full.program, dtype), &step, topo, dtype);
    Ok(Estimate {
        topology: topo.name,
        placement: topo.placement,
        dtype,
        step,
        memory,
        mfu,
        overlap_grad_sync: opts.overlap_grad_sync,
    })
}

/// The estimate as one JSON value (the shells add `schema_version`; field names are part of
/// it).
pub fn estimate_json(e: &Estimate) -> Value {
    let ranks: Vec<Value> = e
        .step
        .ranks
        .iter()
        .zip(&e.memory)
        .map(|(r, m)| {
            json!({
                "rank": r.rank,
                "compute_s": r.compute_s,
                "comm_s": r.comm_s,
                "idle_s": r.idle_s,
                "total_s": r.total_s,
                "op_time_s": r.op_s,
                "peak_memory_bytes": m.peak,
                "peak_op": m.peak_op,
                "peak_breakdown": m.peak_breakdown().iter().map(|(c, b)| json!([c.name(), b])).collect::<Vec<_>>(),
                "memory_timeline_bytes": m.at_op,
            })
        })
        .collect();
    json!({
        "topology": e.topology,
        "placement": e.placement,
        "compute_dtype": e.dtype.name(),
        "step_time_s": e.step.step_s,
        "mfu": e.mfu,
        "critical_rank": e.step.critical_rank,
        "overlap_grad_sync": e.overlap_grad_sync,
        "ranks": ranks,
    })
}
