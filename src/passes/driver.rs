//! The pipeline, in the order of `../shared/DESIGN.md`, with a verifier run after every
//! stage: complete forward → backward → complete backward → optimizer (+ AMP, clipping)
//! → partition (+ reshard, gradient synchronisation) → ledger. Every stage's result is
//! kept for the UI, the goldens and the command line.

use super::backward::{append_backward, find_loss, Backward, BackwardError};
use super::complete::{complete, CompleteError, Completed};
use super::complete_backward::complete_backward;
use super::dist_program::DistProgram;
use super::ledger::{ledger, Entry};
use super::optimizer::{append_optimizer, OptimizerOptions};
use super::partition::rank::PartitionError;
use super::partition::{partition, PartitionInput, PartitionOptions, Partitioned};
use crate::dist::MeshAxis;
use crate::dist::{ReduceType, TensorDistAttr};
use crate::ir::{verify_program, Op, OpRole, OpType, ProgramError, TensorType, VarKind};
use crate::plan::Plan;

/// What the pipeline builds.
#[derive(Clone, Debug, Default)]
pub struct PassOptions {
    pub optimizer: OptimizerOptions,
    pub partition: PartitionOptions,
    /// Activation recomputation (see `recompute.rs`).
    pub recompute: crate::plan::Recompute,
}

impl PassOptions {
    /// The options a plan's `options` statement sets (the partitioner builds every rank).
    pub fn from_plan(o: &crate::plan::PlanOptions) -> PassOptions {
        PassOptions {
            optimizer: OptimizerOptions {
                optimizer: super::optimizer::Optimizer::of_kind(o.optimizer),
                amp: o.amp,
                clip_norm: o.clip_norm,
            },
            partition: PartitionOptions {
                scale_gradients: !o.no_grad_scale,
                defer_partial_sums: o.megatron_sums,
                zero: o.zero,
                bucket_bytes: o.bucket_bytes(),
                micro_batches: o.micro_batches,
                ..PartitionOptions::default()
            },
            recompute: o.recompute,
        }
    }
}

/// Why the pipeline stopped.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PassError {
    #[error("{0}")]
    Complete(#[from] CompleteError),
    #[error("backward: {0}")]
    Backward(#[from] BackwardError),
    #[error("{stage}: the program does not verify: {first} ({count} problems)")]
    Verify {
        stage: &'static str,
        first: crate::ir::VerifyError,
        count: usize,
    },
    #[error("partition: {0}")]
    Partition(#[from] PartitionError),
    #[error("{0}")]
    Program(#[from] ProgramError),
    #[error("pipeline stages: {0}")]
    Stages(#[from] super::pipeline::stages::StageError),
}

impl crate::plan::Located for PassError {
    fn subject(&self) -> Option<crate::plan::PlanSubject> {
        match self {
            PassError::Complete(e) => e.subject(),
            PassError::Backward(e) => e.subject(),
            // A later stage's program has ops of its own; its variables keep their names.
            PassError::Verify { first, .. } => match &first.subject {
                crate::ir::Subject::Var(name) => Some(crate::plan::PlanSubject::Var(name.clone())),
                crate::ir::Subject::Op(_) => None,
            },
            PassError::Partition(e) => e.subject(),
            PassError::Program(e) => e.subject(),
            PassError::Stages(e) => e.subject(),
        }
    }
}

/// Every stage's result.
#[derive(Clone, Debug)]
pub struct Passes {
    /// The forward plan that was completed (with AMP's loss scaling op when AMP is on).
    pub plan: Plan,
    pub completed: Completed,
    pub backward: Backward,
    /// Forward + backward + optimizer with dist attrs.
    pub full: DistProgram,
    pub partitioned: Partitioned,
    pub ledger: Vec<Entry>,
    /// The mesh axes the loss is averaged over (kept to re-partition).
    pub loss_avg_axes: Vec<MeshAxis>,
    /// The pipeline stages (one stage, one chunk without a `pp` axis); each op's stage is in
    /// its dist attr (`passes::pipeline::stages`).
    pub stages: crate::dist::Stages,
    /// Parameters read on several stages and their copies (`passes::pipeline::tied`).
    pub ties: Vec<super::pipeline::tied::Tie>,
}

fn verify(
    stage: &'static str,
    program: &crate::ir::Program,
    opts: &PassOptions,
) -> Result<(), PassError> {
    if !opts.partition.verify {
        return Ok(());
    }
    let issues = verify_program(program);
    match issues.first() {
        None => Ok(()),
        Some(first) => Err(PassError::Verify {
            stage,
            first: first.clone(),
            count: issues.len(),
        }),
    }
}

/// AMP scales the loss before differentiating it: `loss@SCALED = loss * loss_scaling_0`.
fn scale_loss(plan: &mut Plan) -> Result<(), PassError> {
    let loss = find_loss(&plan.program)?;
    let loss_var = plan.program.var(loss).clone();
    let scale = plan.program.declare(
        "loss_scaling_0",
        TensorType::new(loss_var.ty.dtype, vec![]),
        VarKind::OptimizerState,
    )?;
    let scaled = plan.program.declare(
        &format!("{}@SCALED", loss_var.name),
        loss_var.ty.clone(),
        VarKind::Activation,
    )?;
    for op in plan.program.ops_mut_where(|o| o.role == OpRole::Loss) {
        op.role = OpRole::Forward;
    }
    let mut mul = Op::new(OpType::ElementwiseMul);
    mul.inputs = crate::slots![[loss], [scale]];
    mul.outputs = crate::slots![[scaled]];
    mul.role = OpRole::Loss;
    plan.program.push_op(mul);
    Ok(())
}

/// Runs every stage.
pub fn run_passes(plan: &Plan, opts: &PassOptions) -> Result<Passes, PassError> {
    let mut plan = plan.clone();
    super::pipeline::stages::split_if_unplaced(&mut plan)?;
    if let Some(mesh) = plan.mesh() {
        let stages = crate::dist::Stages::of(mesh, plan.options.chunks);
        super::pipeline::stages::check_schedule(&stages, &plan.options)?;
    }
    let ties = super::pipeline::tied::tie_parameters(&mut plan)?;
    if opts.optimizer.amp {
        scale_loss(&mut plan)?;
    }
    let completed = complete(&plan)?;
    let backward = append_backward(&plan.program)?;
    verify("backward", &backward.program, opts)?;
    let mut full = complete_backward(&backward, &completed);
    let stages = super::pipeline::stages::assign_stages(
        &mut full,
        &plan,
        &backward.forward_of,
        backward.first_backward_op,
    )?;
    let backward = super::recompute::apply_recompute(&mut full, backward, opts.recompute)?;
    verify("recompute", &full.program, opts)?;
    let before_optimizer = full.program.ops().len();
    append_optimizer(&mut full, &backward.param_grads, &ties, &opts.optimizer)?;
    super::pipeline::stages::assign_optimizer_stages(&mut full, &stages, before_optimizer);
    verify("optimizer", &full.program, opts)?;
    if opts.partition.verify {
        // Without self-checks (the auto-planner's own plans), an uneven layout still fails,
        // as the partition's error (`rank::local_vars`).
        check_layouts(&full)?;
    }
    let loss_attr = &full.tensors[backward.loss.index()];
    let loss_avg_axes: Vec<MeshAxis> = loss_attr
        .partial
        .iter()
        .filter(|p| p.1 == ReduceType::Avg)
        .map(|p| p.0)
        .collect();
    let partitioned = partition(
        &partition_input(&full, &backward, &loss_avg_axes, &stages),
        &opts.partition,
    )?;
    let ledger = ledger(&partitioned);
    Ok(Passes {
        plan,
        completed,
        backward,
        full,
        partitioned,
        ledger,
        loss_avg_axes,
        stages,
        ties,
    })
}

/// What the partitioner reads of a planned program.
fn partition_input<'a>(
    full: &'a DistProgram,
    backward: &'a Backward,
    loss_avg_axes: &'a [MeshAxis],
    stages: &'a crate::dist::Stages,
) -> PartitionInput<'a> {
    PartitionInput {
        dp: full,
        forward_of: &backward.forward_of,
        param_grads: &backward.param_grads,
        loss_avg_axes,
        stages,
    }
}

impl Passes {
    /// Micro-batches per step (the plan's options).
    pub fn micro_batches(&self) -> usize {
        self.plan.options.micro_batches.max(1)
    }

    /// Whether a step runs as jobs (pipeline stages, or several micro-batches).
    pub fn is_pipelined(&self) -> bool {
        self.stages.is_pipelined() || self.micro_batches() > 1
    }

    /// The plan's schedule.
    pub fn schedule(&self) -> super::pipeline::schedule::Schedule {
        super::pipeline::schedule::Schedule::of(self.plan.options.schedule, self.stages.chunks)
    }

    /// Forward + backward with dist attrs: a prefix of `full`, since the optimizer pass
    /// only appends (copied on demand, to keep re-planning free of a whole-program clone).
    pub fn backward_dist(&self) -> DistProgram {
        let p = &self.backward.program;
        self.full.prefix(p.vars().len(), p.ops().len())
    }

    /// Re-runs only the partition stage, e.g. for other ranks: the playground partitions
    /// the rank on screen and fills in the rest when asked (ring ids are canonical, so the
    /// programs are the same either way).
    pub fn repartition(&mut self, opts: &PartitionOptions) -> Result<(), PassError> {
        let input = partition_input(
            &self.full,
            &self.backward,
            &self.loss_avg_axes,
            &self.stages,
        );
        self.partitioned = partition(&input, opts)?;
        self.ledger = ledger(&self.partitioned);
        Ok(())
    }

    /// Whether every rank of the mesh has its program (needed to run the job).
    pub fn is_fully_partitioned(&self) -> bool {
        self.partitioned.ranks.len() == self.full.mesh.size()
    }

    /// Whether `rank`'s program was built.
    pub fn has_rank(&self, rank: u32) -> bool {
        self.partitioned.ranks.iter().any(|r| r.rank == rank)
    }
}

/// Every variable's layout must divide its shape (an annotation that cannot be partitioned
/// is reported naming the variable, not discovered as a panic later).
fn check_layouts(dp: &DistProgram) -> Result<(), PassError> {
    for (v, attr) in dp.program.vars().iter().zip(&dp.tensors) {
        let attr: &TensorDistAttr = attr;
        attr.validate(&v.name, &v.ty.shape, &dp.mesh)
            .map_err(|source| PartitionError::Layout {
                var: v.name.to_string(),
                source: Box::new(source),
            })?;
    }
    Ok(())
}
