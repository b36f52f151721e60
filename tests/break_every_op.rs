//! Break-it never panics the executor: every kind of mistake on every inserted op of every
//! scenario (ZeRO 3 and a pipeline plan included) ends in a report, a divergence or a
//! named failure. A collective given a group it does not fit returns a value of the wrong
//! shape; the run says so at that collective instead of a kernel indexing out of bounds
//! further on (in the playground a panic kills the engine's worker).
#![cfg(not(target_arch = "wasm32"))]

use shardlab::dist::ReduceType;
use shardlab::models::scenarios::scenarios;
use shardlab::session::{Action, Breakage, GroupChange, Session};

fn settled(s: Session) -> Session {
    shardlab::engine::finish(s)
}

/// The five kinds of mistake on op `op` of the selected rank `rank`.
fn kinds(op: usize, rank: u32) -> [Breakage; 5] {
    [
        Breakage::Delete { op },
        Breakage::SkipOnRank { op, rank },
        Breakage::SetReduce {
            op,
            reduce: ReduceType::Max,
        },
        Breakage::SetGroup {
            op,
            group: GroupChange::Alone,
        },
        Breakage::SetGroup {
            op,
            group: GroupChange::WholeMesh,
        },
    ]
}

/// Breaks each inserted op of `s`'s rank `rank`: a collective given each rank alone and
/// the whole mesh (the mistakes that change what it returns), and every op one of the
/// other three kinds, taken in turn; each broken program is run. Returns how many ops were
/// broken and how many runs failed by name (a panic would end the test).
fn break_each(s: &Session, rank: u32, what: &str) -> (usize, usize) {
    let s = s
        .clone()
        .reduce(Action::SelectRank(rank))
        .reduce(Action::SetBreakMode(true));
    let ops = s.inserted_ops();
    assert!(!ops.is_empty(), "{what}: no inserted ops on rank {rank}");
    let mut failures = 0;
    for (k, o) in ops.iter().enumerate() {
        let all = kinds(o.op, rank);
        let mut chosen = vec![all[k % 3].clone()];
        if o.group.is_some() {
            chosen.extend_from_slice(&all[3..]);
        }
        for b in chosen {
            let broken = settled(
                s.clone()
                    .reduce(Action::ClearBreaks)
                    .reduce(Action::Break(b.clone()))
                    .reduce(Action::RunBroken),
            );
            let r = broken
                .break_report
                .as_ref()
                .unwrap_or_else(|| panic!("{what}: {b:?} on `{}` gave no report", o.label));
            if let Some(f) = &r.failure {
                assert!(!f.is_empty(), "{what}: {b:?}: an empty failure");
                failures += 1;
            }
        }
    }
    (ops.len(), failures)
}

#[test]
fn every_break_on_every_scenario_is_reported_without_a_panic() {
    let (mut total, mut failures) = (0, 0);
    for scenario in scenarios() {
        let s = Session::from_scenario(scenario.name).unwrap();
        let last = *s.mesh().unwrap().process_ids().last().unwrap();
        for rank in [0, last] {
            let (broken, failed) = break_each(&s, rank, scenario.name);
            total += broken;
            failures += failed;
        }
    }
    assert!(total > 100, "only {total} ops broken");
    assert!(failures > 0, "no broken run failed by name");
}

#[test]
fn every_break_under_zero_3_and_a_pipeline_is_reported_without_a_panic() {
    let zero3 = Session::from_scenario("gpt_dp_mp")
        .unwrap()
        .reduce(Action::SetZero(3));
    break_each(&zero3, 0, "gpt_dp_mp zero 3");
    let pp = Session::from_scenario("dp_mlp")
        .unwrap()
        .reduce(Action::SetMeshShape(vec![2, 2]))
        .reduce(Action::RenameAxis(0, "pp".into()))
        .reduce(Action::Pipeline(
            shardlab::session::PipelineAction::SetMicroBatches(2),
        ));
    assert!(pp.pipeline.is_some(), "{:?}", pp.plan_error);
    assert!(pp.pipeline.as_ref().unwrap().is_pipelined());
    break_each(&pp, 0, "dp_mlp on 2 stages");
}

/// The campaign's repro: `gpt_sequence_parallel`, the all_gather that makes
/// `h0.ln_2.gathered` on rank 5 given the rank alone as its group. It panicked in
/// `layer_norm_grad`; the run now fails at the all_gather, naming the group.
#[test]
fn an_all_gather_given_the_rank_alone_fails_at_the_all_gather() {
    let s = Session::from_scenario("gpt_sequence_parallel")
        .unwrap()
        .reduce(Action::SelectRank(5))
        .reduce(Action::SetBreakMode(true));
    let op = s
        .inserted_ops()
        .into_iter()
        .find(|o| o.label.contains("all_gather") && o.label.contains("h0.ln_2"))
        .unwrap_or_else(|| panic!("no all_gather of h0.ln_2 in {:?}", s.inserted_ops()))
        .op;
    let s = settled(
        s.reduce(Action::Break(Breakage::SetGroup {
            op,
            group: GroupChange::Alone,
        }))
        .reduce(Action::RunBroken),
    );
    let r = s.break_report.expect("a report");
    let failure = r.failure.expect("the run fails");
    assert!(
        failure.contains("all_gather returned") && failure.contains("its group is the rank alone"),
        "{failure}"
    );
}

/// A rank that skips a sync meets the group's next collective where the others meet this
/// one: the failure names that rank (not the first rank to notice) and says the group got
/// out of step, every later collective of it mismatched; or, when it was the group's last
/// collective, that the rank finished the step without it.
#[test]
fn a_skipped_sync_names_the_rank_that_skipped_it() {
    let s = Session::from_scenario("dp_mlp")
        .unwrap()
        .reduce(Action::SelectRank(3))
        .reduce(Action::SetBreakMode(true));
    let reduces: Vec<_> = s
        .inserted_ops()
        .into_iter()
        .filter(|o| o.label.starts_with("all_reduce"))
        .collect();
    assert!(reduces.len() >= 2, "{reduces:?}");
    let (first, last) = (reduces[0].op, reduces[reduces.len() - 1].op);
    let failure = |op| {
        let s = settled(
            s.clone()
                .reduce(Action::Break(Breakage::SkipOnRank { op, rank: 3 }))
                .reduce(Action::RunBroken),
        );
        s.break_report.unwrap().failure.expect("the run fails")
    };
    let f = failure(first);
    assert!(
        f.contains("is out of step")
            && f.contains("rank 3 skipped or added a collective of this group")
            && f.contains("every later collective of the group"),
        "{f}"
    );
    let f = failure(last);
    assert!(
        f.contains("rank [3] finished the step without meeting these collectives"),
        "{f}"
    );
}
