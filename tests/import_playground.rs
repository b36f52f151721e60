//! The playground's import, natively: a model file dropped on the page becomes an
//! `Action::Import`, the engine's worker imports it (`Task::Import`, across the worker's
//! wire format) and plans it under the strategy given, and the session opens the plan,
//! which then runs equal to serial like any other. Bad files, sizes and strategies leave
//! the plan as it was and say what is wrong, naming the file.
#![cfg(not(target_arch = "wasm32"))]

use shardlab::engine::{codec, finish, handle, Job, Outcome, Task};
use shardlab::import::{import_onnx, plan_under, ImportOptions};
use shardlab::protocol::ImportFile;
use shardlab::session::{Action, Session};

const LLAMA: &[u8] = include_bytes!("models/llama_model_2l.onnx");
const MLP: &[u8] = include_bytes!("models/mlp_block.onnx");

fn import(s: Session, name: &str, bytes: &[u8], dims: &str, parallel: &str) -> Session {
    let s = s.reduce(Action::Import(ImportFile {
        name: name.into(),
        bytes: bytes.to_vec(),
        dims: dims.into(),
        parallel: parallel.into(),
    }));
    assert!(
        matches!(s.waiting_for(), Some(Task::Import(_))),
        "the session asks the engine to import"
    );
    finish(s)
}

fn start() -> Session {
    Session::from_scenario("megatron_mlp").unwrap()
}

#[test]
fn a_dropped_llama_opens_as_its_plan_under_the_strategy_and_runs_equal_to_serial() {
    let s = import(start(), "llama.onnx", LLAMA, "", "dp=2,tp=2");
    let message = s.message.clone().unwrap_or_default();
    assert_eq!(
        message,
        "Imported llama.onnx: 91 ops from 234 nodes (15 patterns fused, planned as \
         dp=2,tp=2); the plan's comments list what the import did."
    );
    assert_eq!(s.scenario, "custom");
    assert!(s
        .text
        .starts_with("# imported llama.onnx: 91 ops from 234 nodes (Identity × 89, "));
    assert!(s.text_errors.is_empty(), "{:?}", s.text_errors);
    // The plan is the CLI's: the same import, the same strategy.
    let imported = import_onnx(LLAMA, &ImportOptions::default()).unwrap();
    let cli = plan_under(&imported, "dp=2,tp=2").unwrap();
    assert_eq!(s.plan.shard_specs(), cli.shard_specs());
    assert_eq!(s.mesh().unwrap().shape(), &[2, 2]);
    assert!(
        s.plan.shard_specs().len() >= 10,
        "Megatron's annotations found by pattern: {:?}",
        s.plan.shard_specs()
    );
    let ran = finish(s.reduce(Action::Run));
    let run = ran.run.as_ref().expect("the imported plan runs");
    assert!(!run.checks.is_empty());
    assert!(run.checks.iter().all(|c| c.pass), "{:?}", run.checks);
    assert_eq!(run.serial_losses.len(), run.dist_losses.len());
    assert!(run.serial_losses.iter().all(|l| l.is_finite()));
}

#[test]
fn the_import_job_crosses_the_wire_and_sizes_reach_the_import() {
    let job = Job::new(
        String::new(),
        Task::Import(ImportFile {
            name: "mlp.onnx".into(),
            bytes: MLP.to_vec(),
            dims: "DynamicDimension.0=6".into(),
            parallel: "dp=2".into(),
        }),
    );
    let job: Job = codec::decode(&codec::encode(&job).unwrap()).unwrap();
    let out = handle(&job, &mut |_, _| {});
    let back: Outcome = codec::decode(&codec::encode(&out).unwrap()).unwrap();
    assert_eq!(back, out);
    let Outcome::Import(view) = out else {
        panic!("{out:?}")
    };
    // Batch 6 on 2 ranks: the input's first dim is 6 and split over dp.
    for line in [
        "mesh [2] (dp)",
        "var x: f32[6, 16, 64] input",
        "shard x [dp, -, -]",
    ] {
        assert!(
            view.text.lines().any(|l| l == line),
            "{line}: {}",
            view.text
        );
    }
    assert!(view
        .summary
        .ends_with("planned as dp=2); the plan's comments list what the import did."));
}

#[test]
fn bad_files_sizes_and_strategies_leave_the_plan_and_say_why() {
    let before = start();
    let text = before.text.clone();
    let cases: [(&str, &[u8], &str, &str, &str); 6] = [
        (
            "junk.onnx",
            b"\x0a\xff\xff\xff",
            "",
            "dp=2",
            "junk.onnx: not an ONNX model: the protobuf does not decode",
        ),
        (
            "empty.onnx",
            b"",
            "",
            "dp=2",
            "empty.onnx: the ONNX model has no graph",
        ),
        (
            "mlp.onnx",
            MLP,
            "",
            "dp=2",
            "mlp.onnx: input `x` dim 0 is symbolic (`DynamicDimension.0`)",
        ),
        (
            "mlp.onnx",
            MLP,
            "DynamicDimension.0",
            "dp=2",
            "mlp.onnx: sizes `DynamicDimension.0`: expected NAME=N",
        ),
        (
            "llama.onnx",
            LLAMA,
            "",
            "dp=2,xp=2",
            "llama.onnx: strategy `dp=2,xp=2`: unknown parallelism `xp`",
        ),
        (
            "llama.onnx",
            LLAMA,
            "",
            "dp=0",
            "llama.onnx: strategy `dp=0`: `dp=0`: a degree is a whole number from 1",
        ),
    ];
    for (name, bytes, dims, parallel, want) in cases {
        let s = import(before.clone(), name, bytes, dims, parallel);
        let message = s.message.clone().unwrap_or_default();
        assert!(message.starts_with(want), "{name}: {message}");
        assert_eq!(s.text, text, "{name}: the plan is left as it was");
        assert_eq!(s.scenario, "megatron_mlp");
    }
}

#[test]
fn a_plan_change_while_importing_drops_the_import() {
    let s = start().reduce(Action::Import(ImportFile {
        name: "llama.onnx".into(),
        bytes: LLAMA.to_vec(),
        dims: String::new(),
        parallel: "dp=2".into(),
    }));
    let job = s.job.clone().unwrap();
    let s = s.reduce(Action::LoadScenario("dp_mlp".into()));
    let out = handle(&job, &mut |_, _| {});
    let s = s.reduce(Action::Reply(std::rc::Rc::new(shardlab::engine::Reply {
        id: job.id,
        outcome: out,
    })));
    assert_eq!(
        s.scenario, "dp_mlp",
        "a late import does not replace the plan"
    );
}

/// A real-size import is a link like any other: Llama 3 8B's plan (about a third of a
/// megabyte encoded) reopens from its hash, and the engine prices it on one 8-GPU node.
#[test]
fn a_real_size_import_reopens_from_its_link_and_is_priced() {
    let s = import(
        start(),
        "llama3_8b.pir",
        include_bytes!("models/llama3_8b.pir"),
        "",
        "dp=2,tp=4",
    );
    assert!(s
        .message
        .clone()
        .unwrap_or_default()
        .starts_with("Imported llama3_8b.pir: 1321 ops"));
    let hash = s.to_hash();
    assert!(hash.len() > 200_000, "{} bytes", hash.len());
    let back = Session::from_hash(&hash).unwrap();
    assert_eq!(back.text, s.text);
    // Past Chromium's 2 MB a hash is refused before it is read.
    let huge = format!("text={}", "a".repeat(2 << 20));
    let e = Session::from_hash(&huge).err().map(|e| e.to_string());
    assert_eq!(e.as_deref(), Some("the link is too long"));
    let job = Job::new(hash, Task::Cost { pinned: None });
    let Outcome::Cost(view) = handle(&job, &mut |_, _| {}) else {
        panic!("the engine prices the imported plan")
    };
    assert!(view.cost.is_ok(), "{:?}", view.cost.err());
}
