//! Partitioning: per-rank programs agree with Paddle's Partitioner and Resharder on the
//! oracle MLP; golden per-rank programs for the presets; every reshard primitive; the
//! ledger; AMP and global-norm synchronisation; errors for plans that cannot be
//! partitioned. Rewrite goldens with `UPDATE_EXPECT=1 cargo test --test partition`.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use common::{paddle_config_plan, paddle_mlp_oracle, preset_plan, standard_configs};
use expect_test::{expect_file, ExpectFile};
use shardlab::ir::{OpClass, OpRole, OpType};
use shardlab::models::scenarios::Scenario;
use shardlab::models::Model;
use shardlab::passes::driver::{run_passes, PassOptions, Passes};
use shardlab::passes::ledger::Purpose;
use shardlab::passes::optimizer::{Optimizer, OptimizerOptions};
use shardlab::plan::{parse_plan, Plan};

fn run(plan: &Plan) -> Passes {
    run_passes(plan, &PassOptions::default()).unwrap()
}

#[test]
fn per_rank_programs_match_paddle_on_every_config() {
    let oracle = paddle_mlp_oracle();
    for (name, config) in oracle["configs"].as_object().unwrap() {
        let p = run(&paddle_config_plan(config));
        for (rank, paddle) in config["ranks"].as_object().unwrap() {
            let rank: u32 = rank.parse().unwrap();
            let ours = p.partitioned.ranks.iter().find(|r| r.rank == rank).unwrap();
            let ops: Vec<_> = ours
                .program
                .ops()
                .iter()
                .filter(|o| o.role != OpRole::Optimize)
                .collect();
            let types: Vec<&str> = ops.iter().map(|o| o.ty.name()).collect();
            let want: Vec<&str> = paddle["partitioned"]["ops"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| o["type"].as_str().unwrap())
                .collect();
            assert_eq!(types, want, "{name} rank {rank}: op types");
            let groups = &paddle["process_groups"];
            for c in paddle["comm_ops_after_reshard"].as_array().unwrap() {
                let i = c["idx"].as_u64().unwrap() as usize;
                let op = ops[i];
                assert_eq!(
                    op.ty.name(),
                    c["type"].as_str().unwrap(),
                    "{name} rank {rank} op{i}"
                );
                assert_eq!(
                    op.namescope,
                    c["op_namescope"].as_str().unwrap(),
                    "{name} rank {rank} op{i}"
                );
                let var = ours.program.var(op.input("X")[0]).name.clone();
                assert_eq!(
                    var,
                    c["vars"][0].as_str().unwrap().into(),
                    "{name} rank {rank} op{i}"
                );
                if let Some(ring) = c.get("ring_id") {
                    let want: Vec<i64> =
                        serde_json::from_value(groups[ring.to_string()].clone()).unwrap();
                    assert_eq!(
                        op.attr_ints("group").unwrap(),
                        want.as_slice(),
                        "{name} rank {rank} op{i} group"
                    );
                }
                if let Some(code) = c.get("reduce_type") {
                    // Paddle's ReduceType enum: kRedSum 0, kRedMax 1, kRedMin 2, kRedProd 3,
                    // kRedAvg 4.
                    let ours = match op.attr_str("reduce_type") {
                        Some("SUM") => 0,
                        Some("MAX") => 1,
                        Some("MIN") => 2,
                        Some("PROD") => 3,
                        Some("AVG") => 4,
                        other => panic!("{name} rank {rank} op{i}: reduce_type {other:?}"),
                    };
                    assert_eq!(
                        ours,
                        code.as_i64().unwrap(),
                        "{name} rank {rank} op{i} reduce_type"
                    );
                }
                if let Some(scale) = c.get("scale") {
                    assert_eq!(op.attr_float("scale", 0.0), scale.as_f64().unwrap());
                }
            }
            let updates = ours
                .program
                .ops()
                .iter()
                .filter(|o| o.ty == OpType::Sgd)
                .count();
            assert_eq!(updates, 4, "{name}: one sgd per parameter, as Paddle");
        }
    }
}

fn ranks_text(p: &Passes, ranks: &[u32]) -> String {
    let mut out = String::new();
    for r in p
        .partitioned
        .ranks
        .iter()
        .filter(|r| ranks.contains(&r.rank))
    {
        out.push_str(&format!("== rank {}\n{}\n", r.rank, r.program));
    }
    out
}

fn check_preset(model: Model, layers: usize, config: &str, golden: ExpectFile) {
    let (_, mesh, shards) = standard_configs(model, layers)
        .into_iter()
        .find(|c| c.0 == config)
        .unwrap();
    let p = run(&preset_plan(model, layers, mesh, &shards));
    let ranks: &[u32] = if mesh == "2x4:dp,mp" {
        &[0, 5]
    } else {
        &[0, 3]
    };
    golden.assert_eq(&ranks_text(&p, ranks));
}

#[test]
fn golden_mlp() {
    check_preset(Model::Mlp, 0, "dp", expect_file!["golden/ranks_mlp_dp.txt"]);
    check_preset(Model::Mlp, 0, "mp", expect_file!["golden/ranks_mlp_mp.txt"]);
    check_preset(
        Model::Mlp,
        0,
        "dp_mp",
        expect_file!["golden/ranks_mlp_dp_mp.txt"],
    );
}

#[test]
fn golden_gpt_one_layer() {
    check_preset(
        Model::Gpt,
        1,
        "dp",
        expect_file!["golden/ranks_gpt1_dp.txt"],
    );
    check_preset(
        Model::Gpt,
        1,
        "mp",
        expect_file!["golden/ranks_gpt1_mp.txt"],
    );
    check_preset(
        Model::Gpt,
        1,
        "dp_mp",
        expect_file!["golden/ranks_gpt1_dp_mp.txt"],
    );
}

#[test]
fn golden_gpt_two_layers() {
    check_preset(
        Model::Gpt,
        2,
        "dp",
        expect_file!["golden/ranks_gpt2_dp.txt"],
    );
    check_preset(
        Model::Gpt,
        2,
        "mp",
        expect_file!["golden/ranks_gpt2_mp.txt"],
    );
    check_preset(
        Model::Gpt,
        2,
        "dp_mp",
        expect_file!["golden/ranks_gpt2_dp_mp.txt"],
    );
}

#[test]
fn golden_vocab_parallel_embedding() {
    let p = run(&Scenario::by_name("vocab_embedding")
        .unwrap()
        .plan()
        .unwrap());
    expect_file!["golden/ranks_embedding_vocab.txt"].assert_eq(&ranks_text(&p, &[0, 5]));
    let r5 = &p.partitioned.ranks[5].program;
    let c = r5
        .ops()
        .iter()
        .find(|o| o.ty == OpType::CEmbedding)
        .unwrap();
    assert_eq!(
        c.attr_int("start_index", -1),
        64,
        "rank 5 is mp coordinate 1 of 4: rows 64..128 of 256"
    );
}

/// A plan on `mesh [2, 2] (a, b)` whose single consumer forces one reshard primitive.
fn primitive(lines: &str) -> Vec<String> {
    let text = format!("mesh [2, 2] (a, b)\n{lines}");
    let (plan, _) = parse_plan(&text).unwrap();
    let p = run(&plan);
    let r1 = &p.partitioned.ranks[1].program;
    r1.ops()
        .iter()
        .filter(|o| o.namescope == "/auto_parallel/reshard" && o.role == OpRole::Forward)
        .map(|o| {
            let mut attrs: Vec<String> = o
                .attrs
                .iter()
                .filter(|(k, _)| *k != "ring_id")
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            attrs.sort();
            let x = r1.var(o.all_inputs().next().unwrap());
            let out = r1.var(o.all_outputs().next().unwrap());
            format!("{} {}{} -> {} {}", o.ty, x.ty, "", out.ty, attrs.join(" "))
        })
        .collect()
}

const MLP_HEAD: &str = "var x: f32[8, 8] input\nvar w: f32[8, 8] parameter persistable\nvar h: f32[8, 8] activation\nvar s: f32[8, 8] activation\nvar l: f32[] activation\n";

#[test]
fn every_reshard_primitive() {
    // A row-parallel matmul's partial output: its implementation all-reduces it itself
    // (tensor parallel), so reshard has nothing left to do.
    let partial = format!("{MLP_HEAD}op matmul_v2(X=x, Y=w) -> (Out=h)\nop relu(X=h) -> (Out=s)\nop mean(X=s) -> (Out=l) role=loss\nshard x [-, b]\nshard w [b, -]\n");
    assert_eq!(primitive(&partial), Vec::<String>::new());
    // split -> replicated: all_gather along the split dim.
    let gather = format!("{MLP_HEAD}op matmul_v2(X=x, Y=w) -> (Out=h)\nop softmax(X=h) -> (Out=s) {{axis=1}}\nop mean(X=s) -> (Out=l) role=loss\nshard w [-, b]\n");
    assert_eq!(
        primitive(&gather),
        ["all_gather f32[8, 4] -> f32[8, 8] axis=1 group=[0, 1]"]
    );
    // replicated -> split: a local slice (rank 1 is b-coordinate 1: rows 4..8).
    let slice = format!("{MLP_HEAD}op relu(X=x) -> (Out=h)\nop matmul_v2(X=h, Y=w) -> (Out=s)\nop mean(X=s) -> (Out=l) role=loss\nshard x [-, -]\nshard w [b, -]\nshard h [-, -]\n");
    assert_eq!(
        primitive(&slice),
        ["slice f32[8, 8] -> f32[8, 4] axes=[1] ends=[8] starts=[4]"]
    );
    // split on one dim -> split on another: all_to_all. (The add computes [b, -] from its
    // inputs; its output is pinned [-, b].)
    let all_to_all = format!("{MLP_HEAD}op elementwise_add(X=x, Y=w) -> (Out=h)\nop mean(X=h) -> (Out=l) role=loss\nshard x [b, -]\nshard w [b, -]\nshard h [-, b]\n");
    assert_eq!(
        primitive(&all_to_all),
        [
            "all_to_all f32[4, 8] -> f32[8, 4] concat_axis=0 group=[0, 1] split_axis=1",
            "assign f32[8, 4] -> f32[8, 4] "
        ]
    );
    // partial -> replicated: all_reduce of a reduction over a split dim.
    let reduce = "var x: f32[8, 8] input\nvar w: f32[8] parameter persistable\nvar r: f32[8] activation\nvar h: f32[8] activation\nvar l: f32[] activation\n\
                  op reduce_sum(X=x) -> (Out=r) {dim=[1]}\nop elementwise_add(X=r, Y=w) -> (Out=h)\nop mean(X=h) -> (Out=l) role=loss\nshard x [-, b]\n";
    assert_eq!(
        primitive(reduce),
        ["all_reduce f32[8] -> f32[8] group=[0, 1] reduce_type=\"SUM\""]
    );
    // partial -> split: reduce_scatter.
    let scatter = "var x: f32[8, 8] input\nvar w: f32[8] parameter persistable\nvar r: f32[8] activation\nvar h: f32[8] activation\nvar l: f32[] activation\n\
                   op reduce_sum(X=x) -> (Out=r) {dim=[1]}\nop elementwise_add(X=r, Y=w) -> (Out=h)\nop mean(X=h) -> (Out=l) role=loss\nshard x [-, b]\nshard h [b]\n";
    assert_eq!(
        primitive(scatter),
        ["reduce_scatter f32[8] -> f32[4] axis=0 group=[0, 1] reduce_type=\"SUM\""]
    );
}

fn count(p: &Passes, rank: u32, phase: &str, purpose: Purpose) -> usize {
    p.ledger
        .iter()
        .filter(|e| e.rank == rank && e.phase == phase && e.purpose == purpose)
        .count()
}

#[test]
fn ledger_counts_match_megatron_and_paddle() {
    // Megatron MLP: one tensor-parallel all-reduce forward, none backward (x has no grad).
    let p = run(&Scenario::by_name("megatron_mlp").unwrap().plan().unwrap());
    assert_eq!(count(&p, 0, "forward", Purpose::TensorParallel), 1);
    assert_eq!(count(&p, 0, "backward", Purpose::TensorParallel), 0);
    assert_eq!(count(&p, 0, "backward", Purpose::DataParallel), 0);
    // A transformer layer: 2 forward; Paddle's planner inserts one backward all-reduce per
    // column-parallel matmul (q, k, v, fc1) = 4 (Megatron's optimum, 2, adds the q/k/v
    // partials first).
    for layers in [1, 2] {
        let (_, mesh, shards) = standard_configs(Model::Gpt, layers)
            .into_iter()
            .find(|c| c.0 == "dp_mp")
            .unwrap();
        let p = run(&preset_plan(Model::Gpt, layers, mesh, &shards));
        assert_eq!(count(&p, 5, "forward", Purpose::TensorParallel), 2 * layers);
        assert_eq!(
            count(&p, 5, "backward", Purpose::TensorParallel),
            4 * layers
        );
        assert_eq!(
            count(&p, 5, "backward", Purpose::DataParallel),
            16 * layers + 2,
            "every parameter"
        );
        assert_eq!(
            p.ledger
                .iter()
                .filter(|e| e.purpose == Purpose::Reshard)
                .count(),
            0
        );
        // Ring model: an all-reduce of S bytes over 4 ranks sends 2*3/4*S.
        let fwd = p
            .ledger
            .iter()
            .find(|e| e.rank == 5 && e.purpose == Purpose::TensorParallel)
            .unwrap();
        assert_eq!(
            fwd.bytes_per_rank,
            2.0 * 3.0 / 4.0 * (2 * 16 * 64 * 4) as f64
        );
    }
}

/// With Megatron's sums the q/k/v input gradients stay partial through their sum, which is
/// all-reduced once: 2 forward + 2 backward per layer, Megatron's reference.
#[test]
fn megatron_sums_give_two_backward_all_reduces_per_layer() {
    use shardlab::passes::partition::PartitionOptions;
    let opts = PassOptions {
        partition: PartitionOptions {
            defer_partial_sums: true,
            build_every_rank: false,
            ..PartitionOptions::default()
        },
        ..PassOptions::default()
    };
    for layers in [1, 2] {
        let (_, mesh, shards) = standard_configs(Model::Gpt, layers)
            .into_iter()
            .find(|c| c.0 == "dp_mp")
            .unwrap();
        let p = run_passes(&preset_plan(Model::Gpt, layers, mesh, &shards), &opts).unwrap();
        for rank in [0, 5] {
            assert_eq!(
                count(&p, rank, "forward", Purpose::TensorParallel),
                2 * layers
            );
            assert_eq!(
                count(&p, rank, "backward", Purpose::TensorParallel),
                2 * layers
            );
            assert_eq!(
                count(&p, rank, "backward", Purpose::DataParallel),
                16 * layers + 2
            );
        }
        // The sum of the q/k/v input gradients is followed by the all-reduce of its result.
        let r = &p.partitioned.ranks[5].program;
        let ops = r.ops();
        for l in 0..layers {
            let name = format!("h{l}.ln_1.out@GRAD");
            let i = ops
                .iter()
                .position(|o| {
                    o.ty == OpType::Sum && r.var(o.output("Out")[0]).name.as_ref() == name
                })
                .unwrap_or_else(|| panic!("no sum for {name}"));
            assert_eq!(ops[i + 1].ty, OpType::AllReduce, "{name}");
            assert_eq!(ops[i + 1].input("X"), ops[i].output("Out"));
            assert_eq!(ops[i + 1].attr_ints("group"), Some(&[4i64, 5, 6, 7][..]));
        }
        assert_eq!(
            p.ledger
                .iter()
                .filter(|e| e.purpose == Purpose::Reshard)
                .count(),
            0
        );
    }
}

#[test]
fn amp_and_global_norm_sync_exactly_when_enabled() {
    let plan = Scenario::by_name("gpt_dp_mp").unwrap().plan().unwrap();
    let purposes = |opts: OptimizerOptions| {
        let p = run_passes(
            &plan,
            &PassOptions {
                optimizer: opts,
                ..Default::default()
            },
        )
        .unwrap();
        (
            count(&p, 5, "optimizer", Purpose::AmpFlag),
            count(&p, 5, "optimizer", Purpose::GlobalNorm),
            p,
        )
    };
    let (amp, norm, _) = purposes(OptimizerOptions::default());
    assert_eq!((amp, norm), (0, 0));
    let (amp, norm, p) = purposes(OptimizerOptions {
        amp: true,
        ..Default::default()
    });
    assert_eq!((amp, norm), (1, 0));
    let flag = p
        .ledger
        .iter()
        .find(|e| e.purpose == Purpose::AmpFlag)
        .unwrap();
    assert_eq!(
        flag.group,
        (0..8).collect::<Vec<u32>>(),
        "found_inf is reduced over the whole mesh"
    );
    assert_eq!(flag.reduce_type.as_deref(), Some("MAX"));
    let (amp, norm, p) = purposes(OptimizerOptions {
        clip_norm: Some(1.0),
        optimizer: Optimizer::Adam {
            beta1: 0.9,
            beta2: 0.999,
            epsilon: 1e-8,
        },
        amp: false,
    });
    assert_eq!(amp, 0);
    assert_eq!(
        norm, 1,
        "one all-reduce for the squared norms of the mp-sharded gradients"
    );
    let sync = p
        .ledger
        .iter()
        .find(|e| e.rank == 5 && e.purpose == Purpose::GlobalNorm)
        .unwrap();
    assert_eq!(sync.group, vec![4, 5, 6, 7]);
    assert!(p.partitioned.ranks[0]
        .program
        .ops()
        .iter()
        .any(|o| o.ty == OpType::Adam));
    assert!(p.partitioned.ranks[0]
        .program
        .ops()
        .iter()
        .all(|o| o.ty.class() != OpClass::Grad || o.role == OpRole::Backward));
}

#[test]
fn plans_that_cannot_be_partitioned_name_the_variable() {
    // A mesh too large for the batch: 16 rows over 32 ranks.
    let (plan, _) = parse_plan(&format!("mesh [32] (dp)\n{}shard x [dp, -]\n", "var x: f32[16, 8] input\nvar w: f32[8, 8] parameter persistable\nvar h: f32[16, 8] activation\nvar l: f32[] activation\nop matmul_v2(X=x, Y=w) -> (Out=h)\nop mean(X=h) -> (Out=l) role=loss\n")).unwrap();
    let err = run_passes(&plan, &PassOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(
            "`x` dim 0 has size 16, fewer than the 32 shards `dp` cut it into: some rank would \
             hold nothing of it"
        ),
        "{err}"
    );
    // No loss op.
    let (plan, _) = parse_plan("mesh [2] (dp)\nvar x: f32[4] input\nvar w: f32[4] parameter persistable\nvar y: f32[4] activation\nop elementwise_mul(X=x, Y=w) -> (Out=y)\n").unwrap();
    let err = run_passes(&plan, &PassOptions::default())
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "backward: the program has no loss: mark the op computing it with role=loss"
    );
}

/// Partitioning only some ranks (what the playground does for the rank on screen) gives
/// exactly the programs and ring ids the whole job gets: ids are canonical per mesh.
#[test]
fn partitioning_a_subset_of_ranks_matches_the_whole_job() {
    use shardlab::passes::partition::PartitionOptions;
    for (config, mesh, shards) in standard_configs(Model::Gpt, 1) {
        let plan = preset_plan(Model::Gpt, 1, mesh, &shards);
        let whole = run(&plan);
        for rank in [0u32, 3, 5] {
            let Some(want) = whole.partitioned.ranks.iter().find(|r| r.rank == rank) else {
                continue;
            };
            let opts = PassOptions {
                partition: PartitionOptions {
                    ranks: Some(vec![rank]),
                    ..PartitionOptions::default()
                },
                ..PassOptions::default()
            };
            let only = run_passes(&plan, &opts).unwrap();
            assert_eq!(only.partitioned.ranks.len(), 1, "{config} rank {rank}");
            let got = &only.partitioned.ranks[0];
            assert_eq!(got.rank, rank);
            assert_eq!(
                got.program.to_string(),
                want.program.to_string(),
                "{config} rank {rank}"
            );
            for (id, g) in &only.partitioned.groups.rings {
                assert_eq!(
                    whole.partitioned.groups.rings.get(id),
                    Some(g),
                    "{config} ring {id}"
                );
            }
        }
    }
}

/// A mesh too large to enumerate every group still partitions, with one id per group.
#[test]
fn large_meshes_number_groups_consistently() {
    let mesh = "2x2x2x2x2x2x2x2x2x2x2x2:a,b,c,d,e,f,g,h,i,j,k,l";
    let shards = ["x=a,-".to_string(), "linear_0.w_0=-,b".to_string()];
    let p = run(&preset_plan(Model::Mlp, 0, mesh, &shards));
    assert_eq!(p.partitioned.ranks.len(), 4096);
    let mut seen = std::collections::HashSet::new();
    for g in p.partitioned.groups.rings.values() {
        assert!(seen.insert(g.clone()), "group {g:?} has two ids");
    }
}

/// The optimizer pass only appends, so the backward stage is a prefix of the full program:
/// the pipeline keeps one copy and cuts the backward stage out of it.
#[test]
fn the_backward_stage_is_a_prefix_of_the_full_program() {
    use shardlab::passes::complete_backward::complete_backward;
    let options = [
        OptimizerOptions::default(),
        OptimizerOptions {
            optimizer: Optimizer::from_name("adamw").unwrap(),
            amp: true,
            clip_norm: Some(1.0),
        },
    ];
    for (config, mesh, shards) in standard_configs(Model::Gpt, 1) {
        for optimizer in &options {
            let opts = PassOptions {
                optimizer: optimizer.clone(),
                ..PassOptions::default()
            };
            let p = run_passes(&preset_plan(Model::Gpt, 1, mesh, &shards), &opts).unwrap();
            let want = complete_backward(&p.backward, &p.completed);
            let got = p.backward_dist();
            assert_eq!(got.program, want.program, "{config} {optimizer:?}");
            assert_eq!(
                format!("{:?}{:?}", got.tensors, got.ops),
                format!("{:?}{:?}", want.tensors, want.ops),
                "{config} {optimizer:?}"
            );
            assert!(p.full.program.ops().len() > got.program.ops().len());
        }
    }
}

/// A vocabulary-split LM head: the cross-entropy gathers the logits once and computes the
/// softmax whole, and the softmax is laid out whole, so nothing slices it after the op or
/// gathers it again in backward; the logits' gradient is sliced back locally.
#[test]
fn vocab_split_lm_head_runs_vocab_parallel_cross_entropy() {
    let plan = common::plan_with(
        Model::EmbeddingLm
            .build(&Model::EmbeddingLm.default_config())
            .unwrap(),
        "2x4:dp,mp",
        &["ids=dp,-", "lm_head.w=-,mp"],
    );
    let p = run(&plan);
    // The logits are never gathered: no reshard anywhere.
    for r in &p.partitioned.ranks {
        let reshards: Vec<String> = r
            .program
            .ops()
            .iter()
            .filter(|o| o.namescope == "/auto_parallel/reshard")
            .map(|o| o.ty.to_string())
            .collect();
        assert!(reshards.is_empty(), "rank {}: {reshards:?}", r.rank);
    }
    // Each rank's op reduces over its mp row of the mesh from its first vocab column.
    let vocab_ops = |rank: usize| -> Vec<String> {
        let prog = &p.partitioned.ranks[rank].program;
        prog.ops()
            .iter()
            .filter(|o| o.ty.to_string().starts_with("c_softmax"))
            .map(|o| {
                format!(
                    "{} {} group={:?} rank={} nranks={} start={}",
                    o.role.name(),
                    o.ty,
                    o.attr_ints("group").unwrap(),
                    o.attr_int("rank", -1),
                    o.attr_int("nranks", -1),
                    o.attr_int("start_index", -1)
                )
            })
            .collect()
    };
    assert_eq!(
        vocab_ops(0),
        [
            "forward c_softmax_with_cross_entropy group=[0, 1, 2, 3] rank=0 nranks=4 start=0",
            "backward c_softmax_with_cross_entropy_grad group=[0, 1, 2, 3] rank=0 nranks=4 start=0"
        ]
    );
    assert_eq!(
        vocab_ops(6),
        [
            "forward c_softmax_with_cross_entropy group=[4, 5, 6, 7] rank=2 nranks=4 start=128",
            "backward c_softmax_with_cross_entropy_grad group=[4, 5, 6, 7] rank=2 nranks=4 start=128"
        ]
    );
    // The softmax stays split on the classes; the loss is whole on every mp rank.
    let attr = |name: &str| &p.full.tensors[p.full.program.var_id(name).unwrap().index()];
    assert_eq!(
        attr("logits.softmax").axis_lists(),
        vec![vec![0], vec![], vec![1]]
    );
    assert_eq!(
        attr("loss.tokens").axis_lists(),
        vec![vec![0], vec![], vec![]]
    );
    assert!(attr("loss.tokens").partial.is_empty());
    let ce = p
        .full
        .program
        .ops()
        .iter()
        .position(|o| o.ty.to_string() == "softmax_with_cross_entropy")
        .unwrap();
    let op_attr = &p.full.ops[ce];
    assert_eq!(op_attr.imp.paddle_id(), ("softmax_with_cross_entropy", 1));
}

/// Every ledger entry's bytes follow the ring model, recomputed here from the op's tensors:
/// all-reduce 2(n-1)/n of its input, all-gather (n-1)/n of its output, reduce-scatter and
/// all-to-all (n-1)/n of the input, the vocab-parallel cross-entropy three all-reduces of its
/// loss. Plans with each kind of collective.
#[test]
fn ledger_bytes_follow_the_ring_model() {
    let model_plans = [
        preset_plan(
            Model::Mlp,
            0,
            "2x4:dp,mp",
            &[
                "x=dp+mp,-".to_string(),
                "linear_0.tmp_0=-,dp+mp".to_string(),
            ],
        ),
        preset_plan(
            Model::Mlp,
            0,
            "4:dp",
            &["x=dp,-".to_string(), "linear_0.tmp_1=-,dp".to_string()],
        ),
        common::plan_with(
            Model::EmbeddingLm
                .build(&Model::EmbeddingLm.default_config())
                .unwrap(),
            "2x4:dp,mp",
            &["ids=dp,-", "lm_head.w=-,mp"],
        ),
        Scenario::by_name("reshard_conflict")
            .unwrap()
            .plan()
            .unwrap(),
    ];
    let mut kinds = std::collections::BTreeSet::new();
    for plan in &model_plans {
        let p = run(plan);
        for e in &p.ledger {
            let prog = &p
                .partitioned
                .ranks
                .iter()
                .find(|r| r.rank == e.rank)
                .unwrap()
                .program;
            let op = &prog.ops()[e.op_index];
            let bytes = |slot: &str, output: bool| {
                let v = if output {
                    op.output(slot)
                } else {
                    op.input(slot)
                }[0];
                let t = &prog.var(v).ty;
                (t.shape.iter().product::<usize>() * t.dtype.size_bytes()) as f64
            };
            let n = e.group.len() as f64;
            let want = match e.kind {
                "all_reduce" => 2.0 * (n - 1.0) / n * bytes("X", false),
                "all_gather" => (n - 1.0) / n * bytes("Out", true),
                "reduce_scatter" | "all_to_all" => (n - 1.0) / n * bytes("X", false),
                "c_softmax_with_cross_entropy" => 3.0 * 2.0 * (n - 1.0) / n * bytes("Loss", true),
                other => panic!("unexpected collective {other}"),
            };
            assert_eq!(e.bytes_per_rank, want, "{e:?}");
            kinds.insert(e.kind);
        }
    }
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        [
            "all_gather",
            "all_reduce",
            "all_to_all",
            "c_softmax_with_cross_entropy"
        ]
    );
}

/// Completion records the vocab-parallel embedding's implementation on the op when the
/// table's rows are split (and the plain one otherwise), as Paddle's container and index.
#[test]
fn completion_records_the_vocab_parallel_embedding() {
    use shardlab::dist::DistImpl;
    let imp = |shards: &[&str]| {
        let plan = common::plan_with(
            Model::EmbeddingLm
                .build(&Model::EmbeddingLm.default_config())
                .unwrap(),
            "2x4:dp,mp",
            shards,
        );
        let c = shardlab::passes::complete(&plan).unwrap();
        let i = plan
            .program
            .ops()
            .iter()
            .position(|o| o.ty.to_string() == "lookup_table_v2")
            .unwrap();
        c.ops[i].imp
    };
    assert_eq!(imp(&["wte=mp,-"]), DistImpl::EmbeddingVocab);
    assert_eq!(imp(&["wte=-,mp"]), DistImpl::Default);
}
