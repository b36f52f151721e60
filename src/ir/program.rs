//! `Program`: the variables and the ordered operators of one training step.

use super::attr::{Attr, Attrs};
use super::op_type::{OpRole, OpType};
use super::types::{DType, OpId, TensorType, Var, VarId, VarKind};
use super::vars::Vars;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

/// The variables of one slot: inline up to two (most slots hold one).
pub type Slot = smallvec::SmallVec<[VarId; 2]>;

/// An op's slots, inline up to four: building, copying and freeing an op allocates nothing
/// but its `Arc` (per-rank programs build thousands).
pub type Slots = smallvec::SmallVec<[Slot; 4]>;

/// Slots from one iterable of variables per slot: `slots![[x], [y, z], []]`.
#[macro_export]
macro_rules! slots {
    ($($slot:expr),* $(,)?) => {
        [$($crate::ir::Slot::from_iter($slot)),*]
            .into_iter()
            .collect::<$crate::ir::Slots>()
    };
}

/// The namescope an op gets when nobody sets one.
pub const ROOT_SCOPE: &str = "/";

/// One operator. `inputs[i]` and `outputs[i]` hold the variables of the i-th slot of the
/// op type's schema (an absent optional slot is empty), so slot lookups are by index.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Op {
    pub ty: OpType,
    pub inputs: Slots,
    pub outputs: Slots,
    pub attrs: Attrs,
    pub role: OpRole,
    /// Borrowed for the root and the planner's purposes, owned only for parsed scopes.
    pub namescope: Cow<'static, str>,
}

impl Op {
    /// A forward op in the root namescope with empty slots sized to its schema.
    pub fn new(ty: OpType) -> Op {
        Op {
            ty,
            inputs: smallvec::smallvec![Slot::new(); ty.input_slots().len()],
            outputs: smallvec::smallvec![Slot::new(); ty.output_slots().len()],
            attrs: Attrs::new(),
            role: OpRole::Forward,
            namescope: Cow::Borrowed(ROOT_SCOPE),
        }
    }

    /// The variables of the input slot called `slot` (empty if absent or unknown).
    pub fn input(&self, slot: &str) -> &[VarId] {
        slot_vars(
            self.ty.input_slots().iter().map(|s| s.name),
            &self.inputs,
            slot,
        )
    }

    /// The variables of the output slot called `slot` (empty if absent or unknown).
    pub fn output(&self, slot: &str) -> &[VarId] {
        slot_vars(
            self.ty.output_slots().iter().map(|s| s.name),
            &self.outputs,
            slot,
        )
    }

    /// Every input variable, in slot order.
    pub fn all_inputs(&self) -> impl Iterator<Item = VarId> + '_ {
        self.inputs.iter().flatten().copied()
    }

    /// Every output variable, in slot order.
    pub fn all_outputs(&self) -> impl Iterator<Item = VarId> + '_ {
        self.outputs.iter().flatten().copied()
    }

    /// A boolean attribute, or `default` when absent. Wrong kinds are reported by the verifier;
    /// here they fall back to the default so a bad program never panics.
    pub fn attr_bool(&self, name: &str, default: bool) -> bool {
        match self.attrs.get(name) {
            Some(Attr::Bool(b)) => *b,
            _ => default,
        }
    }

    /// An integer attribute, or `default` when absent.
    pub fn attr_int(&self, name: &str, default: i64) -> i64 {
        match self.attrs.get(name) {
            Some(Attr::Int(i)) => *i,
            _ => default,
        }
    }

    /// A float attribute, or `default` when absent. Integers are accepted as floats.
    pub fn attr_float(&self, name: &str, default: f64) -> f64 {
        match self.attrs.get(name) {
            Some(Attr::Float(x)) => *x,
            Some(Attr::Int(i)) => *i as f64,
            _ => default,
        }
    }

    /// An integer-list attribute, or `None` when absent.
    pub fn attr_ints(&self, name: &str) -> Option<&[i64]> {
        match self.attrs.get(name) {
            Some(Attr::Ints(v)) => Some(v),
            _ => None,
        }
    }

    /// A string attribute, or `None` when absent.
    pub fn attr_str(&self, name: &str) -> Option<&str> {
        match self.attrs.get(name) {
            Some(Attr::Str(s)) => Some(s),
            _ => None,
        }
    }
}

fn slot_vars<'a>(
    names: impl Iterator<Item = &'static str>,
    slots: &'a [Slot],
    slot: &str,
) -> &'a [VarId] {
    names
        .zip(slots)
        .find(|(n, _)| *n == slot)
        .map(|(_, v)| v.as_slice())
        .unwrap_or(&[])
}

/// Errors from building a program by hand or by a builder.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ProgramError {
    #[error("variable `{0}` is declared twice")]
    DuplicateVar(String),
    #[error("unknown variable `{0}`")]
    UnknownVar(String),
    #[error("{op}: {error}")]
    Infer {
        op: String,
        error: super::infer_error::InferError,
    },
    #[error("{op}: expects {expected} input slots")]
    InputSlots { op: String, expected: usize },
    #[error("{op}: produces {produced} outputs, {named} names given")]
    OutputNames {
        op: String,
        produced: usize,
        named: usize,
    },
}

/// The variables and the ordered operators of one training step.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Program {
    /// Shared copy-on-write: every rank program of a partition starts with the same
    /// variables, and every rank stamped from a template declares the same ones (`Vars`).
    vars: Vars,
    /// Name -> id, built on first use: per-rank programs are built by the thousand and
    /// rarely looked up by name. FxHash: SipHash of the names was a twentieth of the
    /// auto-planner's instructions (names come from the user's own plan, so resistance to
    /// crafted collisions buys nothing: a hostile plan can only slow its own author).
    #[serde(skip)]
    by_name: OnceLock<FxHashMap<std::sync::Arc<str>, VarId>>,
    /// Shared: a rank's program keeps every serial op it runs unchanged as the same
    /// allocation, so partitioning copies (and later frees) only the ops it rewrites.
    ops: Vec<Arc<Op>>,
}

impl PartialEq for Program {
    fn eq(&self, other: &Program) -> bool {
        self.vars == other.vars && self.ops == other.ops
    }
}

impl Program {
    /// An empty program.
    pub fn new() -> Program {
        Program::default()
    }

    /// Declares a variable; names are unique.
    pub fn add_var(&mut self, var: Var) -> Result<VarId, ProgramError> {
        self.index();
        let id = VarId(self.vars.len() as u32);
        if let Some(map) = self.by_name.get_mut() {
            if map.contains_key(&var.name) {
                return Err(ProgramError::DuplicateVar(var.name.to_string()));
            }
            map.insert(var.name.clone(), id);
        }
        self.vars.push(var);
        Ok(id)
    }

    /// A program with these variables and no ops; the caller guarantees the names are
    /// unique (the partitioner's per-rank copies of a verified program's variables).
    pub fn with_vars(vars: Vec<Var>) -> Program {
        Program {
            vars: Vars::from(vars),
            by_name: OnceLock::new(),
            ops: Vec::new(),
        }
    }

    /// A program whose variables start with `shared`, the table other programs start with
    /// too (a partition's rank programs), and no ops; the caller guarantees the names are
    /// unique.
    pub fn sharing_vars(shared: Arc<Vec<Var>>) -> Program {
        Program {
            vars: Vars::sharing(shared),
            by_name: OnceLock::new(),
            ops: Vec::new(),
        }
    }

    /// Every f32 variable made f64 (names, shapes and ops unchanged): verification runs the
    /// program in f64 so rounding cannot hide a wrong result (`exec::precision`).
    pub fn promote_floats(&mut self) {
        if self.vars.iter().all(|v| v.ty.dtype != DType::F32) {
            return;
        }
        for v in self.vars.iter_mut() {
            if v.ty.dtype == DType::F32 {
                v.ty.dtype = DType::F64;
            }
        }
    }

    /// Gives the variables these types, in id order (names, kinds and ops unchanged): a
    /// planned program re-inferred at another batch size (`passes::pipeline::rebatch`). Extra types
    /// are ignored; variables without one keep theirs.
    pub fn set_types(&mut self, types: Vec<TensorType>) {
        for (v, t) in self.vars.iter_mut().zip(types) {
            v.ty = t;
        }
    }

    /// Declares a variable whose name the caller guarantees is new (the partitioner's
    /// per-rank copies of a verified program); skips the name check.
    pub fn add_var_unchecked(&mut self, var: Var) -> VarId {
        let id = VarId(self.vars.len() as u32);
        if let Some(map) = self.by_name.get_mut() {
            map.insert(var.name.clone(), id);
        }
        self.vars.push(var);
        id
    }

    fn index(&self) -> &FxHashMap<std::sync::Arc<str>, VarId> {
        self.by_name.get_or_init(|| {
            let mut map = FxHashMap::with_capacity_and_hasher(self.vars.len(), Default::default());
            map.extend(
                self.vars
                    .iter()
                    .enumerate()
                    .map(|(i, v)| (v.name.clone(), VarId(i as u32))),
            );
            map
        })
    }

    /// Declares a variable from its parts; parameters and optimizer state are persistable.
    pub fn declare(
        &mut self,
        name: &str,
        ty: TensorType,
        kind: VarKind,
    ) -> Result<VarId, ProgramError> {
        let persistable = matches!(kind, VarKind::Parameter | VarKind::OptimizerState);
        self.add_var(Var {
            name: name.into(),
            ty,
            kind,
            persistable,
        })
    }

    /// Appends an op (not checked: run the verifier).
    pub fn push_op(&mut self, op: Op) -> OpId {
        self.push_shared(Arc::new(op))
    }

    /// Appends an op shared with another program (not checked: run the verifier).
    pub fn push_shared(&mut self, op: Arc<Op>) -> OpId {
        let id = OpId(self.ops.len() as u32);
        self.ops.push(op);
        id
    }

    /// All variables, indexed by `VarId`.
    pub fn vars(&self) -> &Vars {
        &self.vars
    }

    /// All ops in execution order, indexed by `OpId`.
    pub fn ops(&self) -> &[Arc<Op>] {
        &self.ops
    }

    /// Whether `other` has this program's dataflow: the same variables (types and kinds)
    /// and the same ops reading and writing the same variables with the same attributes,
    /// except that a collective's or rank-local op's attributes may differ (its group, ring,
    /// offsets or start index: the values stamping recomputes per rank, which change
    /// neither an op's shapes nor its work; a ring attention block's offsets change its
    /// work, the causal pairs it keeps, so they must agree). Ranks stamped from one template share it, so
    /// what depends on dataflow alone (op work, liveness) is computed once for all of them;
    /// shared variables and ops compare by pointer.
    pub fn same_dataflow(&self, other: &Program) -> bool {
        // Ops first: different pipeline stages declare the same serial variables (a long
        // equal prefix to compare) but differ in their first ops.
        self.ops.len() == other.ops.len()
            && self.vars.len() == other.vars.len()
            && self.ops.iter().zip(&other.ops).all(|(a, b)| {
                Arc::ptr_eq(a, b)
                    || (a.ty == b.ty
                        && a.inputs == b.inputs
                        && a.outputs == b.outputs
                        && (stamped_only(a.ty) || a.attrs == b.attrs))
            })
            && self.vars.same(&other.vars)
    }

    /// Removes and returns op `i` (for fault injection: the checker's own tests delete a
    /// planned collective and expect verification to fail).
    pub fn remove_op(&mut self, i: usize) -> Option<Arc<Op>> {
        (i < self.ops.len()).then(|| self.ops.remove(i))
    }

    /// A copy of the first `vars` variables and `ops` ops: the program as it was before
    /// later passes appended to it.
    pub fn prefix(&self, vars: usize, ops: usize) -> Program {
        Program {
            vars: self.vars.prefix(vars),
            by_name: OnceLock::new(),
            ops: self.ops[..ops.min(self.ops.len())].to_vec(),
        }
    }

    /// Mutable access to op `i` (copied first if another program shares it), for passes
    /// that rewrite attributes in place.
    pub fn op_mut(&mut self, i: usize) -> Option<&mut Op> {
        self.ops.get_mut(i).map(Arc::make_mut)
    }

    /// Mutable access to every op matching `keep` (each copied first if shared).
    pub fn ops_mut_where(&mut self, keep: impl Fn(&Op) -> bool) -> impl Iterator<Item = &mut Op> {
        self.ops
            .iter_mut()
            .filter(move |o| keep(o))
            .map(Arc::make_mut)
    }

    /// The variable with this id. Ids come from this program, so they are in range.
    pub fn var(&self, id: VarId) -> &Var {
        &self.vars[id.index()]
    }

    /// Looks a variable up by name.
    pub fn var_id(&self, name: &str) -> Option<VarId> {
        self.index().get(name).copied()
    }

    /// The op with this id.
    pub fn op(&self, id: OpId) -> &Op {
        &self.ops[id.index()]
    }

    /// Drops the name index (it is rebuilt on the next lookup).
    pub fn reindex(&mut self) {
        self.by_name = OnceLock::new();
    }
}

/// The transformer layer a variable belongs to, from the presets' naming (`h3.attn.q.w` is
/// layer 3): the one convention that pipeline splitting, recomputation, the auto-planner's
/// bound, the playground's blocks and the shrunk twin read layers by.
pub fn layer_of_name(name: &str) -> Option<usize> {
    let (head, _) = name.split_once('.')?;
    let digits = head.strip_prefix('h')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

impl Program {
    /// The layer an op belongs to: its first output's ([`layer_of_name`]).
    pub fn layer_of(&self, op: &Op) -> Option<usize> {
        let out = op.all_outputs().next()?;
        layer_of_name(&self.var(out).name)
    }
}

/// Whether an op type's attributes are only what stamping recomputes per rank (groups,
/// rings, offsets) and leave its work alone.
fn stamped_only(ty: OpType) -> bool {
    matches!(ty, OpType::Collective(_) | OpType::RankLocal(_))
        && ty != OpType::RingAttnBlock
        && ty != OpType::RingAttnBlockGrad
}
