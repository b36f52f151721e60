//! A published model as a playground scenario: its real sizes, a strategy for one 8-GPU
//! node, and the training options a practitioner would run it with. The playground opens on
//! one of these, so its cost, memory and pipeline panels show milliseconds, gigabytes and an
//! MFU at the model's real size; Run executes the shrunk twin (`super::twin`).
//!
//! The plan is Megatron's by sizes (annotations found by pattern) with its options for a
//! model of this size on one node: AdamW with mixed precision, gradient clipping at 1.0 and
//! full recomputation (without it no published size's activations fit in 80 GB at its
//! sequence length), the batch in one micro-batch (the values view shows collectives only
//! in plans without micro-batches; the pipeline panel adds them).
//!
//! Every family gets `dp=2,tp=4` with 8 sequences and the distributed optimizer (ZeRO-1);
//! a Mixture of Experts gets `dp=8,ep=8` (an expert per GPU).
//! Element counts are 64-bit in the browser too (`ir::MAX_ELEMENTS`), so Llama 3's attention
//! scores at 8,192 tokens, `[8, 32, 8192, 8192]` (2^34 elements; 70B's and 405B's more),
//! plan there as on the command line.

use super::published::{Published, DEFAULT_BATCH, PUBLISHED};
use super::scenarios::{PerLayer, Scenario};
use super::ModelConfig;
use crate::plan::parallel::Parallel;
use crate::plan::{OptimizerKind, PlanOptions, Recompute};

/// A published preset with the plan the playground gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PublishedPlan {
    pub preset: &'static Published,
    /// The `--parallel` strategy.
    pub parallel: &'static str,
    /// Sequences per step.
    pub batch: usize,
    /// The ZeRO stage (1 where there is data parallelism to shard over).
    pub zero: u8,
}

impl PublishedPlan {
    /// The plan the playground gives `preset`.
    pub fn of(preset: &'static Published) -> PublishedPlan {
        PublishedPlan {
            preset,
            // A Mixture of Experts on one node: an expert per GPU (Mixtral's 8), the
            // attention data-parallel, as Megatron folds expert parallelism onto it.
            parallel: if preset.experts > 0 {
                "dp=8,ep=8"
            } else {
                "dp=2,tp=4"
            },
            batch: DEFAULT_BATCH,
            zero: 1,
        }
    }

    /// The published sizes with this plan's batch.
    pub fn config(&self) -> ModelConfig {
        ModelConfig {
            batch: self.batch,
            ..self.preset.config()
        }
    }

    /// The training options.
    pub fn options(&self) -> PlanOptions {
        PlanOptions {
            optimizer: OptimizerKind::AdamW,
            amp: true,
            clip_norm: Some(1.0),
            zero: self.zero,
            recompute: Recompute::Full,
            ..PlanOptions::default()
        }
    }

    /// The mesh spec and the annotations of the strategy on `program`.
    pub fn strategy(&self, program: &crate::ir::Program) -> (String, Vec<String>) {
        let p = Parallel::parse(self.parallel).unwrap_or(Parallel::SERIAL);
        (p.mesh_spec(), p.tensor_specs(program))
    }
}

/// The menu title of a published preset.
fn title(name: &str) -> &'static str {
    match name {
        "gpt2-small" => "GPT-2 small (124M), real size",
        "gpt2-xl" => "GPT-2 XL (1.5B), real size",
        "gpt3-1.3b" => "GPT-3 1.3B, real size",
        "gpt3-13b" => "GPT-3 13B, real size",
        "gpt3-175b" => "GPT-3 175B, real size",
        "llama3-8b" => "Llama 3 8B, real size",
        "llama3-70b" => "Llama 3 70B, real size",
        "llama3-405b" => "Llama 3 405B, real size",
        "mixtral-8x7b" => "Mixtral 8x7B (8 experts, top-2), real size",
        _ => "a published model, real size",
    }
}

/// Every published preset as a scenario.
pub fn published_scenarios() -> Vec<Scenario> {
    PUBLISHED
        .iter()
        .map(|p| {
            let plan = PublishedPlan::of(p);
            Scenario {
                name: p.name,
                title: title(p.name),
                model: p.model,
                layers: p.layers,
                // Both come from the plan's strategy (`Scenario::plan_with`).
                mesh: "",
                shards: Vec::new(),
                sequence_parallel: false,
                per_layer: PerLayer::Strategy,
                published: Some(plan),
            }
        })
        .collect()
}

/// The published presets of the same family as `name` (its size menu), smallest first.
pub fn sizes_of(name: &str) -> Vec<&'static Published> {
    let Some(p) = Published::find(name) else {
        return Vec::new();
    };
    // A Mixture of Experts is not a size of its dense family.
    let kin = |q: &&Published| q.model == p.model && (q.experts > 0) == (p.experts > 0);
    let mut same: Vec<&'static Published> = PUBLISHED.iter().filter(kin).collect();
    crate::sort::sort_by_key(&mut same, |q| q.params);
    same
}
