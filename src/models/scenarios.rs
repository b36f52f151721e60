//! Ready-made plans: a preset model, a mesh and annotations, written as the one-line specs
//! a user would type (`--mesh 2x4:dp,mp --shard x=dp,-`). The playground's presets, the
//! CLI's `--scenario` and the golden tests share them.

use super::{Model, ModelConfig, ModelError};
use crate::plan::{parse_mesh_spec, parse_shard_spec, Plan};
use std::sync::Arc;

/// A named plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scenario {
    pub name: &'static str,
    pub title: &'static str,
    pub model: Model,
    pub layers: usize,
    pub mesh: &'static str,
    pub shards: Vec<String>,
    /// Build `gpt` with Megatron's sequence-parallel gather points
    /// ([`super::gpt::gpt_sequence_parallel`]).
    pub sequence_parallel: bool,
    /// How the annotations repeat per block, for the same plan with more blocks.
    pub per_layer: PerLayer,
    /// A published model at its real size, planned with its strategy and training options
    /// ([`super::published_plans`]); `None` for the toy scenarios.
    pub published: Option<super::published_plans::PublishedPlan>,
}

/// How a scenario's annotations grow with its number of blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PerLayer {
    /// They do not (no blocks, or annotations of one block only).
    Fixed,
    /// `x` split over dp and every block Megatron tensor parallel over mp.
    Megatron,
    /// Megatron sequence parallelism in every block.
    SequenceParallel,
    /// `ids` split over dp and every llama block Megatron tensor parallel over mp, with the
    /// vocab-parallel embedding and LM head.
    LlamaMegatron,
    /// The annotations come from the scenario's `--parallel` strategy, found by pattern
    /// on whatever program is built ([`super::published_plans`]).
    Strategy,
}

impl PerLayer {
    /// The annotations for `layers` blocks (`None` for [`PerLayer::Fixed`]).
    pub fn shards(self, layers: usize) -> Option<Vec<String>> {
        match self {
            PerLayer::Fixed => None,
            PerLayer::Megatron => Some(gpt_dp_mp_shards(layers)),
            PerLayer::SequenceParallel => Some(sequence_parallel_shards(layers, "mp")),
            PerLayer::LlamaMegatron => Some(llama_dp_mp_shards(layers)),
            PerLayer::Strategy => Some(Vec::new()),
        }
    }
}

fn gpt_dp_mp_shards(layers: usize) -> Vec<String> {
    let mut shards = vec!["x=dp,-,-".to_string()];
    shards.extend(megatron_shards(layers, "mp"));
    shards
}

/// Megatron sequence parallelism for every block of `layers` on top of its tensor
/// parallelism: the residual stream, the layer norms and their outputs split on the
/// sequence over `mp`, the gather points whole on it (see `gpt_sequence_parallel`).
pub fn sequence_parallel_shards(layers: usize, mp: &str) -> Vec<String> {
    let mut shards = vec![format!("x=dp,{mp},-")];
    for i in 0..layers {
        for ln in ["ln_1", "ln_2"] {
            shards.push(format!("h{i}.{ln}.out=dp,{mp},-"));
            shards.push(format!("h{i}.{ln}.gathered=dp,-,-"));
        }
        for res in ["res_1", "res_2"] {
            shards.push(format!("h{i}.{res}=dp,{mp},-"));
        }
        // The row-parallel outputs: summed straight onto the sequence split.
        for row in ["attn.o.mm", "mlp.fc2.mm"] {
            shards.push(format!("h{i}.{row}=dp,{mp},-"));
        }
    }
    shards.extend(megatron_shards(layers, mp));
    shards
}

/// Megatron-LM tensor parallelism for every block of `layers`: q, k, v and fc1 column
/// parallel (weights `[-, mp]`, biases `[mp]`), the output projection and fc2 row parallel.
pub fn megatron_shards(layers: usize, mp: &str) -> Vec<String> {
    let mut shards = Vec::new();
    for i in 0..layers {
        for col in ["attn.q", "attn.k", "attn.v", "mlp.fc1"] {
            shards.push(format!("h{i}.{col}.w=-,{mp}"));
            shards.push(format!("h{i}.{col}.b={mp}"));
        }
        for row in ["attn.o", "mlp.fc2"] {
            shards.push(format!("h{i}.{row}.w={mp},-"));
        }
    }
    shards
}

fn llama_dp_mp_shards(layers: usize) -> Vec<String> {
    let mut shards = vec![
        "ids=dp,-".to_string(),
        "wte=mp,-".to_string(),
        "lm_head.w=-,mp".to_string(),
    ];
    shards.extend(llama_megatron_shards(layers, "mp"));
    shards
}

/// Megatron-LM tensor parallelism for every llama block of `layers`: q, k, v, gate and up
/// column parallel (weights `[-, mp]`; a rank holds whole query and key/value heads), the
/// output and down projections row parallel. Llama has no biases.
pub fn llama_megatron_shards(layers: usize, mp: &str) -> Vec<String> {
    let mut shards = Vec::new();
    for i in 0..layers {
        for col in ["attn.q", "attn.k", "attn.v", "mlp.gate", "mlp.up"] {
            shards.push(format!("h{i}.{col}.w=-,{mp}"));
        }
        for row in ["attn.o", "mlp.down"] {
            shards.push(format!("h{i}.{row}.w={mp},-"));
        }
    }
    shards
}

/// Every scenario.
pub fn scenarios() -> Vec<Scenario> {
    let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let gpt_shards = gpt_dp_mp_shards(1);
    vec![
        toy(
            "dp_mlp",
            "Data-parallel MLP",
            Model::Mlp,
            0,
            "4:dp",
            s(&["x=dp,-"]),
            PerLayer::Fixed,
        ),
        toy(
            "megatron_mlp",
            "Megatron MLP (column then row parallel)",
            Model::Mlp,
            0,
            "4:mp",
            s(&["linear_0.w_0=-,mp", "linear_0.b_0=mp", "linear_1.w_0=mp,-"]),
            PerLayer::Fixed,
        ),
        toy(
            "gpt_dp_mp",
            "GPT block, data × tensor parallel",
            Model::Gpt,
            1,
            "2x4:dp,mp",
            gpt_shards,
            PerLayer::Megatron,
        ),
        toy(
            "vocab_embedding",
            "Vocab-parallel embedding",
            Model::EmbeddingLm,
            1,
            "2x4:dp,mp",
            s(&["ids=dp,-", "wte=mp,-"]),
            PerLayer::Fixed,
        ),
        // x pins k to mp and the weight pins n to mp: n keeps mp (Paddle 3.3.1), so x is
        // gathered; the output pinned replicated on n rejects the rule's split: a conflict.
        toy(
            "reshard_conflict",
            "A conflict that forces a reshard",
            Model::Mlp,
            0,
            "2x4:dp,mp",
            s(&["x=dp,mp", "linear_0.w_0=-,mp", "linear_0.tmp_0=dp,-"]),
            PerLayer::Fixed,
        ),
        toy(
            "llama_dp_mp",
            "Llama block, data × tensor parallel",
            Model::Llama,
            1,
            "2x2:dp,mp",
            llama_dp_mp_shards(1),
            PerLayer::LlamaMegatron,
        ),
        Scenario {
            sequence_parallel: true,
            ..toy(
                "gpt_sequence_parallel",
                "GPT block, Megatron sequence parallelism",
                Model::Gpt,
                1,
                "2x4:dp,mp",
                sequence_parallel_shards(1, "mp"),
                PerLayer::SequenceParallel,
            )
        },
    ]
}

/// A toy scenario (no sequence-parallel gather points, not a published model).
fn toy(
    name: &'static str,
    title: &'static str,
    model: Model,
    layers: usize,
    mesh: &'static str,
    shards: Vec<String>,
    per_layer: PerLayer,
) -> Scenario {
    Scenario {
        name,
        title,
        model,
        layers,
        mesh,
        shards,
        sequence_parallel: false,
        per_layer,
        published: None,
    }
}

impl Scenario {
    /// Looks a scenario up by name.
    pub fn by_name(name: &str) -> Option<Scenario> {
        scenarios()
            .into_iter()
            .chain(super::published_plans::published_scenarios())
            .find(|s| s.name == name)
    }

    /// The model's sizes (its defaults, or a published model's real ones; with this
    /// scenario's layer count).
    pub fn config(&self) -> ModelConfig {
        let base = match &self.published {
            Some(p) => p.config(),
            None => self.model.default_config(),
        };
        if self.layers > 0 {
            ModelConfig {
                layers: self.layers,
                ..base
            }
        } else {
            base
        }
    }

    /// Builds the plan.
    pub fn plan(&self) -> Result<Plan, ModelError> {
        self.plan_with(&self.config())
    }

    /// The plan with `layers` blocks, annotated per block where the scenario's annotations
    /// repeat per block (`None`: the scenario has no blocks to add).
    pub fn plan_layers(&self, layers: usize) -> Option<Result<Plan, ModelError>> {
        let shards = self.per_layer.shards(layers)?;
        let config = ModelConfig {
            layers,
            ..self.config()
        };
        let sized = Scenario {
            layers,
            shards,
            ..self.clone()
        };
        Some(sized.plan_with(&config))
    }

    /// Builds the plan with the model built from `config` (its element type, say); the mesh
    /// and annotations are the scenario's.
    /// The scenario's forward program at `config`'s sizes.
    pub fn program(&self, config: &ModelConfig) -> Result<crate::ir::Program, ModelError> {
        if self.sequence_parallel {
            super::check_sizes(self.model, config)?;
            super::gpt::gpt_sequence_parallel(config)
        } else {
            self.model.build(config)
        }
    }

    pub fn plan_with(&self, config: &ModelConfig) -> Result<Plan, ModelError> {
        let program = self.program(config)?;
        let (mesh, shards) = match &self.published {
            Some(p) => p.strategy(&program),
            None => (self.mesh.to_string(), self.shards.clone()),
        };
        let mesh = Arc::new(parse_mesh_spec(&mesh).map_err(|e| ModelError::BadSize(e.into()))?);
        let mut plan = Plan::from_program(program);
        plan.set_mesh(mesh.clone());
        if let Some(p) = &self.published {
            plan.options = p.options();
        }
        for spec in &shards {
            plan.annotations.push(
                parse_shard_spec(spec, &plan.program, &mesh)
                    .map_err(|e| ModelError::BadSize(e.into()))?,
            );
        }
        Ok(plan)
    }
}
