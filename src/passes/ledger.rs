//! The communication ledger: every collective of every rank with its kind, purpose
//! (`Op::purpose`, from its namescope), group, bytes moved per rank, phase and reason. Bytes follow the ring
//! model: all-reduce 2(n−1)/n·S, all-gather (n−1)/n·S_out, reduce-scatter (n−1)/n·S_in,
//! all-to-all (n−1)/n·S, send/recv S. The vocab-parallel cross-entropy
//! (`c_softmax_with_cross_entropy`) counts as tensor parallel: three all-reduces of a value
//! per row.

use super::partition::Partitioned;
pub use crate::ir::Purpose;
use crate::ir::{Op, OpClass, OpRole, OpType, Program};
use serde::Serialize;
use std::fmt;
use std::sync::Arc;

/// One collective on one rank.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Entry {
    pub rank: u32,
    pub op_index: usize,
    pub kind: &'static str,
    pub purpose: Purpose,
    pub group: Vec<u32>,
    pub reduce_type: Option<String>,
    pub tensor: Arc<str>,
    pub bytes_per_rank: f64,
    pub phase: &'static str,
    pub reason: Reason,
}

/// Bytes one rank sends for `op` in the ring model.
pub fn bytes_per_rank(program: &Program, op: &Op) -> f64 {
    let n = op.attr_ints("group").map_or(1, |g| g.len()).max(1) as f64;
    let size = |v: Option<&crate::ir::VarId>| {
        v.map_or(0.0, |&v| {
            let t = &program.var(v).ty;
            t.bytes() as f64
        })
    };
    let x = size(op.input("X").first());
    let out = size(op.output("Out").first());
    match op.ty {
        OpType::AllReduce => 2.0 * (n - 1.0) / n * x,
        OpType::AllGather => (n - 1.0) / n * out,
        OpType::ReduceScatter | OpType::AllToAll => (n - 1.0) / n * x,
        OpType::Send => x,
        // Every tensor once, to the next member of the ring.
        OpType::Ppermute => op.input("X").iter().map(|&v| size(Some(&v))).sum(),
        // Three all-reduces of one value per row: the max, the target logit, the exp-sum.
        OpType::CSoftmaxWithCrossEntropy => {
            let loss = size(op.output("Loss").first());
            3.0 * 2.0 * (n - 1.0) / n * loss
        }
        OpType::Forward(_)
        | OpType::FillConstant
        | OpType::Grad(_)
        | OpType::Math(_)
        | OpType::Optimizer(_)
        | OpType::Amp(_)
        | OpType::Recv
        | OpType::Slice
        | OpType::Pad
        | OpType::CEmbedding
        | OpType::CEmbeddingGrad
        | OpType::CSoftmaxWithCrossEntropyGrad
        | OpType::FlattenPad
        | OpType::UnpadReshape
        | OpType::CoalesceTensor
        | OpType::UncoalesceTensor
        | OpType::RingAttnBlock
        | OpType::RingAttnBlockGrad => 0.0,
    }
}

fn phase(role: OpRole) -> &'static str {
    match role {
        OpRole::Forward | OpRole::Loss => "forward",
        OpRole::Backward => "backward",
        OpRole::Optimize => "optimizer",
    }
}

/// Why a collective is there, in words: kept as its parts and written out on demand (a
/// ledger has thousands of entries and most are never printed).
#[derive(Clone, Debug, PartialEq)]
pub struct Reason {
    purpose: Purpose,
    tensor: Arc<str>,
    /// The op the reason names: the producer of a partial value, the consumer of a
    /// reshard.
    op: Option<&'static str>,
    vocab_cross_entropy: bool,
    /// A pipeline send's (true) or recv's peer rank.
    peer: Option<(bool, i64)>,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = &self.tensor;
        if self.vocab_cross_entropy {
            return write!(
                f,
                "vocab-parallel cross-entropy over the class shards of {t}: all_reduce the row \
                 max, the target logit and the exp-sum"
            );
        }
        match self.purpose {
            Purpose::DataParallel => write!(f, "sum the data-parallel shards of the gradient {t}"),
            Purpose::TensorParallel => write!(
                f,
                "complete the partial sums of {t} after {}",
                self.op.unwrap_or("its producer")
            ),
            Purpose::Reshard => write!(
                f,
                "{t} is laid out differently from what {} wants",
                self.op.unwrap_or("its consumer")
            ),
            Purpose::AmpFlag => f.write_str("agree on found_inf across the mesh"),
            Purpose::GlobalNorm => f.write_str("sum the squared-norm shards of the gradients"),
            Purpose::Pipeline => match self.peer {
                Some((true, p)) => write!(f, "send {t} to rank {p}, on the stage that reads it"),
                Some((false, p)) => {
                    write!(
                        f,
                        "receive {t} from rank {p}, on the stage that computes it"
                    )
                }
                None => write!(f, "move {t} between pipeline stages"),
            },
            Purpose::Sharding => write!(f, "ZeRO: {t} between its shards and the whole"),
            Purpose::TiedParameter => write!(
                f,
                "sum the shares of tied gradient {t} over the stages holding a copy"
            ),
            Purpose::ContextParallel => write!(
                f,
                "ring attention: pass the block {t} to the next rank of the context-parallel ring"
            ),
        }
    }
}

impl Serialize for Reason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

fn reason(program: &Program, ops: &[Arc<Op>], i: usize, purpose: Purpose) -> Reason {
    let op = &ops[i];
    let vocab_cross_entropy = op.ty == OpType::CSoftmaxWithCrossEntropy;
    let x = if vocab_cross_entropy { "Logits" } else { "X" };
    let input = op.input(x).first().copied();
    let tensor = input
        .or_else(|| {
            (op.ty == OpType::Recv)
                .then(|| op.output("Out").first().copied())
                .flatten()
        })
        .map_or_else(|| Arc::from(""), |v| program.var(v).name.clone());
    let named = match purpose {
        Purpose::TensorParallel if !vocab_cross_entropy => ops[..i]
            .iter()
            .rev()
            .find(|o| o.all_outputs().any(|v| Some(v) == input))
            .map(|p| p.ty.name()),
        Purpose::Reshard => ops[i + 1..]
            .iter()
            .find(|o| o.ty.class() != OpClass::Collective && o.purpose() != Some(Purpose::Reshard))
            .map(|c| c.ty.name()),
        Purpose::TensorParallel
        | Purpose::DataParallel
        | Purpose::AmpFlag
        | Purpose::GlobalNorm
        | Purpose::Pipeline
        | Purpose::Sharding
        | Purpose::TiedParameter
        | Purpose::ContextParallel => None,
    };
    let peer = matches!(op.ty, OpType::Send | OpType::Recv)
        .then(|| (op.ty == OpType::Send, op.attr_int("peer", -1)));
    Reason {
        purpose,
        tensor,
        op: named,
        vocab_cross_entropy,
        peer,
    }
}

/// The ledger of every rank.
pub fn ledger(parts: &Partitioned) -> Vec<Entry> {
    let mut entries = Vec::new();
    for r in &parts.ranks {
        let ops = r.program.ops();
        for (i, op) in ops.iter().enumerate() {
            let vocab_ce = op.ty == OpType::CSoftmaxWithCrossEntropy;
            if op.ty.class() != OpClass::Collective && !vocab_ce {
                continue;
            }
            // Every collective the planner inserts has a purpose; a rank program holds no
            // other.
            let Some(purpose) = (if vocab_ce {
                Some(Purpose::TensorParallel)
            } else {
                op.purpose()
            }) else {
                continue;
            };
            let x = if vocab_ce { "Logits" } else { "X" };
            entries.push(Entry {
                rank: r.rank,
                op_index: i,
                kind: op.ty.name(),
                purpose,
                group: op
                    .attr_ints("group")
                    .unwrap_or(&[])
                    .iter()
                    .map(|&g| g as u32)
                    .collect(),
                reduce_type: if vocab_ce {
                    Some("MAX, SUM, SUM".into())
                } else {
                    op.attr_str("reduce_type").map(str::to_string)
                },
                tensor: op
                    .input(x)
                    .first()
                    .or_else(|| op.output("Out").first().filter(|_| op.ty == OpType::Recv))
                    .map_or_else(|| Arc::from(""), |&v| r.program.var(v).name.clone()),
                bytes_per_rank: bytes_per_rank(&r.program, op),
                phase: phase(op.role),
                reason: reason(&r.program, ops, i, purpose),
            });
        }
    }
    entries
}

/// One row of a rank's summary: (phase, purpose, collective, count, bytes sent).
pub type SummaryRow = (&'static str, Purpose, &'static str, usize, f64);

/// Counts and bytes per (phase, purpose, kind) for one rank, in order of first appearance.
pub fn summary_rows(entries: &[Entry], rank: u32) -> Vec<SummaryRow> {
    let mut rows: Vec<SummaryRow> = Vec::new();
    for e in entries.iter().filter(|e| e.rank == rank) {
        match rows
            .iter_mut()
            .find(|r| r.0 == e.phase && r.1 == e.purpose && r.2 == e.kind)
        {
            Some(r) => {
                r.3 += 1;
                r.4 += e.bytes_per_rank;
            }
            None => rows.push((e.phase, e.purpose, e.kind, 1, e.bytes_per_rank)),
        }
    }
    rows
}

/// Counts and bytes per (phase, purpose, kind) for one rank, as text.
pub fn summary(entries: &[Entry], rank: u32) -> String {
    let rows = summary_rows(entries, rank);
    // The collective column fits its longest name (`c_softmax_with_cross_entropy`).
    let w = rows.iter().map(|r| r.2.len()).max().unwrap_or(0).max(15);
    let mut out = format!("communication of rank {rank} (ring model, bytes sent per rank):\n");
    out.push_str(&format!(
        "  {:<10} {:<16} {:<w$} {:>5} {:>12}\n",
        "phase", "purpose", "collective", "count", "bytes"
    ));
    let mut total = 0.0;
    for (phase, purpose, kind, count, bytes) in &rows {
        out.push_str(&format!(
            "  {phase:<10} {:<16} {kind:<w$} {count:>5} {bytes:>12.0}\n",
            purpose.name()
        ));
        total += bytes;
    }
    out.push_str(&format!(
        "  {:<10} {:<16} {:<w$} {:>5} {total:>12.0}\n",
        "total",
        "",
        "",
        rows.iter().map(|r| r.3).sum::<usize>()
    ));
    out
}
