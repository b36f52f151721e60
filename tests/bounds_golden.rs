//! The verifier's tolerances, pinned: every variable's first-order error bound after two
//! serial steps (`exec::bound`), for programs that together use every op type the executor
//! bounds (the presets, a program of every other forward op, Adam/AdamW/momentum/SGD, AMP
//! and global-norm clipping). A change to a bound formula shows here and must be accepted
//! deliberately (`UPDATE_EXPECT=1`); `verify_random.rs` then checks the new bounds give no
//! false FAILs and `mutation.rs` that they still catch every deleted collective.
//!
//! Programs are f64, whose kernels round alike on every x86-64 machine; bounds are printed
//! to 9 significant digits.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use expect_test::{expect_file, ExpectFile};
use shardlab::exec::run::{serial_bounds, RunOptions};
use shardlab::models::{Model, ModelConfig};
use shardlab::passes::driver::{run_passes, PassOptions};
use shardlab::passes::optimizer::{Optimizer, OptimizerOptions};
use shardlab::plan::{parse_plan, Plan};

fn f64_model(model: Model, shards: &[&str]) -> Plan {
    let cfg = ModelConfig {
        layers: 1,
        dtype: shardlab::ir::DType::F64,
        ..model.default_config()
    };
    common::plan_with(model.build(&cfg).unwrap(), "2:dp", shards)
}

fn options(optimizer: &str, amp: bool, clip: Option<f64>) -> PassOptions {
    PassOptions {
        optimizer: OptimizerOptions {
            optimizer: Optimizer::from_name(optimizer).unwrap(),
            amp,
            clip_norm: clip,
        },
        ..Default::default()
    }
}

fn check(plan: &Plan, opts: &PassOptions, golden: ExpectFile) {
    let p = run_passes(plan, opts).unwrap();
    // Two steps, so the second starts from parameters that carry the first step's error
    // (and weight decay and moments act on it).
    let opts = RunOptions {
        steps: 2,
        ..Default::default()
    };
    let bounds = serial_bounds(&p, &opts).unwrap();
    assert!(bounds.iter().all(|(_, b, _)| b.is_finite() && *b >= 0.0));
    assert!(
        bounds.iter().filter(|(_, b, _)| *b > 0.0).count() > bounds.len() / 2,
        "most variables are computed, so most bounds are positive"
    );
    let width = bounds.iter().map(|(n, _, _)| n.len()).max().unwrap_or(0);
    let text: String = bounds
        .iter()
        .map(|(name, b, elems)| match elems {
            Some(sum) => format!("{name:<width$}  {b:.8e}  elements sum {sum:.8e}\n"),
            None => format!("{name:<width$}  {b:.8e}\n"),
        })
        .collect();
    golden.assert_eq(&text);
}

#[test]
fn every_other_op_with_adam_amp_and_clipping() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/plans/every_op.plan"
    ))
    .unwrap();
    let (plan, _) = parse_plan(&text).unwrap();
    check(
        &plan,
        &options("adam", true, Some(1.0)),
        expect_file!["golden/bounds_every_op.txt"],
    );
}

fn moe_plan() -> Plan {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/plans/moe.plan"))
            .unwrap();
    parse_plan(&text).unwrap().0
}

#[test]
fn moe_routing_with_adam() {
    check(
        &moe_plan(),
        &options("adam", false, None),
        expect_file!["golden/bounds_moe.txt"],
    );
}

#[test]
fn gpt_with_adamw_amp_and_clipping() {
    check(
        &f64_model(Model::Gpt, &["x=dp,-,-"]),
        &options("adamw", true, Some(0.5)),
        expect_file!["golden/bounds_gpt.txt"],
    );
}

#[test]
fn embedding_lm_with_momentum() {
    check(
        &f64_model(Model::EmbeddingLm, &["ids=dp,-"]),
        &options("momentum", false, None),
        expect_file!["golden/bounds_embedding_lm.txt"],
    );
}

#[test]
fn llama_with_adam() {
    check(
        &f64_model(Model::Llama, &["ids=dp,-"]),
        &options("adam", false, None),
        expect_file!["golden/bounds_llama.txt"],
    );
}

/// A Llama under `cp=2`: attention fused into `flash_attn` (its bound and its grad's).
fn flash_llama() -> Plan {
    let cfg = ModelConfig {
        layers: 1,
        dtype: shardlab::ir::DType::F64,
        ..Model::Llama.default_config()
    };
    let p = shardlab::plan::parallel::Parallel::parse("cp=2,cp_mode=ring").unwrap();
    let program = p.prepare(&Model::Llama.build(&cfg).unwrap());
    let shards = p.shard_specs(&program);
    common::plan_with(program, &p.mesh_spec(), &shards)
}

#[test]
fn llama_with_flash_attention() {
    check(
        &flash_llama(),
        &options("adam", false, None),
        expect_file!["golden/bounds_llama_flash.txt"],
    );
}

#[test]
fn mlps_with_sgd() {
    check(
        &f64_model(Model::Mlp, &["x=dp,-"]),
        &options("sgd", false, None),
        expect_file!["golden/bounds_mlp.txt"],
    );
    check(
        &f64_model(Model::MlpMse, &["batch.x=dp,-"]),
        &options("sgd", false, None),
        expect_file!["golden/bounds_mlp_mse.txt"],
    );
}

/// Every op type the executor bounds appears in one of the programs above (so a change to
/// any formula can show).
#[test]
fn the_programs_cover_every_op_type_with_a_bound() {
    use shardlab::ir::{OpClass, OpType};
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/plans/every_op.plan"
    ))
    .unwrap();
    let plans = [
        (
            parse_plan(&text).unwrap().0,
            options("adam", true, Some(1.0)),
        ),
        (
            f64_model(Model::Gpt, &["x=dp,-,-"]),
            options("adamw", true, Some(0.5)),
        ),
        (moe_plan(), options("adam", false, None)),
        (
            f64_model(Model::EmbeddingLm, &["ids=dp,-"]),
            options("momentum", false, None),
        ),
        (
            f64_model(Model::Llama, &["ids=dp,-"]),
            options("adam", false, None),
        ),
        (flash_llama(), options("adam", false, None)),
        (
            f64_model(Model::Mlp, &["x=dp,-"]),
            options("sgd", false, None),
        ),
        (
            f64_model(Model::MlpMse, &["batch.x=dp,-"]),
            options("sgd", false, None),
        ),
    ];
    let mut seen = std::collections::HashSet::new();
    for (plan, opts) in &plans {
        let p = run_passes(plan, opts).unwrap();
        seen.extend(p.full.program.ops().iter().map(|o| o.ty));
    }
    // Serial programs hold no communication or rank-local ops.
    let missing: Vec<OpType> = OpType::ALL
        .into_iter()
        .filter(|t| !matches!(t.class(), OpClass::Collective | OpClass::RankLocal))
        .filter(|t| !seen.contains(t))
        .collect();
    assert!(missing.is_empty(), "no program uses {missing:?}");
}
