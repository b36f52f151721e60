//! Expert parallelism (`--parallel dp=N,ep=M`): the experts' stacked weights split over an
//! `ep` axis folded onto the data-parallel ranks, the dispatched tokens moved to their
//! experts by an all-to-all and back by another. Held to the field's closed forms (2
//! all-to-alls forward and 2 backward per MoE layer, each of `(ep−1)/ep` of the local
//! dispatched tensor), run distributed equal to serial on every replica, and each
//! all-to-all's deletion caught.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use common::{passes_under, verifies_against_serial};
use shardlab::ir::{DType, OpRole, OpType};
use shardlab::models::moe::capacity;
use shardlab::models::{Model, ModelConfig};
use shardlab::passes::ledger::ledger;
use shardlab::session::{Action, Session};

/// A Mixtral in miniature: 2 layers, 4 experts, top-2, every sequence a routing group.
fn mixtral() -> ModelConfig {
    ModelConfig {
        batch: 8,
        seq: 8,
        hidden: 32,
        heads: 4,
        kv_heads: 2,
        ffn: 16,
        experts: 4,
        top_k: 2,
        layers: 2,
        vocab: 64,
        dtype: DType::F64,
        ..Model::Llama.default_config()
    }
}

/// (spec, ep, data-parallel ranks).
const SPECS: [(&str, usize, usize); 3] = [
    ("dp=4,ep=4", 4, 4),
    ("dp=8,ep=4", 4, 8),
    ("dp=4,ep=2,tp=2", 2, 4),
];

#[test]
fn two_all_to_alls_each_way_per_moe_layer_of_the_closed_forms_bytes() {
    let cfg = mixtral();
    let program = Model::Llama.build(&cfg).unwrap();
    // The dispatched tensor [experts, batch · capacity, hidden], f64.
    let slots = cfg.batch * capacity(cfg.seq, cfg.top_k, cfg.experts);
    let dispatched = (cfg.experts * slots * cfg.hidden * 8) as f64;
    for (spec, ep, dp) in SPECS {
        let (p, _) = passes_under(&program, spec);
        let entries = ledger(&p.partitioned);
        let mut by_phase = std::collections::BTreeMap::new();
        let moe = |e: &&shardlab::passes::ledger::Entry| e.tensor.contains(".moe.");
        for e in entries
            .iter()
            .filter(|e| e.rank == 0 && e.kind == "all_to_all")
            .filter(moe)
        {
            *by_phase.entry(e.phase).or_insert(0) += 1;
            assert_eq!(e.group.len(), ep, "{spec}: {e:?}");
            // Rank 0's share of the tokens' slots, (ep−1)/ep of it leaving the rank.
            let want = dispatched / dp as f64 * (ep - 1) as f64 / ep as f64;
            assert_eq!(e.bytes_per_rank, want, "{spec}: {} {e:?}", e.tensor);
        }
        let per_layer = 2 * cfg.layers;
        assert_eq!(
            by_phase.get("forward").copied().unwrap_or(0),
            per_layer,
            "{spec}: {by_phase:?}"
        );
        assert_eq!(
            by_phase.get("backward").copied().unwrap_or(0),
            per_layer,
            "{spec}: {by_phase:?}"
        );
        // The dense weights' gradients: one all-reduce over every data-parallel rank; the
        // experts': over the ranks holding the same experts (none when ep = dp).
        let rank0 = p.partitioned.ranks[0].program.clone();
        let reduce_of = |param: &str| -> Vec<usize> {
            let grad = format!("{param}@GRAD");
            rank0
                .ops()
                .iter()
                .filter(|o| {
                    o.ty == OpType::AllReduce
                        && o.role == OpRole::Backward
                        && o.purpose() == Some(shardlab::ir::Purpose::DataParallel)
                        && o.all_inputs().any(|v| *rank0.var(v).name == *grad)
                })
                .map(|o| o.attr_ints("group").map_or(0, |g| g.len()))
                .collect()
        };
        assert_eq!(reduce_of("h0.moe.router.w"), vec![dp], "{spec}");
        let experts = if dp / ep > 1 { vec![dp / ep] } else { vec![] };
        assert_eq!(reduce_of("h0.moe.experts.up.w"), experts, "{spec}");
    }
}

#[test]
fn expert_parallel_steps_equal_the_serial_step_on_every_replica() {
    let program = Model::Llama.build(&mixtral()).unwrap();
    // With `sp` the tokens reach the MoE split over `tp` inside `ep` (docs/moe.md): the
    // dispatch's tokens move by all-gathers and slices instead, and must still be exact.
    let specs = SPECS.iter().map(|s| s.0).chain(["dp=2,ep=2,tp=2,sp"]);
    for spec in specs {
        let (p, _) = passes_under(&program, spec);
        // One step: after an update, a token's k-th and (k+1)-th gates may lie within
        // their error bound, and the bound then covers any routing (docs/moe.md).
        verifies_against_serial(&p, 1).unwrap_or_else(|e| panic!("{spec}: {e}"));
    }
}

#[test]
fn deleting_either_all_to_all_is_caught() {
    let program = Model::Llama.build(&mixtral()).unwrap();
    let strategy = shardlab::plan::parallel::Parallel::parse("dp=4,ep=4").unwrap();
    let plan = common::plan_with(
        program.clone(),
        &strategy.mesh_spec(),
        &strategy.shard_specs(&program),
    );
    let s = Session::from_plan("mixtral", plan).reduce(Action::SetBreakMode(true));
    // 2 layers × 2 each way.
    assert_eq!(common::every_deletion_caught(&s, "all_to_all"), 8);
}

#[test]
fn ep_must_divide_the_data_parallel_ranks() {
    let err = shardlab::plan::parallel::Parallel::parse("dp=2,ep=4").unwrap_err();
    assert!(
        err.to_string().starts_with("ep=4 must divide dp=2"),
        "{err}"
    );
}
