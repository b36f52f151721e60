//! Gradient buckets: the data-parallel all-reduces of several gradients fused into one over
//! a flat buffer — the exact ops, the same bytes in fewer collectives, the latency the cost
//! model saves, and the distributed step still equal to the serial one.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use common::with_optimizer;
use shardlab::cost::device::Topology;
use shardlab::cost::simulate::simulate;
use shardlab::ir::{OpType, Purpose};
use shardlab::models::scenarios::{scenarios, Scenario};
use shardlab::passes::driver::{run_passes, PassOptions, Passes};

fn planned(mib: Option<f64>) -> Passes {
    let plan = Scenario::by_name("gpt_dp_mp").unwrap().plan().unwrap();
    let mut o = PassOptions::default();
    o.partition.bucket_bytes = mib.map_or(0, |m| (m * 1048576.0) as u64);
    run_passes(&plan, &o).unwrap()
}

fn dp(p: &Passes) -> (usize, f64) {
    let e: Vec<_> = p
        .ledger
        .iter()
        .filter(|e| e.rank == 0 && e.purpose == Purpose::DataParallel)
        .collect();
    (e.len(), e.iter().map(|e| e.bytes_per_rank).sum())
}

#[test]
fn one_bucket_fuses_every_gradient_all_reduce() {
    let plain = planned(None);
    let fused = planned(Some(1.0));
    let (n_plain, bytes_plain) = dp(&plain);
    let (n_fused, bytes_fused) = dp(&fused);
    assert_eq!(n_plain, plain.backward.param_grads.len());
    assert_eq!(n_fused, 1);
    assert_eq!(
        bytes_fused, bytes_plain,
        "the same bytes, in one collective"
    );
    // The ops: pack every gradient, all-reduce the buffer over the dp pair, scale it, unpack.
    let r = &fused.partitioned.ranks[0].program;
    let ops: Vec<_> = r
        .ops()
        .iter()
        .filter(|o| o.purpose() == Some(Purpose::DataParallel))
        .collect();
    let types: Vec<&str> = ops.iter().map(|o| o.ty.name()).collect();
    assert_eq!(
        types,
        [
            "coalesce_tensor",
            "all_reduce",
            "scale",
            "uncoalesce_tensor"
        ]
    );
    assert_eq!(
        ops[0].input("Input").len(),
        fused.backward.param_grads.len()
    );
    assert_eq!(ops[1].attr_ints("group"), Some(&[0i64, 4][..]));
    assert_eq!(ops[3].output("Output"), ops[0].input("Input"));
    // Before the optimizer: the first update follows the unpack.
    let unpack = r
        .ops()
        .iter()
        .position(|o| o.ty == OpType::UncoalesceTensor)
        .unwrap();
    let first_update = r.ops().iter().position(|o| o.ty == OpType::Sgd).unwrap();
    assert!(unpack < first_update);
    // A small cap makes several buckets, each at least the cap or the last.
    let (n_small, bytes_small) = dp(&planned(Some(0.01)));
    assert!(n_small > 1 && n_small < n_plain, "{n_small}");
    assert_eq!(bytes_small, bytes_plain);
}

#[test]
fn buckets_save_the_latency_of_the_fused_collectives() {
    // On h100x8x4 the dp pair [0, 4] is inside a node (NVLink, α = 5 µs): a two-rank
    // all-reduce pays 2(n−1)·α = 10 µs of latency, the bandwidth term depends on bytes only.
    let topo = Topology::preset("h100x8x4").unwrap();
    let comm = |p: &Passes| {
        simulate(&p.partitioned.ranks, &topo, topo.default_dtype)
            .unwrap()
            .ranks[0]
            .comm_s
    };
    let plain = planned(None);
    let fused = planned(Some(1.0));
    let saved = comm(&plain) - comm(&fused);
    let want = (dp(&plain).0 - 1) as f64 * 2.0 * 5e-6;
    assert!((saved - want).abs() < 1e-12, "saved {saved}, want {want}");
}

#[test]
fn bucketed_steps_equal_the_serial_step() {
    for scenario in scenarios() {
        let plan = scenario.plan().unwrap();
        for (mib, optimizer, amp, clip) in [
            (1.0, "adam", true, Some(0.5)),
            (0.001, "momentum", false, None),
            (0.01, "sgd", true, None),
        ] {
            let mut o = with_optimizer(optimizer, amp, clip);
            o.partition.bucket_bytes = (mib * 1048576.0) as u64;
            let p = run_passes(&plan, &o).unwrap();
            common::verifies_against_serial(&p, 2)
                .unwrap_or_else(|e| panic!("{} {mib} MiB {optimizer}: {e}", scenario.name));
        }
    }
}
