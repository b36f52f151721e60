//! `bench --what step`: one training step of every rank against the serial step, and where
//! the difference goes, op family by op family.

use super::bench::gpt_plan;
use crate::exec::run::{run_distributed, run_serial, Log, RunOptions};
use crate::models::scenarios::megatron_shards;
use crate::passes::driver::{run_passes, PassOptions, Passes};
use crate::plan::Plan;
use std::time::{Duration, Instant};

/// The plan `bench --what step` runs: gpt (4 layers, hidden 256) on [2, 4], dp x Megatron mp.
pub fn step_plan() -> Result<Plan, String> {
    let mut shards = vec!["x=dp,-,-".to_string()];
    shards.extend(megatron_shards(4, "mp"));
    gpt_plan(4, "2x4:dp,mp", &shards)
}

/// One training step of gpt (4 layers, hidden 256) on [2, 4] with dp x mp: the 8 ranks
/// stepped on one thread (their total CPU work) against the serial step, then the kernel
/// time of each op family in both, the families that differ most first.
pub fn bench_step(repeat: usize) -> Result<String, String> {
    let plan = step_plan()?;
    let p = run_passes(&plan, &PassOptions::default()).map_err(|e| e.to_string())?;
    // Time the steps, not the read-back of every gradient and parameter for verification.
    let opts = RunOptions {
        record: false,
        ..RunOptions::default()
    };
    // Alternate the three in each round, so the machine's drift (a shared 2-core VM's
    // neighbours) lands on all of them alike and the ratio stays meaningful.
    let mut times: [Vec<Duration>; 3] = Default::default();
    for _ in 0..repeat.max(1) {
        for (i, t) in times.iter_mut().enumerate() {
            let start = Instant::now();
            match i {
                0 => run_serial(&p, &opts).map(|_| ()),
                1 => run_distributed(&p, &opts, false).map(|_| ()),
                _ => run_distributed(&p, &opts, true).map(|_| ()),
            }
            .map_err(|e| e.to_string())?;
            t.push(start.elapsed());
        }
    }
    let [serial, coop, threads] = times.map(|mut t| {
        crate::sort::sort(&mut t);
        t[t.len() / 2]
    });
    let mut out = format!(
        "one training step of gpt (4 layers, hidden 256, batch 4, seq 16) on [2, 4], median of runs\n\
         \x20 serial step:                      {:>9.2} ms\n\
         \x20 8 ranks on one thread (total CPU): {:>9.2} ms  ({:.2}x serial)\n\
         \x20 8 ranks on threads (wall):         {:>9.2} ms\n",
        serial.as_secs_f64() * 1e3,
        coop.as_secs_f64() * 1e3,
        coop.as_secs_f64() / serial.as_secs_f64(),
        threads.as_secs_f64() * 1e3
    );
    out.push_str(&families(&p, repeat)?);
    Ok(out)
}

/// The kernel time of each op family, serial and all ranks (one thread), in ms per step
/// averaged over `repeat` profiled runs, largest difference first; the rest of each run
/// (initial values, sharding them, scheduling) as one line.
fn families(p: &Passes, repeat: usize) -> Result<String, String> {
    let opts = RunOptions {
        record: false,
        profile: true,
        ..RunOptions::default()
    };
    let runs = repeat.max(1);
    let mut serial = Vec::new();
    let mut ranks = Vec::new();
    let (mut serial_total, mut ranks_total) = (0.0, 0.0);
    for _ in 0..runs {
        let start = Instant::now();
        serial.push(run_serial(p, &opts).map_err(|e| e.to_string())?);
        serial_total += start.elapsed().as_secs_f64();
        let start = Instant::now();
        ranks.push(run_distributed(p, &opts, false).map_err(|e| e.to_string())?);
        ranks_total += start.elapsed().as_secs_f64();
    }
    let (s, r) = (per_family(&serial, runs), per_family(&ranks, runs));
    let names: std::collections::BTreeSet<&String> = s.keys().chain(r.keys()).collect();
    let mut names: Vec<&String> = names.into_iter().collect();
    let diff = |n: &String| r.get(n).copied().unwrap_or(0.0) - s.get(n).copied().unwrap_or(0.0);
    crate::sort::sort_by(&mut names, |a, b| {
        diff(b).abs().total_cmp(&diff(a).abs()).then(a.cmp(b))
    });
    let mut out = format!(
        "kernel time by op family, ms per step (mean of {runs} profiled runs)\n{:>10} {:>10} {:>10}  family\n",
        "serial", "8 ranks", "ranks-ser"
    );
    let row =
        |name: &str, a: f64, b: f64| format!("{a:>10.2} {b:>10.2} {:>+10.2}  {name}\n", b - a);
    for n in names.iter().take(12) {
        let (a, b) = (
            s.get(*n).copied().unwrap_or(0.0),
            r.get(*n).copied().unwrap_or(0.0),
        );
        out.push_str(&row(n, a * 1e3, b * 1e3));
    }
    let (ks, kr): (f64, f64) = (s.values().sum(), r.values().sum());
    out.push_str(&row("every op", ks * 1e3, kr * 1e3));
    let (ts, tr) = (serial_total / runs as f64, ranks_total / runs as f64);
    out.push_str(&row(
        "outside the ops (set-up, scheduling)",
        (ts - ks) * 1e3,
        (tr - kr) * 1e3,
    ));
    Ok(out)
}

/// Seconds per run of each op family.
fn per_family(logs: &[Log], runs: usize) -> std::collections::BTreeMap<String, f64> {
    let mut m = std::collections::BTreeMap::new();
    for (name, secs) in logs.iter().flat_map(|l| &l.op_times) {
        *m.entry(name.clone()).or_insert(0.0) += secs / runs as f64;
    }
    m
}
