//! The structural check of `exec::sync_check`: no unmutated plan fails it, and a gradient
//! synchronised differently on one rank is named with its ranks and what each runs.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use common::plan_with;
use shardlab::exec::sync_check::gradient_sync_checks;
use shardlab::ir::{OpType, Purpose};
use shardlab::models::scenarios::scenarios;
use shardlab::models::{Model, ModelConfig};
use shardlab::passes::driver::{run_passes, PassOptions, Passes};

fn zero3() -> Passes {
    let cfg = ModelConfig {
        layers: 1,
        ..Model::Gpt.default_config()
    };
    let mut plan = plan_with(Model::Gpt.build(&cfg).unwrap(), "4:dp", &["x=dp,-,-"]);
    plan.options.zero = 3;
    run_passes(&plan, &PassOptions::from_plan(&plan.options)).unwrap()
}

#[test]
fn unmutated_plans_are_consistent() {
    for s in scenarios() {
        let plan = plan_with(s.program(&s.config()).unwrap(), s.mesh, &s.shards);
        let p = run_passes(&plan, &PassOptions::default()).unwrap();
        assert_eq!(gradient_sync_checks(&p), vec![], "{}", s.name);
    }
    assert_eq!(gradient_sync_checks(&zero3()), vec![]);
}

#[test]
fn a_gradient_scaled_on_all_but_one_rank_is_named() {
    let mut p = zero3();
    let program = &mut p.partitioned.ranks[2].program;
    let k = program
        .ops()
        .iter()
        .position(|o| {
            o.ty == OpType::Scale
                && o.purpose() == Some(Purpose::Sharding)
                && program
                    .var(o.input("X")[0])
                    .name
                    .starts_with("h0.attn.k.b@GRAD")
        })
        .unwrap();
    program.remove_op(k);
    let checks = gradient_sync_checks(&p);
    assert_eq!(checks.len(), 1);
    assert_eq!(checks[0].tensor, "h0.attn.k.b@GRAD synchronisation");
    assert!(!checks[0].pass);
    assert_eq!(
        checks[0].note.as_deref(),
        Some(
            "the ranks synchronise `h0.attn.k.b@GRAD` differently: rank 2 runs \
             reduce_scatter(SUM, 4 ranks), where ranks 0-1, 3 run reduce_scatter(SUM, 4 \
             ranks), scale(0.25)"
        )
    );
}
