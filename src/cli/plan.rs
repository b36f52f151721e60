//! `shardlab plan`: complete a plan, and print the stages asked for, the ledger or the
//! schedule in time. A training flag applies to what is printed or is refused.

use super::options::{Format, Stage};
use super::{budget, cost, emit, report_plan_error, stages, training, Origin, PlanSource};
use crate::plan::{Plan, RanksPlanned};
use clap::Args;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub(crate) struct PlanArgs {
    #[command(flatten)]
    source: PlanSource,
    /// The pipeline stage to print: complete (forward dist attrs), backward (with grad ops),
    /// optimizer (with update ops), partition (per-rank programs), all.
    /// (Default: complete, or nothing but the ledger with --ledger.)
    #[arg(long, value_enum)]
    stage: Option<Stage>,
    /// With --stage partition: print only this rank's program.
    #[arg(long)]
    rank: Option<u32>,
    /// Print the communication ledger (collectives with groups, bytes and reasons).
    #[arg(long)]
    ledger: bool,
    #[command(flatten)]
    training: training::TrainingArgs,
    /// The most memory this command may allocate (bytes, or e.g. 512M, 4G); checked against
    /// an estimate before allocating. Default: half the available memory.
    #[arg(long, value_name = "BYTES")]
    max_memory: Option<String>,
    /// Explain why each dim of this variable is split the way it is.
    #[arg(long, value_name = "VAR")]
    explain: Option<String>,
    /// Print the pipeline schedule as a text Gantt chart with each stage's bubble fraction
    /// (job times from the cost model on --topology, or ideal units with --ideal).
    #[arg(long)]
    gantt: bool,
    /// With --gantt: ideal durations (forward 1, backward 2, free transfers), whose bubble
    /// is the textbook's closed form.
    #[arg(long, requires = "gantt")]
    ideal: bool,
    /// With --gantt: the devices job times are priced on (see `shardlab cost`).
    #[arg(long, default_value = "cpu")]
    topology: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

pub(crate) fn plan(args: &PlanArgs) -> Result<ExitCode, String> {
    let plan = match args.source.resolve(args.training.micro_batches())? {
        Some(resolved) => resolved,
        None => return Ok(ExitCode::from(1)),
    };
    let (mut plan, origin) = plan;
    let origin = origin.as_ref();
    args.training.apply(&mut plan)?;
    let budget = budget::budget(&args.max_memory)?;
    if let (Some(r), Some(mesh)) = (args.rank, plan.mesh()) {
        if !mesh.process_ids().contains(&r) {
            return Err(format!(
                "--rank {r}: the mesh has ranks {:?}",
                mesh.process_ids()
            ));
        }
    }
    if args.rank.is_some() && plan.mesh().is_none() {
        return Err("--rank needs a mesh".into());
    }
    // No stage with --ledger prints the ledger alone; else completion by default.
    let stage = match (args.stage, args.ledger) {
        (Some(s), _) => Some(s),
        (None, true) => None,
        (None, false) => Some(Stage::Complete),
    };
    let partitioned = stage != Some(Stage::Complete) || args.ledger;
    refuse_unused_flags(args, stage, partitioned)?;
    if let Err(e) = budget::check(
        "planning",
        plan.estimated_planning_bytes(match (partitioned, args.rank) {
            (false, _) => RanksPlanned::None,
            (true, Some(_)) => RanksPlanned::One,
            (true, None) => RanksPlanned::All,
        }),
        budget,
    ) {
        eprintln!("error: {e}");
        return Ok(ExitCode::from(1));
    }
    if args.gantt {
        return gantt(args, &plan, origin);
    }
    if !partitioned {
        return print_completion(args, &plan, origin);
    }
    let mut opts = crate::passes::driver::PassOptions::from_plan(&plan.options);
    // One rank's program needs only that rank partitioned: time and memory follow one
    // rank, not the mesh.
    opts.partition.ranks = args.rank.map(|r| vec![r]);
    let pipeline = match crate::passes::driver::run_passes(&plan, &opts) {
        Ok(p) => p,
        Err(e) => {
            report_plan_error(origin, &plan, &e);
            return Ok(ExitCode::from(1));
        }
    };
    refuse_unapplied_flags(args, stage, &pipeline)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let written = if args.format == Format::Json {
        crate::report::write_pipeline_json(&mut out, &pipeline, args.rank)
    } else {
        stages::write_pipeline_text(&mut out, &pipeline, stage, args.rank, args.ledger)
    };
    // A closed pipe (`| head`) ends the output early; that is not an error of the plan.
    if let Err(e) = written.and_then(|()| std::io::Write::flush(&mut out)) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            return Err(format!("cannot write the output: {e}"));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A flag applies or is refused (usage, exit 2): `--rank` picks a rank program, and the
/// training flags change only what comes after completion.
/// The flags that planning showed to do nothing, or to name what is not there (usage).
fn refuse_unapplied_flags(
    args: &PlanArgs,
    stage: Option<Stage>,
    pipeline: &crate::passes::driver::Passes,
) -> Result<(), String> {
    args.training.check_applied(pipeline)?;
    let ledger_only = stage.is_none() && args.format == Format::Text;
    if ledger_only && args.training.micro_batches_given() && !pipeline.stages.is_pipelined() {
        return Err(
            "--micro-batches: without pipeline stages the micro-batches accumulate \
                    gradients, and the ledger (per step) does not change; it shows from \
                    --stage partition on"
                .into(),
        );
    }
    if let Some(r) = args.rank {
        if !pipeline.partitioned.ranks.iter().any(|p| p.rank == r) {
            return Err(format!(
                "--rank {r}: the mesh has ranks {:?}",
                pipeline.completed.mesh.process_ids()
            ));
        }
    }
    Ok(())
}

/// A stage as the command line spells it.
fn stage_name(s: Stage) -> String {
    clap::ValueEnum::to_possible_value(&s)
        .map_or_else(|| format!("{s:?}"), |v| v.get_name().to_string())
}

fn refuse_unused_flags(
    args: &PlanArgs,
    stage: Option<Stage>,
    partitioned: bool,
) -> Result<(), String> {
    if args.rank.is_some() && !args.ledger && !stage.is_some_and(|s| s.shows(Stage::Partition)) {
        return Err(
            "--rank picks a rank program: add --stage partition (or all), or --ledger".into(),
        );
    }
    let training = args.training.given();
    let unshown = args.training.unshown(stage, args.source.is_preset());
    let text = args.format == Format::Text;
    if let Some(&(flag, first)) = unshown
        .first()
        .filter(|_| text && partitioned && !args.gantt)
    {
        let shown = match stage {
            Some(s) => format!("--stage {}", stage_name(s)),
            None => "--ledger".into(),
        };
        return Err(format!(
            "{flag}: {shown} prints nothing that it changes; it shows from --stage {} on (or \
             --stage all)",
            stage_name(first)
        ));
    }
    if !partitioned && !args.gantt && !training.is_empty() {
        return Err(format!(
            "{}: `plan` prints the completed forward program by default, which training \
             options do not change; add --stage all (or backward, optimizer, partition), \
             --ledger or --gantt",
            training.join(", ")
        ));
    }
    Ok(())
}

/// `plan --gantt`: the schedule in time, per stage, with its bubble fraction.
fn gantt(args: &PlanArgs, plan: &Plan, origin: Option<&Origin>) -> Result<ExitCode, String> {
    let opts = crate::passes::driver::PassOptions::from_plan(&plan.options);
    let p = match crate::passes::driver::run_passes(plan, &opts) {
        Ok(p) => p,
        Err(e) => {
            report_plan_error(origin, plan, &e);
            return Ok(ExitCode::from(1));
        }
    };
    if !p.is_pipelined() {
        return Err(
            "--gantt needs a pipeline: a mesh axis named pp, or --micro-batches above 1".into(),
        );
    }
    let cost = if args.ideal {
        crate::cost::pipeline_cost::pipeline_cost(&p, None, crate::cost::work::ElementBytes(4.0))
            .map_err(|e| crate::plan::PlanError::from_located(&e, None))
    } else {
        cost::priced_pipeline(&p, &args.topology)?
    };
    match cost {
        Ok(c) => {
            let text = match args.format {
                Format::Text => crate::cost::pipeline_cost::gantt_text(&c, 72),
                Format::Json => {
                    let mut doc = crate::cost::estimate::pipeline_json(&c);
                    doc["schema_version"] = serde_json::json!(crate::report::SCHEMA_VERSION);
                    format!(
                        "{}\n",
                        serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?
                    )
                }
            };
            emit(&text);
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            report_plan_error(origin, plan, &e);
            Ok(ExitCode::from(1))
        }
    }
}

fn print_completion(
    args: &PlanArgs,
    plan: &Plan,
    origin: Option<&Origin>,
) -> Result<ExitCode, String> {
    let completed = match crate::passes::complete(plan) {
        Ok(c) => c,
        Err(e) => {
            report_plan_error(origin, plan, &e);
            return Ok(ExitCode::from(1));
        }
    };
    let program = &plan.program;
    let text = match (&args.explain, args.format) {
        (Some(name), _) => {
            let var = program
                .var_id(name)
                .ok_or_else(|| format!("--explain: unknown variable `{name}`"))?;
            crate::passes::complete::explain_text(program, &completed, var)
        }
        (None, Format::Json) => {
            let mut json = crate::passes::complete::completed_json(program, &completed);
            json["schema_version"] = serde_json::json!(crate::report::SCHEMA_VERSION);
            format!(
                "{}\n",
                serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?
            )
        }
        (None, Format::Text) => crate::passes::complete::completed_text(program, &completed),
    };
    emit(&text);
    Ok(ExitCode::SUCCESS)
}
