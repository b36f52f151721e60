//! A plan: a mesh, a program and the user's annotations, as one text file.
//!
//! ```text
//! mesh [2, 4] (dp, mp)
//!
//! var x: f32[16, 64] input
//! var w: f32[64, 256] parameter persistable
//! var y: f32[16, 256] activation
//!
//! op matmul_v2(X=x, Y=w) -> (Out=y)
//!
//! shard x [dp, ?]
//! shard w [-, mp]
//! ```
//!
//! In a `shard` line each dim is a mesh axis name, `(a, b)` for co-sharding, `-` for
//! replicated, or `?` for "not annotated" (completion decides); `partial(axis=SUM, ...)`
//! marks partial values. Annotated dims are pinned: completion never changes them.

pub mod fuse_attention;
mod located;
mod options;
pub mod parallel;
mod parallel_spec;
mod parse;
mod print;
pub mod sequence_parallel;
mod spec;
mod split;
pub mod stack_experts;
mod stage;

pub use located::{Located, PlanError};
pub use options::{
    parse_options, OptimizerKind, OptionError, PlanOptions, Recompute, ScheduleKind,
    MAX_MICRO_BATCHES, MAX_ZERO,
};
pub use parse::{parse_plan, SourceMap};
pub use print::write_shard;
pub use spec::{mesh_spec, parse_mesh_spec, parse_shard_spec, shard_spec, SpecError};
pub use split::{forward_ops, ranges as stage_ranges, split_evenly, split_layers, SplitError};
pub use stage::{parse_stage, StageLine, StagePlacement, StageTarget};

use crate::dist::{MeshId, MeshTable, ProcessMesh, TensorDistAttr};
use crate::ir::{verify_program, OpId, Program, Subject, VarId};
use serde::Serialize;
use std::fmt;
use std::sync::Arc;

/// A mesh table, a program and the user's annotations. Annotations name their mesh by id;
/// today a plan has at most one mesh, [`MeshId::JOB`].
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub meshes: MeshTable,
    pub program: Program,
    /// User annotations, in file order, at most one per variable.
    pub annotations: Vec<Annotation>,
    /// The planning options (the `options` statement).
    pub options: PlanOptions,
    /// Pipeline stage placements (`stage` statements), in file order.
    pub stages: Vec<StagePlacement>,
}

/// The user's annotation of one variable.
#[derive(Clone, Debug, PartialEq)]
pub struct Annotation {
    pub var: VarId,
    pub attr: TensorDistAttr,
}

/// What a plan problem is about, so a front-end can point at the right line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum PlanSubject {
    Op(OpId),
    Var(String),
    /// The i-th annotation.
    Annotation(usize),
    /// The `options` statement (micro-batches, the schedule, ZeRO, ...).
    Options,
    /// The `mesh` statement (or its absence).
    Mesh,
}

/// One problem found by [`verify_plan`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PlanIssue {
    pub subject: PlanSubject,
    pub message: String,
}

impl fmt::Display for PlanIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// How many rank programs a command builds (for its memory estimate).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RanksPlanned {
    None,
    One,
    All,
    /// This many ranks (the rank classes of a large mesh, `cost::classes`).
    Count(usize),
}

impl Plan {
    /// The job's mesh, if the plan has one.
    pub fn mesh(&self) -> Option<&Arc<ProcessMesh>> {
        self.meshes.get(MeshId::JOB)
    }

    /// Makes `mesh` the plan's (only) mesh.
    pub fn set_mesh(&mut self, mesh: Arc<ProcessMesh>) {
        self.meshes = MeshTable::single(mesh);
    }

    /// Every annotation as its one-line spec (`x=dp,-`), in order.
    pub fn shard_specs(&self) -> Vec<String> {
        self.annotations
            .iter()
            .filter_map(|a| {
                let mesh = self.meshes.get(a.attr.mesh)?;
                Some(spec::shard_spec(&self.program, mesh, a))
            })
            .collect()
    }

    /// About how many bytes planning this plan holds: the serial programs with their dist
    /// attrs and the first rank's program, built in full, then each further rank stamped
    /// from it (its variables and layouts, and copies of its rank-dependent ops; the rest
    /// is shared). Measured on `gpt` with 24 layers: about 17 KB per serial op or variable
    /// for the first rank (process included) and 0.6 KB more per further rank (1,024 ranks
    /// of a [8, 8, 16] mesh: 1.2 GB). Shapes cost nothing, so any model size plans in the
    /// same memory.
    pub fn estimated_planning_bytes(&self, partitioned: RanksPlanned) -> f64 {
        const FIRST_RANK_BYTES_PER_ITEM: f64 = 20.0 * 1024.0;
        const FURTHER_RANK_BYTES_PER_ITEM: f64 = 0.75 * 1024.0;
        let items = (self.program.ops().len() + self.program.vars().len()) as f64;
        let further = match (self.mesh(), partitioned) {
            (Some(m), RanksPlanned::All) => m.size().saturating_sub(1) as f64,
            (Some(_), RanksPlanned::Count(n)) => n.saturating_sub(1) as f64,
            (
                Some(_) | None,
                RanksPlanned::One | RanksPlanned::None | RanksPlanned::All | RanksPlanned::Count(_),
            ) => 0.0,
        };
        items * (FIRST_RANK_BYTES_PER_ITEM + FURTHER_RANK_BYTES_PER_ITEM * further)
    }

    /// A plan holding just a program.
    pub fn from_program(program: Program) -> Plan {
        Plan {
            meshes: crate::dist::MeshTable::default(),
            program,
            annotations: Vec::new(),
            options: PlanOptions::default(),
            stages: Vec::new(),
        }
    }

    /// The annotation of `var`, if any.
    pub fn annotation(&self, var: VarId) -> Option<&TensorDistAttr> {
        self.annotations
            .iter()
            .find(|a| a.var == var)
            .map(|a| &a.attr)
    }
}

/// A plan's program is the forward pass: its ops are `forward` or `loss`. The planner makes
/// the backward and optimizer ops, and places them by their role (stages, recomputation,
/// the pipeline's jobs); a forward op marked `backward` would be scheduled after the ops
/// that read it (a stalled pipeline) or recomputed before its input exists.
fn role_issues(program: &crate::ir::Program) -> Vec<PlanIssue> {
    use crate::ir::OpRole;
    program
        .ops()
        .iter()
        .enumerate()
        .filter(|(_, op)| matches!(op.role, OpRole::Backward | OpRole::Optimize))
        .map(|(i, op)| PlanIssue {
            subject: PlanSubject::Op(crate::ir::OpId(i as u32)),
            message: format!(
                "op{i}: {}: role={} in a plan: a plan's program is the forward pass (roles \
                 forward and loss); the planner makes the backward and optimizer ops",
                op.ty,
                op.role.name()
            ),
        })
        .collect()
}

/// Verifies the program (its ops' roles included) and every annotation against its
/// variable and the mesh. Reports every problem.
pub fn verify_plan(plan: &Plan) -> Vec<PlanIssue> {
    let mut issues: Vec<PlanIssue> = verify_program(&plan.program)
        .into_iter()
        .map(|e| PlanIssue {
            message: e.to_string(),
            subject: match e.subject {
                Subject::Op(id) => PlanSubject::Op(id),
                Subject::Var(name) => PlanSubject::Var(name),
            },
        })
        .collect();
    issues.extend(role_issues(&plan.program));
    let mut seen = std::collections::HashSet::new();
    for (i, ann) in plan.annotations.iter().enumerate() {
        let var = plan.program.var(ann.var);
        let checked = match plan.meshes.get(ann.attr.mesh) {
            Some(mesh) => ann.attr.validate(&var.name, &var.ty.shape, mesh),
            None => Err(crate::dist::DistAttrError::NoSuchMesh {
                tensor: var.name.to_string(),
            }),
        };
        if let Err(e) = checked {
            issues.push(PlanIssue {
                subject: PlanSubject::Annotation(i),
                message: format!("shard: {e}"),
            });
        }
        if !ann.attr.partial.is_empty() && var.kind.is_source() {
            issues.push(PlanIssue {
                subject: PlanSubject::Annotation(i),
                message: format!(
                    "shard: `{}` is {}, which every rank is given whole or as its block; \
                     only a computed tensor can hold partial values",
                    var.name,
                    var.kind.name()
                ),
            });
        }
        let pp = plan
            .meshes
            .get(ann.attr.mesh)
            .and_then(|m| m.axis_by_name(crate::dist::PP_AXIS));
        if let Some(pp) = pp {
            let uses =
                ann.attr.dims.iter().any(|d| d.contains(&pp)) || ann.attr.partial.get(pp).is_some();
            if uses {
                issues.push(PlanIssue {
                    subject: PlanSubject::Annotation(i),
                    message: format!(
                        "shard: `{}` uses the `pp` axis, which makes pipeline stages (each stage \
                         holds whole tensors); split it over another axis",
                        var.name
                    ),
                });
            }
        }
        if !seen.insert(ann.var) {
            issues.push(PlanIssue {
                subject: PlanSubject::Annotation(i),
                message: format!("shard: `{}` is annotated twice", var.name),
            });
        }
    }
    issues
}
