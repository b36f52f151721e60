//! A step's time, rank by rank: every rank runs its program in order; a compute op takes
//! its roofline time, max(FLOPs / peak, bytes / memory bandwidth); a collective starts when
//! the last member of its group arrives and takes its α-β time on the group's link, and
//! the time a rank waits for the others is its idle time. The step time is the latest
//! rank's finish; MFU is the serial program's forward and backward FLOPs over step time ×
//! peak × devices.
//!
//! With [`SimOptions::overlap_grad_sync`], the backward pass's gradient synchronisation
//! (data-parallel all-reduce and scale, ZeRO's flatten, reduce-scatter and scale) runs on a
//! second stream per rank, as DDP and FSDP run it, and ZeRO-3's parameter all-gathers are
//! prefetched on that stream (issued as soon as it is free, not when the compute reaches
//! them, as FSDP prefetches the next layer's): a rank issues it and computes on; the
//! collective starts when every member has issued it and its stream is free; an op that
//! reads its result (the optimizer) waits for it. A rank's time is then when both streams
//! are done, and its compute + communication + idle can exceed it: that excess is the
//! communication hidden behind compute.

use super::collective::{time as collective_time, Primitive};
use super::device::{ComputeDType, Topology, TopologyError};
use super::work::ElementBytes;
use crate::ir::{CollectiveOp, Op, OpRole, OpType, Program, Purpose, RankLocalOp, VarId};
use crate::passes::partition::RankProgram;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

/// How a step is simulated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimOptions {
    /// Overlap the backward's gradient synchronisation with the compute after it.
    pub overlap_grad_sync: bool,
}

/// Whether `op` is gradient synchronisation that may overlap later backward compute.
fn is_grad_sync(op: &Op) -> bool {
    op.role == OpRole::Backward
        && matches!(
            op.purpose(),
            Some(Purpose::DataParallel | Purpose::Sharding)
        )
}

/// Whether `op` is ZeRO-3's all-gather of a parameter for forward or backward, which FSDP
/// prefetches: issued on the communication stream as soon as it is free, ahead of the
/// compute that reads it (the stream serialises the gathers, so running ahead is bounded
/// by the communication itself, as FSDP's prefetch of the next layer is in steady state).
fn is_param_gather(op: &Op) -> bool {
    matches!(op.role, OpRole::Forward | OpRole::Backward)
        && op.ty == OpType::Collective(CollectiveOp::AllGather)
        && op.purpose() == Some(Purpose::Sharding)
}

/// A member's arrival at a collective: when, and (overlapped) the variable it writes and
/// the op's index.
#[derive(Clone, Copy, Debug)]
struct Arrival {
    rank: usize,
    at: f64,
    overlapped: Option<(VarId, usize)>,
}

/// Where one rank's time went.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RankTime {
    pub rank: u32,
    pub compute_s: f64,
    pub comm_s: f64,
    pub idle_s: f64,
    /// When the rank finished its step.
    pub total_s: f64,
    /// Each op's own time (compute, or the collective's duration; idle not included).
    pub op_s: Vec<f64>,
}

/// The step's time over all ranks.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StepTime {
    pub ranks: Vec<RankTime>,
    pub step_s: f64,
    /// The rank the step waits for: of those that finish last, the one that idled least.
    pub critical_rank: u32,
}

/// Why a step could not be simulated.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SimulateError {
    #[error(transparent)]
    Topology(#[from] TopologyError),
    #[error("rank {rank} op{op} ({ty}): its group {group:?} never completes (a rank in it has no matching collective)")]
    Stuck {
        rank: u32,
        op: usize,
        ty: OpType,
        group: Vec<u32>,
    },
}

/// Whether `op` is priced as communication (a collective, or the vocab-parallel
/// cross-entropy's all-reduces).
pub fn is_communication(program: &Program, op: &Op) -> bool {
    collective_of(program, op, ElementBytes(4.0)).is_some()
}

/// A collective's primitive and buffer size in bytes, or `None` for a compute op. The
/// vocab-parallel cross-entropy runs three all-reduces of one value per row.
fn collective_of(program: &Program, op: &Op, elem: ElementBytes) -> Option<(Primitive, f64, f64)> {
    let size = |vars: &[crate::ir::VarId]| {
        vars.first()
            .map_or(0.0, |&v| super::memory::var_bytes(program, v, elem))
    };
    let one = |p: Primitive, s: f64| Some((p, s, 1.0));
    match op.ty {
        OpType::Collective(c) => match c {
            CollectiveOp::AllReduce => one(Primitive::AllReduce, size(op.input("X"))),
            CollectiveOp::AllGather => one(Primitive::AllGather, size(op.output("Out"))),
            CollectiveOp::ReduceScatter => one(Primitive::ReduceScatter, size(op.input("X"))),
            CollectiveOp::AllToAll => one(Primitive::AllToAll, size(op.input("X"))),
            CollectiveOp::Send | CollectiveOp::Recv => one(
                Primitive::SendRecv,
                size(op.input("X")).max(size(op.output("Out"))),
            ),
            // Every member sends and receives at once, one hop of the ring.
            CollectiveOp::Ppermute => one(
                Primitive::SendRecv,
                op.input("X")
                    .iter()
                    .map(|&v| super::memory::var_bytes(program, v, elem))
                    .sum(),
            ),
        },
        OpType::RankLocal(RankLocalOp::CSoftmaxWithCrossEntropy) => {
            Some((Primitive::AllReduce, size(op.output("Loss")), 3.0))
        }
        OpType::Forward(_)
        | OpType::Grad(_)
        | OpType::FillConstant
        | OpType::Math(_)
        | OpType::Optimizer(_)
        | OpType::Amp(_)
        | OpType::RankLocal(
            RankLocalOp::Slice
            | RankLocalOp::Pad
            | RankLocalOp::CEmbedding
            | RankLocalOp::CEmbeddingGrad
            | RankLocalOp::CSoftmaxWithCrossEntropyGrad
            | RankLocalOp::FlattenPad
            | RankLocalOp::UnpadReshape
            | RankLocalOp::CoalesceTensor
            | RankLocalOp::UncoalesceTensor
            | RankLocalOp::RingAttnBlock
            | RankLocalOp::RingAttnBlockGrad,
        ) => None,
    }
}

pub use super::compute::compute_time;

/// Simulates one step of every rank in `ranks` on `topo`, without overlap.
pub fn simulate(
    ranks: &[RankProgram],
    topo: &Topology,
    dtype: ComputeDType,
) -> Result<StepTime, SimulateError> {
    simulate_with(ranks, topo, dtype, SimOptions::default())
}

/// Simulates one step of every rank in `ranks` on `topo` with `opts`.
pub fn simulate_with(
    ranks: &[RankProgram],
    topo: &Topology,
    dtype: ComputeDType,
    opts: SimOptions,
) -> Result<StepTime, SimulateError> {
    let n = ranks.len();
    let op_costs = shared_per_dataflow(ranks, |r| {
        let elem = ElementBytes(dtype.bytes());
        r.program
            .ops()
            .iter()
            .map(|op| match collective_of(&r.program, op, elem) {
                Some(c) => OpCost::Collective(c.0, c.1, c.2),
                None => OpCost::Compute(compute_time(&r.program, op, topo, dtype)),
            })
            .collect()
    });
    let mut sim = Sim {
        ranks,
        topo,
        op_costs,
        overlap: opts.overlap_grad_sync,
        comm_free: vec![0.0; n],
        pending: vec![HashSet::default(); n],
        ready: vec![HashMap::default(); n],
        queued: vec![HashMap::default(); n],
        root: vec![HashMap::default(); n],
        index: ranks.iter().enumerate().map(|(i, r)| (r.rank, i)).collect(),
        out: ranks
            .iter()
            .map(|r| RankTime {
                rank: r.rank,
                op_s: vec![0.0; r.program.ops().len()],
                ..RankTime::default()
            })
            .collect(),
        pc: vec![0; ranks.len()],
        waiting: HashMap::default(),
        group_index: HashMap::default(),
        groups: Vec::new(),
        seq: vec![Vec::new(); ranks.len()],
        blocked: vec![false; ranks.len()],
        inflight: vec![0; ranks.len()],
    };
    loop {
        let mut progressed = false;
        for i in 0..ranks.len() {
            progressed |= sim.advance(i)?;
        }
        if sim.done() {
            return Ok(sim.finish());
        }
        if !progressed {
            return Err(sim.stuck());
        }
    }
}

/// `f` of every rank, computed once per distinct dataflow: a rank whose program has an
/// earlier rank's dataflow (the ranks stamped from one stage's template) shares that
/// rank's result. Ranks are compared with the distinct ones met so far, most recent first
/// (a pipeline's ranks come stage by stage); `same_dataflow` rejects a program of another
/// stage at its first differing op.
pub fn shared_per_dataflow<T>(
    ranks: &[RankProgram],
    f: impl Fn(&RankProgram) -> T,
) -> Vec<std::sync::Arc<T>> {
    let mut distinct: Vec<(&RankProgram, std::sync::Arc<T>)> = Vec::new();
    ranks
        .iter()
        .map(|r| {
            let known = distinct
                .iter()
                .rev()
                .find(|(d, _)| r.program.same_dataflow(&d.program));
            match known {
                Some((_, shared)) => std::sync::Arc::clone(shared),
                None => {
                    let own = std::sync::Arc::new(f(r));
                    distinct.push((r, std::sync::Arc::clone(&own)));
                    own
                }
            }
        })
        .collect()
}

pub use super::mfu::{mfu, model_flops};

/// What an op costs, from its shapes alone (shared by ranks with one dataflow).
#[derive(Clone, Copy, Debug)]
enum OpCost {
    Compute(f64),
    Collective(Primitive, f64, f64),
}

/// The state of a simulated step.
struct Sim<'a> {
    ranks: &'a [RankProgram],
    topo: &'a Topology,
    /// Each rank's ops: compute time, or collective primitive, bytes and repeats.
    op_costs: Vec<std::sync::Arc<Vec<OpCost>>>,
    /// Rank id -> position in `ranks`.
    index: HashMap<u32, usize>,
    out: Vec<RankTime>,
    /// Each rank's next op.
    pc: Vec<usize>,
    /// Collectives waiting for members: (group id, the group's sequence number) -> arrivals.
    waiting: HashMap<(usize, usize), Vec<Arrival>>,
    /// Group ids by the `group` attribute as written (every member writes it in the same
    /// order), and per id the sorted members and how many of them are simulated.
    group_index: HashMap<Vec<i64>, usize>,
    groups: Vec<(Vec<u32>, usize)>,
    overlap: bool,
    /// Per rank (overlap): when its communication stream is free, the variables an
    /// overlapped collective will write, when finished ones were ready, and local sync work
    /// queued behind a pending variable.
    comm_free: Vec<f64>,
    pending: Vec<HashSet<VarId>>,
    ready: Vec<HashMap<VarId, f64>>,
    queued: Vec<HashMap<VarId, (f64, Vec<VarId>)>>,
    /// Per rank (overlap): a variable derived from a pending one -> the pending collective's
    /// output it waits for.
    root: Vec<HashMap<VarId, VarId>>,
    /// Per rank, how many collectives it has joined per group.
    seq: Vec<Vec<usize>>,
    /// Ranks waiting in a collective.
    blocked: Vec<bool>,
    /// Per rank (overlap): its overlapped collectives issued and not yet complete.
    inflight: Vec<usize>,
}

impl Sim<'_> {
    /// Runs rank `i`'s ops up to its next blocking collective, which it joins (and
    /// completes if it is the last member), or up to an op whose input an overlapped
    /// collective has not delivered yet. Returns whether anything happened.
    fn advance(&mut self, i: usize) -> Result<bool, SimulateError> {
        if self.blocked[i] {
            return Ok(false);
        }
        let program = &self.ranks[i].program;
        let costs = std::sync::Arc::clone(&self.op_costs[i]);
        let mut progressed = false;
        while let Some(op) = program.ops().get(self.pc[i]) {
            let cost = costs[self.pc[i]];
            let prefetched = self.overlap && is_param_gather(op);
            let overlapped = self.overlap && (is_grad_sync(op) || prefetched);
            let waits = !self.pending[i].is_empty()
                && op.all_inputs().any(|v| self.pending[i].contains(&v));
            if waits && !(overlapped && matches!(cost, OpCost::Compute(_))) {
                break; // its input is still in flight
            }
            if overlapped && self.inflight[i] > 0 && matches!(cost, OpCost::Collective(..)) {
                // The stream is busy with a collective whose start is not known yet: this
                // one queues behind it (issued once it completes and frees the stream).
                break;
            }
            progressed = true;
            let (prim, bytes, times) = match cost {
                OpCost::Collective(p, b, t) => (p, b, t),
                OpCost::Compute(t) => {
                    if overlapped {
                        self.queue_local(i, op, t);
                    } else {
                        self.wait_for_inputs(i, op);
                        let r = &mut self.out[i];
                        r.total_s += t;
                    }
                    let r = &mut self.out[i];
                    r.compute_s += t;
                    r.op_s[self.pc[i]] = t;
                    self.pc[i] += 1;
                    continue;
                }
            };
            let gid = self.group_id(op, i);
            let seq = &mut self.seq[i];
            if seq.len() <= gid {
                seq.resize(gid + 1, 0);
            }
            seq[gid] += 1;
            let key = (gid, seq[gid]);
            let arrival = self.arrival(i, op, overlapped, prefetched);
            let arrived = self.waiting.entry(key).or_default();
            arrived.push(arrival);
            let all_here = arrived.len() == self.groups[gid].1;
            if overlapped {
                self.pc[i] += 1;
            }
            if all_here {
                self.complete(&key, prim, bytes, times)?;
            }
            if !overlapped {
                break;
            }
        }
        Ok(progressed)
    }

    /// Rank `i`'s arrival at collective `op`: on the communication stream when overlapped
    /// (a prefetched gather as soon as the stream is free, not when the compute reaches
    /// it), else blocking its compute stream.
    fn arrival(&mut self, i: usize, op: &Op, overlapped: bool, prefetched: bool) -> Arrival {
        if !overlapped {
            self.wait_for_inputs(i, op);
            self.blocked[i] = true;
            return Arrival {
                rank: i,
                at: self.out[i].total_s,
                overlapped: None,
            };
        }
        let out = op.all_outputs().next().unwrap_or(VarId(0));
        self.inflight[i] += 1;
        let issued = if prefetched { 0.0 } else { self.out[i].total_s };
        let at = issued.max(self.comm_free[i]).max(self.inputs_ready(i, op));
        self.pending[i].insert(out);
        Arrival {
            rank: i,
            at,
            overlapped: Some((out, self.pc[i])),
        }
    }

    /// The id of `op`'s group (rank `i` alone without one), interned on first sight.
    fn group_id(&mut self, op: &Op, i: usize) -> usize {
        let own = [i64::from(self.ranks[i].rank)];
        let written = op
            .attr_ints("group")
            .filter(|g| !g.is_empty())
            .unwrap_or(&own);
        if let Some(&id) = self.group_index.get(written) {
            return id;
        }
        let mut members: Vec<u32> = written.iter().map(|&r| r as u32).collect();
        members.sort_unstable();
        let present = members
            .iter()
            .filter(|r| self.index.contains_key(r))
            .count();
        let id = self.groups.len();
        self.groups.push((members, present));
        self.group_index.insert(written.to_vec(), id);
        id
    }

    /// When every input of `op` that an overlapped op produced is ready.
    fn inputs_ready(&self, i: usize, op: &Op) -> f64 {
        if self.ready[i].is_empty() {
            return 0.0;
        }
        op.all_inputs()
            .filter_map(|v| self.ready[i].get(&v).copied())
            .fold(0.0, f64::max)
    }

    /// Rank `i`'s compute stream waits (idle) for `op`'s overlapped inputs.
    fn wait_for_inputs(&mut self, i: usize, op: &Op) {
        let t = self.inputs_ready(i, op);
        let r = &mut self.out[i];
        if t > r.total_s {
            r.idle_s += t - r.total_s;
            r.total_s = t;
        }
    }

    /// An overlapped local op of `t` seconds (a scale, a flatten) on rank `i`'s
    /// communication stream: queued behind its input's collective if that is in flight.
    fn queue_local(&mut self, i: usize, op: &Op, t: f64) {
        let out = op.all_outputs().next();
        if let Some(v) = op.all_inputs().find(|v| self.pending[i].contains(v)) {
            // Queued behind the collective the pending input waits for (its root).
            let root = self.root[i].get(&v).copied().unwrap_or(v);
            let chain = self.queued[i].entry(root).or_default();
            chain.0 += t;
            if let Some(o) = out.filter(|&o| o != v) {
                // A new variable after a pending one: ready when the chain is done.
                chain.1.push(o);
                self.root[i].insert(o, root);
                self.pending[i].insert(o);
            }
            return;
        }
        // After a collective already done, it runs on the stream right behind it (as it
        // would have queued behind it in flight); otherwise when the compute issues it.
        let chained = op.all_inputs().any(|v| self.ready[i].contains_key(&v));
        let issued = if chained { 0.0 } else { self.out[i].total_s };
        let start = issued.max(self.comm_free[i]).max(self.inputs_ready(i, op));
        self.comm_free[i] = start + t;
        if let Some(o) = out {
            self.ready[i].insert(o, start + t);
        }
    }

    /// Every member of `key`'s collective has arrived: it starts when the last did.
    fn complete(
        &mut self,
        key: &(usize, usize),
        prim: Primitive,
        bytes: f64,
        times: f64,
    ) -> Result<(), SimulateError> {
        let arrived = self.waiting.remove(key).unwrap_or_default();
        let start = arrived.iter().map(|a| a.at).fold(0.0, f64::max);
        let group = &self.groups[key.0].0;
        let link = self.topo.effective_link(group)?;
        let d = times * collective_time(prim, group.len(), bytes, link);
        for a in &arrived {
            let j = a.rank;
            self.out[j].comm_s += d;
            match a.overlapped {
                Some((v, at_op)) => {
                    self.inflight[j] -= 1;
                    let (extra, derived) = self.queued[j].remove(&v).unwrap_or_default();
                    let done = start + d + extra;
                    self.comm_free[j] = done;
                    for w in std::iter::once(v).chain(derived) {
                        self.ready[j].insert(w, done);
                        self.pending[j].remove(&w);
                        self.root[j].remove(&w);
                    }
                    self.out[j].op_s[at_op] = d;
                }
                None => {
                    let r = &mut self.out[j];
                    r.idle_s += start - r.total_s;
                    r.total_s = start + d;
                    r.op_s[self.pc[j]] = d;
                    self.pc[j] += 1;
                    self.blocked[j] = false;
                }
            }
        }
        Ok(())
    }

    fn done(&self) -> bool {
        self.pc
            .iter()
            .zip(self.ranks)
            .all(|(&p, r)| p >= r.program.ops().len())
            && self.pending.iter().all(HashSet::is_empty)
    }

    /// The first rank left waiting, as an error.
    fn stuck(&self) -> SimulateError {
        let i = self.blocked.iter().position(|&b| b).unwrap_or(0);
        let program = &self.ranks[i].program;
        let (ty, group) = program
            .ops()
            .get(self.pc[i])
            .map_or((OpType::FillConstant, Vec::new()), |op| {
                (op.ty, group_of(op, self.ranks[i].rank))
            });
        SimulateError::Stuck {
            rank: self.ranks[i].rank,
            op: self.pc[i],
            ty,
            group,
        }
    }

    fn finish(mut self) -> StepTime {
        // A rank is done when both its streams are.
        for (r, &free) in self.out.iter_mut().zip(&self.comm_free) {
            r.total_s = r.total_s.max(free);
        }
        let step_s = self.out.iter().map(|r| r.total_s).fold(0.0, f64::max);
        // Of the ranks that finish last, the one that waited least is the one the others
        // waited for.
        let critical_rank = self
            .out
            .iter()
            .filter(|r| r.total_s == step_s)
            .min_by(|a, b| a.idle_s.total_cmp(&b.idle_s))
            .map_or(0, |r| r.rank);
        StepTime {
            ranks: self.out,
            step_s,
            critical_rank,
        }
    }
}

/// An op's communication group (its `group` attribute; the rank alone without one).
fn group_of(op: &Op, rank: u32) -> Vec<u32> {
    match op.attr_ints("group") {
        Some(g) if !g.is_empty() => {
            let mut g: Vec<u32> = g.iter().map(|&r| r as u32).collect();
            g.sort_unstable();
            g
        }
        _ => vec![rank],
    }
}
