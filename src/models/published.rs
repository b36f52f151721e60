//! Published model configurations: a family of ours at the sizes its authors give, with the
//! source of each number. A published preset is named like the model (`llama3-8b`) and
//! builds the family's program at full size; `cost`, `plan` and `suggest` price it as is.
//! The size flags still apply on top (`--preset llama3-8b --layers 2`).

use super::{Model, ModelConfig};

/// One published configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Published {
    /// The preset's name.
    pub name: &'static str,
    /// The family that builds it.
    pub model: Model,
    pub layers: usize,
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub ffn: usize,
    pub vocab: usize,
    /// The sequence length the model was trained at.
    pub seq: usize,
    /// The parameter count its publisher reports, exactly where they give it exactly.
    pub params: u64,
    /// Where the sizes and the count come from.
    pub source: &'static str,
}

/// The default global batch of a published preset, in sequences: one per device of an
/// 8-GPU node, the smallest topology a model of this size is priced on.
pub const DEFAULT_BATCH: usize = 8;

/// The default plan of a published preset, as `--mesh` and `--shard` would give it: data
/// parallelism over the 8 devices of one node, the batch (one sequence per device, see
/// [`DEFAULT_BATCH`]) split over them. A plan that runs without a flag, so `shardlab cost
/// --preset llama3-8b --topology h100x8` prices something; `--mesh` or `--shard` replace it.
pub const DEFAULT_MESH: &str = "8:dp";

/// The annotations of the default plan (see [`DEFAULT_MESH`]).
pub const DEFAULT_SHARDS: [&str; 1] = ["ids=dp,-"];

/// Every published preset.
pub const PUBLISHED: [Published; 3] = [
    Published {
        name: "llama3-8b",
        model: Model::Llama,
        layers: 32,
        hidden: 4096,
        heads: 32,
        kv_heads: 8,
        ffn: 14336,
        vocab: 128256,
        seq: 8192,
        params: 8_030_261_248,
        source: "Meta Llama 3 8B: config.json of meta-llama/Meta-Llama-3-8B; Llama 3 paper \
                 (Grattafiori et al. 2024), Table 3",
    },
    Published {
        name: "llama3-70b",
        model: Model::Llama,
        layers: 80,
        hidden: 8192,
        heads: 64,
        kv_heads: 8,
        ffn: 28672,
        vocab: 128256,
        seq: 8192,
        params: 70_553_706_496,
        source: "Meta Llama 3 70B: config.json of meta-llama/Meta-Llama-3-70B; Llama 3 paper, \
                 Table 3",
    },
    Published {
        name: "llama3-405b",
        model: Model::Llama,
        layers: 126,
        hidden: 16384,
        heads: 128,
        kv_heads: 8,
        ffn: 53248,
        vocab: 128256,
        seq: 8192,
        params: 405_853_388_800,
        source: "Meta Llama 3.1 405B: config.json of meta-llama/Llama-3.1-405B; Llama 3 paper, \
                 Table 3 (pre-trained at sequence length 8,192)",
    },
];

impl Published {
    /// The preset by name.
    pub fn find(name: &str) -> Option<&'static Published> {
        PUBLISHED.iter().find(|p| p.name == name)
    }

    /// The family's sizes set to the published ones.
    pub fn config(&self) -> ModelConfig {
        ModelConfig {
            batch: DEFAULT_BATCH,
            layers: self.layers,
            hidden: self.hidden,
            heads: self.heads,
            kv_heads: self.kv_heads,
            ffn: self.ffn,
            vocab: self.vocab,
            seq: self.seq,
            ..self.model.default_config()
        }
    }
}
