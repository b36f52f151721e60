//! How much memory `run` will peak at, from shapes, before anything is allocated: the
//! figure `--max-memory` is checked against.

use super::run::THREADED_RANKS_MAX;
use crate::passes::driver::Passes;

/// What one rank thread costs beyond its tensors (stack pages and allocator caches,
/// measured at 64 ranks with mimalloc; see [`THREADED_RANKS_MAX`]).
const BYTES_PER_THREAD: f64 = 4.0 * 1024.0 * 1024.0;

/// What the process needs before any tensor: the binary, the planner's programs and the
/// allocator's arenas (about 20 MB measured at 8 ranks; 48 MB counted twice the peak once
/// replicated values became shared between ranks instead of copied).
const BASE_BYTES: f64 = 32.0 * 1024.0 * 1024.0;

/// What a rank's program costs beyond its tensors: its ops, variable table and exchange
/// counters (a generous 4 KB per op), and a rank's own state (its environment's slots,
/// placement and log entries: about 70 KB a rank measured at 1,024 ranks, counted 128).
const BYTES_PER_OP: f64 = 4096.0;
const BYTES_PER_RANK: f64 = 128.0 * 1024.0;

/// About how many bytes `run` peaks at, from shapes, before anything is allocated:
/// - the serial program's variables (twice with micro-batches, their sums kept beside), and
///   as much again for their per-element error bounds;
/// - every rank's local variables (each micro-batch's, pipelined), and its program;
/// - the verification's copies: every rank's gradients and parameters, recorded;
/// - one exchange's contributions (a group's tensors, shared by its members; every
///   group's at once when ranks are threads) and the threads themselves;
/// - the f64 scratch of the serial run's error bounds (a few copies of the largest tensor).
///
/// `tests/cli.rs` holds it between the measured peak and twice it at 8, 256 and 1,024 ranks.
pub fn estimated_run_bytes(p: &Passes) -> f64 {
    let bytes = |t: &crate::ir::TensorType| t.numel() as f64 * t.dtype.size_bytes() as f64;
    let serial: f64 = p.full.program.vars().iter().map(|v| bytes(&v.ty)).sum();
    let largest = p
        .full
        .program
        .vars()
        .iter()
        .map(|v| v.ty.numel() as f64)
        .fold(0.0, f64::max);
    let ranks = &p.partitioned.ranks;
    // Persistable variables (parameters, optimizer state) are one copy; the others are each
    // micro-batch's (pipelined runs keep them until its backward: at most all M).
    let (kept, per_micro_batch) =
        ranks
            .iter()
            .flat_map(|r| r.program.vars())
            .fold((0.0, 0.0), |(kept, each), v| match v.persistable {
                true => (kept + bytes(&v.ty), each),
                false => (kept, each + bytes(&v.ty)),
            });
    let programs: f64 = ranks
        .iter()
        .map(|r| r.program.ops().len() as f64 * BYTES_PER_OP + BYTES_PER_RANK)
        .sum();
    let recorded: f64 = ranks
        .iter()
        .map(|r| {
            p.backward
                .param_grads
                .iter()
                .map(|&(param, grad)| {
                    bytes(&r.program.var(param).ty) + bytes(&r.program.var(grad).ty)
                })
                .sum::<f64>()
        })
        .sum();
    let largest_local = ranks
        .iter()
        .flat_map(|r| r.program.vars())
        .map(|v| bytes(&v.ty))
        .fold(0.0, f64::max);
    let threaded = ranks.len() <= THREADED_RANKS_MAX;
    // A group's contributions live until its last member takes them: one group at a time
    // in turn, every rank's at once on threads.
    let exchange = largest_local * ranks.len() as f64;
    let threads = if threaded {
        ranks.len() as f64 * BYTES_PER_THREAD
    } else {
        0.0
    };
    let micro_batches = p.micro_batches() as f64;
    BASE_BYTES
        + serial * (micro_batches.min(2.0) + 1.0)
        + kept
        + per_micro_batch * micro_batches
        + programs
        + recorded
        + exchange
        + threads
        + 4.0 * 8.0 * largest
}
