//! A flag applies or is refused: for every training flag of `plan`, on a plan where it
//! matters, and every view (`--stage backward`, `optimizer`, `partition`, `--ledger`), the
//! flag either changes what that view prints or is refused as a usage error (exit 2).
//! What a view would print is read off `--stage all` (and the ledger off `--ledger` after
//! `--stage partition`), so the test knows the truth without the rule it checks.
#![cfg(not(target_arch = "wasm32"))]

use std::process::{Command, Output};

fn shardlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_shardlab"))
        .args(args)
        .output()
        .unwrap()
}

fn stdout(args: &[&str]) -> String {
    let out = shardlab(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The section of `--stage all`'s text that `view` prints.
fn section(all: &str, view: &str) -> String {
    let start = |marker: &str| all.find(marker).unwrap_or(all.len());
    let (from, to) = match view {
        "backward" => (start("== backward"), start("== optimizer")),
        "optimizer" => (start("== optimizer"), start("== rank ")),
        _ => (start("== rank "), all.len()),
    };
    all[from..to].to_string()
}

/// What `plan <base> <view> <flag>` would print, read off the views that take every flag.
fn truth(base: &[&str], flag: &[&str], view: &str) -> String {
    let args = |extra: &[&str]| -> Vec<String> {
        base.iter()
            .chain(flag)
            .chain(extra)
            .map(|s| s.to_string())
            .collect()
    };
    let run = |extra: &[&str]| {
        let a = args(extra);
        stdout(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    if view == "ledger" {
        let partition = run(&["--stage", "partition"]);
        let both = run(&["--stage", "partition", "--ledger"]);
        both[partition.len()..].to_string()
    } else {
        section(&run(&["--stage", "all"]), view)
    }
}

#[test]
fn every_training_flag_changes_what_plan_prints_or_is_refused() {
    let dp_mp: &[&str] = &["plan", "--scenario", "gpt_dp_mp"];
    let pp: &[&str] = &[
        "plan",
        "--preset",
        "gpt",
        "--layers",
        "3",
        "--batch",
        "8",
        "--mesh",
        "2x2:pp,dp",
        "--shard",
        "x=dp,-,-",
        "--micro-batches",
        "4",
    ];
    let cases: &[(&[&str], &[&str])] = &[
        (dp_mp, &["--optimizer", "adam"]),
        (dp_mp, &["--amp"]),
        (dp_mp, &["--clip-norm", "1.0"]),
        (dp_mp, &["--no-grad-scale"]),
        (dp_mp, &["--megatron-sums"]),
        (dp_mp, &["--zero", "1"]),
        (dp_mp, &["--zero", "3"]),
        (dp_mp, &["--recompute", "full"]),
        (dp_mp, &["--bucket-mb", "1"]),
        (dp_mp, &["--micro-batches", "2"]),
        (&pp[..pp.len() - 2], &["--micro-batches", "2"]),
        (pp, &["--schedule", "1f1b"]),
        (pp, &["--schedule", "vpp", "--chunks", "2"]),
        (pp, &["--pp-split", "1,2"]),
    ];
    let mut wrong = Vec::new();
    for (base, flag) in cases {
        for view in ["backward", "optimizer", "partition", "ledger"] {
            let without = truth(base, &[], view);
            let with = truth(base, flag, view);
            let mut args: Vec<&str> = base.to_vec();
            args.extend(match view {
                "ledger" => vec!["--ledger"],
                v => vec!["--stage", v],
            });
            args.extend(flag.iter());
            let out = shardlab(&args);
            let code = out.status.code();
            let verdict = match (with == without, code) {
                (true, Some(2)) => None,
                (false, Some(0)) if String::from_utf8_lossy(&out.stdout).contains(&with) => None,
                (true, _) => Some("changes nothing there but was accepted"),
                (false, _) => Some("changes the output but was refused or printed otherwise"),
            };
            if let Some(why) = verdict {
                wrong.push(format!(
                    "{} {view}: {why} (exit {code:?}: {})",
                    flag.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
