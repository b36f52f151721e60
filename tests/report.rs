//! The JSON document `plan --format json` streams equals the one the JavaScript API builds
//! as a value, with every field and the schema version.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use common::{preset_plan, standard_configs};
use shardlab::models::Model;
use shardlab::passes::pipeline::{run_pipeline, PipelineOptions};
use shardlab::report::{pipeline_json, write_pipeline_json, SCHEMA_VERSION};

#[test]
fn the_streamed_document_is_the_json_value() {
    let (_, mesh, shards) = standard_configs(Model::Gpt, 1).remove(2);
    let plan = preset_plan(Model::Gpt, 1, mesh, &shards);
    let p = run_pipeline(&plan, &PipelineOptions::default()).unwrap();
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
