//! Completion (Paddle's `Completer`): from a few annotations to a dist attr for every
//! tensor and every op.
//!
//! Every tensor starts replicated (or as annotated). Then a forward sweep over the ops and a
//! reverse sweep alternate until nothing changes. At each op the rule runs forward (from the
//! inputs) and backward (from the outputs); the two results merge dim by dim (empty is a
//! wildcard; a disagreement proposes nothing), and each tensor dim takes a proposal only if
//! it is still replicated, not pinned by an annotation, and the mesh axes are free and divide
//! it. Dims only ever go from replicated to split, so the sweeps reach a fixpoint; a bound
//! turns a bug into an error instead of a hang. Output partial status comes from the forward
//! result. Finally each op records what it wants of its inputs and picks its implementation.

mod print;
pub mod trace;
pub mod why_not;

pub use print::{attrs_text, completed_json, completed_text, explain_text, shard_text};
pub use trace::{Conflict, Direction, Event, EventKind, Step, Trace};
pub use why_not::{why_not_split, NotSplit};

use crate::dist::MeshId;
use crate::dist::{
    local_shape, DimAxes, DistImpl, OperatorDistAttr, Partial, ProcessMesh, TensorDistAttr,
};
use crate::ir::{Family, OpId, OpType, Program, VarId};
use crate::plan::{verify_plan, Plan, PlanIssue};
use crate::spmd::registry::{rule_for, Binding};
use crate::spmd::{DistTensor, Inferred, Layout};
use std::collections::HashSet;
use std::sync::Arc;

/// Sweeps allowed before completion gives up (each useful sweep splits at least one dim).
const MAX_SWEEPS: usize = 1000;

/// Most issues an invalid plan's error lists: a real-size model repeats one problem per
/// layer (every layer's attention scores too large), and the first few say it.
const LISTED_ISSUES: usize = 5;

/// The issues, one per line, the first [`LISTED_ISSUES`] and a count of the rest.
fn list_issues(issues: &[PlanIssue]) -> String {
    let mut lines: Vec<String> = issues
        .iter()
        .take(LISTED_ISSUES)
        .map(|i| format!("  {}", i.message))
        .collect();
    if issues.len() > LISTED_ISSUES {
        lines.push(format!("  … and {} more", issues.len() - LISTED_ISSUES));
    }
    lines.join("\n")
}

/// Why completion failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CompleteError {
    #[error("the plan has no mesh; declare one with `mesh [..] (..)` or --mesh")]
    NoMesh,
    #[error("the plan is invalid:\n{}", list_issues(.0))]
    Invalid(Vec<PlanIssue>),
    #[error("{op} ({ty}): {error}")]
    Rule {
        op: OpId,
        ty: OpType,
        error: crate::spmd::SpmdError,
    },
    #[error("completion did not converge after {0} sweeps")]
    NoFixpoint(usize),
}

impl crate::plan::Located for CompleteError {
    fn subject(&self) -> Option<crate::plan::PlanSubject> {
        use crate::plan::PlanSubject;
        match self {
            CompleteError::NoMesh => Some(PlanSubject::Mesh),
            CompleteError::Invalid(issues) => issues.first().map(|i| i.subject.clone()),
            CompleteError::Rule { op, .. } => Some(PlanSubject::Op(*op)),
            CompleteError::NoFixpoint(_) => None,
        }
    }
}

/// The result of completion.
#[derive(Clone, Debug)]
pub struct Completed {
    pub mesh: Arc<ProcessMesh>,
    /// One dist attr per variable, indexed by `VarId`.
    pub tensors: Vec<TensorDistAttr>,
    /// One dist attr per op, indexed by `OpId`: what it wants of each input slot, what it
    /// produces, and its implementation.
    pub ops: Vec<OperatorDistAttr>,
    /// Forward + reverse sweeps run (the last one changed nothing).
    pub sweeps: usize,
    pub trace: Trace,
}

struct State<'a> {
    program: &'a Program,
    mesh: Arc<ProcessMesh>,
    tensors: Vec<TensorDistAttr>,
    trace: Trace,
    sweep: u16,
    direction: Direction,
    /// Rejections already recorded, so each conflict appears once in the trace.
    rejected: HashSet<(VarId, u16, DimAxes, Conflict)>,
    /// The ops reading or writing each variable.
    users: Vec<Vec<OpId>>,
    /// Ops whose variables changed since they were last visited; a clean op's rule would
    /// return what it returned last time, so sweeps skip it.
    dirty: Vec<bool>,
    /// Variables changed during the current visit.
    touched: Vec<VarId>,
    /// Each op's forward result at its last visit (`None` if the rule raised). At the
    /// fixpoint every op is clean, so this is the result on the completed tensors, which
    /// the op's final dist attr records.
    last_forward: Vec<Option<Inferred>>,
}

/// Completes the dist attrs of `plan`.
pub fn complete(plan: &Plan) -> Result<Completed, CompleteError> {
    complete_from(plan, None)
}

/// Completes starting from `start` (one attr per variable; annotations still pinned) instead
/// of replicated tensors. Completing a completed result again changes nothing.
pub fn complete_from(
    plan: &Plan,
    start: Option<&[TensorDistAttr]>,
) -> Result<Completed, CompleteError> {
    let mesh = plan.mesh().cloned().ok_or(CompleteError::NoMesh)?;
    let issues = verify_plan(plan);
    if !issues.is_empty() {
        return Err(CompleteError::Invalid(issues));
    }
    let program = &plan.program;
    let bindings = program
        .ops()
        .iter()
        .enumerate()
        .map(|(i, op)| {
            rule_for(op, program).map_err(|e| CompleteError::Rule {
                op: OpId(i as u32),
                ty: op.ty,
                error: e,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut state = State {
        program,
        mesh: mesh.clone(),
        tensors: program
            .vars()
            .iter()
            .map(|v| TensorDistAttr::replicated(MeshId::JOB, v.ty.rank()))
            .collect(),
        trace: Trace::default(),
        sweep: 0,
        direction: Direction::Forward,
        rejected: HashSet::new(),
        users: vec![Vec::new(); program.vars().len()],
        dirty: vec![true; program.ops().len()],
        touched: Vec::new(),
        last_forward: vec![None; program.ops().len()],
    };
    for (i, op) in program.ops().iter().enumerate() {
        for v in op.all_inputs().chain(op.all_outputs()) {
            state.users[v.index()].push(OpId(i as u32));
        }
    }
    for ann in &plan.annotations {
        for (d, axes) in ann.attr.dims.iter().enumerate() {
            if !axes.is_empty() {
                state.trace.annotations.push((ann.var, d as u16, *axes));
            }
        }
        state.tensors[ann.var.index()] = ann.attr.clone();
    }
    if let Some(start) = start.filter(|s| s.len() == state.tensors.len()) {
        for (t, s) in state.tensors.iter_mut().zip(start) {
            let annotated = std::mem::take(&mut t.annotated);
            *t = s.clone();
            t.annotated = annotated;
        }
    }
    let mut sweeps = 0;
    loop {
        if sweeps >= MAX_SWEEPS {
            return Err(CompleteError::NoFixpoint(sweeps));
        }
        sweeps += 1;
        state.sweep = sweeps as u16;
        let mut changed = false;
        state.direction = Direction::Forward;
        for (i, b) in bindings.iter().enumerate() {
            changed |= state.visit(OpId(i as u32), b);
        }
        state.direction = Direction::Reverse;
        for (i, b) in bindings.iter().enumerate().rev() {
            changed |= state.visit(OpId(i as u32), b);
        }
        if !changed {
            break;
        }
    }
    let ops = bindings
        .iter()
        .enumerate()
        .map(|(i, b)| state.op_attr(OpId(i as u32), b))
        .collect();
    Ok(Completed {
        mesh,
        tensors: state.tensors,
        ops,
        sweeps,
        trace: state.trace,
    })
}

impl State<'_> {
    fn dist_tensor(&self, v: VarId) -> DistTensor {
        let attr = &self.tensors[v.index()];
        DistTensor {
            shape: self.program.var(v).ty.shape.clone(),
            layout: Layout {
                dims: attr.dims.clone(),
                partial: attr.partial,
            },
        }
    }

    /// Runs the op's rule both ways and applies the merged proposals; returns whether
    /// anything changed.
    fn visit(&mut self, op: OpId, b: &Binding) -> bool {
        if !std::mem::replace(&mut self.dirty[op.index()], false) {
            return false;
        }
        let changed = self.run_rule(op, b);
        for v in std::mem::take(&mut self.touched) {
            for &user in &self.users[v.index()] {
                self.dirty[user.index()] = true;
            }
        }
        changed
    }

    fn run_rule(&mut self, op: OpId, b: &Binding) -> bool {
        let ins: smallvec::SmallVec<[DistTensor; 4]> =
            b.inputs.iter().map(|&v| self.dist_tensor(v)).collect();
        let outs: smallvec::SmallVec<[DistTensor; 2]> =
            b.outputs.iter().map(|&v| self.dist_tensor(v)).collect();
        let fwd = b.rule.infer_forward(self.mesh.shape(), &ins);
        let bwd = b.rule.infer_backward(self.mesh.shape(), &ins, &outs);
        if let Err(e) = &fwd {
            if !self.trace.rule_errors.iter().any(|(o, _)| *o == op) {
                self.trace.rule_errors.push((op, e.clone()));
            }
        }
        let (fwd, bwd) = (fwd.ok(), bwd.unwrap_or_default());
        let (fwd_in, fwd_out) = fwd
            .as_ref()
            .map_or((&[][..], &[][..]), |f| (&f.inputs[..], &f.outputs[..]));
        let mut changed = false;
        for (k, &v) in b.inputs.iter().enumerate() {
            changed |= self.propose(op, v, fwd_in.get(k), bwd.inputs.get(k));
        }
        for (k, &v) in b.outputs.iter().enumerate() {
            changed |= self.propose(op, v, fwd_out.get(k), bwd.outputs.get(k));
            if let Some(s) = fwd_out.get(k) {
                changed |= self.set_partial(op, v, s);
            }
        }
        // Kept, not cloned: at the fixpoint it is the op's final forward result.
        self.last_forward[op.index()] = fwd;
        changed
    }

    fn event(
        &mut self,
        op: OpId,
        var: VarId,
        dim: Option<usize>,
        before: &DimAxes,
        after: &DimAxes,
        kind: EventKind,
    ) {
        self.trace.events.push(Event {
            sweep: self.sweep,
            direction: self.direction,
            op,
            var,
            dim: dim.map(|d| d as u16),
            before: *before,
            after: *after,
            kind,
        });
    }

    /// Applies one tensor's merged proposal dim by dim.
    fn propose(
        &mut self,
        op: OpId,
        var: VarId,
        fwd: Option<&Layout>,
        bwd: Option<&Layout>,
    ) -> bool {
        let rank = self.tensors[var.index()].rank();
        let mut changed = false;
        for d in 0..rank {
            let f = fwd.and_then(|s| s.dims.get(d)).filter(|a| !a.is_empty());
            let g = bwd.and_then(|s| s.dims.get(d)).filter(|a| !a.is_empty());
            let (proposal, from_outputs) = match (f, g) {
                (None, None) => continue,
                (Some(a), None) => (*a, false),
                (None, Some(b)) => (*b, true),
                (Some(a), Some(b)) if a == b => (*a, false),
                (Some(a), Some(_)) => {
                    let current = self.tensors[var.index()].dims[d];
                    if current != *a {
                        self.reject(op, var, d, &current, a, Conflict::RulesDisagree);
                    }
                    continue;
                }
            };
            changed |= self.apply(op, var, d, proposal, from_outputs);
        }
        changed
    }

    fn apply(
        &mut self,
        op: OpId,
        var: VarId,
        d: usize,
        proposal: DimAxes,
        from_outputs: bool,
    ) -> bool {
        let attr = &self.tensors[var.index()];
        let current = attr.dims[d];
        if current == proposal {
            return false;
        }
        let conflict = if attr.annotated.get(d).copied().unwrap_or(false) {
            Some(Conflict::Pinned)
        } else if !current.is_empty() {
            Some(Conflict::AlreadySplit)
        } else if proposal.iter().any(|a| {
            attr.dims
                .iter()
                .enumerate()
                .any(|(e, axes)| e != d && axes.contains(a))
                || attr.partial.get(*a).is_some()
        }) {
            Some(Conflict::AxisInUse)
        } else {
            let mut trial = attr.clone();
            trial.dims[d] = proposal;
            let var_ty = &self.program.var(var).ty;
            local_shape("", &var_ty.shape, &trial, &self.mesh)
                .err()
                .map(|_| Conflict::TooSmall)
        };
        match conflict {
            Some(c) => {
                self.reject(op, var, d, &current, &proposal, c);
                false
            }
            None => {
                self.tensors[var.index()].dims[d] = proposal;
                self.touched.push(var);
                self.event(
                    op,
                    var,
                    Some(d),
                    &current,
                    &proposal,
                    EventKind::Set { from_outputs },
                );
                true
            }
        }
    }

    /// Records a rejected proposal once (later sweeps re-propose the same thing).
    fn reject(
        &mut self,
        op: OpId,
        var: VarId,
        d: usize,
        current: &DimAxes,
        proposal: &DimAxes,
        c: Conflict,
    ) {
        if self.rejected.insert((var, d as u16, *proposal, c)) {
            self.event(op, var, Some(d), current, proposal, EventKind::Rejected(c));
        }
    }

    /// Output partial status follows the forward result (axes that split a dim excluded).
    fn set_partial(&mut self, op: OpId, var: VarId, s: &Layout) -> bool {
        let attr = &self.tensors[var.index()];
        if attr.annotated.iter().any(|&a| a) {
            return false; // the user's annotation owns this tensor's partial status
        }
        let partial: Partial = s
            .partial
            .iter()
            .filter(|(a, _)| !attr.dims.iter().any(|axes| axes.contains(a)))
            .collect();
        if partial == attr.partial {
            return false;
        }
        // A partial event lists the partial axes (at most a mesh's axes).
        let axes_of = |p: &Partial| DimAxes::from_axes(p.axes()).unwrap_or_default();
        let (before, after) = (axes_of(&attr.partial), axes_of(&partial));
        self.tensors[var.index()].partial = partial;
        self.touched.push(var);
        self.event(op, var, None, &before, &after, EventKind::Partial);
        true
    }

    /// The op's final dist attr: the rule's forward result on the completed tensors (or
    /// replicated if the rule raised), by slot, and the implementation it implies.
    fn op_attr(&mut self, op: OpId, b: &Binding) -> OperatorDistAttr {
        let o = self.program.op(op);
        let inferred = self.last_forward[op.index()]
            .take()
            .unwrap_or_else(|| Inferred {
                inputs: b
                    .inputs
                    .iter()
                    .map(|&v| Layout::replicated(self.program.var(v).ty.rank()))
                    .collect(),
                outputs: b
                    .outputs
                    .iter()
                    .map(|&v| Layout::replicated(self.program.var(v).ty.rank()))
                    .collect(),
            });
        let to_attr = |s: &Layout| TensorDistAttr::new(MeshId::JOB, s.clone());
        // A slot the rule says nothing about (a source op's outputs) is replicated over its
        // variable's rank.
        let replicated =
            |v: &VarId| TensorDistAttr::replicated(MeshId::JOB, self.program.var(*v).ty.rank());
        let mut attr = OperatorDistAttr::new(MeshId::JOB);
        attr.inputs = o
            .inputs
            .iter()
            .map(|s| s.iter().map(replicated).collect())
            .collect();
        attr.outputs = o
            .outputs
            .iter()
            .map(|s| s.iter().map(replicated).collect())
            .collect();
        for (k, &(slot, idx)) in b.input_pos.iter().enumerate() {
            if let Some(s) = inferred.inputs.get(k) {
                attr.inputs[slot][idx] = to_attr(s);
            }
        }
        for (k, &(slot, idx)) in b.output_pos.iter().enumerate() {
            if let Some(s) = inferred.outputs.get(k) {
                attr.outputs[slot][idx] = to_attr(s);
            }
        }
        attr.imp = choose_impl(self.program, o, &attr);
        attr
    }
}

/// Picks the distributed implementation an op's dist attr implies (Paddle's container and
/// index): matmul column (0), row (1) or replicate (2) parallel; vocab-parallel embedding;
/// `elementwise` for same-shape elementwise ops; `default` otherwise.
fn choose_impl(program: &Program, op: &crate::ir::Op, attr: &OperatorDistAttr) -> DistImpl {
    let slot_dims = |slot: usize| {
        attr.inputs
            .get(slot)
            .and_then(|s| s.first())
            .map(|a| a.dims.clone())
            .unwrap_or_default()
    };
    // Planner ops get their implementation from the backward / optimizer passes.
    let OpType::Forward(f) = op.ty else {
        return DistImpl::Default;
    };
    match f.family() {
        Family::Matmul => {
            let y = slot_dims(1);
            let trans_y = op.attr_bool("trans_y", false);
            let n = y.len();
            let (k_dim, n_dim) = match n {
                0 => return DistImpl::MatmulReplicate,
                1 => (0, None),
                _ if trans_y => (n - 1, Some(n - 2)),
                _ => (n - 2, Some(n - 1)),
            };
            if !y[k_dim].is_empty() {
                DistImpl::MatmulRow
            } else if n_dim.is_some_and(|d| !y[d].is_empty()) {
                DistImpl::MatmulColumn
            } else {
                DistImpl::MatmulReplicate
            }
        }
        Family::Embedding if slot_dims(0).first().is_some_and(|a| !a.is_empty()) => {
            DistImpl::EmbeddingVocab
        }
        // A split class axis runs Paddle's `c_softmax_with_cross_entropy` (impl 1); the
        // rule only allows it on the last axis with hard labels.
        Family::CrossEntropy if class_axis_split(op, attr) => DistImpl::CrossEntropyVocab,
        Family::Reshape => DistImpl::Reshape,
        Family::Transpose => DistImpl::Transpose,
        Family::Softmax => DistImpl::Softmax,
        Family::ElementwiseUnary => DistImpl::Elementwise,
        Family::ElementwiseBinary => {
            let shapes: Vec<&[usize]> = op
                .all_inputs()
                .map(|v| program.var(v).ty.shape.as_slice())
                .collect();
            if shapes.windows(2).all(|w| w[0] == w[1]) {
                DistImpl::Elementwise
            } else {
                DistImpl::Default
            }
        }
        Family::MaskedSoftmax
        | Family::Norm
        | Family::Rotary
        | Family::Attention
        | Family::Repeat
        | Family::MoeDispatch
        | Family::MoeCombine
        | Family::Embedding
        | Family::Split
        | Family::Concat
        | Family::Reduce
        | Family::Mean
        | Family::CrossEntropy => DistImpl::Default,
    }
}

/// Whether a softmax_with_cross_entropy splits its class axis, which the rule allows only
/// on the last axis with hard labels.
fn class_axis_split(op: &crate::ir::Op, attr: &OperatorDistAttr) -> bool {
    let Some(logits) = attr.inputs.first().and_then(|s| s.first()) else {
        return false;
    };
    let n = logits.rank();
    let axis = crate::ir::infer::axis(op.attr_int("axis", -1), n, "axis");
    !op.attr_bool("soft_label", false)
        && axis.is_ok_and(|a| a + 1 == n && !logits.dims[a].is_empty())
}
