//! `run`'s memory estimate against the peak it really reaches: the child's peak resident
//! size (wait4's `ru_maxrss`) on data parallelism over 8, 256 and 1,024 ranks, and on a
//! few other shapes of plan. The estimate must be at least the peak (so `--max-memory`
//! refuses before allocating what it cannot hold) and at most twice it (so it does not
//! refuse what fits). It once said 84 MiB where 256 ranks peaked at 1.6 GB.
#![cfg(all(unix, not(target_arch = "wasm32")))]

use std::process::{Command, Stdio};

/// Runs `shardlab run ARGS --format json`; returns (its estimate, its peak RSS), in bytes.
/// The child is reaped by wait4 (for its rusage), not by `Child::wait`.
#[allow(clippy::zombie_processes)]
fn estimate_and_peak(args: &[&str]) -> (f64, f64) {
    let child = Command::new(env!("CARGO_BIN_EXE_shardlab"))
        .arg("run")
        .args(args)
        .args(["--format", "json", "--max-memory", "64G"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    // Read the output before reaping, so a full pipe cannot block the child.
    let mut stdout = child.stdout.unwrap();
    let mut text = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut text).unwrap();
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our own child, not yet reaped; the pointers are to live locals.
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(reaped, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{args:?}: {text}"
    );
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let estimate = json["memory_estimate_bytes"].as_f64().expect("an estimate");
    (estimate, usage.ru_maxrss as f64 * 1024.0)
}

/// Holds the estimate of `run ARGS` (space-separated) between its peak and twice it.
fn within(args: &str) {
    let args: Vec<&str> = args.split_whitespace().collect();
    let (estimate, peak) = estimate_and_peak(&args);
    let mib = |b: f64| b / (1 << 20) as f64;
    assert!(
        estimate >= peak && estimate <= 2.0 * peak,
        "{args:?}: estimate {:.0} MiB, peak {:.0} MiB (ratio {:.2})",
        mib(estimate),
        mib(peak),
        estimate / peak
    );
}

#[test]
fn the_estimate_holds_the_peak_on_data_parallel_meshes() {
    for n in [8, 256, 1024] {
        within(&format!(
            "--preset mlp --batch {n} --mesh {n}:dp --shard x=dp,-"
        ));
    }
}

#[test]
fn the_estimate_holds_the_peak_on_other_plans() {
    within("--preset gpt --layers 4 --batch 8 --mesh 2x4:dp,mp --shard x=dp,-,-");
    within("--preset gpt --layers 4 --batch 8 --mesh 2:pp --micro-batches 4");
    within(
        "--preset gpt --layers 2 --batch 8 --mesh 8:dp --shard x=dp,-,- --zero 3 --optimizer adam",
    );
}
