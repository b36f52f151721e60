//! The playground at real size: it opens on Llama 3 8B on one 8-GPU node, prices it in
//! full (milliseconds, gigabytes, an MFU), and executes its shrunk twin for Run, break-it
//! and the values view, saying so. A link's `parallel` field builds a strategy by sizes.
#![cfg(not(target_arch = "wasm32"))]

use shardlab::ir::OpType;
use shardlab::models::published_plans::PublishedPlan;
use shardlab::plan::parallel::Parallel;
use shardlab::session::{Action, Breakage, Session, Stage};

fn finish(s: Session, a: Action) -> Session {
    shardlab::engine::finish(s.reduce(a))
}

#[test]
fn the_page_opens_on_gpt3_13b_priced_in_full() {
    let s = Session::default();
    assert_eq!(s.scenario, "gpt3-13b");
    assert!(s.pipeline.is_some(), "{:?}", s.plan_error);
    assert_eq!(s.topology, "h100x8");
    assert_eq!(s.mesh().unwrap().shape(), &[2, 4]);
    let ids = s.plan.program.var_id("ids").unwrap();
    // Eight sequences at the published length, one micro-batch.
    assert_eq!(s.plan.program.var(ids).ty.shape.as_slice(), &[8, 2048]);
    assert_eq!(s.plan.options.micro_batches, 1);
    assert_eq!(s.plan.options.zero, 1);
    let e = s.cost().unwrap();
    // 8 sequences of 2,048 tokens through 12.9B parameters with full recomputation:
    // 8·N·T ≈ 1.7 PFLOP on 8 H100s (989 TFLOP/s each) is 0.21 s at full MFU, so a step
    // is some hundreds of milliseconds.
    let step = e.step_s();
    assert!((0.21..3.0).contains(&step), "step {step} s");
    assert!((0.15..0.75).contains(&e.mfu), "MFU {}", e.mfu);
    // Adam's model states with ZeRO-1 over dp 2 and tp 4: gigabytes, and within 80 GB.
    for m in &e.memory {
        assert!((5e9..80e9).contains(&m.peak), "peak {} B", m.peak);
    }
}

/// Llama 3 8B opens on the same node plan as GPT, eight sequences of 8,192 tokens (its
/// attention scores are 2^34 elements, which the browser counts in 64 bits too), and runs
/// its twin.
#[test]
fn llama3_8b_opens_on_dp_and_tp_and_runs_its_twin() {
    let s = Session::from_scenario("llama3-8b").unwrap();
    assert_eq!(s.mesh().unwrap().shape(), &[2, 4]);
    let ids = s.plan.program.var_id("ids").unwrap();
    assert_eq!(s.plan.program.var(ids).ty.shape.as_slice(), &[8, 8192]);
    let scores = s
        .plan
        .program
        .vars()
        .iter()
        .map(|v| v.ty.numel())
        .max()
        .unwrap();
    assert!(
        scores >= 1 << 34,
        "the largest tensor has {scores} elements"
    );
    let e = s.cost().unwrap();
    // 8 sequences of 8,192 tokens through 8B parameters with full recomputation:
    // 8·N·T ≈ 4.2 PFLOP on 8 H100s is 0.53 s at full MFU.
    assert!((0.53..5.0).contains(&e.step_s()), "{}", e.step_s());
    let s = finish(s, Action::Run);
    let r = s.run.as_ref().unwrap_or_else(|| panic!("{:?}", s.message));
    assert!(r.checks.iter().all(|c| c.pass));
    assert!(
        r.shrunk.iter().any(|s| s.starts_with("hidden 4096 → ")),
        "{:?}",
        r.shrunk
    );
}

#[test]
fn run_executes_the_shrunk_twin_and_says_so() {
    let s = finish(Session::default(), Action::Run);
    let r = s.run.as_ref().unwrap_or_else(|| panic!("{:?}", s.message));
    assert!(
        r.checks.iter().all(|c| c.pass),
        "{:?}",
        r.checks.iter().find(|c| !c.pass)
    );
    // Two layers of 16 parameters, the embeddings and the final norm: each gradient and
    // parameter checked, and the loss.
    assert!(r.checks.len() > 70, "{} checks", r.checks.len());
    // The first step's bounds are tight (a 40-layer twin's were 10^12 and more). After an
    // AdamW step they are not: Adam's update of a gradient at noise level is bounded by the
    // whole step size (`exec::bound`).
    for c in r.checks.iter().filter(|c| c.tensor.contains("(step 1)")) {
        assert!(c.tolerance < 1e-6, "{}: {}", c.tensor, c.tolerance);
    }
    assert!(
        r.shrunk.contains(&"layers 40 → 2".to_string())
            && r.shrunk.iter().any(|s| s.starts_with("hidden 5120 → ")),
        "{:?}",
        r.shrunk
    );
    // The toy scenarios run as they are.
    let toy = finish(Session::from_scenario("gpt_dp_mp").unwrap(), Action::Run);
    assert_eq!(toy.run.unwrap().shrunk, Vec::<String>::new());
}

/// The twin carries the session's own edits: an annotation cleared on the real size is
/// cleared on the twin, and at two layers (which the twin keeps) the twin's rank program is
/// the real one's op for op.
#[test]
fn the_twin_is_the_session_s_plan_op_for_op() {
    let s = Session::from_scenario("gpt2-small")
        .unwrap()
        .reduce(Action::SetLayers(2));
    let s = s.reduce(Action::ClearAnnotation("h0.attn.q.w".into()));
    let real = s.pipeline.clone().unwrap();
    let mut twin = s.clone();
    let said = twin.shrink_to_twin().unwrap();
    assert!(said.contains(&"hidden 768 → 24".to_string()), "{said:?}");
    let q = twin.plan.program.var_id("h0.attn.q.w").unwrap();
    assert!(twin.plan.annotation(q).is_none());
    assert_eq!(twin.plan.annotations.len(), s.plan.annotations.len());
    assert_eq!(twin.plan.options, s.plan.options);
    let types = |p: &shardlab::passes::driver::Passes| -> Vec<OpType> {
        p.partitioned.ranks[0]
            .program
            .ops()
            .iter()
            .map(|o| o.ty)
            .collect()
    };
    assert_eq!(types(&real), types(twin.pipeline.as_ref().unwrap()));
}

#[test]
fn break_it_and_the_values_view_run_the_twin() {
    let s = Session::from_scenario("gpt2-small")
        .unwrap()
        .reduce(Action::SetStage(Stage::Partition));
    let program = &s.pipeline.as_ref().unwrap().partitioned.ranks[0].program;
    let op = program
        .ops()
        .iter()
        .position(|o| o.ty == OpType::AllReduce)
        .expect("an all-reduce");
    let s = finish(s, Action::ShowValues(Some(op)));
    let v = s.values.clone().unwrap().unwrap();
    assert!(!v.shrunk.is_empty());
    assert!(v.blocks.len() > 1);
    let s = s
        .reduce(Action::SetBreakMode(true))
        .reduce(Action::Break(Breakage::Delete { op }));
    let s = finish(s, Action::RunBroken);
    let r = s.break_report.unwrap();
    assert!(!r.shrunk.is_empty());
    assert!(!r.diverged.is_empty() || r.failure.is_some(), "{r:?}");
}

#[test]
fn a_published_link_round_trips_its_options() {
    let s = Session::default();
    let hash = s.to_hash();
    assert!(hash.starts_with("s=gpt3-13b&"), "{hash}");
    // The scenario's own ZeRO stage and micro-batches are not written...
    assert!(!hash.contains("zero="), "{hash}");
    // ...and a change of them is.
    let s = s.reduce(Action::SetZero(0));
    let hash = s.to_hash();
    assert!(hash.contains("zero=0"), "{hash}");
    let back = Session::from_hash(&hash).unwrap();
    assert_eq!(back.plan.options.zero, 0);
    assert_eq!(back.to_hash(), hash);
}

#[test]
fn a_link_s_parallel_field_builds_the_strategy() {
    let s = Session::from_hash("s=gpt2-small&parallel=dp=4,tp=2").unwrap();
    assert!(s.pipeline.is_some(), "{:?}", s.plan_error);
    let mesh = s.mesh().unwrap();
    assert_eq!(mesh.shape(), &[4, 2]);
    let want = Parallel::parse("dp=4,tp=2")
        .unwrap()
        .shard_specs(&s.plan.program);
    let mut got = s.plan.shard_specs();
    let mut want = want;
    got.sort();
    want.sort();
    assert_eq!(got, want);
    // The link written back names the mesh and every annotation, and reopens the same.
    let back = Session::from_hash(&s.to_hash()).unwrap();
    assert_eq!(back.to_hash(), s.to_hash());
    // On a toy scenario too.
    let toy = Session::from_hash("s=gpt_dp_mp&parallel=dp=2,tp=2").unwrap();
    assert_eq!(toy.mesh().unwrap().shape(), &[2, 2]);
    for (hash, says) in [
        (
            "s=gpt2-small&parallel=dp=2&mesh=2:dp",
            "both `parallel` and `mesh`",
        ),
        ("s=gpt2-small&parallel=xp=2", "unknown parallelism `xp`"),
        ("s=gpt2-small&parallel=dp=0", "a degree is a whole number"),
        ("s=gpt2-small&parallel=dp=1024", "too large"),
        (
            "s=gpt2-small&parallel=tp=2,sp",
            "links do not carry `sp` yet",
        ),
        (
            "s=gpt2-small&parallel=dp=2,cp=2",
            "links do not carry `cp` yet",
        ),
    ] {
        let e = Session::from_hash(hash).err().unwrap().to_string();
        assert!(e.contains(says), "{hash}: {e}");
    }
}

#[test]
fn every_published_preset_opens_in_the_playground() {
    for (name, _) in shardlab::session::preset_names() {
        let Some(p) = shardlab::models::published::Published::find(name) else {
            continue;
        };
        let s = Session::from_scenario(name).unwrap();
        assert!(s.pipeline.is_some(), "{name}: {:?}", s.plan_error);
        let plan = PublishedPlan::of(p);
        assert_eq!(s.plan.options, plan.options(), "{name}");
        assert_eq!(s.mesh().unwrap().size(), 8, "{name}");
    }
}
/// Every completion event of an AMP plan (whose completed program has the loss scaling
/// op the session's does not) is described.
#[test]
fn every_completion_event_of_an_amp_plan_is_described() {
    let s = Session::default();
    assert!(s.plan.options.amp);
    let n = s.events();
    assert!(n > 1000, "{n}");
    for i in 0..n {
        assert!(s.event_text(i).is_some(), "event {i}");
    }
    assert!(s.event_text(n - 1).unwrap().contains("loss@SCALED"));
}
