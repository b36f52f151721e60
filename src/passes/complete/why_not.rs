//! Why a dim is not split: the explanation `plan --explain` and the inspector give for a
//! replicated dim, the counterpart of the trace's "why is it split this way".
//!
//! The reasons, in the order they are checked:
//! - the user pinned it replicated;
//! - completion rejected a proposal to split it (a conflict resolved the other way), naming
//!   the op and the conflict;
//! - the op that produces it merged inputs laid out differently (it wants some of them
//!   resharded, the `*` of `plan`), and the dim came out replicated;
//! - no mesh axis is left to split it with (each splits another dim, or holds a partial
//!   value), or none that is left divides its size;
//! - an op's SPMD rule keeps it whole: with the dim split, the rule wants it replicated
//!   (softmax's axis, layer_norm's normalised dims, an embedding table's width, ...);
//! - otherwise nothing proposes a split: no annotation reaches it.

use super::trace::{Conflict, EventKind};
use super::Completed;
use crate::dist::{DimAxes, Layout, MeshAxis};
use crate::ir::{OpId, Program, VarId};
use crate::spmd::registry::rule_for;
use crate::spmd::DistTensor;

/// Why a dim is replicated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotSplit {
    /// The user annotated it replicated (`-`), overriding this op's proposal if any.
    Pinned { overrode: Option<(OpId, DimAxes)> },
    /// A proposal to split it was rejected.
    Rejected {
        op: OpId,
        proposed: DimAxes,
        conflict: Conflict,
    },
    /// Its producer takes inputs laid out differently from how they are (it reshards
    /// them): (input, as it is, as the op wants it).
    MergedConflict {
        op: OpId,
        inputs: Vec<(VarId, String, String)>,
    },
    /// Every mesh axis of more than one device already splits another dim or holds a
    /// partial value.
    NoFreeAxis,
    /// The free mesh axes (name, size) do not divide the dim's size.
    TooSmall { size: usize, free: Vec<MeshAxis> },
    /// This op's rule wants the dim whole when it is split over `axis`.
    RuleKeepsWhole {
        op: OpId,
        rule: &'static str,
        axis: MeshAxis,
    },
    /// Nothing proposes splitting it; it could be split over these axes.
    Unreached { candidates: Vec<MeshAxis> },
}

/// Why `var`'s `dim` is not split (call it for a replicated dim).
pub fn why_not_split(program: &Program, c: &Completed, var: VarId, dim: usize) -> NotSplit {
    let attr = &c.tensors[var.index()];
    let rejected = c.trace.events.iter().rev().find_map(|e| match e.kind {
        EventKind::Rejected(conflict)
            if e.var == var && e.dim == Some(dim as u16) && e.before.is_empty() =>
        {
            Some((e.op, e.after, conflict))
        }
        EventKind::Rejected(_) | EventKind::Set { .. } | EventKind::Partial => None,
    });
    if attr.annotated.get(dim).copied().unwrap_or(false) {
        return NotSplit::Pinned {
            overrode: rejected.map(|(op, axes, _)| (op, axes)),
        };
    }
    if let Some((op, proposed, conflict)) = rejected {
        return NotSplit::Rejected {
            op,
            proposed,
            conflict,
        };
    }
    if let Some(why) = merged_conflict(program, c, var, dim) {
        return why;
    }
    let size = program.var(var).ty.shape.get(dim).copied().unwrap_or(1);
    let used: Vec<MeshAxis> = attr
        .dims
        .iter()
        .flatten()
        .copied()
        .chain(attr.partial_axes())
        .collect();
    let free: Vec<MeshAxis> = c
        .mesh
        .axes()
        .filter(|&a| c.mesh.axis_size(a) > 1 && !used.contains(&a))
        .collect();
    if free.is_empty() {
        return NotSplit::NoFreeAxis;
    }
    let candidates: Vec<MeshAxis> = free
        .iter()
        .copied()
        .filter(|&a| size >= c.mesh.axis_size(a))
        .collect();
    if candidates.is_empty() {
        return NotSplit::TooSmall { size, free };
    }
    for &axis in &candidates {
        if let Some((op, rule)) = keeps_whole(program, c, var, dim, axis) {
            return NotSplit::RuleKeepsWhole { op, rule, axis };
        }
    }
    NotSplit::Unreached { candidates }
}

/// The op producing `var`, if it takes an input laid out other than it is, dropping a mesh
/// axis that the op's rule would carry onto `var`'s `dim` (the dim the conflict is about).
fn merged_conflict(program: &Program, c: &Completed, var: VarId, dim: usize) -> Option<NotSplit> {
    let (i, op) = program
        .ops()
        .iter()
        .enumerate()
        .find(|(_, o)| o.all_outputs().any(|v| v == var))?;
    let wanted = c.ops.get(i)?;
    let b = rule_for(op, program).ok()?;
    let k_out = b.outputs.iter().position(|&v| v == var)?;
    let text = |a: &crate::dist::TensorDistAttr| super::print::shard_text(a, &c.mesh);
    let mut inputs = Vec::new();
    for (k, slot) in op.inputs.iter().enumerate() {
        for (j, &u) in slot.iter().enumerate() {
            let Some(w) = wanted.inputs.get(k).and_then(|s| s.get(j)) else {
                continue;
            };
            let have = &c.tensors[u.index()];
            let dropped = (0..have.rank()).flat_map(|d| {
                have.dims[d]
                    .iter()
                    .copied()
                    .filter(move |a| !w.dims.get(d).is_some_and(|x| x.contains(a)))
                    .map(move |a| (d, a))
            });
            let about_dim = dropped.into_iter().any(|(ud, a)| {
                let Some(k_in) = b.inputs.iter().position(|&v| v == u) else {
                    return false;
                };
                carried_back(program, c, &b, var, k_out, dim, a)
                    .and_then(|ins| {
                        ins.get(k_in)
                            .map(|l| l.dims.get(ud).is_some_and(|x| x.contains(&a)))
                    })
                    .unwrap_or(false)
            });
            if about_dim {
                inputs.push((u, text(have), text(w)));
            }
        }
    }
    (!inputs.is_empty()).then_some(NotSplit::MergedConflict {
        op: OpId(i as u32),
        inputs,
    })
}

/// The input layouts the op's rule infers back from its outputs, with output `k_out`
/// (`var`)'s `dim` split over `axis` too.
fn carried_back(
    program: &Program,
    c: &Completed,
    b: &crate::spmd::registry::Binding,
    var: VarId,
    k_out: usize,
    dim: usize,
    axis: MeshAxis,
) -> Option<Vec<Layout>> {
    let tensor = |v: VarId| {
        let a = &c.tensors[v.index()];
        DistTensor {
            shape: program.var(v).ty.shape.clone(),
            layout: Layout {
                dims: a.dims.clone(),
                partial: a.partial,
            },
        }
    };
    let ins: Vec<DistTensor> = b.inputs.iter().map(|&v| tensor(v)).collect();
    let mut outs: Vec<DistTensor> = b.outputs.iter().map(|&v| tensor(v)).collect();
    let _ = var;
    // The axis moves to `dim` (a layout holds each axis once).
    let dims = &mut outs.get_mut(k_out)?.layout.dims;
    for d in dims.iter_mut() {
        d.retain(|a| a != axis);
    }
    dims.get_mut(dim)?.push(axis);
    let r = b.rule.infer_backward(c.mesh.shape(), &ins, &outs).ok()?;
    Some(r.inputs.to_vec())
}

/// The first op whose rule, given `var`'s `dim` split over `axis` (the other tensors as
/// completed), wants that dim replicated.
fn keeps_whole(
    program: &Program,
    c: &Completed,
    var: VarId,
    dim: usize,
    axis: MeshAxis,
) -> Option<(OpId, &'static str)> {
    let tensor = |v: VarId| {
        let a = &c.tensors[v.index()];
        let mut layout = Layout {
            dims: a.dims.clone(),
            partial: a.partial,
        };
        if v == var {
            if let Some(d) = layout.dims.get_mut(dim) {
                d.push(axis);
            }
        }
        DistTensor {
            shape: program.var(v).ty.shape.clone(),
            layout,
        }
    };
    let mesh = c.mesh.shape();
    for (i, op) in program.ops().iter().enumerate() {
        if !op.all_inputs().chain(op.all_outputs()).any(|v| v == var) {
            continue;
        }
        let Ok(b) = rule_for(op, program) else {
            continue;
        };
        let ins: Vec<DistTensor> = b.inputs.iter().map(|&v| tensor(v)).collect();
        let outs: Vec<DistTensor> = b.outputs.iter().map(|&v| tensor(v)).collect();
        let as_input = b.inputs.iter().position(|&v| v == var).and_then(|k| {
            let f = b.rule.infer_forward(mesh, &ins).ok()?;
            Some(f.inputs.get(k)?.dims.get(dim)?.is_empty())
        });
        let as_output = b.outputs.iter().position(|&v| v == var).and_then(|k| {
            let r = b.rule.infer_backward(mesh, &ins, &outs).ok()?;
            Some(r.outputs.get(k)?.dims.get(dim)?.is_empty())
        });
        if as_input == Some(true) || as_output == Some(true) {
            return Some((OpId(i as u32), b.rule.name()));
        }
    }
    None
}

impl NotSplit {
    /// In words, for the explanation text.
    pub fn describe(&self, program: &Program, c: &Completed) -> String {
        let name = |a: MeshAxis| c.mesh.axis_name(a).to_string();
        let names = |axes: &[MeshAxis]| {
            axes.iter()
                .map(|&a| format!("{} ({})", name(a), c.mesh.axis_size(a)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let op = |o: OpId| format!("{o} ({})", program.op(o).ty);
        match self {
            NotSplit::Pinned { overrode: None } => "annotated replicated".into(),
            NotSplit::Pinned {
                overrode: Some((o, axes)),
            } => format!(
                "annotated replicated, overriding {}'s proposal to split it over {}",
                op(*o),
                axes.iter().map(|&a| name(a)).collect::<Vec<_>>().join("+")
            ),
            NotSplit::Rejected {
                op: o,
                proposed,
                conflict,
            } => format!(
                "not split: {} proposed {} and was rejected: {}",
                op(*o),
                proposed
                    .iter()
                    .map(|&a| name(a))
                    .collect::<Vec<_>>()
                    .join("+"),
                conflict.describe()
            ),
            NotSplit::MergedConflict { op: o, inputs } => format!(
                "not split: {} merges inputs that split it differently ({}) and resolves the \
                 conflict by resharding, leaving it whole",
                op(*o),
                inputs
                    .iter()
                    .map(|(v, have, want)| format!(
                        "{} {have}, taken as {want}",
                        program.var(*v).name
                    ))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            NotSplit::NoFreeAxis => {
                "not split: every mesh axis already splits another dim or holds a partial value"
                    .into()
            }
            NotSplit::TooSmall { size, free } => format!(
                "not split: its size {size} is smaller than every free mesh axis: {}",
                names(free)
            ),
            NotSplit::RuleKeepsWhole { op: o, rule, axis } => format!(
                "not split: {}'s {rule} rule keeps it whole (split over {}, the rule wants it \
                 replicated)",
                op(*o),
                name(*axis)
            ),
            NotSplit::Unreached { candidates } => format!(
                "not split: no annotation reaches it (it could be split over {})",
                names(candidates)
            ),
        }
    }
}
