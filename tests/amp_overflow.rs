//! AMP's `found_inf` all-reduce is caught when deleted: a loss scale chosen from the
//! serial gradients makes exactly one tensor-parallel shard overflow, so the ranks' local
//! flags disagree and only the synchronised flag makes every rank skip the step as the
//! serial run does. (On ordinary data nothing overflows, every local flag is already 0,
//! and deleting the sync changes no value: `tests/mutation.rs` checks that bit for bit.)
#![cfg(not(target_arch = "wasm32"))]

mod common;

use common::{plan_with, standard_configs, with_optimizer};
use shardlab::exec::run::{run_distributed, run_serial, Log, RunOptions};
use shardlab::exec::verify::verify;
use shardlab::ir::{DType, OpType};
use shardlab::models::{Model, ModelConfig};
use shardlab::passes::driver::{run_passes, Passes};

/// JAX's bias-free mlp with W1 column- and W2 row-parallel on `4:mp`, in f64 with AMP
/// and SGD: every parameter is sharded, so each rank's gradients are its own.
fn mp_mlp() -> Passes {
    let cfg = ModelConfig {
        dtype: DType::F64,
        ..Model::MlpMse.default_config()
    };
    let (_, mesh, shards) = standard_configs(Model::MlpMse, 1)
        .into_iter()
        .find(|(name, _, _)| *name == "mp")
        .unwrap();
    let plan = plan_with(Model::MlpMse.build(&cfg).unwrap(), mesh, &shards);
    run_passes(&plan, &with_optimizer("sgd", true, None)).unwrap()
}

/// The largest |gradient| each of the 4 mp ranks holds: its columns of `params.W1` and
/// its rows of `params.W2`.
fn shard_maxima(serial: &Log) -> [f64; 4] {
    let mut per_rank = [0.0f64; 4];
    for (name, by_columns) in [("params.W1", true), ("params.W2", false)] {
        let t = serial
            .grads
            .iter()
            .find(|g| g.name == name)
            .and_then(|g| g.value())
            .unwrap();
        let (rows, cols) = (t.shape[0], t.shape[1]);
        for (i, v) in t.to_f64().iter().enumerate() {
            let k = if by_columns {
                (i % cols) / (cols / 4)
            } else {
                (i / cols) / (rows / 4)
            };
            per_rank[k] = per_rank[k].max(v.abs());
        }
    }
    per_rank
}

fn passes(p: &Passes, opts: &RunOptions, serial: &Log) -> bool {
    run_distributed(p, opts, false).is_ok_and(|d| verify(serial, &d).iter().all(|c| c.pass))
}

#[test]
fn deleting_the_amp_flag_sync_is_caught_when_one_shard_overflows() {
    let p = mp_mlp();
    let mut opts = RunOptions::default();
    opts.init.loss_scale = 1.0;
    let per_rank = shard_maxima(&run_serial(&p, &opts).unwrap());
    let top = (0..4)
        .max_by(|&a, &b| per_rank[a].total_cmp(&per_rank[b]))
        .unwrap();
    let next = (0..4)
        .filter(|&k| k != top)
        .map(|k| per_rank[k])
        .fold(0.0, f64::max);
    // The scaled backward is the unscaled one times s up to rounding (about 1e-13 relative
    // in f64), so a gap of 0.1% separates the shards reliably.
    assert!(
        per_rank[top] > 1.001 * next,
        "rank {top}'s largest gradient {} is not clear of the rest ({next})",
        per_rank[top]
    );
    // Scaled by s, only rank `top`'s shard passes f64::MAX.
    opts.init.loss_scale = f64::MAX / (per_rank[top] * next).sqrt();
    let serial = run_serial(&p, &opts).unwrap();
    // The serial step overflowed and was skipped: its gradients are zeroed, and the
    // verification bounds of a skipped step are exact (they were NaN before).
    assert!(serial
        .grads
        .iter()
        .all(|g| g.value().unwrap().to_f64().iter().all(|&v| v == 0.0)));
    assert!(passes(&p, &opts, &serial), "the unmutated plan verifies");
    for rank in 0..4 {
        let mut m = p.clone();
        let prog = &mut m.partitioned.ranks[rank].program;
        let k = prog
            .ops()
            .iter()
            .position(|o| {
                o.ty == OpType::AllReduce
                    && o.namescope == "/auto_parallel/amp_flag_synchronization"
            })
            .unwrap();
        prog.remove_op(k);
        assert!(
            !passes(&m, &opts, &serial),
            "deleting rank {rank}'s found_inf all-reduce passed"
        );
    }
}
