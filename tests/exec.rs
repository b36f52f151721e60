//! The executor: for every preset under every annotation set, the distributed step equals
//! the serial one within tolerance for 3 optimizer steps; the checker catches planner bugs.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use common::{preset_plan, standard_configs};
use shardlab::exec::run::{run_distributed, run_serial, RunOptions};
use shardlab::exec::verify::{verify, Check};
use shardlab::models::scenarios::Scenario;
use shardlab::models::Model;
use shardlab::passes::driver::{run_passes, PassOptions, Passes};
use shardlab::plan::Plan;

fn checks(p: &Passes, steps: usize, threads: bool) -> Vec<Check> {
    let opts = RunOptions {
        steps,
        ..Default::default()
    };
    let serial = run_serial(p, &opts).unwrap();
    let dist = run_distributed(p, &opts, threads).unwrap();
    assert!(serial.losses.iter().all(|l| l.is_finite()));
    verify(&serial, &dist)
}

fn assert_equal(name: &str, plan: &Plan, opts: &PassOptions) {
    let p = run_passes(plan, opts).unwrap();
    let failed: Vec<String> = checks(&p, 3, true)
        .into_iter()
        .filter(|c| !c.pass)
        .map(|c| format!("{c:?}"))
        .collect();
    assert!(
        failed.is_empty(),
        "{name}: distributed differs from serial:\n{}",
        failed.join("\n")
    );
}

#[test]
fn presets_distributed_equals_serial() {
    for (model, layers) in [
        (Model::Mlp, 1),
        (Model::MlpMse, 1),
        (Model::Gpt, 1),
        (Model::Gpt, 2),
        (Model::EmbeddingLm, 1),
        (Model::GptLm, 1),
    ] {
        for (config, mesh, shards) in standard_configs(model, layers) {
            let plan = preset_plan(model, layers, mesh, &shards);
            assert_equal(
                &format!("{} x{layers} {config}", model.name()),
                &plan,
                &PassOptions::default(),
            );
        }
    }
}

#[test]
fn megatron_sums_distributed_equals_serial() {
    let opts = PassOptions {
        partition: shardlab::passes::partition::PartitionOptions {
            defer_partial_sums: true,
            build_every_rank: false,
            ..Default::default()
        },
        ..PassOptions::default()
    };
    for (model, layers) in [(Model::Gpt, 2), (Model::EmbeddingLm, 1)] {
        for (config, mesh, shards) in standard_configs(model, layers) {
            let plan = preset_plan(model, layers, mesh, &shards);
            assert_equal(
                &format!("{} x{layers} {config} megatron sums", model.name()),
                &plan,
                &opts,
            );
        }
    }
}

#[test]
fn scenarios_distributed_equals_serial() {
    for s in shardlab::models::scenarios::scenarios() {
        assert_equal(s.name, &s.plan().unwrap(), &PassOptions::default());
    }
}

#[test]
fn optimizers_amp_and_clipping_distributed_equals_serial() {
    let plan = Scenario::by_name("gpt_dp_mp").unwrap().plan().unwrap();
    for optimizer in ["sgd", "momentum", "adam", "adamw"] {
        for (amp, clip) in [
            (false, None),
            (true, None),
            (false, Some(0.5)),
            (true, Some(0.5)),
        ] {
            let opts = common::with_optimizer(optimizer, amp, clip);
            assert_equal(
                &format!("{optimizer} amp={amp} clip={clip:?}"),
                &plan,
                &opts,
            );
        }
    }
}

#[test]
fn cooperative_ranks_match_threads() {
    let plan = Scenario::by_name("gpt_dp_mp").unwrap().plan().unwrap();
    let p = run_passes(&plan, &PassOptions::default()).unwrap();
    let opts = RunOptions {
        steps: 2,
        ..Default::default()
    };
    let a = run_distributed(&p, &opts, true).unwrap();
    let b = run_distributed(&p, &opts, false).unwrap();
    assert_eq!(a.losses, b.losses);
    assert_eq!(a.params, b.params);
    // Without recording (benchmarks) only the losses are read back, and they are the same.
    let quiet = RunOptions {
        record: false,
        ..opts.clone()
    };
    let c = run_distributed(&p, &quiet, false).unwrap();
    let s = run_serial(&p, &quiet).unwrap();
    assert_eq!(c.losses, b.losses);
    assert!(c.params.is_empty() && c.grads.is_empty() && s.params.is_empty());
    assert_eq!(s.losses.len(), 2);
}

/// Deletes, on every rank, the first op matching `pick`; returns the failing checks.
fn with_op_deleted(scenario: &str, pick: impl Fn(&shardlab::ir::Op) -> bool) -> Vec<Check> {
    let plan = Scenario::by_name(scenario).unwrap().plan().unwrap();
    let mut p = run_passes(&plan, &PassOptions::default()).unwrap();
    let mut deleted = 0;
    for r in &mut p.partitioned.ranks {
        if let Some(i) = r.program.ops().iter().position(|o| pick(o)) {
            r.program.remove_op(i);
            deleted += 1;
        }
    }
    assert!(deleted > 0, "nothing to delete");
    checks(&p, 1, true)
        .into_iter()
        .filter(|c| !c.pass)
        .collect()
}

#[test]
fn verification_catches_a_missing_data_parallel_scale() {
    let failed = with_op_deleted("dp_mlp", |o| {
        shardlab::passes::partition::sync::is_data_parallel_scale_op(o)
    });
    let names: Vec<&str> = failed.iter().map(|c| c.tensor.as_str()).collect();
    // The first scale in program order is linear_1.b_0's (its grad is produced first).
    assert!(names.contains(&"linear_1.b_0@GRAD (step 1)"), "{names:?}");
    assert!(names.contains(&"linear_1.b_0 (after step 1)"), "{names:?}");
    assert!(
        !names.iter().any(|n| n.starts_with("linear_0")),
        "only the unscaled gradient is wrong: {names:?}"
    );
}

#[test]
fn verification_catches_a_missing_tensor_parallel_all_reduce() {
    let failed = with_op_deleted("megatron_mlp", |o| {
        o.namescope == "/auto_parallel/tensor_parallel"
    });
    let names: Vec<&str> = failed.iter().map(|c| c.tensor.as_str()).collect();
    assert!(
        names.contains(&"loss (step 1)"),
        "the row-parallel output is never summed: {names:?}"
    );
    assert!(names.contains(&"linear_1.b_0@GRAD (step 1)"), "{names:?}");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
    /// Random presets, meshes and valid annotations: planned, run on every rank and
    /// compared with the serial run.
    #[test]
    fn random_plans_distributed_equals_serial(plan in common::random_plan()) {
        let p = run_passes(&plan, &PassOptions::default()).unwrap();
        let failed: Vec<String> = checks(&p, 1, false).into_iter().filter(|c| !c.pass).map(|c| format!("{c:?}")).collect();
        let annotations: Vec<String> = plan.annotations.iter().map(|a| format!("{} {:?}", plan.program.var(a.var).name, a.attr.dims)).collect();
        proptest::prop_assert!(failed.is_empty(), "mesh {:?} {:?}:\n{}", plan.mesh().map(|m| m.to_string()), annotations, failed.join("\n"));
    }
}

/// Runs `plan` for `steps` steps and asserts that every check passes, that it compared a loss
/// per step and a gradient and a parameter per parameter, and that the planned programs
/// contain each op type in `must_contain` (so the case exercises what it is named for).
fn assert_verifies(name: &str, plan: &Plan, steps: usize, must_contain: &[&str]) {
    let p = run_passes(plan, &PassOptions::default()).unwrap();
    for ty in must_contain {
        assert!(
            p.partitioned.ranks.iter().any(|r| r
                .program
                .ops()
                .iter()
                .any(|o| o.ty.to_string() == *ty)),
            "{name}: no {ty} was planned"
        );
    }
    let checks = checks(&p, steps, true);
    assert_eq!(
        checks.len(),
        steps + 2 * p.backward.param_grads.len(),
        "{name}"
    );
    let failed: Vec<String> = checks
        .iter()
        .filter(|c| !c.pass)
        .map(|c| format!("{c:?}"))
        .collect();
    assert!(failed.is_empty(), "{name}:\n{}", failed.join("\n"));
}

fn f64_preset(model: Model, mesh: &str, shards: &[&str]) -> Plan {
    let cfg = shardlab::models::ModelConfig {
        layers: 1,
        dtype: shardlab::ir::DType::F64,
        ..model.default_config()
    };
    common::plan_with(model.build(&cfg).unwrap(), mesh, shards)
}

/// What only the random test used to reach, as fixed cases: meshes whose process ids are
/// not in mesh order (a group must follow mesh order, or gathers concatenate in the wrong
/// order), co-sharded gathers, all_to_all, f64 distributed runs, several steps.
#[test]
fn fixed_cases_custom_ids_coshards_all_to_all_f64_and_steps() {
    use shardlab::dist::ProcessMesh;
    use std::sync::Arc;
    let gpt = [
        "x=dp,-,-",
        "h0.attn.q.w=-,mp",
        "h0.attn.o.w=mp,-",
        "h0.mlp.fc1.w=-,mp",
    ];
    let coshard = ["x=dp+mp,-", "linear_0.tmp_0=-,dp+mp"];
    for (ids, name) in [
        (vec![7, 6, 5, 4, 3, 2, 1, 0], "reversed ids"),
        (vec![3, 1, 6, 0, 2, 7, 5, 4], "shuffled ids"),
    ] {
        for (model, shards, must) in [
            (Model::Gpt, &gpt[..], &["all_reduce"][..]),
            (Model::Mlp, &coshard[..], &["all_gather"][..]),
        ] {
            let mut plan = f64_preset(model, "2x4:dp,mp", shards);
            let mesh = Arc::new(
                ProcessMesh::new(vec![2, 4], ids.clone(), vec!["dp".into(), "mp".into()]).unwrap(),
            );
            plan.set_mesh(mesh.clone());
            assert_verifies(&format!("{} {name}", model.name()), &plan, 2, must);
        }
    }
    assert_verifies(
        "co-sharded gathers, f64, 3 steps",
        &f64_preset(Model::Mlp, "2x4:dp,mp", &coshard),
        3,
        &["all_gather", "slice"],
    );
    assert_verifies(
        "all_to_all, f64, 3 steps",
        &f64_preset(Model::Mlp, "4:dp", &["x=dp,-", "linear_0.tmp_1=-,dp"]),
        3,
        &["all_to_all"],
    );
    assert_verifies(
        "gpt dp x mp, f64, 3 steps",
        &f64_preset(Model::Gpt, "2x4:dp,mp", &gpt),
        3,
        &["all_reduce", "scale"],
    );
}

/// The vocab-parallel cross-entropy (`c_softmax_with_cross_entropy`, three all-reduces inside
/// the op) equals the serial loss and gradients: for a vocabulary split over one mesh axis,
/// co-sharded over two, on reversed process ids, for a class axis of an MLP head, and with
/// ranks run cooperatively (the op resumes after each completed exchange).
#[test]
fn vocab_parallel_cross_entropy_equals_serial() {
    use shardlab::dist::ProcessMesh;
    use std::sync::Arc;
    let must = &[
        "c_softmax_with_cross_entropy",
        "c_softmax_with_cross_entropy_grad",
    ][..];
    let lm = |shards: &[&str]| f64_preset(Model::EmbeddingLm, "2x4:dp,mp", shards);
    assert_verifies(
        "vocab split on mp",
        &lm(&["ids=dp,-", "lm_head.w=-,mp"]),
        2,
        must,
    );
    assert_verifies(
        "vocab co-sharded on dp and mp",
        &lm(&["lm_head.w=-,dp+mp"]),
        2,
        must,
    );
    let mut reversed = lm(&["ids=dp,-", "lm_head.w=-,mp"]);
    let mesh = Arc::new(
        ProcessMesh::new(
            vec![2, 4],
            (0..8).rev().collect(),
            vec!["dp".into(), "mp".into()],
        )
        .unwrap(),
    );
    reversed.set_mesh(mesh.clone());
    assert_verifies("vocab split, reversed ids", &reversed, 2, must);
    assert_verifies(
        "mlp classes split",
        &f64_preset(Model::Mlp, "2:mp", &["linear_1.w_0=-,mp"]),
        3,
        must,
    );
    // GPT's tied head: the table split on its rows is the embedding's and the head's vocab
    // split at once; its gradient sums the two uses.
    assert_verifies(
        "tied table split on mp",
        &f64_preset(Model::GptLm, "2x4:dp,mp", &["ids=dp,-", "wte=mp,-"]),
        2,
        must,
    );
    let plan = preset_plan(
        Model::EmbeddingLm,
        1,
        "2x4:dp,mp",
        &["ids=dp,-".to_string(), "lm_head.w=-,mp".to_string()],
    );
    let p = run_passes(&plan, &PassOptions::default()).unwrap();
    let opts = RunOptions {
        steps: 2,
        ..Default::default()
    };
    let threads = run_distributed(&p, &opts, true).unwrap();
    let coop = run_distributed(&p, &opts, false).unwrap();
    assert_eq!(threads.losses, coop.losses);
    assert_eq!(threads.params, coop.params);
    assert!(checks(&p, 2, false).iter().all(|c| c.pass));
}

/// The plan of every other forward op (relu, silu, cast, assign, dropout, softmax, split,
/// concat, reduce_sum, elementwise mul/div, scale with a bias, fill_constant) runs on two
/// ranks equal to the serial run, with Adam, AMP and clipping.
#[test]
fn every_other_op_distributed_equals_serial() {
    use shardlab::passes::optimizer::{Optimizer, OptimizerOptions};
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/plans/every_op.plan"
    ))
    .unwrap();
    let (plan, _) = shardlab::plan::parse_plan(&text).unwrap();
    let opts = PassOptions {
        optimizer: OptimizerOptions {
            optimizer: Optimizer::from_name("adam").unwrap(),
            amp: true,
            clip_norm: Some(1.0),
        },
        ..Default::default()
    };
    let p = run_passes(&plan, &opts).unwrap();
    let checks = checks(&p, 2, true);
    assert_eq!(checks.len(), 2 + 2 * p.backward.param_grads.len());
    assert_eq!(p.backward.param_grads.len(), 2);
    let failed: Vec<String> = checks
        .iter()
        .filter(|c| !c.pass)
        .map(|c| format!("{c:?}"))
        .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// A rank that fails aborts the exchanges the others wait in: they give up with "another
/// rank failed" instead of waiting out the timeout (a random plan once waited 20 s per
/// case on a rank that had already failed).
#[test]
fn a_failed_rank_aborts_the_exchanges_the_others_wait_in() {
    use shardlab::exec::comm::{CommError, Communicator, ThreadComm};
    use shardlab::exec::tensor::Tensor;
    use shardlab::ir::DType;
    let comm = ThreadComm::new(std::time::Duration::from_secs(600));
    let key = (vec![0, 1], 7);
    let waited = std::thread::scope(|s| {
        let waiter = s.spawn(|| comm.exchange(0, &key, Tensor::zeros(DType::F32, vec![2])));
        // Rank 1 fails instead of contributing.
        std::thread::sleep(std::time::Duration::from_millis(50));
        comm.abort();
        waiter.join().unwrap()
    });
    assert_eq!(waited.err(), Some(CommError::Aborted));
    // Every later exchange gives up too.
    let later = comm.exchange(1, &(vec![0, 1], 8), Tensor::zeros(DType::F32, vec![2]));
    assert_eq!(later.err(), Some(CommError::Aborted));
}

/// A Mixture-of-Experts layer (`tests/plans/moe.plan`: a router, the dispatch of two token
/// groups with drops, batched experts, the combine, a sigmoid gate) on two ranks, each
/// routing its own group, equals the serial run for two steps; the dispatch and combine
/// need no communication, the experts' gradients are all-reduced.
#[test]
fn moe_routing_distributed_equals_serial() {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/plans/moe.plan"))
            .unwrap();
    let (plan, _) = shardlab::plan::parse_plan(&text).unwrap();
    let p = run_passes(&plan, &PassOptions::default()).unwrap();
    let rank = p.partitioned.ranks[0].program.ops();
    let all_reduces = rank
        .iter()
        .filter(|o| o.ty == shardlab::ir::OpType::AllReduce)
        .count();
    assert_eq!(
        all_reduces, 4,
        "the four parameters' gradients, nothing else"
    );
    let checks = checks(&p, 2, true);
    assert_eq!(checks.len(), 2 + 2 * p.backward.param_grads.len());
    let failed: Vec<String> = checks
        .iter()
        .filter(|c| !c.pass)
        .map(|c| format!("{c:?}"))
        .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// A loss that is the mean of an already reduced value (`reduce_mean` over every element,
/// then `mean`: the PaddleFormers block's loss) under dp: the reduced value is a partial
/// average, and it stays partial through the mean, so the gradients get the 1/N scale.
/// Averaging it before the mean left every rank's backward seeded as if its half were the
/// whole, and the gradients twice the serial ones.
#[test]
fn a_mean_of_a_partial_average_keeps_the_data_parallel_scale() {
    let text = "mesh [2] (dp)
var x: f64[8, 4] input
var w: f64[4, 4] parameter persistable
var y: f64[8, 4] activation
var m: f64[] activation
var loss: f64[] activation
op matmul_v2(X=x, Y=w) -> (Out=y)
op reduce_mean(X=y) -> (Out=m) {dim=[], keep_dim=false}
op mean(X=m) -> (Out=loss) role=loss
shard x [dp, -]
";
    let (plan, _) = shardlab::plan::parse_plan(text).unwrap();
    let p = run_passes(&plan, &PassOptions::default()).unwrap();
    let rank = p.partitioned.ranks[0].program.ops();
    let scales = rank
        .iter()
        .filter(|o| o.ty == shardlab::ir::OpType::Scale)
        .count();
    assert_eq!(scales, 1, "w's gradient is scaled by 1/2");
    let failed: Vec<String> = checks(&p, 2, false)
        .iter()
        .filter(|c| !c.pass)
        .map(|c| format!("{c:?}"))
        .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
