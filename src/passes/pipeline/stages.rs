//! Pipeline stages of every op: completion's mesh propagation for plans whose mesh has a
//! `pp` axis. Each op's dist attr gets its stage's mesh (`MeshId(1 + stage)`; the job mesh
//! stays `MeshId::JOB`) and its `chunk_id`, as Paddle's completer gives every op a
//! `process_mesh` and a `chunk_id`; inserted ops copy them (the partitioner, like Paddle's
//! `set_comm_op_dist_attr_for_program`).
//!
//! The rules, over virtual stages (`stage k` of `pp × chunks`):
//! - a forward op in a `stage K ops A to B` range is on `K`;
//! - any other forward op is on the latest stage among the tensors it reads: a tensor's
//!   stage is its producer's, raised by a `stage K var T` statement (Paddle's "annotate `h`
//!   on stage 1's mesh"); an op that reads no computed tensor stays with the op before it;
//! - a grad op is on its forward op's stage; other backward ops (sums of gradient
//!   contributions) on the earliest stage among what they read (gradients move only to
//!   earlier stages), else (the loss gradient's seed) their first consumer's;
//! - an optimizer op on the stage of the gradient it reads.
//!
//! Activations only move to later stages: a placed op reading a tensor computed on a later
//! stage is an error. A parameter read on several physical stages was given a copy per
//! stage before completion (`tied.rs`); one read by two chunks of one physical stage is an
//! error.

use super::super::dist_program::DistProgram;
use crate::dist::{MeshId, Stages};
use crate::ir::{OpId, OpType, Program, VarKind};
use crate::plan::{Plan, StageTarget};
use rustc_hash::FxHashMap as HashMap;

/// Why stages cannot be assigned.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StageError {
    #[error("`stage` statements need a mesh with a `pp` axis (the pipeline axis)")]
    NoPipelineAxis,
    #[error("stage {stage} does not exist: the plan has {count} (virtual) stages, 0 to {}", count - 1)]
    NoSuchStage { stage: usize, count: usize },
    #[error(
        "op{op} ({ty}) is on stage {stage} but reads `{var}` from stage {from}: activations \
         only move to later stages"
    )]
    Backwards {
        op: usize,
        ty: String,
        stage: usize,
        var: String,
        from: usize,
    },
    #[error(
        "parameter `{param}` is read on virtual stages {first} and {second} of one physical \
         stage: a parameter is tied across physical stages only (place both readers in one \
         chunk)"
    )]
    SharedParameter {
        param: String,
        first: usize,
        second: usize,
    },
    #[error("{0}")]
    Split(#[from] crate::plan::SplitError),
    #[error("tying a parameter read on several stages: {0}")]
    Tie(String),

    #[error("schedule: {0}")]
    Schedule(String),
    #[error(
        "stage {stage} of {count} has no ops: place ops on every stage (`stage {stage} ops A \
         to B`), or use fewer stages"
    )]
    Empty { stage: usize, count: usize },
}

impl crate::plan::Located for StageError {
    fn subject(&self) -> Option<crate::plan::PlanSubject> {
        use crate::plan::PlanSubject;
        match self {
            StageError::NoPipelineAxis => Some(PlanSubject::Mesh),
            StageError::Backwards { op, .. } => Some(PlanSubject::Op(crate::ir::OpId(*op as u32))),
            StageError::SharedParameter { param, .. } => Some(PlanSubject::Var(param.clone())),
            // The stage count, the split and the schedule are the options' (or the mesh's
            // `pp` axis's, whose size the options' chunks multiply).
            StageError::NoSuchStage { .. }
            | StageError::Split(_)
            | StageError::Tie(_)
            | StageError::Schedule(_)
            | StageError::Empty { .. } => Some(PlanSubject::Options),
        }
    }
}

/// The mesh id of an op on physical stage `stage` (`JOB` without a pipeline).
pub fn stage_mesh_id(stages: &Stages, stage: usize) -> MeshId {
    if stages.stages > 1 {
        MeshId(1 + stage as u16)
    } else {
        MeshId::JOB
    }
}

/// The stage of an op that runs on every stage: an optimizer-phase op reading several
/// stages' tensors (AMP's check of every gradient, the global norm's sum), each rank taking
/// its own stage's share, or one that reads only such results (the clip factor, the loss
/// scale's update). Its dist attr has the job mesh.
pub const ALL_STAGES: usize = usize::MAX;

/// The virtual stage an op attr records ([`ALL_STAGES`] for the job mesh in a pipeline).
pub fn virtual_stage(stages: &Stages, attr: &crate::dist::OperatorDistAttr) -> usize {
    if stages.stages > 1 && attr.mesh == MeshId::JOB {
        return ALL_STAGES;
    }
    let physical = (attr.mesh.0 as usize).saturating_sub(1);
    attr.chunk_id * stages.stages + physical.min(stages.stages.saturating_sub(1))
}

/// Assigns every op of `full` (forward and backward, before the optimizer) its stage.
/// `first_backward` is the index of the first backward op.
pub fn assign_stages(
    full: &mut DistProgram,
    plan: &Plan,
    forward_of: &HashMap<OpId, OpId>,
    first_backward: usize,
) -> Result<Stages, StageError> {
    let stages = Stages::of(&full.mesh, plan.options.chunks);
    if !plan.stages.is_empty() && stages.axis.is_none() {
        return Err(StageError::NoPipelineAxis);
    }
    let count = stages.virtual_count();
    let (placed, raised) = placements(plan, count)?;
    let stage = op_stages(&full.program, &placed, &raised, forward_of, first_backward)?;
    check_parameters(full, &stage, first_backward)?;
    for (i, s) in stage.iter().enumerate() {
        set_stage(full, &stages, i, s.unwrap_or(0));
    }
    if stages.is_pipelined() {
        for k in 0..count {
            if !stage[..first_backward].contains(&Some(k)) {
                return Err(StageError::Empty { stage: k, count });
            }
        }
    }
    Ok(stages)
}

/// The virtual stage of every op of `program` by the rules above (`placed` and `raised`
/// from the plan's statements; `forward_of` maps a grad op to its forward op, and ops from
/// `first_backward` on are backward).
fn op_stages(
    program: &Program,
    placed: &HashMap<usize, usize>,
    raised: &HashMap<usize, usize>,
    forward_of: &HashMap<OpId, OpId>,
    first_backward: usize,
) -> Result<Vec<Option<usize>>, StageError> {
    let ops = program.ops().len();
    let mut stage: Vec<Option<usize>> = vec![None; ops];
    // The stage each variable was last written on.
    let mut written: Vec<Option<usize>> = vec![None; program.vars().len()];
    for i in 0..ops {
        let op = program.op(OpId(i as u32));
        let fwd = forward_of.get(&OpId(i as u32)).map(|f| f.index());
        let read = op
            .all_inputs()
            .filter_map(|v| {
                let w = written[v.index()];
                let r = raised.get(&v.index()).copied();
                w.max(r)
            })
            .max();
        let s = if i < first_backward {
            match placed.get(&i) {
                Some(&p) => {
                    if let Some((v, from)) = op
                        .all_inputs()
                        .filter_map(|v| written[v.index()].map(|w| (v, w)))
                        .find(|&(_, w)| w > p)
                    {
                        return Err(StageError::Backwards {
                            op: i,
                            ty: op.ty.to_string(),
                            stage: p,
                            var: program.var(v).name.to_string(),
                            from,
                        });
                    }
                    Some(p)
                }
                // An op reading no computed tensor stays with the op before it.
                None => read.or_else(|| Some(i.checked_sub(1).and_then(|j| stage[j]).unwrap_or(0))),
            }
        } else {
            // A backward op of no forward op (a sum of gradient contributions) runs on the
            // earliest stage it reads from: gradients only move to earlier stages.
            let earliest = op.all_inputs().filter_map(|v| written[v.index()]).min();
            fwd.and_then(|f| stage[f]).or(earliest)
        };
        stage[i] = s;
        if let Some(s) = s {
            for v in op.all_outputs() {
                written[v.index()] = Some(s);
            }
        }
    }
    fill_from_consumers(program, &mut stage);
    Ok(stage)
}

/// The virtual stage of every op of a forward `plan` (its `stage` statements, or the even
/// split), before completion: what [`super::tied`] needs to find the parameters read on
/// several stages.
pub fn forward_stages(plan: &Plan, count: usize) -> Result<Vec<usize>, StageError> {
    let (placed, raised) = placements(plan, count)?;
    let ops = plan.program.ops().len();
    let stage = op_stages(&plan.program, &placed, &raised, &HashMap::default(), ops)?;
    Ok(stage.into_iter().map(|s| s.unwrap_or(0)).collect())
}

/// Checks a plan's schedule options against its stages: `chunks` only with `vpp` (which
/// needs 2 or more), and micro-batches: at least the stages for 1F1B, VPP and ZB-H1, and a
/// multiple of them for VPP (its rounds of `pp` micro-batches).
pub fn check_schedule(stages: &Stages, o: &crate::plan::PlanOptions) -> Result<(), StageError> {
    use crate::plan::ScheduleKind;
    let (p, m, v) = (stages.stages, o.micro_batches, o.chunks);
    let name = o.schedule.name();
    let problem = match o.schedule {
        ScheduleKind::Vpp if v < 2 => {
            Some("vpp needs 2 or more chunks per stage (--chunks)".into())
        }
        ScheduleKind::FThenB
        | ScheduleKind::OneFOneB
        | ScheduleKind::ZbH1
        | ScheduleKind::ZbH1Paper
            if v > 1 =>
        {
            Some(format!(
                "chunks={v} needs the vpp schedule (interleaved 1F1B), not {name}"
            ))
        }
        ScheduleKind::Vpp if m % p != 0 => Some(format!(
            "vpp runs micro-batches in rounds of the {p} stages: {m} micro-batches is not a \
             multiple of {p}"
        )),
        ScheduleKind::OneFOneB
        | ScheduleKind::Vpp
        | ScheduleKind::ZbH1
        | ScheduleKind::ZbH1Paper
            if m < p =>
        {
            Some(format!(
                "{name} needs at least as many micro-batches as stages ({m} < {p}); use more \
             micro-batches or fthenb"
            ))
        }
        ScheduleKind::FThenB
        | ScheduleKind::OneFOneB
        | ScheduleKind::Vpp
        | ScheduleKind::ZbH1
        | ScheduleKind::ZbH1Paper => None,
    };
    match problem {
        Some(p) => Err(StageError::Schedule(p)),
        None => Ok(()),
    }
}

/// Without `stage` statements, a plan whose mesh has a `pp` axis is split evenly
/// (`plan::split_evenly`): the split becomes the plan's statements, so it prints.
pub fn split_if_unplaced(plan: &mut Plan) -> Result<(), StageError> {
    let Some(mesh) = plan.mesh() else {
        return Ok(());
    };
    let stages = Stages::of(mesh, plan.options.chunks);
    if plan.stages.is_empty() && stages.is_pipelined() {
        plan.stages = crate::plan::split_evenly(&plan.program, stages.virtual_count())
            .map_err(StageError::Split)?;
    }
    Ok(())
}

/// The plan's `stage` statements: op index → stage, and variable index → stage.
type Placements = (HashMap<usize, usize>, HashMap<usize, usize>);

fn placements(plan: &Plan, count: usize) -> Result<Placements, StageError> {
    let mut placed: HashMap<usize, usize> = HashMap::default();
    let mut raised: HashMap<usize, usize> = HashMap::default();
    for s in &plan.stages {
        if s.stage >= count {
            return Err(StageError::NoSuchStage {
                stage: s.stage,
                count,
            });
        }
        match s.target {
            StageTarget::Ops { first, last } => {
                for i in first.index()..=last.index() {
                    placed.insert(i, s.stage);
                }
            }
            StageTarget::Var(v) => {
                raised.insert(v.index(), s.stage);
            }
        }
    }
    Ok((placed, raised))
}

/// Ops that read no computed tensor take the stage of their first consumer (stage 0 when
/// nothing consumes them).
fn fill_from_consumers(program: &Program, stage: &mut [Option<usize>]) {
    let ops = program.ops();
    for i in (0..ops.len()).rev() {
        if stage[i].is_some() {
            continue;
        }
        let outs: Vec<_> = ops[i].all_outputs().collect();
        let consumer = (i + 1..ops.len())
            .find(|&j| ops[j].all_inputs().any(|v| outs.contains(&v)))
            .and_then(|j| stage[j]);
        stage[i] = Some(consumer.unwrap_or(0));
    }
}

/// A parameter read by forward ops on two stages is an error.
fn check_parameters(
    full: &DistProgram,
    stage: &[Option<usize>],
    first_backward: usize,
) -> Result<(), StageError> {
    let mut home: HashMap<usize, usize> = HashMap::default();
    for (i, op) in full.program.ops().iter().enumerate().take(first_backward) {
        let s = stage[i].unwrap_or(0);
        for v in op.all_inputs() {
            if full.program.var(v).kind != VarKind::Parameter {
                continue;
            }
            let first = *home.entry(v.index()).or_insert(s);
            if first != s {
                return Err(StageError::SharedParameter {
                    param: full.program.var(v).name.to_string(),
                    first: first.min(s),
                    second: first.max(s),
                });
            }
        }
    }
    Ok(())
}

fn set_stage(full: &mut DistProgram, stages: &Stages, op: usize, k: usize) {
    let (physical, chunk) = stages.split(k);
    if let Some(attr) = full.ops.get_mut(op) {
        attr.mesh = stage_mesh_id(stages, physical);
        attr.chunk_id = chunk;
    }
}

/// Stages for the ops the optimizer pass appended (from `first`): an op reading one stage's
/// tensors (an update reads its gradient) runs there; one reading several stages' or none
/// (besides sources and every-stage results) runs on every stage ([`ALL_STAGES`]). An
/// every-stage op writing a stage's tensor in place (AMP's unscale of each gradient) leaves
/// it on that stage.
pub fn assign_optimizer_stages(full: &mut DistProgram, stages: &Stages, first: usize) {
    if !stages.is_pipelined() {
        return;
    }
    let mut written: Vec<Option<usize>> = vec![None; full.program.vars().len()];
    for i in 0..full.program.ops().len() {
        let op = full.program.op(OpId(i as u32));
        // A tied parameter's sum runs on every stage holding a copy, and each copy's
        // gradient stays on its stage.
        let tied = op.purpose() == Some(crate::ir::Purpose::TiedParameter);
        let s = if i < first {
            virtual_stage(stages, &full.ops[i])
        } else if tied {
            ALL_STAGES
        } else {
            let mut read: Vec<usize> = op
                .all_inputs()
                .filter_map(|v| written[v.index()])
                .filter(|&s| s != ALL_STAGES)
                .collect();
            read.sort_unstable();
            read.dedup();
            // AMP's check and update and the global norm's sum span every stage even when
            // the gradients they read all live on one: every stage takes part in their
            // all-reduces.
            let spans = matches!(
                op.ty,
                OpType::CheckFiniteAndUnscale | OpType::UpdateLossScaling
            ) || op.ty == OpType::Sum;
            match read[..] {
                [one] if !spans => one,
                [_] | [] | [_, _, ..] => ALL_STAGES,
            }
        };
        let inputs: Vec<_> = op.all_inputs().collect();
        for v in op.all_outputs().filter(|_| !tied) {
            if s != ALL_STAGES || !inputs.contains(&v) {
                written[v.index()] = Some(s);
            }
        }
        if i >= first {
            match s {
                ALL_STAGES => {
                    if let Some(attr) = full.ops.get_mut(i) {
                        attr.mesh = MeshId::JOB;
                        attr.chunk_id = 0;
                    }
                }
                k => set_stage(full, stages, i, k),
            }
        }
    }
}
