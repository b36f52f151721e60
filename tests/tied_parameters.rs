//! Tied parameters across pipeline stages (`passes::pipeline::tied`): GPT's word embedding
//! is read by the lookup on the first stage and by the logits on the last. The last stage
//! holds a copy, each stage's share of the gradient is all-reduced over the two stages at
//! the start of the optimizer phase, and both copies take the same update. Checked here:
//! the tied step is the untied model's step (loss, gradient and parameters, with clipping
//! that counts the tied gradient once), every replica of every copy equals the serial step
//! under dp, tp, ZeRO, AMP, micro-batches and interleaved stages, and the rank programs
//! hold exactly one tied all-reduce per rank of a tied stage, over the right pair.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use shardlab::exec::run::{run_serial, RunOptions};
use shardlab::ir::{DType, OpType, Purpose};
use shardlab::models::{Model, ModelConfig};
use shardlab::passes::driver::{run_passes, PassOptions, Passes};
use shardlab::plan::parallel::Parallel;
use shardlab::plan::{OptimizerKind, Plan, PlanOptions, ScheduleKind};

/// `gpt_lm` (tied embedding) in f64 with `layers` layers under `spec`, and `options`
/// (plan-file option statements such as `micro_batches=4`).
fn plan_of(layers: usize, spec: &str, options: &[(&str, &str)]) -> Plan {
    let cfg = ModelConfig {
        layers,
        dtype: DType::F64,
        ..Model::GptLm.default_config()
    };
    let program = Model::GptLm.build(&cfg).unwrap();
    let p = Parallel::parse(spec).unwrap();
    let shards = p.shard_specs(&program);
    let mut plan = common::plan_with(program, &p.mesh_spec(), &shards);
    for (key, value) in options {
        set(&mut plan.options, key, value);
    }
    plan
}

fn set(o: &mut PlanOptions, key: &str, value: &str) {
    match key {
        "optimizer" => o.optimizer = OptimizerKind::from_name(value).unwrap(),
        "amp" => o.amp = value == "true",
        "clip_norm" => o.clip_norm = Some(value.parse().unwrap()),
        "zero" => o.zero = value.parse().unwrap(),
        "micro_batches" => o.micro_batches = value.parse().unwrap(),
        "chunks" => o.chunks = value.parse().unwrap(),
        "schedule" => o.schedule = ScheduleKind::from_name(value).unwrap(),
        other => panic!("option {other}"),
    }
}

fn planned(plan: &Plan) -> Passes {
    run_passes(plan, &PassOptions::from_plan(&plan.options)).unwrap_or_else(|e| panic!("{e}"))
}

/// The tied all-reduces of `rank`'s program, as (variable, group).
fn tied_all_reduces(p: &Passes, rank: u32) -> Vec<(String, Vec<i64>)> {
    let r = p.partitioned.ranks.iter().find(|r| r.rank == rank).unwrap();
    r.program
        .ops()
        .iter()
        .filter(|o| o.purpose() == Some(Purpose::TiedParameter))
        .map(|o| {
            assert_eq!(o.ty, OpType::AllReduce, "{o:?}");
            assert_eq!(o.attr_str("reduce_type"), Some("SUM"));
            let x = o.input("X")[0];
            let group = match o.attrs.get("group") {
                Some(shardlab::ir::Attr::Ints(g)) => g.clone(),
                other => panic!("group {other:?}"),
            };
            (r.program.var(x).name.to_string(), group)
        })
        .collect()
}

#[test]
fn the_last_stage_reads_a_copy_and_only_the_tied_stages_all_reduce() {
    // pp=4 × dp=2: stage s holds ranks 2s and 2s+1 (pp outermost, Megatron's order).
    let p = planned(&plan_of(4, "dp=2,pp=4", &[]));
    assert_eq!(
        p.ties.len(),
        1,
        "wte is the one parameter read on two stages"
    );
    let copy = p.plan.program.var(p.ties[0].copies[0]);
    assert_eq!(&*copy.name, "wte@TIED@3");
    let logits = p
        .plan
        .program
        .ops()
        .iter()
        .find(|o| {
            o.ty == OpType::MatmulV2
                && o.output("Out")
                    .first()
                    .map(|&v| &*p.plan.program.var(v).name)
                    == Some("logits")
        })
        .unwrap();
    assert_eq!(logits.input("Y"), &[p.ties[0].copies[0]]);
    let want = |var: &str, group: [i64; 2]| vec![(var.to_string(), group.to_vec())];
    assert_eq!(tied_all_reduces(&p, 0), want("wte@GRAD", [0, 6]));
    assert_eq!(tied_all_reduces(&p, 1), want("wte@GRAD", [1, 7]));
    assert_eq!(tied_all_reduces(&p, 6), want("wte@TIED@3@GRAD", [0, 6]));
    assert_eq!(tied_all_reduces(&p, 7), want("wte@TIED@3@GRAD", [1, 7]));
    for middle in 2..6 {
        assert_eq!(tied_all_reduces(&p, middle), vec![], "rank {middle}");
    }
    // The ledger prices each at the gradient's bytes: 256 × 64 f64.
    let tied: Vec<_> = p
        .ledger
        .iter()
        .filter(|e| e.purpose == Purpose::TiedParameter)
        .collect();
    assert_eq!(tied.len(), 4);
    assert!(
        tied.iter()
            .all(|e| e.bytes_per_rank == (256 * 64 * 8) as f64),
        "{tied:?}"
    );
}

#[test]
fn the_tied_step_is_the_untied_step() {
    // Clipping at a small norm makes the step depend on the global norm, which must count
    // the tied gradient once; AdamW and two steps check that both copies keep moving alike.
    let options = [("optimizer", "adamw"), ("clip_norm", "0.01")];
    let run = RunOptions {
        steps: 2,
        ..Default::default()
    };
    let untied = run_serial(&planned(&plan_of(4, "dp=2", &options)), &run).unwrap();
    let tied = run_serial(&planned(&plan_of(4, "dp=2,pp=2", &options)), &run).unwrap();
    assert_eq!(untied.losses, tied.losses);
    let param = |log: &shardlab::exec::run::Log, name: &str| {
        log.params
            .iter()
            .find(|r| r.name == name)
            .and_then(|r| r.value().cloned())
            .unwrap_or_else(|| panic!("no {name} in {:?}", names(log)))
    };
    let wte = param(&untied, "wte");
    assert_eq!(param(&tied, "wte"), wte);
    assert_eq!(param(&tied, "wte@TIED@1"), wte);
    assert_eq!(param(&tied, "h3.mlp.fc2.w"), param(&untied, "h3.mlp.fc2.w"));
    // The first step's gradient of each copy is the whole gradient, as untied.
    let grad = |log: &shardlab::exec::run::Log, name: &str| {
        let r = log.grads.iter().find(|r| r.name == name);
        r.and_then(|r| r.value().cloned())
            .unwrap_or_else(|| panic!("no {name}"))
    };
    let g = grad(&untied, "wte");
    assert_eq!(grad(&tied, "wte"), g);
    assert_eq!(grad(&tied, "wte@TIED@1"), g);
}

fn names(log: &shardlab::exec::run::Log) -> Vec<&str> {
    log.params.iter().map(|r| r.name.as_str()).collect()
}

#[test]
fn tied_pipelines_run_distributed_equal_to_serial() {
    let cases: &[(&str, &[(&str, &str)])] = &[
        ("pp=2", &[]),
        ("tp=2,pp=2", &[("optimizer", "adam")]),
        ("dp=2,pp=4", &[("micro_batches", "4")]),
        (
            "dp=2,pp=2",
            &[
                ("optimizer", "adamw"),
                ("amp", "true"),
                ("clip_norm", "0.01"),
            ],
        ),
        ("dp=2,pp=2", &[("zero", "1"), ("optimizer", "adam")]),
        ("dp=2,pp=2", &[("zero", "3"), ("optimizer", "adam")]),
        (
            "pp=2",
            &[("schedule", "vpp"), ("chunks", "2"), ("micro_batches", "4")],
        ),
    ];
    let mut failed = Vec::new();
    for (spec, options) in cases {
        let p = planned(&plan_of(4, spec, options));
        assert_eq!(p.ties.len(), 1, "{spec} {options:?}");
        if let Err(e) = common::verifies_against_serial(&p, 2) {
            failed.push(format!("{spec} {options:?}: {e}"));
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}

#[test]
fn without_a_pipeline_nothing_is_tied() {
    let p = planned(&plan_of(2, "dp=2,tp=2", &[]));
    assert!(p.ties.is_empty());
    assert!(p
        .full
        .program
        .vars()
        .iter()
        .all(|v| !v.name.contains("@TIED@")));
}
