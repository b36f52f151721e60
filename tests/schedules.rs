//! Pipeline schedules against Paddle 3.3.1's scheduler passes: every job of every stage of
//! `fthenb`, `1f1b`, `vpp` (2 chunks) and `zbh1` on 2 stages and 4 micro-batches
//! (`tests/oracle/paddle/schedules.json`), and the invariants every schedule keeps on other
//! sizes: each micro-batch's forward and backward run once per chunk, a backward after its
//! forward, the optimizer last.
#![cfg(not(target_arch = "wasm32"))]

use proptest::prelude::*;
use shardlab::cost::pipeline::{pipeline_timeline, JobTimes};
use shardlab::passes::pipeline::schedule::{job_list, JobKind, Schedule, ScheduleError};

fn oracle() -> serde_json::Value {
    serde_json::from_str(include_str!("oracle/paddle/schedules.json")).unwrap()
}

#[test]
fn every_schedule_matches_paddle_job_for_job() {
    let o = oracle();
    let cases = o["schedules"].as_array().unwrap();
    assert_eq!(cases.len(), 8);
    for case in cases {
        let name = case["schedule"].as_str().unwrap();
        let stages = case["pp_degree"].as_u64().unwrap() as usize;
        let stage = case["pp_stage"].as_u64().unwrap() as usize;
        let micro = case["num_micro_batches"].as_u64().unwrap() as usize;
        let chunks = case["vpp_degree"].as_u64().unwrap() as usize;
        let schedule = match name {
            "fthenb" => Schedule::FThenB,
            "1f1b" => Schedule::OneFOneB,
            "vpp" => Schedule::Vpp { chunks },
            "zbh1" => Schedule::ZbH1,
            other => panic!("unknown schedule {other}"),
        };
        let ours: Vec<(String, u64)> = job_list(schedule, stages, stage, micro)
            .unwrap()
            .iter()
            .map(|j| (j.paddle_type(), j.micro_batch as u64))
            .collect();
        let paddle: Vec<(String, u64)> = case["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| (j[0].as_str().unwrap().to_string(), j[1].as_u64().unwrap()))
            .collect();
        assert_eq!(ours, paddle, "{name} stage {stage}");
    }
}

/// The textbook bubbles, with forward F = 1, backward B = 2 and free transfers: GPipe and
/// 1F1B take (m + p − 1)(F + B), a bubble of (p − 1)/(m + p − 1); interleaving v chunks
/// shrinks the bubble time to (p − 1)(F + B)/v (Narayanan et al. 2021); zero bubble's
/// split backward fills part of what remains.
#[test]
fn bubbles_match_the_closed_forms() {
    let t = JobTimes::unit();
    for (p, m) in [(2usize, 4usize), (4, 8), (4, 4), (8, 16)] {
        let want = (m + p - 1) as f64 * 3.0;
        for s in [Schedule::FThenB, Schedule::OneFOneB] {
            let tl = pipeline_timeline(s, p, m, t).unwrap();
            assert_eq!(tl.step, want, "{s:?} p={p} m={m}");
            let bubble = (p - 1) as f64 / (m + p - 1) as f64;
            assert!(
                (tl.bubble[0] - bubble).abs() < 1e-12,
                "{s:?}: {}",
                tl.bubble[0]
            );
        }
        let v = 2;
        let vpp = pipeline_timeline(Schedule::Vpp { chunks: v }, p, m, t).unwrap();
        let interleaved = m as f64 * 3.0 + (p - 1) as f64 * 3.0 / v as f64;
        assert_eq!(vpp.step, interleaved, "vpp p={p} m={m}");
        let zb = pipeline_timeline(Schedule::ZbH1, p, m, t).unwrap();
        assert!(zb.step <= want, "zbh1 p={p} m={m}: {} > {want}", zb.step);
        // The paper's H1 order: exactly its bubble (p−1)(T_F + T_B − T_W) per stage, with
        // T_B the input half (backward − weight).
        let paper = pipeline_timeline(Schedule::ZbH1Paper, p, m, t).unwrap();
        let (f, b, w) = (t.forward, t.backward - t.backward_w, t.backward_w);
        let ideal = m as f64 * (f + b + w) + (p - 1) as f64 * (f + b - w);
        assert_eq!(paper.step, ideal, "zbh1_paper p={p} m={m}");
    }
    // Paddle's ZB-H1 on 2 stages and 4 micro-batches, traced by hand (b = w = 1): stage 1
    // runs F0 [1,2] b0 [2,3] F1 [3,4] B1 [4,6] F2 [6,7] B2 [7,9] F3 [9,10] b3 [10,11]
    // w3 [11,12] w0 [12,13]; stage 0 ends with B3 [11,13] once b3 arrives. 13 against
    // 1F1B's 15: the split backwards send their input gradient a weight-gradient earlier.
    let zb = pipeline_timeline(Schedule::ZbH1, 2, 4, t).unwrap();
    assert_eq!(zb.step, 13.0);
    assert_eq!(
        pipeline_timeline(Schedule::OneFOneB, 2, 4, t).unwrap().step,
        15.0
    );
    // A transfer time c: GPipe's first micro-batch crosses p − 1 links each way, so its step
    // is (m + p − 1)(F + B) + 2(p − 1)c exactly; 1F1B's steady phase waits on transfers
    // every cycle, so it is at least that.
    let slow = JobTimes {
        send_recv: 0.5,
        ..t
    };
    let gpipe = pipeline_timeline(Schedule::FThenB, 4, 8, slow).unwrap();
    assert_eq!(gpipe.step, 33.0 + 6.0 * 0.5);
    let one_f = pipeline_timeline(Schedule::OneFOneB, 4, 8, slow).unwrap();
    assert!(one_f.step >= gpipe.step, "{}", one_f.step);
}

#[test]
fn bad_sizes_are_errors() {
    assert_eq!(
        job_list(Schedule::OneFOneB, 4, 0, 2),
        Err(ScheduleError::TooFewMicroBatches {
            schedule: "1f1b",
            micro_batches: 2,
            stages: 4
        })
    );
    assert!(
        job_list(Schedule::FThenB, 4, 0, 2).is_ok(),
        "GPipe needs no minimum"
    );
    assert_eq!(
        job_list(Schedule::ZbH1, 2, 2, 4),
        Err(ScheduleError::NoSuchStage {
            stage: 2,
            stages: 2
        })
    );
    assert_eq!(
        job_list(Schedule::Vpp { chunks: 0 }, 2, 0, 4),
        Err(ScheduleError::Empty)
    );
}

proptest! {
    #[test]
    fn every_micro_batch_runs_forward_then_backward_once_per_chunk(
        stages in 1usize..6,
        extra in 0usize..6,
        stage_pick in 0usize..6,
        which in 0usize..4,
        chunks in 1usize..4,
    ) {
        let micro = stages + extra;
        let stage = stage_pick % stages;
        let schedule = [Schedule::FThenB, Schedule::OneFOneB, Schedule::Vpp { chunks }, Schedule::ZbH1][which];
        let jobs = job_list(schedule, stages, stage, micro).unwrap();
        prop_assert_eq!(jobs.last().map(|j| j.kind), Some(JobKind::Optimizer));
        let n_chunks = if let Schedule::Vpp { chunks } = schedule { chunks } else { 1 };
        for c in 0..n_chunks {
            for m in 0..micro {
                let chunk = matches!(schedule, Schedule::Vpp { .. }).then_some(c);
                let at = |kinds: &[JobKind]| -> Vec<usize> {
                    jobs.iter().enumerate()
                        .filter(|(_, j)| kinds.contains(&j.kind) && j.micro_batch == m && j.chunk == chunk)
                        .map(|(i, _)| i).collect()
                };
                let fwd = at(&[JobKind::Forward]);
                let bwd = at(&[JobKind::Backward, JobKind::BackwardB]);
                prop_assert_eq!(fwd.len(), 1, "{:?} forward of micro-batch {} chunk {}", schedule, m, c);
                prop_assert_eq!(bwd.len(), 1, "{:?} backward of micro-batch {} chunk {}", schedule, m, c);
                prop_assert!(fwd[0] < bwd[0]);
                // A split backward has its weight half after its input half.
                let w = at(&[JobKind::BackwardW]);
                prop_assert!(w.iter().all(|&i| i > bwd[0]));
            }
        }
    }
}

/// A hand-written order whose stages wait on each other is reported with the cycle, and
/// never run; one that leaves a job out, or waits for a job nobody runs, says so.
#[test]
fn deadlocks_are_found_statically_with_their_cycle() {
    use shardlab::passes::pipeline::schedule_check::{check_order, parse_jobs, OrderError};
    let lists = parse_jobs("F0 B0 F1 B1 | F1 B1 F0 B0").unwrap();
    match check_order(&lists, 2, 1) {
        Err(OrderError::Deadlock(waits)) => {
            let stages: Vec<(usize, usize)> = waits.iter().map(|w| (w.stage, w.on)).collect();
            assert_eq!(stages, [(0, 1), (1, 0)], "{waits:?}");
            assert_eq!(waits[0].job, "backward(0)");
            assert_eq!(waits[1].job, "forward(1)");
        }
        other => panic!("{other:?}"),
    }
    // Every named schedule passes the same check.
    for (s, p, m) in [
        (Schedule::FThenB, 4, 8),
        (Schedule::OneFOneB, 4, 8),
        (Schedule::Vpp { chunks: 2 }, 4, 8),
        (Schedule::ZbH1, 4, 8),
        (Schedule::ZbH1Paper, 4, 8),
    ] {
        let lists: Vec<_> = (0..p).map(|st| job_list(s, p, st, m).unwrap()).collect();
        check_order(&lists, m, s.chunks()).unwrap_or_else(|e| panic!("{s:?}: {e}"));
    }
    let err = check_order(&parse_jobs("F0 B0 | F0").unwrap(), 1, 1).unwrap_err();
    assert_eq!(
        err.to_string(),
        "stage 1: micro-batch 0 (chunk 0) lacks its forward or backward"
    );
    let err = check_order(&parse_jobs("F0 F0 B0 | F0 B0").unwrap(), 1, 1).unwrap_err();
    assert!(err.to_string().contains("forward(0) runs twice"), "{err}");
    assert!(parse_jobs("F0 X1")
        .unwrap_err()
        .to_string()
        .contains("stage 0, `X1`"));
}

/// Laying an order out in time reports what the order's check reports: the lay-out runs the
/// check only when it stalls, so a deadlock still names its cycle and an incomplete list
/// its missing job; a sound order lays out as the check passes it.
#[test]
fn laying_out_a_bad_order_reports_the_checks_error() {
    use shardlab::cost::pipeline::{lay_out, PipelineTimeError};
    use shardlab::passes::pipeline::schedule_check::{check_order, parse_jobs};
    let times = [JobTimes::unit(), JobTimes::unit()];
    for (order, m) in [
        ("F0 B0 F1 B1 | F1 B1 F0 B0", 2),
        ("F0 B0 | F0", 1),
        ("F0 F0 B0 | F0 B0", 1),
    ] {
        let lists = parse_jobs(order).unwrap();
        let expected = check_order(&lists, m, 1).unwrap_err();
        match lay_out(&lists, m, 1, &times) {
            Err(PipelineTimeError::Order(e)) => assert_eq!(e, expected, "{order}"),
            other => panic!("{order}: {other:?}"),
        }
    }
    let lists = parse_jobs("F0 F1 B0 B1 | F0 B0 F1 B1").unwrap();
    let t = lay_out(&lists, 2, 1, &times).expect("a sound order lays out");
    assert_eq!(t.step, 9.0);
}
