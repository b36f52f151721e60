//! A shrunk twin: a model's sizes scaled down so it can be executed, keeping what the plan
//! depends on. The planner's choices read sizes only through divisibility by shard counts
//! (reshape's rule, co-sharding, the padded collectives, the uneven mean) and through a
//! dim being smaller than its shards. Every shard count of a mesh divides the mesh's size
//! `M`, so a size `v ≡ V (mod M)` with `v ≥ M` (or `v = V` where `V < M`) keeps every one of
//! them. The head dim is chosen so that `heads · head_dim` keeps the hidden size's residue.
//!
//! Layers are repeats of one block, and the plan reads their count only through the
//! pipeline's split into `S` (virtual) stages: they shrink the same way modulo `S`, to at
//! least two (so a layer still feeds a layer). That keeps verification meaningful: its error
//! bounds are worst-case and grow about fivefold per layer (a 40-layer twin's loss bound
//! was 10^12, one that nothing could fail). Where the plan places stages by op number,
//! layers are kept. `tests/twin.rs` holds the twin's rank programs equal to the real size's
//! at the same layer count, up to shapes.

use super::{Model, ModelConfig};

/// The twin of `cfg` for a mesh of `mesh_size` devices whose layers split into `stages`
/// (virtual) pipeline stages (`None`: the plan places stages by op, and layers are kept),
/// and what changed, in words ("hidden 4096 → 64"; empty when nothing did).
pub fn shrink(
    model: Model,
    cfg: &ModelConfig,
    mesh_size: usize,
    stages: Option<usize>,
) -> (ModelConfig, Vec<String>) {
    let m = mesh_size.max(1);
    let small = |v: usize| if v <= m { v } else { m + (v - m) % m };
    let layers = match stages {
        Some(s) => {
            let s = s.max(1);
            let kept = if cfg.layers <= s {
                cfg.layers
            } else {
                s + (cfg.layers - s) % s
            };
            kept.max(cfg.layers.min(2))
        }
        None => cfg.layers,
    };
    let mut twin = ModelConfig {
        layers,
        batch: small(cfg.batch),
        seq: small(cfg.seq),
        vocab: small(cfg.vocab),
        ffn: small(cfg.ffn),
        features: small(cfg.features),
        classes: small(cfg.classes),
        ..cfg.clone()
    };
    twin.hidden = match model {
        Model::Mlp | Model::MlpMse => small(cfg.hidden),
        Model::Gpt | Model::EmbeddingLm | Model::GptLm | Model::Llama => {
            let heads = cfg.heads.max(1);
            let head_dim = cfg.hidden / heads;
            // The smallest head dim (even, for the rotary embedding's halves) whose hidden
            // keeps the real hidden's residue.
            let fits = |d: usize| (heads * d) % m == cfg.hidden % m && d <= head_dim.max(2);
            let d = (1..=head_dim.max(2))
                .filter(|d| model != Model::Llama || d % 2 == 0)
                .find(|&d| fits(d))
                .unwrap_or(head_dim);
            heads * d
        }
    };
    let mut said = Vec::new();
    let fields = [
        ("layers", cfg.layers, twin.layers),
        ("hidden", cfg.hidden, twin.hidden),
        ("ffn", cfg.ffn, twin.ffn),
        ("vocab", cfg.vocab, twin.vocab),
        ("seq", cfg.seq, twin.seq),
        ("batch", cfg.batch, twin.batch),
        ("features", cfg.features, twin.features),
        ("classes", cfg.classes, twin.classes),
    ];
    for (name, real, small) in fields {
        if real != small && model.reads(name) {
            said.push(format!("{name} {real} → {small}"));
        }
    }
    (twin, said)
}

impl Model {
    /// Whether the model's program depends on the size `field` of [`ModelConfig`].
    fn reads(self, field: &str) -> bool {
        let transformer = ["layers", "hidden", "seq", "batch", "heads"];
        match self {
            Model::Mlp | Model::MlpMse => {
                ["features", "hidden", "classes", "batch"].contains(&field)
            }
            Model::Gpt => transformer.contains(&field),
            Model::EmbeddingLm | Model::GptLm => transformer.contains(&field) || field == "vocab",
            Model::Llama => transformer.contains(&field) || field == "vocab" || field == "ffn",
        }
    }
}

/// What a run of the twin says it executed: "executed the shrunk twin: hidden 4096 → 64,
/// ...; every op, layout and collective is the real size's" (`None` when nothing shrank).
pub fn describe(said: &[String]) -> Option<String> {
    (!said.is_empty()).then(|| {
        format!(
            "executed the shrunk twin: {}; every op, layout and collective is the real size's",
            said.join(", ")
        )
    })
}
