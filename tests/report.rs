//! The JSON document `plan --format json` streams equals the one the JavaScript API builds
//! as a value, with every field and the schema version.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use common::{preset_plan, standard_configs};
use shardlab::models::Model;
use shardlab::passes::driver::{run_passes, PassOptions};
use shardlab::report::{pipeline_json, write_pipeline_json, SCHEMA_VERSION};

#[test]
fn the_streamed_document_is_the_json_value() {
    let (_, mesh, shards) = standard_configs(Model::Gpt, 1).remove(2);
    let plan = preset_plan(Model::Gpt, 1, mesh, &shards);
    let p = run_passes(&plan, &PassOptions::default()).unwrap();
    for rank in [None, Some(5)] {
        let mut bytes = Vec::new();
        write_pipeline_json(&mut bytes, &p, rank).unwrap();
        assert_eq!(bytes.last(), Some(&b'\n'));
        let streamed: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        let value = pipeline_json(&p, rank).unwrap();
        assert_eq!(streamed, value);
        assert_eq!(value["schema_version"], SCHEMA_VERSION);
        let ranks = value["ranks"].as_array().unwrap();
        assert_eq!(ranks.len(), if rank.is_some() { 1 } else { 8 });
        for field in ["backward", "complete", "groups", "ledger", "optimizer"] {
            assert!(!value[field].is_null(), "{field}");
        }
        let op = &ranks[0]["ops"][0];
        for field in ["type", "role", "namescope", "inputs", "outputs", "attrs"] {
            assert!(!op[field].is_null(), "ops[].{field}");
        }
    }
}

/// The values, not only the fields, against an independent computation: data parallelism
/// of the MLP over 4 ranks (`dp_mlp`, the batch split 4 ways). From the serial program's
/// shapes alone: each rank's local `x` is a quarter of the batch; each parameter gradient
/// is all-reduced (SUM) once over [0, 1, 2, 3] with a ring's 2·(n−1)/n of its bytes, then
/// scaled by 1/4; nothing else communicates.
#[test]
fn the_document_s_values_match_an_independent_count() {
    use shardlab::models::scenarios::Scenario;
    let plan = Scenario::by_name("dp_mlp").unwrap().plan().unwrap();
    let p = run_passes(&plan, &PassOptions::default()).unwrap();
    let doc = pipeline_json(&p, None).unwrap();
    let n = 4usize;
    let params: Vec<(String, usize)> = plan
        .program
        .vars()
        .iter()
        .filter(|v| v.kind == shardlab::ir::VarKind::Parameter)
        .map(|v| (v.name.to_string(), v.ty.bytes() as usize))
        .collect();
    assert_eq!(doc["ranks"].as_array().unwrap().len(), n);
    let batch = plan.program.var(plan.program.var_id("x").unwrap()).ty.shape[0];
    let ledger = doc["ledger"].as_array().unwrap();
    assert_eq!(
        ledger.len(),
        n * params.len(),
        "one all-reduce per gradient per rank"
    );
    for (r, rank) in doc["ranks"].as_array().unwrap().iter().enumerate() {
        assert_eq!(rank["rank"], r);
        let x = rank["vars"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == "x")
            .unwrap();
        assert_eq!(x["shape"][0].as_u64().unwrap() as usize, batch / n);
        let scales: Vec<&serde_json::Value> = rank["ops"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|o| o["type"] == "scale")
            .collect();
        assert_eq!(scales.len(), params.len());
        for s in scales {
            assert_eq!(s["attrs"]["scale"], "0.25");
        }
        for (name, bytes) in &params {
            let grad = format!("{name}@GRAD");
            let entries: Vec<&serde_json::Value> = ledger
                .iter()
                .filter(|e| e["rank"] == r && e["tensor"] == grad.as_str())
                .collect();
            assert_eq!(entries.len(), 1, "{grad} on rank {r}");
            let e = entries[0];
            assert_eq!(e["kind"], "all_reduce");
            assert_eq!(e["reduce_type"], "SUM");
            assert_eq!(e["phase"], "backward");
            assert_eq!(e["group"], serde_json::json!([0, 1, 2, 3]));
            let ring = 2.0 * (n as f64 - 1.0) / n as f64 * *bytes as f64;
            assert_eq!(e["bytes_per_rank"].as_f64().unwrap(), ring, "{grad}");
        }
    }
}
