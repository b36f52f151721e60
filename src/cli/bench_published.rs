//! `shardlab bench --what published`: every published run of `published_runs.json` priced
//! at its published configuration, its modelled TFLOP/s per device beside the reported one,
//! counted with the formula its source uses. The cost model is not tuned per run: one set
//! of device figures (`cost::hardware`) prices them all.

use super::cost::{priced, CostArgs};
use clap::Parser;
use std::time::Instant;

/// The runs, as committed beside this file.
pub const RUNS_JSON: &str = include_str!("published_runs.json");

/// One run as the file gives it.
#[derive(Clone, Debug, serde::Deserialize)]
pub struct PublishedRun {
    pub id: String,
    pub source: String,
    pub hardware: String,
    pub args: Vec<String>,
    pub reported_tflops_per_device: f64,
    pub formula: String,
    pub reading: String,
}

#[derive(serde::Deserialize)]
struct RunsFile {
    runs: Vec<PublishedRun>,
}

/// Every run in the file.
pub fn runs() -> Result<Vec<PublishedRun>, String> {
    serde_json::from_str::<RunsFile>(RUNS_JSON)
        .map(|f| f.runs)
        .map_err(|e| format!("published_runs.json: {e}"))
}

/// The options every run shares: Megatron's practice for the sizes (Adam with mixed
/// precision, the data-parallel reduction
/// overlapped with the backward) unless the run's own arguments say otherwise.
const COMMON: [&str; 3] = ["--optimizer", "adamw", "--overlap"];

/// `cost`'s arguments as the command line would hold them.
#[derive(Parser)]
struct Cost {
    #[command(flatten)]
    args: CostArgs,
}

/// A run priced.
#[derive(Clone, Debug, PartialEq)]
pub struct Priced {
    pub id: String,
    pub devices: usize,
    pub modelled: f64,
    pub reported: f64,
    pub step_s: f64,
    pub fits: bool,
    /// Seconds it took to plan and price.
    pub took_s: f64,
}

impl Priced {
    /// Modelled over reported.
    pub fn ratio(&self) -> f64 {
        self.modelled / self.reported
    }
}

/// `run`'s `cost` arguments, parsed.
fn parsed(run: &PublishedRun) -> Result<Cost, String> {
    let argv = std::iter::once("cost".to_string())
        .chain(COMMON.iter().map(|s| s.to_string()))
        .chain(run.args.iter().cloned())
        .chain(["--flops-formula".to_string(), run.formula.clone()]);
    Cost::try_parse_from(argv).map_err(|e| format!("{}: {e}", run.id))
}

/// `run` priced, as the JSON document `cost --format json` prints.
pub fn price_json(run: &PublishedRun) -> Result<serde_json::Value, String> {
    let (e, t) = priced(&parsed(run)?.args)?
        .map_err(|_| format!("{}: the plan was refused (reported above)", run.id))?;
    let mut doc = crate::cost::estimate::estimate_json(&e);
    crate::cost::estimate::add_throughput(&mut doc, &t);
    Ok(doc)
}

/// Prices `run`.
pub fn price(run: &PublishedRun) -> Result<Priced, String> {
    let cli = parsed(run)?;
    let start = Instant::now();
    let (e, t) = priced(&cli.args)?
        .map_err(|_| format!("{}: the plan was refused (reported above)", run.id))?;
    Ok(Priced {
        id: run.id.clone(),
        devices: t.devices,
        modelled: t.tflops_per_device,
        reported: run.reported_tflops_per_device,
        step_s: e.step_s(),
        fits: t.fits,
        took_s: start.elapsed().as_secs_f64(),
    })
}

/// The median of `xs` (the mean of the middle two for an even count).
fn median(mut xs: Vec<f64>) -> f64 {
    crate::sort::sort_by_key(&mut xs, |&x| ordered(x));
    match xs.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => xs[n / 2],
        n => (xs[n / 2 - 1] + xs[n / 2]) / 2.0,
    }
}

fn ordered(x: f64) -> i64 {
    (x * 1e9) as i64
}

/// The table `bench --what published` prints.
pub fn bench_published() -> Result<String, String> {
    let runs = runs()?;
    let mut out = format!(
        "{:<32} {:>7} {:>10} {:>10} {:>7} {:>9} {:>5} {:>8}\n",
        "run", "devices", "modelled", "reported", "ratio", "step", "fits", "priced"
    );
    let mut ratios = Vec::new();
    for run in &runs {
        let p = price(run)?;
        ratios.push(p.ratio());
        out.push_str(&format!(
            "{:<32} {:>7} {:>8.1}TF {:>8.1}TF {:>7.3} {:>8.2}s {:>5} {:>7.0}ms\n",
            p.id,
            p.devices,
            p.modelled,
            p.reported,
            p.ratio(),
            p.step_s,
            if p.fits { "yes" } else { "no" },
            p.took_s * 1e3
        ));
    }
    let within = ratios.iter().filter(|&&r| (r - 1.0).abs() <= 0.15).count();
    out.push_str(&format!(
        "{} runs: median ratio {:.3}; {within} within ±15%; the goal is every run within ±15% and \
         the median within ±7% (docs/published-runs.md)\n",
        ratios.len(),
        median(ratios.clone())
    ));
    Ok(out)
}
