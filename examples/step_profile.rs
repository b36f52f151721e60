//! Where the executor's time goes: `cargo run --release --example step_profile [serial|ranks]`
//! steps the plan of `bench --what step` (gpt, 4 layers, hidden 256, on [2, 4]) 40 times:
//! the serial program, its 8 ranks cooperatively on one thread, or (no argument) both
//! alternately, printing the medians and their ratio. Run it under `perf record` to
//! profile one of them (the `bench` command reports the same medians).

use shardlab::exec::run::{run_distributed, run_serial, RunOptions};
use shardlab::passes::driver::{run_passes, PassOptions};
use std::time::{Duration, Instant};

/// The command-line tool's allocator, so the profile is the `bench` command's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> Result<(), String> {
    let plan = shardlab::cli::step_bench_plan()?;
    let p = run_passes(&plan, &PassOptions::default()).map_err(|e| e.to_string())?;
    let opts = RunOptions {
        record: false,
        ..RunOptions::default()
    };
    let which = std::env::args().nth(1).unwrap_or_default();
    let (mut serial, mut ranks) = (Vec::new(), Vec::new());
    for _ in 0..40 {
        if which != "ranks" {
            let start = Instant::now();
            run_serial(&p, &opts).map_err(|e| e.to_string())?;
            serial.push(start.elapsed());
        }
        if which != "serial" {
            let start = Instant::now();
            run_distributed(&p, &opts, false).map_err(|e| e.to_string())?;
            ranks.push(start.elapsed());
        }
    }
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v.get(v.len() / 2).copied().unwrap_or_default()
    };
    let (s, r) = (median(&mut serial), median(&mut ranks));
    println!(
        "serial {s:.2?}, 8 ranks on one thread {r:.2?}, ratio {:.2}",
        r.as_secs_f64() / s.as_secs_f64().max(1e-12)
    );
    Ok(())
}
