//! `shardlab import` as a user runs it: the census and notes on standard output, the plan
//! file under `--parallel`'s strategy, which `run` then verifies; bad flags refused by name.
#![cfg(not(target_arch = "wasm32"))]

use std::process::{Command, Output};

fn shardlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_shardlab"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn fixture(name: &str) -> String {
    format!("{}/tests/models/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn import_under_a_strategy_writes_a_plan_that_runs_equal_to_serial() {
    let dir = std::env::temp_dir().join(format!("shardlab-cli-import-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plan = dir.join("llama.plan");
    let plan = plan.to_str().unwrap();
    let llama = fixture("llama_model_2l.onnx");
    let out = shardlab(&["import", &llama, "--parallel", "dp=2,tp=2", "-o", plan]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(": 91 ops from 234 nodes (Identity × 89, Mul × 33,"),
        "{stdout}"
    );
    assert!(stdout.ends_with(&format!("wrote {plan}\n")), "{stdout}");
    let text = std::fs::read_to_string(plan).unwrap();
    // The census leads the file as comments, then the strategy's mesh and annotations:
    // the batch over dp, the attention's and MLP's weights Megatron-style over tp.
    assert!(text.starts_with("# imported "), "{text}");
    for line in ["mesh [2, 2] (dp, tp)", "shard input_ids [dp, -]"] {
        assert!(text.lines().any(|l| l == line), "{line}:\n{text}");
    }
    let run = shardlab(&["run", plan]);
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{stdout}");
    assert!(
        stdout.ends_with("PASS: 41 of 41 tensors within tolerance\n"),
        "{stdout}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_strategies_and_sizes_are_refused_by_name() {
    let mlp = fixture("mlp_block.onnx");
    let cases: [(&[&str], &str); 4] = [
        (
            &["--parallel", "dp=5"],
            "no input has a batch of at least dp=5 to split (x [4, 16, 64])",
        ),
        (&["--parallel", "dp=0"], "dp=0"),
        (&["--parallel", "xx=2"], "xx"),
        (
            &["--dim", "DynamicDimension.0"],
            "--dim sizes `DynamicDimension.0`: expected NAME=N",
        ),
    ];
    for (flags, want) in cases {
        let mut args = vec!["import", mlp.as_str(), "--dim", "DynamicDimension.0=4"];
        args.extend_from_slice(flags);
        let out = shardlab(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {stderr}");
        assert!(stderr.contains(want), "{flags:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{flags:?}: nothing is written");
    }
}

/// `--with-values` writes the file's own weights and tables for `run --inputs`: a weight's
/// `.npy` holds the initializer's values exactly, a mask of −3.4e38 is left to seeded
/// values (it would swamp run's tolerances), and the run trains from them.
#[test]
fn with_values_writes_the_models_own_weights_for_run() {
    use prost::Message;
    use shardlab::import::onnx_proto::ModelProto;
    let dir = std::env::temp_dir().join(format!("shardlab-with-values-{}", std::process::id()));
    let values = dir.join("values");
    let plan = dir.join("llama.plan");
    std::fs::create_dir_all(&dir).unwrap();
    let (values, plan) = (values.to_str().unwrap(), plan.to_str().unwrap());
    let llama = fixture("llama_model_2l.onnx");
    let out = shardlab(&[
        "import",
        &llama,
        "--parallel",
        "dp=2",
        "--with-values",
        values,
        "-o",
        plan,
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("note: `p2o.pd_op.where.0.0` holds -3.4028234663852886e38"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("wrote the values of 24 variables into {values}")),
        "{stderr}"
    );
    // linear_2.w_0 as the ONNX file holds it (raw little-endian f32), against the .npy.
    let model = ModelProto::decode(std::fs::read(&llama).unwrap().as_slice()).unwrap();
    let graph = model.graph.unwrap();
    let w = graph
        .initializer
        .iter()
        .find(|t| t.name.as_deref() == Some("linear_2.w_0"))
        .unwrap();
    let raw = w.raw_data.as_deref().unwrap();
    let file: Vec<f64> = raw
        .chunks_exact(4)
        .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
        .collect();
    let npy = std::fs::read(format!("{values}/linear_2.w_0.npy")).unwrap();
    let t = shardlab::exec::npy::read_npy(&npy).unwrap();
    assert_eq!(t.shape.as_slice(), [64, 64]);
    assert_eq!(t.to_f64(), file);
    // The run trains from them: its loss is not the seeded run's.
    let loss = |args: &[&str]| -> String {
        let run = shardlab(args);
        let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
        assert!(stdout.contains("PASS: 41 of 41"), "{stdout}");
        let line = stdout
            .lines()
            .find(|l| l.trim_start().starts_with("loss"))
            .unwrap_or("");
        line.to_string()
    };
    let seeded = loss(&["run", plan, "--steps", "1"]);
    let own = loss(&["run", plan, "--steps", "1", "--inputs", values]);
    assert_ne!(seeded, own);
    // A Paddle program has no weights to write.
    let pir = fixture("mlp_block.pir");
    let out = shardlab(&["import", &pir, "--with-values", values]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("a Paddle program's text has no weights"));
    std::fs::remove_dir_all(&dir).ok();
}
