//! The command line's enumerated options as types (clap `ValueEnum`): clap lists and checks
//! their values, and the code matches on variants instead of comparing strings.

use clap::ValueEnum;

/// How a command prints its result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Format {
    #[default]
    Text,
    Json,
}

/// What precision `run` verifies in (see `exec::precision`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum PrecisionFlag {
    /// The program's f32 variables computed in f64: rounding cannot hide an error.
    #[default]
    F64,
    /// Each variable in its declared dtype; on deep models the derived tolerance can be
    /// loose enough to pass a wrong result.
    Program,
}

impl PrecisionFlag {
    pub fn precision(self) -> crate::exec::precision::Precision {
        match self {
            PrecisionFlag::F64 => crate::exec::precision::Precision::F64,
            PrecisionFlag::Program => crate::exec::precision::Precision::Program,
        }
    }
}

/// The pipeline stage `plan` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Stage {
    /// Forward dist attrs.
    Complete,
    /// With grad ops.
    Backward,
    /// With update ops.
    Optimizer,
    /// Per-rank programs.
    Partition,
    /// Every stage.
    All,
}

impl Stage {
    /// Whether printing this stage prints `part` (`All` prints every part).
    pub fn shows(self, part: Stage) -> bool {
        self == part || self == Stage::All
    }

    /// The stage's place in the pipeline (`All` last).
    pub fn order(self) -> u8 {
        self as u8
    }
}

/// The optimizer of `plan` and `run`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum OptimizerName {
    #[default]
    Sgd,
    Momentum,
    Adam,
    Adamw,
}

impl OptimizerName {
    /// The plan's optimizer kind.
    pub fn kind(self) -> crate::plan::OptimizerKind {
        use crate::plan::OptimizerKind;
        match self {
            OptimizerName::Sgd => OptimizerKind::Sgd,
            OptimizerName::Momentum => OptimizerKind::Momentum,
            OptimizerName::Adam => OptimizerKind::Adam,
            OptimizerName::Adamw => OptimizerKind::AdamW,
        }
    }
}

/// What `bench` times.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum BenchWhat {
    /// Forward completion.
    #[default]
    Complete,
    /// The whole pipeline, all ranks.
    Pipeline,
    /// The whole pipeline with pipeline stages (96-layer gpt on [4, 2, 4] pp x dp x mp, 16
    /// micro-batches, 1F1B), beside the same model on [2, 4] in the same process.
    Stages,
    /// The executor's GEMM.
    Gemm,
    /// One training step of every rank.
    Step,
    /// The cost model's predictions on this machine against the executor's measured times.
    Cost,
    /// The auto-planner (`suggest`) on a 24-layer gpt (8 and 64 devices) and GPT-3 1.3B.
    Suggest,
    /// The ONNX import of the fixtures in tests/models/ (run from the repository).
    Import,
    /// The published training runs (src/cli/published_runs.json) priced at their published
    /// configurations: modelled TFLOP/s per device against the reported figure.
    Published,
}
