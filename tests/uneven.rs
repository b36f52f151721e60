//! Uneven shards (`dist::chunk`, torch.chunk's rule): every op family with a dim the mesh
//! does not divide runs distributed equal to serial, every replica compared, and the rank
//! programs show the padding around each collective.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use shardlab::exec::run::{run_distributed, run_serial, RunOptions};
use shardlab::ir::{Op, OpType};
use shardlab::models::scenarios::Scenario;
use shardlab::models::{Model, ModelConfig};
use shardlab::passes::driver::{run_passes, PassOptions, Passes};
use shardlab::plan::Plan;

fn small(model: Model) -> ModelConfig {
    ModelConfig {
        layers: 1,
        dtype: shardlab::ir::DType::F64,
        ..model.default_config()
    }
}

fn plan(model: Model, cfg: &ModelConfig, mesh: &str, shards: &[&str]) -> Plan {
    common::plan_with(model.build(cfg).unwrap(), mesh, shards)
}

fn planned(p: &Plan, opts: &PassOptions) -> Passes {
    run_passes(p, opts).unwrap_or_else(|e| panic!("{e}"))
}

/// Distributed equals serial for two steps, every tensor and every replica.
fn assert_verifies(name: &str, p: &Passes) {
    if let Err(failed) = common::verifies_against_serial(p, 2) {
        panic!("{name}: {failed}");
    }
}

/// One line per op of `rank`'s program whose type is in `types`, as the text prints it.
fn ops_of(p: &Passes, rank: u32, types: &[OpType]) -> Vec<String> {
    let r = p.partitioned.ranks.iter().find(|r| r.rank == rank).unwrap();
    r.program
        .ops()
        .iter()
        .filter(|o| types.contains(&o.ty))
        .map(|o| op_line(&r.program, o))
        .collect()
}

fn op_line(program: &shardlab::ir::Program, op: &Op) -> String {
    let name = |v: &shardlab::ir::VarId| {
        let var = program.var(*v);
        format!("{}{:?}", var.name, var.ty.shape.as_slice())
    };
    let ins: Vec<String> = op.all_inputs().map(|v| name(&v)).collect();
    let outs: Vec<String> = op.all_outputs().map(|v| name(&v)).collect();
    let mut attrs: Vec<String> = ["axis", "pad_size", "starts", "ends", "start_index", "scale"]
        .iter()
        .filter_map(|k| op.attrs.get(k).map(|a| format!("{k}={a}")))
        .collect();
    attrs.sort();
    format!(
        "{} {} -> {} {}",
        op.ty,
        ins.join(","),
        outs.join(","),
        attrs.join(" ")
    )
}

fn local_shape(p: &Passes, rank: u32, var: &str) -> Vec<usize> {
    let r = p.partitioned.ranks.iter().find(|r| r.rank == rank).unwrap();
    let id = r.program.var_id(var).unwrap();
    r.program.var(id).ty.shape.to_vec()
}

#[test]
fn vocabulary_50257_split_4_and_8_ways() {
    for (mesh, last_rows, last_start) in [("4:mp", 12_562, 37_695), ("8:mp", 6_276, 43_981)] {
        let cfg = ModelConfig {
            vocab: 50_257,
            hidden: 16,
            heads: 2,
            seq: 4,
            batch: 2,
            ..small(Model::EmbeddingLm)
        };
        let p = plan(
            Model::EmbeddingLm,
            &cfg,
            mesh,
            &["wte=mp,-", "lm_head.w=-,mp"],
        );
        let p = planned(&p, &PassOptions::default());
        let last = p.partitioned.ranks.len() as u32 - 1;
        assert_eq!(
            local_shape(&p, 0, "wte"),
            [50_257usize.div_ceil(last as usize + 1), 16]
        );
        assert_eq!(local_shape(&p, last, "wte"), [last_rows, 16], "{mesh}");
        assert_eq!(
            local_shape(&p, last, "lm_head.w"),
            [16, last_rows],
            "{mesh}"
        );
        let starts: Vec<String> = ops_of(
            &p,
            last,
            &[OpType::CEmbedding, OpType::CSoftmaxWithCrossEntropy],
        )
        .into_iter()
        .map(|l| l.split(' ').next_back().unwrap_or_default().to_string())
        .collect();
        let want = format!("start_index={last_start}");
        assert_eq!(starts, [want.clone(), want], "{mesh}");
        assert_verifies(mesh, &p);
    }
}

#[test]
fn batch_6_on_4_ranks_leaves_the_last_empty_and_its_mean_a_scaled_sum() {
    let cfg = ModelConfig {
        batch: 6,
        ..small(Model::Gpt)
    };
    let p = planned(
        &plan(Model::Gpt, &cfg, "4:dp", &["x=dp,-,-"]),
        &PassOptions::default(),
    );
    assert_eq!(local_shape(&p, 0, "x"), [2, 16, 64]);
    assert_eq!(local_shape(&p, 3, "x"), [0, 16, 64]);
    // The loss is a sum scaled by K/n (4 ranks, 6·16·64 elements), forward and backward.
    let lines = ops_of(
        &p,
        3,
        &[OpType::ReduceSum, OpType::ReduceSumGrad, OpType::Mean],
    );
    assert_eq!(
        lines,
        [
            "reduce_sum loss.sq[0, 16, 64] -> loss@SUM@1[] ",
            "reduce_sum_grad loss.sq[0, 16, 64],loss@GRAD[] -> loss.sq@GRAD@SUM@2[0, 16, 64] "
        ]
    );
    let scales: Vec<String> = ops_of(&p, 3, &[OpType::Scale])
        .into_iter()
        .filter(|l| l.contains("@SUM@"))
        .collect();
    assert_eq!(scales.len(), 2);
    assert!(
        scales
            .iter()
            .all(|l| l.ends_with(&format!("scale={}", 4.0 / 6144.0))),
        "{scales:?}"
    );
    assert_verifies("batch 6 on 4", &p);
}

#[test]
fn ten_heads_on_4_ranks_pad_before_the_gather_and_slice_after() {
    let cfg = ModelConfig {
        heads: 10,
        hidden: 40,
        ..small(Model::Gpt)
    };
    let p = plan(Model::Gpt, &cfg, "4:mp", &["h0.attn.q.t=-,mp,-,-"]);
    let p = planned(&p, &PassOptions::default());
    // Heads 3, 3, 3, 1: the last rank pads its one head to three, gathers twelve, keeps ten.
    assert_eq!(local_shape(&p, 3, "h0.attn.q.t"), [4, 1, 16, 4]);
    let gather = ops_of(&p, 3, &[OpType::Pad, OpType::AllGather, OpType::Slice]);
    assert_eq!(
        &gather[3..6],
        [
            "pad h0.attn.ctx.t[4, 16, 1, 4] -> h0.attn.ctx.t@PAD@7[4, 16, 3, 4] axis=2 pad_size=2",
            "all_gather h0.attn.ctx.t@PAD@7[4, 16, 3, 4] -> h0.attn.ctx.t@RESHARD@8[4, 16, 12, 4] axis=2",
            "slice h0.attn.ctx.t@RESHARD@8[4, 16, 12, 4] -> h0.attn.ctx.t@RESHARD@9[4, 16, 10, 4] ends=[10] starts=[0]",
        ]
    );
    // The ledger counts the padded bytes: a ring all-gather sends 3/4 of the padded output,
    // 4·16·12·4 f64 elements.
    let gathered = p
        .ledger
        .iter()
        .find(|e| e.rank == 3 && e.kind == "all_gather" && e.tensor.starts_with("h0.attn.ctx.t"))
        .unwrap();
    assert_eq!(
        gathered.bytes_per_rank,
        (4 * 16 * 12 * 4 * 8) as f64 * 3.0 / 4.0
    );
    assert_verifies("10 heads on 4", &p);
}

#[test]
fn a_reduce_scatter_onto_an_uneven_sequence_pads_the_whole_and_unpads_its_chunk() {
    let cfg = ModelConfig {
        seq: 10,
        ..small(Model::Gpt)
    };
    let sp = Scenario::by_name("gpt_sequence_parallel").unwrap();
    let p = planned(&sp.plan_with(&cfg).unwrap(), &PassOptions::default());
    let lines = ops_of(&p, 3, &[OpType::Pad, OpType::ReduceScatter]);
    let pads: Vec<&String> = lines.iter().filter(|l| l.starts_with("pad ")).collect();
    let scatters = lines
        .iter()
        .filter(|l| l.starts_with("reduce_scatter "))
        .count();
    assert!(scatters > 0 && pads.len() >= scatters, "{lines:#?}");
    // Rank 3 is (dp 0, mp 3): sequence 10 on 4 is 3, 3, 3, 1; the whole pads 10 to 12.
    assert!(
        lines
            .iter()
            .any(|l| l.contains("[2, 10, 64] ->") && l.ends_with("axis=1 pad_size=2")),
        "{lines:#?}"
    );
    assert_verifies("sequence 10 on 4", &p);
}

#[test]
fn nested_axes_chunk_the_outer_piece() {
    let cfg = ModelConfig {
        batch: 10,
        ..small(Model::Gpt)
    };
    let shards = ["x=a+b,-,-", "h0.attn.q.w=-,b", "h0.mlp.fc1.w=-,a"];
    let p = planned(
        &plan(Model::Gpt, &cfg, "2x2:a,b", &shards),
        &PassOptions::default(),
    );
    // 10 → a: 5, 5 → b: 3, 2 | 3, 2.
    let rows: Vec<usize> = (0..4).map(|r| local_shape(&p, r, "x")[0]).collect();
    assert_eq!(rows, [3, 2, 3, 2]);
    assert_verifies("batch 10 on 2x2", &p);
}

/// Ten classes co-sharded over a 2 × 2 mesh are 3, 2, 3, 2 columns: no rank can bound the
/// label from its own columns (rank 1's 2 columns times 4 ranks is 8, and label 9 is
/// rank 3's), so the vocab-parallel loss leaves labels past its columns to the others. A
/// random plan found it (it refused "label 9 is outside the 8 classes").
#[test]
fn co_sharded_uneven_classes_leave_each_label_to_its_rank() {
    let cfg = ModelConfig {
        batch: 16,
        classes: 10,
        ..Model::Mlp.default_config()
    };
    let shards = ["x=a,-", "gelu_0.tmp_0=a+b,-", "linear_1.tmp_0=-,a+b"];
    let p = planned(
        &plan(Model::Mlp, &cfg, "2x2:a,b", &shards),
        &PassOptions::default(),
    );
    let cols: Vec<usize> = (0..4)
        .map(|r| local_shape(&p, r, "linear_1.tmp_1")[1])
        .collect();
    assert_eq!(cols, [3, 2, 3, 2]);
    assert_verifies("10 classes on a+b", &p);
}

#[test]
fn zero_shards_an_evenly_split_model_fed_an_uneven_batch() {
    let cfg = ModelConfig {
        batch: 6,
        ..small(Model::Gpt)
    };
    let p = plan(Model::Gpt, &cfg, "4:dp", &["x=dp,-,-"]);
    for zero in 1..=3 {
        let mut opts = common::with_optimizer("adam", false, None);
        opts.partition.zero = zero;
        assert_verifies(&format!("zero {zero}"), &planned(&p, &opts));
    }
}

#[test]
fn zero_shards_a_parameter_split_unevenly() {
    // A 10-row table on 4 tensor-parallel ranks (3, 3, 3, 1 rows), its flat shards over 2
    // data-parallel ranks: the one-row ranks pad more.
    let cfg = ModelConfig {
        vocab: 10,
        ..small(Model::EmbeddingLm)
    };
    let p = plan(
        Model::EmbeddingLm,
        &cfg,
        "2x4:dp,mp",
        &["ids=dp,-", "wte=mp,-"],
    );
    for zero in 1..=3 {
        let mut opts = common::with_optimizer("adamw", false, None);
        opts.partition.zero = zero;
        assert_verifies(&format!("zero {zero}"), &planned(&p, &opts));
    }
}

#[test]
fn a_dim_smaller_than_its_axis_is_refused_by_name() {
    let cfg = ModelConfig {
        batch: 3,
        ..small(Model::Gpt)
    };
    let program = Model::Gpt.build(&cfg).unwrap();
    let mesh = std::sync::Arc::new(shardlab::plan::parse_mesh_spec("4:dp").unwrap());
    let err = shardlab::plan::parse_shard_spec("x=dp,-,-", &program, &mesh).err();
    assert_eq!(
        err.map(|e| e.to_string()).as_deref(),
        Some(
            "shard `x=dp,-,-`: `x` dim 0 has size 3, fewer than the 4 shards `dp` cut it into: \
             some rank would hold nothing of it"
        )
    );
}

/// The checks can fail: without the uneven mean's scale, the last rank's empty shard
/// would average in as a zero, and the loss and every gradient are off.
#[test]
fn the_uneven_mean_is_what_makes_the_loss_right() {
    let cfg = ModelConfig {
        batch: 6,
        ..small(Model::Gpt)
    };
    let mut p = planned(
        &plan(Model::Gpt, &cfg, "4:dp", &["x=dp,-,-"]),
        &PassOptions::default(),
    );
    for r in &mut p.partitioned.ranks {
        let program = &mut r.program;
        let i = program
            .ops()
            .iter()
            .position(|o| o.ty == OpType::Scale && o.role == shardlab::ir::OpRole::Loss)
            .unwrap();
        let mut op = Op::clone(&program.ops()[i]);
        op.attrs
            .insert("scale".into(), shardlab::ir::Attr::Float(1.0 / 2048.0));
        *program.op_mut(i).unwrap() = op;
    }
    let run = RunOptions {
        steps: 1,
        ..Default::default()
    };
    let serial = run_serial(&p, &run).unwrap();
    let dist = run_distributed(&p, &run, false).unwrap();
    let failed: Vec<String> = shardlab::exec::verify::verify(&serial, &dist)
        .into_iter()
        .filter(|c| !c.pass)
        .map(|c| c.tensor)
        .collect();
    assert_eq!(failed, ["loss (step 1)"]);
}
