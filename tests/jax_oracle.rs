//! `mlp_mse` with JAX's inputs (`oracle/jax/mlp_mse`) reproduces JAX's loss and gradients,
//! in f32 and f64, serially and under each sharded config, within the oracle's tolerance:
//! per tensor, max |a − b| ≤ 1e-5 × max |ref| + 1e-7 (f32); 1e-9 × max |ref| (f64).
#![cfg(not(target_arch = "wasm32"))]

mod common;

use shardlab::exec::npy::read_npy;
use shardlab::exec::run::{run_distributed, run_serial, Log, RunOptions};
use shardlab::exec::tensor::Tensor;
use shardlab::ir::DType;
use shardlab::models::{Model, ModelConfig};
use shardlab::passes::driver::{run_passes, PassOptions};
use shardlab::plan::Plan;
use std::collections::HashMap;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/oracle/jax/mlp_mse");

fn npy(path: &str) -> Tensor {
    read_npy(&std::fs::read(format!("{DIR}/{path}")).unwrap()).unwrap()
}

fn plan(dtype: DType, mesh: &str, shards: &[&str]) -> Plan {
    let config = ModelConfig {
        dtype,
        ..Model::MlpMse.default_config()
    };
    common::plan_with(Model::MlpMse.build(&config).unwrap(), mesh, shards)
}

fn feeds(dtype: DType) -> HashMap<String, Tensor> {
    ["batch.x", "batch.y", "params.W1", "params.W2"]
        .iter()
        .map(|n| {
            let t = npy(&format!("inputs/{n}.npy"));
            (
                n.to_string(),
                Tensor::float(dtype, t.shape.clone(), t.to_f64()),
            )
        })
        .collect()
}

/// The oracle's own tolerance (tests/oracle/README.md), written here rather than taken from
/// the crate, so loosening the crate's verification cannot loosen this test.
fn assert_close(what: &str, reference: &Tensor, ours: &Tensor, dtype: DType) {
    let (a, b) = (reference.to_f64(), ours.to_f64());
    assert_eq!(a.len(), b.len(), "{what}: sizes differ");
    let max_ref = a.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let tol = match dtype {
        DType::F64 => 1e-9 * max_ref,
        _ => 1e-5 * max_ref + 1e-7,
    };
    let diff = a
        .iter()
        .zip(&b)
        .fold(0.0f64, |m, (x, y)| m.max((x - y).abs()));
    assert!(diff <= tol, "{what}: max |diff| {diff:e} > {tol:e}");
}

fn check(log: &Log, refdir: &str, dtype: DType) {
    let as_dtype = |t: Tensor| Tensor::float(dtype, t.shape.clone(), t.to_f64());
    let loss = as_dtype(npy(&format!("{refdir}/loss.npy")));
    let ours = log.first_loss.clone().unwrap();
    assert_close(&format!("{refdir} {dtype} loss"), &loss, &ours, dtype);
    assert_eq!(log.grads.len(), 2, "{refdir}: W1 and W2");
    for g in &log.grads {
        let short = g.name.trim_start_matches("params.");
        let r = as_dtype(npy(&format!("{refdir}/grad.{short}.npy")));
        assert!(!g.copies.is_empty());
        // Every replica a rank holds must match JAX, not just coordinate 0's.
        for (i, copy) in g.copies.iter().enumerate() {
            assert_close(
                &format!("{refdir} {dtype} {} copy {i}", g.name),
                &r,
                copy,
                dtype,
            );
        }
    }
}

fn opts(dtype: DType) -> RunOptions {
    RunOptions {
        feeds: feeds(dtype),
        ..Default::default()
    }
}

#[test]
fn serial_matches_jax_in_f32_and_f64() {
    for (dtype, refdir) in [(DType::F32, "ref_f32"), (DType::F64, "ref_f64")] {
        let p = run_passes(&plan(dtype, "1:d", &[]), &PassOptions::default()).unwrap();
        check(&run_serial(&p, &opts(dtype)).unwrap(), refdir, dtype);
    }
}

#[test]
fn sharded_configs_match_jax() {
    let configs: &[(&str, &str, &[&str])] = &[
        ("dp8", "8:dp", &["batch.x=dp,-", "batch.y=dp,-"]),
        (
            "dp2x4",
            "2x4:dp,mp",
            &["batch.x=dp+mp,-", "batch.y=dp+mp,-"],
        ),
        ("dp8_gradsharded", "8:dp", &["batch.x=dp,-", "batch.y=dp,-"]),
        ("tp", "4:mp", &["params.W1=-,mp", "params.W2=mp,-"]),
        (
            "2d",
            "2x4:dp,mp",
            &[
                "batch.x=dp,-",
                "batch.y=dp,-",
                "params.W1=-,mp",
                "params.W2=mp,-",
            ],
        ),
        (
            "reshard",
            "2x4:dp,mp",
            &["batch.x=dp,mp", "params.W1=mp,-", "params.W2=-,mp"],
        ),
    ];
    for &(name, mesh, shards) in configs {
        let p = run_passes(&plan(DType::F32, mesh, shards), &PassOptions::default()).unwrap();
        let log = run_distributed(&p, &opts(DType::F32), true).unwrap();
        check(&log, &format!("sharded/{name}"), DType::F32);
    }
}
