//! Every error a plan file can cause after it parses, from every command that plans it
//! (`check`, `plan`, `run`, `cost`, `export`, `suggest`), is printed at the line and column
//! of the statement it is about: the core's errors carry their subject as a typed value
//! (`plan::Located`), and no message is read back for a position.
#![cfg(not(target_arch = "wasm32"))]

use std::io::Write;
use std::process::Command;

fn shardlab(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_shardlab"))
        .args(args)
        .output()
        .expect("the binary runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn temp_file(name: &str, contents: &str) -> String {
    let dir = std::env::temp_dir().join(format!("shardlab-plan-errors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::File::create(&path)
        .unwrap()
        .write_all(contents.as_bytes())
        .unwrap();
    path.to_string_lossy().into_owned()
}

/// Paddle's MLP as a plan file (line 1: the mesh, then 14 variables from line 3 and the 7
/// ops from line 18).
fn mlp(mesh: &str, extra: &str) -> String {
    let base = include_str!("plans/pp_mlp.plan")
        .lines()
        .filter(|l| !l.starts_with("stage") && !l.starts_with("mesh"))
        .collect::<Vec<_>>()
        .join("\n");
    format!("{mesh}{base}\n{extra}")
}

/// Runs every command on `text` and checks each prints `FILE:LINE:COL: ...message...` first.
fn every_command_points_at(name: &str, text: &str, line_col: &str, message: &str) {
    let file = temp_file(name, text);
    let out = format!("{file}.py");
    let commands: [&[&str]; 6] = [
        &["check"],
        &["plan", "--stage", "all"],
        &["run"],
        &["cost"],
        &["export", "-o", &out],
        &["suggest", "--devices", "2"],
    ];
    for cmd in commands {
        let mut args = cmd.to_vec();
        args.insert(1, &file);
        let (code, stderr) = shardlab(&args);
        let first = stderr
            .lines()
            .find(|l| !l.starts_with("cpu calibrated"))
            .unwrap_or("");
        assert_eq!(code, Some(1), "{name}: {args:?}: {stderr}");
        assert!(
            first.starts_with(&format!("{file}:{line_col}: ")) && first.contains(message),
            "{name}: {args:?} should print {line_col} and `{message}` first:\n{stderr}"
        );
    }
}

#[test]
fn a_loss_that_is_not_a_scalar_points_at_its_variable() {
    let text = mlp("mesh [2] (dp)\n", "")
        .replace(
            "var mean_0.tmp_0: f32[] activation",
            "var mean_0.tmp_0: f32[] activation\nvar per_row: f32[16, 1] activation",
        )
        .replace(
            "reduce_all=true} role=loss",
            "reduce_all=true}\nop scale(X=softmax_with_cross_entropy_0.tmp_1) -> (Out=per_row) role=loss",
        );
    // `var per_row` is line 17; its name starts at column 5.
    every_command_points_at(
        "loss.plan",
        &text,
        "17:5",
        "the loss `per_row` must be a scalar",
    );
}

#[test]
fn an_activation_sent_backwards_points_at_the_op_reading_it() {
    let text = mlp(
        "mesh [2] (pp)\n",
        "stage 1 ops 0 to 2\nstage 0 ops 3 to 6\n",
    );
    // op3 (the second matmul) is line 21; its type starts at column 4.
    every_command_points_at(
        "backwards.plan",
        &text,
        "21:4",
        "op3 (matmul_v2) is on stage 0 but reads `gelu_0.tmp_0` from stage 1",
    );
}

#[test]
fn a_schedule_the_options_cannot_run_points_at_the_options() {
    let text = mlp(
        "mesh [2] (pp)\noptions schedule=1f1b micro_batches=1\n",
        "stage 1 var gelu_0.tmp_0\n",
    );
    every_command_points_at(
        "schedule.plan",
        &text,
        "2:1",
        "1f1b needs at least as many micro-batches as stages (1 < 2)",
    );
}

/// An invalid plan names its first five problems and counts the rest: a real-size model
/// repeats one problem per layer, and a page or a terminal of 240 copies says nothing more.
#[test]
fn an_invalid_plan_lists_five_problems_and_counts_the_rest() {
    let mut text = String::new();
    for i in 0..8 {
        text.push_str(&format!(
            "var x{i}: f32[1073741824, 1073741824] input\nvar y{i}: f32[1073741824, 1073741824] activation\n"
        ));
    }
    for i in 0..8 {
        text.push_str(&format!("op relu(X=x{i}) -> (Out=y{i})\n"));
    }
    let program = shardlab::ir::text::parse_program(&text).unwrap();
    let mut plan = shardlab::plan::Plan::from_program(program);
    plan.set_mesh(std::sync::Arc::new(
        shardlab::plan::parse_mesh_spec("2:dp").unwrap(),
    ));
    let e = shardlab::passes::complete::complete(&plan)
        .err()
        .unwrap()
        .to_string();
    assert_eq!(e.lines().count(), 7, "{e}");
    assert!(e.lines().nth(1).unwrap().contains("`x0`"), "{e}");
    assert!(e.ends_with("  … and 11 more"), "{e}");
}
