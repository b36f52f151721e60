//! The time of a collective under the α-β model: a number of sequential steps, each paying
//! the link's latency α, plus the bytes each rank sends over its link at bandwidth β. For a
//! ring over n ranks and a buffer of S bytes:
//!
//! | primitive | steps | bytes each rank sends |
//! |---|---|---|
//! | all_reduce | 2(n − 1) | 2(n − 1)/n · S (a reduce-scatter, then an all-gather) |
//! | all_gather | n − 1 | (n − 1)/n · S, S the gathered output |
//! | reduce_scatter | n − 1 | (n − 1)/n · S, S the input |
//! | all_to_all | n − 1 | (n − 1)/n · S (pairwise exchange: a piece of S/n to each peer) |
//! | send / recv | 1 | S |
//!
//! So a ring all-reduce takes 2(n−1)·α + 2(n−1)/n · S/β. Sources: NCCL's performance notes
//! (`PERFORMANCE.md` in NVIDIA/nccl-tests: the "bus bandwidth" factors 2(n−1)/n for
//! all-reduce, (n−1)/n for all-gather, reduce-scatter and all-to-all, 1 for send/recv, are
//! exactly these byte counts), and the scaling book's "collectives" chapter (Austin et al.,
//! *How to Scale Your Model*, 2025), whose ring all-gather costs (n−1)/n · S over the
//! bandwidth. The bytes are the ledger's (`passes::ledger::bytes_per_rank`), so the
//! ledger and the time agree.

/// A link's latency (seconds) and bandwidth (bytes per second, one direction).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Link {
    pub alpha_s: f64,
    pub beta_bytes_per_s: f64,
}

/// A collective primitive, as the cost model prices it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Primitive {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    SendRecv,
}

impl Primitive {
    /// Sequential steps of the ring algorithm over `n` ranks (each pays α once).
    pub fn steps(self, n: usize) -> f64 {
        let m = n.saturating_sub(1) as f64;
        match self {
            Primitive::AllReduce => 2.0 * m,
            Primitive::AllGather | Primitive::ReduceScatter | Primitive::AllToAll => m,
            Primitive::SendRecv => 1.0,
        }
    }

    /// The bytes each rank sends for a buffer of `s` bytes over `n` ranks (see the table).
    pub fn bytes_per_rank(self, n: usize, s: f64) -> f64 {
        let n = n.max(1) as f64;
        match self {
            Primitive::AllReduce => 2.0 * (n - 1.0) / n * s,
            Primitive::AllGather | Primitive::ReduceScatter | Primitive::AllToAll => {
                (n - 1.0) / n * s
            }
            Primitive::SendRecv => s,
        }
    }
}

/// The time of `p` over `n` ranks for a buffer of `s` bytes on `link`: steps·α + bytes/β.
/// A group of one rank moves nothing and takes no time.
pub fn time(p: Primitive, n: usize, s: f64, link: Link) -> f64 {
    if n <= 1 && p != Primitive::SendRecv {
        return 0.0;
    }
    p.steps(n) * link.alpha_s + p.bytes_per_rank(n, s) / link.beta_bytes_per_s
}
