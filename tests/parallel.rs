//! `--parallel dp=,tp=,pp=`: the annotations found by pattern equal Megatron's written by
//! hand (the scenarios' lists), and the plans they make run distributed equal to serial.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use shardlab::models::scenarios::{llama_megatron_shards, megatron_shards};
use shardlab::models::{Model, ModelConfig};
use shardlab::passes::driver::{run_passes, PassOptions};
use shardlab::plan::parallel::Parallel;
use std::collections::BTreeSet;

fn specs(model: Model, layers: usize, spec: &str) -> BTreeSet<String> {
    let cfg = ModelConfig {
        layers,
        ..model.default_config()
    };
    let program = model.build(&cfg).unwrap();
    Parallel::parse(spec)
        .unwrap()
        .shard_specs(&program)
        .into_iter()
        .collect()
}

fn set(v: Vec<String>, more: &[&str]) -> BTreeSet<String> {
    v.into_iter()
        .chain(more.iter().map(|s| s.to_string()))
        .collect()
}

#[test]
fn the_patterns_find_megatrons_layers() {
    // gpt: q, k, v, fc1 column-parallel with their biases; o and fc2 row-parallel.
    assert_eq!(
        specs(Model::Gpt, 2, "dp=2,tp=4"),
        set(megatron_shards(2, "tp"), &["x=dp,-,-"])
    );
    // llama: q, k, v, gate, up column; o, down row; the table and the head vocab-parallel.
    assert_eq!(
        specs(Model::Llama, 2, "dp=2,tp=4"),
        set(
            llama_megatron_shards(2, "tp"),
            &["ids=dp,-", "wte=tp,-", "lm_head.w=-,tp"]
        )
    );
    // gpt_lm ties its head to the table: one annotation, the table's rows.
    let tied = specs(Model::GptLm, 1, "tp=2");
    assert!(tied.contains("wte=tp,-"), "{tied:?}");
    assert!(!tied.iter().any(|s| s.starts_with("wpe")), "{tied:?}");
    // Paddle's MLP: the first linear column-parallel, the second row-parallel.
    assert_eq!(
        specs(Model::Mlp, 1, "tp=2"),
        set(
            vec![],
            &["linear_0.w_0=-,tp", "linear_0.b_0=tp", "linear_1.w_0=tp,-"]
        )
    );
    // No tensor parallelism, no tensor-parallel annotations.
    assert_eq!(
        specs(Model::Gpt, 1, "dp=4,pp=1"),
        set(vec![], &["x=dp,-,-"])
    );
}

#[test]
fn strategies_by_size_run_distributed_equal_to_serial() {
    for (model, spec) in [
        (Model::Llama, "dp=2,tp=2"),
        (Model::GptLm, "dp=2,tp=4"),
        (Model::Gpt, "pp=2,dp=2,tp=2"),
    ] {
        let cfg = ModelConfig {
            layers: 2,
            dtype: shardlab::ir::DType::F64,
            ..model.default_config()
        };
        let p = Parallel::parse(spec).unwrap();
        let program = model.build(&cfg).unwrap();
        let shards = p.shard_specs(&program);
        let mut plan = common::plan_with(program, &p.mesh_spec(), &shards);
        if p.pp > 1 {
            plan.options.micro_batches = 2;
        }
        let planned = run_passes(&plan, &PassOptions::from_plan(&plan.options))
            .unwrap_or_else(|e| panic!("{spec}: {e}"));
        if let Err(failed) = common::verifies_against_serial(&planned, 1) {
            panic!("{model:?} {spec}: {failed}");
        }
    }
}
