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
use shardlab::passes::driver::run_passes;

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
        let p = run_passes(&plan, &opts).unwrap();
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

/// `plan` with a `pp` axis of 2 in front of its mesh: every annotation keeps its axes (one
/// index later), and the stages are split evenly.
fn with_pp(plan: &shardlab::plan::Plan) -> Option<shardlab::plan::Plan> {
    use shardlab::dist::{DimAxes, MeshAxis, ProcessMesh};
    let old = plan.mesh()?;
    let mut shape = vec![2];
    shape.extend_from_slice(old.shape());
    let mut names = vec!["pp".to_string()];
    names.extend(old.dim_names().iter().cloned());
    let ids: Vec<u32> = (0..shape.iter().product::<usize>() as u32).collect();
    let mesh = ProcessMesh::new(shape, ids, names).ok()?;
    let shift = |a: MeshAxis| MeshAxis::new(a.index() + 1);
    let mut out = plan.clone();
    for ann in &mut out.annotations {
        for d in ann.attr.layout.dims.iter_mut() {
            *d = DimAxes::from_axes(d.iter().map(|&a| shift(a)).collect::<Option<Vec<_>>>()?)?;
        }
        let partial = ann.attr.layout.partial.to_vec();
        ann.attr.layout.partial = Default::default();
        for (a, r) in partial {
            ann.attr.layout.partial.set(shift(a)?, r);
        }
    }
    out.set_mesh(std::sync::Arc::new(mesh));
    Some(out)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases() / 4 + 1, ..ProptestConfig::default() })]
    /// Random plans on two pipeline stages: every schedule, one to four micro-batches (3: a seed
    /// of 1/3, which f32 rounds), AMP,
    /// clipping, ZeRO stages inside each stage and recomputation; the distributed step equals the serial one.
    #[test]
    fn random_pipelined_configurations_verify(
        plan in common::random_plan_of(prop::sample::select(vec![DType::F64])),
        schedule in 0usize..5,
        micro_batches in prop::sample::select(vec![1usize, 2, 3, 4]),
        amp in any::<bool>(),
        clip in prop::option::of(prop::sample::select(vec![1e-3, 10.0])),
        zero in 0u8..4,
        recompute in prop::sample::select(vec![
            shardlab::plan::Recompute::Off,
            shardlab::plan::Recompute::Full,
            shardlab::plan::Recompute::Selective,
        ]),
    ) {
        let Some(mut plan) = with_pp(&plan) else { return Ok(()); };
        let kind = shardlab::plan::ScheduleKind::ALL[schedule];
        plan.options.schedule = kind;
        plan.options.micro_batches = micro_batches;
        plan.options.chunks = if kind == shardlab::plan::ScheduleKind::Vpp { 2 } else { 1 };
        plan.options.amp = amp;
        plan.options.clip_norm = clip;
        plan.options.zero = zero;
        plan.options.recompute = recompute;
        plan.options.optimizer = shardlab::plan::OptimizerKind::Adam;
        let opts = shardlab::passes::driver::PassOptions::from_plan(&plan.options);
        // Invalid combinations (too few micro-batches or layers for the schedule, batches
        // that micro-batches do not divide) are errors, named; the rest must verify.
        let p = match run_passes(&plan, &opts) {
            Ok(p) => p,
            Err(e) => {
                let e = e.to_string();
                prop_assert!(e.contains("micro-batches") || e.contains("stage") || e.contains("divide"), "{e}");
                return Ok(());
            }
        };
        let run = RunOptions::default();
        let serial = run_serial(&p, &run).unwrap();
        let dist = run_distributed(&p, &run, false);
        prop_assert!(dist.is_ok(), "{}\n{:?}", plan, dist.as_ref().err());
        let dist = dist.unwrap();
        let checks = verify(&serial, &dist);
        prop_assert_eq!(checks.len(), 1 + 2 * p.backward.param_grads.len());
        let failed: Vec<String> = checks.iter().filter(|c| !c.pass).map(|c| format!("{c:?}")).collect();
        prop_assert!(failed.is_empty(), "{}\n{}", plan, failed.join("\n"));
    }
}
