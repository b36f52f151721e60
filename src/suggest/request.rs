//! A search request as the JavaScript API and the playground give it: a preset model with
//! sizes (or a plan text whose program is one), devices, a topology preset and a memory
//! budget. The CLI builds the same [`Problem`] from its flags.

use super::evaluate::Problem;
use crate::cost::device::Topology;
use crate::models::{Model, ModelConfig};
use crate::plan::{OptimizerKind, Plan, PlanOptions};
use serde::Deserialize;

/// What `suggest` takes (every field optional but a model or a text).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuggestRequest {
    /// The preset model (the CLI's `--preset`): mlp, mlp_mse, gpt, embedding_lm or llama.
    pub model: Option<String>,
    /// A plan text whose program is a preset model; its plan is priced beside the search's.
    pub text: Option<String>,
    pub layers: Option<usize>,
    pub batch: Option<usize>,
    pub seq: Option<usize>,
    pub hidden: Option<usize>,
    pub heads: Option<usize>,
    pub vocab: Option<usize>,
    pub features: Option<usize>,
    pub classes: Option<usize>,
    /// Devices to plan for (default: all of the topology's).
    pub devices: Option<usize>,
    /// A topology preset (default `h100x8`).
    pub topology: Option<String>,
    /// Bytes a device may hold at its peak (default: the device's memory).
    pub memory: Option<f64>,
    /// Rows of the table (default 5).
    pub top: Option<usize>,
    /// sgd, momentum, adam (default) or adamw.
    pub optimizer: Option<String>,
    #[serde(default)]
    pub amp: bool,
}

/// Every key of a request, for rejecting unknown ones where the decoder cannot.
pub const KEYS: &[&str] = &[
    "model",
    "text",
    "layers",
    "batch",
    "seq",
    "hidden",
    "heads",
    "vocab",
    "features",
    "classes",
    "devices",
    "topology",
    "memory",
    "top",
    "optimizer",
    "amp",
];

/// The sizes a request sets on a preset's (`base`).
fn config(r: &SuggestRequest, base: ModelConfig) -> ModelConfig {
    let mut cfg = base;
    let set = |field: &mut usize, v: Option<usize>| {
        if let Some(v) = v {
            *field = v;
        }
    };
    set(&mut cfg.layers, r.layers);
    set(&mut cfg.batch, r.batch);
    set(&mut cfg.seq, r.seq);
    set(&mut cfg.hidden, r.hidden);
    set(&mut cfg.heads, r.heads);
    set(&mut cfg.vocab, r.vocab);
    set(&mut cfg.features, r.features);
    set(&mut cfg.classes, r.classes);
    cfg
}

/// What is wrong with a request, by the field it names.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RequestError {
    #[error("sizes: a plan text fixes its model's sizes")]
    SizesWithText,
    /// The plan text's parse errors, one per line.
    #[error("{0}")]
    Text(String),
    #[error(transparent)]
    NotAPreset(#[from] super::identify::NotAPreset),
    #[error("model: {0}")]
    UnknownModel(crate::models::ModelError),
    #[error("model {name}: {error}")]
    Model {
        name: String,
        error: crate::models::ModelError,
    },
    #[error("give `model` (a preset) or `text` (a plan)")]
    NoModel,
    #[error("topology: {0}")]
    Topology(crate::cost::device::TopologyError),
    #[error("devices: {devices}, but {topology} has {has} devices")]
    Devices {
        devices: usize,
        topology: String,
        has: usize,
    },
    #[error("memory: {0} is not a positive number of bytes")]
    Memory(f64),
    #[error("top: {0} is not between 1 and 100")]
    Top(usize),
    #[error("optimizer: `{0}` is not sgd, momentum, adam or adamw")]
    Optimizer(String),
}

impl SuggestRequest {
    /// The search problem, the user's plan (from `text`) and the table size; errors name
    /// the field.
    pub fn problem(&self) -> Result<(Problem, Option<Plan>, usize), RequestError> {
        let sizes = [
            self.layers,
            self.batch,
            self.seq,
            self.hidden,
            self.heads,
            self.vocab,
        ];
        let (model, config, mine) = match (&self.model, &self.text) {
            (_, Some(text)) => {
                if sizes.iter().any(Option::is_some) || self.features.is_some() {
                    return Err(RequestError::SizesWithText);
                }
                let (plan, _) = crate::plan::parse_plan(text).map_err(|e| {
                    RequestError::Text(
                        e.iter()
                            .map(|e| e.to_string())
                            .collect::<Vec<_>>()
                            .join("\n"),
                    )
                })?;
                let (model, mut config) = super::identify::identify(&plan.program)?;
                config.batch *= plan.options.micro_batches.max(1);
                (model, config, Some(plan))
            }
            (Some(name), None) => {
                let (model, base) = Model::preset(name).map_err(RequestError::UnknownModel)?;
                let config = config(self, base);
                model.build(&config).map_err(|error| RequestError::Model {
                    name: name.clone(),
                    error,
                })?;
                (model, config, None)
            }
            (None, None) => return Err(RequestError::NoModel),
        };
        let topology = Topology::preset(self.topology.as_deref().unwrap_or("h100x8"))
            .map_err(RequestError::Topology)?;
        let devices = self.devices.unwrap_or(topology.devices);
        if devices == 0 || devices > topology.devices {
            return Err(RequestError::Devices {
                devices,
                topology: topology.name.to_string(),
                has: topology.devices,
            });
        }
        let budget_bytes = match self.memory {
            Some(m) if m.is_finite() && m > 0.0 => m,
            Some(m) => return Err(RequestError::Memory(m)),
            None => topology.device.mem_capacity,
        };
        let top = self.top.unwrap_or(5);
        if top == 0 || top > 100 {
            return Err(RequestError::Top(top));
        }
        let mut base = mine.as_ref().map_or(
            PlanOptions {
                optimizer: OptimizerKind::Adam,
                ..PlanOptions::default()
            },
            |p| p.options.clone(),
        );
        if let Some(o) = &self.optimizer {
            base.optimizer =
                OptimizerKind::from_name(o).ok_or_else(|| RequestError::Optimizer(o.clone()))?;
        }
        base.amp |= self.amp;
        let problem = Problem {
            model,
            config,
            base,
            dtype: topology.default_dtype,
            topology,
            devices,
            budget_bytes,
            models: Default::default(),
        };
        Ok((problem, mine, top))
    }
}
