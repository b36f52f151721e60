//! A planned pipeline's cost on a topology: the simulated step, every rank's memory and
//! MFU, as one value and as the JSON document `shardlab cost --format json` prints and the
//! JavaScript API returns.

use super::device::{ComputeDType, Topology};
use super::memory::{memory, Memory, Sizing};
use super::simulate::{mfu, model_flops, simulate, SimulateError, StepTime};
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
}

/// Costs `p` on `topo` at `dtype`; `mixed_precision` sizes memory by the AMP convention.
pub fn estimate(
    p: &Pipeline,
    topo: &Topology,
    dtype: ComputeDType,
    mixed_precision: bool,
) -> Result<Estimate, SimulateError> {
    let step = simulate(&p.partitioned.ranks, topo, dtype)?;
    let sizing = Sizing {
        elem: ElementBytes(dtype.bytes()),
        mixed_precision,
        zero: Some(&p.partitioned.zero),
    };
    let memory = p
        .partitioned
        .ranks
        .iter()
        .map(|r| memory(&r.program, sizing))
        .collect();
    let mfu = mfu(model_flops(&p.full.program, dtype), &step, topo, dtype);
    Ok(Estimate {
        topology: topo.name,
        placement: topo.placement,
        dtype,
        step,
        memory,
        mfu,
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
        "ranks": ranks,
    })
}
