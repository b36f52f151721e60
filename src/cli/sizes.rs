//! The model size flags every command that builds a preset shares.

use crate::ir::DType;
use crate::models::{Model, ModelConfig};
use clap::Args;

/// Model sizes; each preset has its own defaults (see `shardlab print --help`).
#[derive(Args, Debug)]
pub(crate) struct SizeArgs {
    /// Number of transformer blocks (gpt, embedding_lm, gpt_lm, llama).
    #[arg(long)]
    layers: Option<usize>,
    /// Batch size.
    #[arg(long)]
    batch: Option<usize>,
    /// Sequence length (gpt, embedding_lm, gpt_lm, llama).
    #[arg(long)]
    seq: Option<usize>,
    /// Hidden width (MLP hidden layer, transformer width).
    #[arg(long)]
    hidden: Option<usize>,
    /// Attention heads (gpt, embedding_lm, gpt_lm, llama).
    #[arg(long)]
    heads: Option<usize>,
    /// Key/value heads of grouped-query attention (llama; divides --heads).
    #[arg(long)]
    kv_heads: Option<usize>,
    /// The MLP's inner width (llama's SwiGLU).
    #[arg(long)]
    ffn: Option<usize>,
    /// Experts of a Mixture-of-Experts MLP (llama; 0 = dense; mixtral-8x7b has 8).
    #[arg(long)]
    experts: Option<usize>,
    /// Experts each token is routed to (llama with --experts).
    #[arg(long)]
    top_k: Option<usize>,
    /// Vocabulary size (embedding_lm, gpt_lm, llama).
    #[arg(long)]
    vocab: Option<usize>,
    /// Input features (mlp, mlp_mse).
    #[arg(long)]
    features: Option<usize>,
    /// Output width: classes of mlp, targets of mlp_mse.
    #[arg(long)]
    classes: Option<usize>,
    /// Element type of parameters and activations: f32 (the default) or f64. Also applies
    /// to a --scenario.
    #[arg(long)]
    pub(crate) dtype: Option<String>,
}

impl SizeArgs {
    /// `base` (a preset's sizes) with the flags given set over it.
    pub(crate) fn config(&self, model: Model, base: ModelConfig) -> Result<ModelConfig, String> {
        let mut cfg = base;
        let set = |field: &mut usize, v: Option<usize>| {
            if let Some(v) = v {
                *field = v;
            }
        };
        set(&mut cfg.layers, self.layers);
        set(&mut cfg.batch, self.batch);
        set(&mut cfg.seq, self.seq);
        set(&mut cfg.hidden, self.hidden);
        set(&mut cfg.heads, self.heads);
        if model != Model::Llama {
            let llama_only = [
                ("--kv-heads", self.kv_heads),
                ("--ffn", self.ffn),
                ("--experts", self.experts),
                ("--top-k", self.top_k),
            ];
            if let Some(flag) = llama_only.into_iter().find_map(|(flag, v)| v.map(|_| flag)) {
                return Err(format!(
                    "{flag} sizes llama's grouped-query attention and SwiGLU MLP (or its \
                     experts); preset `{}` has neither",
                    model.name()
                ));
            }
        }
        set(&mut cfg.kv_heads, self.kv_heads);
        set(&mut cfg.ffn, self.ffn);
        set(&mut cfg.experts, self.experts);
        set(&mut cfg.top_k, self.top_k);
        set(&mut cfg.vocab, self.vocab);
        set(&mut cfg.features, self.features);
        set(&mut cfg.classes, self.classes);
        cfg.dtype = self.dtype()?.unwrap_or(cfg.dtype);
        Ok(cfg)
    }

    pub(crate) fn dtype(&self) -> Result<Option<DType>, String> {
        match self.dtype.as_deref() {
            None => Ok(None),
            Some(name) => match DType::from_name(name) {
                Some(d @ (DType::F32 | DType::F64)) => Ok(Some(d)),
                _ => Err(format!("--dtype `{name}`: expected f32 or f64")),
            },
        }
    }

    /// The size flags given (not --dtype), for refusing them where they cannot apply.
    pub(crate) fn given(&self) -> Vec<&'static str> {
        [
            ("--layers", self.layers),
            ("--batch", self.batch),
            ("--seq", self.seq),
            ("--hidden", self.hidden),
            ("--heads", self.heads),
            ("--kv-heads", self.kv_heads),
            ("--ffn", self.ffn),
            ("--experts", self.experts),
            ("--top-k", self.top_k),
            ("--vocab", self.vocab),
            ("--features", self.features),
            ("--classes", self.classes),
        ]
        .into_iter()
        .filter_map(|(name, v)| v.map(|_| name))
        .collect()
    }
}
