//! The messages between the playground's page and its engine (a Web Worker in the
//! browser, in-process natively): the jobs the page sends and the outcomes the engine
//! answers, with the data they carry.
//!
//! Why a module of its own: the session makes jobs and applies their replies, and the
//! engine opens sessions to do the jobs. Both use these types, so they live below both,
//! and neither module depends on the other's half.

use crate::cost::diff::PlanDiff;
use crate::cost::estimate::Estimate;
use crate::cost::pipeline_cost::PipelineCost;
use crate::dist::ReduceType;
use crate::exec::verify::Check;
use crate::export::ExportMode;
use crate::ir::Op;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};

/// One piece of work for the engine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// Unique in the page (see [`Job::new`]); the replies carry it.
    pub id: u64,
    /// The session's link (`Session::to_hash`).
    pub link: String,
    pub task: Task,
}

/// What to do with the session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Task {
    /// Run the plan (every rank) and verify it against serial.
    Run,
    /// Run the plan with these mistakes made and report what diverges.
    RunBroken(Vec<(BrokenOp, Breakage)>),
    /// Op `op` of the selected rank's program with real values.
    Values(usize),
    /// The plan as a JAX script.
    Export(ExportMode),
    /// The plan priced on the session's topology, and against the pinned plan (its link).
    Cost { pinned: Option<String> },
    /// The pipeline's schedule in time (the pipeline panel's Gantt chart).
    PipelineCost,
    /// The auto-planner on the session's model (devices: the mesh's by default; memory:
    /// GB per device, the device's by default).
    Suggest {
        devices: Option<usize>,
        memory_gb: Option<f64>,
    },
    /// A model file imported (`crate::import`; the link is not read).
    Import(ImportFile),
    /// Lesson N's words (the link is not read).
    Lesson(usize),
}

/// A model file to import: `name` is the file's name, `dims` the sizes of its symbolic
/// dims (`batch=8, seq=16`), `parallel` the strategy by sizes the plan gets (`dp=2,tp=2`;
/// blank: one device).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ImportFile {
    pub name: String,
    pub bytes: Vec<u8>,
    pub dims: String,
    pub parallel: String,
}

/// Why a job failed, as it crosses to the page (which prints it): the session's and the
/// search's typed errors, by their message (`From<SessionError>` in `session`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct Failure {
    pub message: String,
}

/// What the engine answers.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub enum Outcome {
    /// Work done so far, of the total (the search sends these before its answer).
    Progress {
        done: usize,
        total: usize,
    },
    Run(Result<RunSummary, Failure>),
    Broken(Result<BreakReport, Failure>),
    Values(Result<CollectiveView, Failure>),
    Export(Result<String, Failure>),
    Cost(Box<CostView>),
    PipelineCost(Result<PipelineCost, Failure>),
    Suggest(Result<SuggestView, Failure>),
    /// An imported model (a file that does not import is `Failed`, with the reason).
    Import(ImportView),
    /// A lesson's text and "try this".
    Lesson {
        text: String,
        try_this: String,
    },
    /// The job could not be done at all (the link did not open, the worker failed).
    Failed(String),
}

impl Outcome {
    /// Whether more replies follow for the same job.
    pub fn is_progress(&self) -> bool {
        matches!(self, Outcome::Progress { .. })
    }
}

/// The cost panel's figures: the plan's estimate, and the comparison with the pinned plan
/// (`None` without one).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CostView {
    pub cost: Result<Estimate, Failure>,
    pub diff: Option<Result<PlanDiff, Failure>>,
}

/// An imported model: its plan's text (what the import did as comments at its head), and
/// one line saying what was imported.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ImportView {
    pub text: String,
    pub summary: String,
}

/// One message from the engine.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    pub id: u64,
    pub outcome: Outcome,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl Job {
    /// A job on the session with link `link` (`Session::to_hash`), with a fresh id (ids
    /// never repeat in a page, even across the new sessions a preset or a link makes, so a
    /// late reply cannot land on a newer job).
    pub fn new(link: String, task: Task) -> Job {
        Job {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            link,
            task,
        }
    }
}

/// What the page sends the engine: a job, or the cancellation of one it no longer wants
/// (queued or under way, it is dropped unanswered).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Request {
    Job(Job),
    Cancel(u64),
}

/// A finished browser run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    pub serial_losses: Vec<f64>,
    pub dist_losses: Vec<f64>,
    pub checks: Vec<Check>,
    /// What the shrunk twin shrank, when a published model's twin ran in its place
    /// (`session::twin`; empty: the plan ran at its own size).
    #[serde(default)]
    pub shrunk: Vec<String>,
}

/// One deliberate mistake. `op` indexes the selected rank's program when it was made; on
/// other ranks the same op is found by type, purpose and operand names (pipeline stages
/// have different programs), and ranks without it are left alone.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Breakage {
    /// Delete the op on every rank.
    Delete { op: usize },
    /// Delete the op on one rank only: a sync that one rank skips.
    SkipOnRank { op: usize, rank: u32 },
    /// Give a collective another reduce type.
    SetReduce { op: usize, reduce: ReduceType },
    /// Give a collective another group on every rank.
    SetGroup { op: usize, group: GroupChange },
}

/// How a broken collective's group changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum GroupChange {
    /// Each rank alone: the collective does nothing.
    Alone,
    /// The whole mesh: it also mixes ranks it must not.
    WholeMesh,
}

/// The op a breakage applies to, recognised on every rank by type, namescope, operand
/// names, and which occurrence of that combination it is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BrokenOp {
    pub(crate) op: Op,
    pub(crate) names: Vec<String>,
    pub(crate) nth: usize,
}

/// What a broken run found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BreakReport {
    /// The mistakes, described.
    pub breaks: Vec<String>,
    /// Failing tensors, first divergence first (losses by step, then gradients, then
    /// parameters).
    pub diverged: Vec<Divergence>,
    /// Tensors compared.
    pub compared: usize,
    /// The run could not finish (a deadlock, a missing tensor): what the executor said.
    pub failure: Option<String>,
    /// What the shrunk twin shrank, when it ran in the plan's place (see [`RunSummary`]).
    #[serde(default)]
    pub shrunk: Vec<String>,
}

/// One tensor that diverged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Divergence {
    pub tensor: String,
    /// The one-line diagnosis.
    pub diagnosis: String,
    /// |distributed − serial| per element of the worst copy, as rows × cols (the last dim
    /// is the columns), pooled by max to at most 32 × 32.
    pub heat: Vec<Vec<f64>>,
    /// The largest difference and the tolerance it is held to.
    pub max_abs_diff: f64,
    pub tolerance: f64,
}

/// A collective's values across its group.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CollectiveView {
    /// The op's index in the selected rank's program, and its text.
    pub op: usize,
    pub label: String,
    pub group: Vec<u32>,
    /// Per group member (group order): rank, input block, output block.
    pub blocks: Vec<Block>,
    /// For an all-reduce: the ring's states, the first before any step.
    pub ring: Vec<RingStep>,
    /// A send between pipeline stages and its recv: the sender's block is what it sent,
    /// the receiver's what arrived (micro-batch 0).
    pub pair: bool,
    /// What the shrunk twin shrank, when its values are shown (see [`RunSummary`]).
    #[serde(default)]
    pub shrunk: Vec<String>,
}

/// One rank's values around the op.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Block {
    pub rank: u32,
    pub in_shape: Vec<usize>,
    pub input: Vec<f64>,
    pub out_shape: Vec<usize>,
    pub output: Vec<f64>,
}

/// The ring after one step: what each member holds of each chunk.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RingStep {
    /// "start", "reduce-scatter k/N-1", "all-gather k/N-1".
    pub title: String,
    /// (from, to, chunk) sent in this step, by group position.
    pub sends: Vec<(usize, usize, usize)>,
    /// `chunks[member][chunk]`: the member's copy of that chunk's elements.
    pub chunks: Vec<Vec<Vec<f64>>>,
}

/// One row of the cost table, formatted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SuggestRow {
    /// The user's own plan (priced beside the candidates).
    pub mine: bool,
    pub mesh: String,
    pub strategy: String,
    pub zero: String,
    pub schedule: String,
    pub recompute: String,
    pub compute: String,
    pub comm: String,
    pub bubble: String,
    pub peak: String,
    pub step: String,
}

/// The search's answer, formatted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SuggestView {
    /// The candidates, fastest first, then the user's plan if priced.
    pub rows: Vec<SuggestRow>,
    pub reason: String,
    /// How much was searched, in a sentence.
    pub stats: String,
    /// The winner's plan text (loads into the playground).
    pub plan: String,
}
