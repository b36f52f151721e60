//! `passes::pipeline::rebatch`: a planned pipeline given another micro-batch size equals the pipeline
//! planned afresh at that size, program for program, and it refuses where re-inference
//! could be inexact.
#![cfg(not(target_arch = "wasm32"))]

use shardlab::ir::{Attr, Op, OpType, Program, VarKind};
use shardlab::models::{Model, ModelConfig};
use shardlab::passes::complete::trace::{Conflict, Direction, Event, EventKind};
use shardlab::passes::driver::{run_passes, PassOptions, Passes};
use shardlab::passes::pipeline::rebatch::{rebatch, RebatchError};
use shardlab::plan::{parse_mesh_spec, parse_shard_spec, OptimizerKind, Plan};
use std::sync::Arc;

fn gpt(batch: usize) -> Program {
    let config = ModelConfig {
        layers: 2,
        batch,
        ..Model::Gpt.default_config()
    };
    Model::Gpt.build(&config).expect("builds")
}

/// The 2-layer gpt at `batch` on a [2, 2] (dp, mp) mesh, Megatron with the batch over dp,
/// Adam and `micro_batches`.
fn planned(batch: usize, micro_batches: usize) -> Passes {
    let mut plan = Plan::from_program(gpt(batch));
    let mesh = Arc::new(parse_mesh_spec("2x2:dp,mp").expect("mesh"));
    plan.set_mesh(mesh.clone());
    let mut shards = vec!["x=dp,-,-".to_string()];
    for i in 0..2 {
        for col in ["attn.q", "attn.k", "attn.v", "mlp.fc1"] {
            shards.push(format!("h{i}.{col}.w=-,mp"));
        }
        for row in ["attn.o", "mlp.fc2"] {
            shards.push(format!("h{i}.{row}.w=mp,-"));
        }
    }
    for s in shards {
        let a = parse_shard_spec(&s, &plan.program, &mesh).expect("annotation");
        plan.annotations.push(a);
    }
    plan.options.optimizer = OptimizerKind::Adam;
    plan.options.micro_batches = micro_batches;
    run_passes(&plan, &PassOptions::from_plan(&plan.options)).expect("plans")
}

#[test]
fn a_rebatched_pipeline_equals_the_one_planned_afresh() {
    for (from, to) in [(8, 4), (4, 8), (16, 2)] {
        let mut p = planned(from, 2);
        rebatch(&mut p, &gpt(to), 3).expect("rebatches");
        p.repartition(&PassOptions::from_plan(&p.plan.options).partition)
            .expect("re-partitions");
        let fresh = planned(to, 3);
        assert_eq!(p.plan.program, fresh.plan.program, "{from} -> {to}");
        assert_eq!(p.backward.program, fresh.backward.program, "{from} -> {to}");
        assert_eq!(p.full.program, fresh.full.program, "{from} -> {to}");
        assert_eq!(p.full.tensors, fresh.full.tensors, "{from} -> {to}");
        assert_eq!(p.plan.options, fresh.plan.options);
        assert_eq!(p.partitioned.ranks.len(), 4);
        for (a, b) in p.partitioned.ranks.iter().zip(&fresh.partitioned.ranks) {
            assert_eq!(a.program, b.program, "rank {} {from} -> {to}", a.rank);
        }
    }
}

#[test]
fn a_split_dim_of_size_one_that_changes_is_refused() {
    // The batch of 2 is split over dp; at 1 it could not be.
    let mut p = planned(2, 1);
    let err = rebatch(&mut p, &gpt(1), 2).expect_err("refused");
    assert!(matches!(err, RebatchError::SplitSizeOne(_)), "{err}");
}

#[test]
fn a_split_completion_rejected_as_uneven_is_refused() {
    let mut p = planned(8, 1);
    let first = p.completed.trace.events.first().copied().expect("events");
    p.completed.trace.events.push(Event {
        kind: EventKind::Rejected(Conflict::TooSmall),
        direction: Direction::Forward,
        ..first
    });
    let err = rebatch(&mut p, &gpt(4), 2).expect_err("refused");
    assert_eq!(err, RebatchError::TooSmall);
}

#[test]
fn a_shape_attribute_of_its_own_is_refused() {
    let mut p = planned(8, 1);
    let before = p.full.program.clone();
    let zeros = p
        .full
        .program
        .declare(
            "zeros",
            p.full.program.var(p.backward.loss).ty.clone(),
            VarKind::Gradient,
        )
        .expect("declares");
    let mut fill = Op::new(OpType::FillConstant);
    fill.outputs = shardlab::slots![[zeros]];
    fill.attrs.insert("shape".into(), Attr::Ints(vec![8, 16]));
    p.full.program.push_op(fill);
    let err = rebatch(&mut p, &gpt(4), 2).expect_err("refused");
    assert!(matches!(err, RebatchError::OwnShape { .. }), "{err}");
    // Refused without a change.
    assert_eq!(p.full.program.vars().len(), before.vars().len() + 1);
    assert_eq!(p.plan.options.micro_batches, 1);
}
