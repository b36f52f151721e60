//! Exported JAX scripts run on XLA against ShardLab's serial step.
//!
//! Every case is exported in both modes, run for two steps on 8 simulated CPU devices (one
//! Python process per dtype runs every script, `tests/export/run_scripts.py`), and held to
//! the verifier's rule: each tensor's first-step loss and gradient, and each parameter
//! after the second step, within `exec::verify::tolerance` of the serial value (the serial
//! run's own error bound × 8, per element for Adam). In `shard_map` mode XLA's collective
//! counts must equal our ledger's for rank 0 exactly: the programs are ours.
//!
//! The suite needs `target/jaxenv` (JAX 0.10.2 and numpy), which `scripts/setup.sh`
//! installs; without it the suite fails and says so.

mod common;

use common::{plan_with, standard_configs};
use shardlab::exec::npy::read_npy;
use shardlab::exec::run::{run_serial, Log, Record, RunOptions};
use shardlab::exec::tensor::Tensor;
use shardlab::exec::verify::compare;
use shardlab::export::{export_jax, Constrain, ExportMode, ExportOptions};
use shardlab::ir::DType;
use shardlab::models::scenarios::scenarios;
use shardlab::models::{Model, ModelConfig};
use shardlab::passes::pipeline::{run_pipeline, Pipeline, PipelineOptions};
use shardlab::plan::Plan;
use std::path::{Path, PathBuf};
use std::process::Command;

const STEPS: usize = 2;

struct Case {
    name: String,
    plan: Plan,
}

fn build(model: Model, layers: usize, mesh: &str, shards: &[String], dtype: DType) -> Plan {
    let cfg = ModelConfig {
        layers: layers.max(1),
        dtype,
        ..model.default_config()
    };
    plan_with(model.build(&cfg).unwrap(), mesh, shards)
}

/// The cases: the MLP and gpt presets under dp, Megatron mp and dp×mp; a reshard
/// conflict; a vocab-split embedding; ZeRO-3; a 2-stage pipeline; and one case with every
/// optimizer-phase feature (AMP, clipping, AdamW, Megatron sums, recompute).
fn cases(dtype: DType) -> Vec<Case> {
    let mut out = Vec::new();
    for model in [Model::Mlp, Model::Gpt] {
        for (config, mesh, shards) in standard_configs(model, 2) {
            out.push(Case {
                name: format!("{}_{config}", model.name()),
                plan: build(model, 2, mesh, &shards, dtype),
            });
        }
    }
    for sc in scenarios() {
        if sc.name == "reshard_conflict" || sc.name == "vocab_embedding" {
            out.push(Case {
                name: sc.name.to_string(),
                plan: build(sc.model, sc.layers, sc.mesh, &sc.shards, dtype),
            });
        }
    }
    let (_, mesh, shards) = standard_configs(Model::Gpt, 2).remove(2);
    let mut zero3 = build(Model::Gpt, 2, mesh, &shards, dtype);
    zero3.options.zero = 3;
    zero3.options.optimizer = shardlab::plan::OptimizerKind::Adam;
    out.push(Case {
        name: "gpt_dp_mp_zero3_adam".into(),
        plan: zero3,
    });
    let mut all = build(Model::Gpt, 2, mesh, &shards, dtype);
    all.options.amp = true;
    all.options.clip_norm = Some(0.5);
    all.options.optimizer = shardlab::plan::OptimizerKind::AdamW;
    all.options.megatron_sums = true;
    all.options.recompute = shardlab::plan::Recompute::Full;
    out.push(Case {
        name: "gpt_dp_mp_amp_clip_adamw_sums_recompute".into(),
        plan: all,
    });
    let mut pp = build(Model::Gpt, 2, "2x2:pp,dp", &["x=dp,-,-".to_string()], dtype);
    pp.options.micro_batches = 2;
    out.push(Case {
        name: "gpt_pp2_dp".into(),
        plan: pp,
    });
    out
}

fn python() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let py = root.join("target/jaxenv/bin/python");
    assert!(
        py.exists(),
        "{} is missing: run scripts/setup.sh (it installs JAX into target/jaxenv)",
        py.display()
    );
    py
}

/// A record of `name` read from `file`.
fn read(dir: &Path, file: &str, name: &str) -> Record {
    let path = dir.join(format!("{file}.npy"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let t = read_npy(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Record {
        name: name.to_string(),
        copies: vec![t],
        bound: 0.0,
        elem_bounds: None,
    }
}

/// Every check of one script's dump against the serial log: (tensor, pass, diff, tol).
fn check_dump(serial: &Log, dir: &Path, losses: &[f64]) -> Vec<(String, bool, f64, f64)> {
    let mut out = Vec::new();
    let mut push = |name: &str, s: &Record, d: &Record| {
        let c = compare(name, s, d);
        out.push((name.to_string(), c.pass, c.max_abs_diff, c.tolerance));
    };
    let first = &serial.loss_records[0];
    push("loss (step 1)", first, &read(dir, "loss", "loss"));
    for (k, s) in serial.loss_records.iter().enumerate() {
        let dtype = s.value().map_or(DType::F32, Tensor::dtype);
        let got = Record {
            name: s.name.clone(),
            copies: vec![Tensor::float(dtype, vec![], vec![losses[k]])],
            bound: 0.0,
            elem_bounds: None,
        };
        push(&s.name, s, &got);
    }
    for g in &serial.grads {
        push(
            &format!("grad {}", g.name),
            g,
            &read(dir, &format!("grad.{}", g.name), &g.name),
        );
    }
    for p in &serial.params {
        push(&p.name, p, &read(dir, &p.name, &p.name));
    }
    out
}

/// Rank 0's collectives per XLA kind, from the ledger.
fn ledger_counts(p: &Pipeline) -> std::collections::BTreeMap<&'static str, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for e in p.ledger.iter().filter(|e| e.rank == 0) {
        let kind = match e.kind {
            "all_reduce" => "all-reduce",
            "all_gather" => "all-gather",
            "reduce_scatter" => "reduce-scatter",
            "all_to_all" => "all-to-all",
            _ => continue,
        };
        *counts.entry(kind).or_insert(0) += 1;
    }
    counts
}

struct Prepared {
    name: String,
    mode: ExportMode,
    pipeline: Pipeline,
    serial: Log,
    dump: PathBuf,
}

/// Exports every case in both modes, runs them all in one Python process, and checks
/// each; returns the failures.
fn run_dtype(dtype: DType, tag: &str) -> Vec<String> {
    let dir = std::env::temp_dir().join(format!("shardlab-export-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut prepared = Vec::new();
    let mut jobs = Vec::new();
    let mut export_failures = Vec::new();
    for case in cases(dtype) {
        let pipeline = run_pipeline(&case.plan, &PipelineOptions::from_plan(&case.plan.options))
            .unwrap_or_else(|e| panic!("{}: {e}", case.name));
        let serial = run_serial(
            &pipeline,
            &RunOptions {
                steps: STEPS,
                ..Default::default()
            },
        )
        .unwrap_or_else(|e| panic!("{}: {e}", case.name));
        for mode in [ExportMode::Gspmd, ExportMode::ShardMap] {
            let opts = ExportOptions {
                mode,
                constrain: Constrain::Annotated,
                source: case.name.clone(),
                init: Default::default(),
            };
            let script = match export_jax(&pipeline, &opts) {
                Ok(s) => s,
                Err(e) => {
                    export_failures.push(format!("{} ({}): {e}", case.name, mode.name()));
                    continue;
                }
            };
            let name = format!("{}.{}", case.name, mode.name());
            let path = dir.join(format!("{name}.py"));
            std::fs::write(&path, script).unwrap();
            let dump = dir.join(format!("{name}.dump"));
            jobs.push(serde_json::json!({
                "script": path,
                "args": ["--dump", dump, "--steps", STEPS.to_string()],
            }));
            prepared.push(Prepared {
                name,
                mode,
                pipeline: pipeline.clone(),
                serial: serial.clone(),
                dump,
            });
        }
    }
    let jobs_file = dir.join("jobs.json");
    std::fs::write(&jobs_file, serde_json::to_string(&jobs).unwrap()).unwrap();
    let results_file = dir.join("results.json");
    let runner = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/export/run_scripts.py");
    let status = Command::new(python())
        .arg(&runner)
        .arg(&jobs_file)
        .arg(&results_file)
        .status()
        .expect("python starts");
    assert!(status.success(), "{} failed", runner.display());
    let results: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&results_file).unwrap()).unwrap();
    let mut failures = export_failures;
    for (prep, result) in prepared.iter().zip(&results) {
        if let Some(err) = result.get("error").and_then(|e| e.as_str()) {
            failures.push(format!("{}: the script failed:\n{err}", prep.name));
            continue;
        }
        let out = &result["output"];
        let losses: Vec<f64> = out["losses"]
            .as_array()
            .map(|l| l.iter().filter_map(|x| x.as_f64()).collect())
            .unwrap_or_default();
        assert_eq!(losses.len(), STEPS, "{}: {out}", prep.name);
        for (tensor, pass, diff, tol) in check_dump(&prep.serial, &prep.dump, &losses) {
            if !pass {
                failures.push(format!(
                    "{}: {tensor} differs by {diff:.3e} (tolerance {tol:.3e})",
                    prep.name
                ));
            }
        }
        if prep.mode == ExportMode::ShardMap && !prep.pipeline.is_pipelined() {
            let ours = ledger_counts(&prep.pipeline);
            for kind in ["all-reduce", "all-gather", "reduce-scatter", "all-to-all"] {
                let xla = out["collectives"][kind]["count"]
                    .as_u64()
                    .unwrap_or(u64::MAX);
                let want = ours.get(kind).copied().unwrap_or(0) as u64;
                if xla != want {
                    failures.push(format!(
                        "{}: XLA runs {xla} {kind}, our ledger has {want} on rank 0",
                        prep.name
                    ));
                }
            }
        }
        let spread = out["max_replica_difference"]
            .as_f64()
            .unwrap_or(f64::INFINITY);
        if spread != 0.0 {
            failures.push(format!("{}: replicas differ by {spread:e}", prep.name));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    failures
}

#[test]
fn exported_scripts_equal_the_serial_step_f32_and_f64() {
    let f32_thread = std::thread::spawn(|| run_dtype(DType::F32, "f32"));
    let mut failures = run_dtype(DType::F64, "f64");
    failures.extend(f32_thread.join().unwrap());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
