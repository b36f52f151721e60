//! `check` runs every check a later command runs: for random plans (random models, 1-, 2-
//! and 3-D meshes, pipeline meshes, random annotations and options, some of them
//! impossible), whenever `check FILE` exits 0, `plan FILE --stage all`, `cost FILE` and
//! `run FILE` exit 0 too; and `check` never panics (exit 0 or 1 only). (Comparing with
//! `plan` at its default stage, completion, could hardly fail.)
#![cfg(not(target_arch = "wasm32"))]

mod common;

use proptest::prelude::*;
use std::process::Command;

fn shardlab(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_shardlab"))
        .args(args)
        .output()
        .unwrap()
}

/// A random plan's text with a few extra annotation lines of random axes (pinned, free,
/// split, co-split, partial), which may or may not be possible.
fn plan_text() -> impl Strategy<Value = String> {
    let extra = prop::collection::vec(
        (
            any::<prop::sample::Index>(),
            prop::collection::vec(
                prop::sample::select(vec!["-", "?", "a", "b", "c", "(a, b)", "(b, a)"]),
                1..4,
            ),
            prop::option::of(prop::sample::select(vec!["a=SUM", "b=MAX", "c=AVG"])),
        ),
        0..3,
    );
    // Meshes with axes of size 3 and 6, where propagated splits may not divide.
    let meshes = prop::option::of(prop::sample::select(vec![
        "mesh [2] (pp)",
        "mesh [2, 2] (pp, a)",
        "mesh [3] (a)",
        "mesh [6] (a)",
        "mesh [2, 3] (a, b)",
        "mesh [3, 2] (a, b)",
        "mesh [2, 2, 3] (a, b, c)",
    ]));
    // Options a later stage acts on (never `no_grad_scale`, whose run fails by design).
    let options = prop::collection::vec(
        prop::sample::select(vec![
            "recompute=full",
            "recompute=selective",
            "micro_batches=2",
            "micro_batches=3",
            "schedule=1f1b",
            "schedule=vpp chunks=2",
            "schedule=zbh1",
            "zero=1",
            "zero=3",
            "optimizer=adam",
            "amp",
            "clip_norm=1",
        ]),
        0..4,
    );
    (common::random_plan(), extra, meshes, options).prop_map(|(plan, extra, mesh, options)| {
        let mut text = plan.to_string();
        if !options.is_empty() {
            // A key given twice is a parse error, which `check` reports too.
            text = format!("options {}\n{text}", options.join(" "));
        }
        if let Some(mesh) = mesh {
            text = text
                .lines()
                .map(|l| if l.starts_with("mesh ") { mesh } else { l })
                .collect::<Vec<_>>()
                .join("\n")
                + "\n";
        }
        for (var, dims, partial) in extra {
            let v = &plan.program.vars()[var.index(plan.program.vars().len())];
            if plan
                .annotations
                .iter()
                .any(|a| a.var.index() == var.index(plan.program.vars().len()))
            {
                continue;
            }
            let dims: Vec<&str> = dims.iter().copied().cycle().take(v.ty.rank()).collect();
            let partial = partial
                .map(|p| format!(" partial({p})"))
                .unwrap_or_default();
            text.push_str(&format!(
                "shard {} [{}]{partial}\n",
                v.name,
                dims.join(", ")
            ));
        }
        text
    })
}

/// 512 in CI; `scripts/fuzz.sh` runs many more (`CHECK_IMPLIES_CASES`).
fn cases() -> u32 {
    std::env::var("CHECK_IMPLIES_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(512)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]
    #[test]
    fn check_ok_implies_plan_ok(text in plan_text()) {
        let path = std::env::temp_dir().join(format!("shardlab-check-{}.plan", std::process::id()));
        std::fs::write(&path, &text).unwrap();
        let file = path.to_str().unwrap();
        let check = shardlab(&["check", file]);
        let code = check.status.code();
        prop_assert!(code == Some(0) || code == Some(1), "check exited {code:?}:\n{text}");
        if code == Some(0) {
            for args in [
                vec!["plan", file, "--stage", "all"],
                vec!["cost", file, "--topology", "h100x8x2"],
                vec!["run", file, "--steps", "1"],
            ] {
                let out = shardlab(&args);
                prop_assert_eq!(
                    out.status.code(), Some(0),
                    "check said ok but {:?} failed: {}\n{}",
                    args, String::from_utf8_lossy(&out.stderr), text
                );
            }
        }
    }
}
