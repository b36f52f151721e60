//! `shardlab suggest`: search a preset model's plans on N devices and print the cost table
//! of the best, the reason the winner won, and the winner's plan (`--out`).

use super::options::{Format, OptimizerName};
use super::SizeArgs;
use crate::cost::device::Topology;
use crate::models::Model;
use crate::plan::PlanOptions;
use crate::suggest::evaluate::Problem;
use crate::suggest::{report, Search};
use clap::Args;
use std::process::ExitCode;

/// The most threads `--topology cpu` plans for (each candidate plans every rank).
const MAX_CPU_DEVICES: usize = 1024;

#[derive(Args, Debug)]
pub(crate) struct SuggestArgs {
    /// A plan file whose program is a preset model (its plan is priced beside the search's,
    /// as "your plan"). Or use --preset.
    file: Option<String>,
    /// A preset model: mlp, mlp_mse, gpt, embedding_lm, gpt_lm or llama, or a published one:
    /// gpt2-small, gpt2-xl, gpt3-1.3b, gpt3-13b, gpt3-175b, llama3-8b, llama3-70b,
    /// llama3-405b (docs/cli.md).
    #[arg(long, conflicts_with = "file")]
    preset: Option<String>,
    #[command(flatten)]
    sizes: SizeArgs,
    /// How many devices to plan for (default: all of the topology's; required with cpu).
    #[arg(long)]
    devices: Option<usize>,
    /// The devices: cpu (this machine, measured), or a cluster of 8-GPU nodes, a100x8xN,
    /// a100-40gbx8xN, h100x8xN or h200x8xN (N from 1 to 2048; h100x8 is one node), or a TPU
    /// slice, tpu-v5e-N (chips) or tpu-v5p-N (TensorCores). docs/cost.md
    #[arg(long, default_value = "h100x8")]
    topology: String,
    /// The most memory a device may hold at its peak (bytes, or e.g. 40G; powers of 1024).
    /// Default: the device's memory.
    #[arg(long, value_name = "BYTES")]
    memory: Option<String>,
    /// How many candidates the table shows.
    #[arg(long, default_value_t = 5)]
    top: usize,
    /// The optimizer every candidate trains with (default: the plan file's, else adam).
    #[arg(long, value_enum)]
    optimizer: Option<OptimizerName>,
    /// Train with AMP dynamic loss scaling (memory sized by the mixed-precision convention).
    #[arg(long)]
    amp: bool,
    /// The most memory this command may allocate (bytes, or e.g. 512M, 4G); the largest
    /// planning (every rank at full depth, one per worker thread) is checked against it
    /// first. Default: half the available memory.
    #[arg(long, value_name = "BYTES")]
    max_memory: Option<String>,
    /// Write the winner's plan text to this file.
    #[arg(long, value_name = "FILE")]
    out: Option<String>,
    /// Output format: text (the table) or json (one document on stdout).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

/// The model, its global sizes and the user's plan (when a file is given).
type Source = (Model, crate::models::ModelConfig, Option<crate::plan::Plan>);

/// The search's source. The outer error is a usage error (exit 2); the inner one a problem
/// with the plan file, already reported or to report (exit 1).
fn source(args: &SuggestArgs) -> Result<Result<Source, String>, String> {
    match (&args.file, &args.preset) {
        (Some(file), _) => {
            let given = args.sizes.given();
            if !given.is_empty() {
                return Err(format!(
                    "{}: a plan file fixes its model's sizes; use --preset NAME with sizes instead",
                    given.join(", ")
                ));
            }
            let Ok((plan, map)) = super::read_plan(file)? else {
                return Ok(Err(format!("{file}: does not parse (errors above)")));
            };
            if super::report_issues(file, &plan, &map) {
                return Ok(Err(format!("{file}: does not verify (errors above)")));
            }
            // Your plan is priced beside the search's: one that cannot be planned is said
            // so at its line, not left out of the table.
            if plan.mesh().is_some() {
                let opts = crate::passes::driver::PassOptions::from_plan(&plan.options);
                if let Err(e) = crate::passes::driver::run_passes(&plan, &opts) {
                    let origin = super::Origin {
                        file: file.clone(),
                        map,
                    };
                    super::report_plan_error(Some(&origin), &plan, &e);
                    return Ok(Err(format!("{file}: does not plan (error above)")));
                }
            }
            Ok(crate::suggest::identify::identify(&plan.program)
                .map_err(|e| format!("{file}: {e}"))
                .map(|(model, mut config)| {
                    config.batch *= plan.options.micro_batches.max(1);
                    (model, config, Some(plan))
                }))
        }
        (None, Some(preset)) => {
            let (model, base) = Model::preset(preset).map_err(|e| e.to_string())?;
            Ok(Ok((model, args.sizes.config(model, base)?, None)))
        }
        (None, None) => Err("give a plan FILE or --preset NAME".into()),
    }
}

fn problem(
    args: &SuggestArgs,
) -> Result<Result<(Problem, Option<crate::plan::Plan>), String>, String> {
    if args.top == 0 {
        return Err("--top must be at least 1".into());
    }
    let (model, config, mine) = match source(args)? {
        Ok(s) => s,
        Err(e) => return Ok(Err(e)),
    };
    let devices_flag = args.devices;
    let topology = if args.topology == "cpu" {
        let n = devices_flag.ok_or("--topology cpu needs --devices N (the threads to plan for)")?;
        if n == 0 || n > MAX_CPU_DEVICES {
            return Err(format!(
                "--devices {n}: plan for 1 to {MAX_CPU_DEVICES} threads on cpu"
            ));
        }
        super::cost::cpu_topology(n)
    } else {
        Topology::preset(&args.topology).map_err(|e| format!("--topology: {e}"))?
    };
    let devices = devices_flag.unwrap_or(topology.devices);
    if devices == 0 || devices > topology.devices {
        return Err(format!(
            "--devices {devices}: {} has {} devices",
            topology.name, topology.devices
        ));
    }
    let budget_bytes = match &args.memory {
        Some(m) => {
            super::budget::parse_bytes(m).map_err(|e| e.replace("--max-memory", "--memory"))?
        }
        None => topology.device.mem_capacity,
    };
    let mut base = mine
        .as_ref()
        .map(|p| p.options.clone())
        .unwrap_or(PlanOptions {
            optimizer: crate::plan::OptimizerKind::Adam,
            ..PlanOptions::default()
        });
    if let Some(o) = args.optimizer {
        base.optimizer = o.kind();
    }
    base.amp |= args.amp;
    let dtype = topology.default_dtype;
    Ok(Ok((
        Problem {
            model,
            config,
            base,
            topology,
            devices,
            dtype,
            budget_bytes,
            models: Default::default(),
        },
        mine,
    )))
}

/// Whether the search's largest planning fits the command's memory budget: every rank of
/// the model at full depth on all the devices, once per worker thread (the finalists'
/// families are planned in parallel). Prints the error when it does not.
fn planning_fits(problem: &Problem, max_memory: &Option<String>) -> Result<bool, String> {
    let budget = super::budget::budget(max_memory)?;
    let program = problem
        .model
        .build(&problem.config)
        .map_err(|e| e.to_string())?;
    let mut plan = crate::plan::Plan::from_program(program);
    let mesh = crate::plan::parse_mesh_spec(&format!("{}:dp", problem.devices))
        .map_err(|e| e.to_string())?;
    plan.set_mesh(std::sync::Arc::new(mesh));
    let workers = crate::cores::cores() as f64;
    let needed = plan.estimated_planning_bytes(crate::plan::RanksPlanned::All) * workers;
    match super::budget::check("the search's largest planning", needed, budget) {
        Ok(()) => Ok(true),
        Err(e) => {
            eprintln!("error: {e}");
            Ok(false)
        }
    }
}

/// Says so when the user's plan runs on another number of devices than the search (it is
/// then not priced beside).
fn note_other_device_count(mine: Option<&crate::plan::Plan>, devices: usize) {
    if let Some(size) = mine.and_then(|p| p.mesh()).map(|m| m.size()) {
        if size != devices {
            eprintln!(
                "note: your plan runs on {size} devices, the search on {devices}: it is not \
                 priced beside"
            );
        }
    }
}

/// Searches and prints.
pub fn suggest(args: &SuggestArgs) -> Result<ExitCode, String> {
    let (problem, mine) = match problem(args)? {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(1));
        }
    };
    let model = problem.model;
    let topo = problem.topology.name;
    let budget = problem.budget_bytes;
    if !planning_fits(&problem, &args.max_memory)? {
        return Ok(ExitCode::from(1));
    }
    note_other_device_count(mine.as_ref(), problem.devices);
    let search = match Search::new(problem, args.top, mine) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(1));
        }
    };
    let started = std::time::Instant::now();
    let mut shown = false;
    let result = search.run(|done, total| {
        if started.elapsed().as_millis() >= 100 {
            eprint!("\rsearching: {done}/{total} families");
            shown = true;
        }
    });
    if shown {
        eprintln!();
    }
    let s = match result {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(1));
        }
    };
    if let Some(out) = &args.out {
        std::fs::write(out, s.plan.to_string()).map_err(|e| format!("{out}: cannot write: {e}"))?;
    }
    let text = match args.format {
        Format::Text => {
            let mut t = report::text(&s, model, topo, budget);
            t.push_str(&format!("\nwinner: {}\n", winner_line(&s)));
            match &args.out {
                Some(out) => {
                    t.push_str(&format!(
                        "plan written to {out}; check it with `shardlab check {out}`, price it with \
                         `shardlab cost {out} --topology {topo}`\n"
                    ));
                    if let Some(file) = &args.file {
                        t.push_str(&format!(
                            "compare it with your plan: `shardlab diff {file} {out} --topology {topo}`\n"
                        ));
                    }
                }
                None => t.push_str("write the winner's plan with --out FILE\n"),
            }
            t
        }
        Format::Json => {
            let mut doc = report::json(&s, model, topo, budget);
            doc["schema_version"] = serde_json::json!(crate::report::SCHEMA_VERSION);
            format!(
                "{}\n",
                serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?
            )
        }
    };
    super::emit(&text);
    Ok(ExitCode::SUCCESS)
}

/// The winner's mesh and options statement.
fn winner_line(s: &crate::suggest::Suggestion) -> String {
    let mesh = s.plan.mesh().map_or(String::new(), |m| {
        format!("mesh {}", crate::plan::mesh_spec(m))
    });
    format!("{mesh}; {}", s.plan.options)
}
