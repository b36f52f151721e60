//! The shrunk twin (`models::twin`): at its small sizes a published model plans to the same
//! rank programs as at its real size, op for op, up to shapes and the attributes shapes
//! give (a reshape's shape, a slice's bounds, a pad's size, a table's first row, the uneven
//! mean's scale). Checked on the first and the last rank, where uneven shards differ most.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use shardlab::ir::{Op, Program};
use shardlab::models::twin::shrink;
use shardlab::models::Model;
use shardlab::passes::driver::{run_passes, PassOptions, Passes};
use shardlab::plan::parallel::Parallel;

const SHAPE_ATTRS: [&str; 6] = [
    "shape",
    "starts",
    "ends",
    "pad_size",
    "start_index",
    "scale",
];

fn planned(model: Model, cfg: &shardlab::models::ModelConfig, spec: &str) -> Passes {
    let p = Parallel::parse(spec).unwrap();
    let program = model.build(cfg).unwrap();
    let shards = p.shard_specs(&program);
    let plan = common::plan_with(program, &p.mesh_spec(), &shards);
    let last = (p.dp * p.tp * p.pp) as u32 - 1;
    let mut opts = PassOptions::from_plan(&plan.options);
    opts.partition.ranks = Some(vec![0, last]);
    run_passes(&plan, &opts).unwrap_or_else(|e| panic!("{spec}: {e}"))
}

/// An op as its type, role, namescope, variable names and attributes other than shapes.
fn skeleton(program: &Program, op: &Op) -> String {
    let names = |vs: &mut dyn Iterator<Item = shardlab::ir::VarId>| {
        vs.map(|v| program.var(v).name.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut attrs: Vec<String> = op
        .attrs
        .iter()
        .filter(|(k, _)| !SHAPE_ATTRS.contains(&k.as_str()))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    attrs.sort();
    format!(
        "{} {:?} {} ({}) -> ({}) {}",
        op.ty,
        op.role,
        op.namescope,
        names(&mut op.all_inputs()),
        names(&mut op.all_outputs()),
        attrs.join(" ")
    )
}

#[test]
fn twins_plan_the_rank_programs_of_the_real_size() {
    // A batch of 70 on 4 data-parallel ranks is uneven (18, 18, 18, 16), and so is the
    // twin's 14 (4, 4, 4, 2): the loss stays a scaled sum in both.
    for (preset, spec, batch) in [
        ("llama3-8b", "dp=2,tp=8", 8),
        ("gpt2-small", "dp=2,tp=4", 8),
        ("gpt2-small", "dp=4,tp=2", 70),
        ("llama3-70b", "pp=2,dp=2,tp=2", 8),
    ] {
        let (model, mut real) = Model::preset(preset).unwrap();
        real.layers = 2;
        real.batch = batch;
        let p = Parallel::parse(spec).unwrap();
        let (twin, said) = shrink(model, &real, p.dp * p.tp * p.pp, Some(p.pp));
        assert_eq!(
            twin.layers, 2,
            "{preset}: two layers on {} stages stay",
            p.pp
        );
        assert!(!said.is_empty(), "{preset}: nothing shrank");
        let (a, b) = (planned(model, &real, spec), planned(model, &twin, spec));
        for (r, t) in a.partitioned.ranks.iter().zip(&b.partitioned.ranks) {
            let ops = |p: &Program| p.ops().iter().map(|o| skeleton(p, o)).collect::<Vec<_>>();
            let (real_ops, twin_ops) = (ops(&r.program), ops(&t.program));
            assert_eq!(real_ops.len(), twin_ops.len(), "{preset} rank {}", r.rank);
            if let Some((x, y)) = real_ops.iter().zip(&twin_ops).find(|(x, y)| x != y) {
                panic!("{preset} {spec} rank {}: real `{x}`, twin `{y}`", r.rank);
            }
        }
    }
}

#[test]
fn the_twin_says_what_it_shrank() {
    let (model, real) = Model::preset("llama3-8b").unwrap();
    let (twin, said) = shrink(model, &real, 64, Some(1));
    assert_eq!(
        said,
        [
            "layers 32 → 2",
            "hidden 4096 → 64",
            "ffn 14336 → 64",
            "vocab 128256 → 64",
            "seq 8192 → 64"
        ]
    );
    assert_eq!((twin.layers, twin.heads, twin.kv_heads), (2, 32, 8));
    // GPT-2's vocabulary is odd: 50,257 on 8 devices leaves a remainder of 1, and its twin
    // keeps it (9 ≥ 8 and 9 ≡ 50,257 mod 8), so its split stays uneven.
    let (model, real) = Model::preset("gpt2-small").unwrap();
    let (twin, _) = shrink(model, &real, 8, Some(1));
    assert_eq!((twin.vocab % 8, twin.vocab), (50_257 % 8, 9));
}

/// Layers shrink modulo the stage count, so the pipeline's split keeps its shape (10 layers
/// on 4 stages are 3, 3, 2, 2; the twin's 6 are 2, 2, 1, 1), and stay where stages are
/// placed by op number.
#[test]
fn layers_shrink_modulo_the_stages() {
    let (model, real) = Model::preset("gpt2-small").unwrap();
    let ten = shardlab::models::ModelConfig { layers: 10, ..real };
    let layers = |stages| shrink(model, &ten, 8, stages).0.layers;
    assert_eq!(layers(Some(4)), 6);
    assert_eq!(layers(Some(1)), 2);
    assert_eq!(layers(Some(16)), 10, "fewer layers than stages stay");
    assert_eq!(layers(None), 10);
    let one = shardlab::models::ModelConfig { layers: 1, ..ten };
    assert_eq!(shrink(model, &one, 8, Some(1)).0.layers, 1);
}
