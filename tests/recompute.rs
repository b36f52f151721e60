//! Activation recomputation: the recomputed ops are real ops in the rank programs, the
//! distributed step still equals the serial one, the memory model shows the saving against
//! Korthikanti et al. 2022's closed forms, and the cost model counts the extra FLOPs and
//! the recomputed tensor-parallel all-reduces.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use shardlab::exec::precision::{in_precision, Precision};

use common::{preset_plan, standard_configs, with_optimizer};
use shardlab::cost::memory::Sizing;
use shardlab::cost::work::{op_work, ElementBytes};
use shardlab::ir::{OpRole, VarId, VarKind};
use shardlab::models::scenarios::scenarios;
use shardlab::models::Model;
use shardlab::passes::driver::{run_passes, PassOptions, Passes};
use shardlab::passes::ledger::Purpose;
use shardlab::plan::Recompute;

fn opts(r: Recompute) -> PassOptions {
    PassOptions {
        recompute: r,
        ..Default::default()
    }
}

/// Activation bytes (bf16) live when the backward starts on the single rank.
fn live_activations(layers: usize, r: Recompute) -> f64 {
    let plan = preset_plan(Model::Gpt, layers, "1:dp", &[]);
    let p = run_passes(&plan, &opts(r)).unwrap();
    let rank = &p.partitioned.ranks[0].program;
    let first_backward = rank
        .ops()
        .iter()
        .position(|o| o.role == OpRole::Backward)
        .unwrap();
    let sizing = Sizing {
        elem: ElementBytes(2.0),
        mixed_precision: false,
        zero: None,
    };
    let live = shardlab::cost::memory::live_ranges(rank);
    (0..rank.vars().len())
        .filter(|&i| {
            rank.vars()[i].kind == VarKind::Activation
                && live[i].is_some_and(|l| l.contains(first_backward))
        })
        .map(|i| sizing.bytes(rank, VarId(i as u32)))
        .sum()
}

#[test]
fn activation_memory_per_layer_against_korthikanti() {
    let cfg = Model::Gpt.default_config();
    let (s, b, h, a) = (
        cfg.seq as f64,
        cfg.batch as f64,
        cfg.hidden as f64,
        cfg.heads as f64,
    );
    let per_layer = |r| live_activations(2, r) - live_activations(1, r);
    // Without recomputation (tests/activations.rs holds it against the paper, tensor
    // parallelism included): sbh(32 + 2as/h) + 8sb, Korthikanti's (34 + 5as/h) less the
    // dropout terms our block has not, plus the layer norms' statistics.
    assert_eq!(
        per_layer(Recompute::Off),
        s * b * h * (32.0 + 2.0 * a * s / h) + 8.0 * s * b
    );
    // Full: only each layer's output is kept, 2sbh bytes, as Korthikanti's "full
    // activation recomputation" (their §4.2).
    assert_eq!(per_layer(Recompute::Full), 2.0 * s * b * h);
    // Selective: the probabilities, the term that grows with s², are gone; the sbh part
    // stays: Korthikanti's selective 34sbh less the two dropout masks.
    assert_eq!(
        per_layer(Recompute::Selective),
        s * b * h * 32.0 + 8.0 * s * b
    );
}

fn flops(p: &Passes) -> f64 {
    let r = &p.partitioned.ranks[0].program;
    r.ops()
        .iter()
        .map(|o| op_work(r, o, ElementBytes(2.0)).flops)
        .sum()
}

#[test]
fn the_cost_model_counts_the_recomputed_flops_and_all_reduces() {
    let (_, mesh, shards) = standard_configs(Model::Gpt, 2).remove(2);
    let plan = preset_plan(Model::Gpt, 2, mesh, &shards);
    let off = run_passes(&plan, &opts(Recompute::Off)).unwrap();
    let full = run_passes(&plan, &opts(Recompute::Full)).unwrap();
    let sel = run_passes(&plan, &opts(Recompute::Selective)).unwrap();
    // Full recomputation re-runs each layer's forward but its last residual add (the
    // checkpoint): the extra FLOPs are those ops' forward FLOPs on the rank.
    let rank = &off.partitioned.ranks[0].program;
    let layer_forward: f64 = rank
        .ops()
        .iter()
        .filter(|o| o.role == OpRole::Forward && o.ty.class() != shardlab::ir::OpClass::Collective)
        .filter(|o| {
            o.all_outputs().next().is_some_and(|v| {
                let n = &rank.var(v).name;
                n.starts_with('h') && !n.ends_with(".res_2")
            })
        })
        .map(|o| op_work(rank, o, ElementBytes(2.0)).flops)
        .sum();
    assert!(layer_forward > 0.0);
    assert!(((flops(&full) - flops(&off)) - layer_forward).abs() <= 1e-9 * layer_forward);
    assert!(flops(&sel) > flops(&off) && flops(&sel) < flops(&full));
    // The row-parallel matmuls' all-reduces run again in backward: 2 more per layer.
    let backward_tp = |p: &Passes| {
        p.ledger
            .iter()
            .filter(|e| {
                e.rank == 0 && e.phase == "backward" && e.purpose == Purpose::TensorParallel
            })
            .count()
    };
    assert_eq!(backward_tp(&full), backward_tp(&off) + 2 * 2);
    assert_eq!(backward_tp(&sel), backward_tp(&off));
    // The copies are real ops of the rank programs, in backward, writing @RECOMPUTE.
    let copies = |p: &Passes| {
        let r = &p.partitioned.ranks[0].program;
        r.ops()
            .iter()
            .filter(|o| {
                o.role == OpRole::Backward
                    && o.all_outputs()
                        .any(|v| r.var(v).name.ends_with("@RECOMPUTE"))
            })
            .count()
    };
    assert_eq!(copies(&off), 0);
    assert_eq!(copies(&sel), 3 * 2, "scores, scaled, softmax per layer");
    assert!(copies(&full) > copies(&sel));
}

#[test]
fn recomputed_steps_equal_the_serial_step() {
    for scenario in scenarios() {
        let plan = scenario.plan().unwrap();
        for (r, zero, optimizer) in [
            (Recompute::Full, 0, "adam"),
            (Recompute::Selective, 0, "sgd"),
            (Recompute::Full, 3, "momentum"),
        ] {
            let mut o = with_optimizer(optimizer, true, Some(0.5));
            o.recompute = r;
            o.partition.zero = zero;
            let p = run_passes(&plan, &o).unwrap();
            // In f64, as `run` verifies: in f32 the bounds after an AMP step with clipping
            // are infinite, and such a check cannot fail (docs/verification.md).
            let p = in_precision(&p, Precision::F64);
            common::verifies_against_serial(&p, 2)
                .unwrap_or_else(|e| panic!("{} {r:?} zero={zero}: {e}", scenario.name));
        }
    }
}

/// Recomputation under every pipeline schedule, a layer cut across stages and chunks
/// included (one layer on 2 stages × 2 chunks): each stage recomputes its own part, and the
/// step equals the serial one. Before the segments were cut at stages, the interleaved
/// schedule with full recomputation deadlocked (a stage waited for copies another stage's
/// backward job made).
#[test]
fn recomputation_under_every_schedule_equals_the_serial_step() {
    use shardlab::plan::ScheduleKind;
    for layers in [1, 2] {
        for (schedule, chunks) in [
            (ScheduleKind::FThenB, 1),
            (ScheduleKind::OneFOneB, 1),
            (ScheduleKind::Vpp, 2),
            (ScheduleKind::ZbH1, 1),
        ] {
            for r in [Recompute::Full, Recompute::Selective] {
                let mut plan = preset_plan(Model::Gpt, layers, "2:pp", &[]);
                plan.options.schedule = schedule;
                plan.options.micro_batches = 2;
                plan.options.chunks = chunks;
                plan.options.recompute = r;
                let o = PassOptions::from_plan(&plan.options);
                let p = run_passes(&plan, &o)
                    .unwrap_or_else(|e| panic!("{layers} layers {schedule:?} {r:?}: {e}"));
                // A copy reads other copies only from its own stage and chunk.
                let prog = &p.full.program;
                let mut writer = std::collections::HashMap::new();
                let mut copies = 0;
                for (op, attr) in prog.ops().iter().zip(&p.full.ops) {
                    for v in op.all_inputs() {
                        if let Some(&(mesh, chunk)) = writer.get(&v) {
                            assert_eq!(
                                (attr.mesh, attr.chunk_id),
                                (mesh, chunk),
                                "{layers} layers {schedule:?} {r:?}: `{}` crosses stages",
                                prog.var(v).name
                            );
                        }
                    }
                    for v in op.all_outputs() {
                        if prog.var(v).name.ends_with("@RECOMPUTE") {
                            copies += 1;
                            if op.role == OpRole::Backward && op.all_inputs().all(|i| i != v) {
                                writer.insert(v, (attr.mesh, attr.chunk_id));
                            }
                        }
                    }
                }
                assert!(copies > 0, "{layers} layers {schedule:?} {r:?}: no copies");
                common::verifies_against_serial(&p, 2)
                    .unwrap_or_else(|e| panic!("{layers} layers {schedule:?} {r:?}: {e}"));
            }
        }
    }
}
