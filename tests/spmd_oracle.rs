//! Every case of PaddlePaddle 3.3.1's SPMD rules (`oracle/paddle/spmd_cases.json`, a copy
//! of `../shared/oracle`), and every case we ran through Paddle 3.3.1 ourselves
//! (`spmd_cases_paddle_probe.json`, written by `scripts/paddle/spmd_probe.py`, which
//! reproduces all 99 oracle cases exactly), agrees with Paddle:
//! mappings, partial dims and reduce types, and, where both raise, the error message. The
//! deliberate deviations in `shardlab::spmd::deviations::DEVIATIONS` are the exceptions;
//! each must match at least one case and still differ there.
#![cfg(not(target_arch = "wasm32"))]

use serde_json::Value;
use shardlab::spmd::cases::{run_case, Case, CaseResult};
use shardlab::spmd::deviations::DEVIATIONS;

fn cases() -> Vec<(Case, Value)> {
    let mut raw: Vec<Value> =
        serde_json::from_str(include_str!("oracle/paddle/spmd_cases.json")).unwrap();
    let probed: Vec<Value> =
        serde_json::from_str(include_str!("spmd_cases_paddle_probe.json")).unwrap();
    assert!(
        probed
            .iter()
            .all(|c| c.get("expected").is_some() || c.get("error").is_some()),
        "every probed case carries Paddle's answer"
    );
    raw.extend(probed);
    raw.into_iter()
        .map(|v| (serde_json::from_value(v.clone()).unwrap(), v))
        .collect()
}

/// Paddle's error message without its `(Kind) ` prefix and ` (at file:line)` suffix.
fn paddle_message(error: &Value) -> String {
    let m = error["message"].as_str().unwrap_or("");
    let m = match m.strip_prefix('(') {
        Some(rest) => rest.split_once(") ").map_or(m, |(_, r)| r),
        None => m,
    };
    m.split(" (at ").next().unwrap_or(m).trim().to_string()
}

/// Differences between our result and Paddle's expectation, as readable lines.
fn differences(ours: &CaseResult, case: &Value) -> Vec<String> {
    let mut diffs = Vec::new();
    let paddle_error = case.get("error").filter(|e| !e.is_null());
    match (paddle_error, &ours.error) {
        (Some(e), None) => diffs.push(format!("Paddle raised {}, we did not", e["type"])),
        (None, Some(e)) => diffs.push(format!("we raised `{e}`, Paddle did not")),
        (Some(e), Some(ours)) => {
            let theirs = paddle_message(e);
            if ours.trim() != theirs {
                diffs.push(format!("error: Paddle `{theirs}` ours `{ours}`"));
            }
            return diffs;
        }
        (None, None) => {}
    }
    let Some(exp) = case.get("expected").filter(|e| !e.is_null()) else {
        return diffs;
    };
    let ours_json = serde_json::to_value(ours).unwrap();
    for key in ["inputs", "inputs_partial_dims", "co_shard"] {
        if exp[key] != ours_json[key] {
            diffs.push(format!(
                "{key}: Paddle {} ours {}",
                exp[key], ours_json[key]
            ));
        }
    }
    if let Some(multi) = exp.get("inputs_multi_dims_mapping") {
        if *multi != ours_json["inputs_multi_dims_mapping"] {
            diffs.push(format!(
                "inputs_multi_dims_mapping: Paddle {multi} ours {}",
                ours_json["inputs_multi_dims_mapping"]
            ));
        }
    }
    let exp_outs = exp["outputs"].as_array().cloned().unwrap_or_default();
    let our_outs = ours_json["outputs"].as_array().cloned().unwrap_or_default();
    if exp_outs.len() != our_outs.len() {
        diffs.push(format!("{} outputs vs {}", exp_outs.len(), our_outs.len()));
    }
    for (i, (e, o)) in exp_outs.iter().zip(&our_outs).enumerate() {
        for key in [
            "dims_mapping",
            "partial_dims",
            "partial_reduce",
            "multi_dims_mapping",
        ] {
            if e.get(key).is_some() && e[key] != o[key] {
                diffs.push(format!(
                    "output {i} {key}: Paddle {} ours {}",
                    e[key], o[key]
                ));
            }
        }
    }
    diffs
}

#[test]
fn every_paddle_case_agrees_except_documented_deviations() {
    let mut failures = Vec::new();
    let mut checked = 0;
    let mut used = vec![0usize; DEVIATIONS.len()];
    for (case, raw) in cases() {
        let ours = run_case(&case);
        let diffs = differences(&ours, &raw);
        let deviation = DEVIATIONS.iter().position(|d| {
            d.op == case.op && (d.note.is_empty() || d.note == raw["note"].as_str().unwrap_or(""))
        });
        if let Some(k) = deviation {
            used[k] += 1;
        }
        let deviation = deviation.map(|k| &DEVIATIONS[k]);
        match (deviation, diffs.is_empty()) {
            (None, true) => checked += 1,
            (None, false) => failures.push(format!(
                "case {} {} ({}): {}",
                case.id,
                case.op,
                raw["note"],
                diffs.join("; ")
            )),
            (Some(d), true) => failures.push(format!(
                "case {} is listed as a deviation ({}) but now agrees with Paddle",
                case.id, d.reason
            )),
            (Some(_), false) => {}
        }
    }
    for (d, n) in DEVIATIONS.iter().zip(&used) {
        if *n == 0 {
            failures.push(format!(
                "deviation `{}` ({}) matches no case: write the case it is about",
                d.op, d.note
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} disagreements:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(checked >= 90, "only {checked} cases agreed");
}

/// A dims mapping whose length is not the tensor's rank is an error naming the tensor, and
/// every rule's name is the one traces print.
#[test]
fn rules_reject_a_mapping_of_the_wrong_rank_and_have_names() {
    let case: Case = serde_json::from_value(serde_json::json!({
        "id": 1, "op": "matmul", "direction": "forward", "note": "", "mesh_shape": [2, 4],
        "attrs": {"trans_x": false, "trans_y": false},
        "inputs": [
            {"shape": [64, 32], "dims_mapping": [0], "partial_dims": []},
            {"shape": [32, 48], "dims_mapping": [-1, -1], "partial_dims": []}
        ]
    }))
    .unwrap();
    assert_eq!(
        run_case(&case).error.as_deref(),
        Some("matmul X: the tensor's rank [2] and its dims_mapping size [1] do not match")
    );
    use shardlab::spmd::Rule;
    assert_eq!(Rule::MeanAll.name(), "mean_all");
    assert_eq!(Rule::Source.name(), "source");
}
