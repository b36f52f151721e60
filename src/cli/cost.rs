//! `shardlab cost`: a plan's step time and memory per rank on a device preset.

use super::options::Format;
use super::PlanSource;
use crate::cost::device::{ComputeDType, Topology};
use crate::cost::estimate::{estimate, estimate_json, CostOptions, Estimate};
use crate::passes::driver::{run_passes, PassOptions, Passes};
use crate::plan::PlanError;
use clap::{Args, ValueEnum};
use serde_json::json;
use std::process::ExitCode;

/// The compute precision flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DTypeFlag {
    Bf16,
    F16,
    F32,
}

impl DTypeFlag {
    fn dtype(self) -> ComputeDType {
        match self {
            DTypeFlag::Bf16 => ComputeDType::Bf16,
            DTypeFlag::F16 => ComputeDType::F16,
            DTypeFlag::F32 => ComputeDType::F32,
        }
    }
}

/// The devices a plan is costed on (`cost` and `diff`).
#[derive(Args, Debug)]
pub(crate) struct DeviceArgs {
    /// The devices: cpu (this machine, measured), or a cluster of 8-GPU nodes, a100x8xN,
    /// a100-40gbx8xN, h100x8xN or h200x8xN (N from 1 to 2048; h100x8 is one node), or a TPU
    /// slice, tpu-v5e-N (chips) or tpu-v5p-N (TensorCores). docs/cost.md
    #[arg(long, default_value = "cpu")]
    topology: String,
    /// The precision compute is priced at (default: bf16 on GPU and TPU presets, f32 on cpu).
    #[arg(long, value_enum)]
    compute_dtype: Option<DTypeFlag>,
    /// Overlap the backward's gradient synchronisation (data-parallel all-reduces, ZeRO's
    /// reduce-scatters) with the compute after it, and prefetch ZeRO-3's parameter
    /// all-gathers, as DDP and FSDP do.
    #[arg(long)]
    overlap: bool,
    /// Where the mesh's axes run, innermost first (Megatron-Core's `order`), e.g.
    /// tp-cp-dp-pp (the default: the mesh's own order, its last axis innermost, which for
    /// --parallel is Megatron's: tp inside a node, then cp, dp and pp).
    #[arg(long, value_name = "AXES")]
    order: Option<String>,
}

/// A planned pipeline's schedule priced on `topology` (the outer error is a usage error).
pub(crate) fn priced_pipeline(
    p: &Passes,
    topology: &str,
) -> Result<Result<crate::cost::pipeline_cost::PipelineCost, PlanError>, String> {
    let topo = if topology == "cpu" {
        cpu_topology(p.partitioned.ranks.len())
    } else {
        Topology::preset(topology).map_err(|e| format!("--topology: {e}"))?
    };
    let e = match estimate(p, &topo, topo.default_dtype, CostOptions::default()) {
        Ok(e) => e,
        Err(e) => return Ok(Err(PlanError::from_located(&e, None))),
    };
    Ok(e.pipeline
        .ok_or_else(|| PlanError::whole("the plan has no pipeline")))
}

impl DeviceArgs {
    /// Plans `plan` (its options already applied) and costs it. The outer error is a usage
    /// error (exit 2); the inner one a problem with the plan (reported, exit 1).
    pub(crate) fn costed(
        &self,
        plan: &crate::plan::Plan,
        max_memory: &Option<String>,
    ) -> Result<Result<(Passes, Estimate, crate::cost::estimate::Scale), PlanError>, String> {
        let budget = super::budget::budget(max_memory)?;
        let classes = plan
            .mesh()
            .and_then(|m| crate::cost::classes::representatives(m));
        let planned = classes
            .as_ref()
            .map_or(crate::plan::RanksPlanned::All, |r| {
                crate::plan::RanksPlanned::Count(r.len())
            });
        if let Err(e) =
            super::budget::check("costing", plan.estimated_planning_bytes(planned), budget)
        {
            return Ok(Err(PlanError::whole(e.to_string())));
        }
        let mut opts = PassOptions::from_plan(&plan.options);
        opts.partition.ranks = classes;
        let p = match run_passes(plan, &opts) {
            Ok(p) => p,
            Err(e) => return Ok(Err(PlanError::from_located(&e, None))),
        };
        let mut topo = if self.topology == "cpu" {
            cpu_topology(p.partitioned.ranks.len())
        } else {
            Topology::preset(&self.topology).map_err(|e| format!("--topology: {e}"))?
        };
        if let Some(order) = &self.order {
            let devices = crate::cost::placement::devices_in_order(&p.full.mesh, order)
                .map_err(|e| format!("--order {order}: {e}"))?;
            topo.devices_of_ranks = Some(devices.into());
        }
        let dtype = self
            .compute_dtype
            .map_or(topo.default_dtype, DTypeFlag::dtype);
        let opts = CostOptions {
            mixed_precision: plan.options.amp,
            overlap_grad_sync: self.overlap,
        };
        let scale = crate::cost::estimate::scale(&p, &topo, dtype);
        let placed = |mut e: Estimate| {
            if let Some(order) = &self.order {
                e.placement = format!(
                    "mesh axes placed {order}, innermost first, on {} devices",
                    topo.devices
                )
                .into();
            }
            e
        };
        Ok(estimate(&p, &topo, dtype, opts)
            .map(|e| (p, placed(e), scale))
            .map_err(|e| PlanError::from_located(&e, None)))
    }
}

#[derive(Args, Debug)]
pub struct CostArgs {
    #[command(flatten)]
    source: PlanSource,
    #[command(flatten)]
    devices: DeviceArgs,
    #[command(flatten)]
    training: super::training::TrainingArgs,
    /// The most memory this command may allocate (bytes, or e.g. 512M, 4G); checked against
    /// an estimate before planning. Default: half the available memory.
    #[arg(long, value_name = "BYTES")]
    max_memory: Option<String>,
    /// How TFLOP/s per device and MFU count the model's FLOPs: model_6n (6 × parameters ×
    /// tokens plus attention; the default for a preset), megatron_ptdp (Megatron's
    /// 96·B·s·l·h²·(1 + s/6h + V/16lh), recomputation included) or program (the planned
    /// program's ops; the only one for a plan file). docs/cost.md
    #[arg(long, value_name = "FORMULA")]
    flops_formula: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

/// The formula `--flops-formula` names, checked against what the plan's source knows.
fn formula(
    given: &Option<String>,
    shape: Option<&crate::cost::throughput::ModelShape>,
) -> Result<crate::cost::throughput::FlopsFormula, String> {
    use crate::cost::throughput::FlopsFormula;
    let Some(name) = given else {
        return Ok(if shape.is_some() {
            FlopsFormula::Model6N
        } else {
            FlopsFormula::Program
        });
    };
    let f = FlopsFormula::parse(name).ok_or_else(|| {
        format!("--flops-formula: `{name}` is not one of model_6n, megatron_ptdp, program")
    })?;
    if shape.is_none() && f != FlopsFormula::Program {
        return Err(format!(
            "--flops-formula {name} needs a transformer preset's sizes (--preset); a plan \
             file or scenario counts its program (--flops-formula program)"
        ));
    }
    Ok(f)
}

/// Plans, simulates and prints.
pub fn cost(args: &CostArgs) -> Result<ExitCode, String> {
    let (e, t) = match priced(args)? {
        Ok(priced) => priced,
        Err(code) => return Ok(code),
    };
    let text = match args.format {
        Format::Text => text(&e, &t),
        Format::Json => {
            let mut doc = estimate_json(&e);
            crate::cost::estimate::add_throughput(&mut doc, &t);
            doc["schema_version"] = json!(crate::report::SCHEMA_VERSION);
            format!(
                "{}\n",
                serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?
            )
        }
    };
    super::emit(&text);
    Ok(ExitCode::SUCCESS)
}

/// The plan `args` give, priced, with its throughput; a problem with the plan is reported
/// (on stderr) and gives its exit code.
pub(crate) fn priced(
    args: &CostArgs,
) -> Result<Result<(Estimate, crate::cost::throughput::Throughput), ExitCode>, String> {
    let Some((mut plan, origin)) = args.source.resolve(args.training.micro_batches())? else {
        return Ok(Err(ExitCode::from(1)));
    };
    args.training.apply(&mut plan)?;
    let shape = args.source.model_shape(&plan)?;
    let formula = formula(&args.flops_formula, shape.as_ref())?;
    let (e, scale) = match args.devices.costed(&plan, &args.max_memory)? {
        Ok((p, e, scale)) => {
            args.training.check_applied(&p)?;
            (e, scale)
        }
        Err(err) => {
            super::report_plan_error(origin.as_ref(), &plan, &err);
            return Ok(Err(ExitCode::from(1)));
        }
    };
    let t = e.throughput(formula, shape.as_ref(), &scale);
    Ok(Ok((e, t)))
}

/// This machine, measured (once per process), for `ranks` threads sharing its cores.
pub fn cpu_topology(ranks: usize) -> Topology {
    static MEASURED: std::sync::OnceLock<crate::cost::device::CpuCalibration> =
        std::sync::OnceLock::new();
    let c = MEASURED.get_or_init(super::calibrate::calibrate);
    let cores = crate::cores::cores();
    eprintln!(
        "cpu calibrated: {:.1} GFLOP/s, {:.1} GB/s memory per core, exchange {:.1} µs + {:.2} GB/s; \
         {ranks} ranks share {cores} cores",
        c.flops / 1e9,
        c.mem_bandwidth / 1e9,
        c.link.alpha_s * 1e6,
        c.link.beta_bytes_per_s / 1e9
    );
    Topology::cpu(c.shared_by(ranks, cores))
}

/// A time with a unit that keeps three significant digits readable: `12.3ms`, `45.6us`.
fn ms(s: f64) -> String {
    if s >= 1e-3 || s == 0.0 {
        format!("{:.3}ms", s * 1e3)
    } else {
        format!("{:.1}us", s * 1e6)
    }
}

/// Bytes as `1.23MB`, or `4.5KB` below a megabyte.
fn mb(b: f64) -> String {
    if b >= 1e6 || b == 0.0 {
        format!("{:.2}MB", b / 1e6)
    } else {
        format!("{:.1}KB", b / 1e3)
    }
}

fn text(e: &Estimate, t: &crate::cost::throughput::Throughput) -> String {
    let mut out = format!(
        "cost on {} ({}; compute priced at {}): step {}, MFU {:.2}%, critical rank {}\n",
        e.topology,
        e.placement,
        e.dtype.name(),
        ms(e.step_s()),
        t.mfu * 100.0,
        e.step.critical_rank
    );
    let tokens = t
        .tokens_per_s_per_device
        .map_or(String::new(), |n| format!(", {n:.0} tokens/s"));
    out.push_str(&format!(
        "per device: {:.1} TFLOP/s ({}){tokens}; peak memory {:.1} GB of {:.1} GB: {}\n",
        t.tflops_per_device,
        t.formula.name(),
        t.peak_bytes / 1e9,
        t.memory / 1e9,
        if t.fits { "fits" } else { "does not fit" },
    ));
    out.push_str(if e.overlap_grad_sync {
        "communication: gradient synchronisation overlaps the backward and ZeRO-3 gathers are \
         prefetched (--overlap, as DDP and FSDP); tensor-parallel communication is exposed\n"
    } else {
        "communication: all exposed (--overlap overlaps gradient synchronisation and \
         prefetches ZeRO-3 gathers, as DDP and FSDP)\n"
    });
    if e.step.ranks.len() < t.devices {
        out.push_str(&format!(
            "priced {} rank classes of {} ranks: one rank per pipeline stage (and \
             context-parallel position) stands for the ranks that share its program \
             (docs/cost.md)\n",
            e.step.ranks.len(),
            t.devices
        ));
    }
    out.push_str(&format!(
        "{:>5} {:>12} {:>12} {:>12} {:>12} {:>12}  peak by category\n",
        "rank", "compute", "comm", "idle", "total", "peak memory"
    ));
    for (r, m) in e.step.ranks.iter().zip(&e.memory) {
        let parts: Vec<String> = m
            .peak_breakdown()
            .iter()
            .map(|(c, b)| format!("{} {}", c.name(), mb(*b)))
            .collect();
        out.push_str(&format!(
            "{:>5} {:>12} {:>12} {:>12} {:>12} {:>12}  {}\n",
            r.rank,
            ms(r.compute_s),
            ms(r.comm_s),
            ms(r.idle_s),
            ms(r.total_s),
            mb(m.peak),
            parts.join(", ")
        ));
    }
    if let Some(c) = &e.pipeline {
        out.push_str(
            "(per rank: one micro-batch through its program; the step follows the schedule)\n",
        );
        out.push_str(&crate::cost::pipeline_cost::gantt_text(c, 72));
    }
    out
}
