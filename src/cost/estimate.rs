//! A planned pipeline's cost on a topology: the simulated step, every rank's memory and
//! MFU, as one value and as the JSON document `shardlab cost --format json` prints and the
//! JavaScript API returns.

use super::device::{ComputeDType, Topology};
use super::memory::{memory, Memory, Sizing};
use super::simulate::{mfu, model_flops, simulate_with, SimOptions, SimulateError, StepTime};
use super::work::ElementBytes;
use crate::passes::driver::Passes;
use serde_json::{json, Value};

/// A pipeline's cost on a topology. Serde: the engine sends it to the page's cost panel
/// (`crate::engine`); the names are `Cow`s so a received one owns them.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Estimate {
    pub topology: std::borrow::Cow<'static, str>,
    pub placement: std::borrow::Cow<'static, str>,
    pub dtype: ComputeDType,
    pub step: StepTime,
    /// Per rank, in the order of `step.ranks` (shared by ranks with one dataflow).
    pub memory: Vec<std::sync::Arc<Memory>>,
    pub mfu: f64,
    pub overlap_grad_sync: bool,
    /// With pipeline stages or micro-batches: the schedule in time. `step` is then one
    /// micro-batch's pass through every rank's program, and the step time is the
    /// schedule's.
    pub pipeline: Option<super::pipeline_cost::PipelineCost>,
}

impl Estimate {
    /// The largest peak memory over the ranks, pipeline in-flight activations included.
    pub fn peak_bytes(&self) -> f64 {
        peak_of(&self.step.ranks, &self.memory, self.pipeline.as_ref())
    }

    /// Throughput with the FLOPs counted by `formula` from `shape` (the program's without),
    /// at `scale` (what [`scale`] gives for the planning this estimate prices).
    pub fn throughput(
        &self,
        formula: super::throughput::FlopsFormula,
        shape: Option<&super::throughput::ModelShape>,
        scale: &Scale,
    ) -> super::throughput::Throughput {
        super::throughput::throughput(
            formula,
            shape,
            scale.program_flops,
            self.step_s(),
            scale.mesh_ranks,
            super::throughput::DeviceLimits {
                peak_flops: scale.peak_flops,
                memory: scale.device_memory,
            },
            self.peak_bytes(),
        )
    }

    /// The step time: the pipeline schedule's when there is one, else the simulated step's.
    pub fn step_s(&self) -> f64 {
        self.pipeline
            .as_ref()
            .map_or(self.step.step_s, |c| c.timeline.step)
    }
}

/// The largest peak over the ranks; a pipeline stage also holds the activations of the
/// micro-batches in flight beyond the one its program's timeline has.
pub fn peak_of<M: std::borrow::Borrow<crate::cost::memory::Memory>>(
    ranks: &[crate::cost::simulate::RankTime],
    memory: &[M],
    pipeline: Option<&crate::cost::pipeline_cost::PipelineCost>,
) -> f64 {
    let rank_peak = |rank: u32| {
        ranks
            .iter()
            .zip(memory)
            .find(|(r, _)| r.rank == rank)
            .map_or(0.0, |(_, m)| m.borrow().peak)
    };
    let program_peak = memory.iter().map(|m| m.borrow().peak).fold(0.0, f64::max);
    match pipeline {
        None => program_peak,
        Some(c) => c
            .stages
            .iter()
            .map(|s| rank_peak(s.rank) + s.activation_bytes * s.in_flight.saturating_sub(1) as f64)
            .fold(program_peak, f64::max),
    }
}

/// What an estimate's throughput is measured against: the mesh's ranks (more than the
/// estimate's when rank classes were priced, `super::classes`), the device's memory and
/// dense peak at the compute precision, and the serial program's forward and backward FLOPs
/// over the step. Kept out of [`Estimate`], which the engine sends the page.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scale {
    pub mesh_ranks: usize,
    pub device_memory: f64,
    pub peak_flops: f64,
    pub program_flops: f64,
}

/// The scale of `p` priced on `topo` at `dtype`.
pub fn scale(p: &Passes, topo: &Topology, dtype: ComputeDType) -> Scale {
    Scale {
        mesh_ranks: p.full.mesh.size(),
        device_memory: topo.device.mem_capacity,
        peak_flops: topo.device.peak(dtype),
        program_flops: model_flops(&p.full.program, dtype) * p.micro_batches() as f64,
    }
}

/// How a pipeline is costed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CostOptions {
    /// Size memory by the mixed-precision (AMP) convention.
    pub mixed_precision: bool,
    /// Overlap gradient synchronisation with the backward compute after it.
    pub overlap_grad_sync: bool,
}

/// Why a plan could not be costed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum EstimateError {
    #[error(transparent)]
    Simulate(#[from] SimulateError),
    #[error(transparent)]
    Pipeline(#[from] super::pipeline::PipelineTimeError),
}

impl crate::plan::Located for EstimateError {
    fn subject(&self) -> Option<crate::plan::PlanSubject> {
        match self {
            // A rank program's op, or the device preset: not a place in the plan.
            EstimateError::Simulate(_) => None,
            EstimateError::Pipeline(e) => crate::plan::Located::subject(e),
        }
    }
}

/// Costs `p` on `topo` at `dtype`.
pub fn estimate(
    p: &Passes,
    topo: &Topology,
    dtype: ComputeDType,
    opts: CostOptions,
) -> Result<Estimate, EstimateError> {
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
        super::simulate::shared_per_dataflow(&p.partitioned.ranks, |r| memory(&r.program, sizing));
    let pipeline = if p.is_pipelined() {
        Some(super::pipeline_cost::pipeline_cost(
            p,
            Some(&step),
            ElementBytes(dtype.bytes()),
        )?)
    } else {
        None
    };
    // A pipelined step runs every micro-batch: M times the model FLOPs in the schedule's time.
    let flops = model_flops(&p.full.program, dtype) * p.micro_batches() as f64;
    let step_s = pipeline.as_ref().map_or(step.step_s, |c| c.timeline.step);
    let mfu = mfu(flops, step_s, p.full.mesh.size(), topo, dtype);
    Ok(Estimate {
        topology: topo.name.into(),
        placement: topo.placement.into(),
        dtype,
        step,
        memory,
        mfu,
        overlap_grad_sync: opts.overlap_grad_sync,
        pipeline,
    })
}

/// Adds the throughput fields to `doc` (an [`estimate_json`]): `step_time_s` is there already;
/// `mfu` becomes the formula's.
pub fn add_throughput(doc: &mut Value, t: &super::throughput::Throughput) {
    doc["mfu"] = json!(t.mfu);
    doc["flops_formula"] = json!(t.formula.name());
    doc["flops_per_step"] = json!(t.flops_per_step);
    doc["tflops_per_device"] = json!(t.tflops_per_device);
    doc["tokens_per_s_per_device"] = json!(t.tokens_per_s_per_device);
    doc["peak_memory_bytes"] = json!(t.peak_bytes);
    doc["fits"] = json!(t.fits);
    doc["devices"] = json!(t.devices);
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
        "step_time_s": e.step_s(),
        "mfu": e.mfu,
        "critical_rank": e.step.critical_rank,
        "overlap_grad_sync": e.overlap_grad_sync,
        "ranks": ranks,
        "pipeline": e.pipeline.as_ref().map(pipeline_json),
    })
}

/// The pipeline's schedule in time: per stage its job times, activations held and bubble,
/// and its jobs in execution order with their start and end.
pub fn pipeline_json(c: &super::pipeline_cost::PipelineCost) -> Value {
    let schedule: Vec<Value> = c
        .timeline
        .stages
        .iter()
        .enumerate()
        .map(|(s, jobs)| {
            let st = &c.stages[s];
            json!({
                "stage": s,
                "rank": st.rank,
                "bubble_fraction": c.timeline.bubble[s],
                "job_times_s": st.times,
                "activation_bytes_per_micro_batch": st.activation_bytes,
                "micro_batches_in_flight": st.in_flight,
                "peak_activation_bytes": st.peak_activation_bytes,
                "jobs": jobs.iter().filter(|p| !matches!(p.job.kind,
                        crate::passes::pipeline::schedule::JobKind::RecvForward
                        | crate::passes::pipeline::schedule::JobKind::SendBackward))
                    .map(|p| json!({
                        "kind": p.job.kind.name(),
                        "micro_batch": p.job.micro_batch,
                        "chunk": p.job.chunk.unwrap_or(0),
                        "start_s": p.start,
                        "end_s": p.end,
                    })).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "schedule_name": c.schedule,
        "micro_batches": c.micro_batches,
        "chunks": c.chunks,
        "step_s": c.timeline.step,
        "bubble_fraction": c.bubble,
        "schedule": schedule,
    })
}
