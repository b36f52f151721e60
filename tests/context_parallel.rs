//! Context parallelism (`--parallel cp=N`): the sequence of every op split over a `cp`
//! axis, attention through `flash_attn` as ring attention (K/V blocks around the ring, the
//! zig-zag order balancing the causal mask) or Ulysses (all-to-alls from sequence to heads
//! and back). Held to the field's closed forms (Ulysses: 4 all-to-alls per attention each
//! way; ring: P−1 K/V passes forward, P−1 backward with the gradients and one pass of the
//! gradients home), run distributed equal to serial on every replica, each collective's
//! deletion caught, the zig-zag balance exact, and the crossover of bytes per link.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use common::verifies_against_serial;
use shardlab::cost::work::{op_work, ElementBytes};
use shardlab::ir::{DType, OpType, Program};
use shardlab::models::{Model, ModelConfig};
use shardlab::passes::driver::{run_passes, PassOptions, Passes};
use shardlab::passes::ledger::ledger;
use shardlab::plan::parallel::Parallel;
use shardlab::session::{Action, Session};

/// A Llama in miniature: 8 query heads sharing 4 key/value heads, a sequence of 16.
fn llama() -> ModelConfig {
    ModelConfig {
        batch: 2,
        seq: 16,
        hidden: 64,
        heads: 8,
        kv_heads: 4,
        ffn: 32,
        layers: 2,
        vocab: 64,
        dtype: DType::F64,
        ..Model::Llama.default_config()
    }
}

/// The plan `spec` makes of `program`, as the CLI makes it.
fn plan_under(program: &Program, spec: &str) -> shardlab::plan::Plan {
    let strategy = Parallel::parse(spec).unwrap();
    let program = strategy.prepare(program);
    let mut plan = common::plan_with(
        program.clone(),
        &strategy.mesh_spec(),
        &strategy.shard_specs(&program),
    );
    strategy.set_options(&mut plan.options);
    plan
}

fn passes(program: &Program, spec: &str) -> Passes {
    let plan = plan_under(program, spec);
    run_passes(&plan, &PassOptions::from_plan(&plan.options)).unwrap()
}

/// Rank 0's ledger entries of `kind` whose tensor is attention's, by phase.
fn counted(p: &Passes, kind: &str) -> Vec<(&'static str, Vec<u32>, f64)> {
    ledger(&p.partitioned)
        .into_iter()
        .filter(|e| e.rank == 0 && e.kind == kind && e.tensor.contains(".attn."))
        .map(|e| (e.phase, e.group.clone(), e.bytes_per_rank))
        .collect()
}

#[test]
fn ulysses_moves_q_k_v_and_the_output_by_four_all_to_alls_each_way() {
    let cfg = llama();
    let program = Model::Llama.build(&cfg).unwrap();
    let d = cfg.hidden / cfg.heads;
    for (spec, cp, tp) in [("cp=2", 2, 1), ("cp=4", 4, 1), ("dp=2,cp=2,tp=2", 2, 2)] {
        let spec = format!("{spec},cp_mode=ulysses");
        let p = passes(&program, &spec);
        let entries = counted(&p, "all_to_all");
        let dp = if spec.starts_with("dp=2") { 2 } else { 1 };
        // Each rank's block before the move: [b/dp, s/cp, heads/tp, d], 8-byte elements.
        let local = |heads: usize| (cfg.batch / dp * cfg.seq / cp * heads / tp * d * 8) as f64;
        let moved = |heads: usize| local(heads) * (cp - 1) as f64 / cp as f64;
        let mut want = vec![
            moved(cfg.heads),
            moved(cfg.kv_heads),
            moved(cfg.kv_heads),
            moved(cfg.heads),
        ];
        want.sort_by(f64::total_cmp);
        for phase in ["forward", "backward"] {
            let mut got: Vec<f64> = entries
                .iter()
                .filter(|e| e.0 == phase)
                .map(|e| e.2)
                .collect();
            assert_eq!(got.len(), 4 * cfg.layers, "{spec} {phase}: {entries:?}");
            got.sort_by(f64::total_cmp);
            let per_layer: Vec<f64> = got.chunks(cfg.layers).map(|c| c[0]).collect();
            assert_eq!(per_layer, want, "{spec} {phase}");
            assert!(
                entries.iter().all(|e| e.1.len() == cp),
                "{spec}: groups {entries:?}"
            );
        }
        assert!(counted(&p, "ppermute").is_empty(), "{spec}");
    }
}

#[test]
fn ring_attention_passes_k_and_v_p_minus_one_times_each_way() {
    let cfg = llama();
    let program = Model::Llama.build(&cfg).unwrap();
    let d = cfg.hidden / cfg.heads;
    for (spec, cp) in [("cp=2", 2), ("cp=4", 4), ("dp=2,cp=4", 4), ("cp=8", 8)] {
        let spec = format!("{spec},cp_mode=ring");
        let p = passes(&program, &spec);
        let dp = if spec.starts_with("dp=2") { 2 } else { 1 };
        // One K (or V, or a gradient) block: [b/dp, s/cp, kv_heads, d].
        let block = (cfg.batch / dp * cfg.seq / cp * cfg.kv_heads * d * 8) as f64;
        let entries = counted(&p, "ppermute");
        let of = |phase: &str, bytes: f64| {
            entries
                .iter()
                .filter(|e| e.0 == phase && e.2 == bytes)
                .count()
        };
        assert_eq!(
            of("forward", 2.0 * block),
            (cp - 1) * cfg.layers,
            "{spec}: {entries:?}"
        );
        assert_eq!(
            of("backward", 4.0 * block),
            (cp - 1) * cfg.layers,
            "{spec}: {entries:?}"
        );
        assert_eq!(
            of("backward", 2.0 * block),
            cfg.layers,
            "{spec}: the pass home"
        );
        assert_eq!(
            entries.len(),
            (2 * cp - 1) * cfg.layers,
            "{spec}: {entries:?}"
        );
        assert!(entries.iter().all(|e| e.1.len() == cp), "{spec}");
        // No other communication of attention's tensors: no all-gather of K and V.
        assert!(counted(&p, "all_gather").is_empty(), "{spec}");
        assert!(counted(&p, "all_to_all").is_empty(), "{spec}");
    }
}

#[test]
fn context_parallel_steps_equal_the_serial_step_on_every_replica() {
    let program = Model::Llama.build(&llama()).unwrap();
    let specs = [
        "cp=2,cp_mode=ring",
        "cp=4,cp_mode=ring",
        "cp=8,cp_mode=ring",
        "cp=4,cp_mode=ring_contiguous",
        "dp=2,cp=2,tp=2,cp_mode=ring",
        "cp=2,tp=2,sp,cp_mode=ring",
        "cp=2,cp_mode=ulysses",
        "cp=4,cp_mode=ulysses",
        "dp=2,cp=2,tp=2,cp_mode=ulysses",
        "cp=2,pp=2,cp_mode=ring",
        "cp=2,pp=2,cp_mode=ulysses",
    ];
    for spec in specs {
        verifies_against_serial(&passes(&program, spec), 2)
            .unwrap_or_else(|e| panic!("{spec}: {e}"));
    }
    // GPT: learned positions, a tied head, no grouped heads.
    let gpt = Model::Gpt.build(&ModelConfig {
        seq: 16,
        dtype: DType::F64,
        ..Model::Gpt.default_config()
    });
    let gpt = gpt.unwrap();
    for spec in ["dp=2,cp=4,cp_mode=ring", "cp=2,tp=2,cp_mode=ulysses"] {
        verifies_against_serial(&passes(&gpt, spec), 2)
            .unwrap_or_else(|e| panic!("gpt {spec}: {e}"));
    }
}

/// Sequence parallelism inside context parallelism splits each cp rank's chunk over tp
/// (`cp+tp`, Megatron's order): its gathers and reduce-scatters run over the tp group only,
/// and nothing gathers the sequence over cp (which would undo context parallelism: at
/// 128K tokens on 16 cp ranks such an all-gather cost 90 ms per layer).
#[test]
fn sequence_parallel_inside_context_parallel_stays_on_the_tp_group() {
    let program = Model::Llama.build(&llama()).unwrap();
    let p = passes(&program, "dp=2,cp=2,tp=2,sp,cp_mode=ring");
    let sp: Vec<_> = ledger(&p.partitioned)
        .into_iter()
        .filter(|e| e.rank == 0 && matches!(e.kind, "all_gather" | "reduce_scatter"))
        .collect();
    assert!(!sp.is_empty());
    for e in &sp {
        assert_eq!(
            e.group,
            vec![0, 1],
            "{} of {} ({})",
            e.kind,
            e.tensor,
            e.phase
        );
    }
}

/// Deletes each inserted op of `kind` in turn and expects the run to notice.
fn every_deletion_caught(spec: &str, kind: &str, want: usize) {
    let program = Model::Llama.build(&llama()).unwrap();
    let s = Session::from_plan("cp", plan_under(&program, spec)).reduce(Action::SetBreakMode(true));
    assert_eq!(
        common::every_deletion_caught(&s, kind),
        want,
        "{spec}: {kind}"
    );
}

#[test]
fn deleting_any_ring_pass_or_ulysses_all_to_all_is_caught() {
    // cp=2: 1 pass forward, 1 + 1 backward, per layer.
    every_deletion_caught("cp=2,cp_mode=ring", "ppermute", 3 * 2);
    every_deletion_caught("cp=2,cp_mode=ulysses", "all_to_all", 8 * 2);
}

/// Each rank's attention FLOPs (the ring blocks' forward work).
fn block_flops(p: &Passes) -> Vec<f64> {
    p.partitioned
        .ranks
        .iter()
        .map(|r| {
            r.program
                .ops()
                .iter()
                .filter(|o| o.ty == OpType::RingAttnBlock)
                .map(|o| op_work(&r.program, o, ElementBytes(8.0)).flops)
                .sum()
        })
        .collect()
}

#[test]
fn the_zig_zag_order_balances_the_causal_mask_and_the_contiguous_one_does_not() {
    let cfg = ModelConfig { seq: 64, ..llama() };
    let program = Model::Llama.build(&cfg).unwrap();
    let zigzag = block_flops(&passes(&program, "cp=8,cp_mode=ring"));
    assert!(
        zigzag.iter().all(|&f| f == zigzag[0] && f > 0.0),
        "{zigzag:?}"
    );
    let plain = block_flops(&passes(&program, "cp=8,cp_mode=ring_contiguous"));
    let mean = plain.iter().sum::<f64>() / plain.len() as f64;
    let last = plain[plain.len() - 1];
    // Contiguous chunks of c = 8: rank r keeps r·c² + c(c+1)/2 pairs per head, the last
    // rank 7·64 + 36 = 484 against a mean of 64·65/2/8 = 260: 1.86×.
    assert!((last / mean - 484.0 / 260.0).abs() < 1e-12, "{plain:?}");
    // Both orders do the same total work: the mask keeps as many pairs.
    assert_eq!(plain.iter().sum::<f64>(), zigzag.iter().sum::<f64>());
}

#[test]
fn ulysses_is_cheaper_per_link_than_the_ring_at_large_p_and_the_ring_is_not_limited_by_heads() {
    // 8 key heads: Ulysses can split them at most 8 ways; the ring goes past.
    let cfg = ModelConfig {
        seq: 64,
        heads: 8,
        kv_heads: 8,
        ..llama()
    };
    let program = Model::Llama.build(&cfg).unwrap();
    let per_rank = |spec: &str, kind: &str| -> f64 {
        ledger(&passes(&program, spec).partitioned)
            .iter()
            .filter(|e| e.rank == 0 && e.kind == kind && e.phase == "forward")
            .map(|e| e.bytes_per_rank)
            .sum()
    };
    let mut ratios = Vec::new();
    for cp in [2, 4, 8] {
        let ring = per_rank(&format!("cp={cp},cp_mode=ring"), "ppermute");
        let ulysses = per_rank(&format!("cp={cp},cp_mode=ulysses"), "all_to_all");
        ratios.push(ring / ulysses);
    }
    // The ring sends 2·N·h_kv·(P−1)/P per rank, Ulysses 4·N·h·(P−1)/P²: with h_kv = h the
    // ratio is P/2, equal at P = 2 and Ulysses cheaper beyond.
    assert_eq!(ratios, vec![1.0, 2.0, 4.0]);
    // 16 ways: more than the heads, so Ulysses cannot split them, and auto picks the ring.
    let strategy = Parallel::parse("cp=16").unwrap();
    assert_eq!(
        strategy.resolved_cp_mode(&program),
        shardlab::plan::parallel::CpMode::Ring
    );
    let ring16 = passes(&program, "cp=16,cp_mode=ring");
    assert!(ring16.partitioned.ranks.len() == 16);
}
