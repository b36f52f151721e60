//! The training flags `plan`, `run` and `cost` share. They override the plan file's
//! `options` statement: a flag given wins, a flag left out keeps the file's value.

use super::options::OptimizerName;
use crate::plan::PlanOptions;
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
}

impl TrainingArgs {
    /// `options` with the flags given on the command line applied.
    pub(crate) fn apply(&self, options: &mut PlanOptions) -> Result<(), String> {
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
        if let Some(r) = &self.recompute {
            options.recompute = crate::plan::Recompute::from_name(r)
                .ok_or_else(|| format!("--recompute {r}: expected off, full or selective"))?;
        }
        Ok(())
    }
}
