//! Stamped rank programs (the first rank built and verified, the others stamped from it with
//! their rank-dependent attributes recomputed) equal programs built and verified rank by
//! rank: every scenario, every preset config with and without AMP, clipping and the Megatron
//! sums, a mesh too large for canonical ring ids, and random plans.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use common::{preset_plan, standard_configs};
use proptest::prelude::*;
use shardlab::ir::DType;
use shardlab::models::scenarios::scenarios;
use shardlab::models::Model;
use shardlab::passes::driver::{run_passes, PassOptions};
use shardlab::passes::partition::Partitioned;
use shardlab::plan::Plan;

/// The partition of `plan` under `opts`, stamped and built rank by rank.
fn both_ways(plan: &Plan, opts: &PassOptions) -> (Partitioned, Partitioned) {
    let mut each = opts.clone();
    each.partition.build_every_rank = true;
    let stamped = run_passes(plan, opts).unwrap().partitioned;
    let built = run_passes(plan, &each).unwrap().partitioned;
    (stamped, built)
}

/// The first difference between the two, if any.
fn difference(stamped: &Partitioned, built: &Partitioned) -> Option<String> {
    if stamped.ranks.len() != built.ranks.len() {
        return Some(format!(
            "{} ranks stamped, {} built",
            stamped.ranks.len(),
            built.ranks.len()
        ));
    }
    for (s, b) in stamped.ranks.iter().zip(&built.ranks) {
        if s.rank != b.rank {
            return Some(format!(
                "rank {} stamped where {} was built",
                s.rank, b.rank
            ));
        }
        let (sp, bp) = (&s.program, &b.program);
        if sp.vars() != bp.vars() {
            return Some(format!("rank {}: variables differ", s.rank));
        }
        if let Some(i) = (0..sp.ops().len().max(bp.ops().len()))
            .find(|&i| sp.ops().get(i).map(|o| &**o) != bp.ops().get(i).map(|o| &**o))
        {
            return Some(format!(
                "rank {} op {i}: stamped {:?}\nbuilt {:?}",
                s.rank,
                sp.ops().get(i),
                bp.ops().get(i)
            ));
        }
        if s.attrs != b.attrs || s.origin != b.origin {
            return Some(format!("rank {}: layouts or origins differ", s.rank));
        }
    }
    (stamped.groups.rings != built.groups.rings).then(|| {
        format!(
            "ring ids differ: stamped {:?}, built {:?}",
            stamped.groups.rings, built.groups.rings
        )
    })
}

fn assert_same(plan: &Plan, opts: &PassOptions, what: &str) {
    let (stamped, built) = both_ways(plan, opts);
    if let Some(d) = difference(&stamped, &built) {
        panic!("{what}: {d}");
    }
}

#[test]
fn every_scenario_stamps_what_building_each_rank_gives() {
    for s in scenarios() {
        let plan = s.plan().unwrap();
        for sums in [false, true] {
            let mut opts = PassOptions::default();
            opts.partition.defer_partial_sums = sums;
            assert_same(&plan, &opts, &format!("{} megatron_sums={sums}", s.name));
        }
    }
}

#[test]
fn every_preset_config_with_amp_and_clipping_stamps_the_same() {
    for model in [Model::Mlp, Model::MlpMse, Model::EmbeddingLm, Model::Gpt] {
        for (name, mesh, shards) in standard_configs(model, 2) {
            let plan = preset_plan(model, 2, mesh, &shards);
            for (amp, clip) in [(false, None), (true, Some(1.0))] {
                let opts = common::with_optimizer("adam", amp, clip);
                assert_same(&plan, &opts, &format!("{model:?} {name} amp={amp}"));
            }
        }
    }
}

/// The vocab-parallel cross-entropy's start index, group, rank and ring, with the table
/// split too (the embedding's start index).
#[test]
fn the_vocab_parallel_loss_and_table_stamp_the_same() {
    let program = Model::EmbeddingLm
        .build(&Model::EmbeddingLm.default_config())
        .unwrap();
    for shards in [
        &["ids=dp,-", "lm_head.w=-,mp"][..],
        &["ids=dp,-", "lm_head.w=-,mp", "wte=mp,-"][..],
    ] {
        let plan = common::plan_with(program.clone(), "2x4:dp,mp", shards);
        assert_same(&plan, &PassOptions::default(), &format!("{shards:?}"));
    }
}

/// 4,096 ranks: ring ids are numbered in rank order in one registry, and the stamped
/// programs must number them the same way.
#[test]
fn a_mesh_without_canonical_ring_ids_stamps_the_same() {
    let mesh = "2x2x2x2x2x2x2x2x2x2x2x2:a,b,c,d,e,f,g,h,i,j,k,l";
    let shards = ["x=a,-".to_string(), "linear_0.w_0=-,b".to_string()];
    let plan = preset_plan(Model::Mlp, 0, mesh, &shards);
    assert_same(&plan, &PassOptions::default(), "4096 ranks");
}

/// The comparison can fail: a rank's program that differs in one attribute value (what a
/// wrong recipe would stamp) is reported.
#[test]
fn a_wrong_rank_attribute_is_a_difference() {
    let plan = preset_plan(
        Model::Mlp,
        0,
        "2x4:dp,mp",
        &standard_configs(Model::Mlp, 0)[2].2,
    );
    let (mut stamped, built) = both_ways(&plan, &PassOptions::default());
    assert_eq!(difference(&stamped, &built), None);
    let r = &mut stamped.ranks[5].program;
    let i = r
        .ops()
        .iter()
        .position(|o| o.attrs.get("group").is_some())
        .expect("a collective");
    r.op_mut(i)
        .unwrap()
        .attrs
        .insert("group".into(), shardlab::ir::Attr::Ints(vec![0, 1]));
    let d = difference(&stamped, &built).expect("a difference");
    assert!(d.starts_with(&format!("rank 5 op {i}:")), "{d}");
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(64)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]
    #[test]
    fn random_plans_stamp_the_same(
        plan in common::random_plan_of(Just(DType::F32)),
        optimizer in prop::sample::select(vec!["sgd", "adam"]),
        amp in any::<bool>(),
        clip in prop::option::of(Just(0.5)),
        sums in any::<bool>(),
    ) {
        let mut opts = common::with_optimizer(optimizer, amp, clip);
        opts.partition.defer_partial_sums = sums;
        let (stamped, built) = both_ways(&plan, &opts);
        let d = difference(&stamped, &built);
        prop_assert!(d.is_none(), "{}", d.unwrap_or_default());
    }
}
