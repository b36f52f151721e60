//! Published model configurations: a family of ours at the sizes its authors give, with the
//! source of each number. A published preset is named like the model (`llama3-8b`) and
//! builds the family's program at full size; `cost`, `plan` and `suggest` price it as is.
//! The size flags still apply on top (`--preset llama3-8b --layers 2`).

use super::{Model, ModelConfig};

/// One published configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
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
    /// Experts of each Mixture-of-Experts MLP (0: dense) and the experts per token.
    pub experts: usize,
    pub top_k: usize,
    pub vocab: usize,
    /// The sequence length the model was trained at.
    pub seq: usize,
    /// The parameter count: its publisher's where they give it exactly (Llama 3, the GPT-2
    /// checkpoints); else the built program's, which rounds to the published one (GPT-3's
    /// paper gives 1.3B, 13.0B, 175.0B; `tests/published.rs` holds both).
    pub params: u64,
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

/// Every published preset, each with its source in a comment (and in `docs/cli.md`): the
/// page's module carries no citation it does not show.
pub const PUBLISHED: [Published; 9] = [
    Published {
        name: "gpt2-small",
        model: Model::GptLm,
        layers: 12,
        hidden: 768,
        heads: 12,
        kv_heads: 12,
        ffn: 3072,
        experts: 0,
        top_k: 0,
        vocab: 50257,
        seq: 1024,
        params: 124_439_808,
        // Source: OpenAI GPT-2 small (Radford et al. 2019): config.json of
        // openai-community/gpt2 (n_layer 12, n_embd 768, n_head 12, n_positions 1024, vocab
        // 50,257); the count is Hugging Face's for the checkpoint
    },
    Published {
        name: "gpt2-xl",
        model: Model::GptLm,
        layers: 48,
        hidden: 1600,
        heads: 25,
        kv_heads: 25,
        ffn: 6400,
        experts: 0,
        top_k: 0,
        vocab: 50257,
        seq: 1024,
        params: 1_557_611_200,
        // Source: OpenAI GPT-2 XL (Radford et al. 2019): config.json of
        // openai-community/gpt2-xl (n_layer 48, n_embd 1600, n_head 25, n_positions 1024); the
        // count is Hugging Face's for the checkpoint
    },
    Published {
        name: "gpt3-1.3b",
        model: Model::GptLm,
        layers: 24,
        hidden: 2048,
        heads: 16,
        kv_heads: 16,
        ffn: 8192,
        experts: 0,
        top_k: 0,
        vocab: 50257,
        seq: 2048,
        params: 1_315_723_264,
        // Source: GPT-3 XL (Brown et al. 2020), Table 2.1: 24 layers, d_model 2048, 16 heads of
        // 128, context 2048; the paper rounds the count to 1.3B
    },
    Published {
        name: "gpt3-13b",
        model: Model::GptLm,
        layers: 40,
        hidden: 5120,
        heads: 40,
        kv_heads: 40,
        ffn: 20480,
        experts: 0,
        top_k: 0,
        vocab: 50257,
        seq: 2048,
        params: 12_853_386_240,
        // Source: GPT-3 13B (Brown et al. 2020), Table 2.1: 40 layers, 40 heads of 128, context
        // 2048. The table's d_model 5140 does not split into 40 heads; 40 × 128 = 5120 does (as
        // Megatron's and OPT's 13B configs use), so this counts 12.85B where the paper rounds
        // 13.0B
    },
    Published {
        name: "gpt3-175b",
        model: Model::GptLm,
        layers: 96,
        hidden: 12288,
        heads: 96,
        kv_heads: 96,
        ffn: 49152,
        experts: 0,
        top_k: 0,
        vocab: 50257,
        seq: 2048,
        params: 174_604_259_328,
        // Source: GPT-3 175B (Brown et al. 2020), Table 2.1: 96 layers, d_model 12288, 96 heads
        // of 128, context 2048; the paper rounds the count to 175.0B
    },
    Published {
        name: "llama3-8b",
        model: Model::Llama,
        layers: 32,
        hidden: 4096,
        heads: 32,
        kv_heads: 8,
        ffn: 14336,
        experts: 0,
        top_k: 0,
        vocab: 128256,
        seq: 8192,
        params: 8_030_261_248,
        // Source: Meta Llama 3 8B: config.json of meta-llama/Meta-Llama-3-8B; Llama 3 paper
        // (Grattafiori et al. 2024), Table 3
    },
    Published {
        name: "llama3-70b",
        model: Model::Llama,
        layers: 80,
        hidden: 8192,
        heads: 64,
        kv_heads: 8,
        ffn: 28672,
        experts: 0,
        top_k: 0,
        vocab: 128256,
        seq: 8192,
        params: 70_553_706_496,
        // Source: Meta Llama 3 70B: config.json of meta-llama/Meta-Llama-3-70B; Llama 3 paper,
        // Table 3
    },
    Published {
        name: "llama3-405b",
        model: Model::Llama,
        layers: 126,
        hidden: 16384,
        heads: 128,
        kv_heads: 8,
        ffn: 53248,
        experts: 0,
        top_k: 0,
        vocab: 128256,
        seq: 8192,
        params: 405_853_388_800,
        // Source: Meta Llama 3.1 405B: config.json of meta-llama/Llama-3.1-405B; Llama 3 paper,
        // Table 3 (pre-trained at sequence length 8,192)
    },
    Published {
        name: "mixtral-8x7b",
        model: Model::Llama,
        layers: 32,
        hidden: 4096,
        heads: 32,
        kv_heads: 8,
        ffn: 14336,
        experts: 8,
        top_k: 2,
        vocab: 32000,
        seq: 32768,
        params: 46_702_792_704,
        // Source: Mixtral 8x7B (Jiang et al. 2024, "Mixtral of Experts", Table 1: 32 layers,
        // dim 4096, 32 heads, 8 KV heads, hidden 14336, 8 experts, top-2, context 32,768);
        // config.json of mistralai/Mixtral-8x7B-v0.1 (vocab 32,000); 46.7B parameters
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
            experts: self.experts,
            top_k: if self.experts > 0 { self.top_k } else { 2 },
            vocab: self.vocab,
            seq: self.seq,
            ..self.model.default_config()
        }
    }
}
