//! Pipeline plans: each stage runs on its own sub-mesh's devices, one jitted function per
//! stage and job (a chunk's forward, its backward, the optimizer step), and the host moves
//! activations and gradients between stages with `jax.device_put` onto the receiving
//! stage's devices: the plan's send/recv pairs. Micro-batches run one after another
//! (forward through every stage, then backward), which gives the same numbers as any
//! schedule; the schedule decides only when each job runs.
//!
//! `shard_map` mode runs each stage's rank programs (cut into jobs by `passes::pipeline::jobs`),
//! collectives inside a stage as JAX collectives; a collective whose group spans stages
//! (the global norm's sum over `pp`, AMP's overflow flag over the mesh) is done by the host
//! between the stage functions, on every rank's value.
//!
//! `gspmd` mode runs each stage's forward ops of the serial program as a jitted function
//! on the stage's sub-mesh, its backward as that function's `jax.vjp`, and the optimizer
//! step as one jitted function over the whole mesh.

use super::gspmd::{spec, SerialEnv};
use super::ops::{emit, Env};
use super::py;
use super::ranks::RanksEnv;
use super::shard_map::{feeds, read_first, records};
use super::{Constrain, ExportError};
use crate::ir::{OpRole, OpType, Program, VarId, VarKind};
use crate::passes::driver::Passes;
use crate::passes::partition::RankProgram;
use crate::passes::pipeline::jobs::{cut, RankJobs};
use std::collections::{HashMap, HashSet};

/// One stage: its ranks in sub-mesh order, their programs, its jobs.
struct Stage<'a> {
    env: RanksEnv<'a>,
    template: &'a RankProgram,
    jobs: RankJobs,
}

fn stages(p: &Passes) -> Result<Vec<Stage<'_>>, ExportError> {
    let grads: HashSet<VarId> = p.backward.param_grads.iter().map(|&(_, g)| g).collect();
    let by_rank: HashMap<u32, &RankProgram> =
        p.partitioned.ranks.iter().map(|r| (r.rank, r)).collect();
    let mut out = Vec::new();
    for s in 0..p.stages.stages {
        let (shape, names, ranks) = stage_mesh(p, s);
        let programs: Vec<&RankProgram> = ranks
            .iter()
            .map(|r| {
                by_rank
                    .get(r)
                    .copied()
                    .ok_or_else(|| ExportError::Plan(format!("rank {r} has no program")))
            })
            .collect::<Result<_, _>>()?;
        let template = programs[0];
        let env = RanksEnv::new(
            shape,
            names,
            ranks,
            programs.iter().map(|r| &r.program).collect(),
        )?;
        let jobs = cut(template, &grads, p.stages.chunks);
        out.push(Stage {
            env,
            template,
            jobs,
        });
    }
    Ok(out)
}

/// Stage `s`'s devices as a mesh: the whole mesh's axes with `pp` of size 1 (so a pure
/// `pp` mesh still has an axis, and layouts keep their axis indices), its ranks in mesh
/// order. Without a `pp` axis (micro-batches only) the stage is the whole mesh.
fn stage_mesh(p: &Passes, s: usize) -> (Vec<usize>, Vec<String>, Vec<u32>) {
    let mesh = &p.full.mesh;
    let mut shape = mesh.shape().to_vec();
    if let Some(pp) = p.stages.axis {
        shape[pp.index()] = 1;
    }
    (shape, mesh.dim_names().to_vec(), p.stages.ranks_of(mesh, s))
}

/// A job's ops cut at the collectives the host runs (groups spanning stages).
enum Piece {
    Jit(Vec<usize>),
    Host(usize),
}

fn spans_stages(stage: &Stage, op: usize) -> bool {
    let o = &stage.env.program().ops()[op];
    matches!(o.ty, OpType::Collective(_))
        && !matches!(o.ty, OpType::Send | OpType::Recv)
        && o.attr_ints("group")
            .is_some_and(|g| g.iter().any(|&r| !stage.env.ranks.contains(&(r as u32))))
}

fn pieces(stage: &Stage, ops: &[usize]) -> Vec<Piece> {
    let mut out = Vec::new();
    let mut run = Vec::new();
    for &i in ops {
        if spans_stages(stage, i) {
            if !run.is_empty() {
                out.push(Piece::Jit(std::mem::take(&mut run)));
            }
            out.push(Piece::Host(i));
        } else {
            run.push(i);
        }
    }
    if !run.is_empty() || out.is_empty() {
        out.push(Piece::Jit(run));
    }
    out
}

/// `def NAME(v, me)` over `ops`, sends and recvs as named values the host moves.
fn job_body(stage: &Stage, name: &str, ops: &[usize]) -> Result<String, ExportError> {
    let program = stage.env.program();
    let mut out = format!("\n\ndef {name}(v, me):\n");
    for &i in ops {
        let op = &program.ops()[i];
        if op.ty == OpType::Send {
            {
                let x = op
                    .input("X")
                    .first()
                    .copied()
                    .ok_or_else(|| ExportError::Plan(format!("send op{i} has no X")))?;
                out.push_str(&format!(
                    "    # op{i} send_v2: {} to stage of rank {}\n    v[\"__send_op{i}\"] = v[{}]\n",
                    program.var(x).name,
                    op.attr_int("peer", -1),
                    py::string(&program.var(x).name)
                ));
            }
        } else if op.ty == OpType::Recv {
            {
                let o = op
                    .output("Out")
                    .first()
                    .copied()
                    .ok_or_else(|| ExportError::Plan(format!("recv op{i} has no Out")))?;
                out.push_str(&format!(
                    "    # op{i} recv_v2: {} from stage of rank {}\n    v[{}] = v[\"__recv_op{i}\"]\n",
                    program.var(o).name,
                    op.attr_int("peer", -1),
                    py::string(&program.var(o).name)
                ));
            }
        } else {
            for line in emit(&stage.env, i, op)? {
                out.push_str(&format!("    {line}\n"));
            }
        }
    }
    out.push_str("    return v\n");
    Ok(out)
}

/// The names a jitted piece reads first and writes (sends as `__send_opN`, recvs read as
/// `__recv_opN`).
fn ins_outs(program: &Program, ops: &[usize]) -> (Vec<String>, Vec<String>) {
    let mut ins: Vec<String> = Vec::new();
    for v in read_first(program, ops) {
        ins.push(program.var(v).name.to_string());
    }
    let mut outs: Vec<String> = Vec::new();
    let mut seen = HashSet::new();
    for &i in ops {
        let op = &program.ops()[i];
        if op.ty == OpType::Recv {
            ins.push(format!("__recv_op{i}"));
        }
        if op.ty == OpType::Send {
            outs.push(format!("__send_op{i}"));
        }
        for v in op.all_outputs() {
            if seen.insert(v) {
                outs.push(program.var(v).name.to_string());
            }
        }
    }
    (ins, outs)
}

/// Pairs every send with the recv it feeds: per (sending stage, receiving stage,
/// direction), the k-th send with the k-th recv, as both sides run them in program order.
fn routes(stages: &[Stage], p: &Passes) -> String {
    let mesh = &p.full.mesh;
    let mut sends: HashMap<(usize, usize, bool), Vec<usize>> = HashMap::new();
    let mut recvs: HashMap<(usize, usize, bool), Vec<usize>> = HashMap::new();
    for (s, st) in stages.iter().enumerate() {
        for (i, op) in st.env.program().ops().iter().enumerate() {
            let peer = op.attr_int("peer", 0).max(0) as u32;
            let other = p.stages.stage_of(mesh, peer);
            let backward = op.role == OpRole::Backward;
            if op.ty == OpType::Send {
                sends.entry((s, other, backward)).or_default().push(i);
            } else if op.ty == OpType::Recv {
                recvs.entry((other, s, backward)).or_default().push(i);
            }
        }
    }
    let mut lines: Vec<String> = Vec::new();
    for (key, list) in &sends {
        let Some(targets) = recvs.get(key) else {
            continue;
        };
        for (&i, &j) in list.iter().zip(targets) {
            lines.push(format!(
                "    ({}, \"__send_op{i}\"): ({}, \"__recv_op{j}\"),\n",
                key.0, key.1
            ));
        }
    }
    crate::sort::sort(&mut lines);
    format!(
        "# Which recv each send feeds: (stage, send) -> (stage, recv).\nROUTES = {{\n{}}}\n",
        lines.concat()
    )
}

/// A host-run collective: its reduce type, input and output, and each position's group as
/// (stage, position) pairs.
fn host_op(stages: &[Stage], s: usize, op: usize) -> Result<String, ExportError> {
    let st = &stages[s];
    let o = &st.env.program().ops()[op];
    if o.ty != OpType::AllReduce {
        return Err(ExportError::Op {
            index: op,
            ty: o.ty.to_string(),
            message: "a collective across pipeline stages other than all_reduce".into(),
        });
    }
    let locate = |r: u32| -> Option<(usize, usize)> {
        stages
            .iter()
            .enumerate()
            .find_map(|(t, other)| other.env.ranks.iter().position(|&x| x == r).map(|q| (t, q)))
    };
    let mut groups = Vec::new();
    for pos in 0..st.env.ranks.len() {
        let g = st.env.programs[pos].ops()[op]
            .attr_ints("group")
            .unwrap_or(&[])
            .iter()
            .map(|&r| {
                locate(r as u32)
                    .map(|(t, q)| format!("[{t}, {q}]"))
                    .ok_or_else(|| ExportError::Plan(format!("rank {r} is on no stage")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        groups.push(py::list(g));
    }
    let program = st.env.program();
    let x = o.input("X").first().copied().unwrap_or(VarId(0));
    let out = o.output("Out").first().copied().unwrap_or(x);
    Ok(format!(
        "{{\"host\": {}, \"op\": {op}, \"x\": {}, \"out\": {}, \"groups\": {}}}",
        py::string(o.attr_str("reduce_type").unwrap_or("SUM")),
        py::string(&program.var(x).name),
        py::string(&program.var(out).name),
        py::list(groups)
    ))
}

/// `JOBS` (each stage's jobs as jitted pieces and host-run collectives) and the bodies of
/// the pieces.
fn jobs_table(p: &Passes, stages: &[Stage]) -> Result<(String, String), ExportError> {
    let mut bodies = String::new();
    let mut jobs =
        String::from("# Each stage's jobs: jitted pieces and host-run collectives.\nJOBS = [\n");
    for (s, st) in stages.iter().enumerate() {
        jobs.push_str("    {\n");
        let mut lists: Vec<(String, Vec<usize>)> = Vec::new();
        for c in 0..p.stages.chunks {
            lists.push((format!("forward{c}"), st.jobs.forward[c].to_vec()));
            lists.push((format!("backward{c}"), st.jobs.backward[c].to_vec()));
        }
        lists.push(("optimizer".into(), st.jobs.optimizer.to_vec()));
        for (job, ops) in lists {
            let mut items = Vec::new();
            for (k, piece) in pieces(st, &ops).into_iter().enumerate() {
                match piece {
                    Piece::Jit(ops) => {
                        let name = format!("stage{s}_{job}_{k}");
                        bodies.push_str(&job_body(st, &name, &ops)?);
                        let (ins, outs) = ins_outs(st.env.program(), &ops);
                        items.push(format!(
                            "{{\"fn\": {}, \"ins\": {}, \"outs\": {}}}",
                            py::string(&name),
                            py::list(ins.iter().map(|n| py::string(n))),
                            py::list(outs.iter().map(|n| py::string(n)))
                        ));
                    }
                    Piece::Host(op) => items.push(host_op(stages, s, op)?),
                }
            }
            jobs.push_str(&format!("        {}: [\n", py::string(&job)));
            for item in items {
                jobs.push_str(&format!("            {item},\n"));
            }
            jobs.push_str("        ],\n");
        }
        jobs.push_str("    },\n");
    }
    jobs.push_str("]\n");
    Ok((jobs, bodies))
}

/// `FEEDS` and `STATE` per stage, and each stage's per-micro-batch and accumulated
/// variables.
fn stage_feeds(p: &Passes, stages: &[Stage]) -> Result<String, ExportError> {
    let mut out = String::new();
    // What each stage starts with, and its per-micro-batch and accumulated variables.
    out.push_str("FEEDS = [\n");
    let mut state = Vec::new();
    for st in stages {
        let all: Vec<usize> = (0..st.env.program().ops().len()).collect();
        let per_mb: HashSet<VarId> = st.jobs.per_micro_batch.iter().copied().collect();
        let program = st.env.program();
        let fed: Vec<usize> = all.clone();
        out.push_str(&feeds(p, program, &st.env, st.template, &fed, true)?);
        let written: HashSet<VarId> = all
            .iter()
            .flat_map(|&i| program.ops()[i].all_outputs().collect::<Vec<_>>())
            .collect();
        let names: Vec<String> = read_first(program, &all)
            .into_iter()
            .filter(|v| written.contains(v) && !per_mb.contains(v))
            .map(|v| py::string(&program.var(v).name))
            .collect();
        state.push(py::list(names));
    }
    out.push_str(&format!("]\nSTATE = {}\n", py::list(state)));
    let names = |st: &Stage, vs: &[VarId]| {
        py::list(
            vs.iter()
                .map(|&v| py::string(&st.env.program().var(v).name)),
        )
    };
    out.push_str(&format!(
        "PER_MICRO_BATCH = {}\nACCUMULATED = {}\n",
        py::list(stages.iter().map(|st| names(st, &st.jobs.per_micro_batch))),
        py::list(stages.iter().map(|st| names(st, &st.jobs.accumulated)))
    ));
    Ok(out)
}

/// The script's plan part for `shard_map` mode.
pub fn shard_map_script(p: &Passes) -> Result<String, ExportError> {
    let stages = stages(p)?;
    let mut out = format!(
        "MICRO_BATCHES = {}\nCHUNKS = {}\nSTAGES = [\n",
        p.micro_batches(),
        p.stages.chunks
    );
    for st in &stages {
        out.push_str(&format!(
            "    {{\"shape\": {}, \"axes\": {}, \"ranks\": {}}},\n",
            py::ints(st.env.shape.iter()),
            py::tuple(st.env.names.iter().map(|n| py::string(n))),
            py::ints(st.env.ranks.iter())
        ));
    }
    out.push_str("]\n");
    let (jobs, bodies) = jobs_table(p, &stages)?;
    out.push_str(&jobs);
    out.push_str(&routes(&stages, p));
    out.push_str(&stage_feeds(p, &stages)?);
    let plan = crate::passes::partition::p2p::StagePlan::new(&p.full, &p.stages);
    let holder = |v: VarId| -> Result<(&RankProgram, usize), ExportError> {
        let s = plan.owner(v).min(stages.len() - 1);
        Ok((stages[s].template, s))
    };
    out.push_str(&records(p, &holder)?);
    let loss = crate::exec::run::reported_loss(p);
    out.push_str(&format!(
        "LOSS = {}\nLOSS_STAGE = {}\n",
        py::string(&p.full.program.var(loss).name),
        plan.owner(loss).min(stages.len() - 1)
    ));
    out.push_str(&bodies);
    out.push_str("\n\ndef main(argv):\n    run_pipeline_shard_map(parse_args(argv))\n");
    Ok(out)
}

/// The script's plan part for `gspmd` mode (see the module doc).
pub fn gspmd_script(p: &Passes, constrain: Constrain) -> Result<String, ExportError> {
    let program = &p.full.program;
    let first_backward = p.backward.first_backward_op.min(program.ops().len());
    let env = SerialEnv {
        program,
        masks: std::cell::RefCell::new(Vec::new()),
    };
    let per_stage = forward_by_stage(p, first_backward)?;
    let outs_of = stage_outputs(p, &per_stage);
    let pinned = super::gspmd::pinned(p, constrain);
    let (table, mut bodies) = vstages(p, &per_stage, &outs_of, &env, &pinned)?;
    let optimizer: Vec<usize> = (first_backward..program.ops().len())
        .filter(|&i| program.ops()[i].role == OpRole::Optimize)
        .collect();
    bodies.push_str(
        "\n\ndef optimizer(v):\n    \"\"\"The serial program's optimizer-phase ops, on the whole mesh.\"\"\"\n",
    );
    for &i in &optimizer {
        for line in emit(&env, i, &program.ops()[i])? {
            bodies.push_str(&format!("    {line}\n"));
        }
    }
    bodies.push_str("    return v\n");
    let mut out = stage_meshes(p)?;
    out.push_str(&table);
    let forward: Vec<usize> = (0..first_backward).collect();
    out.push_str(&super::gspmd::tables(p, &forward, &optimizer, &env)?);
    out.push_str(&specs_table(p));
    out.push_str(&bodies);
    out.push_str("\n\ndef main(argv):\n    run_pipeline_gspmd(parse_args(argv))\n");
    Ok(out)
}

/// The serial program's forward ops per virtual stage.
fn forward_by_stage(p: &Passes, first_backward: usize) -> Result<Vec<Vec<usize>>, ExportError> {
    let program = &p.full.program;
    let plan = crate::passes::partition::p2p::StagePlan::new(&p.full, &p.stages);
    let mut per_stage: Vec<Vec<usize>> = vec![Vec::new(); p.stages.virtual_count()];
    for i in 0..first_backward {
        let slot = per_stage
            .get_mut(plan.op_stage[i])
            .ok_or_else(|| ExportError::Op {
                index: i,
                ty: program.ops()[i].ty.to_string(),
                message: "a forward op on every stage".into(),
            })?;
        slot.push(i);
    }
    Ok(per_stage)
}

/// What each virtual stage hands on: the values a later stage reads, and the losses.
fn stage_outputs(p: &Passes, per_stage: &[Vec<usize>]) -> Vec<Vec<VarId>> {
    let program = &p.full.program;
    let (loss, reported) = (p.backward.loss, crate::exec::run::reported_loss(p));
    let mut read_later: HashSet<VarId> = HashSet::new();
    let mut outs_of: Vec<Vec<VarId>> = Vec::new();
    for ops in per_stage.iter().rev() {
        let written: HashSet<VarId> = ops
            .iter()
            .flat_map(|&i| program.ops()[i].all_outputs().collect::<Vec<_>>())
            .collect();
        let mut outs: Vec<VarId> = written
            .into_iter()
            .filter(|v| read_later.contains(v) || *v == loss || *v == reported)
            .collect();
        crate::sort::sort(&mut outs);
        outs_of.push(outs);
        read_later.extend(read_first(program, ops));
    }
    outs_of.reverse();
    outs_of
}

/// `VSTAGES` and each virtual stage's forward function.
fn vstages(
    p: &Passes,
    per_stage: &[Vec<usize>],
    outs_of: &[Vec<VarId>],
    env: &SerialEnv,
    pinned: &HashSet<VarId>,
) -> Result<(String, String), ExportError> {
    let program = &p.full.program;
    let params: HashSet<VarId> = p.backward.param_grads.iter().map(|&(v, _)| v).collect();
    let names = |vs: &[VarId]| py::list(vs.iter().map(|&v| py::string(&program.var(v).name)));
    let mut table = String::from(
        "# Each virtual stage's forward: its physical stage, inputs (the differentiable ones:\n\
         # parameters and activations from earlier stages) and outputs.\nVSTAGES = [\n",
    );
    let mut bodies = String::new();
    for (k, ops) in per_stage.iter().enumerate() {
        let (s, _) = p.stages.split(k);
        let ins = read_first(program, ops);
        let diff: Vec<VarId> = ins
            .iter()
            .copied()
            .filter(|&v| {
                let var = program.var(v);
                params.contains(&v)
                    || (!var.kind.is_source() && var.ty.dtype != crate::ir::DType::I64)
            })
            .collect();
        table.push_str(&format!(
            "    {{\"stage\": {s}, \"fn\": \"vstage{k}\", \"ins\": {}, \"diff\": {}, \"outs\": {}}},\n",
            names(&ins),
            names(&diff),
            names(&outs_of[k])
        ));
        bodies.push_str(&format!(
            "\n\ndef vstage{k}(v):\n    \"\"\"Virtual stage {k}'s forward ops (physical stage {s}).\"\"\"\n"
        ));
        bodies.push_str(&super::gspmd::forward_lines(p, env, ops, pinned)?);
        bodies.push_str("    return v\n");
    }
    table.push_str("]\n");
    Ok((table, bodies))
}

/// `MESH_SHAPE`, `AXES`, `RANKS`, `MICRO_BATCHES` and each stage's sub-mesh.
fn stage_meshes(p: &Passes) -> Result<String, ExportError> {
    let mesh = &p.full.mesh;
    let mut out = format!(
        "MESH_SHAPE = {}\nAXES = {}\nRANKS = {}\nMICRO_BATCHES = {}\nSTAGES = [\n",
        py::ints(mesh.shape().iter()),
        py::tuple(mesh.dim_names().iter().map(|n| py::string(n))),
        py::ints(mesh.process_ids().iter()),
        p.micro_batches()
    );
    for s in 0..p.stages.stages {
        let (shape, names, ranks) = stage_mesh(p, s);
        out.push_str(&format!(
            "    {{\"shape\": {}, \"axes\": {}, \"ranks\": {}}},\n",
            py::ints(shape.iter()),
            py::tuple(names.iter().map(|n| py::string(n))),
            py::ints(ranks.iter())
        ));
    }
    out.push_str("]\n");
    Ok(out)
}

/// `SPECS`: the completed layout of every computed tensor and data input.
fn specs_table(p: &Passes) -> String {
    let specs: Vec<String> = p
        .full
        .program
        .vars()
        .iter()
        .enumerate()
        .filter(|(_, v)| !v.kind.is_source() || matches!(v.kind, VarKind::Input | VarKind::Label))
        .map(|(i, v)| {
            format!(
                "    {}: {},\n",
                py::string(&v.name),
                spec(&p.full.tensors[i], &p.full.mesh, &[])
            )
        })
        .collect();
    format!(
        "# The completed layout of every computed tensor and data input.\nSPECS = {{\n{}}}\n",
        specs.concat()
    )
}
