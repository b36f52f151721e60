//! The partitioner (Paddle's `Partitioner` + `Resharder`): one program per rank, with local
//! shapes, each op rewritten by its distributed implementation, reshards where a variable's
//! layout differs from what its consumer wants, and gradient synchronisation.

pub mod bucket;
pub mod dist_ops;
pub mod layouts;
pub mod lower;
mod megatron_sums;
pub mod p2p;
pub mod rank;
pub mod reshard;
mod ring;
pub mod stamp;
pub mod sync;
pub mod zero;

use crate::dist::MeshAxis;
use crate::dist::{OperatorDistAttr, TensorDistAttr};
use crate::ir::{verify_program, Attr, Op, OpId, OpRole, OpType, Program, VarId};
use crate::passes::dist_program::DistProgram;
use dist_ops::find_impl;
use lower::{after, lower};
use megatron_sums::{defers_its_sum, sum_partials};
use rank::{Groups, PartitionError, RankBuilder};
use reshard::reshard;
use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;
use sync::{global_norm_sum, sync_amp_flag, GradSync};
use zero::{RankZero, ZeroLayout, ZeroStage};

/// One rank's program and where its variables came from.
#[derive(Clone, Debug)]
pub struct RankProgram {
    pub rank: u32,
    pub program: Program,
    /// The layout of each local variable's contents at the end of the step (shared by the
    /// ranks stamped from one template; the serial variables' by every rank).
    pub attrs: Arc<layouts::Layouts>,
    /// The serial variable each local variable holds a piece of (shared likewise).
    pub origin: Arc<Vec<VarId>>,
    /// Each op's model chunk (all 0 without virtual pipeline stages; shared likewise).
    pub op_chunks: Arc<Vec<u16>>,
}

/// Every rank's program and the job's communication groups.
#[derive(Clone, Debug)]
pub struct Partitioned {
    pub ranks: Vec<RankProgram>,
    pub groups: Groups,
    /// The ZeRO shards (empty without ZeRO): where a rank keeps its piece of a sharded
    /// parameter, gradient and optimizer state.
    pub zero: Arc<ZeroLayout>,
}

/// Options of the partitioner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionOptions {
    /// Scale data-parallel gradients by 1/|group| after the all-reduce (Paddle's default).
    pub scale_gradients: bool,
    /// Partition only these ranks (all when `None`): the playground shows one rank at a time.
    pub ranks: Option<Vec<u32>>,
    /// Megatron's backward: a column-parallel input gradient that is summed with others
    /// stays partial through the sum, which is all-reduced once (2 tensor-parallel
    /// all-reduces per transformer layer backward instead of Paddle's 4). Off by default to
    /// match Paddle's planner op for op.
    pub defer_partial_sums: bool,
    /// Build and verify every rank's program on its own instead of stamping the others from
    /// the first (see `stamp.rs`): slower, and the reference the stamped programs are
    /// tested against.
    pub build_every_rank: bool,
    /// ZeRO / sharding stage (0: off; see `zero.rs`).
    pub zero: ZeroStage,
    /// Fuse data-parallel gradient all-reduces into buckets of at least this many bytes
    /// (0: one all-reduce per gradient; see `bucket.rs`).
    pub bucket_bytes: u64,
    /// Micro-batches per step: the rank programs are one micro-batch's, and the loss
    /// gradient's seed is 1/M so the accumulated gradients are the full batch's (Megatron
    /// divides each micro-batch's loss by their number the same way).
    pub micro_batches: usize,
    /// Verify every program built: the pipeline's after each stage (`run_passes`) and
    /// each rank's. These are the planner's checks of its own output, never of the user's
    /// plan (its errors come from completion). On by default; the auto-planner turns them
    /// off outside debug builds, where they are about a sixth of its time (its plans are
    /// generated, and the tests, built with debug assertions, search with them on).
    pub verify: bool,
    /// Build the stages' template programs on all cores (natively, with canonical ring
    /// ids). On by default; off where other work already fills the cores (the
    /// auto-planner's screen).
    pub parallel_stages: bool,
}

impl Default for PartitionOptions {
    fn default() -> Self {
        PartitionOptions {
            scale_gradients: true,
            ranks: None,
            defer_partial_sums: false,
            build_every_rank: false,
            zero: 0,
            bucket_bytes: 0,
            micro_batches: 1,
            verify: true,
            parallel_stages: true,
        }
    }
}

/// What the partitioner reads of a planned program (all of it a `Passes` holds).
#[derive(Clone, Copy)]
pub struct PartitionInput<'a> {
    /// Forward, backward and optimizer, completed.
    pub dp: &'a DistProgram,
    /// Each grad op's forward op.
    pub forward_of: &'a HashMap<OpId, OpId>,
    /// (parameter, its gradient): the gradients to synchronise.
    pub param_grads: &'a [(VarId, VarId)],
    /// The mesh axes the loss is averaged over (its AVG-partial axes).
    pub loss_avg_axes: &'a [MeshAxis],
    /// The pipeline stages.
    pub stages: &'a crate::dist::Stages,
}

/// What every rank's build shares.
struct RankInputs<'a> {
    dp: &'a DistProgram,
    forward_of: &'a HashMap<OpId, OpId>,
    loss_avg_axes: &'a [MeshAxis],
    marks: &'a Marks,
    opts: &'a PartitionOptions,
}

/// Partitions the program for every rank of its mesh (or `opts.ranks`).
pub fn partition(
    input: &PartitionInput,
    opts: &PartitionOptions,
) -> Result<Partitioned, PartitionError> {
    let PartitionInput {
        dp,
        forward_of,
        param_grads,
        loss_avg_axes,
        stages,
    } = *input;
    let mut locals = rank::local_vars(&dp.mesh, &dp.program, &dp.tensors, &[])?;
    let uneven = dp.uneven_var();
    let zero = Arc::new(ZeroLayout::plan(dp, &mut locals, opts.zero));
    let mut marks = Marks {
        param_grad: vec![false; dp.program.vars().len()],
        summed: vec![false; dp.program.vars().len()],
        locals: Arc::new(locals),
        tensors: Arc::new(dp.tensors.clone()),
        uneven: uneven.is_some(),
        zero: Arc::clone(&zero),
        stages: stages
            .is_pipelined()
            .then(|| p2p::StagePlan::new(dp, stages)),
    };
    for (_, g) in param_grads {
        marks.param_grad[g.index()] = true;
    }
    for op in dp.program.ops() {
        if op.ty == OpType::Sum && op.role == OpRole::Backward {
            for x in op.input("X") {
                marks.summed[x.index()] = true;
            }
        }
    }
    let mut groups = Groups::new(&dp.mesh);
    let wanted: Vec<u32> = match &opts.ranks {
        Some(only) => dp
            .mesh
            .process_ids()
            .iter()
            .copied()
            .filter(|r| only.contains(r))
            .collect(),
        None => dp.mesh.process_ids().to_vec(),
    };
    let inputs = RankInputs {
        dp,
        forward_of,
        loss_avg_axes,
        marks: &marks,
        opts,
    };
    let rank_program = |rank: u32, registry: &mut Groups| partition_rank(&inputs, rank, registry);
    let ranks = if opts.build_every_rank {
        build_each(&wanted, &mut groups, &|r, g| {
            rank_program(r, g).map(|p| p.0)
        })?
    } else {
        let parallel = opts.parallel_stages;
        by_stage(dp, &wanted, stages, &mut groups, parallel, &rank_program)?
    };
    Ok(Partitioned {
        ranks,
        groups,
        zero,
    })
}

/// A rank's program with the recipes that stamp the other ranks of its stage from it, or
/// `None` when a split is uneven: the shapes then depend on the rank, and each rank is
/// built.
type Template = (RankProgram, Option<stamp::Recipes>);

/// Builds one rank's program (the template of its stage) with its recipes.
type RankBuild<'a> = dyn Fn(u32, &mut Groups) -> Result<Template, PartitionError> + Sync + 'a;

/// Ranks of one stage run one program up to their rank-dependent attributes: the first of
/// each stage is built, the others stamped from it. Returned in `wanted`'s order.
fn by_stage(
    dp: &DistProgram,
    wanted: &[u32],
    stages: &crate::dist::Stages,
    groups: &mut Groups,
    parallel: bool,
    rank_program: &RankBuild<'_>,
) -> Result<Vec<RankProgram>, PartitionError> {
    let mut by_stage: Vec<Vec<u32>> = Vec::new();
    let mut stage_of: Vec<usize> = Vec::new();
    for &r in wanted {
        let s = stages.stage_of(&dp.mesh, r);
        match stage_of.iter().position(|&t| t == s) {
            Some(i) => by_stage[i].push(r),
            None => {
                stage_of.push(s);
                by_stage.push(vec![r]);
            }
        }
    }
    let firsts: Vec<u32> = by_stage.iter().filter_map(|m| m.first().copied()).collect();
    let mut all = Vec::with_capacity(wanted.len());
    for (members, (template, recipes)) in
        by_stage
            .iter()
            .zip(templates(&firsts, groups, parallel, rank_program)?)
    {
        let rest = members.get(1..).unwrap_or_default();
        let stamped = match &recipes {
            Some(recipes) => build_each(rest, groups, &|rank, registry| {
                Ok(stamp::stamp(
                    &template,
                    recipes,
                    &mut stamp::RankCtx::new(rank, &dp.mesh, registry),
                ))
            })?,
            None => build_each(rest, groups, &|r, g| rank_program(r, g).map(|p| p.0))?,
        };
        all.push(template);
        all.extend(stamped);
    }
    let order: HashMap<u32, usize> = wanted.iter().enumerate().map(|(i, &r)| (r, i)).collect();
    crate::sort::sort_by_key(&mut all, |r| {
        order.get(&r.rank).copied().unwrap_or(usize::MAX)
    });
    Ok(all)
}

/// The template of each stage from its first rank, in stage order. With canonical ring ids
/// they are independent: each gets its own registry, merged in stage order, and with
/// `parallel` they are built on all cores.
fn templates(
    firsts: &[u32],
    groups: &mut Groups,
    parallel: bool,
    rank_program: &RankBuild<'_>,
) -> Result<Vec<Template>, PartitionError> {
    let mut out = Vec::with_capacity(firsts.len());
    if !groups.is_complete() {
        for &first in firsts {
            out.push(rank_program(first, groups)?);
        }
        return Ok(out);
    }
    let shared: &Groups = groups;
    let one = |rank: u32| {
        let mut local = shared.fresh();
        rank_program(rank, &mut local).map(|t| (t, local))
    };
    let built: Vec<_> = if parallel {
        run_ranks(firsts, &one)
    } else {
        firsts.iter().map(|&r| one(r)).collect()
    };
    for b in built {
        let (template, local) = b?;
        groups.merge(&local);
        out.push(template);
    }
    Ok(out)
}

/// Builds every rank's program with `build`. With canonical ring ids the ranks are
/// independent: each gets its own registry, merged in rank order, and they run on all
/// cores; otherwise groups without a canonical id are numbered in rank order in `groups`.
fn build_each(
    wanted: &[u32],
    groups: &mut Groups,
    build: &(dyn Fn(u32, &mut Groups) -> Result<RankProgram, PartitionError> + Sync),
) -> Result<Vec<RankProgram>, PartitionError> {
    let mut ranks = Vec::with_capacity(wanted.len());
    if groups.is_complete() {
        // Ranks are independent: each gets its own registry sharing the canonical ids, merged
        // in rank order.
        let shared: &Groups = groups;
        let one = |rank: u32| {
            let mut local = shared.fresh();
            build(rank, &mut local).map(|r| (r, local))
        };
        for result in run_ranks(wanted, &one) {
            let (r, local) = result?;
            groups.merge(&local);
            ranks.push(r);
        }
    } else {
        for &rank in wanted {
            ranks.push(build(rank, groups)?);
        }
    }
    Ok(ranks)
}

/// Runs `f` for every rank, on all cores natively, in order in the browser.
fn run_ranks<T: Send>(ranks: &[u32], f: &(dyn Fn(u32) -> T + Sync)) -> Vec<T> {
    #[cfg(not(target_arch = "wasm32"))]
    {
        let workers = crate::cores::cores().min(ranks.len()).max(1);
        if workers > 1 {
            let chunk = ranks.len().div_ceil(workers);
            return std::thread::scope(|s| {
                let handles: Vec<_> = ranks
                    .chunks(chunk)
                    .map(|c| s.spawn(move || c.iter().map(|&r| f(r)).collect::<Vec<T>>()))
                    .collect();
                // A worker that panicked is a planner bug: re-raise it rather than lose ranks.
                handles
                    .into_iter()
                    .flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                    .collect()
            });
        }
    }
    ranks.iter().map(|&r| f(r)).collect()
}

fn partition_rank(
    inputs: &RankInputs,
    rank: u32,
    groups: &mut Groups,
) -> Result<Template, PartitionError> {
    let RankInputs {
        dp,
        forward_of,
        loss_avg_axes,
        marks,
        opts,
    } = *inputs;
    let locals = rank_locals(dp, marks, rank)?;
    let mut b = RankBuilder::new(rank, &dp.mesh, &dp.program, &marks.tensors, &locals, groups);
    zero::declare_shards(&mut b, &marks.zero);
    let mut rz = RankZero::new(&marks.zero);
    let mut sync = GradSync {
        is_param_grad: &marks.param_grad,
        loss_avg_axes,
        scale: opts.scale_gradients,
        zero: &marks.zero,
        buckets: bucket::Buckets::new(opts.bucket_bytes),
    };
    let mut pipe = marks
        .stages
        .as_ref()
        .map(|plan| p2p::RankPipe::new(plan, plan.stages.stage_of(&dp.mesh, rank)));
    let pp = marks
        .stages
        .as_ref()
        .and_then(|s| s.stages.axis.filter(|_| s.stages.stages > 1));
    let mut seeded = false;
    let ops = dp.program.ops();
    for (i, op) in visits(dp, marks, rank).filter_map(|i| Some((i, ops.get(i)?))) {
        let mut attr = std::borrow::Cow::Borrowed(&dp.ops[i]);
        b.role = op.role;
        let mut local = Arc::clone(op);
        if let Some(pipe) = &mut pipe {
            if !pipe.before(&mut b, dp, i, &mut local, &mut attr)? {
                continue;
            }
        }
        let attr: &OperatorDistAttr = &attr;
        if op.role == OpRole::Optimize {
            // The optimizer reads the gradients: every bucket is synchronised before it.
            sync.buckets.close_all(&mut b);
        }
        if op.purpose() == Some(crate::ir::Purpose::TiedParameter) {
            if let Some(plan) = &marks.stages {
                sync::tied_sum(&mut b, &local, op, plan, &marks.zero)?;
            }
            continue;
        }
        if op.ty == OpType::FillConstant && op.role == OpRole::Backward && !seeded {
            seeded = true;
            seed_micro_batch(&mut local, opts.micro_batches);
        }
        if special_sum(&mut b, &local, attr, marks, opts, pp)? {
            continue;
        }
        rz.before(&mut b, &mut local)?;
        reshard_inputs(&mut b, &mut local, attr, &rz)?;
        let fwd = forward_of
            .get(&OpId(i as u32))
            .map(|f| (dp.program.op(*f), &dp.ops[f.index()]));
        let imp = find_impl(op, attr, fwd, &dp.program);
        lower(&mut b, local, attr, imp, &dp.tensors)?;
        sync.after_op(&mut b, op)?;
        if !defers_its_sum(opts, imp, op, marks) {
            after(&mut b, op, imp);
        }
        sync_amp_flag(&mut b, op);
        rz.after(&mut b, op);
    }
    sync.buckets.close_all(&mut b);
    b.uneven |= marks.uneven;
    finish(b, rank, opts.verify)
}

/// `rank`'s local variables: the shared table, or under an uneven split the table (with
/// ZeRO's changes and shards) with this rank's shapes.
fn rank_locals(
    dp: &DistProgram,
    marks: &Marks,
    rank: u32,
) -> Result<Arc<Vec<crate::ir::Var>>, PartitionError> {
    if !marks.uneven {
        return Ok(Arc::clone(&marks.locals));
    }
    let coords = dp.mesh.coords_of(rank).unwrap_or_default();
    let mut mine = marks.locals.to_vec();
    let shapes = rank::local_vars(&dp.mesh, &dp.program, &dp.tensors, &coords)?;
    for (var, shaped) in mine.iter_mut().zip(shapes) {
        var.ty = shaped.ty;
    }
    Ok(Arc::new(mine))
}

/// The ops `rank` visits, by index: a pipeline stage's ranks only those that touch their
/// stage (`StagePlan::visits`); without stages, every op.
fn visits<'m>(
    dp: &DistProgram,
    marks: &'m Marks,
    rank: u32,
) -> Box<dyn Iterator<Item = usize> + 'm> {
    match marks
        .stages
        .as_ref()
        .and_then(|plan| plan.visits.get(plan.stages.stage_of(&dp.mesh, rank)))
    {
        Some(visits) => Box::new(visits.iter().copied()),
        None => Box::new(0..dp.program.ops().len()),
    }
}

/// The global norm's sum of squares, or (Megatron sums) a backward sum of partial values:
/// emitted here; true when `op` was one.
fn special_sum(
    b: &mut RankBuilder,
    op: &Arc<Op>,
    attr: &OperatorDistAttr,
    marks: &Marks,
    opts: &PartitionOptions,
    pp: Option<MeshAxis>,
) -> Result<bool, PartitionError> {
    if op.ty != OpType::Sum {
        return Ok(false);
    }
    if op.role == OpRole::Optimize {
        return global_norm_sum(b, op, pp);
    }
    if opts.defer_partial_sums && op.role == OpRole::Backward {
        return sum_partials(b, op, attr, marks);
    }
    Ok(false)
}

/// The loss gradient's seed (the first backward `fill_constant`) is 1/M with M
/// micro-batches: each micro-batch's gradients are then 1/M of its mean loss's, and their
/// sum is the full batch's.
fn seed_micro_batch(op: &mut Arc<Op>, micro_batches: usize) {
    if micro_batches > 1 {
        let value = op.attr_float("value", 1.0) / micro_batches as f64;
        Arc::make_mut(op)
            .attrs
            .insert("value".into(), Attr::Float(value));
    }
}

/// The rank's program, verified, with its recipes.
fn finish(b: RankBuilder, rank: u32, verify: bool) -> Result<Template, PartitionError> {
    let issues = if verify {
        verify_program(&b.program)
    } else {
        Vec::new()
    };
    if let Some(first) = issues.first() {
        return Err(PartitionError::RankVerify {
            rank,
            first: Box::new(first.clone()),
            count: issues.len(),
        });
    }
    Ok((
        RankProgram {
            rank,
            program: b.program,
            attrs: Arc::new(b.cur),
            origin: Arc::new(b.origin),
            op_chunks: Arc::new(b.op_chunks),
        },
        (!b.uneven).then_some(b.recipes),
    ))
}

/// Reshards each input of `local` to the layout `attr` wants (ZeRO's shards are local as
/// they are).
fn reshard_inputs(
    b: &mut RankBuilder,
    local: &mut Arc<Op>,
    attr: &OperatorDistAttr,
    rz: &RankZero,
) -> Result<(), PartitionError> {
    for k in 0..local.inputs.len() {
        for j in 0..local.inputs[k].len() {
            let v = local.inputs[k][j];
            if rz.is_shard(v) {
                continue;
            }
            if let Some(wanted) = attr.inputs.get(k).and_then(|s| s.get(j)) {
                let r = reshard(b, v, wanted)?;
                if r != v {
                    Arc::make_mut(local).inputs[k][j] = r;
                }
            }
        }
    }
    Ok(())
}

/// Per serial variable: is it a parameter gradient (synchronised), is it summed in the
/// backward (a partial contribution may wait for the sum), its local declaration.
struct Marks {
    param_grad: Vec<bool>,
    summed: Vec<bool>,
    /// The serial variables with their local shapes (the same on every rank), then the
    /// ZeRO shard variables.
    locals: Arc<Vec<crate::ir::Var>>,
    /// The serial variables' completed layouts, which every rank starts from.
    tensors: Arc<Vec<TensorDistAttr>>,
    /// Whether a serial variable is split unevenly: its local shape then depends on the
    /// rank, and each rank declares its own.
    uneven: bool,
    zero: Arc<ZeroLayout>,
    /// Each op's and variable's pipeline stage (`None` without a pipeline).
    stages: Option<p2p::StagePlan>,
}
