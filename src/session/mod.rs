//! The playground's state and its reducer, outside any UI framework (tested natively). The
//! Yew components render a [`Session`] and dispatch [`Action`]s; everything the page shows
//! is derived here, and the whole state round-trips through the URL hash.

use crate::dist::{DimAxes, MeshAxis, MeshId, Notation, ProcessMesh, TensorDistAttr};
use crate::exec::run::{run_distributed, run_serial, RunOptions};
use crate::exec::verify::verify;
use crate::models::scenarios::{scenarios, Scenario};
use crate::passes::driver::{run_passes, PassOptions, Passes};
use crate::passes::partition::PartitionOptions;
use crate::plan::{mesh_spec, parse_plan, parse_shard_spec, Annotation, Plan};
use std::sync::Arc;

mod action;
mod backward_timeline;
mod break_it;
mod cost;
mod edit;
pub mod error;
mod exercises;
mod export;
mod jobs;
mod lesson_words;
mod lessons;
mod link;
mod picture;
mod pipe;
mod replay;
mod run;
mod suggest;
mod twin;
mod values;

pub use crate::protocol::{
    Block, BreakReport, Breakage, BrokenOp, CollectiveView, Divergence, GroupChange, RingStep,
    RunSummary,
};
pub use action::{Action, DimChoice, PipelineAction};
pub use cost::{Pinned, TOPOLOGIES};
pub use error::{LinkError, SessionError};
pub use exercises::{AnswerKind, Exercise, Grade};
pub use lesson_words::lesson_words;
pub use lessons::{Lesson, LESSONS};
pub use link::{decode, encode, preset_names};
pub use picture::{InsertedOp, Operand};
pub use values::ring_all_reduce;

/// Which program the page shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// The forward program as completion leaves it (the timeline plays here).
    Forward,
    /// Forward + backward + optimizer, serial, with dist attrs.
    Backward,
    /// One rank's program with its communication.
    Partition,
}

impl Stage {
    /// URL / menu identifier.
    pub fn id(self) -> &'static str {
        match self {
            Stage::Forward => "forward",
            Stage::Backward => "backward",
            Stage::Partition => "partition",
        }
    }

    /// Parses an identifier.
    pub fn from_id(id: &str) -> Option<Stage> {
        [Stage::Forward, Stage::Backward, Stage::Partition]
            .into_iter()
            .find(|s| s.id() == id)
    }
}

/// The playground's state.
#[derive(Clone)]
pub struct Session {
    /// The scenario the plan came from (`custom` after a text edit).
    pub scenario: String,
    /// The scenario's blocks when not its own count (a link field, not plan text).
    pub layers: Option<usize>,
    pub plan: Plan,
    /// The editor's text (may not parse).
    pub text: String,
    /// Problems of the editor's text: (line, column, message).
    pub text_errors: Vec<(usize, usize, String)>,
    pub pipeline: Option<Arc<Passes>>,
    pub plan_error: Option<String>,
    pub stage: Stage,
    /// Completion events shown (0 = annotations only; the end = completed).
    pub timeline: usize,
    pub playing: bool,
    /// Events per play tick.
    pub play_speed: usize,
    /// Backward and optimizer ops shown completed on the Backward tab (the end = all).
    pub backward_step: usize,
    pub selected_var: Option<String>,
    pub selected_rank: u32,
    pub notation: Notation,
    /// A message for the user (an invalid choice, a bad link).
    pub message: Option<String>,
    /// An open lesson's text and "try this", once the engine sends them (the page's module
    /// does not carry them: `lesson_words`).
    pub lesson_words: Option<(String, String)>,
    pub run: Option<RunSummary>,
    pub embed: bool,
    /// Partition with Megatron's backward sums instead of Paddle's per-matmul all-reduces.
    pub megatron_sums: bool,
    /// The topology preset of the cost panel.
    pub topology: String,
    /// A plan pinned for comparison.
    pub pinned: Option<Pinned>,
    /// The Gantt chart in ideal units.
    pub gantt_ideal: bool,
    /// A rejected dim choice, shown at the dim: (variable, dim, why).
    pub dim_error: Option<(String, usize, String)>,
    /// Bumped by every rejected dim choice, so the page redraws the menu it reverts.
    pub rejections: u32,
    /// The op of the selected rank's program in focus (clicked in the rank lens).
    pub focus_op: Option<usize>,
    /// Break-it mode: the rank program offers mistakes to make.
    pub break_mode: bool,
    /// The mistakes made, each with the op it applies to on every rank.
    pub breaks: Vec<(BrokenOp, Breakage)>,
    /// What the last broken run found.
    pub break_report: Option<BreakReport>,
    /// The collective shown with real values, or why it cannot be.
    pub values: Option<Result<CollectiveView, crate::protocol::Failure>>,
    /// The engine job this session waits for (Run, a broken run, a collective's values);
    /// the page sends it to the engine and dispatches the reply.
    pub job: Option<crate::protocol::Job>,
}

/// Whether two states draw the same page (`use_reducer_eq` skips rendering an equal one).
/// The engine's answers (a run, a broken run's report, a collective's values) are compared
/// by presence only: one lands only as the reply to the job the session waits for, and
/// that reply also clears the job, so a state with a new answer always differs from the
/// one before it in `job`. Comparing the answers themselves would put their deep
/// comparisons (every check, every value) in the page's module for nothing.
impl PartialEq for Session {
    fn eq(&self, other: &Session) -> bool {
        self.scenario == other.scenario
            && self.layers == other.layers
            && self.text == other.text
            && self.stage == other.stage
            && self.timeline == other.timeline
            && self.playing == other.playing
            && self.play_speed == other.play_speed
            && self.backward_step == other.backward_step
            && self.selected_var == other.selected_var
            && self.selected_rank == other.selected_rank
            && self.notation == other.notation
            && self.message == other.message
            && self.run.is_some() == other.run.is_some()
            && self.embed == other.embed
            && self.plan_error == other.plan_error
            && self.megatron_sums == other.megatron_sums
            && self.topology == other.topology
            && self.gantt_ideal == other.gantt_ideal
            && self.dim_error == other.dim_error
            && self.rejections == other.rejections
            && self.focus_op == other.focus_op
            && self.break_mode == other.break_mode
            && self.breaks == other.breaks
            && self.break_report.is_some() == other.break_report.is_some()
            && self.values.is_some() == other.values.is_some()
            && self.job.as_ref().map(|j| j.id) == other.job.as_ref().map(|j| j.id)
            && self.pinned == other.pinned
            && self.lesson_words == other.lesson_words
    }
}

/// The scenario the page opens on: GPT-3 13B at its real size on one 8-GPU node (2-way data
/// × 4-way tensor parallel, the uneven 50,257-row vocabulary padded),
/// so the first numbers are milliseconds, gigabytes and an MFU.
pub const DEFAULT_SCENARIO: &str = "gpt3-13b";

impl Default for Session {
    fn default() -> Self {
        Session::from_scenario(DEFAULT_SCENARIO).unwrap_or_else(|_| {
            Session::from_plan("custom", Plan::from_program(crate::ir::Program::new()))
        })
    }
}

/// Largest model the browser plans or runs (layers), to keep the page responsive.
pub const MAX_BROWSER_OPS: usize = 4000;

/// Most blocks a scenario link or the layers box may ask for: Llama 3 405B's 126 fit (the
/// ops are held to [`MAX_BROWSER_OPS`] too).
pub const MAX_BROWSER_LAYERS: usize = 128;

impl Session {
    /// A session on a named scenario.
    pub fn from_scenario(name: &str) -> Result<Session, SessionError> {
        let s =
            Scenario::by_name(name).ok_or_else(|| SessionError::UnknownPreset(name.to_string()))?;
        Ok(Session::from_plan(s.name, s.plan()?))
    }

    /// A session on a named scenario with `layers` blocks, annotated per block.
    pub fn from_scenario_layers(name: &str, layers: usize) -> Result<Session, SessionError> {
        let mut s = Session::scenario_unplanned(name, Some(layers))?;
        s.replan();
        Ok(s)
    }

    /// A session on a named scenario (with `layers` blocks, annotated per block), not yet
    /// planned: a link plans once, after its mesh and annotations are applied.
    pub(super) fn scenario_unplanned(
        name: &str,
        layers: Option<usize>,
    ) -> Result<Session, SessionError> {
        let s =
            Scenario::by_name(name).ok_or_else(|| SessionError::UnknownPreset(name.to_string()))?;
        let Some(layers) = layers else {
            return Ok(Session::unplanned(s.name, s.plan()?));
        };
        if !(1..=MAX_BROWSER_LAYERS).contains(&layers) {
            return Err(SessionError::Layers {
                layers,
                max: MAX_BROWSER_LAYERS,
            });
        }
        let plan = s
            .plan_layers(layers)
            .ok_or_else(|| SessionError::NoBlocks(name.to_string()))??;
        let mut session = Session::unplanned(s.name, plan);
        session.layers = (layers != s.layers).then_some(layers);
        Ok(session)
    }

    /// Rebuilds the scenario with `n` blocks, keeping the view.
    fn set_layers(&mut self, n: usize) {
        match Session::from_scenario_layers(&self.scenario, n) {
            Ok(mut s) => {
                s.notation = self.notation;
                s.embed = self.embed;
                s.topology = self.topology.clone();
                s.megatron_sums = self.megatron_sums;
                s.stage = self.stage;
                if s.megatron_sums {
                    s.replan();
                }
                *self = s;
            }
            Err(e) => self.message = Some(e.to_string()),
        }
    }

    /// A session on a plan.
    pub fn from_plan(scenario: &str, plan: Plan) -> Session {
        let mut s = Session::unplanned(scenario, plan);
        s.replan();
        s
    }

    /// A session on a plan, before planning it.
    fn unplanned(scenario: &str, plan: Plan) -> Session {
        Session {
            scenario: scenario.to_string(),
            layers: None,
            text: plan.to_string(),
            plan,
            text_errors: Vec::new(),
            pipeline: None,
            plan_error: None,
            stage: Stage::Forward,
            timeline: usize::MAX,
            playing: false,
            play_speed: 1,
            backward_step: usize::MAX,
            selected_var: None,
            selected_rank: 0,
            notation: Notation::Paddle,
            message: None,
            lesson_words: None,
            run: None,
            embed: false,
            megatron_sums: false,
            topology: TOPOLOGIES[0].to_string(),
            pinned: None,
            gantt_ideal: false,
            dim_error: None,
            rejections: 0,
            focus_op: None,
            break_mode: false,
            breaks: Vec::new(),
            break_report: None,
            values: None,
            job: None,
        }
    }

    /// The mesh (every plan in a session has one).
    pub fn mesh(&self) -> Option<&Arc<ProcessMesh>> {
        self.plan.mesh()
    }

    /// Number of completion events.
    pub fn events(&self) -> usize {
        self.pipeline
            .as_ref()
            .map_or(0, |p| p.completed.trace.events.len())
    }

    /// Re-runs the pipeline after the plan changed.
    fn replan(&mut self) {
        self.run = None;
        self.focus_op = None;
        // Breakages and shown values name ops of the old programs.
        self.values = None;
        self.breaks.clear();
        self.break_report = None;
        // A job on the old plan answers for the old plan.
        self.job = None;
        if self.plan.program.ops().len() > MAX_BROWSER_OPS {
            self.pipeline = None;
            self.plan_error = Some(format!(
                "the program has {} ops; the playground plans up to {MAX_BROWSER_OPS}",
                self.plan.program.ops().len()
            ));
            return;
        }
        if let Some(m) = self.mesh() {
            if !m.process_ids().contains(&self.selected_rank) {
                self.selected_rank = m.process_ids().first().copied().unwrap_or(0);
            }
        }
        // Only the rank on screen is partitioned (the others on demand): re-planning cost
        // stays flat as the mesh grows.
        let opts = PassOptions {
            partition: self.partition_options(Some(vec![self.selected_rank])),
            ..PassOptions::from_plan(&self.plan.options)
        };
        match run_passes(&self.plan, &opts) {
            Ok(p) => {
                self.pipeline = Some(Arc::new(p));
                self.plan_error = None;
            }
            Err(e) => {
                self.pipeline = None;
                self.plan_error = Some(e.to_string());
            }
        }
        self.timeline = self.timeline.min(self.events());
    }

    /// How this session partitions `ranks` (`None`: every rank).
    pub(super) fn partition_options(&self, ranks: Option<Vec<u32>>) -> PartitionOptions {
        // The plan text's options, with the session's toggles on top.
        let from_plan = PassOptions::from_plan(&self.plan.options).partition;
        PartitionOptions {
            ranks,
            defer_partial_sums: self.megatron_sums || from_plan.defer_partial_sums,
            build_every_rank: false,
            ..from_plan
        }
    }

    /// Makes sure the pipeline holds the programs of `ranks` (`None`: every rank).
    fn ensure_partitioned(&mut self, ranks: Option<Vec<u32>>) {
        let missing = self.pipeline.as_ref().is_some_and(|p| match &ranks {
            Some(rs) => rs.iter().any(|&r| !p.has_rank(r)),
            None => !p.is_fully_partitioned(),
        });
        if !missing {
            return;
        }
        let opts = self.partition_options(ranks);
        let Some(p) = self.pipeline.as_mut() else {
            return;
        };
        if let Err(e) = Arc::make_mut(p).repartition(&opts) {
            self.pipeline = None;
            self.plan_error = Some(e.to_string());
        }
    }

    /// The plan changed: refresh the editor text and re-plan.
    fn plan_changed(&mut self) {
        self.text = self.plan.to_string();
        self.text_errors.clear();
        self.timeline = usize::MAX;
        self.backward_step = usize::MAX;
        self.replan();
    }

    /// Drops `var`'s annotation.
    fn clear_annotation(&mut self, var: &str) {
        if let Some(v) = self.plan.program.var_id(var) {
            self.plan.annotations.retain(|a| a.var != v);
            self.plan_changed();
        }
    }

    /// Applies one action.
    pub fn reduce(mut self, action: Action) -> Session {
        self.message = None;
        self.dim_error = None;
        match action {
            Action::LoadScenario(name) => match Session::from_scenario(&name) {
                Ok(mut s) => {
                    s.notation = self.notation;
                    if self.megatron_sums {
                        s = s.reduce(Action::SetMegatronSums(true));
                    }
                    s.embed = self.embed;
                    s.topology = self.topology.clone();
                    s.pinned = self.pinned.clone();
                    return s;
                }
                Err(e) => self.message = Some(e.to_string()),
            },
            Action::SetMeshShape(shape) => self.set_mesh(shape),
            Action::RenameAxis(axis, name) => self.rename_axis(axis, &name),
            Action::SetDim { var, dim, choice } => self.set_dim(&var, dim, choice),
            Action::ClearAnnotation(var) => self.clear_annotation(&var),
            Action::SelectVar(v) => {
                self.selected_var = v.filter(|n| self.plan.program.var_id(n).is_some())
            }
            Action::SelectRank(r) => {
                if self.mesh().is_some_and(|m| m.process_ids().contains(&r)) {
                    self.selected_rank = r;
                    self.focus_op = None;
                    self.values = None;
                    self.ensure_partitioned(Some(vec![r]));
                }
            }
            Action::SetNotation(n) => self.notation = n,
            Action::SetStage(s) => {
                self.stage = s;
                self.playing = false;
            }
            Action::Step(d) => self.step(d),
            Action::Seek(t) => self.seek(t),
            Action::TogglePlay => self.toggle_play(),
            Action::Tick => self.tick(),
            Action::SetPlaySpeed(k) => self.play_speed = k.clamp(1, 64),
            Action::SetLayers(n) => self.set_layers(n),
            Action::EditText(text) => self.edit_text(text),
            Action::Run => self.request(crate::protocol::Task::Run),
            Action::SetMegatronSums(on) => {
                if self.megatron_sums != on {
                    self.megatron_sums = on;
                    self.replan();
                }
            }
            Action::SetZero(z) => self.set_zero(z),
            Action::SetTopology(t) => {
                if TOPOLOGIES.contains(&t.as_str()) {
                    self.topology = t;
                } else {
                    self.message = Some(format!("unknown topology `{t}`"));
                }
            }
            Action::Pipeline(a) => self.pipeline_action(a),
            Action::Pin => self.pin(),
            Action::Unpin => self.pinned = None,
            Action::AdoptSuggestion { text, compare } => self.adopt_suggestion(text, compare),
            a @ (Action::FocusOp(_)
            | Action::SetBreakMode(_)
            | Action::Break(_)
            | Action::ClearBreaks
            | Action::RunBroken
            | Action::OpenLink(_)
            | Action::ShowValues(_)
            | Action::Import(_)
            | Action::Reply(_)) => return self.reduce_teaching(a),
            Action::Dismiss => {}
        }
        self
    }

    /// The teaching actions: focus, break it, open a link.
    fn reduce_teaching(mut self, action: Action) -> Session {
        match action {
            Action::FocusOp(op) => {
                self.focus_op = op;
                if op.is_some() {
                    self.stage = Stage::Partition;
                }
            }
            Action::SetBreakMode(on) => {
                self.break_mode = on;
                if on {
                    self.stage = Stage::Partition;
                } else {
                    self.breaks.clear();
                    self.break_report = None;
                }
            }
            Action::Break(b) => self.add_break(b),
            Action::ClearBreaks => {
                self.breaks.clear();
                self.break_report = None;
            }
            Action::RunBroken => {
                self.request(crate::protocol::Task::RunBroken(self.breaks.clone()))
            }
            Action::ShowValues(op) => {
                self.values = None;
                if let Some(op) = op {
                    self.request(crate::protocol::Task::Values(op));
                }
            }
            Action::Reply(reply) => self.receive(&reply),
            Action::Import(file) => {
                self.message = Some(format!("Importing {}…", file.name));
                self.request(crate::protocol::Task::Import(file));
            }
            Action::OpenLink(hash) => match Session::from_hash(&hash) {
                Ok(mut s) => {
                    s.embed = self.embed;
                    return s;
                }
                Err(e) => self.message = Some(format!("This link could not be opened: {e}")),
            },
            // Never reached (reduce sends only the teaching actions here), but listed so a
            // new action cannot fall through silently.
            other @ (Action::LoadScenario(_)
            | Action::SetMeshShape(_)
            | Action::RenameAxis(..)
            | Action::SetDim { .. }
            | Action::ClearAnnotation(_)
            | Action::SelectVar(_)
            | Action::SelectRank(_)
            | Action::SetNotation(_)
            | Action::SetStage(_)
            | Action::Step(_)
            | Action::Seek(_)
            | Action::TogglePlay
            | Action::Tick
            | Action::SetPlaySpeed(_)
            | Action::SetLayers(_)
            | Action::EditText(_)
            | Action::Run
            | Action::SetMegatronSums(_)
            | Action::SetZero(_)
            | Action::SetTopology(_)
            | Action::Pipeline(_)
            | Action::Pin
            | Action::Unpin
            | Action::AdoptSuggestion { .. }
            | Action::Dismiss) => return self.reduce(other),
        }
        self
    }

    fn step(&mut self, d: i64) {
        if self.stage == Stage::Backward {
            let at = self.backward_step.min(self.backward_events()) as i64;
            self.backward_move(at + d);
            self.playing = false;
            return;
        }
        let t = self.timeline.min(self.events()) as i64 + d;
        self.timeline = t.clamp(0, self.events() as i64) as usize;
        self.playing = false;
    }

    fn seek(&mut self, t: usize) {
        if self.stage == Stage::Backward {
            self.backward_move(t.min(self.backward_events()) as i64);
            self.playing = false;
            return;
        }
        self.timeline = t.min(self.events());
        self.playing = false;
    }

    fn toggle_play(&mut self) {
        self.playing = !self.playing;
        if self.stage == Stage::Backward {
            if self.playing && self.backward_step >= self.backward_events() {
                self.backward_step = 0;
            }
            return;
        }
        if self.playing && self.timeline >= self.events() {
            self.timeline = 0;
        }
    }

    fn tick(&mut self) {
        if self.playing && self.stage == Stage::Backward {
            let n = self.backward_events();
            self.backward_step = (self.backward_step.min(n) + self.play_speed).min(n);
            self.playing = self.backward_step < n;
            return;
        }
        if self.playing {
            self.timeline = (self.timeline + self.play_speed).min(self.events());
            self.playing = self.timeline < self.events();
        }
    }
}
