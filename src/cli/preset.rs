//! A preset's plan: its sizes, the batch, the mesh and annotations (`--mesh`/`--shard` or
//! `--parallel`, or a published preset's default plan), and its shrunk twin.

use super::batch::BatchArgs;
use super::SizeArgs;
use crate::models::published::{self, Published};
use crate::models::{Model, ModelConfig};
use crate::plan::{parse_mesh_spec, parse_shard_spec, Plan};
use std::sync::Arc;

/// Where a plan's mesh and annotations come from: `--mesh` and `--shard`, or
/// `--parallel` (with `--shard` adding to it).
#[derive(Clone, Copy)]
pub(crate) struct MeshArgs<'a> {
    pub mesh: Option<&'a str>,
    pub shards: &'a [String],
    pub parallel: Option<&'a str>,
}

/// The layout a preset plans with: the one given, or a published preset's default plan
/// (`defaults` its shard specs) when none is.
fn default_layout<'a>(preset: &str, given: &MeshArgs<'a>, defaults: &'a [String]) -> MeshArgs<'a> {
    let none = given.mesh.is_none() && given.shards.is_empty() && given.parallel.is_none();
    if none && Published::find(preset).is_some() {
        MeshArgs {
            mesh: Some(published::DEFAULT_MESH),
            shards: defaults,
            parallel: None,
        }
    } else {
        *given
    }
}

/// Which plan of a preset to build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Size {
    /// At its sizes.
    Real,
    /// Its shrunk twin; `keep_layers` where stages will be placed by layer counts
    /// (`--pp-split`), which the twin must still have.
    Twin { keep_layers: bool },
}

/// A preset's plan, or its shrunk twin and what the twin shrank.
pub(super) fn build_plan(
    preset: &str,
    (sizes, batch): (&SizeArgs, &BatchArgs),
    layout: &MeshArgs,
    micro_batches: usize,
    size: Size,
) -> Result<(Plan, Vec<String>), String> {
    let (model, base) = Model::preset(preset).map_err(|e| e.to_string())?;
    let mut cfg = sizes.config(model, base)?;
    if let Some(global) = batch.global(&cfg)? {
        cfg.batch = global;
    }
    let global = cfg.batch;
    let defaults = published::DEFAULT_SHARDS.map(String::from).to_vec();
    let layout = &default_layout(preset, layout, &defaults);
    let built = |batch: usize| -> Result<Plan, String> {
        let program = model
            .build(&ModelConfig {
                batch,
                ..cfg.clone()
            })
            .map_err(|e| format!("preset {preset}: {e}"))?;
        add_mesh_and_shards(Plan::from_program(program), layout)
    };
    // The data-parallel degree is the whole batch's plan's (built only when it is needed).
    let derived = if batch.derives_micro_batches() {
        batch.micro_batches(global, data_parallel_degree(&built(global)?))?
    } else {
        None
    };
    let micro_batches = derived.unwrap_or(micro_batches);
    if global % micro_batches != 0 {
        return Err(format!(
            "--batch {global} must divide by --micro-batches {micro_batches} (--batch is the \
             global batch)"
        ));
    }
    let per_micro = global / micro_batches;
    let plan = built(per_micro).map(|mut p| {
        if let Some(m) = derived {
            p.options.micro_batches = m;
        }
        p
    });
    // The data-parallel degree comes from the annotations of the whole batch's plan (the
    // micro-batch's may not even divide).
    let dp = match (&plan, micro_batches > 1) {
        (Ok(p), _) => data_parallel_degree(p),
        (Err(_), true) => built(global).map_or(1, |p| data_parallel_degree(&p)),
        (Err(_), false) => 1,
    };
    // An uneven split is fine (the trailing ranks hold fewer rows); fewer rows than ranks
    // leaves a rank with nothing at all.
    if per_micro < dp {
        return Err(format!(
            "--batch {global} gives each of the {micro_batches} micro-batches {} rows, fewer \
             than the data-parallel degree ({dp}): every data-parallel rank needs a row",
            per_micro
        ));
    }
    let plan = plan?;
    let Size::Twin { keep_layers } = size else {
        return Ok((plan, Vec::new()));
    };
    let micro = ModelConfig {
        batch: per_micro,
        ..cfg.clone()
    };
    twin_plan(model, &micro, layout, plan, keep_layers)
}

/// The shrunk twin of `real` (a preset built from `cfg` with `layout`): the model at the
/// sizes `models::twin` derives for its mesh, with the same mesh, annotations and
/// options, and what it shrank.
fn twin_plan(
    model: Model,
    cfg: &ModelConfig,
    layout: &MeshArgs,
    real: Plan,
    keep_layers: bool,
) -> Result<(Plan, Vec<String>), String> {
    let devices = real.mesh().map_or(1, |m| m.size());
    // Stage boundaries by op number (`--pp-split` writes them) keep every layer.
    let stages = real
        .mesh()
        .filter(|_| !keep_layers && real.stages.is_empty())
        .map(|m| crate::dist::Stages::of(m, real.options.chunks).virtual_count());
    let (small, said) = crate::models::twin::shrink(model, cfg, devices, stages);
    let program = model
        .build(&small)
        .map_err(|e| format!("the shrunk twin: {e}"))?;
    let mut twin = add_mesh_and_shards(Plan::from_program(program), layout)?;
    twin.options = real.options;
    Ok((twin, said))
}

/// How many ways the batch is split: the mesh axes on dim 0 of the first annotated input.
fn data_parallel_degree(plan: &Plan) -> usize {
    let Some(mesh) = plan.mesh() else {
        return 1;
    };
    plan.annotations
        .iter()
        .find(|a| plan.program.var(a.var).kind == crate::ir::VarKind::Input)
        .and_then(|a| a.attr.dims.first().copied())
        .map_or(1, |axes| {
            axes.iter().map(|&ax| mesh.axis_size(ax)).product()
        })
}

pub(super) fn add_mesh_and_shards(mut plan: Plan, layout: &MeshArgs) -> Result<Plan, String> {
    let (mesh, shards) = (layout.mesh, layout.shards);
    let strategy: Vec<String>;
    let (mesh, shards) = match layout.parallel {
        None => (mesh.map(String::from), shards),
        Some(spec) => {
            let p = crate::plan::parallel::Parallel::parse(spec)
                .map_err(|e| format!("--parallel {spec}: {e}"))?;
            if plan.mesh().is_some() {
                return Err("the plan file already declares a mesh; drop --parallel".into());
            }
            // --shard names a variable to annotate differently: it replaces the strategy's.
            let named = |s: &String| s.split('=').next().unwrap_or_default().trim().to_string();
            let own: Vec<String> = shards.iter().map(named).collect();
            // With `sp`, the program gains its gather points (ordinary assign ops, printed
            // in the plan text like any other).
            plan.program = p.prepare(&plan.program);
            p.set_options(&mut plan.options);
            if let Some(note) = p.cp_choice(&plan.program) {
                eprintln!("{note}");
            }
            strategy = p
                .shard_specs(&plan.program)
                .into_iter()
                .filter(|s| !own.contains(&named(s)))
                .chain(shards.iter().cloned())
                .collect();
            (Some(p.mesh_spec()), strategy.as_slice())
        }
    };
    if let Some(spec) = mesh {
        if plan.mesh().is_some() {
            return Err("the plan file already declares a mesh; drop --mesh".into());
        }
        plan.set_mesh(Arc::new(parse_mesh_spec(&spec)?));
    }
    for spec in shards {
        let mesh = plan.mesh().cloned().ok_or("--shard needs --mesh")?;
        let ann = parse_shard_spec(spec, &plan.program, &mesh)?;
        if plan.annotation(ann.var).is_some() {
            return Err(format!("shard `{spec}`: variable is annotated twice"));
        }
        plan.annotations.push(ann);
    }
    Ok(plan)
}
