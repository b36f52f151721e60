//! The playground's state and its reducer, outside any UI framework (tested natively). The
//! Yew components render a [`Session`] and dispatch [`Action`]s; everything the page shows
//! is derived here, and the whole state round-trips through the URL hash.

use crate::dist::{DimAxes, MeshAxis, MeshId, Notation, ProcessMesh, TensorDistAttr};
use crate::exec::run::{run_distributed, run_serial, RunOptions};
use crate::exec::verify::{verify, Check};
use crate::models::scenarios::{scenarios, Scenario};
use crate::passes::partition::PartitionOptions;
use crate::passes::pipeline::{run_pipeline, Pipeline, PipelineOptions};
use crate::plan::{mesh_spec, parse_plan, parse_shard_spec, Annotation, Plan};
use std::sync::Arc;

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
    TogglePlay,
    /// A timer tick while playing.
    Tick,
    /// The plan text in the editor (applied only when it parses and verifies).
    EditText(String),
    Run,
    /// Megatron's backward sums on or off (see `PartitionOptions::defer_partial_sums`).
    SetMegatronSums(bool),
    Dismiss,
}

/// A finished browser run.
#[derive(Clone, Debug, PartialEq)]
pub struct RunSummary {
    pub serial_losses: Vec<f64>,
    pub dist_losses: Vec<f64>,
    pub checks: Vec<Check>,
}

/// The playground's state.
#[derive(Clone)]
pub struct Session {
    /// The scenario the plan came from (`custom` after a text edit).
    pub scenario: String,
    pub plan: Plan,
    /// The editor's text (may not parse).
    pub text: String,
    /// Problems of the editor's text: (line, column, message).
    pub text_errors: Vec<(usize, usize, String)>,
    pub pipeline: Option<Arc<Pipeline>>,
    pub plan_error: Option<String>,
    pub stage: Stage,
    /// Completion events shown (0 = annotations only; the end = completed).
    pub timeline: usize,
    pub playing: bool,
    pub selected_var: Option<String>,
    pub selected_rank: u32,
    pub notation: Notation,
    /// A message for the user (an invalid choice, a bad link).
    pub message: Option<String>,
    pub run: Option<RunSummary>,
    pub embed: bool,
    /// Partition with Megatron's backward sums instead of Paddle's per-matmul all-reduces.
    pub megatron_sums: bool,
}

impl PartialEq for Session {
    fn eq(&self, other: &Session) -> bool {
        self.scenario == other.scenario
            && self.text == other.text
            && self.stage == other.stage
            && self.timeline == other.timeline
            && self.playing == other.playing
            && self.selected_var == other.selected_var
            && self.selected_rank == other.selected_rank
            && self.notation == other.notation
            && self.message == other.message
            && self.run == other.run
            && self.embed == other.embed
            && self.plan_error == other.plan_error
            && self.megatron_sums == other.megatron_sums
    }
}

impl Default for Session {
    fn default() -> Self {
        Session::from_scenario("megatron_mlp").unwrap_or_else(|_| {
            Session::from_plan("custom", Plan::from_program(crate::ir::Program::new()))
        })
    }
}

/// Largest model the browser plans or runs (layers), to keep the page responsive.
pub const MAX_BROWSER_OPS: usize = 4000;

impl Session {
    /// A session on a named scenario.
    pub fn from_scenario(name: &str) -> Result<Session, String> {
        let s = Scenario::by_name(name).ok_or_else(|| format!("unknown preset `{name}`"))?;
        Ok(Session::from_plan(
            s.name,
            s.plan().map_err(|e| e.to_string())?,
        ))
    }

    /// A session on a plan.
    pub fn from_plan(scenario: &str, plan: Plan) -> Session {
        let mut s = Session {
            scenario: scenario.to_string(),
            text: plan.to_string(),
            plan,
            text_errors: Vec::new(),
            pipeline: None,
            plan_error: None,
            stage: Stage::Forward,
            timeline: usize::MAX,
            playing: false,
            selected_var: None,
            selected_rank: 0,
            notation: Notation::Paddle,
            message: None,
            run: None,
            embed: false,
            megatron_sums: false,
        };
        s.replan();
        s
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
        let opts = PipelineOptions {
            partition: self.partition_options(Some(vec![self.selected_rank])),
            ..PipelineOptions::default()
        };
        match run_pipeline(&self.plan, &opts) {
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
    fn partition_options(&self, ranks: Option<Vec<u32>>) -> PartitionOptions {
        PartitionOptions {
            ranks,
            defer_partial_sums: self.megatron_sums,
            ..PartitionOptions::default()
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
        self.replan();
    }

    /// Applies one action.
    pub fn reduce(mut self, action: Action) -> Session {
        self.message = None;
        match action {
            Action::LoadScenario(name) => match Session::from_scenario(&name) {
                Ok(mut s) => {
                    s.notation = self.notation;
                    if self.megatron_sums {
                        s = s.reduce(Action::SetMegatronSums(true));
                    }
                    s.embed = self.embed;
                    return s;
                }
                Err(e) => self.message = Some(e),
            },
            Action::SetMeshShape(shape) => self.set_mesh(shape),
            Action::RenameAxis(axis, name) => self.rename_axis(axis, &name),
            Action::SetDim { var, dim, choice } => self.set_dim(&var, dim, choice),
            Action::ClearAnnotation(var) => {
                if let Some(v) = self.plan.program.var_id(&var) {
                    self.plan.annotations.retain(|a| a.var != v);
                    self.plan_changed();
                }
            }
            Action::SelectVar(v) => {
                self.selected_var = v.filter(|n| self.plan.program.var_id(n).is_some())
            }
            Action::SelectRank(r) => {
                if self.mesh().is_some_and(|m| m.process_ids().contains(&r)) {
                    self.selected_rank = r;
                    self.ensure_partitioned(Some(vec![r]));
                }
            }
            Action::SetNotation(n) => self.notation = n,
            Action::SetStage(s) => self.stage = s,
            Action::Step(d) => {
                let t = self.timeline.min(self.events()) as i64 + d;
                self.timeline = t.clamp(0, self.events() as i64) as usize;
                self.playing = false;
            }
            Action::Seek(t) => {
                self.timeline = t.min(self.events());
                self.playing = false;
            }
            Action::TogglePlay => {
                self.playing = !self.playing;
                if self.playing && self.timeline >= self.events() {
                    self.timeline = 0;
                }
            }
            Action::Tick => {
                if self.playing {
                    self.timeline = (self.timeline + 1).min(self.events());
                    self.playing = self.timeline < self.events();
                }
            }
            Action::EditText(text) => self.edit_text(text),
            Action::Run => self.run(),
            Action::SetMegatronSums(on) => {
                if self.megatron_sums != on {
                    self.megatron_sums = on;
                    self.replan();
                }
            }
            Action::Dismiss => {}
        }
        self
    }

    fn set_mesh(&mut self, shape: Vec<usize>) {
        let Some(old) = self.mesh().cloned() else {
            return;
        };
        if shape.is_empty() || shape.len() > 3 || shape.iter().any(|&s| s == 0 || s > 8) {
            self.message = Some("a mesh has 1 to 3 axes of size 1 to 8".into());
            return;
        }
        let names: Vec<String> = (0..shape.len())
            .map(|i| {
                old.dim_names()
                    .get(i)
                    .cloned()
                    .unwrap_or_else(|| format!("d{i}"))
            })
            .collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let mesh = match ProcessMesh::with_names(&shape, &refs) {
            Ok(m) => Arc::new(m),
            Err(e) => {
                self.message = Some(e.to_string());
                return;
            }
        };
        self.remesh(mesh);
    }

    fn rename_axis(&mut self, axis: usize, name: &str) {
        let Some(old) = self.mesh().cloned() else {
            return;
        };
        let mut names = old.dim_names().to_vec();
        if axis >= names.len() {
            return;
        }
        names[axis] = name.trim().to_string();
        match ProcessMesh::new(old.shape().to_vec(), old.process_ids().to_vec(), names) {
            Ok(m) => self.remesh(Arc::new(m)),
            Err(e) => self.message = Some(format!("axis name: {e}")),
        }
    }

    /// Moves every annotation onto `mesh`, dropping what no longer fits (with a message).
    fn remesh(&mut self, mesh: Arc<ProcessMesh>) {
        let mut dropped = Vec::new();
        let mut kept = Vec::new();
        for ann in &self.plan.annotations {
            let mut attr = ann.attr.clone();
            attr.mesh = MeshId::JOB;
            attr.dims
                .iter_mut()
                .for_each(|d| d.retain(|a| a.index() < mesh.ndim()));
            attr.partial.retain(|a, _| a.index() < mesh.ndim());
            let var = self.plan.program.var(ann.var);
            match attr.validate(&var.name, &var.ty.shape, &mesh) {
                Ok(()) => kept.push(Annotation { var: ann.var, attr }),
                Err(e) => dropped.push(e.to_string()),
            }
        }
        self.plan.set_mesh(mesh);
        self.plan.annotations = kept;
        if !dropped.is_empty() {
            self.message = Some(format!(
                "dropped annotations that no longer fit: {}",
                dropped.join("; ")
            ));
        }
        self.plan_changed();
    }

    fn set_dim(&mut self, var: &str, dim: usize, choice: DimChoice) {
        let (Some(v), Some(mesh)) = (self.plan.program.var_id(var), self.mesh().cloned()) else {
            self.message = Some(format!("unknown variable `{var}`"));
            return;
        };
        let ty = self.plan.program.var(v).ty.clone();
        if dim >= ty.rank() {
            self.message = Some(format!("`{var}` has no dim {dim}"));
            return;
        }
        let mut attr = self
            .plan
            .annotation(v)
            .cloned()
            .unwrap_or_else(|| TensorDistAttr::replicated(MeshId::JOB, ty.rank()));
        match choice {
            DimChoice::Free => {
                attr.dims[dim].clear();
                attr.annotated[dim] = false;
            }
            DimChoice::Replicated => {
                attr.dims[dim].clear();
                attr.annotated[dim] = true;
            }
            DimChoice::Axes(axes) => {
                let typed = axes
                    .iter()
                    .map(|&a| MeshAxis::new(a).filter(|a| a.index() < mesh.ndim()))
                    .collect::<Option<Vec<_>>>()
                    .and_then(DimAxes::from_axes);
                let Some(typed) = typed else {
                    self.message = Some(format!(
                        "`{var}` dim {dim}: mesh axes {axes:?} are not axes of the mesh"
                    ));
                    return;
                };
                attr.dims[dim] = typed;
                attr.annotated[dim] = true;
            }
        }
        if let Err(e) = attr.validate(var, &ty.shape, &mesh) {
            self.message = Some(e.to_string());
            return;
        }
        self.plan.annotations.retain(|a| a.var != v);
        if attr.annotated.iter().any(|&p| p) || attr.is_partial() {
            self.plan.annotations.push(Annotation { var: v, attr });
        }
        self.selected_var = Some(var.to_string());
        self.plan_changed();
    }

    fn edit_text(&mut self, text: String) {
        self.text = text;
        match parse_plan(&self.text) {
            Err(errors) => {
                self.text_errors = errors
                    .into_iter()
                    .map(|e| (e.line, e.col, e.message))
                    .collect()
            }
            Ok((plan, map)) => {
                let issues = crate::plan::verify_plan(&plan);
                if !issues.is_empty() || plan.mesh().is_none() {
                    self.text_errors = issues
                        .iter()
                        .map(|i| {
                            let (line, col) = map.locate(&plan, &i.subject);
                            (line, col, i.message.clone())
                        })
                        .collect();
                    if plan.mesh().is_none() {
                        self.text_errors.push((
                            1,
                            1,
                            "the plan needs a mesh: `mesh [2, 4] (dp, mp)`".into(),
                        ));
                    }
                    return;
                }
                self.text_errors.clear();
                let text = std::mem::take(&mut self.text);
                self.plan = plan;
                self.scenario = "custom".into();
                self.timeline = usize::MAX;
                self.replan();
                self.text = text;
            }
        }
    }

    fn run(&mut self) {
        self.ensure_partitioned(None);
        let Some(p) = self.pipeline.clone() else {
            self.message = Some("nothing to run: the plan has an error".into());
            return;
        };
        let params: usize = p
            .full
            .program
            .vars()
            .iter()
            .filter(|v| v.kind.is_source())
            .map(|v| v.ty.numel())
            .sum();
        if params > 2_000_000 {
            self.message =
                Some("this model is too large to run in the browser; use `shardlab run`".into());
            return;
        }
        let opts = RunOptions {
            steps: 2,
            ..Default::default()
        };
        let result =
            run_serial(&p, &opts).and_then(|s| run_distributed(&p, &opts, false).map(|d| (s, d)));
        match result {
            Ok((s, d)) => {
                self.run = Some(RunSummary {
                    serial_losses: s.losses.clone(),
                    dist_losses: d.losses.clone(),
                    checks: verify(&s, &d),
                })
            }
            Err(e) => self.message = Some(format!("run failed: {e}")),
        }
    }

    /// The state as a URL hash (without `#`).
    pub fn to_hash(&self) -> String {
        let mut parts = Vec::new();
        match Scenario::by_name(&self.scenario).filter(|_| self.scenario != "custom") {
            Some(_) => {
                parts.push(format!("s={}", self.scenario));
                if let Some(m) = self.mesh() {
                    parts.push(format!("mesh={}", encode(&mesh_spec(m))));
                }
                let shards = self.plan.shard_specs().join(";");
                parts.push(format!("shard={}", encode(&shards)));
            }
            None => parts.push(format!("text={}", encode(&self.text))),
        }
        parts.push(format!("stage={}", self.stage.id()));
        if self.timeline < self.events() {
            parts.push(format!("t={}", self.timeline));
        }
        if let Some(v) = &self.selected_var {
            parts.push(format!("var={}", encode(v)));
        }
        parts.push(format!("rank={}", self.selected_rank));
        parts.push(format!("n={}", self.notation.id()));
        if self.megatron_sums {
            parts.push("ms=1".into());
        }
        parts.join("&")
    }

    /// Restores a state from a URL hash; a hostile or corrupt hash is an error message.
    pub fn from_hash(hash: &str) -> Result<Session, String> {
        let hash = hash.trim_start_matches('#');
        if hash.len() > 200_000 {
            return Err("the link is too long".into());
        }
        let mut fields = std::collections::HashMap::new();
        for part in hash.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("the link has a malformed field `{}`", clip(part)))?;
            fields.insert(
                k.to_string(),
                decode(v).ok_or_else(|| {
                    format!("the link's field `{k}` is not valid percent-encoding")
                })?,
            );
        }
        let mut s = if let Some(text) = fields.get("text") {
            let (plan, _) = parse_plan(text).map_err(|e| {
                format!(
                    "the link's plan does not parse: {}",
                    e.first().map(|e| e.to_string()).unwrap_or_default()
                )
            })?;
            if plan.mesh().is_none() {
                return Err("the link's plan has no mesh".into());
            }
            if !crate::plan::verify_plan(&plan).is_empty() {
                return Err("the link's plan does not verify".into());
            }
            let mut s = Session::from_plan("custom", plan);
            s.text = text.clone();
            s
        } else {
            let name = fields
                .get("s")
                .map(String::as_str)
                .unwrap_or("megatron_mlp");
            let mut s = Session::from_scenario(name)?;
            if let Some(mesh) = fields.get("mesh") {
                let m = crate::plan::parse_mesh_spec(mesh)
                    .map_err(|e| format!("the link's mesh: {e}"))?;
                if m.size() > 512 {
                    return Err("the link's mesh is too large for the playground".into());
                }
                // The scenario's annotations were written for its own mesh: carry each one
                // over by axis name where the new mesh has those axes and they divide the
                // dims, and drop the rest (a link's own `shard` field replaces them below).
                let specs = s.plan.shard_specs();
                let m = Arc::new(m);
                s.plan.set_mesh(m.clone());
                s.plan.annotations = specs
                    .iter()
                    .filter_map(|spec| parse_shard_spec(spec, &s.plan.program, &m).ok())
                    .collect();
            }
            if let Some(shards) = fields.get("shard") {
                let mesh = s.mesh().cloned().ok_or("no mesh")?;
                s.plan.annotations.clear();
                for spec in shards.split(';').filter(|x| !x.is_empty()) {
                    let ann = parse_shard_spec(spec, &s.plan.program, &mesh)
                        .map_err(|e| format!("the link's annotation: {e}"))?;
                    s.plan.annotations.push(ann);
                }
            }
            s.plan_changed();
            s
        };
        match fields.get("ms").map(String::as_str) {
            None | Some("0") => {}
            Some("1") => s = s.reduce(Action::SetMegatronSums(true)),
            Some(other) => {
                return Err(format!(
                    "the link's `ms` must be 0 or 1, not `{}`",
                    clip(other)
                ))
            }
        }
        if let Some(stage) = fields.get("stage") {
            s.stage = Stage::from_id(stage)
                .ok_or_else(|| format!("the link's stage `{}` is unknown", clip(stage)))?;
        }
        if let Some(t) = fields.get("t") {
            s.timeline = t
                .parse::<usize>()
                .map_err(|_| "the link's timeline position is not a number".to_string())?
                .min(s.events());
        }
        if let Some(v) = fields.get("var") {
            s = s.reduce(Action::SelectVar(Some(v.clone())));
        }
        if let Some(r) = fields.get("rank") {
            let r = r
                .parse::<u32>()
                .map_err(|_| "the link's rank is not a number".to_string())?;
            s = s.reduce(Action::SelectRank(r));
        }
        if let Some(n) = fields.get("n") {
            s.notation = Notation::from_id(n)
                .ok_or_else(|| format!("the link's notation `{}` is unknown", clip(n)))?;
        }
        Ok(s)
    }
}

/// The names of the presets the playground offers.
pub fn preset_names() -> Vec<(&'static str, &'static str)> {
    scenarios().iter().map(|s| (s.name, s.title)).collect()
}

fn clip(s: &str) -> String {
    s.chars().take(40).collect()
}

/// What a link's values escape: everything but unreserved characters and a few readable
/// ones (`,` `:` `@`), so `+`, `&`, `#`, `=`, `;` and spaces are always escaped.
const LINK_ESCAPES: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b',')
    .remove(b':')
    .remove(b'@');

/// Percent-encodes a link value (the `percent-encoding` crate).
pub fn encode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, LINK_ESCAPES).to_string()
}

/// Decodes a percent-encoded link value (`+` is a plus, as in a URL fragment); `None` for a
/// `%` not followed by two hex digits, or bytes that are not UTF-8.
pub fn decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let malformed = bytes.iter().enumerate().any(|(i, &b)| {
        b == b'%'
            && !bytes
                .get(i + 1..i + 3)
                .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
    });
    if malformed {
        return None;
    }
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .ok()
        .map(|c| c.into_owned())
}

impl Session {
    /// Every forward tensor's dist attr after the first `t` completion events (the
    /// timeline's picture); `t` past the end gives the completed attrs.
    pub fn tensors_at(&self, t: usize) -> Option<Vec<TensorDistAttr>> {
        let p = self.pipeline.as_ref()?;
        self.mesh()?;
        let mut ts: Vec<TensorDistAttr> = self
            .plan
            .program
            .vars()
            .iter()
            .map(|v| TensorDistAttr::replicated(MeshId::JOB, v.ty.rank()))
            .collect();
        for a in &self.plan.annotations {
            if let Some(slot) = ts.get_mut(a.var.index()) {
                *slot = a.attr.clone();
            }
        }
        use crate::passes::complete::EventKind;
        for e in p.completed.trace.events.iter().take(t) {
            let Some(attr) = ts.get_mut(e.var.index()) else {
                continue;
            };
            match (e.kind, e.dim) {
                (EventKind::Set { .. }, Some(d)) => {
                    if let Some(slot) = attr.dims.get_mut(d as usize) {
                        *slot = e.after;
                    }
                }
                (EventKind::Partial, _) => {
                    let done = &p.completed.tensors[e.var.index()].partial;
                    attr.partial = e
                        .after
                        .iter()
                        .map(|&a| (a, done.get(a).unwrap_or(crate::dist::ReduceType::Sum)))
                        .collect();
                }
                _ => {}
            }
        }
        Some(ts)
    }

    /// One line describing completion event `i`.
    pub fn event_text(&self, i: usize) -> Option<String> {
        use crate::passes::complete::EventKind;
        let p = self.pipeline.as_ref()?;
        let e = p.completed.trace.events.get(i)?;
        let mesh = self.mesh()?;
        let names = |axes: Vec<MeshAxis>| {
            if axes.is_empty() {
                "-".to_string()
            } else {
                axes.iter()
                    .map(|&a| mesh.axis_name(a).to_string())
                    .collect::<Vec<_>>()
                    .join("+")
            }
        };
        let op = self.plan.program.op(e.op);
        let rule = crate::spmd::registry::rule_for(op, &self.plan.program)
            .map(|b| b.rule.name())
            .unwrap_or("?");
        let var = &self.plan.program.var(e.var).name;
        let dir = match e.direction {
            crate::passes::complete::Direction::Forward => "forward",
            crate::passes::complete::Direction::Reverse => "reverse",
        };
        let what = match (e.kind, e.dim) {
            (EventKind::Set { from_outputs }, Some(d)) => format!(
                "{var} dim {d}: {} → {} (from the op's {})",
                names(e.before.to_vec()),
                names(e.after.to_vec()),
                if from_outputs { "outputs" } else { "inputs" }
            ),
            (EventKind::Partial, _) => format!("{var} partial on {}", names(e.after.to_vec())),
            (EventKind::Rejected(c), d) => format!(
                "{var} dim {}: {} rejected — {}",
                d.unwrap_or(0),
                names(e.after.to_vec()),
                c.describe()
            ),
            (EventKind::Set { .. }, None) => var.to_string(),
        };
        Some(format!(
            "sweep {} {dir} · {} {} [{rule} rule] · {what}",
            e.sweep, e.op, op.ty
        ))
    }
}
