//! `shardlab run`: training steps serially and on every rank (threads), the losses, and
//! the verification table; `.npy` inputs and dumps.

use super::{emit, RunArgs};
use crate::exec::npy::{read_npy, write_npy};
use crate::exec::run::{run_distributed, run_serial, Log, RunOptions};
use crate::exec::tensor::Tensor;
use crate::exec::verify::{verify, Check};
use crate::passes::pipeline::{run_pipeline, PipelineOptions};
use std::collections::HashMap;
use std::io::IsTerminal;
use std::process::ExitCode;

/// Loads `<var>.npy` for every source variable found in `dir`.
fn load_inputs(dir: &str, program: &crate::ir::Program) -> Result<HashMap<String, Tensor>, String> {
    let mut feeds = HashMap::new();
    std::fs::read_dir(dir).map_err(|e| format!("--inputs {dir}: {e}"))?;
    for v in program.vars().iter().filter(|v| v.kind.is_source()) {
        let path = std::path::Path::new(dir).join(format!("{}.npy", v.name));
        if !path.exists() {
            continue;
        }
        let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let t = read_npy(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        feeds.insert(v.name.to_string(), t);
    }
    Ok(feeds)
}

fn dump(dir: &std::path::Path, log: &Log) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let write = |name: String, t: &Tensor| -> Result<(), String> {
        let path = dir.join(name);
        std::fs::write(&path, write_npy(t)?).map_err(|e| format!("{}: {e}", path.display()))
    };
    if let Some(l) = &log.first_loss {
        write("loss.npy".into(), l)?;
    }
    for r in &log.grads {
        if let Some(g) = r.value() {
            write(format!("grad.{}.npy", r.name), g)?;
        }
    }
    for r in &log.params {
        if let Some(p) = r.value() {
            write(format!("{}.npy", r.name), p)?;
        }
    }
    Ok(())
}

/// The verification table: each tensor's largest difference from the serial value against
/// its tolerance, and between its copies (replicas must be identical).
fn table(checks: &[Check]) -> String {
    let width = checks
        .iter()
        .map(|c| c.tensor.len())
        .max()
        .unwrap_or(6)
        .clamp(6, 80);
    let mut out = format!(
        "  {:width$}  {:>12}  {:>12}  {:>6}  {:>12}  result\n",
        "tensor", "max |diff|", "tolerance", "copies", "replica diff"
    );
    for c in checks {
        out.push_str(&format!(
            "  {:width$}  {:>12.3e}  {:>12.3e}  {:>6}  {:>12.3e}  {}\n",
            c.tensor,
            c.max_abs_diff,
            c.tolerance,
            c.copies,
            c.replica_diff,
            if c.pass { "pass" } else { "FAIL" }
        ));
    }
    out
}

/// Runs the command.
pub fn run(args: &RunArgs) -> Result<ExitCode, String> {
    if args.steps == 0 || args.steps > 100_000 {
        return Err(format!("--steps {}: expected 1 to 100000", args.steps));
    }
    if !(args.lr.is_finite()) {
        return Err(format!("--lr {}: expected a finite number", args.lr));
    }
    if args.dump.as_deref().is_some_and(|d| d.trim().is_empty()) {
        return Err("--dump needs a directory name".into());
    }
    let Some(mut plan) = args.source.resolve(args.training.micro_batches())? else {
        return Ok(ExitCode::from(1));
    };
    args.training.apply(&mut plan)?;
    let budget = super::budget::budget(&args.max_memory)?;
    if !super::budget::planning_fits(&plan, budget) {
        return Ok(ExitCode::from(1));
    }
    let opts = PipelineOptions::from_plan(&plan.options);
    let planned = match run_pipeline(&plan, &opts) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(1));
        }
    };
    let precision = args.precision.precision();
    let pipeline = crate::exec::precision::in_precision(&planned, precision);
    let pipeline = pipeline.as_ref();
    let needed = crate::exec::run::estimated_run_bytes(pipeline);
    if let Err(e) = super::budget::check("running", needed, budget) {
        eprintln!("error: {e}");
        return Ok(ExitCode::from(1));
    }
    let mut run_opts = RunOptions {
        steps: 1,
        ..Default::default()
    };
    run_opts.init.lr = args.lr;
    if let Some(dir) = &args.inputs {
        run_opts.feeds = load_inputs(dir, &pipeline.full.program)?;
    }
    // Step by step, so a long run can show progress on a terminal.
    let progress = std::io::stderr().is_terminal() && args.steps > 1;
    run_opts.steps = args.steps;
    if progress {
        eprint!(
            "running {} steps serially and on {} ranks...",
            args.steps,
            pipeline.partitioned.ranks.len()
        );
    }
    let serial = run_serial(pipeline, &run_opts).map_err(|e| e.to_string());
    let dist = serial
        .as_ref()
        .ok()
        .map(|_| run_distributed(pipeline, &run_opts, true).map_err(|e| e.to_string()));
    if progress {
        eprintln!(" done");
    }
    let (serial, dist) = match (serial, dist) {
        (Ok(s), Some(Ok(d))) => (s, d),
        (Err(e), _) | (_, Some(Err(e))) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(1));
        }
        (Ok(_), None) => return Err("internal error: no distributed run".into()),
    };
    let checks = verify(&serial, &dist);
    if let Some(dir) = &args.dump {
        dump(&std::path::Path::new(dir).join("serial"), &serial)?;
        dump(&std::path::Path::new(dir).join("distributed"), &dist)?;
    }
    let all_pass = checks.iter().all(|c| c.pass);
    if args.format == super::options::Format::Json {
        let json = serde_json::json!({
            "ranks": pipeline.partitioned.ranks.len(),
            "precision": precision.name(),
            "serial_losses": serial.losses,
            "distributed_losses": dist.losses,
            "max_replica_difference": dist.replica_difference(),
            "checks": checks,
            "pass": all_pass,
        });
        emit(&format!(
            "{}\n",
            serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?
        ));
    } else {
        let mut out = format!(
            "mesh {}: {} ranks, {} steps\n",
            pipeline.full.mesh,
            pipeline.partitioned.ranks.len(),
            args.steps
        );
        out.push_str(&format!(
            "  {:>4}  {:>14}  {:>14}\n",
            "step", "serial loss", "distributed"
        ));
        for (i, (a, b)) in serial.losses.iter().zip(&dist.losses).enumerate() {
            out.push_str(&format!("  {:>4}  {a:>14.8}  {b:>14.8}\n", i + 1));
        }
        out.push_str(&format!(
            "\nverification (distributed vs serial, {}):\n",
            match precision {
                crate::exec::precision::Precision::F64 => "computed in f64",
                crate::exec::precision::Precision::Program => "in the program's dtypes",
            }
        ));
        out.push_str(&table(&checks));
        out.push_str(&format!(
            "\n{}: {} of {} tensors within tolerance\n",
            if all_pass { "PASS" } else { "FAIL" },
            checks.iter().filter(|c| c.pass).count(),
            checks.len()
        ));
        emit(&out);
    }
    Ok(if all_pass {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
