//! An exported script run as a real multi-process JAX job, the way a user starts it on two
//! hosts: 2 processes × 4 CPU devices on 127.0.0.1, `jax.distributed.initialize` with a
//! coordinator, collectives between the processes over gloo. The plan is expert
//! parallelism by sizes (`dp=8,ep=4`, mesh `2x4:dp,ep`): its all-to-alls and the dense
//! gradients' all-reduce span both processes. Each process's dump is held to ShardLab's
//! serial step by the verifier's rule, as the single-process export suite holds its scripts.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use shardlab::exec::npy::read_npy;
use shardlab::exec::run::{run_serial, Log, Record, RunOptions};
use shardlab::exec::verify::compare;
use shardlab::export::{export_jax, Constrain, ExportMode, ExportOptions};
use shardlab::ir::DType;
use shardlab::models::Model;
use shardlab::passes::driver::{run_passes, PassOptions};
use shardlab::plan::parallel::Parallel;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const STEPS: usize = 2;
/// Both processes must finish within this (a hung coordinator would otherwise hang CI).
const DEADLINE: Duration = Duration::from_secs(300);

fn python() -> PathBuf {
    let py = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/jaxenv/bin/python");
    assert!(
        py.exists(),
        "{} is missing: run scripts/setup.sh",
        py.display()
    );
    py
}

fn read(dir: &Path, file: &str) -> Record {
    let path = dir.join(format!("{file}.npy"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Record {
        name: file.to_string(),
        copies: vec![read_npy(&bytes).unwrap()],
        bound: 0.0,
        elem_bounds: None,
    }
}

/// The failing tensors of one process's dump against the serial log.
fn failures(serial: &Log, dir: &Path) -> Vec<String> {
    let mut checks = vec![compare("loss", &serial.loss_records[0], &read(dir, "loss"))];
    for g in &serial.grads {
        checks.push(compare(&g.name, g, &read(dir, &format!("grad.{}", g.name))));
    }
    for p in &serial.params {
        checks.push(compare(&p.name, p, &read(dir, &p.name)));
    }
    assert_eq!(checks.len(), 1 + serial.grads.len() + serial.params.len());
    let bad = checks.iter().filter(|c| !c.pass);
    bad.map(|c| {
        format!(
            "{} differs by {:e} (tolerance {:e})",
            c.tensor, c.max_abs_diff, c.tolerance
        )
    })
    .collect()
}

/// Waits for every child, killing all of them past the deadline; their outputs.
fn wait_all(children: Vec<Child>) -> Vec<std::process::Output> {
    let start = Instant::now();
    let mut children: Vec<Option<Child>> = children.into_iter().map(Some).collect();
    loop {
        let done = children
            .iter_mut()
            .all(|c| c.as_mut().is_some_and(|c| c.try_wait().unwrap().is_some()));
        if done {
            break;
        }
        if start.elapsed() > DEADLINE {
            for c in children.iter_mut().flatten() {
                let _ = c.kill();
            }
            panic!("the two processes did not finish within {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    children
        .iter_mut()
        .map(|c| c.take().unwrap().wait_with_output().unwrap())
        .collect()
}

#[test]
fn an_exported_script_runs_as_two_processes_of_four_devices() {
    let cfg = common::tiny_mixtral(DType::F64);
    let ep = Parallel::parse("dp=8,ep=4").unwrap();
    let program = Model::Llama.build(&cfg).unwrap();
    let plan = common::plan_with(program.clone(), &ep.mesh_spec(), &ep.shard_specs(&program));
    let passes = run_passes(&plan, &PassOptions::from_plan(&plan.options)).unwrap();
    let run = RunOptions {
        steps: STEPS,
        ..Default::default()
    };
    let serial = run_serial(&passes, &run).unwrap();
    let opts = ExportOptions {
        mode: ExportMode::ShardMap,
        constrain: Constrain::Annotated,
        source: "tests/export_multiprocess.rs".into(),
        init: Default::default(),
    };
    let dir = std::env::temp_dir().join(format!("shardlab-multiprocess-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("ep.py");
    std::fs::write(&script, export_jax(&passes, &opts).unwrap()).unwrap();
    // A free port for the coordinator (taken, then released for process 0 to bind).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let coordinator = format!("127.0.0.1:{port}");
    let children: Vec<Child> = (0..2)
        .map(|id| {
            Command::new(python())
                .arg(&script)
                .args(["--coordinator", &coordinator, "--num-processes", "2"])
                .args([
                    "--process-id",
                    &id.to_string(),
                    "--steps",
                    &STEPS.to_string(),
                ])
                .arg("--dump")
                .arg(dir.join(format!("dump{id}")))
                .env_remove("XLA_FLAGS")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outputs = wait_all(children);
    let mut losses = Vec::new();
    for (id, out) in outputs.iter().enumerate() {
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "process {id}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let line = stdout.lines().last().unwrap_or_default();
        let json: serde_json::Value = serde_json::from_str(line).unwrap();
        // Each process holds 4 of the 8 devices, and the all-to-alls ran between them.
        assert!(
            json["collectives"]["all-to-all"]["count"].as_u64() > Some(0),
            "{line}"
        );
        losses.push(json["losses"].clone());
        let bad = failures(&serial, &dir.join(format!("dump{id}")));
        assert!(bad.is_empty(), "process {id}:\n{}", bad.join("\n"));
    }
    assert_eq!(
        losses[0], losses[1],
        "both processes report the same losses"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
