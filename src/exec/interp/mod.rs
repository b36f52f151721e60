//! The interpreter: runs one program (serial, or one rank's) op by op. A rank is a small
//! state machine (program counter, variables, per-group exchange counters), so the same
//! code runs ranks on threads (blocking exchanges) or cooperatively (a pending exchange
//! returns `Blocked` and the op is retried on the next step).

mod attention;
mod comm;
mod decoder;
mod env;
mod forward;
mod grads;
mod moe;
mod optim;

pub use comm::reduce_all;

use super::comm::{Communicator, Contributions, Exchange, ExchangeKey};
use super::kernels::pointwise::{Binary, Unary};
use super::tensor::{strides, Tensor};
use crate::dist::TensorDistAttr;
use crate::exec::op_error::OpError;
use crate::ir::infer::axis;
use crate::ir::{ForwardOp, Op, OpType, Program, VarId};
use comm::Collective;
use optim::Update;
use std::collections::HashMap;

/// Why execution failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ExecError {
    #[error("rank {rank}, op{op} ({ty}): {error}")]
    Op {
        rank: u32,
        op: usize,
        ty: OpType,
        error: OpError,
    },
    /// An op returned a value of another shape than its program declares (a broken
    /// program: break-it's deleted collectives).
    #[error(
        "rank {rank}, op{op} ({ty}): rank {rank}'s {ty} returned {got:?} for `{var}`, which the \
         program declares {declared:?}{group}"
    )]
    WrongShape {
        rank: u32,
        op: usize,
        ty: OpType,
        got: Vec<usize>,
        var: String,
        declared: Vec<usize>,
        /// `: its group is [..]` or nothing.
        group: String,
    },
    #[error("{0}")]
    Setup(String),
    /// A rank's piece of a fed tensor could not be cut.
    #[error(transparent)]
    Shard(#[from] crate::dist::MeshError),
}

/// Where a rank's variables sit in their global tensors (for dropout masks that must match
/// the serial program's).
#[derive(Clone, Debug)]
pub struct Placement {
    pub attrs: Vec<TensorDistAttr>,
    pub global: Vec<Vec<usize>>,
    /// This rank's coordinates on the mesh, and the mesh's shape.
    pub coords: Vec<usize>,
    pub mesh_shape: Vec<usize>,
}

impl Placement {
    /// The global flat index of element `i` of local variable `v` of `local_shape`.
    pub fn global_index(&self, v: VarId, local_shape: &[usize], i: usize) -> usize {
        let (Some(attr), Some(global)) = (self.attrs.get(v.index()), self.global.get(v.index()))
        else {
            return i;
        };
        let ls = strides(local_shape);
        let gs = strides(global);
        let mut out = 0;
        for d in 0..local_shape.len() {
            let idx = (i / ls[d]) % local_shape[d].max(1);
            let axes = attr.dims.get(d).cloned().unwrap_or_default();
            // Where the rank's chunk of the dim starts (`dist::chunk`, axis by axis).
            let (mut start, mut len) = (0, global.get(d).copied().unwrap_or(0));
            for &a in axes.iter() {
                let k = self.mesh_shape.get(a.index()).copied().unwrap_or(1);
                let c = self.coords.get(a.index()).copied().unwrap_or(0);
                let (s, e) = crate::dist::chunk::chunk(len, k, c);
                start += s;
                len = e - s;
            }
            out += (start + idx) * gs.get(d).copied().unwrap_or(0);
        }
        out
    }
}

/// One program being run.
pub struct Rank<'a> {
    pub rank: u32,
    pub program: &'a Program,
    pub env: Vec<Option<Tensor>>,
    pub pc: usize,
    seq: HashMap<Vec<u32>, u64>,
    pending: Option<ExchangeKey>,
    /// Exchanges the current op has completed, in order, so an op with several exchanges
    /// (the vocab-parallel cross-entropy) resumes after the last one when it is retried.
    completed: Vec<(Contributions, usize)>,
    /// How many of `completed` the current attempt at the op has consumed.
    replayed: usize,
    placement: Option<&'a Placement>,
    /// Error bounds per variable (`bound.rs`), carried when the serial run is the
    /// reference of a verification.
    pub bounds: Option<Bounds>,
    /// The ops to run, by index, in order (a pipeline job); every op when `None`.
    pub order: Option<std::sync::Arc<Vec<usize>>>,
    /// The micro-batch being run (part of a send/recv's key).
    pub micro_batch: u64,
    /// Sends and recvs so far per (ring, micro-batch, direction).
    p2p_seq: HashMap<(Vec<u32>, u64, bool), u64>,
    /// Kernel time per op family, when profiling (`RunOptions::profile`).
    pub op_times: Option<crate::exec::profile::OpTimes>,
}

/// Error bounds of every variable: the max-norm bound, and per-element bounds where known.
#[derive(Clone, Debug, Default)]
pub struct Bounds {
    pub max: Vec<f64>,
    pub elems: Vec<Option<Vec<f64>>>,
}

impl Bounds {
    /// Zero bounds (exact sources) for `n` variables.
    pub fn new(n: usize) -> Bounds {
        Bounds {
            max: vec![0.0; n],
            elems: vec![None; n],
        }
    }
}

/// Whether a step ran to the end or waits for other ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Done,
    Blocked,
}

enum Progress {
    Next,
    Blocked,
}

impl<'a> Rank<'a> {
    /// A rank about to run `program` with `env` (one slot per variable).
    pub fn new(
        rank: u32,
        program: &'a Program,
        env: Vec<Option<Tensor>>,
        placement: Option<&'a Placement>,
    ) -> Rank<'a> {
        Rank {
            rank,
            program,
            env,
            pc: 0,
            seq: HashMap::new(),
            pending: None,
            completed: Vec::new(),
            replayed: 0,
            placement,
            bounds: None,
            order: None,
            micro_batch: 0,
            p2p_seq: HashMap::new(),
            op_times: None,
        }
    }

    /// How many ops this run executes.
    fn len(&self) -> usize {
        self.order
            .as_ref()
            .map_or(self.program.ops().len(), |o| o.len())
    }

    /// The program index of the `pc`-th op run.
    pub fn op_index(&self, pc: usize) -> usize {
        self.order
            .as_ref()
            .map_or(pc, |o| o.get(pc).copied().unwrap_or(usize::MAX))
    }

    /// Whether every op of this run has executed.
    pub fn finished(&self) -> bool {
        self.pc >= self.len()
    }

    /// Runs ops until the end or until an exchange is pending.
    pub fn step(&mut self, comm: &dyn Communicator) -> Result<Status, ExecError> {
        while self.pc < self.len() {
            let index = self.op_index(self.pc);
            let Some(op) = self.program.ops().get(index) else {
                return Err(ExecError::Setup(format!("no op {index} to run")));
            };
            // Values an op overwrites in place, for its error bound.
            let before: Vec<(VarId, Tensor)> = match self.bounds {
                Some(_) => op
                    .inputs
                    .iter()
                    .flatten()
                    .filter(|v| op.outputs.iter().flatten().any(|o| o == *v))
                    .filter_map(|&v| self.get(v).ok().map(|t| (v, t.clone())))
                    .collect(),
                None => Vec::new(),
            };
            self.replayed = 0;
            let started = self
                .op_times
                .is_some()
                .then(crate::exec::profile::now)
                .flatten();
            let progress = self.exec(op, comm);
            if let (Some(start), Some(times)) = (started, self.op_times.as_mut()) {
                times.add(op, start);
            }
            let progress = progress.map_err(|error| ExecError::Op {
                rank: self.rank,
                op: index,
                ty: op.ty,
                error,
            })?;
            match progress {
                Progress::Next => {
                    self.check_outputs(op, index)?;
                    self.completed.clear();
                    if let Some(bounds) = &self.bounds {
                        let view = super::bound::View {
                            env: &self.env,
                            before: &before,
                            err: &bounds.max,
                            elems: &bounds.elems,
                        };
                        let mut per_element = None;
                        let updates = super::bound::propagate(op, &view, &mut per_element);
                        if let Some(bounds) = &mut self.bounds {
                            for (v, b) in updates {
                                if let Some(slot) = bounds.max.get_mut(v.index()) {
                                    *slot = b;
                                }
                                if let Some(slot) = bounds.elems.get_mut(v.index()) {
                                    *slot = None;
                                }
                            }
                            if let Some((v, e)) = per_element {
                                if let Some(slot) = bounds.elems.get_mut(v.index()) {
                                    *slot = Some(e);
                                }
                            }
                        }
                    }
                    self.pc += 1
                }
                Progress::Blocked => return Ok(Status::Blocked),
            }
        }
        Ok(Status::Done)
    }

    /// Every value an op made has its variable's declared shape. A well-formed program
    /// holds this by construction (the verifier infers every type); a broken one (a
    /// collective given another group, a sync one rank skipped) does not, and the next
    /// kernel would index out of bounds. So a value that does not fit is this op's error,
    /// named with the collective's group, and no kernel ever sees a shape its program
    /// does not declare.
    fn check_outputs(&self, op: &Op, index: usize) -> Result<(), ExecError> {
        for v in op.all_outputs() {
            let Some(Some(t)) = self.env.get(v.index()) else {
                continue;
            };
            let var = self.program.var(v);
            if t.shape[..] == var.ty.shape[..] {
                continue;
            }
            let group = op.attr_ints("group").map(|g| {
                if g == [i64::from(self.rank)] {
                    ": its group is the rank alone".to_string()
                } else {
                    format!(": its group is {g:?}")
                }
            });
            return Err(ExecError::WrongShape {
                rank: self.rank,
                op: index,
                ty: op.ty,
                got: t.shape.clone(),
                var: var.name.to_string(),
                declared: var.ty.shape.to_vec(),
                group: group.unwrap_or_default(),
            });
        }
        Ok(())
    }

    /// Restarts at the first op (for the next training step).
    pub fn rewind(&mut self) {
        self.pc = 0;
    }

    /// How far the rank has come: its program counter and the exchanges the current op
    /// has completed (an op with several exchanges moves without moving the counter).
    pub fn progress(&self) -> (usize, usize) {
        (self.pc, self.completed.len())
    }

    /// The key of the exchange an op is waiting on (for deadlock reports).
    pub fn pending_key(&self) -> Option<&ExchangeKey> {
        self.pending.as_ref()
    }

    /// Exchanges `t` over the op's group.
    fn exchange(
        &mut self,
        op: &Op,
        t: Tensor,
        comm: &dyn Communicator,
    ) -> Result<Option<(Contributions, usize)>, OpError> {
        if let Some(done) = self.completed.get(self.replayed) {
            self.replayed += 1;
            return Ok(Some(done.clone()));
        }
        let group: Vec<u32> = op
            .attr_ints("group")
            .ok_or(OpError::MissingGroup)?
            .iter()
            .map(|&r| r as u32)
            .collect();
        let me = group
            .iter()
            .position(|&r| r == self.rank)
            .ok_or_else(|| OpError::NotInGroup {
                rank: self.rank,
                group: group.iter().map(|&r| i64::from(r)).collect(),
            })?;
        let key = match self.pending.take() {
            Some(k) => k,
            None => {
                let n = self.seq.entry(group.clone()).or_insert(0);
                *n += 1;
                (group.clone(), *n)
            }
        };
        match comm
            .exchange(self.rank, &key, t)
            .map_err(|source| OpError::Exchange {
                group: group.clone(),
                source,
            })? {
            Exchange::Ready(all) => {
                if op.ty != OpType::AllGather {
                    if let Some(e) = comm::out_of_step(&group, &all) {
                        return Err(e);
                    }
                }
                self.completed.push((all.clone(), me));
                self.replayed += 1;
                Ok(Some((all, me)))
            }
            Exchange::Pending => {
                self.pending = Some(key);
                Ok(None)
            }
        }
    }

    /// A pipeline send (posted, never waits) or recv (waits for its send). Keys count the
    /// sends and recvs of each ring per micro-batch and direction: both ends run them in
    /// the program's order, whatever the schedule interleaves between micro-batches.
    fn p2p(&mut self, op: &Op, comm: &dyn Communicator, send: bool) -> Result<Progress, OpError> {
        let group: Vec<u32> = op
            .attr_ints("group")
            .ok_or(OpError::MissingGroup)?
            .iter()
            .map(|&r| r as u32)
            .collect();
        let key = match self.pending.take() {
            Some(k) => k,
            None => {
                let backward = op.role == crate::ir::OpRole::Backward;
                let n = self
                    .p2p_seq
                    .entry((group.clone(), self.micro_batch, backward))
                    .or_insert(0);
                *n += 1;
                let tag = super::comm::P2P_TAG
                    | (self.micro_batch & 0xff_ffff) << 32
                    | u64::from(backward) << 31
                    | (*n & 0x7fff_ffff);
                (group.clone(), tag)
            }
        };
        if send {
            let x = self.slot(op, "X")?.clone();
            comm.post(&key, x).map_err(|source| OpError::Send {
                group: group.clone(),
                source,
            })?;
            return Ok(Progress::Next);
        }
        match comm.collect(&key).map_err(|source| OpError::Recv {
            group: group.clone(),
            source,
        })? {
            Exchange::Ready(got) => {
                let t = got.last().cloned().ok_or(OpError::EmptySend)?;
                let want: Vec<usize> = op
                    .attr_ints("shape")
                    .unwrap_or(&[])
                    .iter()
                    .map(|&d| d as usize)
                    .collect();
                if t.shape != want {
                    return Err(OpError::RecvShape {
                        group: group.clone(),
                        got: t.shape.clone(),
                        want,
                    });
                }
                self.set(op, "Out", t);
                Ok(Progress::Next)
            }
            Exchange::Pending => {
                self.pending = Some(key);
                Ok(Progress::Blocked)
            }
        }
    }

    /// The values of every variable of input slot `name`.
    fn inputs(&self, op: &Op, name: &str) -> Result<Vec<&Tensor>, OpError> {
        op.input(name).iter().map(|&v| self.get(v)).collect()
    }

    /// Runs one op: one arm per op type (no catch-all), each a method of the op's family
    /// (`forward.rs`, `grads.rs`, `decoder.rs`, `optim.rs`, `comm.rs`).
    fn exec(&mut self, op: &Op, comm: &dyn Communicator) -> Result<Progress, OpError> {
        use Binary as B;
        match op.ty {
            OpType::Forward(f) => self.exec_forward(op, f)?,
            OpType::Grad(f) => self.exec_grad(op, f)?,
            OpType::ElementwiseMax => self.binary(op, B::Max)?,
            OpType::Sqrt => self.unary(op, Unary::Sqrt)?,
            OpType::CEmbedding => self.lookup(op, true)?,
            OpType::Sum => self.sum(op)?,
            OpType::SquaredL2Norm => self.squared_l2_norm(op)?,
            OpType::FillConstant => self.fill_constant(op)?,
            OpType::Slice | OpType::Pad | OpType::FlattenPad | OpType::UnpadReshape => {
                self.move_data(op)?
            }
            OpType::CoalesceTensor | OpType::UncoalesceTensor => self.bucket(op)?,
            OpType::RingAttnBlock => self.attention(op)?,
            OpType::RingAttnBlockGrad => self.attention_grad(op)?,
            OpType::CEmbeddingGrad => self.lookup_grad(op, true)?,
            OpType::CSoftmaxWithCrossEntropyGrad => self.vocab_ce_grad(op)?,
            OpType::Sgd => self.update(op, Update::Sgd)?,
            OpType::Momentum => self.update(op, Update::Momentum)?,
            OpType::Adam => self.update(op, Update::Adam)?,
            OpType::AdamW => self.update(op, Update::AdamW)?,
            OpType::CheckFiniteAndUnscale => self.check_finite_and_unscale(op)?,
            OpType::UpdateLossScaling => self.update_loss_scaling(op)?,
            OpType::AllReduce => return self.collective(op, comm, Collective::AllReduce),
            OpType::AllGather => return self.collective(op, comm, Collective::AllGather),
            OpType::ReduceScatter => return self.collective(op, comm, Collective::ReduceScatter),
            OpType::AllToAll => return self.collective(op, comm, Collective::AllToAll),
            OpType::Ppermute => return self.ppermute(op, comm),
            OpType::CSoftmaxWithCrossEntropy => return self.vocab_ce(op, comm),
            OpType::Send => return self.p2p(op, comm, true),
            OpType::Recv => return self.p2p(op, comm, false),
        }
        Ok(Progress::Next)
    }

    /// A forward op's kernel.
    fn exec_forward(&mut self, op: &Op, f: ForwardOp) -> Result<(), OpError> {
        use Binary as B;
        use ForwardOp as F;
        match f {
            F::MatmulV2 => self.matmul(op)?,
            F::ElementwiseAdd => self.binary(op, B::Add)?,
            F::ElementwiseSub => self.binary(op, B::Sub)?,
            F::ElementwiseMul => self.binary(op, B::Mul)?,
            F::ElementwiseDiv => self.binary(op, B::Div)?,
            F::Relu => self.unary(op, Unary::Relu)?,
            F::Gelu => self.unary(op, forward::gelu(op))?,
            F::Silu => self.unary(op, Unary::Silu)?,
            F::Sigmoid => self.unary(op, Unary::Sigmoid)?,
            F::Square => self.unary(op, Unary::Square)?,
            F::Scale => self.unary(op, forward::scale(op))?,
            F::Cast => self.cast(op)?,
            F::Assign => self.assign(op)?,
            F::Dropout => self.dropout(op)?,
            F::Softmax => self.softmax(op, false)?,
            F::FusedSoftmaxMaskUpperTriangle => self.softmax(op, true)?,
            F::LayerNorm => self.layer_norm(op)?,
            F::RmsNorm => self.rms_norm(op)?,
            F::FusedRotaryPositionEmbedding => self.rope(op, false)?,
            F::RepeatInterleave => self.repeat_interleave(op, false)?,
            F::LookupTableV2 => self.lookup(op, false)?,
            F::Reshape2 => self.reshape(op)?,
            F::Transpose2 => self.transpose(op)?,
            F::Split => self.split(op)?,
            F::Concat => self.concat(op)?,
            F::ReduceSum => self.reduce(op, false, false)?,
            F::ReduceMean => self.reduce(op, true, false)?,
            F::Mean => self.reduce(op, true, true)?,
            F::SoftmaxWithCrossEntropy => self.softmax_ce(op)?,
            F::MoeDispatch => self.moe_dispatch(op)?,
            F::MoeCombine => self.moe_combine(op)?,
            F::FlashAttn => self.attention(op)?,
        }
        Ok(())
    }

    /// A grad op's kernel.
    fn exec_grad(&mut self, op: &Op, f: ForwardOp) -> Result<(), OpError> {
        use Binary as B;
        use ForwardOp as F;
        match f {
            F::MatmulV2 => self.matmul_grad(op)?,
            F::ElementwiseAdd => self.binary_grad(op, B::Add)?,
            F::ElementwiseSub => self.binary_grad(op, B::Sub)?,
            F::ElementwiseMul => self.binary_grad(op, B::Mul)?,
            F::ElementwiseDiv => self.binary_grad(op, B::Div)?,
            F::Relu => self.unary_grad(op, Unary::Relu)?,
            F::Gelu => self.unary_grad(op, forward::gelu(op))?,
            F::Silu => self.unary_grad(op, Unary::Silu)?,
            F::Sigmoid => self.unary_grad(op, Unary::Sigmoid)?,
            F::Square => self.unary_grad(op, Unary::Square)?,
            F::Scale => self.unary_grad(op, forward::scale(op))?,
            F::Cast => self.cast_grad(op)?,
            F::Assign | F::Reshape2 => self.reshaped_grad(op)?,
            F::Dropout => self.dropout_grad(op)?,
            F::Softmax => self.softmax_grad(op, false)?,
            F::FusedSoftmaxMaskUpperTriangle => self.softmax_grad(op, true)?,
            F::LayerNorm => self.layer_norm_grad(op)?,
            F::RmsNorm => self.rms_norm_grad(op)?,
            F::FusedRotaryPositionEmbedding => self.rope(op, true)?,
            F::RepeatInterleave => self.repeat_interleave(op, true)?,
            F::LookupTableV2 => self.lookup_grad(op, false)?,
            F::Transpose2 => self.transpose_grad(op)?,
            F::Split => self.split_grad(op)?,
            F::Concat => self.concat_grad(op)?,
            F::ReduceSum => self.reduce_grad(op, false, false)?,
            F::ReduceMean => self.reduce_grad(op, true, false)?,
            F::Mean => self.reduce_grad(op, true, true)?,
            F::SoftmaxWithCrossEntropy => self.softmax_ce_grad(op)?,
            F::MoeDispatch => self.moe_dispatch_grad(op)?,
            F::MoeCombine => self.moe_combine_grad(op)?,
            F::FlashAttn => self.attention_grad(op)?,
        }
        Ok(())
    }
}

fn perm(op: &Op, rank: usize) -> Result<Vec<usize>, OpError> {
    op.attr_ints("axis")
        .unwrap_or(&[])
        .iter()
        .map(|&p| axis(p, rank, "axis").map_err(OpError::Attr))
        .collect()
}
