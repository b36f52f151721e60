//! `shardlab diff A B`: what changes between two plan files, costed on one topology.

use super::cost::DeviceArgs;
use super::options::Format;
use crate::cost::diff::diff as compare;
use crate::plan::Plan;
use clap::Args;
use serde_json::json;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub(crate) struct DiffArgs {
    /// The first plan file.
    a: String,
    /// The second plan file.
    b: String,
    #[command(flatten)]
    devices: DeviceArgs,
    /// Training flags apply to both plans (over each file's `options`).
    #[command(flatten)]
    training: super::training::TrainingArgs,
    /// The most memory this command may allocate per plan (bytes, or e.g. 512M, 4G).
    #[arg(long, value_name = "BYTES")]
    max_memory: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

/// A plan file, parsed and verified (problems reported as FILE:LINE:COL), or `None`.
fn load(file: &str) -> Option<Plan> {
    match super::read_plan(file) {
        Ok(Ok((plan, map))) => (!super::report_issues(file, &plan, &map)).then_some(plan),
        Ok(Err(_)) => None,
        Err(e) => {
            eprintln!("error: {e}");
            None
        }
    }
}

/// Compares the two plans: exit 0 whether or not they differ, 1 if either is invalid.
pub fn diff(args: &DiffArgs) -> Result<ExitCode, String> {
    let (Some(mut a), Some(mut b)) = (load(&args.a), load(&args.b)) else {
        return Ok(ExitCode::from(1));
    };
    args.training.apply(&mut a)?;
    args.training.apply(&mut b)?;
    let mut costed = Vec::new();
    for (file, plan) in [(&args.a, &a), (&args.b, &b)] {
        if plan.mesh().is_none() {
            eprintln!("{file}: the plan has no mesh");
            return Ok(ExitCode::from(1));
        }
        match args.devices.costed(plan, &args.max_memory)? {
            Ok(c) => costed.push(c),
            Err(e) => {
                eprintln!("{file}: {e}");
                return Ok(ExitCode::from(1));
            }
        }
    }
    let [(pa, ea, _), (pb, eb, _)] =
        <[_; 2]>::try_from(costed).map_err(|_| "two plans".to_string())?;
    let d = compare(&pa, &ea, &pb, &eb);
    let text = match args.format {
        Format::Text => format!(
            "diff {} -> {} (cost on {}, compute at {})\n{d}",
            args.a,
            args.b,
            ea.topology,
            ea.dtype.name()
        ),
        Format::Json => {
            let mut doc = d.json();
            doc["schema_version"] = json!(crate::report::SCHEMA_VERSION);
            doc["a"] = json!(args.a);
            doc["b"] = json!(args.b);
            doc["topology"] = json!(ea.topology);
            doc["compute_dtype"] = json!(ea.dtype.name());
            format!(
                "{}\n",
                serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?
            )
        }
    };
    super::emit(&text);
    Ok(ExitCode::SUCCESS)
}
