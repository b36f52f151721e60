//! `shard_map` mode: every rank's program, op for op, in one `jax.shard_map` body over the
//! whole mesh. Every value crosses the shard_map boundary as each rank's own local block,
//! stacked along the devices (`P(all axes)`), so a rank starts with exactly what ShardLab's
//! executor gives it (ZeRO's flat shards included) and every replica comes back to be
//! compared.

use super::ops::{emit, Env};
use super::py;
use super::ranks::RanksEnv;
use super::ExportError;
use crate::dist::TensorDistAttr;
use crate::ir::{Program, VarId};
use crate::passes::driver::Passes;
use std::collections::HashSet;

/// The script's plan part for a plan without pipeline stages.
pub fn script(p: &Passes) -> Result<String, ExportError> {
    let mesh = &p.full.mesh;
    let programs: Vec<&Program> = order_by_position(p)?;
    let env = RanksEnv::new(
        mesh.shape().to_vec(),
        mesh.dim_names().to_vec(),
        mesh.process_ids().to_vec(),
        programs,
    )?;
    let mut out = mesh_constants(&env);
    let body = body(&env, "rank_step", None)?;
    let template = env.programs[0];
    let rank0 = &p.partitioned.ranks[position_index(p, env.ranks[0])?];
    out.push_str(&feeds(p, template, &env, rank0, &all_ops(template), false)?);
    out.push_str(&records(p, &|_| Ok((rank0, 0)))?);
    out.push_str(&body);
    out.push_str("\n\ndef main(argv):\n    run_shard_map(parse_args(argv))\n");
    Ok(out)
}

/// Every rank program in mesh-position order.
fn order_by_position(p: &Passes) -> Result<Vec<&Program>, ExportError> {
    p.full
        .mesh
        .process_ids()
        .iter()
        .map(|&r| position_index(p, r).map(|i| &p.partitioned.ranks[i].program))
        .collect()
}

fn position_index(p: &Passes, rank: u32) -> Result<usize, ExportError> {
    p.partitioned
        .ranks
        .iter()
        .position(|r| r.rank == rank)
        .ok_or_else(|| ExportError::Plan(format!("rank {rank} has no program")))
}

pub(super) fn all_ops(program: &Program) -> Vec<usize> {
    (0..program.ops().len()).collect()
}

/// `MESH_SHAPE`, `AXES`, `RANKS`.
pub(super) fn mesh_constants(env: &RanksEnv) -> String {
    format!(
        "MESH_SHAPE = {}\nAXES = {}\nRANKS = {}\n",
        py::ints(env.shape.iter()),
        py::tuple(env.names.iter().map(|n| py::string(n))),
        py::ints(env.ranks.iter()),
    )
}

/// `def NAME(v, me):` running `ops` (all of the template's when `None`), `me` being the
/// rank's position on the mesh.
pub(super) fn body(
    env: &RanksEnv,
    name: &str,
    ops: Option<&[usize]>,
) -> Result<String, ExportError> {
    let program = env.program();
    let mut out = format!(
        "\n\ndef {name}(v, me):\n    \"\"\"One rank's ops (rank position `me` on the mesh); `v` maps ShardLab's \
         variable names to this rank's local values.\"\"\"\n"
    );
    let indices: Vec<usize> = ops.map_or_else(|| all_ops(program), <[usize]>::to_vec);
    for i in indices {
        let op = &program.ops()[i];
        for line in emit(env, i, op)? {
            out.push_str("    ");
            out.push_str(&line);
            out.push('\n');
        }
    }
    out.push_str("    return v\n");
    Ok(out)
}

/// A layout as Python: `"dims"` (per tensor dim, the mesh axes splitting it) and
/// `"partial"` ([axis, reduce type] pairs).
pub(super) fn layout(attr: &TensorDistAttr) -> String {
    let dims = py::list(
        attr.layout
            .axis_lists()
            .into_iter()
            .map(|axes| py::ints(axes.iter())),
    );
    let partial = py::list(
        attr.layout
            .partial
            .iter()
            .map(|(a, r)| format!("[{}, {}]", a.index(), py::string(r.name()))),
    );
    format!("\"dims\": {dims}, \"partial\": {partial}")
}

/// The variables `ops` read before writing, in first-read order.
pub(super) fn read_first(program: &Program, ops: &[usize]) -> Vec<VarId> {
    let mut written: HashSet<VarId> = HashSet::new();
    let mut seen: HashSet<VarId> = HashSet::new();
    let mut out = Vec::new();
    for &i in ops {
        let op = &program.ops()[i];
        for v in op.all_inputs() {
            if !written.contains(&v) && seen.insert(v) {
                out.push(v);
            }
        }
        written.extend(op.all_outputs());
    }
    out
}

/// `FEEDS` (what each rank starts with: the source variable it is a piece of, and how)
/// and `STATE` (the fed variables the step writes, carried to the next step).
pub(super) fn feeds(
    p: &Passes,
    program: &Program,
    env: &RanksEnv,
    rank: &crate::passes::partition::RankProgram,
    ops: &[usize],
    staged: bool,
) -> Result<String, ExportError> {
    let mut out = String::from(if staged {
        "    {\n"
    } else {
        "# What each rank starts with: the source variable its value is a piece of, the\n\
         # layout that cuts the piece, and for ZeRO the flat shard of it the rank keeps.\n\
         FEEDS = {\n"
    });
    let fed = read_first(program, ops);
    for &v in &fed {
        let line = feed_recipe(p, program, v, staged)?;
        out.push_str(&format!(
            "    {}: {line},\n",
            py::string(&program.var(v).name)
        ));
    }
    out.push_str(&mask_feeds(p, program, env, rank)?);
    if staged {
        return Ok(out + "    },\n");
    }
    out.push_str("}\n");
    let written: HashSet<VarId> = ops
        .iter()
        .flat_map(|&i| program.ops()[i].all_outputs().collect::<Vec<_>>())
        .collect();
    let state: Vec<String> = fed
        .iter()
        .filter(|v| written.contains(v))
        .map(|&v| py::string(&program.var(v).name))
        .collect();
    out.push_str(&format!(
        "# The fed variables the step updates (parameters, optimizer and loss-scaling state).\n\
         STATE = {}\n",
        py::list(state)
    ));
    Ok(out)
}

/// Where fed variable `v` comes from: a ZeRO shard of a source, or a block of one (with
/// micro-batches, a data input is cut per micro-batch).
fn feed_recipe(
    p: &Passes,
    program: &Program,
    v: VarId,
    staged: bool,
) -> Result<String, ExportError> {
    let serial = &p.full.program;
    if let Some((z, whole, _)) = p
        .partitioned
        .zero
        .initial_shards()
        .find(|(_, _, s)| *s == v)
    {
        return Ok(format!(
            "{{\"source\": {}, {}, \"zero\": {{\"axes\": {}, \"shard\": {}}}}}",
            py::string(&serial.var(whole).name),
            layout(&p.full.tensors[whole.index()]),
            py::ints(z.axes.iter().map(|a| a.index())),
            z.shard
        ));
    }
    if v.index() >= serial.vars().len() || !serial.var(v).kind.is_source() {
        return Err(ExportError::Plan(format!(
            "the rank program reads `{}` before any op writes it, and it is not a source \
             variable",
            program.var(v).name
        )));
    }
    let per_mb = staged
        && matches!(
            serial.var(v).kind,
            crate::ir::VarKind::Input | crate::ir::VarKind::Label
        );
    Ok(format!(
        "{{\"source\": {}, {}{}}}",
        py::string(&serial.var(v).name),
        layout(&p.full.tensors[v.index()]),
        if per_mb {
            ", \"micro_batch\": True"
        } else {
            ""
        }
    ))
}

/// The dropout masks the body asked for: seed, probability, the global shape and the
/// layout of the op's output (the mask follows each element's global index).
fn mask_feeds(
    p: &Passes,
    program: &Program,
    env: &RanksEnv,
    rank: &crate::passes::partition::RankProgram,
) -> Result<String, ExportError> {
    let mut out = String::new();
    for m in env.masks.borrow().iter() {
        let op = &program.ops()[m.op];
        let outv = op
            .output("Out")
            .first()
            .copied()
            .ok_or_else(|| ExportError::Plan(format!("dropout op{} has no Out", m.op)))?;
        let origin = rank.origin.get(outv.index()).copied().unwrap_or(outv);
        let attr = rank
            .attrs
            .get(outv.index())
            .cloned()
            .ok_or_else(|| ExportError::Plan(format!("dropout op{} has no layout", m.op)))?;
        out.push_str(&format!(
            "    {}: {{\"mask\": [{}, {}], \"global_shape\": {}, {}}},\n",
            py::string(&m.name),
            op.attr_int("seed", 0),
            py::float(op.attr_float("dropout_prob", 0.5)),
            py::ints(p.full.program.var(origin).ty.shape.iter()),
            layout(&attr)
        ));
    }
    Ok(out)
}

/// How to read serial variable `v` back from the ranks: the local variable holding it,
/// its layout at the step's end, and under ZeRO the shards to concatenate first.
pub(super) fn record(
    p: &Passes,
    rank: &crate::passes::partition::RankProgram,
    v: VarId,
    stage: usize,
) -> Result<String, ExportError> {
    let serial = &p.full.program;
    let global = py::ints(serial.var(v).ty.shape.iter());
    if let Some((z, shard)) = p.partitioned.zero.value_in_shards(v) {
        let settled = crate::passes::dist_program::DistProgram::settled(&p.full.tensors[v.index()]);
        return Ok(format!(
            "{{\"var\": {}, {}, \"global_shape\": {global}, \"stage\": {stage}, \"zero\": {{\"axes\": {}, \"numel\": {}, \"local_shape\": {}}}}}",
            py::string(&rank.program.var(shard).name),
            layout(&settled),
            py::ints(z.axes.iter().map(|a| a.index())),
            z.numel,
            py::ints(rank.program.var(v).ty.shape.iter())
        ));
    }
    let attr = rank
        .attrs
        .get(v.index())
        .ok_or_else(|| ExportError::Plan(format!("`{}` has no layout", serial.var(v).name)))?;
    Ok(format!(
        "{{\"var\": {}, {}, \"global_shape\": {global}, \"stage\": {stage}}}",
        py::string(&rank.program.var(v).name),
        layout(attr)
    ))
}

/// `RECORDS`: the loss, each parameter's gradient and each parameter.
/// The template rank program of the stage holding a variable, and the stage.
pub(super) type Holder<'a> =
    dyn Fn(VarId) -> Result<(&'a crate::passes::partition::RankProgram, usize), ExportError> + 'a;

pub(super) fn records(p: &Passes, holder: &Holder) -> Result<String, ExportError> {
    let serial = &p.full.program;
    let loss = crate::exec::run::reported_loss(p);
    let rec = |v: VarId| -> Result<String, ExportError> {
        let (rank, stage) = holder(v)?;
        record(p, rank, v, stage)
    };
    let mut out = format!(
        "# What the dump holds, and where each rank keeps its piece of it.\nRECORDS = {{\n    \"loss\": {},\n    \"grads\": [\n",
        rec(loss)?
    );
    for &(param, grad) in &p.backward.param_grads {
        out.push_str(&format!(
            "        [{}, {}],\n",
            py::string(&serial.var(param).name),
            rec(grad)?
        ));
    }
    out.push_str("    ],\n    \"params\": [\n");
    for &(param, _) in &p.backward.param_grads {
        out.push_str(&format!(
            "        [{}, {}],\n",
            py::string(&serial.var(param).name),
            rec(param)?
        ));
    }
    out.push_str("    ],\n}\n");
    Ok(out)
}
