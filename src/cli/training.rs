//! The training flags `plan`, `run` and `cost` share. They override the plan file's
//! `options` statement: a flag given wins, a flag left out keeps the file's value.

use super::options::{OptimizerName, Stage};
use crate::ir::{OpType, Purpose};
use crate::plan::{Plan, PlanOptions};
use clap::Args;

#[derive(Args, Debug, Default)]
pub(crate) struct TrainingArgs {
    /// The optimizer: sgd, momentum, adam or adamw (default: the plan's `options`, else sgd).
    #[arg(long, value_enum)]
    optimizer: Option<OptimizerName>,
    /// Add AMP dynamic loss scaling.
    #[arg(long)]
    amp: bool,
    /// Clip gradients to this global norm.
    #[arg(long, value_name = "NORM")]
    clip_norm: Option<f64>,
    /// Do not scale data-parallel gradients by 1/N after their sum.
    #[arg(long)]
    no_grad_scale: bool,
    /// Megatron's backward: keep column-parallel input gradients partial through their sum
    /// and all-reduce the sum once (2 tensor-parallel all-reduces per layer, not Paddle's 4).
    #[arg(long)]
    megatron_sums: bool,
    /// ZeRO / sharding stage over the data-parallel axes: 0 (off), 1 (optimizer state),
    /// 2 (and gradients), 3 (and parameters).
    #[arg(long, value_name = "STAGE")]
    zero: Option<i64>,
    /// Recompute activations in backward: off, full (each transformer layer from its input)
    /// or selective (attention's scores and softmax).
    #[arg(long, value_name = "MODE")]
    recompute: Option<String>,
    /// Fuse data-parallel gradient all-reduces into buckets of this many MiB (DDP's
    /// bucket_cap_mb, 25 there by default).
    #[arg(long, value_name = "MIB")]
    bucket_mb: Option<f64>,
    /// Micro-batches per step (default 1). With a preset, --batch stays the global batch
    /// and must divide by M, each micro-batch holding at least one row per data-parallel
    /// rank; a plan file's program is one micro-batch's.
    #[arg(long, value_name = "M")]
    micro_batches: Option<i64>,
    /// The pipeline schedule: fthenb (GPipe, the default), 1f1b, vpp (interleaved 1F1B,
    /// with --chunks) or zbh1 (zero bubble).
    #[arg(long, value_name = "NAME")]
    schedule: Option<String>,
    /// Model chunks (virtual stages) per pipeline stage, for vpp.
    #[arg(long, value_name = "V")]
    chunks: Option<i64>,
    /// Layers per (virtual) pipeline stage, e.g. 3,3,2 (default: as even as they go, the
    /// embedding on the first stage, the head and loss on the last).
    #[arg(long, value_name = "N,N,...")]
    pp_split: Option<String>,
}

/// The first `plan --stage` whose text a training flag changes: the optimizer's own flags
/// from the optimizer stage on; the synchronisation flags and the schedule only in the rank
/// programs (the schedule is printed after them), as does the stage split (the backward
/// program does not show stages); the rest (loss scaling, recomputation, micro-batches)
/// from the backward program on.
fn first_stage(flag: &str) -> Stage {
    match flag {
        "--optimizer" | "--clip-norm" => Stage::Optimizer,
        "--no-grad-scale" | "--megatron-sums" | "--zero" | "--bucket-mb" | "--schedule"
        | "--chunks" | "--pp-split" => Stage::Partition,
        _ => Stage::Backward,
    }
}

impl TrainingArgs {
    /// Whether `--pp-split` places stages by layer counts (a twin must keep its layers).
    pub(crate) fn places_stages_by_layer(&self) -> bool {
        self.pp_split.is_some()
    }

    /// The --micro-batches given (1 without), for building a preset at the micro-batch's
    /// size.
    pub(crate) fn micro_batches(&self) -> usize {
        self.micro_batches
            .and_then(|m| usize::try_from(m).ok())
            .unwrap_or(1)
            .max(1)
    }

    /// The flags given that `plan --stage <shown>` (text) would print no differently,
    /// each with the first stage that shows it. `--ledger` alone (`shown` None) lists the
    /// communication, which neither the optimizer's kind nor the order of a schedule's jobs
    /// changes (interleaving does: it adds chunks). `preset`: the program is built at the
    /// micro-batch's size, so `--micro-batches` shows from the backward program on; a
    /// file's program is already one micro-batch's, and only the rank programs change.
    pub(crate) fn unshown(&self, shown: Option<Stage>, preset: bool) -> Vec<(&'static str, Stage)> {
        self.given()
            .into_iter()
            .map(|flag| {
                let first = match flag {
                    "--micro-batches" if !preset => Stage::Partition,
                    _ => first_stage(flag),
                };
                (flag, first)
            })
            .filter(|&(flag, first)| match shown {
                Some(s) => s != Stage::All && s.order() < first.order(),
                None => {
                    flag == "--optimizer"
                        || (flag == "--schedule" && self.schedule.as_deref() != Some("vpp"))
                }
            })
            .collect()
    }

    /// Whether --micro-batches was given.
    pub(crate) fn micro_batches_given(&self) -> bool {
        self.micro_batches.is_some()
    }

    /// The flags given on the command line.
    pub(crate) fn given(&self) -> Vec<&'static str> {
        [
            (self.optimizer.is_some(), "--optimizer"),
            (self.amp, "--amp"),
            (self.clip_norm.is_some(), "--clip-norm"),
            (self.no_grad_scale, "--no-grad-scale"),
            (self.megatron_sums, "--megatron-sums"),
            (self.zero.is_some(), "--zero"),
            (self.recompute.is_some(), "--recompute"),
            (self.bucket_mb.is_some(), "--bucket-mb"),
            (self.micro_batches.is_some(), "--micro-batches"),
            (self.schedule.is_some(), "--schedule"),
            (self.chunks.is_some(), "--chunks"),
            (self.pp_split.is_some(), "--pp-split"),
        ]
        .into_iter()
        .filter_map(|(given, flag)| given.then_some(flag))
        .collect()
    }

    /// The plan with the flags given on the command line applied to its options and its
    /// stage placement, then its pipeline checked (a usage error names the flag).
    pub(crate) fn apply(&self, plan: &mut Plan) -> Result<(), String> {
        self.apply_options(&mut plan.options)?;
        self.check_representable(plan)?;
        let pipelined = plan
            .mesh()
            .is_some_and(|m| m.axis_by_name(crate::dist::PP_AXIS).is_some());
        // A flag applies or is refused: these order or place pipeline stages, and mean
        // nothing without a `pp` axis (--micro-batches alone is gradient accumulation).
        if !pipelined {
            let given: Vec<&str> = [
                (self.schedule.is_some(), "--schedule"),
                (self.chunks.is_some(), "--chunks"),
                (self.pp_split.is_some(), "--pp-split"),
            ]
            .into_iter()
            .filter_map(|(given, flag)| given.then_some(flag))
            .collect();
            if !given.is_empty() {
                return Err(format!(
                    "{}: the mesh has no `pp` axis, so there are no pipeline stages to \
                     schedule or place; add a `pp` axis to the mesh (e.g. --mesh 2x4:pp,dp)",
                    given.join(", ")
                ));
            }
        }
        if let Some(split) = &self.pp_split {
            let per: Vec<usize> = split
                .split(',')
                .map(|n| n.trim().parse::<usize>())
                .collect::<Result<_, _>>()
                .map_err(|_| format!("--pp-split {split}: expected layer counts like 3,3,2"))?;
            let stages = plan
                .mesh()
                .map(|m| crate::dist::Stages::of(m, plan.options.chunks))
                .filter(|s| s.is_pipelined())
                .ok_or("--pp-split needs a mesh with a `pp` axis")?;
            if per.len() != stages.virtual_count() {
                return Err(format!(
                    "--pp-split {split}: {} counts for {} (virtual) stages",
                    per.len(),
                    stages.virtual_count()
                ));
            }
            plan.stages = crate::plan::split_layers(&plan.program, &per)
                .map_err(|e| format!("--pp-split {split}: {e}"))?;
        }
        // Only what the flags changed is a usage error here; a plan file's own options are
        // checked by planning (an error of the input, at its line).
        let flags_schedule =
            self.schedule.is_some() || self.chunks.is_some() || self.micro_batches.is_some();
        if let (Some(mesh), true) = (plan.mesh(), flags_schedule) {
            let stages = crate::dist::Stages::of(mesh, plan.options.chunks);
            crate::passes::pipeline::stages::check_schedule(&stages, &plan.options)
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// A flag's value must fit the dtype it is used in: a clip norm above f32's largest
    /// value becomes inf in an f32 model, and every gradient NaN.
    fn check_representable(&self, plan: &Plan) -> Result<(), String> {
        let f32_model = plan
            .program
            .vars()
            .iter()
            .any(|v| v.ty.dtype == crate::ir::DType::F32);
        match self.clip_norm {
            Some(c) if f32_model && c > f64::from(f32::MAX) => Err(format!(
                "--clip-norm {c:e}: more than f32 can hold ({:e}); the model computes in f32",
                f32::MAX
            )),
            _ => Ok(()),
        }
    }

    /// After planning: a flag that changed nothing is refused (usage, exit 2). `--zero N`
    /// shards only gradients summed over a data-parallel axis; with none, it would do
    /// nothing.
    pub(crate) fn check_applied(&self, p: &crate::passes::driver::Passes) -> Result<(), String> {
        if let Some(z) = self.zero.filter(|&z| z > 0) {
            if p.partitioned.zero.params.is_empty() {
                return Err(format!(
                    "--zero {z}: no parameter's gradient is summed over a data-parallel axis \
                     (the batch is split over no mesh axis), so there is nothing to shard; \
                     split the batch, e.g. --shard x=dp,-"
                ));
            }
        }
        let ops = || p.partitioned.ranks.iter().flat_map(|r| r.program.ops());
        let has = |purpose: Purpose, ty: Option<OpType>| {
            ops().any(|o| o.purpose() == Some(purpose) && ty.is_none_or(|t| o.ty == t))
        };
        if self.megatron_sums && !has(Purpose::TensorParallel, None) {
            return Err(
                "--megatron-sums: the plan has no tensor-parallel partial sums to \
                        all-reduce (no weight is split over a mesh axis); split one, e.g. \
                        Megatron's column- and row-parallel linears"
                    .into(),
            );
        }
        let data_parallel = has(Purpose::DataParallel, None) || has(Purpose::Sharding, None);
        if self.no_grad_scale && !data_parallel {
            return Err(
                "--no-grad-scale: no gradient is summed over a data-parallel axis (the \
                        batch is split over no mesh axis), so there is no 1/N scale to skip"
                    .into(),
            );
        }
        if self.bucket_mb.is_some() && !has(Purpose::DataParallel, Some(OpType::AllReduce)) {
            return Err(
                "--bucket-mb: no gradient is all-reduced over a data-parallel axis \
                        (without one nothing is reduced, and ZeRO reduce-scatters each \
                        parameter's gradient, unbucketed)"
                    .into(),
            );
        }
        Ok(())
    }

    fn apply_options(&self, options: &mut PlanOptions) -> Result<(), String> {
        if let Some(o) = self.optimizer {
            options.optimizer = o.kind();
        }
        options.amp |= self.amp;
        if let Some(c) = self.clip_norm {
            PlanOptions::check_clip_norm(c).map_err(|e| format!("--{e}").replace('_', "-"))?;
            options.clip_norm = Some(c);
        }
        options.no_grad_scale |= self.no_grad_scale;
        options.megatron_sums |= self.megatron_sums;
        if let Some(z) = self.zero {
            options.zero = PlanOptions::check_zero(z).map_err(|e| format!("--{e}"))?;
        }
        if let Some(mb) = self.bucket_mb {
            options.bucket_mb = Some(
                PlanOptions::check_bucket_mb(mb)
                    .map_err(|e| format!("--{e}").replace("_mb", "-mb"))?,
            );
        }
        if let Some(m) = self.micro_batches {
            options.micro_batches =
                PlanOptions::check_count("micro_batches", m).map_err(|e| format!("--{e}"))?;
        }
        if let Some(c) = self.chunks {
            options.chunks = PlanOptions::check_count("chunks", c).map_err(|e| format!("--{e}"))?;
        }
        if let Some(name) = &self.schedule {
            options.schedule = crate::plan::ScheduleKind::from_name(name)
                .ok_or_else(|| format!("--schedule {name}: expected fthenb, 1f1b, vpp or zbh1"))?;
        }
        if let Some(r) = &self.recompute {
            options.recompute = crate::plan::Recompute::from_name(r)
                .ok_or_else(|| format!("--recompute {r}: expected off, full or selective"))?;
        }
        Ok(())
    }
}
