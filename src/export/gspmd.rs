//! `gspmd` mode: the plan as a JAX user would write it. The serial program's forward ops
//! are the loss function, `jax.value_and_grad` is the backward pass, the serial program's
//! optimizer-phase ops (AMP, clipping, the update) follow, and the plan's completed layouts
//! become `NamedSharding`s: in- and out-shardings of every variable the step reads, and
//! `with_sharding_constraint` at the annotated tensors (or every forward tensor with
//! `Constrain::All`). XLA's partitioner chooses the communication.

use super::ops::{emit, Env};
use super::py;
use super::{Constrain, ExportError};
use crate::dist::{ProcessMesh, TensorDistAttr};
use crate::ir::{OpRole, Program, VarId};
use crate::passes::driver::Passes;
use std::cell::RefCell;
use std::collections::HashSet;

/// The serial program as an [`Env`]: no rank-dependent attributes and no collectives.
pub(super) struct SerialEnv<'a> {
    pub program: &'a Program,
    pub masks: RefCell<Vec<(String, usize)>>,
}

impl Env for SerialEnv<'_> {
    fn program(&self) -> &Program {
        self.program
    }

    fn rank_int(&self, op: usize, attr: &str, item: usize) -> Result<String, ExportError> {
        let o = &self.program.ops()[op];
        let value = o
            .attr_ints(attr)
            .and_then(|v| v.get(item).copied())
            .unwrap_or_else(|| o.attr_int(attr, 0));
        Ok(value.to_string())
    }

    fn axes(&self, op: usize) -> Result<String, ExportError> {
        Err(ExportError::Op {
            index: op,
            ty: self.program.ops()[op].ty.to_string(),
            message: "a collective in the serial program".into(),
        })
    }

    fn mask(&self, op: usize) -> Result<String, ExportError> {
        let name = format!("__dropout_mask_op{op}");
        self.masks.borrow_mut().push((name.clone(), op));
        Ok(format!("v[{}]", py::string(&name)))
    }
}

/// A layout as a `PartitionSpec`'s entries: `None`, `"dp"` or `("dp", "mp")` per dim;
/// partial values are not a sharding (XLA decides where to reduce them).
pub(super) fn spec(
    attr: &TensorDistAttr,
    mesh: &ProcessMesh,
    extra: &[(usize, Vec<usize>)],
) -> String {
    let mut dims = attr.layout.axis_lists();
    for (d, axes) in extra {
        if let Some(list) = dims.get_mut(*d) {
            list.extend(axes);
        }
    }
    let entries = dims.iter().map(|axes| match axes.len() {
        0 => "None".to_string(),
        1 => py::string(&mesh.dim_names()[axes[0]]),
        _ => py::tuple(axes.iter().map(|&a| py::string(&mesh.dim_names()[a]))),
    });
    py::tuple(entries)
}

/// ZeRO in gspmd terms: the axes over which a parameter's optimizer state (and from stage
/// 3 the parameter itself) is sharded, placed on the first dim they divide evenly.
fn zero_extra(p: &Passes, param: VarId) -> Vec<(usize, Vec<usize>)> {
    let Some(z) = p.partitioned.zero.params.iter().find(|z| z.param == param) else {
        return Vec::new();
    };
    let mesh = &p.full.mesh;
    let attr = &p.full.tensors[param.index()];
    let shape = &p.full.program.var(param).ty.shape;
    let n: usize = z.axes.iter().map(|&a| mesh.axis_size(a)).product();
    let lists = attr.layout.axis_lists();
    for (d, &size) in shape.iter().enumerate() {
        let have: usize = lists
            .get(d)
            .map_or(1, |l| l.iter().map(|&a| mesh.shape()[a]).product());
        if size % (have * n) == 0
            && lists
                .get(d)
                .is_none_or(|l| z.axes.iter().all(|a| !l.contains(&a.index())))
        {
            return vec![(d, z.axes.iter().map(|a| a.index()).collect())];
        }
    }
    Vec::new()
}

/// The script's plan part.
pub fn script(p: &Passes, constrain: Constrain) -> Result<String, ExportError> {
    let program = &p.full.program;
    let mesh = &p.full.mesh;
    let first_backward = p.backward.first_backward_op;
    let forward: Vec<usize> = (0..first_backward.min(program.ops().len())).collect();
    let optimizer: Vec<usize> = (first_backward..program.ops().len())
        .filter(|&i| program.ops()[i].role == OpRole::Optimize)
        .collect();
    let env = SerialEnv {
        program,
        masks: RefCell::new(Vec::new()),
    };
    let pinned = pinned(p, constrain);
    let mut body = String::from(
        "\n\ndef forward(v):\n    \"\"\"The forward ops of the serial program (with the plan's layouts pinned).\"\"\"\n",
    );
    body.push_str(&forward_lines(p, &env, &forward, &pinned)?);
    body.push_str("    return v\n\n\ndef optimizer(v):\n    \"\"\"The serial program's optimizer-phase ops: loss scaling, clipping, the update.\"\"\"\n");
    for &i in &optimizer {
        for line in emit(&env, i, &program.ops()[i])? {
            body.push_str(&format!("    {line}\n"));
        }
    }
    body.push_str("    return v\n");
    let mut out = format!(
        "MESH_SHAPE = {}\nAXES = {}\nRANKS = {}\n",
        py::ints(mesh.shape().iter()),
        py::tuple(mesh.dim_names().iter().map(|n| py::string(n))),
        py::ints(mesh.process_ids().iter()),
    );
    out.push_str(&tables(p, &forward, &optimizer, &env)?);
    out.push_str(&body);
    out.push_str("\n\ndef main(argv):\n    run_gspmd(parse_args(argv))\n");
    Ok(out)
}

/// The statements of forward ops `ops`, each pinned output followed by its constraint.
pub(super) fn forward_lines(
    p: &Passes,
    env: &SerialEnv,
    ops: &[usize],
    pinned: &HashSet<VarId>,
) -> Result<String, ExportError> {
    let program = &p.full.program;
    let mut body = String::new();
    for &i in ops {
        for line in emit(env, i, &program.ops()[i])? {
            body.push_str(&format!("    {line}\n"));
        }
        for v in program.ops()[i].all_outputs() {
            if pinned.contains(&v) {
                body.push_str(&format!(
                    "    v[{0}] = constrain(v[{0}], {1})\n",
                    py::string(&program.var(v).name),
                    spec(&p.full.tensors[v.index()], &p.full.mesh, &[])
                ));
            }
        }
    }
    Ok(body)
}

/// The tensors `with_sharding_constraint` pins: the annotated ones the forward pass
/// computes, or every forward output with a layout a `PartitionSpec` can say.
pub(super) fn pinned(p: &Passes, constrain: Constrain) -> HashSet<VarId> {
    let program = &p.full.program;
    match constrain {
        Constrain::Annotated => p.plan.annotations.iter().map(|a| a.var).collect(),
        Constrain::All => program
            .ops()
            .iter()
            .take(p.backward.first_backward_op)
            .flat_map(|op| op.all_outputs().collect::<Vec<_>>())
            .filter(|v| !p.full.tensors[v.index()].layout.is_partial())
            .collect(),
    }
}

/// `PARAMS`, `STATE`, `CONSTS` (with their shardings), `LOSS`, `REPORTED`, `GRADS`.
pub(super) fn tables(
    p: &Passes,
    forward: &[usize],
    optimizer: &[usize],
    env: &SerialEnv,
) -> Result<String, ExportError> {
    let program = &p.full.program;
    let mesh = &p.full.mesh;
    let (state, consts) = state_and_consts(p, forward, optimizer)?;
    let entries = |vs: &[VarId]| -> String {
        vs.iter()
            .map(|&v| {
                format!(
                    "    {}: {},\n",
                    py::string(&program.var(v).name),
                    sharding(p, v)
                )
            })
            .collect()
    };
    let mut out = format!(
        "# Each variable the step reads, and its PartitionSpec (ZeRO shards optimizer state and, at\n\
         # stage 3, parameters over the data-parallel axes).\nSTATE = {{\n{}}}\nCONSTS = {{\n{}",
        entries(&state),
        entries(&consts)
    );
    let masks = env.masks.borrow();
    let mut mask_table = String::new();
    for (name, op) in masks.iter() {
        let o = &program.ops()[*op];
        let outv = o.output("Out").first().copied().unwrap_or(VarId(0));
        out.push_str(&format!(
            "    {}: {},\n",
            py::string(name),
            spec(&p.full.tensors[outv.index()], mesh, &[])
        ));
        mask_table.push_str(&format!(
            "    {}: [{}, {}, {}],\n",
            py::string(name),
            o.attr_int("seed", 0),
            py::float(o.attr_float("dropout_prob", 0.5)),
            py::ints(program.var(outv).ty.shape.iter())
        ));
    }
    out.push_str(&format!("}}\nMASKS = {{\n{mask_table}}}\n"));
    out.push_str(&format!(
        "PARAMS = {}\nLOSS = {}\nREPORTED = {}\nGRADS = {{\n",
        py::list(
            p.backward
                .param_grads
                .iter()
                .map(|&(v, _)| py::string(&program.var(v).name))
        ),
        py::string(&program.var(p.backward.loss).name),
        py::string(&program.var(crate::exec::run::reported_loss(p)).name),
    ));
    for &(param, grad) in &p.backward.param_grads {
        out.push_str(&format!(
            "    {}: {},\n",
            py::string(&program.var(param).name),
            py::string(&program.var(grad).name)
        ));
    }
    out.push_str("}\n");
    Ok(out)
}

/// The variables the step reads before computing them, split into state (what the
/// optimizer writes, and every parameter) and constants.
fn state_and_consts(
    p: &Passes,
    forward: &[usize],
    optimizer: &[usize],
) -> Result<(Vec<VarId>, Vec<VarId>), ExportError> {
    let program = &p.full.program;
    let mut ops: Vec<usize> = forward.to_vec();
    ops.extend(optimizer);
    let written: HashSet<VarId> = optimizer
        .iter()
        .flat_map(|&i| program.ops()[i].all_outputs().collect::<Vec<_>>())
        .collect();
    let grads: HashSet<VarId> = p.backward.param_grads.iter().map(|&(_, g)| g).collect();
    let params: Vec<VarId> = p.backward.param_grads.iter().map(|&(v, _)| v).collect();
    let (mut state, mut consts) = (Vec::new(), Vec::new());
    for v in super::shard_map::read_first(program, &ops)
        .into_iter()
        .filter(|v| !grads.contains(v))
    {
        let var = program.var(v);
        if !var.kind.is_source() {
            return Err(ExportError::Plan(format!(
                "the step reads `{}` before computing it, and it is not a source variable",
                var.name
            )));
        }
        if written.contains(&v) || params.contains(&v) {
            state.push(v);
        } else {
            consts.push(v);
        }
    }
    for &v in &params {
        if !state.contains(&v) {
            state.push(v);
        }
    }
    Ok((state, consts))
}

/// A variable's `PartitionSpec`: its completed layout, plus ZeRO's data-parallel axes for
/// optimizer state (and, at stage 3, the parameter).
fn sharding(p: &Passes, v: VarId) -> String {
    let zero_of = p
        .partitioned
        .zero
        .params
        .iter()
        .find(|z| z.param == v || z.states.contains(&v));
    let extra = match zero_of {
        Some(z) if z.param != v || p.plan.options.zero >= 3 => zero_extra(p, z.param),
        Some(_) | None => Vec::new(),
    };
    spec(&p.full.tensors[v.index()], &p.full.mesh, &extra)
}
