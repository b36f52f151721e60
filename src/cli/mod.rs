//! The `shardlab` command-line tool: a thin shell over the core. Only this module prints
//! or touches files.

mod batch;
mod bench;
mod bench_import;
pub mod bench_published;
mod bench_step;
mod budget;
mod calibrate;
mod check;
mod cost;
mod diff;
mod export;
mod files;
mod import;
mod options;
mod plan;
mod preset;
mod run;
mod schedule;
mod sizes;
mod stages;
mod suggest;
mod training;

use crate::plan::Located;
use check::report_issues;
pub use check::summary;
use options::{BenchWhat, Format};
use plan::PlanArgs;
use preset::{add_mesh_and_shards, build_plan, MeshArgs};
pub(crate) use sizes::SizeArgs;

use crate::models::published::Published;
use crate::plan::{parse_plan, verify_plan, Plan, RanksPlanned, SourceMap};
use clap::{Args, Parser, Subcommand};
use std::process::ExitCode;

/// Plan how a neural network is split across devices, PaddlePaddle-style.
#[derive(Parser, Debug)]
#[command(
    name = "shardlab",
    version,
    about,
    long_about = None,
    after_help = "Exit status: 0 success; 1 invalid input (a plan that does not parse, verify or \
                  plan) or a failed verification (`run`); 2 usage errors (a bad flag or flag \
                  combination, a missing file)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print a preset model as a plan file (program text; with --mesh and --shard, a plan).
    Print(PrintArgs),
    /// Import an ONNX model or a Paddle program as a plan file (the program, ready to annotate and plan).
    Import(import::ImportArgs),
    /// Parse and verify a plan file; print every error as FILE:LINE:COL: message.
    Check {
        /// The plan file to check.
        file: String,
    },
    /// Plan a model: complete the dist attrs of every tensor and op.
    Plan(PlanArgs),
    /// Run training steps serially and on every rank, and compare them tensor by tensor.
    Run(RunArgs),
    /// Estimate a plan's step time and memory per rank on a device preset.
    Cost(cost::CostArgs),
    /// Compare two plan files: layouts, collectives per phase, bytes, memory and step time.
    Diff(diff::DiffArgs),
    /// Export a plan as a self-contained JAX script (gspmd or shard_map mode).
    Export(export::ExportArgs),
    /// Lay a pipeline schedule out in time: each stage's jobs and bubble.
    Schedule(schedule::ScheduleArgs),
    /// Search the plans of a model on N devices: the cost table of the best and why the
    /// winner won.
    Suggest(suggest::SuggestArgs),
    /// Time the planner on growing models (medians; figures in docs/benchmarks.md).
    Bench {
        /// What to time: complete.
        #[arg(long, value_enum, default_value_t = BenchWhat::Complete)]
        what: BenchWhat,
        /// Layer counts of the gpt preset.
        #[arg(long, value_delimiter = ',', default_value = "2,8,24,48,96")]
        layers: Vec<usize>,
        /// Runs per size (the median is reported).
        #[arg(long, default_value_t = 11)]
        repeat: usize,
    },
    /// Run SPMD rule cases (Paddle's rule-test schema) and print the results as JSON.
    Spmd {
        /// A JSON list of cases, e.g. ../shared/oracle/paddle/spmd_cases.json.
        #[arg(long)]
        cases: String,
    },
}

#[derive(Args, Debug)]
struct PrintArgs {
    /// The preset: mlp, mlp_mse, gpt, embedding_lm, gpt_lm or llama, or a published one
    /// (gpt2-small, gpt3-175b, llama3-8b, ...; docs/cli.md).
    #[arg(long)]
    preset: String,
    #[command(flatten)]
    sizes: SizeArgs,
    /// A mesh, e.g. 2x4:dp,mp (axis names optional: 2x4 names them d0,d1).
    #[arg(long)]
    mesh: Option<String>,
    /// Annotate a variable, e.g. x=dp,- ; `-` replicated, `?` free, `dp+mp` co-sharded.
    /// Repeatable. Needs --mesh.
    #[arg(long = "shard", value_name = "VAR=AXES")]
    shards: Vec<String>,
    /// A strategy by sizes, as Megatron's arguments: dp=8,tp=8,pp=2 builds the mesh and
    /// the standard annotations (column/row-parallel layers and a vocab-parallel embedding
    /// and loss, found by pattern; the batch over dp; stages split evenly). Replaces --mesh;
    /// --shard adds to it or overrides a variable. docs/cli.md.
    #[arg(long, value_name = "dp=N,tp=N,pp=N", conflicts_with = "mesh")]
    parallel: Option<String>,
    /// How context parallelism attends (with --parallel cp=N): ring (zig-zag order),
    /// ring_contiguous, ulysses, or auto (Ulysses when the heads divide over tp × cp).
    #[arg(long, value_name = "MODE", requires = "parallel")]
    cp_mode: Option<String>,
    /// The most memory this command may allocate (bytes, or e.g. 512M, 4G); checked against
    /// an estimate before allocating. Default: half the available memory.
    #[arg(long, value_name = "BYTES")]
    max_memory: Option<String>,
}

/// Where a plan comes from (`plan`, `run`, `cost`, ...): a file, a preset with its sizes, or a
/// scenario, with a mesh and annotations.
#[derive(Args, Debug)]
pub(crate) struct PlanSource {
    /// A plan file (mesh, program, annotations). Or use --preset / --scenario.
    file: Option<String>,
    /// A preset model: mlp, mlp_mse, gpt, embedding_lm, gpt_lm or llama, or a published one:
    /// gpt2-small, gpt2-xl, gpt3-1.3b, gpt3-13b, gpt3-175b, llama3-8b, llama3-70b,
    /// llama3-405b (docs/cli.md).
    #[arg(long, conflicts_with = "file")]
    preset: Option<String>,
    /// A ready-made plan: dp_mlp, megatron_mlp, gpt_dp_mp, vocab_embedding, reshard_conflict, gpt_sequence_parallel.
    #[arg(long, conflicts_with_all = ["file", "preset"])]
    scenario: Option<String>,
    #[command(flatten)]
    sizes: SizeArgs,
    /// The mesh, e.g. 2x4:dp,mp (for a preset, or a file without a mesh).
    #[arg(long)]
    mesh: Option<String>,
    /// Annotate a variable, e.g. x=dp,- (repeatable; adds to the file's annotations).
    #[arg(long = "shard", value_name = "VAR=AXES")]
    shards: Vec<String>,
    /// A strategy by sizes, as Megatron's arguments: dp=8,tp=8,pp=2 builds the mesh and
    /// the standard annotations (column/row-parallel layers and a vocab-parallel embedding
    /// and loss, found by pattern; the batch over dp; stages split evenly). Replaces --mesh;
    /// --shard adds to it or overrides a variable. docs/cli.md.
    #[arg(long, value_name = "dp=N,tp=N,pp=N", conflicts_with = "mesh")]
    parallel: Option<String>,
    /// How context parallelism attends (with --parallel cp=N): ring (zig-zag order),
    /// ring_contiguous, ulysses, or auto (Ulysses when the heads divide over tp × cp).
    #[arg(long, value_name = "MODE", requires = "parallel")]
    cp_mode: Option<String>,
    #[command(flatten)]
    batch: batch::BatchArgs,
}

/// `--parallel` with `--cp-mode` folded in (`cp_mode=` is part of the spec).
fn with_cp_mode(parallel: &Option<String>, cp_mode: &Option<String>) -> Option<String> {
    match (parallel, cp_mode) {
        (Some(p), Some(m)) => Some(format!("{p},cp_mode={m}")),
        (p, _) => p.clone(),
    }
}

impl PlanSource {
    /// A published preset's shrunk twin, which `run` executes (a published size does not
    /// fit in memory), with what it shrank; `None` for anything else.
    pub(crate) fn resolve_twin(
        &self,
        micro_batches: usize,
        keep_layers: bool,
    ) -> Result<Option<(Plan, Vec<String>)>, String> {
        let Some(preset) = self
            .preset
            .as_deref()
            .filter(|p| Published::find(p).is_some())
        else {
            return Ok(None);
        };
        let spec = with_cp_mode(&self.parallel, &self.cp_mode);
        let layout = MeshArgs {
            mesh: self.mesh.as_deref(),
            shards: &self.shards,
            parallel: spec.as_deref(),
        };
        let sized = (&self.sizes, &self.batch);
        build_plan(
            preset,
            sized,
            &layout,
            micro_batches,
            preset::Size::Twin { keep_layers },
        )
        .map(Some)
    }

    /// The sizes the FLOPs formulas need, for a preset (`None` for a plan file or a
    /// scenario): its config at the flags' sizes and global batch, and the active
    /// parameters of `plan`'s program (a Mixture of Experts' routed experts only).
    pub(crate) fn model_shape(
        &self,
        plan: &Plan,
    ) -> Result<Option<crate::cost::throughput::ModelShape>, String> {
        let Some(preset) = &self.preset else {
            return Ok(None);
        };
        let (model, base) = crate::models::Model::preset(preset).map_err(|e| e.to_string())?;
        if matches!(
            model,
            crate::models::Model::Mlp | crate::models::Model::MlpMse
        ) {
            return Ok(None);
        }
        let mut cfg = self.sizes.config(model, base)?;
        if let Some(global) = self.batch.global(&cfg)? {
            cfg.batch = global;
        }
        let total: f64 = plan
            .program
            .vars()
            .iter()
            .filter(|v| v.kind == crate::ir::VarKind::Parameter)
            .map(|v| v.ty.numel() as f64)
            .sum();
        // Each expert is a SwiGLU MLP (gate, up and down: 3·h·ffn); a token skips all but
        // top_k of them.
        let skipped = cfg.experts.saturating_sub(cfg.top_k) as f64
            * 3.0
            * (cfg.hidden * cfg.ffn) as f64
            * cfg.layers as f64;
        let skipped = if cfg.experts > 0 { skipped } else { 0.0 };
        Ok(Some(crate::cost::throughput::ModelShape {
            active_params: total - skipped,
            layers: cfg.layers as f64,
            hidden: cfg.hidden as f64,
            seq: cfg.seq as f64,
            vocab: cfg.vocab as f64,
            global_batch: cfg.batch as f64,
        }))
    }

    /// Whether the plan is a preset (built at the sizes the flags give).
    pub(crate) fn is_preset(&self) -> bool {
        self.preset.is_some()
    }

    /// The plan, or `None` when the file has problems (already reported).
    /// A preset is built at the micro-batch's size (`--batch` / `micro_batches`).
    pub(crate) fn resolve(
        &self,
        micro_batches: usize,
    ) -> Result<Option<(Plan, Option<Origin>)>, String> {
        let spec = with_cp_mode(&self.parallel, &self.cp_mode);
        let layout = MeshArgs {
            mesh: self.mesh.as_deref(),
            shards: &self.shards,
            parallel: spec.as_deref(),
        };
        resolve_plan(
            &self.file,
            &self.preset,
            &self.scenario,
            (&self.sizes, &self.batch),
            &layout,
            micro_batches,
        )
    }
}

#[derive(Args, Debug)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    source: PlanSource,
    /// Load `<var>.npy` from this directory for any input or parameter found there.
    #[arg(long, value_name = "DIR")]
    inputs: Option<String>,
    /// Training steps.
    #[arg(long, default_value_t = 1)]
    steps: usize,
    /// Learning rate.
    #[arg(long, default_value_t = 0.1)]
    lr: f64,
    #[command(flatten)]
    training: training::TrainingArgs,
    /// The most memory this command may allocate (bytes, or e.g. 512M, 4G); checked against
    /// an estimate before allocating. Default: half the available memory.
    #[arg(long, value_name = "BYTES")]
    max_memory: Option<String>,
    /// Write loss.npy, grad.<param>.npy (first step) and <param>.npy (after the last step)
    /// under DIR/serial and DIR/distributed.
    #[arg(long, value_name = "DIR")]
    dump: Option<String>,
    /// The precision both runs compute in: f64 (f32 variables promoted, so rounding cannot
    /// hide a wrong result) or the program's own dtypes.
    #[arg(long, value_enum, default_value_t = options::PrecisionFlag::F64)]
    precision: options::PrecisionFlag,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

/// Runs the tool; returns 0 on success, 1 when the input has problems, 2 on usage errors.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Print(args) => print(&args),
        Command::Check { file } => check::check(&file),
        Command::Import(args) => import::import(&args),
        Command::Spmd { cases } => spmd_cases(&cases),
        Command::Plan(args) => plan::plan(&args),
        Command::Run(args) => run::run(&args),
        Command::Cost(args) => cost::cost(&args),
        Command::Diff(args) => diff::diff(&args),
        Command::Schedule(args) => schedule::schedule(&args),
        Command::Suggest(args) => suggest::suggest(&args),
        Command::Export(args) => export::export(&args),
        Command::Bench {
            what,
            layers,
            repeat,
        } => match what {
            BenchWhat::Gemm => bench::bench_gemm(repeat),
            BenchWhat::Step => bench_step::bench_step(repeat),
            BenchWhat::Cost => bench::bench_cost(repeat),
            BenchWhat::Suggest => bench::bench_suggest(repeat),
            BenchWhat::Import => bench_import::bench_import(repeat),
            BenchWhat::Published => bench_published::bench_published(),
            BenchWhat::Pipeline => bench::bench_pipeline(&layers, repeat),
            BenchWhat::Stages => bench::bench_stages(&layers, repeat),
            BenchWhat::Complete => bench::bench_complete(&layers, repeat),
        }
        .map(|t| {
            emit(&t);
            ExitCode::SUCCESS
        }),
    };
    match result {
        Ok(code) => code,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
    }
}

fn print(args: &PrintArgs) -> Result<ExitCode, String> {
    let budget = budget::budget(&args.max_memory)?;
    let spec = with_cp_mode(&args.parallel, &args.cp_mode);
    let layout = MeshArgs {
        mesh: args.mesh.as_deref(),
        shards: &args.shards,
        parallel: spec.as_deref(),
    };
    let (plan, _) = build_plan(
        &args.preset,
        (&args.sizes, &batch::BatchArgs::default()),
        &layout,
        1,
        preset::Size::Real,
    )?;
    if let Err(e) = budget::check(
        "printing",
        plan.estimated_planning_bytes(RanksPlanned::None),
        budget,
    ) {
        eprintln!("error: {e}");
        return Ok(ExitCode::from(1));
    }
    let issues = verify_plan(&plan);
    if let Some(first) = issues.first() {
        // An annotation the user gave can be invalid; the preset itself cannot.
        return Err(match first.subject {
            crate::plan::PlanSubject::Annotation(_) => {
                format!("--shard: {}", first.message.trim_start_matches("shard: "))
            }
            crate::plan::PlanSubject::Op(_)
            | crate::plan::PlanSubject::Var(_)
            | crate::plan::PlanSubject::Options
            | crate::plan::PlanSubject::Mesh => format!(
                "internal error: preset {} does not verify: {first}",
                args.preset
            ),
        });
    }
    emit(&plan.to_string());
    Ok(ExitCode::SUCCESS)
}

/// Reads and parses a plan file; parse errors are printed as FILE:LINE:COL and make `Err`.
/// A file too large, or not UTF-8, is invalid input (printed, like a parse error).
pub(crate) fn read_plan(file: &str) -> Result<Result<(Plan, SourceMap), usize>, String> {
    let bytes = match files::read_limited(std::path::Path::new(file), files::PLAN_FILE_LIMIT) {
        Ok(bytes) => bytes,
        Err(files::ReadError::Io(e)) => return Err(format!("{file}: cannot read: {e}")),
        Err(files::ReadError::TooLarge { limit }) => {
            eprintln!(
                "{file}:1:1: the file is larger than the {} a plan file may be",
                files::human(limit)
            );
            eprintln!("{file}: 1 error(s)");
            return Ok(Err(1));
        }
    };
    let text = match files::utf8(bytes) {
        Ok(text) => text,
        Err((line, col, why)) => {
            eprintln!("{file}:{line}:{col}: {why}");
            eprintln!("{file}: 1 error(s)");
            return Ok(Err(1));
        }
    };
    Ok(parse_plan(&text).map_err(|errors| {
        for e in &errors {
            eprintln!("{file}:{e}");
        }
        eprintln!("{file}: {} error(s)", errors.len());
        errors.len()
    }))
}

/// Where a plan came from, when it came from a file: errors found after parsing are printed
/// at the line and column of what they name.
pub(crate) struct Origin {
    file: String,
    map: SourceMap,
}

/// Prints a problem found in `plan` after parsing (planning, pricing, running): as
/// `FILE:LINE:COL: message` when it came from a file, at the statement of the error's
/// subject (the plan's first line when it names none), else as `error: message`.
pub(crate) fn report_plan_error(origin: Option<&Origin>, plan: &Plan, err: &dyn Located) {
    match origin {
        Some(o) => {
            let (line, col) = err
                .subject()
                .map_or((1, 1), |subject| o.map.locate(plan, &subject));
            eprintln!("{}:{line}:{col}: {err}", o.file);
            eprintln!("{}: 1 error(s)", o.file);
        }
        None => eprintln!("error: {err}"),
    }
}

/// The plan a command works on: a file, a preset or a scenario, with --mesh and --shard
/// applied, and its origin when it is a file. `None` when the file had parse errors
/// (already printed).
fn resolve_plan(
    file: &Option<String>,
    preset: &Option<String>,
    scenario: &Option<String>,
    (sizes, batch): (&SizeArgs, &batch::BatchArgs),
    layout: &MeshArgs,
    micro_batches: usize,
) -> Result<Option<(Plan, Option<Origin>)>, String> {
    let mesh = layout.mesh;
    let sizes_given = sizes.given();
    if preset.is_none() {
        let mut refused = sizes_given.clone();
        if file.is_some() && sizes.dtype.is_some() {
            refused.push("--dtype");
        }
        if scenario.is_some() && mesh.is_some() {
            refused.push("--mesh");
        }
        if scenario.is_some() && layout.parallel.is_some() {
            refused.push("--parallel");
        }
        if !refused.is_empty() {
            let fixed = if scenario.is_some() {
                "a --scenario fixes its model sizes and mesh (only --dtype and --shard apply)"
            } else {
                "a plan file fixes its program (only --mesh, if it has none, and --shard apply)"
            };
            return Err(format!(
                "{}: {fixed}; use --preset NAME with sizes, --mesh and --shard instead",
                refused.join(", ")
            ));
        }
    }
    Ok(Some((
        match (file, preset, scenario) {
            (Some(file), _, _) => match read_plan(file)? {
                Ok((plan, map)) => {
                    if report_issues(file, &plan, &map) {
                        return Ok(None);
                    }
                    let origin = Origin {
                        file: file.clone(),
                        map,
                    };
                    return Ok(Some((add_mesh_and_shards(plan, layout)?, Some(origin))));
                }
                Err(_) => return Ok(None),
            },
            (None, Some(preset), _) => {
                build_plan(
                    preset,
                    (sizes, batch),
                    layout,
                    micro_batches,
                    preset::Size::Real,
                )?
                .0
            }
            (None, None, Some(name)) => scenario_plan(name, sizes, layout)?,
            (None, None, None) => {
                return Err("give a plan FILE, --preset NAME or --scenario NAME".into())
            }
        },
        None,
    )))
}

/// A `--scenario`'s plan, at `--dtype` if given, with `--shard` on top.
fn scenario_plan(name: &str, sizes: &SizeArgs, layout: &MeshArgs) -> Result<Plan, String> {
    let scenario = crate::models::scenarios::Scenario::by_name(name).ok_or_else(|| {
        let names: Vec<&str> = crate::models::scenarios::scenarios()
            .iter()
            .map(|s| s.name)
            .collect();
        format!("unknown scenario `{name}`; scenarios: {}", names.join(", "))
    })?;
    let mut config = scenario.config();
    if let Some(dtype) = sizes.dtype()? {
        config.dtype = dtype;
    }
    let plan = scenario.plan_with(&config).map_err(|e| e.to_string())?;
    let shards_only = MeshArgs {
        mesh: None,
        shards: layout.shards,
        parallel: None,
    };
    add_mesh_and_shards(plan, &shards_only)
}

/// Writes to stdout; a closed pipe (`shardlab print | head`) is not an error.
pub(crate) fn emit(text: &str) {
    use std::io::Write;
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

fn spmd_cases(file: &str) -> Result<ExitCode, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{file}: cannot read: {e}"))?;
    let raw: Vec<serde_json::Value> = serde_json::from_str(&text)
        .map_err(|e| format!("{file}: not a JSON list of cases: {e}"))?;
    let mut results = Vec::with_capacity(raw.len());
    for (i, value) in raw.into_iter().enumerate() {
        let case: crate::spmd::cases::Case =
            serde_json::from_value(value).map_err(|e| format!("{file}: case {i}: {e}"))?;
        results.push(crate::spmd::cases::run_case(&case));
    }
    let json = serde_json::to_string_pretty(&results).map_err(|e| e.to_string())?;
    emit(&format!("{json}\n"));
    Ok(ExitCode::SUCCESS)
}

/// The benchmarks' plan (gpt with `layers` blocks on [2, 4], dp and Megatron mp), for
/// profiling harnesses.
pub fn bench_plan(layers: usize) -> Result<Plan, String> {
    bench::gpt_dp_mp_plan(layers)
}

/// The plan `bench --what step` runs (gpt, 4 layers, hidden 256, on [2, 4]), for
/// profiling the executor (`examples/step_profile.rs`).
pub fn step_bench_plan() -> Result<Plan, String> {
    bench_step::step_plan()
}
