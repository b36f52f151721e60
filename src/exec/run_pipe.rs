//! Pipelined runs (a `pp` axis, or several micro-batches): every rank runs its stage's job
//! list (`pipe.rs`), and the serial reference accumulates the same micro-batches' gradients
//! one after another before its one optimizer step.
//!
//! Data inputs are seeded (or fed) for the whole batch, `micro_batches ×` the program's
//! batch dim (dim 0 of every input and label: the plan's program is one micro-batch's, as
//! Paddle's static program is), and micro-batch `i` takes rows `i·b .. (i+1)·b`.

use super::comm::CoopComm;
use super::init::initial_value;
use super::interp::{Bounds, ExecError, Rank, Status};
use super::pipe::PipeRank;
use super::run::{
    gather_var, initial_values, placements, rank_envs, reported_loss, snapshot, Log, RunOptions,
};
use super::tensor::Tensor;
use crate::ir::{DType, OpRole, VarId, VarKind};
use crate::passes::driver::Passes;
use crate::passes::partition::p2p::StagePlan;
use crate::passes::pipeline::jobs::{cut, RankJobs};
use crate::passes::pipeline::schedule::job_list;
use std::collections::HashSet;
use std::sync::Arc;

fn micro_batches(p: &Passes) -> usize {
    p.micro_batches()
}

/// Each micro-batch's data inputs (global values), by variable.
fn micro_inputs(p: &Passes, opts: &RunOptions) -> Result<Vec<Vec<(VarId, Tensor)>>, ExecError> {
    let m = micro_batches(p);
    let program = &p.full.program;
    let mut out: Vec<Vec<(VarId, Tensor)>> = vec![Vec::new(); m];
    for (i, v) in program.vars().iter().enumerate() {
        if !matches!(v.kind, VarKind::Input | VarKind::Label) {
            continue;
        }
        let mut whole = v.clone();
        let Some(rows) = whole.ty.shape.first().copied() else {
            return Err(ExecError::Setup(format!(
                "input `{}` is a scalar: micro-batches split dim 0 of every input",
                v.name
            )));
        };
        whole.ty.shape[0] = rows * m;
        let value = match opts.feeds.get(&*v.name) {
            Some(t) => {
                if t.shape[..] != whole.ty.shape[..] {
                    return Err(ExecError::Setup(format!(
                        "the value given for `{}` is {:?}, but the whole batch of {m} \
                         micro-batches is {:?}",
                        v.name, t.shape, whole.ty.shape
                    )));
                }
                Tensor::float(v.ty.dtype, t.shape.clone(), t.to_f64())
            }
            None => initial_value(program, &whole, &opts.init)
                .ok_or_else(|| ExecError::Setup(format!("no value for `{}`", v.name)))?,
        };
        let per = usize::try_from(v.ty.numel()).unwrap_or(usize::MAX);
        for (mb, slot) in out.iter_mut().enumerate() {
            let piece = value
                .flat_range(mb * per, (mb + 1) * per)
                .reshaped(v.ty.shape.to_vec());
            slot.push((VarId(i as u32), piece));
        }
    }
    Ok(out)
}

/// The serial reference: each micro-batch's forward and backward in turn, the parameter
/// gradients averaged over them (with their error bounds), then the optimizer once.
pub fn run_serial_accumulated(p: &Passes, opts: &RunOptions) -> Result<Log, ExecError> {
    let program = &p.full.program;
    let m = micro_batches(p);
    let inputs = micro_inputs(p, opts)?;
    let env = initial_values(p, opts)?;
    let mut rank = Rank::new(0, program, env, None);
    if opts.record {
        rank.bounds = Some(Bounds::new(program.vars().len()));
    }
    let (fb, opt): (Vec<usize>, Vec<usize>) =
        (0..program.ops().len()).partition(|&i| program.ops()[i].role != OpRole::Optimize);
    let (fb, opt) = (Arc::new(fb), Arc::new(opt));
    let loss = reported_loss(p);
    let grads: Vec<VarId> = p.backward.param_grads.iter().map(|&(_, g)| g).collect();
    let comm = CoopComm::default();
    let mut log = Log::default();
    for step in 0..opts.steps {
        let mut sums: Vec<(Vec<f64>, f64)> = Vec::new();
        let mut loss_sum: (Vec<f64>, f64) = (Vec::new(), 0.0);
        for mb_inputs in &inputs {
            for (v, t) in mb_inputs {
                rank.env[v.index()] = Some(t.clone());
            }
            run_ops(&mut rank, &fb, &comm)?;
            for (k, v) in std::iter::once(loss)
                .chain(grads.iter().copied())
                .enumerate()
            {
                let (values, bound) = value_and_bound(&rank, v)?;
                let into = if k == 0 {
                    &mut loss_sum
                } else {
                    if sums.len() < k {
                        sums.push((vec![0.0; values.len()], 0.0));
                    }
                    &mut sums[k - 1]
                };
                into.0.resize(values.len(), 0.0);
                for (s, x) in into.0.iter_mut().zip(values) {
                    *s += x;
                }
                into.1 += bound;
            }
        }
        for (k, v) in std::iter::once(loss)
            .chain(grads.iter().copied())
            .enumerate()
        {
            let (sum, bound) = if k == 0 { &loss_sum } else { &sums[k - 1] };
            set_mean(&mut rank, v, sum, *bound, m)?;
        }
        run_ops(&mut rank, &opt, &comm)?;
        let (env, bounds) = (&rank.env, &rank.bounds);
        snapshot(&mut log, step, p, opts.record, &|v| {
            let t = env.get(v.index()).cloned().flatten().ok_or_else(|| {
                ExecError::Setup(format!("`{}` was not computed", program.var(v).name))
            })?;
            let b = bounds
                .as_ref()
                .and_then(|b| b.max.get(v.index()).copied())
                .unwrap_or(0.0);
            let e = bounds
                .as_ref()
                .and_then(|b| b.elems.get(v.index()).cloned().flatten());
            Ok((vec![t], b, e))
        })?;
    }
    Ok(log)
}

fn run_ops(rank: &mut Rank, ops: &Arc<Vec<usize>>, comm: &CoopComm) -> Result<(), ExecError> {
    rank.order = Some(Arc::clone(ops));
    rank.pc = 0;
    if rank.step(comm)? != Status::Done {
        return Err(ExecError::Setup(
            "the serial program waited on a collective".into(),
        ));
    }
    Ok(())
}

fn value_and_bound(rank: &Rank, v: VarId) -> Result<(Vec<f64>, f64), ExecError> {
    let t = rank
        .env
        .get(v.index())
        .and_then(|t| t.as_ref())
        .ok_or_else(|| {
            ExecError::Setup(format!("`{}` was not computed", rank.program.var(v).name))
        })?;
    let b = rank
        .bounds
        .as_ref()
        .and_then(|b| b.max.get(v.index()).copied())
        .unwrap_or(0.0);
    Ok((t.to_f64(), b))
}

/// Sets `v` to the mean `sum / m`. Its bound: the mean of the micro-batches' bounds, plus
/// the rounding of the M-term sums on both sides (M ulps of the largest magnitude) and of
/// the stored mean.
fn set_mean(rank: &mut Rank, v: VarId, sum: &[f64], bound: f64, m: usize) -> Result<(), ExecError> {
    let var = rank.program.var(v);
    let (dtype, shape) = (var.ty.dtype, var.ty.shape.to_vec());
    let mean: Vec<f64> = sum.iter().map(|s| s / m as f64).collect();
    let eps = match dtype {
        DType::F32 => f64::from(f32::EPSILON),
        DType::F64 | DType::I64 => f64::EPSILON,
    };
    let largest = sum.iter().fold(0.0f64, |a, s| a.max(s.abs()));
    let extra = (2.0 * m as f64 + 1.0) * eps * largest / m as f64;
    rank.env[v.index()] = Some(Tensor::float(dtype, shape, mean));
    if let Some(b) = &mut rank.bounds {
        if let Some(slot) = b.max.get_mut(v.index()) {
            *slot = bound / m as f64 + extra;
        }
        if let Some(slot) = b.elems.get_mut(v.index()) {
            *slot = None;
        }
    }
    Ok(())
}

/// Every rank's jobs.
fn all_jobs(p: &Passes) -> Vec<RankJobs> {
    let grads: HashSet<VarId> = p.backward.param_grads.iter().map(|&(_, g)| g).collect();
    p.partitioned
        .ranks
        .iter()
        .map(|r| cut(r, &grads, p.stages.chunks))
        .collect()
}

/// What a rank of a pipelined run needs before it can step: its jobs, placement, its
/// stage's job list and each micro-batch's data inputs (index into `per_micro_batch`).
struct RankSetup {
    rank: u32,
    jobs: RankJobs,
    place: super::interp::Placement,
    list: Vec<crate::passes::pipeline::schedule::Job>,
    inputs: Vec<Vec<(usize, Tensor)>>,
}

/// A rank's variables (by id).
type RankEnv = Vec<Option<Tensor>>;

/// Every rank's setup and initial variables, the schedule's order proven deadlock-free
/// before anything waits on it.
fn setup(p: &Passes, opts: &RunOptions) -> Result<(Vec<RankSetup>, Vec<RankEnv>), ExecError> {
    let mesh = &p.full.mesh;
    let schedule = p.schedule();
    let m = micro_batches(p);
    let globals = initial_values(p, opts)?;
    let envs = rank_envs(p, &globals)?;
    let inputs = micro_inputs(p, opts)?;
    let lists: Vec<Vec<crate::passes::pipeline::schedule::Job>> = (0..p.stages.stages)
        .map(|s| job_list(schedule, p.stages.stages, s, m))
        .collect::<Result<_, _>>()
        .map_err(|e| ExecError::Setup(format!("the schedule: {e}")))?;
    crate::passes::pipeline::schedule_check::check_order(&lists, m, schedule.chunks())
        .map_err(|e| ExecError::Setup(e.to_string()))?;
    let mut out = Vec::with_capacity(p.partitioned.ranks.len());
    for ((r, jobs), place) in p
        .partitioned
        .ranks
        .iter()
        .zip(all_jobs(p))
        .zip(placements(p))
    {
        let stage = p.stages.stage_of(mesh, r.rank);
        let mut per_mb = Vec::with_capacity(m);
        for mb in &inputs {
            let mut mine = Vec::new();
            for (v, global) in mb {
                let Ok(k) = jobs.per_micro_batch.binary_search(v) else {
                    continue;
                };
                let piece = super::gather::shard(global, &p.full.tensors[v.index()], mesh, r.rank)?;
                mine.push((k, piece));
            }
            per_mb.push(mine);
        }
        out.push(RankSetup {
            rank: r.rank,
            jobs,
            place,
            list: lists.get(stage).cloned().unwrap_or_default(),
            inputs: per_mb,
        });
    }
    Ok((out, envs))
}

/// Each rank of `setups` ready to step.
fn pipe_ranks<'a>(setups: &'a [RankSetup], envs: Vec<RankEnv>, loss: VarId) -> Vec<PipeRank<'a>> {
    setups
        .iter()
        .zip(envs)
        .map(|(s, env)| {
            let rank = Rank::new(s.rank, &s.jobs.program, env, Some(&s.place));
            PipeRank::new(rank, &s.jobs, s.list.clone(), s.inputs.clone(), loss)
        })
        .collect()
}

/// One step of every rank from the initial values (cooperatively), then what micro-batch 0
/// left in each `(rank, variable)` asked for (a variable of that rank's program): the
/// values a pipeline's sends and recvs carried, for showing them.
pub fn first_micro_batch_values(
    p: &Passes,
    wanted: &[(u32, VarId)],
    opts: &RunOptions,
) -> Result<Vec<Option<Tensor>>, ExecError> {
    let (setups, envs) = setup(p, opts)?;
    let mut ranks = pipe_ranks(&setups, envs, reported_loss(p));
    super::step::step_coop(&mut ranks, &CoopComm::default())?;
    Ok(wanted
        .iter()
        .map(|&(rank, v)| {
            let i = setups.iter().position(|s| s.rank == rank)?;
            ranks[i].stashed(0, v).cloned()
        })
        .collect())
}

/// Runs every rank's job list for `opts.steps` steps.
pub fn run_pipelined(p: &Passes, opts: &RunOptions, threads: bool) -> Result<Log, ExecError> {
    let mesh = &p.full.mesh;
    let plan = StagePlan::new(&p.full, &p.stages);
    let loss = reported_loss(p);
    let (setups, envs) = setup(p, opts)?;
    let mut ranks = pipe_ranks(&setups, envs, loss);
    let holds = |v: VarId| {
        let owner = plan.owner(v);
        move |rank: u32| p.stages.stage_of(mesh, rank) == owner
    };
    let mut log = Log::default();
    #[cfg(not(target_arch = "wasm32"))]
    let threaded = threads.then(|| super::comm::ThreadComm::new(opts.timeout));
    #[cfg(target_arch = "wasm32")]
    let threaded: Option<CoopComm> = {
        let _ = threads;
        None
    };
    for step in 0..opts.steps {
        for r in ranks.iter_mut() {
            r.rewind();
        }
        match &threaded {
            Some(comm) => super::run::threads_or_error(&mut ranks, comm)?,
            None => super::step::step_coop(&mut ranks, &CoopComm::default())?,
        }
        let envs: Vec<&Vec<Option<Tensor>>> = ranks.iter().map(|r| &r.rank.env).collect();
        snapshot(&mut log, step, p, opts.record, &|v| {
            Ok((gather_var(p, &envs, v, &holds(v))?, 0.0, None))
        })?;
    }
    Ok(log)
}
