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
