//! Where the pipeline's time goes, stage by stage: `cargo run --release --example stage_times
//! [LAYERS]` plans the benchmarks' gpt (dp × Megatron mp on [2, 4], all 8 ranks) 7 times and
//! prints each stage's median. A profiling aid (the `bench` command reports the totals).

use shardlab::passes::backward::append_backward;
use shardlab::passes::complete::complete;
use shardlab::passes::complete_backward::complete_backward;
use shardlab::passes::ledger::ledger;
use shardlab::passes::optimizer::append_optimizer;
use shardlab::passes::partition::{partition, PartitionInput, PartitionOptions};
use std::time::{Duration, Instant};

const STAGES: [&str; 8] = [
    "complete",
    "backward",
    "verify",
    "complete backward",
    "optimizer",
    "partition",
    "ledger",
    "drop",
];

fn main() -> Result<(), String> {
    let layers = std::env::args()
        .nth(1)
        .map_or(Ok(96), |a| a.parse::<usize>())
        .map_err(|e| e.to_string())?;
    let plan = shardlab::cli::bench_plan(layers)?;
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); STAGES.len()];
    for _ in 0..7 {
        let mut marks = vec![Instant::now()];
        let c = complete(&plan).map_err(|e| e.to_string())?;
        marks.push(Instant::now());
        let b = append_backward(&plan.program).map_err(|e| e.to_string())?;
        marks.push(Instant::now());
        let problems = shardlab::ir::verify_program(&b.program).len();
        marks.push(Instant::now());
        let mut full = complete_backward(&b, &c);
        marks.push(Instant::now());
        append_optimizer(&mut full, &b.param_grads, &[], &Default::default())
            .map_err(|e| e.to_string())?;
        marks.push(Instant::now());
        let axes: Vec<_> = full.tensors[b.loss.index()].partial.axes().collect();
        let input = PartitionInput {
            dp: &full,
            forward_of: &b.forward_of,
            param_grads: &b.param_grads,
            loss_avg_axes: &axes,
            stages: &shardlab::dist::Stages::NONE,
        };
        let p = partition(&input, &PartitionOptions::default()).map_err(|e| e.to_string())?;
        marks.push(Instant::now());
        let entries = ledger(&p);
        marks.push(Instant::now());
        let kept = (problems, entries.len(), p.ranks.len());
        drop((p, entries, full, b, c));
        marks.push(Instant::now());
        for (k, w) in marks.windows(2).enumerate() {
            times[k].push(w[1] - w[0]);
        }
        std::hint::black_box(kept);
    }
    println!("gpt, {layers} layers, all 8 ranks: median of 7 runs per stage");
    for (name, mut t) in STAGES.iter().zip(times) {
        t.sort_unstable();
        println!(
            "  {name:<18} {:>9.3} ms",
            t[t.len() / 2].as_secs_f64() * 1e3
        );
    }
    Ok(())
}
