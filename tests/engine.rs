//! The engine boundary (`shardlab::engine`), natively: each task gives what the session
//! computes directly, the search reports progress, and a job whose link does not rebuild
//! the page's plan is refused rather than answered for another plan.
#![cfg(not(target_arch = "wasm32"))]

use shardlab::engine::{codec, finish, handle, Job, Outcome, Reply, Task};
use shardlab::export::ExportMode;
use shardlab::protocol::Failure;
use shardlab::session::{Action, Session};

/// `handle`, with the job and the outcome through the worker's wire format (as in the
/// browser), checking the outcome crosses unchanged.
fn handle_crossed(job: &Job, progress: &mut dyn FnMut(usize, usize)) -> Outcome {
    let job: Job = codec::decode(&codec::encode(job).unwrap()).unwrap();
    let out = handle(&job, progress);
    let back: Outcome = codec::decode(&codec::encode(&out).unwrap()).unwrap();
    assert_eq!(back, out, "the outcome crosses the wire unchanged");
    back
}

fn megatron() -> Session {
    Session::from_scenario("megatron_mlp").unwrap()
}

#[test]
fn an_export_job_writes_the_script_the_session_writes() {
    let s = megatron();
    for mode in [ExportMode::Gspmd, ExportMode::ShardMap] {
        let job = s.job(Task::Export(mode));
        let Outcome::Export(Ok(script)) = handle_crossed(&job, &mut |_, _| {}) else {
            panic!("no script for {mode:?}");
        };
        assert_eq!(script, s.export_script(mode).unwrap());
        assert!(
            script.contains(&format!("({} mode)", mode.name())),
            "{script}"
        );
    }
}

#[test]
fn a_suggest_job_reports_progress_then_a_table_with_the_users_plan() {
    let s = Session::from_scenario("gpt_dp_mp").unwrap();
    let job = s.job(Task::Suggest {
        devices: None,
        memory_gb: None,
    });
    let mut steps = Vec::new();
    let out = handle_crossed(&job, &mut |d, t| steps.push((d, t)));
    let Outcome::Suggest(Ok(v)) = out else {
        panic!("no suggestion: {out:?}");
    };
    assert!(!steps.is_empty(), "the search reports progress");
    assert!(steps.iter().all(|&(d, t)| d <= t), "{steps:?}");
    assert!(
        steps.windows(2).all(|w| w[0].0 <= w[1].0),
        "progress only grows"
    );
    let mine: Vec<_> = v.rows.iter().filter(|r| r.mine).collect();
    assert_eq!(mine.len(), 1, "the session's plan is priced beside");
    assert!(v.rows.last().unwrap().mine, "after the candidates");
    assert!(v.rows.len() > 1);
    assert!(v.reason.contains(" beats "), "{}", v.reason);
    shardlab::plan::parse_plan(&v.plan).expect("the winner's text parses");
    // The page adopts it as any plan text.
    let adopted = s.reduce(Action::AdoptSuggestion {
        text: v.plan.clone(),
        compare: true,
    });
    assert!(adopted.pipeline.is_some(), "{:?}", adopted.plan_error);
}

#[test]
fn a_job_on_a_link_that_does_not_rebuild_the_plan_is_refused() {
    let s = megatron();
    let mut job = s.job(Task::Run);
    job.link = "s=nope".into();
    match handle(&job, &mut |_, _| {}) {
        Outcome::Failed(e) => assert!(e.contains("could not open the plan"), "{e}"),
        other => panic!("{other:?}"),
    }
    // Opens, but is not the link the page would send (the defaults are spelled out there).
    job.link = "s=megatron_mlp".into();
    match handle(&job, &mut |_, _| {}) {
        Outcome::Failed(e) => assert!(e.contains("different plan"), "{e}"),
        other => panic!("{other:?}"),
    }
    job.link = s.to_hash();
    assert!(matches!(handle(&job, &mut |_, _| {}), Outcome::Run(Ok(_))));
}

#[test]
fn job_ids_never_repeat_across_sessions() {
    let a = megatron().job(Task::Run);
    let b = megatron().job(Task::Run);
    assert!(b.id > a.id && a.id > 0, "{} then {}", a.id, b.id);
}

#[test]
fn a_failed_job_is_a_message_and_the_session_stops_waiting() {
    let s = megatron().reduce(Action::Run);
    let id = s.job.as_ref().unwrap().id;
    let s = s.reduce(Action::Reply(std::rc::Rc::new(Reply {
        id,
        outcome: Outcome::Failed("the engine failed: it did not load".into()),
    })));
    assert!(s.job.is_none());
    assert_eq!(
        s.message.as_deref(),
        Some("the engine failed: it did not load")
    );
    // Progress for the job does not end the wait.
    let s = s.reduce(Action::Run);
    let id = s.job.as_ref().unwrap().id;
    let s = s.reduce(Action::Reply(std::rc::Rc::new(Reply {
        id,
        outcome: Outcome::Progress { done: 1, total: 2 },
    })));
    assert_eq!(s.job.as_ref().map(|j| j.id), Some(id));
    let s = finish(s);
    assert!(s.run.as_ref().unwrap().checks.iter().all(|c| c.pass));
}

#[test]
fn a_cost_job_prices_the_plan_and_the_pinned_one_as_the_session_does() {
    let s = Session::from_scenario("gpt_dp_mp")
        .unwrap()
        .reduce(Action::Pin)
        .reduce(Action::SetZero(1));
    let pinned = s.pinned.as_ref().map(|p| p.link.clone());
    assert!(pinned.is_some());
    let Outcome::Cost(v) = handle_crossed(&s.job(Task::Cost { pinned }), &mut |_, _| {}) else {
        panic!("no cost");
    };
    assert_eq!(v.cost, s.cost().map_err(Failure::from));
    assert_eq!(v.diff, s.pinned_diff().map(|d| d.map_err(Failure::from)));
    let d = v.diff.unwrap().unwrap();
    assert!(d.differs(), "ZeRO 1 against the pinned ZeRO 0");
    assert!(
        d.collectives
            .iter()
            .any(|c| c.op == "reduce_scatter" && c.a == 0 && c.b > 0),
        "{:?}",
        d.collectives
    );
}

#[test]
fn a_pipeline_cost_job_lays_out_the_schedule_as_the_session_does() {
    use shardlab::session::PipelineAction;
    let s = Session::from_hash("s=megatron_mlp&mesh=2x2:pp,mp")
        .unwrap()
        .reduce(Action::Pipeline(PipelineAction::SetMicroBatches(4)))
        .reduce(Action::Pipeline(PipelineAction::SetGanttIdeal(true)));
    let Outcome::PipelineCost(Ok(c)) = handle_crossed(&s.job(Task::PipelineCost), &mut |_, _| {})
    else {
        panic!("no schedule");
    };
    assert_eq!(Ok(c.clone()), s.pipeline_cost());
    assert!((c.bubble - 1.0 / 5.0).abs() < 1e-12, "{}", c.bubble);
}

#[test]
fn run_break_and_values_outcomes_cross_the_wire() {
    use shardlab::session::Breakage;
    let s = Session::from_scenario("gpt_dp_mp").unwrap();
    assert!(matches!(
        handle_crossed(&s.job(Task::Run), &mut |_, _| {}),
        Outcome::Run(Ok(_))
    ));
    // A broken run (its ops and mistakes travel in the job) and a collective's values.
    let s = s.reduce(Action::SetBreakMode(true));
    let op = s.inserted_ops()[0].op;
    let s = s.reduce(Action::Break(Breakage::Delete { op }));
    let job = s.job(Task::RunBroken(s.breaks.clone()));
    let Outcome::Broken(Ok(r)) = handle_crossed(&job, &mut |_, _| {}) else {
        panic!("no report");
    };
    assert!(!r.diverged.is_empty(), "deleting {op} diverges");
    let out = handle_crossed(&s.job(Task::Values(op)), &mut |_, _| {});
    assert!(matches!(out, Outcome::Values(Ok(_))), "{out:?}");
}

#[test]
fn the_wire_carries_nan_infinity_and_negative_zero() {
    use shardlab::session::RunSummary;
    let r = Reply {
        id: 9,
        outcome: Outcome::Run(Ok(RunSummary {
            serial_losses: vec![f64::NAN, f64::NEG_INFINITY],
            dist_losses: vec![-0.0, 1e-310],
            checks: Vec::new(),
            shrunk: Vec::new(),
        })),
    };
    let back: Reply = codec::decode(&codec::encode(&r).unwrap()).unwrap();
    let Outcome::Run(Ok(b)) = back.outcome else {
        panic!("{back:?}");
    };
    assert!(b.serial_losses[0].is_nan() && b.serial_losses[1] == f64::NEG_INFINITY);
    assert!(b.dist_losses[0].is_sign_negative() && b.dist_losses[1] == 1e-310);
    assert!(
        codec::decode::<Reply>(&[0xff, 0xff]).is_err(),
        "garbage is an error"
    );
}

/// The worker's queue: a job that comes while a search is under way is answered between the
/// search's steps, not after it; the search still ends with what `handle` answers.
#[test]
fn a_job_behind_a_search_is_answered_between_its_steps() {
    use shardlab::engine::{Queue, Request};
    let s = Session::from_scenario("gpt_dp_mp").unwrap();
    let search = s.job(Task::Suggest {
        devices: None,
        memory_gb: None,
    });
    let cost = s.job(Task::Cost { pinned: None });
    let mut q = Queue::default();
    q.push(Request::Job(search.clone()));
    // The search begins (its first progress), then the cost job comes.
    let first = q.work().unwrap();
    assert_eq!(first.id, search.id);
    assert!(first.outcome.is_progress(), "{:?}", first.outcome);
    q.push(Request::Job(cost.clone()));
    let next = q.work().unwrap();
    assert_eq!(
        next.id, cost.id,
        "the cost job is answered before the search goes on"
    );
    assert_eq!(next.outcome, handle(&cost, &mut |_, _| {}));
    let mut replies = Vec::new();
    while let Some(r) = q.work() {
        replies.push(r);
    }
    assert!(q.is_idle());
    let (last, steps) = replies.split_last().unwrap();
    assert!(!steps.is_empty(), "the search went a step at a time");
    assert!(steps
        .iter()
        .all(|r| r.id == search.id && r.outcome.is_progress()));
    assert_eq!(last.id, search.id);
    assert_eq!(last.outcome, handle(&search, &mut |_, _| {}));
}

/// A cancelled job is dropped unanswered, whether it waits or its search is under way; the
/// jobs around it are answered as before.
#[test]
fn a_cancelled_job_is_dropped_waiting_or_under_way() {
    use shardlab::engine::{Queue, Request};
    let s = Session::from_scenario("gpt_dp_mp").unwrap();
    let suggest = Task::Suggest {
        devices: None,
        memory_gb: None,
    };
    let (search, stale) = (s.job(suggest.clone()), s.job(suggest));
    let cost = s.job(Task::Cost { pinned: None });
    let mut q = Queue::default();
    q.push(Request::Job(stale.clone()));
    assert_eq!(q.work().unwrap().id, stale.id, "the stale search begins");
    q.push(Request::Job(cost.clone()));
    q.push(Request::Job(search.clone()));
    q.push(Request::Cancel(stale.id));
    q.push(Request::Cancel(cost.id));
    let mut ids = Vec::new();
    while let Some(r) = q.work() {
        ids.push(r.id);
    }
    assert!(!ids.is_empty());
    assert!(ids.iter().all(|&id| id == search.id), "{ids:?}");
}
