//! `shardlab import` of Mixture-of-Experts programs: PaddleFormers' `Qwen2MoeForCausalLM`
//! with GShard's fixed-capacity routing (`scripts/models/make_moe_fixtures.py`). The routing
//! is fused into `moe_dispatch`/`moe_combine` and computes what Paddle computed (dropped
//! tokens included: the block's loss equals Paddle's); the shrunk model plans dp × Megatron
//! with its experts whole and runs distributed equal to serial; Qwen1.5-MoE-A2.7B imports at
//! its published size; a routing the importer does not know is refused by line.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use shardlab::exec::run::{run_serial, RunOptions};
use shardlab::exec::tensor::Tensor;
use shardlab::import::{import_pir, ImportOptions, Imported};
use shardlab::ir::{OpType, VarKind};
use std::collections::HashMap;

const BLOCK: &str = include_str!("models/qwen2_moe_block.pir");
const QWEN: &str = include_str!("models/qwen2_moe_2l.pir");

fn import(text: &str) -> Imported {
    import_pir(text, &ImportOptions::default()).unwrap_or_else(|e| panic!("{e}"))
}

fn record(json: &str) -> serde_json::Value {
    serde_json::from_str(json).unwrap()
}

fn params(imported: &Imported) -> u64 {
    let vars = imported.program.vars();
    let params = vars.iter().filter(|v| v.kind == VarKind::Parameter);
    params.map(|v| v.ty.numel()).sum()
}

fn count(imported: &Imported, ty: OpType) -> usize {
    imported.program.ops().iter().filter(|o| o.ty == ty).count()
}

/// The fixture's weights and input, by the imported program's names: the block's one
/// input is `x` reshaped (the import feeds that value; it holds x's elements in order).
fn paddles_values(imported: &Imported) -> HashMap<String, Tensor> {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/models/qwen2_moe_block.values"
    );
    let mut feeds = HashMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let t = shardlab::exec::npy::read_npy(&std::fs::read(&path).unwrap()).unwrap();
        let stem = path.file_stem().unwrap().to_str().unwrap().to_string();
        feeds.insert(stem, t);
    }
    let p = &imported.program;
    let inputs: Vec<_> = p
        .vars()
        .iter()
        .filter(|v| v.kind == VarKind::Input)
        .collect();
    assert_eq!(inputs.len(), 1, "the block reads one input");
    let x = feeds.remove("x").unwrap();
    feeds.insert(inputs[0].name.to_string(), x);
    feeds
}

/// The fused routing computes Paddle's arithmetic: with Paddle's weights and input, the
/// block's loss is Paddle's. The fixture drops choices (its record counts them), so the
/// drop rule is held to Paddle's: a token-major ranking or another capacity drops others
/// and the loss moves by far more than the tolerance (both run in f32: a few roundings of
/// values below 1 per op, over a mean of 2,048 outputs, stay far below 1e-7).
#[test]
fn the_moe_block_computes_what_paddle_computed() {
    let imported = import(BLOCK);
    let rec = record(include_str!("models/qwen2_moe_block.pir.json"));
    assert_eq!(
        params(&imported),
        rec["framework_parameters"].as_u64().unwrap()
    );
    assert!(
        rec["paddle_dropped_choices"].as_u64().unwrap() > 0,
        "the fixture drops"
    );
    assert_eq!(count(&imported, OpType::MoeDispatch), 1);
    let (passes, _) = common::passes_under(&imported.program, "dp=1");
    let run = RunOptions {
        feeds: paddles_values(&imported),
        ..Default::default()
    };
    let log = run_serial(&passes, &run).unwrap();
    let paddle = rec["paddle_loss"].as_f64().unwrap();
    let ours = log.losses[0];
    assert!(
        (ours - paddle).abs() < 1e-7,
        "ShardLab's loss {ours} against Paddle's {paddle}"
    );
}

#[test]
fn the_shrunk_qwen2_moe_imports_plans_and_runs() {
    let imported = import(QWEN);
    let rec = record(include_str!("models/qwen2_moe_2l.pir.json"));
    assert_eq!(
        params(&imported),
        rec["framework_parameters"].as_u64().unwrap()
    );
    let ops = rec["pir_ops"].as_object().unwrap();
    for (op, n) in &imported.census {
        assert_eq!(ops[op].as_u64(), Some(*n as u64), "{op}");
    }
    assert_eq!(count(&imported, OpType::MoeDispatch), 2);
    assert_eq!(count(&imported, OpType::MoeCombine), 2);
    assert_eq!(
        count(&imported, OpType::Sigmoid),
        2,
        "the shared experts' gates"
    );
    assert_eq!(
        count(&imported, OpType::RepeatInterleave),
        4,
        "Qwen2's tiled KV heads"
    );
    // Two layers × (q, k, v, the scores, their values, o, the router, the shared expert's
    // gate and 3, 4 experts × 3) + the head.
    assert_eq!(count(&imported, OpType::MatmulV2), 2 * 23 + 1);
    let fused: Vec<&String> = imported
        .notes
        .iter()
        .filter(|n| n.contains("is fused as moe_dispatch"))
        .collect();
    assert_eq!(fused.len(), 2);
    assert!(fused[0].contains("the top-2 of 4 experts") && fused[0].contains("capacity 16"));
    // Megatron's annotations leave the router, the experts and the scalar gates whole.
    let strategy = shardlab::plan::parallel::Parallel::parse("dp=2,tp=2").unwrap();
    let specs = strategy.shard_specs(&imported.program);
    let split: Vec<&str> = specs
        .iter()
        .filter_map(|s| s.split_once('=').map(|(v, _)| v))
        .collect();
    let p = &imported.program;
    for op in p.ops().iter().filter(|o| o.ty == OpType::MoeDispatch) {
        let gates = p.var(op.inputs[1][0]).name.to_string();
        assert!(!split.iter().any(|v| gates.contains(v)), "{gates}");
    }
    // q, k, v, o and the shared expert's three a layer (and q, k, v's biases), the head.
    let weights = split
        .iter()
        .filter(|v| v.starts_with("linear") && v.ends_with(".w_0"));
    assert_eq!(weights.count(), 2 * 7, "{split:?}");
    assert!(split.contains(&"lm_head_0.w_0"));
    for spec in ["dp=2", "tp=2", "dp=2,tp=2"] {
        let (passes, forward_all_reduces) = common::passes_under(p, spec);
        if spec.contains("tp") {
            // o and the shared expert's down per layer, and the vocabulary-parallel
            // embedding; under dp the loss's masked sum once more.
            let dp = usize::from(spec.contains("dp"));
            assert_eq!(forward_all_reduces, 2 * 2 + 1 + dp, "{spec}");
        }
        // One step: after an update the gates' error bound outgrows the smallest gap
        // between some token's k-th and (k+1)-th gate, and the bound then covers any
        // routing (`exec::bound::moe`), which checks nothing.
        common::verifies_against_serial(&passes, 1).unwrap_or_else(|e| panic!("{spec}: {e}"));
    }
}

/// Each Linear layer's FLOPs and input and output shapes are `paddle.flops`'s, the experts'
/// (which see `capacity` rows each, not the tokens) included.
#[test]
fn per_layer_flops_and_shapes_are_paddles() {
    let imported = import(QWEN);
    let p = &imported.program;
    let rec = record(include_str!("models/qwen2_moe_2l.pir.json"));
    let layers = rec["framework_layers"].as_object().unwrap();
    // 21 Linear layers a block (PaddleFormers' head is its own layer type, not counted).
    assert_eq!(layers.len(), 2 * 21);
    let inputs = common::linear_layers_as_paddle(p, layers);
    let experts = inputs.iter().filter(|s| s.first() == Some(&16)).count();
    assert_eq!(
        experts,
        2 * 4 * 3,
        "the experts' layers see 16 rows (their capacity)"
    );
}

#[test]
fn qwen15_moe_at_its_published_size_imports_and_plans() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/models/qwen1.5_moe_a2.7b.pir"
    ))
    .unwrap();
    let imported = import(&text);
    let rec = record(include_str!("models/qwen1.5_moe_a2.7b.pir.json"));
    assert_eq!(
        params(&imported),
        14_315_784_192,
        "Qwen1.5-MoE-A2.7B's 14.3B"
    );
    assert_eq!(
        params(&imported),
        rec["framework_parameters"].as_u64().unwrap()
    );
    assert_eq!(count(&imported, OpType::MoeDispatch), 24);
    let dispatch = imported
        .program
        .ops()
        .iter()
        .find(|o| o.ty == OpType::MoeDispatch)
        .unwrap();
    // 16,384 tokens, 60 experts, top-4: (16384 // 60) · 4 slots per expert.
    assert_eq!(dispatch.attr_int("capacity", 0), 273 * 4);
    let (passes, _) = common::passes_under(&imported.program, "dp=2,tp=2");
    assert_eq!(passes.partitioned.ranks.len(), 4);
}

/// A routing that is not the one the importer knows is refused by line, not guessed at.
#[test]
fn an_unknown_routing_is_refused_by_line() {
    let err = |text: &str| {
        import_pir(text, &ImportOptions::default())
            .unwrap_err()
            .to_string()
    };
    // Another einsum for the dispatch.
    let e = err(&QWEN.replacen("sec,sm->ecm", "sec,sm->emc", 1));
    assert!(
        e.contains("line 219") && e.contains("not the dispatch"),
        "{e}"
    );
    // A capacity the positions are not compared against.
    let less = QWEN
        .lines()
        .find(|l| l.contains("pd_op.less_than"))
        .unwrap();
    let bound = less
        .split('(')
        .nth(2)
        .unwrap()
        .split(')')
        .next()
        .unwrap()
        .split(", ")
        .nth(1)
        .unwrap();
    let def = QWEN
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("({bound}) =")))
        .unwrap();
    let e = err(&QWEN.replacen(def, &def.replace("value:16", "value:15"), 1));
    assert!(
        e.contains("keeps positions below 15, not below the dispatch's 16 slots"),
        "{e}"
    );
    // One op more in the routing (a second cumsum over the choices).
    let cumsum = QWEN.lines().find(|l| l.contains("pd_op.cumsum")).unwrap();
    let e = err(&QWEN.replacen(
        cumsum,
        &format!("{cumsum}\n{}", cumsum.replace("(%225)", "(%9225)")),
        1,
    ));
    assert!(e.contains("not the routing ShardLab recognises"), "{e}");
}

/// Experts written one chain each (PaddleFormers' loop over `nn.Linear`s) are stacked for
/// expert parallelism into batched matmuls over `[experts, in, out]` weights: with Paddle's
/// weights stacked, the block still computes Paddle's loss; the shrunk model under
/// `dp=4,ep=4` has its experts split over `ep` and runs distributed equal to serial.
#[test]
fn stacked_experts_compute_paddles_loss_and_run_expert_parallel() {
    use shardlab::plan::stack_experts::stack_experts_with_sources;
    let imported = import(BLOCK);
    let (stacked, sources) = stack_experts_with_sources(&imported.program);
    let names: Vec<&str> = sources.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "experts.linear_1.w_0",
            "experts.linear_2.w_0",
            "experts.linear_3.w_0"
        ]
    );
    assert!(sources.iter().all(|(_, parts)| parts.len() == 4));
    let per_expert = |p: &shardlab::ir::Program| {
        let matmuls = p.ops().iter().filter(|o| o.ty == OpType::MatmulV2).count();
        (
            matmuls,
            p.ops().iter().filter(|o| o.ty == OpType::Split).count(),
        )
    };
    // The router, 4 experts × 3, the shared expert's 3 and its gate; then 3 batched.
    assert_eq!(per_expert(&imported.program), (17, 1));
    assert_eq!(per_expert(&stacked), (8, 0));
    let mut feeds = paddles_values(&imported);
    for (name, parts) in &sources {
        let pieces: Vec<Tensor> = parts.iter().map(|p| feeds.remove(p).unwrap()).collect();
        let mut shape = vec![pieces.len()];
        shape.extend_from_slice(&pieces[0].shape);
        let values: Vec<f64> = pieces.iter().flat_map(|t| t.to_f64()).collect();
        feeds.insert(
            name.clone(),
            Tensor::float(pieces[0].dtype(), shape, values),
        );
    }
    let (passes, _) = common::passes_under(&stacked, "dp=1");
    let run = RunOptions {
        feeds,
        ..Default::default()
    };
    let ours = run_serial(&passes, &run).unwrap().losses[0];
    let paddle = record(include_str!("models/qwen2_moe_block.pir.json"))["paddle_loss"]
        .as_f64()
        .unwrap();
    assert!(
        (ours - paddle).abs() < 1e-7,
        "{ours} against Paddle's {paddle}"
    );

    let plan = shardlab::import::plan_under(&import(QWEN), "dp=4,ep=4").unwrap();
    let experts: Vec<String> = plan
        .annotations
        .iter()
        .filter(|a| plan.program.var(a.var).name.starts_with("experts."))
        .map(|a| shardlab::plan::shard_spec(&plan.program, plan.mesh().unwrap(), a))
        .collect();
    assert_eq!(experts.len(), 2 * 3, "{experts:?}");
    assert!(
        experts.iter().all(|s| s.ends_with("=ep,-,-")),
        "{experts:?}"
    );
    let p = shardlab::passes::driver::run_passes(
        &plan,
        &shardlab::passes::driver::PassOptions::from_plan(&plan.options),
    )
    .unwrap();
    common::verifies_against_serial(&p, 1).unwrap();
}
