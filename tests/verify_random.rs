//! No false FAILs: random plans (models, 1-, 2- and 3-D meshes, annotations), every
//! optimizer, with and without AMP and clipping, every ZeRO stage and recomputation mode,
//! gradient buckets or not,
//! in f32 and f64, one or two steps, are
//! planned, run on every rank and verified against the serial run, and every check passes.
//!
//! CI runs `PROPTEST_CASES` (200 in `scripts/test.sh`, with a fixed `PROPTEST_RNG_SEED`);
//! `scripts/verify_random.sh` runs 1,000 or more with a random seed.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use proptest::prelude::*;
use shardlab::exec::run::{run_distributed, run_serial, RunOptions};
use shardlab::exec::verify::verify;
use shardlab::ir::DType;
use shardlab::passes::pipeline::run_pipeline;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(200)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]
    #[test]
    fn random_configurations_verify(
        plan in common::random_plan_of(prop::sample::select(vec![DType::F32, DType::F64])),
        optimizer in prop::sample::select(vec!["sgd", "momentum", "adam", "adamw"]),
        amp in any::<bool>(),
        clip in prop::option::of(prop::sample::select(vec![1e-3, 0.5, 10.0])),
        steps in 1usize..3,
        zero in 0u8..4,
        recompute in prop::sample::select(vec![
            shardlab::plan::Recompute::Off,
            shardlab::plan::Recompute::Full,
            shardlab::plan::Recompute::Selective,
        ]),
        bucket in prop::sample::select(vec![0u64, 512, 1 << 20]),
    ) {
        let mut opts = common::with_optimizer(optimizer, amp, clip);
        opts.partition.zero = zero;
        opts.recompute = recompute;
        opts.partition.bucket_bytes = bucket;
        let p = run_pipeline(&plan, &opts).unwrap();
        let run = RunOptions { steps, ..Default::default() };
        let serial = run_serial(&p, &run).unwrap();
        let dist = run_distributed(&p, &run, false).unwrap();
        let checks = verify(&serial, &dist);
        // Everything was compared: a loss per step, a gradient and a parameter per parameter.
        prop_assert_eq!(checks.len(), steps + 2 * p.backward.param_grads.len());
        let failed: Vec<String> = checks.iter().filter(|c| !c.pass).map(|c| format!("{c:?}")).collect();
        let annotations: Vec<String> = plan.annotations.iter()
            .map(|a| format!("{} {:?}", plan.program.var(a.var).name, a.attr.dims)).collect();
        prop_assert!(
            failed.is_empty(),
            "mesh {:?} {:?} {optimizer} amp={amp} clip={clip:?} steps={steps} zero={zero} {recompute:?} bucket={bucket}:\n{}",
            plan.mesh().map(|m| m.to_string()), annotations, failed.join("\n")
        );
    }
}
