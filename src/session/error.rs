//! The playground's errors: why a link does not open, and why the session cannot do what a
//! panel asks (run, price, export, show a collective's values). Typed like the core's; the
//! page prints them (`protocol::Failure` carries them across to it).

use crate::cost::device::TopologyError;
use crate::cost::estimate::EstimateError;
use crate::cost::pipeline::PipelineTimeError;
use crate::export::ExportError;
use crate::models::ModelError;
use crate::passes::driver::PassError;
use crate::plan::{OptionError, SpecError};

/// Why a link (a URL hash) does not open.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LinkError {
    #[error("the link is too long")]
    TooLong,
    #[error("the link has a malformed field `{0}`")]
    Malformed(String),
    #[error("the link's field `{0}` is not valid percent-encoding")]
    Encoding(String),
    /// A field's value is not what the field takes (`expected` says what it takes).
    #[error("the link's `{key}` must be {expected}, not `{value}`")]
    Field {
        key: &'static str,
        expected: &'static str,
        value: String,
    },
    /// A name the playground does not know (a topology, schedule, stage or notation).
    #[error("the link's {what} `{value}` is unknown")]
    Unknown { what: &'static str, value: String },
    #[error("the link's {0}")]
    Option(OptionError),
    #[error("the link's stage boundaries: {0}")]
    StageStarts(Box<SessionError>),
    #[error("the link's plan does not parse: {0}")]
    PlanParse(String),
    #[error("the link's plan has no mesh")]
    NoMesh,
    #[error("the link's plan does not verify")]
    DoesNotVerify,
    #[error("{0}")]
    Scenario(Box<SessionError>),
    #[error("the link's {0}")]
    Layers(Box<SessionError>),
    #[error("the link's mesh: {0}")]
    Mesh(SpecError),
    #[error("the link's parallel: {0}")]
    Parallel(crate::plan::parallel::ParallelError),
    /// `sp` and `cp` rewrite the program (gather points, fused attention), which a link
    /// does not carry.
    #[error("the link's parallel: links do not carry `{0}` yet (`shardlab plan` does)")]
    NotInLinks(&'static str),
    #[error("the link gives both `parallel` and `mesh`; `parallel` builds the mesh")]
    ParallelAndMesh,
    #[error("the link's mesh is too large for the playground")]
    MeshTooLarge,
    #[error("no mesh")]
    NoMeshForShards,
    #[error("the link's annotation: {0}")]
    Annotation(SpecError),
    #[error("the link's timeline position is not a number")]
    Timeline,
    #[error("the link's rank is not a number")]
    Rank,
}

/// A scenario a link names that does not open.
impl From<SessionError> for LinkError {
    fn from(e: SessionError) -> LinkError {
        LinkError::Scenario(Box::new(e))
    }
}

/// Why the session cannot do what was asked.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SessionError {
    #[error("unknown preset `{0}`")]
    UnknownPreset(String),
    #[error("layers must be 1 to {max} in the playground, not {layers}")]
    Layers { layers: usize, max: usize },
    #[error("`{0}` has no blocks to repeat")]
    NoBlocks(String),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error(transparent)]
    Link(#[from] LinkError),
    #[error("the plan has an error")]
    PlanHasError,
    /// The plan could not be planned (the message the session shows for it).
    #[error("{0}")]
    Planning(String),
    #[error("nothing to run: the plan has an error")]
    NothingToRun,
    #[error("this model is too large to run in the browser; use `shardlab run`")]
    TooLarge,
    #[error("the shrunk twin has no variable `{0}`; edit the plan at its real size, or run it with `shardlab run`")]
    TwinVar(String),
    // The executor's errors are kept as their messages: the engine formats them, so the
    // page's module does not carry the executor's error types (it shows only the text).
    #[error("run failed: {0}")]
    Run(String),
    #[error("the serial run failed: {0}")]
    Serial(String),
    #[error(transparent)]
    Passes(#[from] PassError),
    #[error(transparent)]
    Topology(#[from] TopologyError),
    #[error(transparent)]
    Estimate(#[from] EstimateError),
    #[error(transparent)]
    Schedule(#[from] PipelineTimeError),
    #[error("the pinned plan did not open: {0}")]
    Pinned(LinkError),
    #[error(transparent)]
    Export(#[from] ExportError),
    #[error("no pipeline: name a mesh axis `pp`, or use more micro-batches")]
    NoPipeline,
    #[error("the plan has no pipeline")]
    NoSchedule,
    #[error("{got} stage starts for {want} stages")]
    StageCount { got: usize, want: usize },
    #[error("stage starts {starts:?} must rise from op 0 and stay below op {ops}")]
    StageStarts { starts: Vec<usize>, ops: usize },
    #[error("no lesson {0}")]
    NoLesson(usize),
    #[error("lesson {number}: {message}")]
    Lesson { number: usize, message: String },
    #[error("the selected rank is not built")]
    RankNotBuilt,
    #[error("rank {0} is not built")]
    PeerNotBuilt(u32),
    #[error("rank {rank} has no op {op}")]
    NoSuchOp { rank: u32, op: usize },
    #[error("op {op} ({ty}) is not a collective")]
    NotCollective { op: usize, ty: crate::ir::OpType },
    #[error("no such op")]
    NoOpKey,
    #[error("{0}")]
    Values(String),
    #[error("every rank must be partitioned")]
    NotPartitioned,
    #[error("the executor left no value for this send and recv")]
    NoP2pValue,
    #[error("op {op} ({ty}) names no peer")]
    NoPeer { op: usize, ty: crate::ir::OpType },
    #[error("the op is not on its ring")]
    NotOnRing,
    #[error("rank {peer} has no matching {ty} on ring {ring}")]
    NoPeerOp {
        peer: u32,
        ty: crate::ir::OpType,
        ring: i64,
    },
    #[error("the send has no input or the recv no output")]
    P2pSlots,
}

impl From<SessionError> for crate::protocol::Failure {
    fn from(e: SessionError) -> crate::protocol::Failure {
        crate::protocol::Failure {
            message: e.to_string(),
        }
    }
}
