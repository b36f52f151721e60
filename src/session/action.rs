//! What a user can do to a session: every click, key and edit of the playground is one
//! `Action`, which `Session::reduce` applies.

use super::{Breakage, Stage};
use crate::dist::Notation;

/// A user's choice for one dim of an annotation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DimChoice {
    /// Not annotated: completion decides.
    Free,
    /// Pinned replicated.
    Replicated,
    /// Pinned to these mesh axes.
    Axes(Vec<usize>),
}

/// Everything the user can do.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    LoadScenario(String),
    /// A new mesh shape (axis names kept where they exist, others named `d<i>`).
    SetMeshShape(Vec<usize>),
    RenameAxis(usize, String),
    SetDim {
        var: String,
        dim: usize,
        choice: DimChoice,
    },
    ClearAnnotation(String),
    SelectVar(Option<String>),
    SelectRank(u32),
    SetNotation(Notation),
    SetStage(Stage),
    /// Move the timeline by this many events.
    Step(i64),
    /// Put the timeline at this event count.
    Seek(usize),
    /// Events per play tick (1, 4 or 16).
    SetPlaySpeed(usize),
    /// The scenario's model with this many blocks, annotated per block (1-48).
    SetLayers(usize),
    TogglePlay,
    /// A timer tick while playing.
    Tick,
    /// The plan text in the editor (applied only when it parses and verifies).
    EditText(String),
    Run,
    /// Megatron's backward sums on or off (see `PartitionOptions::defer_partial_sums`).
    SetMegatronSums(bool),
    /// The ZeRO stage (0-3) of the plan's options.
    SetZero(u8),
    /// The topology preset the cost panel prices the plan on.
    SetTopology(String),
    /// The pipeline panel and the stage boundaries (see [`PipelineAction`]).
    Pipeline(PipelineAction),
    /// Pin the current plan to compare later plans against; unpin.
    Pin,
    Unpin,
    /// Load a suggested plan's text; with `compare`, pin the current plan first so the cost
    /// panel shows the difference.
    AdoptSuggestion {
        text: String,
        compare: bool,
    },
    /// Open the selected rank's program at this op and light its group (`None`: unfocus).
    FocusOp(Option<usize>),
    /// Break-it mode on or off (off forgets the breakages).
    SetBreakMode(bool),
    /// Make a deliberate mistake in the rank programs.
    Break(Breakage),
    /// Undo every breakage.
    ClearBreaks,
    /// Run the broken programs against serial.
    RunBroken,
    /// Open a link's state (an embed's reset, a lesson), keeping the embed flag.
    OpenLink(String),
    /// Import a model file (`crate::engine::import_model` does it in the worker) and open
    /// its plan.
    Import(crate::protocol::ImportFile),
    /// Show a collective of the selected rank's program with real values (`None`: hide).
    ShowValues(Option<usize>),
    /// The engine's answer to a job (`crate::engine`); ignored unless it answers the job
    /// the session waits for. Shared, not copied: actions are cloned, and a deep copy of
    /// every kind of answer would be code the page downloads for nothing.
    Reply(std::rc::Rc<crate::protocol::Reply>),
    Dismiss,
}

/// What the pipeline panel and the program view's stage boundaries do.
#[derive(Clone, Debug, PartialEq)]
pub enum PipelineAction {
    /// The pipeline schedule of the plan's options.
    SetSchedule(crate::plan::ScheduleKind),
    /// Micro-batches per step (the plan's options).
    SetMicroBatches(usize),
    /// Model chunks per pipeline stage (the plan's options; vpp).
    SetChunks(usize),
    /// The Gantt chart in ideal units (forward 1, backward 2) instead of the cost model's.
    SetGanttIdeal(bool),
    /// Pipeline (virtual) stage `stage` starts at forward op `first_op` (a dragged boundary).
    MoveStageBoundary { stage: usize, first_op: usize },
}
