//! `--parallel ...,sp`: Megatron sequence parallelism found by pattern. The stream between
//! tensor-parallel layers is split on the sequence over `tp`, each column-parallel layer reads
//! it through an all-gather, each row-parallel one lands on it through a reduce-scatter, no
//! forward all-reduce is left over the `tp` group, and the step runs distributed equal to
//! serial.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use shardlab::ir::{OpRole, OpType, Program};
use shardlab::models::{Model, ModelConfig};
use shardlab::passes::driver::{run_passes, PassOptions, Passes};
use shardlab::plan::parallel::Parallel;

fn planned(model: Model, layers: usize, spec: &str) -> (Passes, Program) {
    let cfg = ModelConfig {
        layers,
        dtype: shardlab::ir::DType::F64,
        ..model.default_config()
    };
    let p = Parallel::parse(spec).unwrap();
    let program = p.prepare(&model.build(&cfg).unwrap());
    let shards = p.shard_specs(&program);
    let mut plan = common::plan_with(program.clone(), &p.mesh_spec(), &shards);
    p.set_options(&mut plan.options);
    let passes = run_passes(&plan, &PassOptions::from_plan(&plan.options))
        .unwrap_or_else(|e| panic!("{model:?} {spec}: {e}"));
    (passes, program)
}

/// The forward collectives of rank 0's program, by type.
fn forward_collectives(p: &Passes, ty: OpType) -> usize {
    p.partitioned.ranks[0]
        .program
        .ops()
        .iter()
        .filter(|o| o.ty == ty && matches!(o.role, OpRole::Forward | OpRole::Loss))
        .count()
}

#[test]
fn sp_parses_without_a_degree_and_needs_tp() {
    let p = Parallel::parse("dp=2,tp=4,sp").unwrap();
    assert!(p.sp && p.tp == 4 && p.dp == 2);
    assert_eq!(p.mesh_spec(), "2x4:dp,tp", "sp adds no mesh axis");
    let err = |s: &str| Parallel::parse(s).unwrap_err().to_string();
    assert_eq!(
        err("dp=8,sp"),
        "`sp` splits the sequence over the tensor-parallel group, so it needs tp > 1"
    );
    assert_eq!(
        err("tp=2,sp=2"),
        "`sp` takes no degree: it is sequence parallelism over the tp group"
    );
    assert_eq!(err("tp=2,sp,sp"), "`sp` is given twice");
}

#[test]
fn every_column_parallel_layer_reads_through_one_gather_point() {
    let cfg = ModelConfig {
        layers: 2,
        ..Model::Llama.default_config()
    };
    let program = Model::Llama.build(&cfg).unwrap();
    let p = Parallel::parse("tp=2,sp").unwrap();
    let prepared = p.prepare(&program);
    let gathered: Vec<String> = prepared
        .vars()
        .iter()
        .filter(|v| v.name.ends_with(".gathered"))
        .map(|v| v.name.to_string())
        .collect();
    // Per block the attention's and the MLP's norm outputs, then the final norm's (the LM
    // head): q, k, v share one, gate and up share one. The embedding's output is read
    // through one scatter point.
    assert_eq!(gathered.len(), 2 * 2 + 1, "{gathered:?}");
    let scattered: Vec<&str> = prepared
        .vars()
        .iter()
        .filter(|v| v.name.ends_with(".scattered"))
        .map(|v| &*v.name)
        .collect();
    assert_eq!(scattered, ["emb.scattered"]);
    // Every variable keeps its id, and preparing twice changes nothing.
    for (a, b) in program.vars().iter().zip(prepared.vars().iter()) {
        assert_eq!(a.name, b.name);
    }
    assert_eq!(p.prepare(&prepared).ops().len(), prepared.ops().len());
    // Without sp the program is untouched.
    let plain = Parallel::parse("tp=2").unwrap().prepare(&program);
    assert_eq!(plain.ops().len(), program.ops().len());
}

#[test]
fn the_stream_is_gathered_and_reduce_scattered_not_all_reduced() {
    for (model, layers, spec) in [
        (Model::GptLm, 2, "dp=2,tp=2,sp"),
        (Model::Llama, 2, "tp=2,sp"),
        (Model::Gpt, 2, "dp=2,tp=2,sp"),
    ] {
        let (p, _) = planned(model, layers, spec);
        let gathers = forward_collectives(&p, OpType::AllGather);
        let scatters = forward_collectives(&p, OpType::ReduceScatter);
        let reduces = forward_collectives(&p, OpType::AllReduce);
        // Two gathers and two reduce-scatters a block; the LM models gather once more for
        // their head. Their vocab-parallel embedding all-reduces its lookup, then each rank
        // keeps its part of the sequence (Megatron reduce-scatters there: docs/status.md).
        let lm = model != Model::Gpt;
        let listing: Vec<String> = p.partitioned.ranks[0]
            .program
            .ops()
            .iter()
            .filter(|o| o.ty == OpType::AllGather)
            .map(|o| format!("{:?} {:?}", o.role, o.input("X")))
            .collect();
        assert_eq!(
            gathers,
            2 * layers + usize::from(lm),
            "{model:?}: all-gathers {listing:?}"
        );
        assert_eq!(scatters, 2 * layers, "{model:?}: reduce-scatters");
        assert_eq!(
            reduces,
            usize::from(lm),
            "{model:?} {spec}: forward all-reduces"
        );
        // Without sp, the same model all-reduces each row-parallel output instead.
        let plain = spec.trim_end_matches(",sp");
        let (q, _) = planned(model, layers, plain);
        assert_eq!(forward_collectives(&q, OpType::ReduceScatter), 0, "{plain}");
        assert!(
            forward_collectives(&q, OpType::AllReduce) >= 2 * layers,
            "{plain}"
        );
    }
}

/// Backward is forward's mirror: each gathered input's gradient (its contributions summed
/// while partial) is reduce-scattered onto the ranks' parts of the sequence, not
/// all-reduced and cut (Megatron's; twice the bytes otherwise).
#[test]
fn the_gathered_inputs_gradients_are_reduce_scattered() {
    for (model, layers, spec) in [
        (Model::GptLm, 2, "dp=2,tp=2,sp"),
        (Model::Llama, 2, "tp=2,sp"),
        (Model::Gpt, 2, "dp=2,tp=2,sp"),
    ] {
        let (p, _) = planned(model, layers, spec);
        let rank0 = &p.partitioned.ranks[0].program;
        let backward = |ty: OpType| -> Vec<String> {
            rank0
                .ops()
                .iter()
                .filter(|o| o.ty == ty && o.role == OpRole::Backward)
                .flat_map(|o| o.input("X").iter().map(|&v| rank0.var(v).name.to_string()))
                .filter(|n| n.contains(".gathered@GRAD"))
                .collect()
        };
        let lm = usize::from(model != Model::Gpt);
        let scattered = backward(OpType::ReduceScatter);
        assert_eq!(scattered.len(), 2 * layers + lm, "{model:?}: {scattered:?}");
        assert_eq!(
            backward(OpType::AllReduce),
            Vec::<String>::new(),
            "{model:?}"
        );
        // Each moves (t−1)/t of the gathered [batch, seq, hidden] gradient.
        let cfg = model.default_config();
        let t = 2.0;
        let elems = (cfg.batch * cfg.seq * cfg.hidden) as f64 / spec_dp(spec) as f64;
        for e in shardlab::passes::ledger::ledger(&p.partitioned)
            .iter()
            .filter(|e| e.rank == 0 && e.kind == "reduce_scatter" && e.phase == "backward")
            .filter(|e| e.tensor.contains(".gathered@GRAD"))
        {
            assert_eq!(e.bytes_per_rank, elems * 8.0 * (t - 1.0) / t, "{e:?}");
        }
    }
}

fn spec_dp(spec: &str) -> usize {
    Parallel::parse(spec).unwrap().dp
}

#[test]
fn sequence_parallel_strategies_run_distributed_equal_to_serial() {
    for (model, spec) in [
        (Model::GptLm, "dp=2,tp=2,sp"),
        (Model::Llama, "tp=2,sp"),
        (Model::Gpt, "dp=2,tp=2,sp"),
    ] {
        let (p, _) = planned(model, 2, spec);
        if let Err(failed) = common::verifies_against_serial(&p, 1) {
            panic!("{model:?} {spec}: {failed}");
        }
    }
}
