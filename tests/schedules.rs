//! Pipeline schedules against Paddle 3.3.1's scheduler passes: every job of every stage of
//! `fthenb`, `1f1b`, `vpp` (2 chunks) and `zbh1` on 2 stages and 4 micro-batches
//! (`tests/oracle/paddle/schedules.json`), and the invariants every schedule keeps on other
//! sizes: each micro-batch's forward and backward run once per chunk, a backward after its
//! forward, the optimizer last.
#![cfg(not(target_arch = "wasm32"))]

use proptest::prelude::*;
use shardlab::passes::schedule::{job_list, JobKind, Schedule, ScheduleError};

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
