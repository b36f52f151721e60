//! `check` runs every check `plan` runs: for random plans (random models, 1-, 2- and 3-D
//! meshes, random annotations, some of them impossible), whenever `check FILE` exits 0,
//! `plan FILE --stage all` exits 0 too; and `check` never panics (exit 0 or 1 only).
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
        "mesh [3] (a)",
        "mesh [6] (a)",
        "mesh [2, 3] (a, b)",
        "mesh [3, 2] (a, b)",
        "mesh [2, 2, 3] (a, b, c)",
    ]));
    (common::random_plan(), extra, meshes).prop_map(|(plan, extra, mesh)| {
        let mut text = plan.to_string();
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

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]
    #[test]
    fn check_ok_implies_plan_ok(text in plan_text()) {
        let path = std::env::temp_dir().join(format!("shardlab-check-{}.plan", std::process::id()));
        std::fs::write(&path, &text).unwrap();
        let file = path.to_str().unwrap();
        let check = shardlab(&["check", file]);
        let code = check.status.code();
        prop_assert!(code == Some(0) || code == Some(1), "check exited {code:?}:\n{text}");
        if code == Some(0) {
            let plan = shardlab(&["plan", file, "--stage", "all"]);
            prop_assert_eq!(
                plan.status.code(), Some(0),
                "check said ok but plan failed: {}\n{}",
                String::from_utf8_lossy(&plan.stderr), text
            );
        }
    }
}
