//! Every case of PaddlePaddle 3.3.1's SPMD rules (`oracle/paddle/spmd_cases.json`, a copy
//! of `../shared/oracle`) agrees with Paddle, except the deliberate deviations listed in
//! `shardlab::spmd::deviations::DEVIATIONS` (each checked to still differ, with its reason).
#![cfg(not(target_arch = "wasm32"))]

use serde_json::Value;
use shardlab::spmd::cases::{run_case, Case, CaseResult};
use shardlab::spmd::deviations::DEVIATIONS;

fn cases() -> Vec<(Case, Value)> {
    let text = include_str!("oracle/paddle/spmd_cases.json");
    let raw: Vec<Value> = serde_json::from_str(text).unwrap();
    raw.into_iter()
        .map(|v| (serde_json::from_value(v.clone()).unwrap(), v))
        .collect()
}

/// Differences between our result and Paddle's expectation, as readable lines.
fn differences(ours: &CaseResult, case: &Value) -> Vec<String> {
    let mut diffs = Vec::new();
    let paddle_error = case.get("error").filter(|e| !e.is_null());
    match (paddle_error, &ours.error) {
        (Some(e), None) => diffs.push(format!("Paddle raised {}, we did not", e["type"])),
        (None, Some(e)) => diffs.push(format!("we raised `{e}`, Paddle did not")),
        (Some(_), Some(_)) => return diffs,
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
    for (case, raw) in cases() {
        let ours = run_case(&case);
        let diffs = differences(&ours, &raw);
        let deviation = DEVIATIONS
            .iter()
            .find(|d| d.op == case.op && d.note == raw["note"].as_str().unwrap_or(""));
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
    assert!(
        failures.is_empty(),
        "{} disagreements:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(checked >= 90, "only {checked} cases agreed");
}
