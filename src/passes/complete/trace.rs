//! The completion trace: every change (and every rejected proposal) as a compact event,
//! and `explain`, which walks events back to the annotations that caused a dim's mapping.

use crate::dist::DimAxes;
use crate::ir::{OpId, VarId};
use serde::Serialize;

/// Which sweep produced an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Direction {
    Forward,
    Reverse,
}

/// Why a proposal was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Conflict {
    /// The rule's forward and backward results disagree on the dim.
    RulesDisagree,
    /// The dim is already split another way.
    AlreadySplit,
    /// The user pinned the dim.
    Pinned,
    /// The mesh axes already split another dim of the tensor (or are partial).
    AxisInUse,
    /// The dim has fewer elements than the mesh axes would cut it into.
    TooSmall,
}

impl Conflict {
    /// A short explanation.
    pub fn describe(self) -> &'static str {
        match self {
            Conflict::RulesDisagree => "the rule's forward and backward results disagree",
            Conflict::AlreadySplit => "the dim is already split another way",
            Conflict::Pinned => "the dim is pinned by an annotation",
            Conflict::AxisInUse => "the mesh axis already splits another dim of the tensor",
            Conflict::TooSmall => "the dim has fewer elements than the mesh axes have shards",
        }
    }
}

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum EventKind {
    /// The dim changed from `before` to `after`; `from_outputs` says the proposal came from
    /// the op's outputs (the rule's backward inference) rather than its inputs.
    Set { from_outputs: bool },
    /// The partial status changed (`dim` is `None`; axes are the partial axes).
    Partial,
    /// A proposal of `after` was rejected; the dim stays `before`.
    Rejected(Conflict),
}

/// One completion event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Event {
    pub sweep: u16,
    pub direction: Direction,
    pub op: OpId,
    pub var: VarId,
    /// The tensor dim, or `None` for partial status.
    pub dim: Option<u16>,
    pub before: DimAxes,
    pub after: DimAxes,
    pub kind: EventKind,
}

/// The whole trace: the annotations completion started from and the events, in order.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Trace {
    /// (var, dim, axes) for every annotated dim that is split, in plan order.
    pub annotations: Vec<(VarId, u16, DimAxes)>,
    pub events: Vec<Event>,
    /// Ops whose rule raised, with why (completion falls back to replication). Serialised
    /// as the messages a reader sees.
    #[serde(serialize_with = "as_messages")]
    pub rule_errors: Vec<(OpId, crate::spmd::SpmdError)>,
}

fn as_messages<S: serde::Serializer>(
    errors: &[(OpId, crate::spmd::SpmdError)],
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_seq(errors.iter().map(|(op, e)| (op, e.to_string())))
}

/// One step of an explanation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Step {
    /// The user annotated `var`'s `dim` with these axes.
    Annotated { var: VarId, dim: u16, axes: DimAxes },
    /// The event at this index of `Trace::events`.
    Event(usize),
}

impl Trace {
    /// The events that set a dim (not rejections or partial changes).
    fn last_set(&self, var: VarId, dim: u16, before_index: usize) -> Option<usize> {
        self.events[..before_index].iter().rposition(|e| {
            e.var == var && e.dim == Some(dim) && matches!(e.kind, EventKind::Set { .. })
        })
    }

    /// Why `var`'s `dim` is split the way it is: the chain from the annotations to the last
    /// change, oldest first. Empty if the dim was never split. `op_vars` gives the variables
    /// of an op with their ranks (where a change may have come from).
    pub fn explain(
        &self,
        var: VarId,
        dim: u16,
        op_vars: impl Fn(OpId) -> Vec<(VarId, usize)>,
    ) -> Vec<Step> {
        let mut chain = Vec::new();
        let (mut var, mut dim, mut bound) = (var, dim, self.events.len());
        loop {
            let Some(i) = self.last_set(var, dim, bound) else {
                if let Some(&(v, d, axes)) = self
                    .annotations
                    .iter()
                    .find(|(v, d, _)| *v == var && *d == dim)
                {
                    chain.push(Step::Annotated {
                        var: v,
                        dim: d,
                        axes,
                    });
                }
                break;
            };
            chain.push(Step::Event(i));
            let event = self.events[i];
            // The source: another variable of the same op whose dim held these axes then.
            let mut source = None;
            'search: for (u, rank) in op_vars(event.op) {
                for d in 0..rank as u16 {
                    let held = match self.last_set(u, d, i) {
                        Some(j) => Some(self.events[j].after),
                        None => self
                            .annotations
                            .iter()
                            .find(|(v, e, _)| *v == u && *e == d)
                            .map(|a| a.2),
                    };
                    if u != var && held == Some(event.after) {
                        source = Some((u, d));
                        break 'search;
                    }
                }
            }
            match source {
                Some((u, d)) => {
                    var = u;
                    dim = d;
                    bound = i;
                }
                None => break,
            }
        }
        chain.reverse();
        chain
    }
}
