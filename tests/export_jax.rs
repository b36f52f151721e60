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
#![cfg(not(target_arch = "wasm32"))]

mod common;

use common::{plan_with, standard_configs};
use shardlab::exec::init::{initial_value, InitOptions};
use shardlab::exec::npy::read_npy;
use shardlab::exec::run::{run_serial, Log, Record, RunOptions};
use shardlab::exec::tensor::Tensor;
use shardlab::exec::verify::compare;
use shardlab::export::{export_jax, Constrain, ExportMode, ExportOptions};
use shardlab::ir::{Attr, DType, OpType, VarKind};
use shardlab::models::scenarios::scenarios;
use shardlab::models::{Model, ModelConfig};
use shardlab::passes::driver::{run_passes, PassOptions, Passes};
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
/// optimizer-phase feature (AMP, clipping, AdamW, Megatron sums, recompute); GPT's tied
/// embedding across four stages.
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
        // Megatron sequence parallelism: all-gathers and reduce-scatters on the sequence.
        if sc.sequence_parallel {
            let cfg = ModelConfig {
                dtype,
                ..sc.config()
            };
            out.push(Case {
                name: sc.name.to_string(),
                plan: plan_with(sc.program(&cfg).unwrap(), sc.mesh, &sc.shards),
            });
        }
    }
    // Sequence parallelism by pattern (`--parallel tp=2,sp`) on a decoder with rms_norm,
    // rotary embeddings and a vocab-parallel embedding and head.
    let llama = ModelConfig {
        layers: 1,
        dtype,
        ..Model::Llama.default_config()
    };
    let sp = shardlab::plan::parallel::Parallel::parse("tp=2,sp").unwrap();
    let program = sp.prepare(&Model::Llama.build(&llama).unwrap());
    let shards = sp.shard_specs(&program);
    out.push(Case {
        name: "sequence_parallel_llama_by_sizes".into(),
        plan: plan_with(program, &sp.mesh_spec(), &shards),
    });
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
    let (_, mesh_dp, shards_dp) = standard_configs(Model::Mlp, 1).remove(0);
    let mut accumulate = build(Model::Mlp, 1, mesh_dp, &shards_dp, dtype);
    accumulate.options.micro_batches = 2;
    accumulate.options.optimizer = shardlab::plan::OptimizerKind::Momentum;
    out.push(Case {
        name: "mlp_dp_accumulate2_momentum".into(),
        plan: accumulate,
    });
    let mut pp = build(Model::Gpt, 2, "2x2:pp,dp", &["x=dp,-,-".to_string()], dtype);
    pp.options.micro_batches = 2;
    out.push(Case {
        name: "gpt_pp2_dp".into(),
        plan: pp,
    });
    // Stages only: each stage one device, the 1F1B schedule (the numbers do not depend on it).
    let mut pure = build(Model::Gpt, 2, "2:pp", &[], dtype);
    pure.options.micro_batches = 2;
    pure.options.schedule = shardlab::plan::ScheduleKind::OneFOneB;
    out.push(Case {
        name: "gpt_pp2_1f1b".into(),
        plan: pure,
    });
    // GPT's tied embedding over 4 stages: the first and last stages' gradient shares are
    // one host-run all-reduce over the two stages, the global norm's another over all four.
    let gpt_lm = ModelConfig {
        layers: 4,
        dtype,
        ..Model::GptLm.default_config()
    };
    let strategy = shardlab::plan::parallel::Parallel::parse("dp=2,pp=4").unwrap();
    let program = Model::GptLm.build(&gpt_lm).unwrap();
    let mut tied = plan_with(
        program.clone(),
        &strategy.mesh_spec(),
        &strategy.shard_specs(&program),
    );
    tied.options.micro_batches = 2;
    tied.options.clip_norm = Some(0.5);
    tied.options.optimizer = shardlab::plan::OptimizerKind::Adam;
    out.push(Case {
        name: "gpt_lm_tied_pp4_dp2_clip_adam".into(),
        plan: tied,
    });
    out.extend(uneven_cases(dtype));
    out.push(moe_case(dtype));
    out.push(expert_parallel_case(dtype));
    out.extend(context_parallel_cases(dtype));
    out
}

/// Context parallelism by sizes on a Llama block: ring attention (`cp=4`, zig-zag: the
/// ring's blocks and `lax.ppermute` in `shard_map` mode) and Ulysses (`dp=2,cp=2,tp=2`:
/// all-to-alls from the sequence to the heads and back).
fn context_parallel_cases(dtype: DType) -> Vec<Case> {
    let cfg = ModelConfig {
        layers: 1,
        seq: 16,
        heads: 8,
        kv_heads: 4,
        hidden: 64,
        dtype,
        ..Model::Llama.default_config()
    };
    let program = Model::Llama.build(&cfg).unwrap();
    [
        ("llama_cp4_ring", "cp=4,cp_mode=ring"),
        (
            "llama_dp2_cp2_tp2_ulysses",
            "dp=2,cp=2,tp=2,cp_mode=ulysses",
        ),
    ]
    .into_iter()
    .map(|(name, spec)| {
        let p = shardlab::plan::parallel::Parallel::parse(spec).unwrap();
        let prepared = p.prepare(&program);
        let shards = p.shard_specs(&prepared);
        Case {
            name: name.into(),
            plan: plan_with(prepared, &p.mesh_spec(), &shards),
        }
    })
    .collect()
}

/// Expert parallelism by sizes (`dp=8,ep=4`: mesh `2x4:dp,ep`, the batch over both, a
/// Mixtral-style decoder's four experts over `ep`): the dispatch's and the combine's
/// all-to-alls over a co-sharded dim, as `lax.all_to_all` in `shard_map` mode and as
/// sharding constraints XLA lowers in `gspmd` mode.
fn expert_parallel_case(dtype: DType) -> Case {
    let cfg = common::tiny_mixtral(dtype);
    let ep = shardlab::plan::parallel::Parallel::parse("dp=8,ep=4").unwrap();
    let program = Model::Llama.build(&cfg).unwrap();
    let shards = ep.shard_specs(&program);
    Case {
        name: "mixtral_dp8_ep4".into(),
        plan: plan_with(program, &ep.mesh_spec(), &shards),
    }
}

/// A Mixture-of-Experts layer (`tests/plans/moe.plan`: two token groups with drops, one a
/// rank, batched experts, a sigmoid gate) under dp=2: the prelude's `moe_dispatch` and
/// `moe_combine` (and their `jax.vjp`s) hold ShardLab's drop rule.
fn moe_case(dtype: DType) -> Case {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/plans/moe.plan"))
            .unwrap();
    let text = if dtype == DType::F32 {
        text.replace("f64[", "f32[")
    } else {
        text
    };
    Case {
        name: "moe_groups2_dp2".into(),
        plan: shardlab::plan::parse_plan(&text).unwrap().0,
    }
}

/// Uneven shards (gspmd only: padded outside jit, sliced inside): a batch of 6 on 4 ranks,
/// 10 heads on 4, and a vocabulary of 10 with the table and the loss vocab-parallel.
fn uneven_cases(dtype: DType) -> Vec<Case> {
    let sized = |model: Model, cfg: ModelConfig, mesh: &str, shards: &[&str]| {
        let cfg = ModelConfig { dtype, ..cfg };
        plan_with(model.build(&cfg).unwrap(), mesh, shards)
    };
    let gpt = ModelConfig {
        layers: 1,
        ..Model::Gpt.default_config()
    };
    let lm = ModelConfig {
        layers: 1,
        vocab: 10,
        ..Model::EmbeddingLm.default_config()
    };
    vec![
        Case {
            name: "uneven_gpt_batch6_dp4".into(),
            plan: sized(
                Model::Gpt,
                ModelConfig {
                    batch: 6,
                    ..gpt.clone()
                },
                "4:dp",
                &["x=dp,-,-"],
            ),
        },
        Case {
            name: "uneven_gpt_heads10_mp4".into(),
            plan: sized(
                Model::Gpt,
                ModelConfig {
                    heads: 10,
                    hidden: 40,
                    ..gpt
                },
                "4:mp",
                &["h0.attn.q.t=-,mp,-,-"],
            ),
        },
        Case {
            name: "uneven_lm_vocab10_dp2_mp4".into(),
            plan: sized(
                Model::EmbeddingLm,
                lm,
                "2x4:dp,mp",
                &["ids=dp,-", "wte=mp,-", "lm_head.w=-,mp"],
            ),
        },
    ]
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

/// Rank 0's collectives per XLA kind, from the ledger (only `phase`'s, if given).
fn ledger_counts(
    p: &Passes,
    phase: Option<&str>,
) -> std::collections::BTreeMap<&'static str, usize> {
    let mut counts = std::collections::BTreeMap::new();
    let in_phase = |e: &&shardlab::passes::ledger::Entry| phase.is_none_or(|ph| e.phase == ph);
    for e in p.ledger.iter().filter(|e| e.rank == 0).filter(in_phase) {
        let kind = match e.kind {
            // One fused op of three all-reduces (MAX of the row max, SUM of the target logit,
            // SUM of the exp-sums), which the script runs as three psums.
            "c_softmax_with_cross_entropy" => {
                *counts.entry("all-reduce").or_insert(0) += 3;
                continue;
            }
            "all_reduce" => "all-reduce",
            "all_gather" => "all-gather",
            "reduce_scatter" => "reduce-scatter",
            "all_to_all" => "all-to-all",
            "ppermute" => "collective-permute",
            _ => continue,
        };
        *counts.entry(kind).or_insert(0) += 1;
    }
    counts
}

struct Prepared {
    name: String,
    mode: ExportMode,
    pipeline: Passes,
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
        let pipeline = run_passes(&case.plan, &PassOptions::from_plan(&case.plan.options))
            .unwrap_or_else(|e| panic!("{}: {e}", case.name));
        let serial = run_serial(
            &pipeline,
            &RunOptions {
                steps: STEPS,
                ..Default::default()
            },
        )
        .unwrap_or_else(|e| panic!("{}: {e}", case.name));
        // gspmd with every forward tensor pinned, once: XLA must honour every constraint.
        let mut variants = vec![
            (ExportMode::Gspmd, Constrain::Annotated, ""),
            (ExportMode::ShardMap, Constrain::Annotated, ""),
        ];
        if case.name.starts_with("uneven_") {
            variants.pop();
        }
        if case.name == "gpt_dp_mp" {
            variants.push((ExportMode::Gspmd, Constrain::All, "_constrain_all"));
        }
        // Expert parallelism with only the annotations pinned: XLA's propagation gathers
        // the experts' weights (two forward all-gathers) rather than move the tokens. Pinned
        // at every forward tensor it moves them by the plan's two all-to-alls.
        if case.name.starts_with("mixtral") {
            variants[0].1 = Constrain::All;
        }
        for (mode, constrain, suffix) in variants {
            let opts = ExportOptions {
                mode,
                constrain,
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
            let name = format!("{}{suffix}.{}", case.name, mode.name());
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
    // Checks that must fail: each sabotaged script breaks one thing the checks guard.
    let sabotage = sabotaged(&prepared, &dir, tag == "f32");
    for (job, _, _) in &sabotage {
        jobs.push(job.clone());
    }
    // The scripts' initial values against ShardLab's, bit for bit.
    let inits = init_jobs(&prepared, &dir);
    for (job, _, _) in &inits {
        jobs.push(job.clone());
    }
    // The prelude's reading of HLO (replica groups in every form XLA prints, tuple and
    // async counts), on lines whose answers are known.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let selftest = dir.join("prelude_selftest.py");
    std::fs::write(
        &selftest,
        std::fs::read_to_string(root.join("src/export/prelude.py")).unwrap()
            + &std::fs::read_to_string(root.join("tests/export/prelude_selftest.py")).unwrap(),
    )
    .unwrap();
    jobs.push(serde_json::json!({"script": selftest, "args": []}));
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
    let extra = &results[prepared.len()..];
    if results.last().and_then(|r| r.get("output")).is_none() {
        failures.push(format!(
            "the prelude's self-test failed: {}",
            results.last().cloned().unwrap_or_default()
        ));
    }
    failures.extend(check_sabotage(
        &prepared,
        &sabotage,
        &extra[..sabotage.len()],
    ));
    failures.extend(check_inits(&prepared, &inits, &extra[sabotage.len()..]));
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
        // gspmd mode: XLA partitions the serial step itself, but its forward maps one to
        // one onto ours (the backward differs: XLA's combiner fuses the gradients'
        // all-reduces, and it reduces the loss; docs/export.md has the table). A script
        // whose shardings are not the plan's layouts makes XLA reshard, and its forward
        // collectives differ. Not one to one, so left out: AMP's flag and the global norm
        // (XLA counts the optimizer's collectives outside backward, so with the forward),
        // recomputation, and sequence parallelism (XLA all-reduces and slices where we
        // reduce-scatter), and uneven heads and vocabularies (XLA pads and reshards them
        // its own way: 16 all-gathers for 10 heads on 4 where we gather once; an uneven
        // batch, with no collective over it, stays one to one).
        let options = &prep.pipeline.plan.options;
        let one_to_one = !options.amp
            && options.clip_norm.is_none()
            && options.recompute == shardlab::plan::Recompute::Off
            && !prep.name.starts_with("gpt_sequence_parallel")
            && !prep.name.starts_with("sequence_parallel_llama")
            && !prep.name.starts_with("uneven_gpt_heads")
            && !prep.name.starts_with("uneven_lm_vocab")
            // Context parallelism: XLA's partitioner knows no ring attention or Ulysses
            // (it gathers the sequence around the attention); the numbers still agree.
            && !prep.name.starts_with("llama_cp4_ring")
            && !prep.name.starts_with("llama_dp2_cp2_tp2_ulysses");
        if prep.mode == ExportMode::Gspmd && !prep.pipeline.is_pipelined() && one_to_one {
            let ours = ledger_counts(&prep.pipeline, Some("forward"));
            for kind in ["all-reduce", "all-gather", "reduce-scatter", "all-to-all"] {
                let c = &out["collectives"][kind];
                let xla =
                    c["count"].as_u64().unwrap_or(u64::MAX) - c["backward"].as_u64().unwrap_or(0);
                let want = ours.get(kind).copied().unwrap_or(0) as u64;
                if xla != want {
                    failures.push(format!(
                        "{}: XLA's forward runs {xla} {kind}, our ledger's forward has {want} \
                         on rank 0",
                        prep.name
                    ));
                }
            }
        }
        if prep.mode == ExportMode::ShardMap && !prep.pipeline.is_pipelined() {
            let ours = ledger_counts(&prep.pipeline, None);
            let kinds = [
                "all-reduce",
                "all-gather",
                "reduce-scatter",
                "all-to-all",
                "collective-permute",
            ];
            for kind in kinds {
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

/// A copy of a case's script with `from` replaced by `to` once (after the prelude).
fn sabotage_one(
    prepared: &[Prepared],
    dir: &Path,
    case: &str,
    from: &str,
    to: &str,
    what: &str,
) -> (serde_json::Value, String, usize) {
    let k = prepared
        .iter()
        .position(|p| p.name == case)
        .unwrap_or_else(|| panic!("no case {case}"));
    let script = std::fs::read_to_string(dir.join(format!("{case}.py"))).unwrap();
    let plan_at = script.find("# The plan\n").unwrap();
    let at = plan_at
        + script[plan_at..]
            .find(from)
            .unwrap_or_else(|| panic!("{case}: no `{from}`"));
    let broken = format!("{}{to}{}", &script[..at], &script[at + from.len()..]);
    let path = dir.join(format!("{case}.broken-{}.py", what.replace(' ', "-")));
    std::fs::write(&path, broken).unwrap();
    let dump = dir.join(format!("{case}.broken-{}.dump", what.replace(' ', "-")));
    (
        serde_json::json!({"script": path, "args": ["--dump", dump, "--steps", STEPS.to_string()]}),
        what.to_string(),
        k,
    )
}

/// Sabotaged scripts (f32 only): a tensor-parallel all-reduce dropped, the data-parallel
/// 1/N scale dropped, and the exact gelu swapped for its tanh approximation (a change of
/// about 1e-3 that the tolerances must see).
fn sabotaged(
    prepared: &[Prepared],
    dir: &Path,
    on: bool,
) -> Vec<(serde_json::Value, String, usize)> {
    if !on {
        return Vec::new();
    }
    vec![
        sabotage_one(
            prepared,
            dir,
            "mlp_mp.shard_map",
            "all_reduce(",
            "(lambda x, *a, **k: x)(",
            "no all_reduce",
        ),
        sabotage_one(
            prepared,
            dir,
            "mlp_dp.shard_map",
            "scale(",
            "(lambda x, *a: x)(",
            "no scale",
        ),
        sabotage_one(
            prepared,
            dir,
            "mlp_dp.gspmd",
            "gelu(v[\"linear_0.tmp_1\"], False)",
            "gelu(v[\"linear_0.tmp_1\"], True)",
            "tanh gelu",
        ),
    ]
}

/// Each sabotaged script must fail a check: some tensor out of tolerance, and for a
/// dropped collective, XLA's count one short of the ledger's.
fn check_sabotage(
    prepared: &[Prepared],
    sabotage: &[(serde_json::Value, String, usize)],
    results: &[serde_json::Value],
) -> Vec<String> {
    let mut failures = Vec::new();
    for ((job, what, k), result) in sabotage.iter().zip(results) {
        let Some(out) = result.get("output") else {
            failures.push(format!("sabotaged ({what}): the script failed: {result}"));
            continue;
        };
        let prep = &prepared[*k];
        let dump = PathBuf::from(job["args"][1].as_str().unwrap());
        let losses: Vec<f64> = out["losses"]
            .as_array()
            .map(|l| l.iter().filter_map(|x| x.as_f64()).collect())
            .unwrap_or_default();
        let caught = check_dump(&prep.serial, &dump, &losses)
            .iter()
            .filter(|(_, pass, _, _)| !pass)
            .count();
        if caught == 0 {
            failures.push(format!("{} with {what}: no check failed", prep.name));
        }
        if what == "no all_reduce" {
            let ours = ledger_counts(&prep.pipeline, None)["all-reduce"] as u64;
            let xla = out["collectives"]["all-reduce"]["count"]
                .as_u64()
                .unwrap_or(0);
            if xla + 1 != ours {
                failures.push(format!(
                    "{} with {what}: XLA runs {xla} all-reduces, the ledger {ours}",
                    prep.name
                ));
            }
        }
    }
    failures
}

/// Jobs writing each case's initial values (`--dump-init`) for a case with and one
/// without micro-batches.
fn init_jobs(prepared: &[Prepared], dir: &Path) -> Vec<(serde_json::Value, String, usize)> {
    ["mlp_dp.shard_map", "gpt_pp2_dp.gspmd"]
        .iter()
        .filter_map(|name| prepared.iter().position(|p| p.name == *name))
        .map(|k| {
            let init = dir.join(format!("{}.init", prepared[k].name));
            (
                serde_json::json!({
                    "script": dir.join(format!("{}.py", prepared[k].name)),
                    "args": ["--dump-init", init, "--steps", "1"],
                }),
                prepared[k].name.clone(),
                k,
            )
        })
        .collect()
}

/// Every initial value a script wrote equals ShardLab's, element for element (inputs of a
/// pipelined plan are the whole batch).
fn check_inits(
    prepared: &[Prepared],
    inits: &[(serde_json::Value, String, usize)],
    results: &[serde_json::Value],
) -> Vec<String> {
    let mut failures = Vec::new();
    for ((job, name, k), result) in inits.iter().zip(results) {
        if result.get("output").is_none() {
            failures.push(format!("{name} --dump-init failed: {result}"));
            continue;
        }
        let dir = PathBuf::from(job["args"][1].as_str().unwrap());
        let p = &prepared[*k].pipeline;
        let program = &p.full.program;
        let mut compared = 0;
        for v in program.vars().iter().filter(|v| v.kind.is_source()) {
            let mut var = v.clone();
            if p.micro_batches() > 1 && matches!(v.kind, VarKind::Input | VarKind::Label) {
                var.ty.shape[0] *= p.micro_batches();
            }
            let want = initial_value(program, &var, &InitOptions::default()).unwrap();
            let path = dir.join(format!("{}.npy", v.name));
            let got = read_npy(&std::fs::read(&path).unwrap()).unwrap();
            if got.shape != want.shape || got.to_f64() != want.to_f64() {
                failures.push(format!("{name}: the initial value of `{}` differs", v.name));
            }
            compared += 1;
        }
        if compared == 0 {
            failures.push(format!("{name}: no initial values compared"));
        }
    }
    failures
}

#[test]
fn exported_scripts_equal_the_serial_step_f32_and_f64() {
    let f32_thread = std::thread::spawn(|| run_dtype(DType::F32, "f32"));
    let mut failures = run_dtype(DType::F64, "f64");
    failures.extend(f32_thread.join().unwrap());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The same plan exports to the same bytes, planned twice; the modes differ.
#[test]
fn exports_are_deterministic() {
    let (_, mesh, shards) = standard_configs(Model::Gpt, 2).remove(2);
    let script = |mode| {
        let plan = build(Model::Gpt, 2, mesh, &shards, DType::F32);
        let p = run_passes(&plan, &PassOptions::from_plan(&plan.options)).unwrap();
        export_jax(
            &p,
            &ExportOptions {
                mode,
                constrain: Constrain::Annotated,
                source: "test".into(),
                init: Default::default(),
            },
        )
        .unwrap()
    };
    for mode in [ExportMode::Gspmd, ExportMode::ShardMap] {
        assert_eq!(script(mode), script(mode), "{}", mode.name());
    }
    assert_ne!(script(ExportMode::Gspmd), script(ExportMode::ShardMap));
}

/// What cannot be exported is an error naming it, not a script missing it: a collective
/// over ranks that are not a group along mesh axes (JAX collectives name axes), and a
/// reduce-scatter that does not sum.
#[test]
fn an_unexportable_plan_is_a_clear_error() {
    let (_, mesh, shards) = standard_configs(Model::Mlp, 1).remove(2);
    let plan = build(Model::Mlp, 1, mesh, &shards, DType::F32);
    let p = run_passes(&plan, &PassOptions::from_plan(&plan.options)).unwrap();
    let opts = ExportOptions {
        mode: ExportMode::ShardMap,
        constrain: Constrain::Annotated,
        source: "test".into(),
        init: Default::default(),
    };
    assert!(export_jax(&p, &opts).is_ok());
    let (index, _) = p.partitioned.ranks[0]
        .program
        .ops()
        .iter()
        .enumerate()
        .find(|(_, op)| op.ty == OpType::AllReduce)
        .expect("an all_reduce");
    let with = |key: &str, value: Attr| {
        let mut q = p.clone();
        for r in &mut q.partitioned.ranks {
            let op = r.program.op_mut(index).unwrap();
            op.attrs.insert(key.into(), value.clone());
        }
        export_jax(&q, &opts).unwrap_err().to_string()
    };
    let err = with("group", Attr::Ints(vec![0, 3]));
    assert!(
        err.contains(&format!("op{index} (all_reduce)"))
            && err.contains("[0, 3]")
            && err.contains("not a group along mesh axes"),
        "{err}"
    );
    let mut q = p.clone();
    for r in &mut q.partitioned.ranks {
        let op = r.program.op_mut(index).unwrap();
        op.ty = OpType::ReduceScatter;
        op.attrs
            .insert("reduce_type".into(), Attr::Str("MAX".into()));
    }
    let err = export_jax(&q, &opts).unwrap_err().to_string();
    assert!(
        err.contains("reduce_scatter") && err.contains("MAX"),
        "{err}"
    );
    // Uneven shards: one shard_map body cannot hold ranks whose shapes differ.
    let uneven = &uneven_cases(DType::F32)[0].plan;
    let p = run_passes(uneven, &PassOptions::from_plan(&uneven.options)).unwrap();
    assert_eq!(
        export_jax(&p, &opts).unwrap_err().to_string(),
        "`x` is split unevenly: uneven shards export in gspmd mode without a pipeline only \
         (XLA needs even shards at a jit boundary, so gspmd pads them outside jit and slices \
         inside; a shard_map body is one program for every rank, whose shapes would differ)"
    );
}
