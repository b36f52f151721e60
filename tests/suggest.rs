//! The auto-planner (`suggest`): its optimum against brute force over the unpruned space,
//! and its answers against what the field knows, asserted from the cost terms.
#![cfg(not(target_arch = "wasm32"))]

use shardlab::cost::device::Topology;
use shardlab::cost::estimate::{estimate, CostOptions};
use shardlab::models::{Model, ModelConfig};
use shardlab::passes::pipeline::{run_pipeline, PipelineOptions};
use shardlab::plan::{OptimizerKind, PlanOptions, Recompute, ScheduleKind};
use shardlab::suggest::evaluate::{peak_bytes, Problem};
use shardlab::suggest::reason::tensor_parallel_inside_node;
use shardlab::suggest::space::{Axis, Candidate, MeshShape};
use shardlab::suggest::{brute_force, candidate_plan, suggest, Suggestion};

fn problem(
    model: Model,
    config: ModelConfig,
    topology: &str,
    devices: usize,
    budget: f64,
) -> Problem {
    let topology = Topology::preset(topology).expect("preset");
    Problem {
        model,
        config,
        base: PlanOptions {
            optimizer: OptimizerKind::Adam,
            ..PlanOptions::default()
        },
        dtype: topology.default_dtype,
        topology,
        devices,
        budget_bytes: budget,
    }
}

fn run(p: &Problem) -> Suggestion {
    suggest(p.clone(), 5, None, |_, _| {}).expect("a plan is found")
}

/// GPT-3 1.3B's shape (Brown et al. 2020, table 2.1): 24 layers, width 2048, 16 heads,
/// sequence 2048, GPT-2's vocabulary padded to 50304, global batch 512.
fn gpt3_1_3b() -> ModelConfig {
    ModelConfig {
        layers: 24,
        hidden: 2048,
        heads: 16,
        seq: 2048,
        vocab: 50304,
        batch: 512,
        ..Model::EmbeddingLm.default_config()
    }
}

/// A plan's step time and peak by the same path as `shardlab cost`.
fn priced(p: &Problem, c: &Candidate) -> (f64, f64) {
    let plan = candidate_plan(p, c, p.config.layers).expect("plan builds");
    let pipe = run_pipeline(&plan, &PipelineOptions::from_plan(&plan.options)).expect("plans");
    let e = estimate(&pipe, &p.topology, p.dtype, CostOptions::default()).expect("costs");
    (e.step_s(), peak_bytes(&e))
}

fn plain(mesh: Vec<(Axis, usize)>, micro_batches: usize) -> Candidate {
    Candidate {
        mesh: MeshShape { axes: mesh },
        vocab_parallel: true,
        megatron_sums: true,
        zero: 0,
        micro_batches,
        schedule: if micro_batches > 1 {
            ScheduleKind::OneFOneB
        } else {
            ScheduleKind::FThenB
        },
        recompute: Recompute::Off,
    }
}

fn winner(s: &Suggestion) -> &Candidate {
    s.winner
        .candidate
        .as_ref()
        .expect("the winner is a candidate")
}

#[test]
fn the_search_finds_the_brute_force_optimum_on_small_cases() {
    let small = ModelConfig {
        layers: 4,
        batch: 8,
        ..Model::Gpt.default_config()
    };
    let ample = problem(Model::Gpt, small.clone(), "h100x8x2", 4, 80e9);
    // Tight: below the peak of every plan without micro-batches or recomputation on 1
    // device, so escalation and ZeRO matter.
    let rows = brute_force(&ample);
    assert!(
        rows.len() > 200,
        "the unpruned space has {} points",
        rows.len()
    );
    let peaks: Vec<f64> = rows.iter().map(|r| r.terms.peak_bytes).collect();
    let lo = peaks.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = peaks.iter().copied().fold(0.0, f64::max);
    let tight = Problem {
        budget_bytes: lo + 0.3 * (hi - lo),
        ..ample.clone()
    };
    for p in [ample, tight] {
        let best = brute_force(&p)
            .into_iter()
            .find(|r| r.fits)
            .expect("something fits");
        let s = run(&p);
        assert!(
            (s.winner.terms.step_s - best.terms.step_s).abs() <= 1e-12 * best.terms.step_s,
            "search {:?} at {} s; brute force {:?} at {} s",
            s.winner.candidate,
            s.winner.terms.step_s,
            best.candidate,
            best.terms.step_s
        );
        assert!(s.winner.terms.peak_bytes <= p.budget_bytes);
    }
}

#[test]
fn one_node_gpt3_1_3b_uses_data_parallelism_and_beats_the_pure_plans() {
    let p = problem(Model::EmbeddingLm, gpt3_1_3b(), "h100x8", 8, 80e9);
    let s = run(&p);
    let w = winner(&s);
    // The model fits (1.3B × 16 bytes of Adam state ≈ 21 GB) and the batch is large: data
    // parallelism, whose one gradient sync per step costs less than Megatron's four
    // all-reduces per layer per micro-batch (Narayanan et al. 2021: tensor parallelism is
    // for models that do not fit).
    assert_eq!(w.mesh.size(Axis::Mp), 1, "{}", s.reason);
    assert!(tensor_parallel_inside_node(&p.topology, w));
    // No worse than pure data parallelism or pure Megatron, priced by the same model, at
    // the fewest micro-batches that fit.
    for mesh in [vec![(Axis::Dp, 8)], vec![(Axis::Mp, 8)]] {
        let mut best = f64::INFINITY;
        for m in [1, 2, 4, 8, 16, 32, 64] {
            let (step, peak) = priced(&p, &plain(mesh.clone(), m));
            if peak <= p.budget_bytes {
                best = step;
                break;
            }
        }
        assert!(s.winner.terms.step_s <= best, "{mesh:?}: {best} s");
    }
    // The reason names the term that decided, from the numbers.
    assert!(s.reason.contains("less communication"), "{}", s.reason);
}

#[test]
fn across_nodes_tensor_parallelism_stays_inside_a_node() {
    let p = problem(Model::EmbeddingLm, gpt3_1_3b(), "h100x8x4", 32, 80e9);
    let s = run(&p);
    for row in &s.table {
        let c = row.candidate.as_ref().expect("candidate");
        assert!(
            tensor_parallel_inside_node(&p.topology, c),
            "{:?} puts tensor parallelism across nodes",
            c.mesh
        );
    }
}

#[test]
fn a_budget_the_replicated_optimizer_state_exceeds_makes_the_winner_shard_it() {
    let cfg = gpt3_1_3b();
    let ample = problem(Model::EmbeddingLm, cfg, "h100x8", 8, 80e9);
    // Pure data parallelism with replicated Adam state, at the most micro-batches: its
    // activations are smallest there, so its peak is mostly parameters and state.
    let (_, replicated) = priced(&ample, &plain(vec![(Axis::Dp, 8)], 64));
    let p = Problem {
        budget_bytes: replicated * 0.8,
        ..ample
    };
    let s = run(&p);
    let w = winner(&s);
    assert!(
        w.zero >= 1 || w.mesh.size(Axis::Pp) > 1 || w.mesh.size(Axis::Mp) > 1,
        "{:?} does not shard the optimizer state",
        w
    );
    assert!(s.winner.terms.peak_bytes <= p.budget_bytes);
}

#[test]
fn the_users_plan_is_priced_beside_and_never_beats_the_winner() {
    let cfg = ModelConfig {
        layers: 4,
        batch: 16,
        hidden: 256,
        seq: 64,
        ..Model::Gpt.default_config()
    };
    let p = problem(Model::Gpt, cfg, "h100x8", 8, 80e9);
    let mine = candidate_plan(&p, &plain(vec![(Axis::Dp, 2), (Axis::Mp, 4)], 1), 4).expect("plan");
    let s = suggest(p.clone(), 3, Some(mine), |_, _| {}).expect("found");
    let m = s.mine.as_ref().expect("priced");
    assert!(s.winner.terms.step_s <= m.terms.step_s);
    assert!(
        s.reason.contains("your plan") || s.reason.contains("Your plan"),
        "{}",
        s.reason
    );
    // The winner's plan prices to the winner's figure.
    let pipe = run_pipeline(&s.plan, &PipelineOptions::from_plan(&s.plan.options)).expect("plans");
    let e = estimate(&pipe, &p.topology, p.dtype, CostOptions::default()).expect("costs");
    assert_eq!(e.step_s(), s.winner.terms.step_s);
}
