//! Activation memory against Korthikanti et al., "Reducing Activation Recomputation in
//! Large Transformer Models" (2022), §4: a GPT layer without recomputation saves
//! `s·b·h·(34 + 5·a·s/h)` bytes of 16-bit activations, and `s·b·h·(10 + 24/t + 5·a·s/(h·t))`
//! under t-way tensor parallelism. Our GPT block has no dropout, so the paper's dropout
//! terms come off: the attention-output and MLP dropout masks (`s·b·h` bytes each, on every
//! rank) and the attention dropout's mask and output (`a·s²·b` and `2·a·s²·b`, split t
//! ways). What stays is `s·b·h·(8 + 24/t + 2·a·s/(h·t))`, which the memory model must give
//! exactly, plus the layer norms' mean and variance (`2·s·b` elements each), which the
//! paper leaves out as small.
//!
//! Checked twice: the activations of one layer live at the start of backward, and the
//! growth of the activations at the peak when a layer is added. Under sequence parallelism
//! the paper's `s·b·h·(34 + 5·a·s/h)/t` holds once the two gathered layer-norm outputs,
//! which the plan keeps whole and Megatron gathers again in backward, are added.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use shardlab::cost::memory::{live_ranges, memory, Category, Sizing};
use shardlab::cost::work::ElementBytes;
use shardlab::ir::{OpRole, VarKind};
use shardlab::models::{Model, ModelConfig};
use shardlab::passes::driver::{run_passes, PassOptions, Passes};
use shardlab::plan::parallel::Parallel;

/// 16-bit activations, as the paper counts them.
const BF16: Sizing = Sizing {
    elem: ElementBytes(2.0),
    mixed_precision: false,
    zero: None,
};

struct Dims {
    s: f64,
    b: f64,
    h: f64,
    a: f64,
}

fn config(layers: usize) -> ModelConfig {
    ModelConfig {
        layers,
        batch: 2,
        seq: 128,
        hidden: 256,
        heads: 8,
        ..Model::Gpt.default_config()
    }
}

fn dims(cfg: &ModelConfig) -> Dims {
    Dims {
        s: cfg.seq as f64,
        b: cfg.batch as f64,
        h: cfg.hidden as f64,
        a: cfg.heads as f64,
    }
}

/// The paper's bytes per layer under t-way tensor parallelism (t = 1: none).
fn korthikanti(d: &Dims, t: f64) -> f64 {
    d.s * d.b * d.h * (10.0 + 24.0 / t + 5.0 * d.a * d.s / (d.h * t))
}

/// The paper's dropout terms, which a block without dropout does not save.
fn dropout_terms(d: &Dims, t: f64) -> f64 {
    2.0 * d.s * d.b * d.h + 3.0 * d.a * d.s * d.s * d.b / t
}

/// The two layer norms' mean and variance, `s·b` elements each, at 2 bytes.
fn norm_statistics(d: &Dims) -> f64 {
    4.0 * d.s * d.b * 2.0
}

fn planned(layers: usize, spec: &str) -> Passes {
    let p = Parallel::parse(spec).unwrap();
    let program = Model::Gpt.build(&config(layers)).unwrap();
    let shards = p.shard_specs(&program);
    let plan = common::plan_with(program, &p.mesh_spec(), &shards);
    run_passes(&plan, &PassOptions::from_plan(&plan.options)).unwrap()
}

/// Bytes of layer `h{layer}`'s activations live at rank 0's first backward op.
fn saved_by_layer(p: &Passes, layer: usize) -> f64 {
    let r = &p.partitioned.ranks[0].program;
    let live = live_ranges(r);
    let first_backward = r
        .ops()
        .iter()
        .position(|o| o.role == OpRole::Backward)
        .unwrap();
    let prefix = format!("h{layer}.");
    r.vars()
        .iter()
        .enumerate()
        .filter(|(i, v)| {
            v.kind == VarKind::Activation
                && v.name.starts_with(&prefix)
                && live[*i].is_some_and(|l| l.contains(first_backward))
        })
        .map(|(i, _)| BF16.bytes(r, shardlab::ir::VarId(i as u32)))
        .sum()
}

fn activations_at_peak(p: &Passes) -> f64 {
    let m = memory(&p.partitioned.ranks[0].program, BF16);
    m.breakdown
        .iter()
        .find(|(c, _)| *c == Category::Activation)
        .map_or(0.0, |c| c.1)
}

#[test]
fn a_layer_saves_what_korthikanti_counts_without_dropout() {
    let d = dims(&config(1));
    for (spec, t) in [
        ("dp=1", 1.0),
        ("tp=2", 2.0),
        ("tp=4", 4.0),
        ("dp=2,tp=4", 4.0),
    ] {
        let want = korthikanti(&d, t) - dropout_terms(&d, t) + norm_statistics(&d);
        let p = planned(3, spec);
        for layer in 0..3 {
            let got = saved_by_layer(&p, layer);
            // The batch is split over dp: each rank saves its share.
            let dp = Parallel::parse(spec).unwrap().dp as f64;
            assert_eq!(got, want / dp, "{spec}, layer {layer}");
        }
        // A layer more puts exactly that much more at the peak.
        let grown = activations_at_peak(&planned(4, spec)) - activations_at_peak(&p);
        let dp = Parallel::parse(spec).unwrap().dp as f64;
        assert_eq!(grown, want / dp, "{spec}: growth of the peak");
    }
}

/// The paper's headline numbers: without dropout a layer's 16-bit activations are
/// `s·b·h·(32 + 2as/h)` bytes, i.e. (34 + 5as/h) less the dropout's (2 + 3as/h).
#[test]
fn the_dropout_free_form_is_the_paper_s_less_its_dropout_terms() {
    let d = dims(&config(1));
    let sbh = d.s * d.b * d.h;
    let free = korthikanti(&d, 1.0) - dropout_terms(&d, 1.0);
    assert_eq!(free, sbh * (32.0 + 2.0 * d.a * d.s / d.h));
    assert_eq!(
        korthikanti(&d, 1.0),
        sbh * (34.0 + 5.0 * d.a * d.s / d.h),
        "the paper's no-parallelism form"
    );
}

fn planned_sp(layers: usize, spec: &str) -> Passes {
    let par = Parallel::parse(spec).unwrap();
    let program = par.prepare(&Model::Gpt.build(&config(layers)).unwrap());
    let shards = par.shard_specs(&program);
    let plan = common::plan_with(program, &par.mesh_spec(), &shards);
    run_passes(&plan, &PassOptions::from_plan(&plan.options)).unwrap()
}

/// Sequence parallelism (`--parallel tp=t,sp`): the paper's `s·b·h·(34 + 5·a·s/h)/t`, less
/// its dropout terms (split t ways too), plus the norms' statistics split t ways, plus what
/// Megatron does not keep: the two gathered layer-norm outputs each column-parallel layer
/// reads, `2·s·b·h` bytes each whole, where Megatron keeps its `1/t` share and gathers it
/// again in backward (§4.2.2). The plan keeps the gather's output as Paddle's reshard does.
#[test]
fn sequence_parallelism_saves_korthikantis_split_form_plus_the_gathered_inputs() {
    let d = dims(&config(1));
    for (spec, t) in [("tp=2,sp", 2.0), ("tp=4,sp", 4.0), ("dp=2,tp=4,sp", 4.0)] {
        let paper = d.s * d.b * d.h * (34.0 + 5.0 * d.a * d.s / d.h) / t;
        let gathered = 2.0 * 2.0 * d.s * d.b * d.h * (1.0 - 1.0 / t);
        let want = paper - dropout_terms(&d, 1.0) / t + norm_statistics(&d) / t + gathered;
        let dp = Parallel::parse(spec).unwrap().dp as f64;
        let p = planned_sp(3, spec);
        for layer in 0..3 {
            assert_eq!(
                saved_by_layer(&p, layer),
                want / dp,
                "{spec}, layer {layer}"
            );
        }
        let grown = activations_at_peak(&planned_sp(4, spec)) - activations_at_peak(&p);
        assert_eq!(grown, want / dp, "{spec}: growth of the peak");
        // Below tensor parallelism's own form: the stream, the norms and their statistics
        // are split t ways.
        let tp_only = korthikanti(&d, t) - dropout_terms(&d, t) + norm_statistics(&d);
        assert!(want < tp_only, "{spec}: {want} against {tp_only}");
    }
}
