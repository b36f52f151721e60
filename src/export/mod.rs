//! A plan as one self-contained JAX script (`shardlab export --to jax`): pure text from a
//! planned [`Passes`], no I/O. Two modes:
//!
//! - `gspmd` (`gspmd.rs`): the serial program as `jax.numpy` code, the plan's layouts as
//!   `NamedSharding`s and `with_sharding_constraint`s, `jax.grad`, the plan's optimizer
//!   ops, one `jax.jit` step: XLA's partitioner (Shardy in JAX 0.10) decides the
//!   communication, which is the point: a second planner to compare with ours.
//! - `shard_map` (`shard_map.rs`): every rank's program, op for op, inside
//!   `jax.shard_map`, our collectives as `lax.psum`/`all_gather`/`psum_scatter`/
//!   `all_to_all` over the mesh axes of their groups: our partitioned programs run by XLA.
//!
//! Pipeline plans run stage by stage (`pipeline.rs`): one jitted function per stage and
//! job on the stage's sub-mesh, activations and gradients moved between stages with
//! `jax.device_put` (the plan's send/recv), micro-batches in order.
//!
//! The script's runtime (`prelude.py`) carries ShardLab's op semantics, its seeded initial
//! values, and the gather of each rank's piece, so the script needs only `jax` and `numpy`.

mod gspmd;
mod ops;
mod pipeline;
mod py;
mod ranks;
mod shard_map;
mod sources;

use crate::passes::driver::Passes;
use std::fmt::Write as _;

/// How the script expresses the plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ExportMode {
    Gspmd,
    ShardMap,
}

impl ExportMode {
    pub fn name(self) -> &'static str {
        match self {
            ExportMode::Gspmd => "gspmd",
            ExportMode::ShardMap => "shard_map",
        }
    }

    pub fn from_name(name: &str) -> Option<ExportMode> {
        [ExportMode::Gspmd, ExportMode::ShardMap]
            .into_iter()
            .find(|m| m.name() == name)
    }
}

/// Where `gspmd` mode pins layouts with `with_sharding_constraint`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Constrain {
    /// The tensors the plan annotates (the user's choices).
    Annotated,
    /// Every forward tensor, at its completed layout.
    All,
}

/// What to export.
#[derive(Clone, Debug, PartialEq)]
pub struct ExportOptions {
    pub mode: ExportMode,
    pub constrain: Constrain,
    /// What produced the plan, for the script's docstring (e.g. `--preset gpt --mesh 2x4`).
    pub source: String,
    /// The learning rate and seed the initial values use (`shardlab run`'s).
    pub init: crate::exec::init::InitOptions,
}

/// Why a plan cannot be exported.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ExportError {
    #[error("op{index} ({ty}) cannot be exported: {message}")]
    Op {
        index: usize,
        ty: String,
        message: String,
    },
    #[error("{0}")]
    Plan(String),
}

/// What each mode supports, for `shardlab export --list`.
pub fn capabilities() -> &'static str {
    include_str!("capabilities.txt")
}

/// The script for `p`.
pub fn export_jax(p: &Passes, opts: &ExportOptions) -> Result<String, ExportError> {
    if !p.is_fully_partitioned() {
        return Err(ExportError::Plan(
            "only some ranks were partitioned; export needs every rank".into(),
        ));
    }
    if let Some(why) = uneven(p).filter(|_| opts.mode == ExportMode::ShardMap || p.is_pipelined()) {
        return Err(ExportError::Plan(format!(
            "{why}: uneven shards export in gspmd mode without a pipeline only (XLA needs even \
             shards at a jit boundary, so gspmd pads them outside jit and slices inside; a \
             shard_map body is one program for every rank, whose shapes would differ)"
        )));
    }
    let body = match (opts.mode, p.is_pipelined()) {
        (ExportMode::ShardMap, false) => shard_map::script(p)?,
        (ExportMode::ShardMap, true) => pipeline::shard_map_script(p)?,
        (ExportMode::Gspmd, false) => gspmd::script(p, opts.constrain)?,
        (ExportMode::Gspmd, true) => pipeline::gspmd_script(p, opts.constrain)?,
    };
    // The plan first, op by op, then the runtime: nothing in the plan's part runs at import,
    // so the prelude's names are defined before anything calls them.
    let mut out = header(p, opts);
    out.push_str("# ---------------------------------------------------------------------------------------\n");
    out.push_str("# The plan\n");
    out.push_str("# ---------------------------------------------------------------------------------------\n");
    let _ = writeln!(
        out,
        "PLAN_DTYPE = {}",
        py::string(
            p.full
                .program
                .vars()
                .iter()
                .find(|v| v.ty.dtype != crate::ir::DType::I64)
                .map_or("f32", |v| v.ty.dtype.name())
        )
    );
    let _ = writeln!(out, "SEED = {}", opts.init.seed);
    let _ = writeln!(out, "MODE = {}", py::string(opts.mode.name()));
    out.push_str(&sources::table(p, &opts.init)?);
    out.push_str(&body);
    out.push_str("\n\n");
    out.push_str(include_str!("prelude.py"));
    out.push_str("\n\nif __name__ == \"__main__\":\n    main(sys.argv[1:])\n");
    Ok(out)
}

/// Why the plan has shapes that depend on the rank, if it has: a variable split unevenly,
/// or a padded collective.
fn uneven(p: &Passes) -> Option<String> {
    if let Some(v) = p.full.uneven_var() {
        return Some(format!(
            "`{}` is split unevenly",
            p.full.program.var(v).name
        ));
    }
    let padded = p
        .partitioned
        .ranks
        .iter()
        .flat_map(|r| r.program.ops())
        .any(|o| o.ty == crate::ir::OpType::Pad);
    padded.then(|| "a collective runs on padded shards".to_string())
}

/// The docstring and the device flag, which must come before `jax` is imported.
fn header(p: &Passes, opts: &ExportOptions) -> String {
    let mesh = &p.full.mesh;
    let devices = mesh.size();
    let o = &p.plan.options;
    let mut features = vec![format!("optimizer {}", o.optimizer.name())];
    if o.amp {
        features.push("AMP loss scaling".into());
    }
    if let Some(c) = o.clip_norm {
        features.push(format!("global-norm clipping to {c}"));
    }
    if o.zero > 0 {
        features.push(format!("ZeRO stage {}", o.zero));
    }
    if o.megatron_sums {
        features.push("Megatron sums".into());
    }
    if p.is_pipelined() {
        features.push(format!(
            "{} pipeline stage(s), {} micro-batches (run in order)",
            p.stages.stages,
            p.micro_batches()
        ));
    }
    format!(
        r#"#!/usr/bin/env python3
"""ShardLab plan exported to JAX ({mode} mode): mesh {mesh}, {features}.

Generated by `shardlab export --to jax --mode {mode}` ({version}) from {source}.
Needs only jax and numpy. Run:

    python THIS.py [--inputs DIR] --dump DIR [--steps N] [--dtype f32|f64]

It reads the .npy names `shardlab run --inputs` reads and writes what `shardlab run
--dump` writes (loss.npy and grad.<param>.npy of the first step, <param>.npy after the
last), then prints one JSON line: the losses and XLA's collectives per kind, counted from
the compiled HLO. Without --inputs it starts from ShardLab's seeded values.

On several hosts (gspmd and shard_map modes), start it once per host, each with its own
--process-id and the same coordinator (host 0's address and a free port):

    python THIS.py --coordinator HOST0:PORT --num-processes 2 --process-id 0 --dump DIR
    python THIS.py --coordinator HOST0:PORT --num-processes 2 --process-id 1 --dump DIR

Each process then holds {devices} / N devices (simulated on CPU, with gloo collectives).
"""
import os
import sys

# The mesh needs {devices} devices. On a machine with fewer, XLA's CPU backend simulates
# them; the flag must be set before jax is first imported. With --num-processes N each
# process holds N_DEVICES / N of them.
N_DEVICES = {devices}
N_PROCESSES = int(sys.argv[sys.argv.index("--num-processes") + 1]) if "--num-processes" in sys.argv[:-1] else 1
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "")
        + f" --xla_force_host_platform_device_count={{N_DEVICES // max(1, N_PROCESSES)}}"
    ).strip()
    SIMULATED = True
else:
    SIMULATED = False

"#,
        mode = opts.mode.name(),
        mesh = mesh,
        features = features.join(", "),
        version = concat!("shardlab ", env!("CARGO_PKG_VERSION")),
        source = opts.source.replace("\"\"\"", "'''").replace('\\', "/"),
    )
}
