//! Preset models, built with sizes as parameters: `mlp` (Paddle's MLP of the oracle),
//! `mlp_mse` (JAX's MLP of the oracle), `gpt` (pre-LN transformer blocks), `embedding_lm`
//! (embedding, blocks, LM head) and `llama` (a Llama-family decoder: rms_norm,
//! grouped-query attention with rotary embeddings, SwiGLU).

mod gpt;
mod layers;
mod llama;
mod mlp;
pub mod moe;
pub mod published;
pub mod published_plans;
pub mod scenarios;
pub mod twin;

use crate::ir::{DType, Program, ProgramError};
use serde::{Deserialize, Serialize};

/// The preset models.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Model {
    Mlp,
    MlpMse,
    Gpt,
    EmbeddingLm,
    GptLm,
    Llama,
}

/// Sizes of a preset. Each model reads the fields it needs (see [`Model::default_config`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelConfig {
    pub batch: usize,
    /// MLP input features.
    pub features: usize,
    /// MLP hidden width, or transformer width.
    pub hidden: usize,
    /// MLP output width (classes for `mlp`).
    pub classes: usize,
    pub seq: usize,
    pub heads: usize,
    /// Key/value heads of grouped-query attention (llama); each is shared by
    /// `heads / kv_heads` query heads.
    #[serde(default = "default_kv_heads")]
    pub kv_heads: usize,
    /// The MLP's inner width (llama's SwiGLU).
    #[serde(default = "default_ffn")]
    pub ffn: usize,
    /// Experts of a Mixture-of-Experts MLP (llama; 0: a dense MLP, [`moe`]).
    #[serde(default)]
    pub experts: usize,
    /// Experts each token is routed to (with `experts`).
    #[serde(default = "default_top_k")]
    pub top_k: usize,
    pub layers: usize,
    pub vocab: usize,
    pub dtype: DType,
}

fn default_kv_heads() -> usize {
    Model::Llama.default_config().kv_heads
}

fn default_ffn() -> usize {
    Model::Llama.default_config().ffn
}

fn default_top_k() -> usize {
    2
}

/// Why a model cannot be built with the given sizes.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ModelError {
    #[error("unknown preset `{0}`; presets: {names}", names = preset_names().join(", "))]
    Unknown(String),
    #[error("{0}")]
    BadSize(String),
    #[error("{0}")]
    Program(#[from] ProgramError),
}

/// Every preset's name: the families, then the published configurations.
pub fn preset_names() -> Vec<&'static str> {
    Model::ALL
        .iter()
        .map(|m| m.name())
        .chain(published::PUBLISHED.iter().map(|p| p.name))
        .collect()
}

impl Model {
    /// Every preset model.
    pub const ALL: [Model; 6] = [
        Model::Mlp,
        Model::MlpMse,
        Model::Gpt,
        Model::EmbeddingLm,
        Model::GptLm,
        Model::Llama,
    ];

    /// The preset's name.
    pub fn name(self) -> &'static str {
        match self {
            Model::Mlp => "mlp",
            Model::MlpMse => "mlp_mse",
            Model::Gpt => "gpt",
            Model::EmbeddingLm => "embedding_lm",
            Model::GptLm => "gpt_lm",
            Model::Llama => "llama",
        }
    }

    /// Looks a preset up by name.
    pub fn from_name(name: &str) -> Result<Model, ModelError> {
        Model::ALL
            .into_iter()
            .find(|m| m.name() == name)
            .ok_or_else(|| ModelError::Unknown(name.to_string()))
    }

    /// A preset by name: a family at its own default sizes, or a published configuration
    /// (`published::PUBLISHED`) with the family that builds it.
    pub fn preset(name: &str) -> Result<(Model, ModelConfig), ModelError> {
        match published::Published::find(name) {
            Some(p) => Ok((p.model, p.config())),
            None => Model::from_name(name).map(|m| (m, m.default_config())),
        }
    }

    /// One line saying what the model is.
    pub fn description(self) -> &'static str {
        match self {
            Model::Mlp => "x @ W1 + b1 -> gelu -> @ W2 + b2 -> softmax_with_cross_entropy -> mean (Paddle's MLP)",
            Model::MlpMse => "x @ W1 -> gelu(tanh) -> @ W2, loss mean((pred - y)^2) (JAX's MLP)",
            Model::Gpt => "pre-LN transformer blocks (attention + MLP) with a mean squared error loss",
            Model::EmbeddingLm => "token embedding -> transformer blocks -> LM head -> softmax cross-entropy",
            Model::GptLm => "GPT-2/GPT-3: token + learned position embeddings -> transformer blocks -> LM head tied to the token embedding -> softmax cross-entropy",
            Model::Llama => "Llama decoder: rms_norm, grouped-query attention with rotary embeddings, SwiGLU MLP, LM head, cross-entropy",
        }
    }

    /// The sizes of the reference models (the oracle's, for `mlp` and `mlp_mse`).
    pub fn default_config(self) -> ModelConfig {
        let base = ModelConfig {
            batch: 4,
            features: 64,
            hidden: 64,
            classes: 10,
            seq: 16,
            heads: 4,
            kv_heads: 2,
            ffn: 128,
            experts: 0,
            top_k: 2,
            layers: 2,
            vocab: 256,
            dtype: DType::F32,
        };
        match self {
            Model::Mlp => ModelConfig {
                batch: 16,
                features: 64,
                hidden: 256,
                classes: 10,
                ..base
            },
            Model::MlpMse => ModelConfig {
                batch: 16,
                features: 32,
                hidden: 64,
                classes: 32,
                ..base
            },
            Model::Gpt => base,
            Model::EmbeddingLm | Model::GptLm => ModelConfig { layers: 1, ..base },
            Model::Llama => base,
        }
    }

    /// Builds the model's forward program (its last op computes the loss).
    pub fn build(self, cfg: &ModelConfig) -> Result<Program, ModelError> {
        check_sizes(self, cfg)?;
        match self {
            Model::Mlp => mlp::mlp(cfg),
            Model::MlpMse => mlp::mlp_mse(cfg),
            Model::Gpt => gpt::gpt(cfg),
            Model::EmbeddingLm => gpt::embedding_lm(cfg),
            Model::GptLm => gpt::gpt_lm(cfg),
            Model::Llama => llama::llama(cfg),
        }
    }
}

/// Largest total element count a preset may declare, so a typo cannot exhaust memory.
/// A preset's tensors may be as large as any shape (planning holds only shapes; `run`
/// checks its memory budget before it allocates).
const MAX_ELEMENTS: u64 = crate::ir::MAX_ELEMENTS;
/// The most transformer blocks a preset builds (each is about 60 ops).
const MAX_LAYERS: usize = 1024;

fn check_sizes(model: Model, cfg: &ModelConfig) -> Result<(), ModelError> {
    let fields = [
        ("batch", cfg.batch),
        ("features", cfg.features),
        ("hidden", cfg.hidden),
        ("classes", cfg.classes),
        ("seq", cfg.seq),
        ("heads", cfg.heads),
        ("kv_heads", cfg.kv_heads),
        ("ffn", cfg.ffn),
        ("layers", cfg.layers),
        ("vocab", cfg.vocab),
    ];
    if let Some((name, _)) = fields.iter().find(|(_, v)| *v == 0) {
        return Err(ModelError::BadSize(format!("{name} must be at least 1")));
    }
    if let Some((name, v)) = fields.iter().find(|(_, v)| *v > 1 << 20) {
        return Err(ModelError::BadSize(format!(
            "{name} = {v} is too large (at most 1048576)"
        )));
    }
    if cfg.layers > MAX_LAYERS {
        return Err(ModelError::BadSize(format!(
            "layers = {} is too many (at most {MAX_LAYERS}; the largest published models have \
             about 100)",
            cfg.layers
        )));
    }
    if cfg.dtype == DType::I64 {
        return Err(ModelError::BadSize("dtype must be f32 or f64".into()));
    }
    let uses_blocks = matches!(
        model,
        Model::Gpt | Model::EmbeddingLm | Model::GptLm | Model::Llama
    );
    if uses_blocks && !cfg.hidden.is_multiple_of(cfg.heads) {
        return Err(ModelError::BadSize(format!(
            "hidden {} must be divisible by heads {}",
            cfg.hidden, cfg.heads
        )));
    }
    if model == Model::Llama {
        check_llama(cfg)?;
    }
    // In u64: the browser's usize is 32 bits, and these products exceed it at real sizes.
    let [batch, seq, hidden, heads, vocab, ffn, features, experts, k] = [
        cfg.batch,
        cfg.seq,
        cfg.hidden,
        cfg.heads,
        cfg.vocab,
        cfg.ffn,
        cfg.features,
        cfg.experts,
        cfg.top_k,
    ]
    .map(|d| d as u64);
    let product = |dims: &[u64]| dims.iter().fold(1u64, |a, &d| a.saturating_mul(d));
    let biggest = [
        product(&[batch, seq, hidden, 4]),
        product(&[batch, heads, seq, seq]),
        product(&[batch, seq, vocab]),
        product(&[hidden, hidden, 4]),
        product(&[hidden, ffn, experts.max(1)]),
        product(&[batch, seq, ffn, k, 2]),
        product(&[features, hidden]).max(product(&[batch, hidden])),
    ];
    if biggest.iter().any(|&n| n > MAX_ELEMENTS) {
        return Err(ModelError::BadSize(format!(
            "the model is too large (a tensor exceeds {MAX_ELEMENTS} elements)"
        )));
    }
    Ok(())
}

/// Grouped-query attention's head counts and rotary's even head width.
fn check_llama(cfg: &ModelConfig) -> Result<(), ModelError> {
    if !cfg.heads.is_multiple_of(cfg.kv_heads) {
        return Err(ModelError::BadSize(format!(
            "heads {} must be a multiple of kv_heads {} (each key/value head serves the same \
             number of query heads)",
            cfg.heads, cfg.kv_heads
        )));
    }
    if cfg.experts > 1024 || (cfg.experts > 0 && !(1..=cfg.experts).contains(&cfg.top_k)) {
        return Err(ModelError::BadSize(format!(
            "experts {} and top_k {}: need 1 <= top_k <= experts <= 1024",
            cfg.experts, cfg.top_k
        )));
    }
    let head_dim = cfg.hidden / cfg.heads;
    if !head_dim.is_multiple_of(2) {
        return Err(ModelError::BadSize(format!(
            "the head width hidden / heads = {head_dim} must be even (rotary embeddings \
             rotate pairs)"
        )));
    }
    Ok(())
}
