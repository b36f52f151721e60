//! The batch as Megatron's arguments give it: `--global-batch` (sequences per step),
//! `--global-batch-tokens` (an exact token count, e.g. 16777216 for Llama 3's 16M) and
//! `--micro-batch-size` (sequences per micro-batch and data-parallel rank, from which the
//! number of micro-batches follows: global / (micro-batch size × data-parallel degree)).

use crate::models::ModelConfig;
use clap::Args;

#[derive(Args, Debug, Default)]
pub(crate) struct BatchArgs {
    /// Sequences per optimizer step, over every data-parallel rank and micro-batch (a
    /// preset's --batch under Megatron's name).
    #[arg(long, value_name = "SEQUENCES", conflicts_with_all = ["batch", "global_batch_tokens"])]
    global_batch: Option<usize>,
    /// Tokens per optimizer step; must be a whole number of sequences of --seq tokens.
    #[arg(long, value_name = "TOKENS", conflicts_with = "batch")]
    global_batch_tokens: Option<usize>,
    /// Sequences per micro-batch on each data-parallel rank; the micro-batch count is the
    /// global batch / (this × the data-parallel degree). Megatron's --micro-batch-size.
    #[arg(long, value_name = "SEQUENCES", conflicts_with = "micro_batches")]
    micro_batch_size: Option<usize>,
}

impl BatchArgs {
    /// The global batch in sequences, if a flag gives it.
    pub(crate) fn global(&self, cfg: &ModelConfig) -> Result<Option<usize>, String> {
        if let Some(b) = self.global_batch {
            if b == 0 {
                return Err("--global-batch 0: a step needs at least one sequence".into());
            }
            return Ok(Some(b));
        }
        let Some(tokens) = self.global_batch_tokens else {
            return Ok(None);
        };
        let seq = cfg.seq.max(1);
        if tokens == 0 || !tokens.is_multiple_of(seq) {
            return Err(format!(
                "--global-batch-tokens {tokens} is not a whole number of sequences of {seq} \
                 tokens (--seq)"
            ));
        }
        Ok(Some(tokens / seq))
    }

    /// Whether `--micro-batch-size` is given (the micro-batch count then follows from it).
    pub(crate) fn derives_micro_batches(&self) -> bool {
        self.micro_batch_size.is_some()
    }

    /// The micro-batch count `--micro-batch-size` implies for a global batch of `global`
    /// sequences over `dp` data-parallel ranks, if it is given.
    pub(crate) fn micro_batches(&self, global: usize, dp: usize) -> Result<Option<usize>, String> {
        let Some(size) = self.micro_batch_size else {
            return Ok(None);
        };
        let per_step = size.saturating_mul(dp.max(1));
        if size == 0 || !global.is_multiple_of(per_step) {
            return Err(format!(
                "--micro-batch-size {size}: the global batch of {global} sequences is not a \
                 whole number of micro-batches of {size} × {} data-parallel ranks",
                dp.max(1)
            ));
        }
        Ok(Some(global / per_step))
    }
}
