//! The command-line tool as a user runs it: exit codes, stdout and stderr.
#![cfg(not(target_arch = "wasm32"))]

use std::io::Write;
use std::process::{Command, Output};

fn shardlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_shardlab"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn temp_file(name: &str, contents: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("shardlab-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::File::create(&path)
        .unwrap()
        .write_all(contents.as_bytes())
        .unwrap();
    path
}

#[test]
fn print_gpt_two_layers_matches_golden_and_checks() {
    let out = shardlab(&["print", "--preset", "gpt", "--layers", "2"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let printed = text(&out.stdout);
    assert_eq!(printed, include_str!("golden/gpt_2.txt"));
    let path = temp_file("gpt2.plan", &printed);
    let out = shardlab(&["check", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        text(&out.stdout)
            .ends_with("ok: 108 variables (34 parameters), 62 ops, no mesh, 0 annotations (a program: `plan` needs a mesh, in the file or --mesh)\n"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn print_with_mesh_and_shards_gives_a_plan_that_checks() {
    let out = shardlab(&[
        "print",
        "--preset",
        "mlp",
        "--mesh",
        "2x4:dp,mp",
        "--shard",
        "x=dp,?",
        "--shard",
        "linear_0.w_0=-,mp",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let printed = text(&out.stdout);
    assert!(
        printed.starts_with("mesh [2, 4] (dp, mp)\n\nvar x: f32[16, 64] input\n"),
        "{printed}"
    );
    assert!(
        printed.ends_with("\nshard x [dp, ?]\nshard linear_0.w_0 [-, mp]\n"),
        "{printed}"
    );
    let path = temp_file("mlp.plan", &printed);
    let out = shardlab(&["check", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("mesh [2, 4] (dp, mp), 2 annotations"));
}

/// A parameter whose only way to the loss is through an op without a gradient (one of the
/// planner's math ops written in a plan) would silently get no gradient; `check` says so at
/// the op's line.
#[test]
fn an_op_without_gradient_on_the_way_to_the_loss_is_an_error() {
    let path = temp_file(
        "nograd.plan",
        "mesh [2] (dp)\nvar x: f32[4, 8] input\nvar w: f32[8, 8] parameter\nvar h: f32[4, 8] activation\nvar m: f32[4, 8] activation\nvar loss: f32[] activation\nop matmul_v2(X=x, Y=w) -> (Out=h)\nop elementwise_max(X=h, Y=x) -> (Out=m)\nop mean(X=m) -> (Out=loss) role=loss\n",
    );
    let p = path.to_str().unwrap();
    let out = shardlab(&["check", p]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        format!("{p}:8:4: planning fails: backward: op1 (elementwise_max) has no gradient, but a parameter reaches the loss through it; its gradient would be silently lost\n{p}: 1 error(s)\n")
    );
}

#[test]
fn check_reports_every_error_with_file_line_and_column() {
    let path = temp_file("broken.plan", "mesh [2, 4] (dp, mp)\nvar x: f32[16, 64] input\nvar w: f32[64, 256] parameter\nvar y: f32[16, 128] activation\nop matmul_v2(X=x, Y=w) -> (Out=y)\nop relu(X=q) -> (Out=y)\nshard x [dp, tp]\n");
    let p = path.to_str().unwrap();
    let out = shardlab(&["check", p]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        format!("{p}:6:11: unknown variable `q` (declare it with `var`)\n{p}:7:14: unknown mesh axis `tp`; the mesh has (dp, mp)\n{p}: 2 error(s)\n")
    );
    // Once it parses, the verifier's problems point at their statements.
    let path = temp_file("wrong.plan", "mesh [2, 4] (dp, mp)\nvar x: f32[16, 64] input\nvar w: f32[64, 256] parameter\nvar y: f32[16, 128] activation\nop matmul_v2(X=x, Y=w) -> (Out=y)\nshard x [dp, dp]\nshard w [-, mp]\nshard w [mp, -]\n");
    let p = path.to_str().unwrap();
    let out = shardlab(&["check", p]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        format!(
            "{p}:5:4: op0: matmul_v2: output Out `y` is declared f32[16, 128] but the op produces f32[16, 256]\n\
             {p}:6:7: shard: `x`: mesh axis `dp` splits more than one dim (dims 0 and 1)\n\
             {p}:8:7: shard: `w` is annotated twice\n\
             {p}: 3 error(s)\n"
        )
    ); // plan and run report them the same way, not as `op0: ...` without a place.
    let check_err = text(&out.stderr);
    for cmd in ["plan", "run"] {
        let out = shardlab(&[cmd, p]);
        assert_eq!(out.status.code(), Some(1), "{cmd}");
        assert_eq!(text(&out.stderr), check_err, "{cmd}");
    }
}

#[test]
fn usage_errors_exit_2_with_a_message() {
    let out = shardlab(&["check", "/nonexistent/plan.txt"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).starts_with("error: /nonexistent/plan.txt: cannot read: "),
        "{}",
        text(&out.stderr)
    );
    let cases: &[(&[&str], &str)] = &[
        (&["print", "--preset", "bert"], "error: unknown preset `bert`; presets: mlp, mlp_mse, gpt, embedding_lm, gpt_lm, llama, gpt2-small, gpt2-xl, gpt3-1.3b, gpt3-13b, gpt3-175b, llama3-8b, llama3-70b, llama3-405b, mixtral-8x7b\n"),
        (&["print", "--preset", "gpt", "--heads", "5"], "error: preset gpt: hidden 64 must be divisible by heads 5\n"),
        (&["print", "--preset", "gpt", "--dtype", "f16"], "error: --dtype `f16`: expected f32 or f64\n"),
        (&["print", "--preset", "mlp", "--mesh", "2xq"], "error: mesh `2xq`: `q` is not an axis size (write e.g. 2x4:dp,mp)\n"),
        (&["print", "--preset", "mlp", "--mesh", "2x4:dp"], "error: mesh `2x4:dp`: the mesh has 2 axes but 1 axis names were given\n"),
        (&["print", "--preset", "mlp", "--shard", "x=dp,-"], "error: --shard needs --mesh\n"),
        (&["print", "--preset", "mlp", "--mesh", "4:dp", "--shard", "x=mp,-"], "error: shard `x=mp,-`: unknown mesh axis `mp`; the mesh has (dp)\n"),
        (&["print", "--preset", "mlp", "--mesh", "4:dp", "--shard", "nope=dp"], "error: shard `nope=dp`: unknown variable `nope`\n"),
        (&["print", "--preset", "mlp", "--mesh", "32:dp", "--shard", "x=dp,-"], "error: shard `x=dp,-`: `x` dim 0 has size 16, fewer than the 32 shards `dp` cut it into: some rank would hold nothing of it\n"),
    ];
    for (args, want) in cases {
        let out = shardlab(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(text(&out.stderr), *want, "{args:?}");
    }
}

#[test]
fn help_lists_every_command_and_flag() {
    let top = text(&shardlab(&["--help"]).stdout);
    for word in ["print", "check", "Usage: shardlab"] {
        assert!(top.contains(word), "--help mentions {word}:\n{top}");
    }
    let print = text(&shardlab(&["print", "--help"]).stdout);
    for flag in [
        "--preset",
        "--layers",
        "--batch",
        "--seq",
        "--hidden",
        "--heads",
        "--vocab",
        "--features",
        "--classes",
        "--dtype",
        "--mesh",
        "--shard",
    ] {
        assert!(print.contains(flag), "print --help mentions {flag}");
    }
}

#[test]
fn spmd_runs_paddle_cases_and_prints_json() {
    let out = shardlab(&[
        "spmd",
        "--cases",
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/oracle/paddle/spmd_cases.json"
        ),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let results: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let results = results.as_array().unwrap();
    assert_eq!(results.len(), 99);
    let case12 = results.iter().find(|r| r["id"] == 12).unwrap();
    assert_eq!(case12["co_shard"], true);
    assert_eq!(
        case12["inputs_multi_dims_mapping"],
        serde_json::json!([[[], [1, 0]], [[1, 0], []]])
    );
    assert_eq!(
        case12["outputs"][0]["partial_reduce"],
        serde_json::json!({"0": "SUM", "1": "SUM"})
    );
    let case54 = results.iter().find(|r| r["id"] == 54).unwrap();
    assert_eq!(
        case54["error"],
        "Tensor Axis[a] is Sharded by two different mesh dimension [1] and [0]."
    );
    let bad = temp_file("bad_cases.json", "[{\"id\": 1}]");
    let out = shardlab(&["spmd", "--cases", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("case 0: missing field `op`"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn plan_completes_explains_and_emits_json() {
    let args = [
        "plan",
        "--preset",
        "mlp",
        "--mesh",
        "4:mp",
        "--shard",
        "linear_0.w_0=-,mp",
        "--shard",
        "linear_1.w_0=mp,-",
    ];
    let out = shardlab(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let printed = text(&out.stdout);
    assert!(
        printed.contains("op0 matmul_v2 [matmul_v2 #0: column parallel]"),
        "{printed}"
    );
    assert!(
        printed.contains("op3 matmul_v2 [matmul_v2 #1: row parallel]"),
        "{printed}"
    );
    let mut explain = args.to_vec();
    explain.extend(["--explain", "gelu_0.tmp_0"]);
    let out = text(&shardlab(&explain).stdout);
    assert!(
        out.contains("1. annotated: linear_0.w_0 dim 1 = mp"),
        "{out}"
    );
    let mut json = args.to_vec();
    json.extend(["--format", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&shardlab(&json).stdout).unwrap();
    assert_eq!(v["ops"][3]["impl_idx"], 1);
    assert_eq!(v["schema_version"], 1);
    let mut all = json.clone();
    all.extend(["--stage", "all"]);
    let whole: serde_json::Value = serde_json::from_slice(&shardlab(&all).stdout).unwrap();
    assert_eq!(whole["schema_version"], 1);
    assert!(!whole["ranks"].as_array().unwrap().is_empty());
    assert_eq!(v["vars"][9]["name"], "linear_1.tmp_0");
    assert_eq!(v["vars"][9]["partial"], serde_json::json!({"0": "SUM"}));
    assert!(!v["trace"]["events"].as_array().unwrap().is_empty());
    // A plan file works the same way, and errors are reported, not panicked on.
    let plan = text(
        &shardlab(&[
            "print", "--preset", "mlp", "--mesh", "4:dp", "--shard", "x=dp,-",
        ])
        .stdout,
    );
    let path = temp_file("dp.plan", &plan);
    let out = shardlab(&["plan", path.to_str().unwrap()]);
    assert!(
        text(&out.stdout).contains("linear_1.tmp_1"),
        "{}",
        text(&out.stderr)
    );
    let out = shardlab(&["plan", "--preset", "mlp"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "error: the plan has no mesh; declare one with `mesh [..] (..)` or --mesh\n"
    );
    let out = shardlab(&[
        "plan",
        "--preset",
        "mlp",
        "--mesh",
        "4:dp",
        "--explain",
        "nope",
    ]);
    assert_eq!(
        text(&out.stderr),
        "error: --explain: unknown variable `nope`\n"
    );
}

#[test]
fn plan_prints_every_stage_rank_programs_and_the_ledger() {
    let base = ["plan", "--scenario", "megatron_mlp"];
    let run = |extra: &[&str]| {
        let mut args = base.to_vec();
        args.extend(extra);
        let out = shardlab(&args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        text(&out.stdout)
    };
    let backward = run(&["--stage", "backward"]);
    assert!(
        backward.contains("matmul_v2_grad [matmul_v2 #1: row parallel]"),
        "{backward}"
    );
    let optimizer = run(&["--stage", "optimizer", "--optimizer", "adam"]);
    assert!(optimizer.contains("linear_0.w_0_moment1_0"), "{optimizer}");
    let rank = run(&["--stage", "partition", "--rank", "2"]);
    assert!(rank.starts_with("== rank 2\n"), "{rank}");
    assert!(
        rank.contains("var linear_0.w_0: f32[64, 64] parameter persistable"),
        "{rank}"
    );
    assert!(
        rank.contains("scope=\"/auto_parallel/tensor_parallel\""),
        "{rank}"
    );
    let ledger = run(&["--ledger", "--rank", "0"]);
    assert!(
        ledger.contains("forward    tensor parallel  all_reduce          1"),
        "{ledger}"
    );
    let json: serde_json::Value = serde_json::from_str(&run(&[
        "--stage",
        "all",
        "--format",
        "json",
        "--amp",
        "--clip-norm",
        "1.0",
    ]))
    .unwrap();
    assert_eq!(json["ranks"].as_array().unwrap().len(), 4);
    assert!(json["ranks"][0]["ops"]
        .as_array()
        .unwrap()
        .iter()
        .any(|o| o["type"] == "check_finite_and_unscale"));
    assert!(json["ledger"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["purpose"] == "AmpFlag"));
    let out = shardlab(&[
        "plan",
        "--scenario",
        "megatron_mlp",
        "--stage",
        "partition",
        "--rank",
        "9",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "error: --rank 9: the mesh has ranks [0, 1, 2, 3]\n"
    );
    let out = shardlab(&["plan", "--scenario", "nope"]);
    assert!(
        text(&out.stderr)
            .starts_with("error: unknown scenario `nope`; scenarios: dp_mlp, megatron_mlp"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn run_trains_serially_and_distributed_and_verifies() {
    let inputs = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/oracle/jax/mlp_mse/inputs"
    );
    let dump = std::env::temp_dir().join(format!("shardlab-dump-{}", std::process::id()));
    // The JAX oracle's mlp_mse plan on its inputs, with `extra` flags.
    let run_mlp_mse = |extra: &[&str]| {
        let mut args = vec![
            "run",
            "--preset",
            "mlp_mse",
            "--mesh",
            "2x4:dp,mp",
            "--shard",
            "batch.x=dp,-",
            "--shard",
            "params.W1=-,mp",
            "--shard",
            "params.W2=mp,-",
            "--inputs",
            inputs,
        ];
        args.extend_from_slice(extra);
        shardlab(&args)
    };
    let out = run_mlp_mse(&["--steps", "2", "--dump", dump.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    // Verified in f64 by default: JAX's f64 loss is 1.31113865.
    assert!(
        stdout.contains("     1      1.31113865      1.31113865"),
        "{stdout}"
    );
    assert!(stdout.contains("computed in f64"), "{stdout}");
    // In the program's f32 (JAX: 1.3111387; we accumulate f32 programs in f64).
    let program = run_mlp_mse(&["--precision", "program"]);
    let program = text(&program.stdout);
    assert!(
        program.contains("     1      1.31113863      1.31113863"),
        "{program}"
    );
    assert!(program.contains("in the program's dtypes"), "{program}");
    assert!(
        stdout.contains("PASS: 6 of 6 tensors within tolerance"),
        "{stdout}"
    );
    for file in [
        "serial/loss.npy",
        "serial/grad.params.W1.npy",
        "distributed/params.W2.npy",
    ] {
        assert!(dump.join(file).exists(), "{file} was dumped");
    }
    let json: serde_json::Value = serde_json::from_slice(
        &shardlab(&["run", "--scenario", "dp_mlp", "--format", "json"]).stdout,
    )
    .unwrap();
    assert_eq!(json["pass"], true);
    assert_eq!(json["ranks"], 4);
    assert_eq!(json["precision"], "f64");
    let out = shardlab(&["run", "--scenario", "dp_mlp", "--inputs", "/nonexistent"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).starts_with("error: --inputs /nonexistent: "),
        "{}",
        text(&out.stderr)
    );
    let out = shardlab(&["run", "--scenario", "dp_mlp", "--steps", "0"]);
    assert_eq!(
        text(&out.stderr),
        "error: --steps 0: expected 1 to 100000\n"
    );
    let bad = temp_file("bad.npy", "not numpy");
    let dir = bad.parent().unwrap();
    std::fs::copy(&bad, dir.join("x.npy")).unwrap();
    let out = shardlab(&[
        "run",
        "--scenario",
        "dp_mlp",
        "--inputs",
        dir.to_str().unwrap(),
    ]);
    // Invalid input, not usage: the file exists and is not an array.
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("x.npy: not a .npy file"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn megatron_sums_halve_the_backward_tensor_parallel_all_reduces() {
    let ledger = |extra: &[&str]| {
        let mut args = vec!["plan", "--scenario", "gpt_dp_mp", "--ledger", "--rank", "5"];
        args.extend_from_slice(extra);
        let out = shardlab(&args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    let paddle = ledger(&[]);
    assert!(
        paddle.contains("backward   tensor parallel  all_reduce          4"),
        "{paddle}"
    );
    let megatron = ledger(&["--megatron-sums"]);
    assert!(
        megatron.contains("backward   tensor parallel  all_reduce          2"),
        "{megatron}"
    );
    let run = shardlab(&["run", "--scenario", "gpt_dp_mp", "--megatron-sums"]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    assert!(text(&run.stdout).contains("PASS:"), "{}", text(&run.stdout));
}

/// Names of any length never panic: over the limit they are an error at their line and
/// column; at the limit, `plan` and `run` lay out their tables.
#[test]
fn long_names_are_errors_or_fit_the_tables() {
    let plan = |n: &str| {
        format!(
            "mesh [2] (dp)\nvar {n}: f32[4, 4] input\nvar w: f32[4, 4] parameter persistable\n\
             var y: f32[4, 4] activation\nvar l: f32[] activation\n\
             op matmul_v2(X={n}, Y=w) -> (Out=y) {{trans_x=false, trans_y=false}}\n\
             op mean(X=y) -> (Out=l) role=loss\nshard {n} [dp, -]\n"
        )
    };
    let long = temp_file("long_name.plan", &plan(&"a".repeat(70_000)));
    let path = long.to_str().unwrap();
    for cmd in ["check", "plan", "run"] {
        let out = shardlab(&[cmd, path]);
        assert_eq!(out.status.code(), Some(1), "{cmd}");
        assert!(
            text(&out.stderr).contains("long_name.plan:2:5: a name of 70000 characters"),
            "{cmd}: {}",
            text(&out.stderr)
        );
    }
    let at_limit = temp_file("limit_name.plan", &plan(&"b".repeat(1024)));
    for cmd in ["plan", "run"] {
        let out = shardlab(&[cmd, at_limit.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0), "{cmd}: {}", text(&out.stderr));
    }
}

/// `partial(...)` on a source (input, label, parameter) and partial values of mixed reduce
/// types are rejected by `check` with a message naming the tensor.
#[test]
fn partial_sources_and_mixed_reduce_types_are_rejected() {
    let base = text(&shardlab(&["print", "--preset", "mlp", "--mesh", "2x2:dp,mp"]).stdout);
    for (line, want) in [
        (
            "shard linear_0.w_0 [-, -] partial(dp=SUM)",
            "`linear_0.w_0` is parameter, which every rank is given whole or as its block",
        ),
        (
            "shard x [-, -] partial(mp=SUM)",
            "`x` is input",
        ),
        (
            "shard linear_0.tmp_0 [-, -] partial(dp=SUM, mp=MAX)",
            "partial with SUM over `dp` and MAX over `mp`; reductions of different types do not commute",
        ),
    ] {
        let f = temp_file("partial.plan", &format!("{base}{line}\n"));
        let out = shardlab(&["check", f.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1), "{line}");
        assert!(text(&out.stdout).contains(want) || text(&out.stderr).contains(want), "{line}: {} {}", text(&out.stdout), text(&out.stderr));
    }
}

/// An out-of-range token id in `--inputs` is an error naming it, as an out-of-range label is.
#[test]
fn out_of_range_token_ids_are_errors() {
    let dir = std::env::temp_dir().join(format!("shardlab-ids-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let header = "{'descr': '<i8', 'fortran_order': False, 'shape': (4, 16), }";
    let header = format!("{header}{}\n", " ".repeat(128 - 10 - header.len() - 1));
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend((header.len() as u16).to_le_bytes());
    bytes.extend(header.as_bytes());
    for i in 0..64i64 {
        bytes.extend(if i == 63 { 999_999i64 } else { 3 }.to_le_bytes());
    }
    std::fs::write(dir.join("ids.npy"), bytes).unwrap();
    let out = shardlab(&[
        "run",
        "--preset",
        "embedding_lm",
        "--mesh",
        "2:dp",
        "--shard",
        "ids=dp,-",
        "--inputs",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("token id 999999 is outside the 256 rows"),
        "{}",
        text(&out.stderr)
    );
}

/// One flag policy: flags that cannot apply are refused with exit 2 and a message naming
/// them, never silently ignored; --dtype applies to a scenario.
#[test]
fn flags_apply_or_are_refused() {
    let plan_file = temp_file(
        "flags.plan",
        &text(
            &shardlab(&[
                "print", "--preset", "mlp", "--mesh", "4:dp", "--shard", "x=dp,-",
            ])
            .stdout,
        ),
    );
    let f = plan_file.to_str().unwrap();
    for (args, want) in [
        (
            vec!["run", "--scenario", "dp_mlp", "--layers", "3"],
            "--layers: a --scenario fixes",
        ),
        (
            vec!["run", "--scenario", "dp_mlp", "--mesh", "8:dp"],
            "--mesh: a --scenario fixes",
        ),
        (
            vec!["plan", f, "--hidden", "8"],
            "--hidden: a plan file fixes its program",
        ),
        (
            vec!["plan", f, "--dtype", "f64"],
            "--dtype: a plan file fixes its program",
        ),
        (
            vec!["plan", "--scenario", "dp_mlp", "--rank", "99"],
            "--rank 99: the mesh has ranks [0, 1, 2, 3]",
        ),
        (
            vec!["run", "--scenario", "dp_mlp", "--clip-norm", "0"],
            "--clip-norm 0: expected a finite number above 0",
        ),
        (
            vec!["run", "--scenario", "dp_mlp", "--clip-norm", "inf"],
            "--clip-norm inf: expected a finite number above 0",
        ),
        (
            vec!["cost", "--scenario", "dp_mlp", "--zero", "4"],
            "--zero 4: expected a stage from 0 to 3",
        ),
        (
            vec!["run", "--scenario", "dp_mlp", "--dump", ""],
            "--dump needs a directory name",
        ),
    ] {
        let out = shardlab(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            text(&out.stderr).contains(want),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    // --dtype applies to a scenario: the plan is in f64.
    let out = shardlab(&["plan", "--scenario", "dp_mlp", "--dtype", "f64"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        text(&out.stdout).contains("f64[16, 64]"),
        "{}",
        text(&out.stdout)
    );
    // The exit-code policy is in --help.
    assert!(text(&shardlab(&["--help"]).stdout).contains("Exit status: 0 success; 1 invalid input"));
}

/// `diff A B`: layouts, collectives per phase, bytes, memory and step time with deltas; exit
/// 0 whether or not the plans differ, 1 for an invalid plan.
#[test]
fn diff_compares_two_plans() {
    let print = |extra: &[&str]| {
        let mut args = vec!["print", "--preset", "mlp"];
        args.extend_from_slice(extra);
        text(&shardlab(&args).stdout)
    };
    let a = temp_file(
        "diff_a.plan",
        &print(&["--mesh", "4:dp", "--shard", "x=dp,-"]),
    );
    let b = temp_file(
        "diff_b.plan",
        &print(&[
            "--mesh",
            "2x2:dp,mp",
            "--shard",
            "x=dp,-",
            "--shard",
            "linear_0.w_0=-,mp",
        ]),
    );
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let out = shardlab(&["diff", a, b, "--topology", "h100x8"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let got = text(&out.stdout).replace(a, "A").replace(b, "B");
    expect_test::expect_file!["golden/diff_mlp_dp_vs_dp_mp.txt"].assert_eq(&got);
    // The same plan: nothing differs, every delta is 0, and the exit status is still 0.
    let out = shardlab(&["diff", a, a, "--topology", "h100x8", "--format", "json"]);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["differs"], false);
    assert_eq!(v["layouts"].as_array().unwrap().len(), 0);
    assert_eq!(v["step_time_s"]["delta"], 0.0);
    assert!(v["collectives"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["delta"] == 0));
    // JSON carries what the text shows: the forward all-reduces row parallelism adds.
    let out = shardlab(&["diff", a, b, "--topology", "h100x8", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["schema_version"], 1);
    let fwd = v["collectives"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["phase"] == "forward" && c["op"] == "all_reduce")
        .unwrap();
    assert_eq!(
        (fwd["a"].as_u64(), fwd["b"].as_u64(), fwd["delta"].as_i64()),
        (Some(0), Some(4), Some(4))
    );
    assert!(v["peak_memory_bytes"]["max"]["delta"].as_f64().unwrap() < 0.0);
    assert_eq!(v["peak_memory_bytes"]["ranks"].as_array().unwrap().len(), 4);
    // A ZeRO flag applies to both: the sync moves to reduce_scatter + all_gather.
    let out = shardlab(&[
        "diff",
        a,
        b,
        "--topology",
        "h100x8",
        "--zero",
        "2",
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["collectives"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["op"] == "reduce_scatter"));
    // Invalid input exits 1, naming the file.
    let bad = temp_file("diff_bad.plan", "mesh [2] (dp)\nvar x f32[2] input\n");
    let out = shardlab(&["diff", a, bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("diff_bad.plan:2:7"),
        "{}",
        text(&out.stderr)
    );
    let out = shardlab(&["diff", a, "/nonexistent/x.plan"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("cannot read"));
}

/// `schedule`: each stage's jobs, bubble and time chart; bad sizes are usage errors.
#[test]
fn schedule_lays_a_pipeline_out_in_time() {
    let out = shardlab(&[
        "schedule",
        "--schedule",
        "1f1b",
        "--stages",
        "4",
        "--micro-batches",
        "8",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    expect_test::expect_file!["golden/schedule_1f1b_4x8.txt"].assert_eq(&text(&out.stdout));
    let out = shardlab(&[
        "schedule",
        "--schedule",
        "zbh1",
        "--stages",
        "2",
        "--micro-batches",
        "4",
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["step"], 13.0);
    let stage1: Vec<String> = v["jobs"][1]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| format!("{}{}", j["type"].as_str().unwrap(), j["micro_batch"]))
        .collect();
    assert_eq!(
        stage1.join(" "),
        "forward0 backward_b0 forward1 backward1 forward2 backward2 forward3 backward_b3 backward_w3 backward_w0 optimizer0"
    );
    for (args, want) in [
        (
            vec!["schedule", "--stages", "4", "--micro-batches", "2"],
            "1f1b needs at least as many micro-batches as stages (2 < 4)",
        ),
        (
            vec!["schedule", "--stages", "0"],
            "a pipeline needs at least one stage",
        ),
        (
            vec!["schedule", "--forward-time", "nan"],
            "--forward-time NaN: expected a finite time of at least 0",
        ),
        (
            vec!["schedule", "--weight-time", "3"],
            "--weight-time 3 is more than --backward-time 2",
        ),
        (
            vec![
                "schedule",
                "--stages",
                "100000",
                "--micro-batches",
                "100000",
            ],
            "more than 1048576 jobs",
        ),
    ] {
        let out = shardlab(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            text(&out.stderr).contains(want),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}

/// A plan file's `options` statement sets the training options; flags override it.
#[test]
fn the_options_statement_and_flags_that_override_it() {
    let printed = text(
        &shardlab(&[
            "print", "--preset", "mlp", "--mesh", "4:dp", "--shard", "x=dp,-",
        ])
        .stdout,
    );
    let with_options = printed.replacen("\n", "\noptions optimizer=adam zero=3\n", 1);
    let f = temp_file("zero3.plan", &with_options);
    let f = f.to_str().unwrap();
    let rank0 = |extra: &[&str]| {
        let mut args = vec!["plan", f, "--stage", "partition", "--rank", "0"];
        args.extend_from_slice(extra);
        let out = shardlab(&args);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    let zero3 = rank0(&[]);
    assert!(
        zero3.contains("op adam(Param=linear_0.w_0@ZERO,"),
        "{zero3}"
    );
    assert_eq!(zero3.matches("op reduce_scatter(").count(), 4);
    assert_eq!(
        zero3.matches("op all_gather(").count(),
        8,
        "forward and backward"
    );
    assert!(zero3.contains("scope=\"/auto_parallel/sharding\""));
    let off = rank0(&["--zero", "0", "--optimizer", "sgd"]);
    assert!(
        !off.contains("reduce_scatter") && !off.contains("@ZERO"),
        "{off}"
    );
    assert!(off.contains("op sgd(Param=linear_0.w_0,"));
    let stage1 = rank0(&["--zero", "1"]);
    assert_eq!(
        stage1.matches("op all_gather(").count(),
        4,
        "after the update"
    );
    // The file's options run: every ZeRO stage verifies against the serial step.
    let out = shardlab(&["run", f, "--steps", "2"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("PASS: 10 of 10 tensors"),
        "{}",
        text(&out.stdout)
    );
    // `cost` sees the sharded state: less memory per rank than without ZeRO.
    let peak = |extra: &[&str]| -> f64 {
        let mut args = vec!["cost", f, "--topology", "h100x8", "--format", "json"];
        args.extend_from_slice(extra);
        let out = shardlab(&args);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["ranks"][0]["peak_memory_bytes"].as_f64().unwrap()
    };
    assert!(peak(&[]) < peak(&["--zero", "0"]));
}

/// Shapes whose element count overflows are verifier errors, and commands estimate their
/// memory before allocating: beyond the budget they refuse and say what would be needed,
/// while planning a 1.3B-parameter model (shapes only) works.
#[test]
fn overflowing_shapes_and_the_memory_budget() {
    let reshape = temp_file(
        "overflow.plan",
        "mesh [2] (dp)\nvar x: f32[4294967296, 4294967297] input\nvar y: f32[4294967296] activation\n\
         var l: f32[] activation\nop reshape2(X=x) -> (Out=y) {shape=[4294967296]}\n\
         op mean(X=y) -> (Out=l) role=loss\n",
    );
    let out = shardlab(&["check", reshape.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("overflow.plan:2:5: variable `x`: shape [4294967296, 4294967297] has more elements than a tensor may hold"), "{}", text(&out.stderr));
    let wide = temp_file(
        "wide.plan",
        "mesh [3] (dp)\nvar x: f32[3, 6148914691236517206] input\nvar l: f32[] activation\n\
         op mean(X=x) -> (Out=l) role=loss\nshard x [dp, -]\n",
    );
    let out = shardlab(&["run", wide.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("more elements than a tensor may hold"),
        "{}",
        text(&out.stderr)
    );
    let out = shardlab(&["print", "--preset", "gpt", "--layers", "1048576"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(text(&out.stderr).contains("layers = 1048576 is too many (at most 1024"));
    let out = shardlab(&[
        "run",
        "--preset",
        "gpt",
        "--batch",
        "1024",
        "--seq",
        "1024",
        "--hidden",
        "512",
        "--heads",
        "1",
        "--mesh",
        "2:dp",
        "--max-memory",
        "8G",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("running would need about"),
        "{}",
        text(&out.stderr)
    );
    assert!(text(&out.stderr).contains("more than the memory budget of 8.0 GiB"));
    let out = shardlab(&[
        "plan",
        "--scenario",
        "gpt_dp_mp",
        "--stage",
        "all",
        "--max-memory",
        "1M",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("planning would need about"));
    // GPT 1.3B (24 layers, hidden 2048, 16 heads, seq 1024) with batch 512 plans: shapes only.
    let out = shardlab(&[
        "plan",
        "--preset",
        "gpt",
        "--layers",
        "24",
        "--hidden",
        "2048",
        "--heads",
        "16",
        "--seq",
        "1024",
        "--batch",
        "512",
        "--mesh",
        "2x4:dp,mp",
        "--shard",
        "x=dp,-,-",
        "--stage",
        "all",
        "--max-memory",
        "1G",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        shardlab(&["run", "--scenario", "dp_mlp", "--max-memory", "12Q"])
            .status
            .code(),
        Some(2)
    );
}

/// Random command lines: every subcommand but `bench` (and `cost` on the measured `cpu`),
/// with flags and values drawn from the real ones and from bad ones. The tool never
/// panics: it exits 0, 1 or 2.
mod flag_fuzz {
    use super::*;
    use proptest::prelude::*;

    fn value() -> impl Strategy<Value = String> {
        prop::sample::select(vec![
            "mlp",
            "gpt",
            "embedding_lm",
            "mlp_mse",
            "dp_mlp",
            "gpt_dp_mp",
            "2x4:dp,mp",
            "4:dp",
            "3:dp",
            "x=dp,-",
            "x=dp,-,-",
            "ids=dp,-",
            "0",
            "1",
            "2",
            "-1",
            "99",
            "1e9",
            "18446744073709551616",
            "nan",
            "inf",
            "f64",
            "f16",
            "bf16",
            "adam",
            "all",
            "partition",
            "json",
            "",
            "::",
            "x=",
            "=",
            "1f1b",
            "vpp",
            "zbh1_paper",
            "2:pp",
            "4x2:pp,dp",
            "3,1",
            "F0 B0 | F0 B0",
            "F0 B0 F1 B1 | F1 B1 F0 B0",
            "F99999999",
            "shard_map",
            "gspmd",
            "annotated",
            "jax",
            "-",
            "dp=2,tp=2",
            "pp=2,dp=2,tp=2",
            "DynamicDimension.0=2",
            "DynamicDimension.0=0",
            "tp=3",
            "dp=9999",
            "sp",
            "gpt2-small",
            "llama3-8b",
            "1048576",
        ])
        .prop_map(str::to_string)
    }

    fn flag() -> impl Strategy<Value = Vec<String>> {
        let name = prop::sample::select(vec![
            "--preset",
            "--scenario",
            "--mesh",
            "--shard",
            "--layers",
            "--batch",
            "--seq",
            "--hidden",
            "--heads",
            "--vocab",
            "--features",
            "--classes",
            "--dtype",
            "--stage",
            "--rank",
            "--optimizer",
            "--clip-norm",
            "--steps",
            "--lr",
            "--format",
            "--explain",
            "--cases",
            "--max-memory",
            "--inputs",
            "--compute-dtype",
            "--micro-batches",
            "--schedule",
            "--chunks",
            "--pp-split",
            "--jobs",
            "--stages",
            "--mode",
            "--constrain",
            "--to",
            "-o",
            "--devices",
            "--top",
            "--memory",
            "--parallel",
            "--global-batch",
            "--global-batch-tokens",
            "--micro-batch-size",
            "--dim",
        ]);
        let bare = prop::sample::select(vec![
            "tests/models/mlp_block.onnx",
            "tests/models/mlp_block.pir",
            "/dev/zero",
            "--amp",
            "--ledger",
            "--megatron-sums",
            "--no-grad-scale",
            "--bogus",
            "--gantt",
            "--ideal",
            "--list",
        ]);
        prop_oneof![
            4 => (name, value()).prop_map(|(n, v)| vec![n.to_string(), v]),
            1 => bare.prop_map(|b| vec![b.to_string()]),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            // CI: 48 command lines; FLAG_FUZZ_CASES for a long run.
            cases: std::env::var("FLAG_FUZZ_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(48),
            ..ProptestConfig::default()
        })]
        #[test]
        fn the_tool_never_panics(
            cmd in prop::sample::select(vec!["print", "check", "import", "plan", "run", "cost", "spmd", "schedule", "export", "suggest", "nonsense"]),
            flags in prop::collection::vec(flag(), 0..6),
            topology in prop::sample::select(vec!["h100x8", "h100x8x4", "tpu-v5e-16", "v100"]),
        ) {
            let mut args = vec![cmd.to_string()];
            // An import that succeeds would write its `-o` file into the source tree.
            let flags = flags.into_iter().filter(|f| cmd != "import" || f[0] != "-o");
            args.extend(flags.flatten());
            // `cost` on the default `cpu` topology measures the machine first (half a second):
            // the fuzz picks a preset instead.
            if cmd == "cost" {
                args.extend(["--topology".to_string(), topology.to_string()]);
            }
            // Runs stay small: a memory budget of 64 MiB bounds what a run may allocate.
            if cmd == "run" || cmd == "export" || cmd == "import" {
                args.extend(["--max-memory".to_string(), "64M".to_string()]);
            }
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = shardlab(&refs);
            let code = out.status.code();
            prop_assert!(
                matches!(code, Some(0..=2)),
                "{args:?} exited {code:?}: {}", text(&out.stderr)
            );
            prop_assert!(!text(&out.stderr).contains("panicked"), "{args:?}: {}", text(&out.stderr));
        }
    }
}

/// `cost` on a preset topology: a table per rank, one JSON document with the step time,
/// MFU and per-rank memory, and clear errors for an unknown topology or too few devices.
#[test]
fn cost_prints_time_and_memory_per_rank() {
    let out = shardlab(&["cost", "--scenario", "gpt_dp_mp", "--topology", "h100x8"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let t = text(&out.stdout);
    assert!(t.starts_with("cost on h100x8 ("), "{t}");
    assert!(t.contains("compute priced at bf16"), "{t}");
    assert_eq!(
        t.lines()
            .filter(|l| l.trim_start().starts_with(char::is_numeric))
            .count(),
        8
    );
    let out = shardlab(&[
        "cost",
        "--scenario",
        "gpt_dp_mp",
        "--topology",
        "tpu-v5e-16",
        "--compute-dtype",
        "f32",
        "--format",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["topology"], "tpu-v5e-16");
    assert_eq!(doc["compute_dtype"], "f32");
    assert!(doc["step_time_s"].as_f64().unwrap() > 0.0);
    let mfu = doc["mfu"].as_f64().unwrap();
    assert!(mfu > 0.0 && mfu <= 1.0);
    let ranks = doc["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 8);
    for r in ranks {
        assert!(r["peak_memory_bytes"].as_f64().unwrap() > 0.0);
        assert_eq!(
            r["op_time_s"].as_array().unwrap().len(),
            r["memory_timeline_bytes"].as_array().unwrap().len()
        );
    }
    let out = shardlab(&["cost", "--scenario", "gpt_dp_mp", "--topology", "a100"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("unknown topology `a100`"),
        "{}",
        text(&out.stderr)
    );
    let out = shardlab(&[
        "cost",
        "--preset",
        "mlp",
        "--mesh",
        "16:dp",
        "--shard",
        "x=dp,-",
        "--topology",
        "h100x8",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("h100x8 has 8 devices"),
        "{}",
        text(&out.stderr)
    );
}

/// Pipelines from the command line: the ideal Gantt's bubble is the closed form, a run with
/// micro-batches and a schedule verifies, bad combinations are usage errors naming the
/// flag, a hand-written order that deadlocks exits 1 naming its cycle.
#[test]
fn pipeline_flags_gantt_and_orders() {
    let base = [
        "plan",
        "--preset",
        "gpt",
        "--layers",
        "4",
        "--batch",
        "16",
        "--mesh",
        "4:pp",
        "--micro-batches",
        "8",
        "--schedule",
        "1f1b",
        "--gantt",
        "--ideal",
    ];
    let out = shardlab(&base);
    assert!(out.status.success(), "{}", text(&out.stderr));
    expect_test::expect_file!["golden/gantt_1f1b_4x8.txt"].assert_eq(&text(&out.stdout));
    let out = shardlab(&[
        "run",
        "--preset",
        "gpt",
        "--layers",
        "2",
        "--batch",
        "8",
        "--mesh",
        "2x2:pp,dp",
        "--shard",
        "x=dp,-,-",
        "--micro-batches",
        "2",
        "--schedule",
        "zbh1",
        "--dtype",
        "f64",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("PASS"), "{}", text(&out.stdout));
    for (args, want) in [
        (
            vec!["--batch", "10", "--micro-batches", "4"],
            "--batch 10 must divide by --micro-batches 4",
        ),
        (
            vec![
                "--batch",
                "6",
                "--micro-batches",
                "2",
                "--shard",
                "x=dp,-,-",
            ],
            "--batch 6 gives each of the 2 micro-batches 3 rows, fewer than the data-parallel \
             degree (4): every data-parallel rank needs a row",
        ),
        (
            vec![
                "--micro-batches",
                "3",
                "--schedule",
                "vpp",
                "--chunks",
                "2",
                "--batch",
                "12",
            ],
            "3 micro-batches is not a multiple of 2",
        ),
        (
            vec!["--schedule", "1f1b"],
            "1f1b needs at least as many micro-batches as stages",
        ),
        (
            vec!["--schedule", "warp"],
            "--schedule warp: expected fthenb",
        ),
        (
            vec!["--pp-split", "1,1,1"],
            "--pp-split 1,1,1: 3 counts for 2 (virtual) stages",
        ),
        (
            vec!["--pp-split", "3,1"],
            "places 4 layers, but the program has 2",
        ),
    ] {
        let mesh = if args.contains(&"x=dp,-,-") {
            "2x4:pp,dp"
        } else {
            "2:pp"
        };
        let mut all = vec!["plan", "--preset", "gpt", "--layers", "2", "--mesh", mesh];
        all.extend(args.iter().copied());
        let out = shardlab(&all);
        assert_eq!(out.status.code(), Some(2), "{all:?}: {}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains(want),
            "{all:?}: {}",
            text(&out.stderr)
        );
    }
    let out = shardlab(&["schedule", "--jobs", "F0 B0 F1 B1 | F1 B1 F0 B0"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains(
            "the schedule deadlocks: stage 0 at backward(0) waits for backward(0) of virtual \
             stage 1 on stage 1, stage 1 at forward(1) waits for forward(1) of virtual stage 0 \
             on stage 0"
        ),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn export_writes_a_script_lists_its_modes_and_refuses_bad_flags() {
    let list = shardlab(&["export", "--list"]);
    assert!(list.status.success());
    let listed = text(&list.stdout);
    for word in [
        "gspmd (default)",
        "shard_map:",
        "pipeline stages",
        "Not exported",
    ] {
        assert!(listed.contains(word), "--list mentions {word}:\n{listed}");
    }
    let out = shardlab(&[
        "export",
        "--scenario",
        "megatron_mlp",
        "--mode",
        "shard_map",
        "-o",
        "-",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let script = text(&out.stdout);
    assert!(script.starts_with("#!/usr/bin/env python3\n"));
    assert!(script.contains("`shardlab export --scenario megatron_mlp --mode shard_map`"));
    assert!(script.contains("all_reduce(v[\"linear_1.tmp_0\"], \"SUM\", (\"mp\",)"));
    // The output file does not enter the script: two files, the same bytes.
    let dir = std::env::temp_dir().join(format!("shardlab-cli-export-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (a, b) = (dir.join("a.py"), dir.join("b.py"));
    for f in [&a, &b] {
        let o = shardlab(&[
            "export",
            "--scenario",
            "dp_mlp",
            "--optimizer",
            "adam",
            "-o",
            f.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", text(&o.stderr));
        assert!(text(&o.stderr).contains("gspmd mode"));
    }
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    assert!(text(&std::fs::read(&a).unwrap()).contains("adam("));
    let _ = std::fs::remove_dir_all(&dir);
    for (args, message) in [
        (
            vec![
                "export",
                "--scenario",
                "dp_mlp",
                "--mode",
                "pmap",
                "-o",
                "-",
            ],
            "--mode pmap: expected gspmd or shard_map",
        ),
        (
            vec!["export", "--scenario", "dp_mlp", "--to", "torch", "-o", "-"],
            "--to torch: the one engine is jax",
        ),
        (
            vec!["export", "--scenario", "dp_mlp"],
            "-o FILE.py is needed",
        ),
        (
            vec![
                "export",
                "--scenario",
                "dp_mlp",
                "--constrain",
                "some",
                "-o",
                "-",
            ],
            "--constrain some: expected annotated or all",
        ),
    ] {
        let o = shardlab(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(
            text(&o.stderr).contains(message),
            "{args:?}: {}",
            text(&o.stderr)
        );
    }
}

#[test]
fn suggest_prints_one_json_document_whose_plan_checks_and_costs_the_same() {
    let out_plan = temp_file("suggested.plan", "");
    let out = shardlab(&[
        "suggest",
        "--preset",
        "mlp",
        "--batch",
        "512",
        "--devices",
        "8",
        "--top",
        "3",
        "--format",
        "json",
        "--out",
        out_plan.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let plan = doc["plan"].as_str().expect("plan text");
    assert_eq!(std::fs::read_to_string(&out_plan).unwrap(), plan);
    assert_eq!(doc["candidates"].as_array().map(Vec::len), Some(3));
    let reason = doc["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(" beats ") || reason.contains(" ties "),
        "{reason}"
    );
    // Axes of size 1 are left out of the printed mesh.
    let mesh = plan.lines().next().unwrap_or_default();
    assert!(mesh.starts_with("mesh ["), "{mesh}");
    assert!(
        !mesh.contains("[1") && !mesh.contains(" 1,") && !mesh.contains(", 1]"),
        "{mesh}"
    );
    let check = shardlab(&["check", out_plan.to_str().unwrap()]);
    assert_eq!(check.status.code(), Some(0), "{}", text(&check.stderr));
    let cost = shardlab(&[
        "cost",
        out_plan.to_str().unwrap(),
        "--topology",
        "h100x8",
        "--format",
        "json",
    ]);
    assert_eq!(cost.status.code(), Some(0), "{}", text(&cost.stderr));
    let priced: serde_json::Value = serde_json::from_slice(&cost.stdout).unwrap();
    assert_eq!(priced["step_time_s"], doc["step_time_s"]);
}

#[test]
fn suggest_prices_the_users_plan_and_refuses_what_it_cannot_search() {
    let printed = shardlab(&[
        "print",
        "--preset",
        "gpt",
        "--layers",
        "2",
        "--mesh",
        "2x4:dp,mp",
        "--shard",
        "x=dp,-,-",
    ]);
    let mine = temp_file("mine.plan", &text(&printed.stdout));
    let out = shardlab(&["suggest", mine.to_str().unwrap(), "--top", "2"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(table.contains(" *  your plan"), "{table}");
    assert!(
        table.contains("Against your plan:") || table.contains("Your plan is as fast"),
        "{table}"
    );
    // A program that is no preset at any size: exit 1, saying why.
    let odd = temp_file(
        "odd.plan",
        &text(&shardlab(&["print", "--preset", "gpt", "--layers", "2"]).stdout)
            .replace("loss.sq", "loss.squared"),
    );
    let out = shardlab(&["suggest", odd.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("not one of them"),
        "{}",
        text(&out.stderr)
    );
    for (args, code, says) in [
        (&["--devices", "9"][..], 2, "h100x8 has 8 devices"),
        (&["--topology", "h100x9"][..], 2, "unknown topology"),
        (&["--top", "0"][..], 2, "--top"),
        (&["--memory", "12Q"][..], 2, "--memory `12Q`"),
        (&["--memory", "1K"][..], 1, "no plan fits in 1.0KB"),
        (&["--heads", "3"][..], 2, "divisible by heads 3"),
        (
            &["--layers", "1", "--batch", "1"][..],
            1,
            "no factorisation of 8",
        ),
        (&["--topology", "cpu"][..], 2, "needs --devices"),
        (
            &["--max-memory", "1M"][..],
            1,
            "the search's largest planning",
        ),
    ] {
        let mut all = vec!["suggest", "--preset", "gpt"];
        all.extend_from_slice(args);
        let out = shardlab(&all);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains(says),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}

/// A plan error found after parsing is printed at its line and column by every command
/// that plans, not only by `check` (`plan` at every stage, `run`, `cost`, `export` gave
/// `error: …` with no location).
#[test]
fn planning_errors_carry_their_location_in_every_command() {
    let path = temp_file(
        "nograd_everywhere.plan",
        "mesh [2] (dp)\nvar x: f32[4, 8] input\nvar w: f32[8, 8] parameter\nvar h: f32[4, 8] activation\nvar m: f32[4, 8] activation\nvar loss: f32[] activation\nop matmul_v2(X=x, Y=w) -> (Out=h)\nop elementwise_max(X=h, Y=x) -> (Out=m)\nop mean(X=m) -> (Out=loss) role=loss\n",
    );
    let p = path.to_str().unwrap();
    for args in [
        vec!["plan", p, "--stage", "all"],
        vec!["plan", p, "--ledger"],
        vec!["run", p],
        vec!["cost", p],
        vec!["export", p, "-o", "-"],
    ] {
        let out = shardlab(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = text(&out.stderr);
        assert!(
            err.starts_with(&format!(
                "{p}:8:4: backward: op1 (elementwise_max) has no gradient"
            )),
            "{args:?}: {err}"
        );
    }
}

/// A forward op marked `role=backward` (or `optimize`) in a plan is refused at its line by
/// `check`: on a pipeline it stalled `run` for 20 s, and with recomputation `plan --stage
/// all` and `run` failed where `check` had passed.
#[test]
fn a_plan_op_with_a_backward_or_optimize_role_is_refused_where_it_is() {
    for (mesh, options, sizes) in [
        ("2:pp", "options micro_batches=2\n", "2"),
        ("2:dp", "options recompute=full\n", "1"),
    ] {
        let printed = shardlab(&[
            "print", "--preset", "gpt", "--layers", sizes, "--batch", "8", "--mesh", mesh,
        ]);
        assert_eq!(printed.status.code(), Some(0));
        let printed = text(&printed.stdout);
        let target = if sizes == "2" { "h1" } else { "h0" };
        let op = format!("op transpose2(X={target}.attn.ctx) ->");
        let mut line_no = 0;
        let mut lines = Vec::new();
        for (i, line) in printed.lines().enumerate() {
            if i == 1 {
                lines.push(options.trim_end().to_string());
            }
            if line.starts_with(&op) {
                line_no = lines.len() + 1;
                lines.push(format!("{line} role=backward"));
            } else {
                lines.push(line.to_string());
            }
        }
        assert!(line_no > 0, "no `{op}` in the printed plan");
        let path = temp_file(&format!("role_{target}.plan"), &(lines.join("\n") + "\n"));
        let p = path.to_str().unwrap();
        for args in [
            vec!["check", p],
            vec!["plan", p, "--stage", "all"],
            vec!["run", p],
            vec!["cost", p],
        ] {
            let out = shardlab(&args);
            assert_eq!(
                out.status.code(),
                Some(1),
                "{args:?}: {}",
                text(&out.stderr)
            );
            let err = text(&out.stderr);
            assert!(
                err.starts_with(&format!("{p}:{line_no}:4: "))
                    && err.contains("role=backward in a plan"),
                "{args:?}: {err}"
            );
        }
    }
}

/// A flag applies or is refused (exit 2, naming the flag and why): pipeline flags without a
/// `pp` axis, `--rank` without a rank program to pick, training flags where `plan` prints
/// only completion, `--zero` where no gradient is summed over a data-parallel axis. The
/// same flags where they apply succeed.
#[test]
fn flags_that_would_do_nothing_are_refused() {
    let refused: &[(&[&str], &str)] = &[
        (
            &[
                "run",
                "--preset",
                "mlp",
                "--mesh",
                "4:dp",
                "--schedule",
                "1f1b",
            ],
            "--schedule: the mesh has no `pp` axis",
        ),
        (
            &["cost", "--preset", "mlp", "--mesh", "4:dp", "--chunks", "2"],
            "--chunks: the mesh has no `pp` axis",
        ),
        (
            &[
                "plan",
                "--preset",
                "gpt",
                "--mesh",
                "4:dp",
                "--stage",
                "all",
                "--pp-split",
                "1",
            ],
            "--pp-split: the mesh has no `pp` axis",
        ),
        (
            &[
                "export",
                "--preset",
                "mlp",
                "--mesh",
                "4:dp",
                "--schedule",
                "vpp",
                "-o",
                "-",
            ],
            "--schedule: the mesh has no `pp` axis",
        ),
        (
            &["plan", "--preset", "mlp", "--mesh", "4:dp", "--rank", "1"],
            "--rank picks a rank program",
        ),
        (
            &[
                "plan", "--preset", "mlp", "--mesh", "4:dp", "--rank", "1", "--stage", "backward",
            ],
            "--rank picks a rank program",
        ),
        (
            &["plan", "--preset", "mlp", "--mesh", "4:dp", "--zero", "1"],
            "--zero: `plan` prints the completed forward program",
        ),
        (
            &[
                "plan",
                "--preset",
                "mlp",
                "--mesh",
                "4:dp",
                "--recompute",
                "full",
                "--amp",
            ],
            "--amp, --recompute: `plan` prints",
        ),
        (
            &["run", "--preset", "mlp", "--mesh", "4:mp", "--zero", "3"],
            "--zero 3: no parameter's gradient is summed",
        ),
        (
            &["cost", "--preset", "mlp", "--mesh", "4:dp", "--zero", "2"],
            "--zero 2: no parameter's gradient is summed",
        ),
        (
            &[
                "plan", "--preset", "mlp", "--mesh", "4:dp", "--zero", "1", "--stage", "all",
            ],
            "--zero 1: no parameter's gradient is summed",
        ),
    ];
    for (args, expected) in refused {
        let out = shardlab(args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains(expected),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    let applied: &[&[&str]] = &[
        &[
            "run",
            "--preset",
            "mlp",
            "--mesh",
            "4:dp",
            "--micro-batches",
            "2",
            "--batch",
            "16",
        ],
        &[
            "plan", "--preset", "mlp", "--mesh", "4:dp", "--rank", "1", "--ledger",
        ],
        &[
            "plan",
            "--preset",
            "mlp",
            "--mesh",
            "4:dp",
            "--rank",
            "1",
            "--stage",
            "partition",
        ],
        &[
            "run", "--preset", "mlp", "--mesh", "4:dp", "--shard", "x=dp,-", "--zero", "3",
        ],
        &[
            "plan", "--preset", "mlp", "--mesh", "4:dp", "--zero", "1", "--shard", "x=dp,-",
            "--ledger",
        ],
        &[
            "run",
            "--preset",
            "gpt",
            "--layers",
            "2",
            "--batch",
            "8",
            "--mesh",
            "2:pp",
            "--schedule",
            "1f1b",
            "--micro-batches",
            "2",
        ],
    ];
    for args in applied {
        let out = shardlab(args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}

/// Every error class exits with the documented code (1 invalid input, 2 usage) and names
/// what and where: files that never end or are not UTF-8, `.npy` inputs that are truncated,
/// not `.npy`, endless or not finite, flag values the dtype cannot hold, a serial run that
/// is not finite itself.
#[test]
fn error_classes_exit_as_documented() {
    let dir = std::env::temp_dir().join(format!("shardlab-cli-classes-{}", std::process::id()));
    let inputs = |name: &str, bytes: Option<&[u8]>| {
        let d = dir.join(name);
        std::fs::create_dir_all(&d).unwrap();
        let f = d.join("x.npy");
        let _ = std::fs::remove_file(&f);
        match bytes {
            Some(b) => std::fs::write(&f, b).unwrap(),
            None => std::os::unix::fs::symlink("/dev/zero", &f).unwrap(),
        }
        d.to_str().unwrap().to_string()
    };
    // A valid .npy of x (f32[16, 64]) with one element replaced.
    let npy = |value: f32| {
        let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (16, 64), }";
        let header = format!("{header:<117}\n");
        let mut b = b"\x93NUMPY\x01\x00".to_vec();
        b.extend((header.len() as u16).to_le_bytes());
        b.extend(header.as_bytes());
        for i in 0..1024 {
            b.extend(if i == 5 { value } else { 0.5f32 }.to_le_bytes());
        }
        b
    };
    let utf8 = temp_file("latin1.plan", "mesh [2] (dp)\n");
    std::fs::write(&utf8, b"mesh [2] (dp)\nvar \xe9x: f32[2] input\n").unwrap();
    let utf8 = utf8.to_str().unwrap().to_string();
    let endless = inputs("endless", None);
    let truncated = inputs("truncated", Some(&npy(1.0)[..200]));
    let not_npy = inputs("not_npy", Some(b"hello"));
    let nan = inputs("nan", Some(&npy(f32::NAN)));
    let inf = inputs("inf", Some(&npy(f32::INFINITY)));
    let mlp = ["run", "--preset", "mlp", "--mesh", "2:dp", "--inputs"];
    let cases: Vec<(Vec<&str>, i32, &str)> = vec![
        (
            vec!["check", "/dev/zero"],
            1,
            "/dev/zero:1:1: the file is larger than the 64 MiB a plan file may be",
        ),
        (vec!["plan", "/dev/zero"], 1, "larger than the 64 MiB"),
        (vec!["check", &utf8], 1, ":2:5: byte 0xe9 is not UTF-8"),
        (vec!["check", "/nonexistent.plan"], 2, "cannot read"),
        ([&mlp[..], &[&endless]].concat(), 1, "x.npy: larger than"),
        ([&mlp[..], &[&truncated]].concat(), 1, "x.npy: "),
        (
            [&mlp[..], &[&not_npy]].concat(),
            1,
            "x.npy: not a .npy file",
        ),
        (
            [&mlp[..], &[&nan]].concat(),
            1,
            "element 5 is NaN: inputs must be finite",
        ),
        ([&mlp[..], &[&inf]].concat(), 1, "element 5 is inf"),
        (
            [&mlp[..], &["/nonexistent-dir"]].concat(),
            2,
            "--inputs /nonexistent-dir",
        ),
        (
            vec![
                "run",
                "--preset",
                "mlp",
                "--mesh",
                "2:dp",
                "--clip-norm",
                "1e39",
            ],
            2,
            "--clip-norm 1e39: more than f32 can hold",
        ),
        (
            vec![
                "run", "--preset", "mlp", "--mesh", "2:dp", "--lr", "1e300", "--steps", "3",
            ],
            1,
            "the serial run's",
        ),
        (
            vec!["run", "--preset", "mlp", "--mesh", "2:dp", "--frobnicate"],
            2,
            "--frobnicate",
        ),
    ];
    for (args, code, expected) in &cases {
        let out = shardlab(args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(*code), "{args:?}: {err}");
        assert!(err.contains(expected), "{args:?}: {err}");
    }
    // A distributed run that differs from serial because of an option says so.
    let out = shardlab(&[
        "run",
        "--preset",
        "mlp",
        "--mesh",
        "4:dp",
        "--shard",
        "x=dp,-",
        "--no-grad-scale",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stdout)
            .contains("the gradients are 4.000× serial, as `--no-grad-scale` makes them"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn a_published_preset_prices_without_a_plan_flag() {
    // The default plan: data parallelism over one 8-GPU node, the batch split over it.
    let out = shardlab(&["cost", "--preset", "llama3-8b", "--topology", "h100x8"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("cost on h100x8"), "{stdout}");
    assert!(
        stdout.contains("MFU") && !stdout.contains("MFU 0.0"),
        "{stdout}"
    );
    let ranks = stdout.lines().filter(|l| l.starts_with("    ")).count();
    assert_eq!(ranks, 8, "{stdout}");
    let out = shardlab(&["plan", "--preset", "llama3-8b", "--layers", "1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("mesh [8] (dp)"), "{stdout}");
    let ids = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("ids "))
        .unwrap();
    assert!(
        ids.contains("[dp, -]") && ids.ends_with("(annotated)"),
        "{ids}"
    );
    // A --mesh replaces the default plan (no annotation comes with it).
    let out = shardlab(&[
        "plan",
        "--preset",
        "llama3-8b",
        "--layers",
        "1",
        "--mesh",
        "2:dp",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("mesh [2] (dp)"));
    // The families keep no default plan.
    let out = shardlab(&["cost", "--preset", "llama", "--topology", "h100x8"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("the plan has no mesh"));
}

#[test]
fn the_help_names_every_preset() {
    for command in ["cost", "suggest", "plan"] {
        let out = shardlab(&[command, "--help"]);
        let help = text(&out.stdout);
        for name in shardlab::models::preset_names() {
            assert!(
                help.contains(name),
                "`{command} --help` does not name {name}"
            );
        }
    }
}

#[test]
fn context_parallelism_says_which_attention_it_runs() {
    // Llama's 4 query and 2 key heads: Ulysses over cp=2, the ring past them.
    for (spec, says) in [
        ("cp=2", "context parallelism cp=2: Ulysses (all-to-all from sequence to heads and back); 4 query and 2 key heads divide over tp × cp = 2\n"),
        ("cp=4", "context parallelism cp=4: ring attention, zig-zag order; 4 query or 2 key heads do not divide over tp × cp = 4\n"),
    ] {
        let out = shardlab(&["print", "--preset", "llama", "--parallel", spec]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(text(&out.stderr), says);
        assert!(text(&out.stdout).contains("flash_attn("), "{spec}");
    }
    let out = shardlab(&["print", "--preset", "llama", "--cp-mode", "ring"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--parallel"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn parallel_writes_the_mesh_and_every_annotation_out() {
    let out = shardlab(&[
        "print",
        "--preset",
        "llama",
        "--layers",
        "1",
        "--parallel",
        "tp=2,dp=2",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let plan: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("mesh") || l.starts_with("shard"))
        .collect();
    assert_eq!(
        plan,
        [
            "mesh [2, 2] (dp, tp)",
            "shard ids [dp, -]",
            "shard wte [tp, -]",
            "shard h0.attn.q.w [-, tp]",
            "shard h0.attn.k.w [-, tp]",
            "shard h0.attn.v.w [-, tp]",
            "shard h0.attn.o.w [tp, -]",
            "shard h0.mlp.gate.w [-, tp]",
            "shard h0.mlp.up.w [-, tp]",
            "shard h0.mlp.down.w [tp, -]",
            "shard lm_head.w [-, tp]",
        ]
    );
    // --shard overrides the strategy's annotation of a variable.
    let out = shardlab(&[
        "print",
        "--preset",
        "llama",
        "--layers",
        "1",
        "--parallel",
        "tp=2",
        "--shard",
        "lm_head.w=-,-",
    ]);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("shard lm_head.w [-, -]"), "{stdout}");
    assert!(!stdout.contains("shard lm_head.w [-, tp]"), "{stdout}");
    // A real size prices with it, and the output says how many devices it ran on.
    let out = shardlab(&[
        "cost",
        "--preset",
        "llama3-8b",
        "--parallel",
        "dp=8,tp=8",
        "--topology",
        "h100x8x8",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ranks = text(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("   "))
        .count();
    assert_eq!(ranks, 64);
    for (args, want) in [
        (vec!["--parallel", "dp=2,xp=2"], "error: --parallel dp=2,xp=2: unknown parallelism `xp`; --parallel takes dp, tp, pp, ep, cp, vpp, sp, flash and cp_mode\n"),
        (vec!["--parallel", "tp=x"], "error: --parallel tp=x: `tp=x`: a degree is a whole number from 1 to 16384\n"),
        (vec!["--parallel", "dp=2,sp"], "error: --parallel dp=2,sp: `sp` splits the sequence over the tensor-parallel group, so it needs tp > 1\n"),
        (vec!["--parallel", "cp=2", "--cp-mode", "star"], "error: --parallel cp=2,cp_mode=star: cp_mode `star` is not one of ring, ring_contiguous, ulysses, auto\n"),
        (vec!["--parallel", "dp=2", "--cp-mode", "ring"], "error: --parallel dp=2,cp_mode=ring: cp_mode needs cp > 1\n"),
    ] {
        let mut all = vec!["print", "--preset", "gpt"];
        all.extend(args);
        let out = shardlab(&all);
        assert_eq!(out.status.code(), Some(2), "{all:?}");
        assert_eq!(text(&out.stderr), want);
    }
    let out = shardlab(&["plan", "--scenario", "gpt_dp_mp", "--parallel", "dp=2"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--parallel: a --scenario fixes"),
        "{}",
        text(&out.stderr)
    );
}

/// `cost` at cluster scale from the command line: the per-device throughput line, the
/// rank-class note, and clear refusals of a bad formula, order or topology.
#[test]
fn cost_at_cluster_scale() {
    let base = [
        "cost",
        "--preset",
        "llama3-70b",
        "--parallel",
        "tp=8,pp=4,dp=4,flash",
        "--global-batch",
        "64",
        "--micro-batch-size",
        "1",
        "--topology",
        "h100x8x16",
    ];
    let out = shardlab(&base);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("TFLOP/s (model_6n)"), "{stdout}");
    assert!(
        stdout.contains("priced 4 rank classes of 128 ranks"),
        "{stdout}"
    );
    for (extra, want) in [
        (
            vec!["--flops-formula", "7n"],
            "error: --flops-formula: `7n` is not one of model_6n, megatron_ptdp, program\n",
        ),
        (
            vec!["--order", "tp-xx"],
            "error: --order tp-xx: `xx` is not an axis of the mesh (its axes: pp, dp, tp)\n",
        ),
        (
            vec!["--order", "tp-dp"],
            "error: --order tp-dp: the order leaves out the mesh axis `pp`; name every axis, innermost first\n",
        ),
    ] {
        let mut all = base.to_vec();
        all.extend(extra);
        let out = shardlab(&all);
        assert_eq!(out.status.code(), Some(2), "{all:?}");
        assert_eq!(text(&out.stderr), want);
    }
    let mut far = base.to_vec();
    let last = far.len() - 1;
    far[last] = "h100x8x4096";
    let out = shardlab(&far);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("unknown topology `h100x8x4096`"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn the_batch_by_megatrons_arguments() {
    let micro_batches = |extra: &[&str]| {
        let mut args = vec![
            "cost",
            "--preset",
            "llama3-8b",
            "--layers",
            "1",
            "--format",
            "json",
        ];
        args.extend(extra);
        let out = shardlab(&args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        // A step of one micro-batch has no pipeline section.
        json["pipeline"]["micro_batches"].as_u64().unwrap_or(1)
    };
    // 2^20 tokens of 8,192 are 128 sequences; over 8 data-parallel ranks in micro-batches
    // of 1 that is 16 micro-batches; in micro-batches of 2, 8.
    let tokens = [
        "--parallel",
        "dp=8,tp=8",
        "--global-batch-tokens",
        "1048576",
    ];
    assert_eq!(
        micro_batches(&[&tokens[..], &["--micro-batch-size", "1"]].concat()),
        16
    );
    let sequences = ["--parallel", "dp=8", "--global-batch", "128"];
    assert_eq!(
        micro_batches(&[&sequences[..], &["--micro-batch-size", "2"]].concat()),
        8
    );
    assert_eq!(micro_batches(&sequences), 1);
    for (args, want) in [
        (vec!["--global-batch-tokens", "1000"], "error: --global-batch-tokens 1000 is not a whole number of sequences of 8192 tokens (--seq)\n"),
        (vec!["--parallel", "dp=8", "--global-batch", "12", "--micro-batch-size", "1"], "error: --micro-batch-size 1: the global batch of 12 sequences is not a whole number of micro-batches of 1 × 8 data-parallel ranks\n"),
        (vec!["--global-batch", "0"], "error: --global-batch 0: a step needs at least one sequence\n"),
    ] {
        let mut all = vec!["cost", "--preset", "llama3-8b", "--layers", "1"];
        all.extend(args);
        let out = shardlab(&all);
        assert_eq!(out.status.code(), Some(2), "{all:?}");
        assert_eq!(text(&out.stderr), want, "{all:?}");
    }
}

#[test]
fn run_executes_a_published_presets_shrunk_twin_and_says_so() {
    let out = shardlab(&[
        "run",
        "--preset",
        "gpt2-small",
        "--layers",
        "2",
        "--parallel",
        "dp=2,tp=4",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        "executed the shrunk twin: hidden 768 → 24, vocab 50257 → 9, seq 1024 → 8; every op, \
         layout and collective is the real size's (docs/cli.md)\n"
    );
    assert!(text(&out.stdout).contains("PASS"), "{}", text(&out.stdout));
    // A family runs at the sizes it is given: no twin.
    let out = shardlab(&[
        "run", "--preset", "gpt", "--layers", "1", "--mesh", "2:dp", "--shard", "x=dp,-,-",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "");
}

/// `bench --what import` times the fixtures of `tests/models/` and says the time per node,
/// and plans Llama 3 8B from its program end to end.
#[test]
fn bench_import_times_the_fixtures_per_node() {
    let out = shardlab(&["bench", "--what", "import", "--repeat", "1"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let t = text(&out.stdout);
    for want in [
        "tests/models/mlp_block.onnx: 13 nodes, 7 ops",
        "tests/models/llama_model_2l.onnx: 234 nodes, 91 ops",
        "tests/models/llama_causal_2l.pir: 314 nodes, 91 ops",
        "tests/models/llama3_8b.pir: 3615 nodes, 1321 ops",
        "tests/models/llama3_8b.pir read, imported and planned under dp=8,tp=8 (64 ranks, every pass): ",
        "µs per node",
    ] {
        assert!(t.contains(want), "{t}");
    }
}
