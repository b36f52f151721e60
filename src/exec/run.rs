//! Running a planned step: serially, and on every rank (threads natively, cooperative
//! stepping in the browser), then comparing the two.

use super::comm::CoopComm;
use super::gather::{gather, shard, Piece};
use super::init::{initial_value, InitOptions};
use super::interp::{ExecError, Placement, Rank, Status};
use super::tensor::Tensor;
use crate::ir::{DType, VarId};
use crate::passes::driver::Passes;
use serde::Serialize;
use std::collections::HashMap;

/// One recorded tensor: its value (every replica's copy in a distributed run, coordinate
/// 0's first) and, in the serial run, the bound of its rounding error (`bound.rs`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Record {
    pub name: String,
    pub copies: Vec<Tensor>,
    pub bound: f64,
    /// Per-element bounds, where the serial run has them (parameters after Adam).
    pub elem_bounds: Option<Vec<f64>>,
}

impl Record {
    /// The canonical value (coordinate 0's copy).
    pub fn value(&self) -> Option<&Tensor> {
        self.copies.first()
    }
}

/// What a run records.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Log {
    /// The loss after each step (coordinate 0's copy).
    pub losses: Vec<f64>,
    /// The loss of each step as a tensor, every copy and its bound.
    pub loss_records: Vec<Record>,
    /// Every parameter gradient of the first step.
    pub grads: Vec<Record>,
    /// Every parameter after the last step.
    pub params: Vec<Record>,
    /// The loss tensor of the first step.
    pub first_loss: Option<Tensor>,
    /// The structural checks of the rank programs (`sync_check`), failing ones only.
    pub structural: Vec<super::verify::Check>,
    /// Kernel seconds per op family over every rank and step, longest first (with
    /// `RunOptions::profile`; the pipelined executor does not profile).
    pub op_times: Vec<(String, f64)>,
}

impl Log {
    /// The largest difference between two copies of one recorded tensor.
    pub fn replica_difference(&self) -> f64 {
        let mut worst: f64 = 0.0;
        for r in self
            .loss_records
            .iter()
            .chain(&self.grads)
            .chain(&self.params)
        {
            let Some(first) = r.copies.first() else {
                continue;
            };
            let base = first.to_f64();
            for c in &r.copies[1..] {
                for (a, b) in base.iter().zip(c.to_f64()) {
                    let d = (a - b).abs();
                    worst = worst.max(if d.is_nan() { f64::INFINITY } else { d });
                }
            }
        }
        worst
    }
}

/// Options of a run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub steps: usize,
    pub init: InitOptions,
    /// Values to use instead of seeded ones, by variable name (global tensors).
    pub feeds: HashMap<String, Tensor>,
    /// How long a collective may wait for its group (threads).
    pub timeout: std::time::Duration,
    /// Record gradients and parameters after each step, for verification (off for
    /// benchmarks: only the losses are read back).
    pub record: bool,
    /// Time each op's kernel, per op family (`Log::op_times`).
    pub profile: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            steps: 1,
            init: InitOptions::default(),
            feeds: HashMap::new(),
            timeout: std::time::Duration::from_secs(20),
            record: true,
            profile: false,
        }
    }
}

/// Ranks up to this many run on OS threads (blocking exchanges, in parallel); more run in
/// turn on one thread (`step_coop`). Each thread costs its stack and its allocator's
/// thread cache (about 3.5 MB with mimalloc, measured): 1,024 threaded ranks peaked at
/// 3.5 GB where 1,024 cooperative ones peak under 1 GB, and cores, not threads, bound the
/// speed.
pub const THREADED_RANKS_MAX: usize = 64;

/// The loss to report: the plan's loss (under AMP, the loss before scaling).
pub fn reported_loss(p: &Passes) -> VarId {
    let program = &p.full.program;
    let loss = p.backward.loss;
    let name = &program.var(loss).name;
    name.strip_suffix("@SCALED")
        .and_then(|base| program.var_id(base))
        .unwrap_or(loss)
}

/// Every source variable's initial global value.
pub fn initial_values(p: &Passes, opts: &RunOptions) -> Result<Vec<Option<Tensor>>, ExecError> {
    let program = &p.full.program;
    program
        .vars()
        .iter()
        .map(|v| {
            match opts.feeds.get(&*v.name).filter(|_| {
                // With micro-batches a fed input is the whole batch, split in `run_pipe.rs`.
                p.micro_batches() == 1
                    || !matches!(
                        v.kind,
                        crate::ir::VarKind::Input | crate::ir::VarKind::Label
                    )
            }) {
                Some(t) => {
                    if t.shape[..] != v.ty.shape[..]
                        || (t.dtype() == DType::I64) != (v.ty.dtype == DType::I64)
                    {
                        return Err(ExecError::Setup(format!(
                            "the value given for `{}` is {:?} {:?}, but the variable is {}",
                            v.name,
                            t.dtype(),
                            t.shape,
                            v.ty
                        )));
                    }
                    Ok(Some(Tensor::float(v.ty.dtype, t.shape.clone(), t.to_f64())))
                }
                None => Ok(initial_value(program, v, &opts.init)),
            }
        })
        .collect()
}

/// Reads one variable: its copies and its error bounds.
pub(super) type Reader<'r> =
    dyn Fn(VarId) -> Result<(Vec<Tensor>, f64, Option<Vec<f64>>), ExecError> + 'r;

pub(super) fn snapshot(
    log: &mut Log,
    step: usize,
    p: &Passes,
    record: bool,
    read: &Reader,
) -> Result<(), ExecError> {
    let program = &p.full.program;
    let (loss, bound, _) = read(reported_loss(p))?;
    let first = loss
        .first()
        .ok_or_else(|| ExecError::Setup("no copy of the loss".into()))?;
    log.losses.push(first.scalar());
    if !record {
        return Ok(());
    }
    let recorded = |v: VarId, label: String| -> Result<Record, ExecError> {
        let (copies, bound, elem_bounds) = read(v)?;
        Ok(Record {
            name: label,
            copies,
            bound,
            elem_bounds,
        })
    };
    if step == 0 {
        log.first_loss = Some(first.clone());
        for &(param, g) in &p.backward.param_grads {
            log.grads
                .push(recorded(g, program.var(param).name.to_string())?);
        }
    }
    log.loss_records.push(Record {
        name: format!("loss (step {})", step + 1),
        copies: loss,
        bound,
        elem_bounds: None,
    });
    // The parameters after the latest step (the last snapshot wins).
    log.params = p
        .backward
        .param_grads
        .iter()
        .map(|&(param, _)| recorded(param, program.var(param).name.to_string()))
        .collect::<Result<_, ExecError>>()?;
    Ok(())
}

/// Runs the serial program for `opts.steps` steps.
pub fn run_serial(p: &Passes, opts: &RunOptions) -> Result<Log, ExecError> {
    if p.micro_batches() > 1 {
        return super::run_pipe::run_serial_accumulated(p, opts);
    }
    let program = &p.full.program;
    let env = initial_values(p, opts)?;
    let mut rank = Rank::new(0, program, env, None);
    if opts.record {
        rank.bounds = Some(super::interp::Bounds::new(program.vars().len()));
    }
    rank.op_times = opts.profile.then(Default::default);
    let comm = CoopComm::default();
    let mut log = Log::default();
    for step in 0..opts.steps {
        rank.rewind();
        if rank.step(&comm)? != Status::Done {
            return Err(ExecError::Setup(
                "the serial program waited on a collective".into(),
            ));
        }
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
    log.op_times = rank.op_times.map(|t| t.sorted()).unwrap_or_default();
    Ok(log)
}

/// Every variable's error bound (`bound.rs`) after `opts.steps` serial steps, by name, in
/// variable order: the max-norm bound, and the sum of the per-element bounds where the
/// variable has them (Adam's parameters). What verification would allow for each tensor;
/// for tests that pin the bounds.
pub fn serial_bounds(
    p: &Passes,
    opts: &RunOptions,
) -> Result<Vec<(String, f64, Option<f64>)>, ExecError> {
    let program = &p.full.program;
    let env = initial_values(p, opts)?;
    let mut rank = Rank::new(0, program, env, None);
    rank.bounds = Some(super::interp::Bounds::new(program.vars().len()));
    for _ in 0..opts.steps.max(1) {
        rank.rewind();
        if rank.step(&CoopComm::default())? != Status::Done {
            return Err(ExecError::Setup(
                "the serial program waited on a collective".into(),
            ));
        }
    }
    let bounds = rank.bounds.unwrap_or_default();
    Ok(program
        .vars()
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let max = bounds.max.get(i).copied().unwrap_or(0.0);
            let elems = bounds.elems.get(i).cloned().flatten();
            (v.name.to_string(), max, elems.map(|e| e.iter().sum()))
        })
        .collect())
}

/// The environment of every rank: each source variable's shard.
pub(super) fn rank_envs(
    p: &Passes,
    globals: &[Option<Tensor>],
) -> Result<Vec<Vec<Option<Tensor>>>, ExecError> {
    let mesh = &p.full.mesh;
    p.partitioned
        .ranks
        .iter()
        .map(|r| {
            let mut env: Vec<Option<Tensor>> = vec![None; r.program.vars().len()];
            for (i, g) in globals.iter().enumerate() {
                if let Some(g) = g {
                    env[i] = Some(shard(g, &p.full.tensors[i], mesh, r.rank)?);
                }
            }
            zero_shards(p, r.rank, &mut env)?;
            Ok(env)
        })
        .collect()
}

/// ZeRO: each sharded parameter's and optimizer state's shard starts as the rank's piece of
/// its flat, padded local value; under stage 3 the whole parameter is not kept (forward
/// gathers it).
fn zero_shards(p: &Passes, rank: u32, env: &mut [Option<Tensor>]) -> Result<(), ExecError> {
    let zero = &p.partitioned.zero;
    for (z, whole, shard) in zero.initial_shards() {
        let member = member_index(p, rank, &z.axes)?;
        let start = member * z.shard;
        let piece = env
            .get(whole.index())
            .and_then(|t| t.as_ref())
            .map(|t| t.flat_range(start, start + z.shard));
        if let Some(slot) = env.get_mut(shard.index()) {
            *slot = piece;
        }
    }
    if zero.stage >= 3 {
        for z in &zero.params {
            if let Some(slot) = env.get_mut(z.param.index()) {
                *slot = None;
            }
        }
    }
    Ok(())
}

/// `rank`'s position in its group along `axes` (the order collectives use).
fn member_index(p: &Passes, rank: u32, axes: &[crate::dist::MeshAxis]) -> Result<usize, ExecError> {
    p.full
        .mesh
        .group_of(rank, axes)
        .and_then(|g| g.iter().position(|&r| r == rank))
        .ok_or_else(|| ExecError::Setup(format!("rank {rank} is not on the mesh")))
}

pub(super) fn placements(p: &Passes) -> Vec<Placement> {
    p.partitioned
        .ranks
        .iter()
        .map(|r| Placement {
            attrs: r.attrs.to_vec(),
            global: r
                .origin
                .iter()
                .map(|&o| p.full.program.var(o).ty.shape.to_vec())
                .collect(),
            coords: p.full.mesh.coords_of(r.rank).unwrap_or_default(),
            mesh_shape: p.full.mesh.shape().to_vec(),
        })
        .collect()
}

/// Each rank's piece of `v` rebuilt from the ZeRO shards of its group: the members' shards
/// concatenated in group order, the padding dropped, the local shape restored.
fn unshard_pieces(
    p: &Passes,
    envs: &[&Vec<Option<Tensor>>],
    v: VarId,
    z: &crate::passes::partition::zero::ZeroParam,
    shard: VarId,
    holds: &dyn Fn(u32) -> bool,
) -> Result<Vec<Tensor>, ExecError> {
    let index: std::collections::HashMap<u32, usize> = p
        .partitioned
        .ranks
        .iter()
        .enumerate()
        .map(|(i, r)| (r.rank, i))
        .collect();
    let name = &p.full.program.var(v).name;
    p.partitioned
        .ranks
        .iter()
        .filter(|r| holds(r.rank))
        .map(|r| {
            let group = p.full.mesh.group_of(r.rank, &z.axes).unwrap_or_default();
            let mut flat: Vec<f64> = Vec::with_capacity(z.padded());
            for q in group {
                let t = index
                    .get(&q)
                    .and_then(|&i| envs.get(i))
                    .and_then(|env| env.get(shard.index()))
                    .and_then(|t| t.as_ref())
                    .ok_or_else(|| {
                        ExecError::Setup(format!("rank {q} has no ZeRO shard of `{name}`"))
                    })?;
                flat.extend(t.to_f64());
            }
            let ty = &r.program.var(v).ty;
            flat.truncate(usize::try_from(ty.numel()).unwrap_or(usize::MAX));
            if flat.len() as u64 != ty.numel() {
                return Err(ExecError::Setup(format!(
                    "the ZeRO shards of `{name}` hold {} elements, not {}",
                    flat.len(),
                    ty.numel()
                )));
            }
            Ok(Tensor::float(ty.dtype, ty.shape.to_vec(), flat))
        })
        .collect()
}

/// Gathers every copy of serial variable `v` from every rank's environment (under ZeRO, a
/// gradient, and a stage-3 parameter, from its shards).
pub(super) fn gather_var(
    p: &Passes,
    envs: &[&Vec<Option<Tensor>>],
    v: VarId,
    holds: &dyn Fn(u32) -> bool,
) -> Result<Vec<Tensor>, ExecError> {
    if let Some((z, shard)) = p.partitioned.zero.value_in_shards(v) {
        let rebuilt = unshard_pieces(p, envs, v, z, shard, holds)?;
        let attr = crate::passes::dist_program::DistProgram::settled(&p.full.tensors[v.index()]);
        let pieces: Vec<Piece> = p
            .partitioned
            .ranks
            .iter()
            .filter(|r| holds(r.rank))
            .zip(&rebuilt)
            .map(|(r, value)| Piece {
                rank: r.rank,
                value,
                attr: &attr,
            })
            .collect();
        let shape = &p.full.program.var(v).ty.shape;
        return gather(&p.full.mesh, shape, &pieces).map_err(|e| {
            ExecError::Setup(format!("gathering `{}`: {e}", p.full.program.var(v).name))
        });
    }
    let mut pieces = Vec::new();
    for (r, env) in p.partitioned.ranks.iter().zip(envs) {
        if !holds(r.rank) {
            continue;
        }
        let value = env.get(v.index()).and_then(|t| t.as_ref()).ok_or_else(|| {
            ExecError::Setup(format!(
                "rank {} has no value for `{}`",
                r.rank,
                p.full.program.var(v).name
            ))
        })?;
        let attr = r.attrs.get(v.index()).ok_or_else(|| {
            ExecError::Setup(format!("rank {} has no layout for variable {v}", r.rank))
        })?;
        pieces.push(Piece {
            rank: r.rank,
            value,
            attr,
        });
    }
    let shape = &p.full.program.var(v).ty.shape;
    gather(&p.full.mesh, shape, &pieces)
        .map_err(|e| ExecError::Setup(format!("gathering `{}`: {e}", p.full.program.var(v).name)))
}

/// Runs every rank for `opts.steps` steps: on threads natively when `threads`, else
/// cooperatively on this thread.
pub fn run_distributed(p: &Passes, opts: &RunOptions, threads: bool) -> Result<Log, ExecError> {
    let mut log = if p.is_pipelined() && p.is_fully_partitioned() {
        super::run_pipe::run_pipelined(p, opts, threads)?
    } else {
        run_spmd(p, opts, threads)?
    };
    log.structural = super::sync_check::gradient_sync_checks(p);
    Ok(log)
}

/// `run_distributed` for a plan without pipeline stages.
fn run_spmd(p: &Passes, opts: &RunOptions, threads: bool) -> Result<Log, ExecError> {
    if !p.is_fully_partitioned() {
        return Err(ExecError::Setup(format!(
            "only ranks {:?} of the mesh were partitioned; running needs every rank",
            p.partitioned
                .ranks
                .iter()
                .map(|r| r.rank)
                .collect::<Vec<_>>()
        )));
    }
    let globals = initial_values(p, opts)?;
    let envs = rank_envs(p, &globals)?;
    let places = placements(p);
    let mut ranks: Vec<Rank> = p
        .partitioned
        .ranks
        .iter()
        .zip(envs)
        .zip(&places)
        .map(|((r, env), pl)| {
            let mut rank = Rank::new(r.rank, &r.program, env, Some(pl));
            rank.op_times = opts.profile.then(Default::default);
            rank
        })
        .collect();
    let mut log = Log::default();
    #[cfg(not(target_arch = "wasm32"))]
    let threaded = threads.then(|| super::comm::ThreadComm::new(opts.timeout));
    #[cfg(target_arch = "wasm32")]
    let threaded: Option<CoopComm> = {
        let _ = threads;
        None
    };
    let coop = CoopComm::default();
    for step in 0..opts.steps {
        for r in ranks.iter_mut() {
            r.rewind();
        }
        match &threaded {
            Some(comm) => threads_or_error(&mut ranks, comm)?,
            None => super::step::step_coop(&mut ranks, &coop)?,
        }
        let envs: Vec<&Vec<Option<Tensor>>> = ranks.iter().map(|r| &r.env).collect();
        snapshot(&mut log, step, p, opts.record, &|v| {
            Ok((gather_var(p, &envs, v, &|_| true)?, 0.0, None))
        })?;
    }
    if opts.profile {
        let mut all = super::profile::OpTimes::default();
        ranks
            .iter()
            .filter_map(|r| r.op_times.as_ref())
            .for_each(|t| all.merge(t));
        log.op_times = all.sorted();
    }
    Ok(log)
}

/// Steps `ranks` on threads (natively; the browser has none).
#[cfg(not(target_arch = "wasm32"))]
pub(super) fn threads_or_error<S: super::step::Stepper>(
    ranks: &mut [S],
    comm: &(dyn super::comm::Communicator + Sync),
) -> Result<(), ExecError> {
    super::step::step_threads(ranks, comm)
}

#[cfg(target_arch = "wasm32")]
pub(super) fn threads_or_error<S: super::step::Stepper>(
    _: &mut [S],
    _: &CoopComm,
) -> Result<(), ExecError> {
    Err(ExecError::Setup(
        "threads are not available in the browser".into(),
    ))
}
