//! `shardlab export --to jax`: the plan as a self-contained JAX script (`crate::export`).

use super::PlanSource;
use crate::export::{capabilities, export_jax, Constrain, ExportMode, ExportOptions};
use crate::passes::driver::{run_passes, PassOptions};
use clap::Args;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub(crate) struct ExportArgs {
    #[command(flatten)]
    source: PlanSource,
    /// The engine to export to (jax is the one there is).
    #[arg(long, default_value = "jax")]
    to: String,
    /// gspmd: the serial program with shardings, XLA partitions it; shard_map: our per-rank
    /// programs with our collectives.
    #[arg(long, default_value = "gspmd")]
    mode: String,
    /// gspmd mode: pin layouts at the annotated tensors (annotated) or at every forward
    /// tensor (all).
    #[arg(long, default_value = "annotated")]
    constrain: String,
    /// Learning rate baked into the script's initial state (as `shardlab run --lr`).
    #[arg(long, default_value_t = 0.1)]
    lr: f64,
    #[command(flatten)]
    training: super::training::TrainingArgs,
    /// Where to write the script (`-` for stdout).
    #[arg(short = 'o', long = "output", value_name = "FILE.py")]
    output: Option<String>,
    /// Print what each mode supports and exit.
    #[arg(long)]
    list: bool,
    /// The most memory this command may allocate (bytes, or e.g. 512M, 4G); checked against
    /// an estimate before planning. Default: half the available memory.
    #[arg(long, value_name = "BYTES")]
    max_memory: Option<String>,
}

/// Runs the command.
pub(crate) fn export(args: &ExportArgs) -> Result<ExitCode, String> {
    if args.list {
        super::emit(capabilities());
        return Ok(ExitCode::SUCCESS);
    }
    if args.to != "jax" {
        return Err(format!("--to {}: the one engine is jax", args.to));
    }
    let mode = ExportMode::from_name(&args.mode)
        .ok_or_else(|| format!("--mode {}: expected gspmd or shard_map", args.mode))?;
    let constrain = match args.constrain.as_str() {
        "annotated" => Constrain::Annotated,
        "all" => Constrain::All,
        other => return Err(format!("--constrain {other}: expected annotated or all")),
    };
    if !args.lr.is_finite() {
        return Err(format!("--lr {}: expected a finite number", args.lr));
    }
    let output = args
        .output
        .as_deref()
        .ok_or("-o FILE.py is needed (or -o - for stdout)")?;
    let Some((mut plan, origin)) = args.source.resolve(args.training.micro_batches())? else {
        return Ok(ExitCode::from(1));
    };
    args.training.apply(&mut plan)?;
    let budget = super::budget::budget(&args.max_memory)?;
    if !super::budget::planning_fits(&plan, budget) {
        return Ok(ExitCode::from(1));
    }
    let pipeline = match run_passes(&plan, &PassOptions::from_plan(&plan.options)) {
        Ok(p) => p,
        Err(e) => {
            super::report_plan_error(origin.as_ref(), &plan, &e);
            return Ok(ExitCode::from(1));
        }
    };
    args.training.check_applied(&pipeline)?;
    let init = crate::exec::init::InitOptions {
        lr: args.lr,
        ..Default::default()
    };
    let opts = ExportOptions {
        mode,
        constrain,
        source: command_line(),
        init,
    };
    let script = match export_jax(&pipeline, &opts) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(1));
        }
    };
    if output == "-" {
        super::emit(&script);
    } else {
        std::fs::write(output, &script).map_err(|e| format!("{output}: {e}"))?;
        eprintln!(
            "wrote {output} ({} mode, {} lines)",
            mode.name(),
            script.lines().count()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The command line without the output file, for the script's docstring: the same plan
/// exported to two files gives the same bytes.
fn command_line() -> String {
    let mut words = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "-o" || a == "--output" {
            args.next();
        } else if !(a.starts_with("--output=") || (a.starts_with("-o") && a.len() > 2)) {
            words.push(a);
        }
    }
    format!("`shardlab {}`", words.join(" "))
}
