//! `shardlab run`: training steps serially and on every rank (threads), the losses, and
//! the verification table; `.npy` inputs and dumps.

use super::{emit, RunArgs};
use crate::exec::npy::{read_npy, write_npy};
use crate::exec::run::{run_distributed, run_serial, Log, RunOptions};
use crate::exec::tensor::Tensor;
use crate::exec::verify::{verify, Check};
use crate::passes::driver::{run_passes, PassOptions};
use std::collections::HashMap;
use std::io::IsTerminal;
use std::process::ExitCode;

/// Loads `<var>.npy` for every source variable found in `dir`.
/// Reads `<var>.npy` from `dir` for each source variable found there. The outer error is a
/// usage error (no such directory); the inner one invalid input (a file that is not a
/// `.npy`, is truncated, or is larger than its variable can be), named with its path.
/// Each file is read only up to what its variable can hold: `micro_batches` × its elements
/// at 8 bytes each, plus a header.
fn load_inputs(
    dir: &str,
    program: &crate::ir::Program,
    micro_batches: usize,
) -> Result<Result<HashMap<String, Tensor>, String>, String> {
    let mut feeds = HashMap::new();
    std::fs::read_dir(dir).map_err(|e| format!("--inputs {dir}: {e}"))?;
    for v in program.vars().iter().filter(|v| v.kind.is_source()) {
        let path = std::path::Path::new(dir).join(format!("{}.npy", v.name));
        if !path.exists() {
            continue;
        }
        let data =
            v.ty.numel()
                .saturating_mul(8)
                .saturating_mul(micro_batches as u64);
        let limit = data.saturating_add(super::files::NPY_HEADER_LIMIT);
        let bytes = match super::files::read_limited(&path, limit) {
            Ok(bytes) => bytes,
            Err(super::files::ReadError::Io(e)) => {
                return Ok(Err(format!("{}: cannot read: {e}", path.display())))
            }
            Err(super::files::ReadError::TooLarge { limit }) => {
                return Ok(Err(format!(
                    "{}: larger than {limit} bytes, more than `{}` ({} elements{}) can hold \
                     with a header",
                    path.display(),
                    v.name,
                    v.ty.numel(),
                    if micro_batches > 1 {
                        format!(" per micro-batch, {micro_batches} micro-batches")
                    } else {
                        String::new()
                    }
                )))
            }
        };
        let t = match read_npy(&bytes) {
            Ok(t) => t,
            Err(e) => return Ok(Err(format!("{}: {e}", path.display()))),
        };
        if let Some(i) = t.to_f64().iter().position(|x| !x.is_finite()) {
            return Ok(Err(format!(
                "{}: element {i} is {}: inputs must be finite (the serial reference would be \
                 NaN, and nothing could be verified)",
                path.display(),
                t.to_f64()[i]
            )));
        }
        feeds.insert(v.name.to_string(), t);
    }
    Ok(Ok(feeds))
}

/// The text report: the losses by step, the verification table and the verdict, with why
/// the gradients differ where an option makes them (`--no-grad-scale`).
fn text_report(
    args: &RunArgs,
    pipeline: &crate::passes::driver::Passes,
    serial: &Log,
    dist: &Log,
    checks: &[Check],
) -> String {
    let precision = args.precision.precision();
    let all_pass = checks.iter().all(|c| c.pass);
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
    out.push_str(&table(checks));
    out.push_str(&format!(
        "\n{}: {} of {} tensors within tolerance\n",
        if all_pass { "PASS" } else { "FAIL" },
        checks.iter().filter(|c| c.pass).count(),
        checks.len()
    ));
    if !all_pass && pipeline.plan.options.no_grad_scale {
        if let Some(ratio) = gradient_ratio(serial, dist) {
            out.push_str(&format!(
                "the gradients are {ratio:.3}× serial, as `--no-grad-scale` makes them: it \
                 skips the data-parallel 1/N scale after the gradients' sum\n"
            ));
        }
    }
    out
}

/// The ratio of the distributed gradients to the serial ones, where one ratio holds for
/// every gradient element that is not near zero (within 1e-6), else `None`.
fn gradient_ratio(serial: &Log, dist: &Log) -> Option<f64> {
    let mut ratio: Option<f64> = None;
    for (s, d) in serial.grads.iter().zip(&dist.grads) {
        let (s, d) = (s.value()?.to_f64(), d.value()?.to_f64());
        let largest = s.iter().fold(0.0f64, |a, x| a.max(x.abs()));
        for (a, b) in s.iter().zip(&d) {
            if a.abs() <= 1e-3 * largest || *a == 0.0 {
                continue;
            }
            let r = b / a;
            match ratio {
                None => ratio = Some(r),
                Some(q) if (q - r).abs() <= 1e-6 * q.abs() => {}
                Some(_) => return None,
            }
        }
    }
    ratio
}

/// The serial run is the reference: where it is not finite itself (inputs with NaN or
/// inf, a learning rate or clip norm that overflows), no distributed difference means
/// anything, and the table would blame the distributed run. Names the first value that is
/// not finite.
///
/// Under AMP an overflowing step is expected and handled (its loss and gradients are inf,
/// the update is skipped), so only the parameters must stay finite.
fn serial_finite(log: &Log, amp: bool) -> Result<(), String> {
    if let Some((step, loss)) = log
        .losses
        .iter()
        .enumerate()
        .find(|(_, l)| !amp && !l.is_finite())
    {
        return Err(format!(
            "the serial run's loss is {loss} at step {}: the model itself does not compute \
             a finite value with these inputs and options (check --inputs, --lr and \
             --clip-norm); the distributed run is not compared",
            step + 1
        ));
    }
    let not_finite = |r: &&crate::exec::run::Record| {
        r.value()
            .is_some_and(|t| t.to_f64().iter().any(|x| !x.is_finite()))
    };
    let checked: &[(&str, &Vec<crate::exec::run::Record>)] = if amp {
        &[("parameter", &log.params)]
    } else {
        &[("gradient", &log.grads), ("parameter", &log.params)]
    };
    for &(what, records) in checked {
        if let Some(r) = records.iter().find(not_finite) {
            return Err(format!(
                "the serial run's {what} `{}` is not finite: the model itself overflows with \
                 these inputs and options (check --inputs, --lr and --clip-norm); the \
                 distributed run is not compared",
                r.name
            ));
        }
    }
    Ok(())
}

fn dump(dir: &std::path::Path, log: &Log) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let write = |name: String, t: &Tensor| -> Result<(), String> {
        let path = dir.join(name);
        std::fs::write(&path, write_npy(t).map_err(|e| e.to_string())?)
            .map_err(|e| format!("{}: {e}", path.display()))
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
        if let Some(note) = &c.note {
            out.push_str(&format!(
                "  {:width$}  {:>12}  {:>12}  {:>6}  {:>12}  {}\n      {note}\n",
                c.tensor,
                "-",
                "-",
                c.copies,
                "-",
                if c.pass { "pass" } else { "FAIL" }
            ));
            continue;
        }
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
/// The plan `run` executes: a published preset's shrunk twin (its real size does not fit in
/// memory; said on stderr), else the plan as given.
fn resolve_or_twin(
    args: &RunArgs,
) -> Result<Option<(crate::plan::Plan, Option<super::Origin>)>, String> {
    let keep_layers = args.training.places_stages_by_layer();
    let Some((plan, said)) = args
        .source
        .resolve_twin(args.training.micro_batches(), keep_layers)?
    else {
        return args.source.resolve(args.training.micro_batches());
    };
    if let Some(note) = crate::models::twin::describe(&said) {
        eprintln!("{note} (docs/cli.md)");
    }
    Ok(Some((plan, None)))
}

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
    let Some((mut plan, origin)) = resolve_or_twin(args)? else {
        return Ok(ExitCode::from(1));
    };
    args.training.apply(&mut plan)?;
    let budget = super::budget::budget(&args.max_memory)?;
    if !super::budget::planning_fits(&plan, budget) {
        return Ok(ExitCode::from(1));
    }
    let opts = PassOptions::from_plan(&plan.options);
    let planned = match run_passes(&plan, &opts) {
        Ok(p) => p,
        Err(e) => {
            super::report_plan_error(origin.as_ref(), &plan, &e);
            return Ok(ExitCode::from(1));
        }
    };
    args.training.check_applied(&planned)?;
    let precision = args.precision.precision();
    let pipeline = crate::exec::precision::in_precision(&planned, precision);
    let pipeline = pipeline.as_ref();
    let needed = crate::exec::run_memory::estimated_run_bytes(pipeline);
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
        match load_inputs(dir, &pipeline.full.program, pipeline.micro_batches())? {
            Ok(feeds) => run_opts.feeds = feeds,
            Err(e) => {
                eprintln!("error: {e}");
                return Ok(ExitCode::from(1));
            }
        }
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
    let serial = run_serial(pipeline, &run_opts)
        .map_err(|e| e.to_string())
        .and_then(|log| serial_finite(&log, pipeline.plan.options.amp).map(|()| log));
    let dist = serial.as_ref().ok().map(|_| {
        let threads = pipeline.partitioned.ranks.len() <= crate::exec::run::THREADED_RANKS_MAX;
        run_distributed(pipeline, &run_opts, threads).map_err(|e| e.to_string())
    });
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
            "memory_estimate_bytes": crate::exec::run_memory::estimated_run_bytes(pipeline),
            "checks": checks,
            "pass": all_pass,
        });
        emit(&format!(
            "{}\n",
            serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?
        ));
    } else {
        emit(&text_report(args, pipeline, &serial, &dist, &checks));
    }
    Ok(if all_pass {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
