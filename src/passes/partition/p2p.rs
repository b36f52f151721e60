//! Pipeline send/recv, as Paddle's Resharder inserts them for an op whose input lives on
//! another stage's mesh (`tests/oracle/paddle/complete_pp.json`). At the consumer's place
//! in the program:
//! - the producing stage's ranks reshard the tensor to its completed layout (if their copy
//!   is in another) and `send` it;
//! - the consuming stage's ranks `recv` it. In forward into the tensor itself; in backward
//!   into `…@recv@k` followed by an `assign` to `…@RESHARD@k`, which the consumers then read
//!   (Paddle's `@recv_0` and `@RESHARD_0`).
//!
//! Each tensor is sent once per consuming stage, each direction on its own two-rank ring
//! (`Groups::p2p_ring`). Peers are the ranks at equal coordinates on the other axes: what
//! the Resharder's pairing (`dist::p2p_sources`) gives for stage meshes of equal shape and
//! layout, which stages on a `pp` axis always are. Send and recv are in namescope
//! `/auto_parallel/reshard` and carry the chunk of the job that runs them: a send its
//! producer's, a recv its consumer's.

use super::rank::{PartitionError, RankBuilder};
use super::reshard::reshard;
use super::stamp::RankAttrs;
use crate::dist::Stages;
use crate::ir::{Attr, Op, OpRole, OpType, Purpose, VarId};
use crate::passes::dist_program::DistProgram;
use crate::passes::pipeline::stages::{virtual_stage, ALL_STAGES};
use rustc_hash::FxHashSet;
use std::sync::Arc;

/// Where every op runs and every variable lives, shared by all ranks.
#[derive(Clone, Debug)]
pub struct StagePlan {
    pub stages: Stages,
    /// Each op's virtual stage.
    pub op_stage: Vec<usize>,
    /// Each variable's virtual stage: where it is first written. `None` for a source
    /// variable (a parameter, an input), which each stage reading it is given.
    pub home: Vec<Option<usize>>,
    /// Each variable's first reader's virtual stage.
    pub first_reader: Vec<Option<usize>>,
    /// By physical stage, the ops its ranks must look at, in program order: those it runs
    /// (its own and every-stage ops) and those reading a variable it sends. Every other op
    /// leaves its ranks' programs unchanged ([`RankPipe::before`] returns false and emits
    /// nothing), so a rank visits a stage's share of the program, not all of it.
    pub visits: Vec<Vec<usize>>,
}

impl StagePlan {
    /// The stages of `dp`'s ops (from their dist attrs) and variables.
    pub fn new(dp: &DistProgram, stages: &Stages) -> StagePlan {
        let op_stage: Vec<usize> = dp.ops.iter().map(|a| virtual_stage(stages, a)).collect();
        let mut home: Vec<Option<usize>> = vec![None; dp.program.vars().len()];
        let mut read = vec![false; home.len()];
        let mut first_reader: Vec<Option<usize>> = vec![None; home.len()];
        for (i, op) in dp.program.ops().iter().enumerate() {
            for v in op.all_inputs() {
                read[v.index()] = true;
                first_reader[v.index()].get_or_insert(op_stage[i]);
            }
            for v in op.all_outputs() {
                if !read[v.index()] && home[v.index()].is_none() {
                    home[v.index()] = Some(op_stage[i]);
                }
            }
        }
        let mut plan = StagePlan {
            stages: *stages,
            op_stage,
            home,
            first_reader,
            visits: Vec::new(),
        };
        plan.visits = plan.stage_visits(dp);
        plan
    }

    /// [`StagePlan::visits`]: `before`'s conditions for emitting a send, a recv or the op.
    fn stage_visits(&self, dp: &DistProgram) -> Vec<Vec<usize>> {
        let count = self.stages.stages.max(1);
        let mut visits: Vec<Vec<usize>> = vec![Vec::new(); count];
        let mut visit = |stage: usize, i: usize| {
            if let Some(list) = visits.get_mut(stage) {
                if list.last() != Some(&i) {
                    list.push(i);
                }
            }
        };
        for (i, op) in dp.program.ops().iter().enumerate() {
            let k = self.op_stage[i];
            if k == ALL_STAGES {
                (0..count).for_each(|s| visit(s, i));
                continue;
            }
            let to = self.physical(k);
            for v in op.all_inputs() {
                let Some(h) = self.home.get(v.index()).copied().flatten() else {
                    continue;
                };
                let from = self.physical(h);
                if from != to && from != ALL_STAGES {
                    visit(from, i);
                }
            }
            visit(to, i);
        }
        visits
    }

    /// The physical stage whose ranks hold `v` at the end of the step: where it is
    /// computed, or for a source variable (a parameter) where it is first read.
    pub fn owner(&self, v: VarId) -> usize {
        let k = self
            .home
            .get(v.index())
            .copied()
            .flatten()
            .or_else(|| self.first_reader.get(v.index()).copied().flatten())
            .unwrap_or(0);
        self.physical(k)
    }

    /// The physical stage of virtual stage `k` ([`ALL_STAGES`] stays itself).
    pub fn physical(&self, k: usize) -> usize {
        if k == ALL_STAGES {
            return ALL_STAGES;
        }
        self.stages.split(k).0
    }

    /// The chunk of virtual stage `k` (0 for every-stage ops).
    pub fn chunk(&self, k: usize) -> u16 {
        if k == ALL_STAGES {
            return 0;
        }
        self.stages.split(k).1 as u16
    }
}

/// Keeps the entries of each slot that `keep` marks.
fn filter_slots<S, T>(slots: &mut [S], keep: &[Vec<bool>])
where
    S: AsMut<[T]> + Extend<T> + IntoIterator<Item = T> + Default,
{
    for (slot, marks) in slots.iter_mut().zip(keep) {
        let kept: Vec<T> = std::mem::take(slot)
            .into_iter()
            .zip(marks.iter().chain(std::iter::repeat(&true)))
            .filter(|(_, &k)| k)
            .map(|(v, _)| v)
            .collect();
        slot.extend(kept);
    }
}

/// One rank's pipeline bookkeeping while its program is built.
pub struct RankPipe<'a> {
    plan: &'a StagePlan,
    /// This rank's physical stage.
    me: usize,
    /// (variable, destination stage) pairs already sent.
    sent: FxHashSet<(VarId, usize)>,
    /// By serial variable: the local variable consumers read instead, once received
    /// (dense: every input of every op on the stage is looked up).
    received: Vec<Option<VarId>>,
}

impl<'a> RankPipe<'a> {
    pub fn new(plan: &'a StagePlan, me: usize) -> RankPipe<'a> {
        RankPipe {
            plan,
            me,
            sent: FxHashSet::default(),
            received: vec![None; plan.home.len()],
        }
    }

    /// Before op `i`: the sends and recvs of its inputs that live on another stage, and its
    /// inputs renamed to what was received. Returns whether this rank runs the op.
    pub fn before(
        &mut self,
        b: &mut RankBuilder,
        dp: &DistProgram,
        i: usize,
        local: &mut Arc<Op>,
        attr: &mut std::borrow::Cow<'_, crate::dist::OperatorDistAttr>,
    ) -> Result<bool, PartitionError> {
        let k = self.plan.op_stage[i];
        if k == ALL_STAGES {
            b.chunk = 0;
            self.keep_own_stage(local, attr);
            return Ok(true);
        }
        let to = self.plan.physical(k);
        let role = b.role;
        // Not collected: this runs for every op on every stage's rank.
        for v in local.all_inputs() {
            let Some(h) = self.plan.home[v.index()] else {
                continue;
            };
            let from = self.plan.physical(h);
            if from == to || from == ALL_STAGES {
                continue;
            }
            if self.me == from && self.sent.insert((v, to)) {
                b.chunk = self.plan.chunk(h);
                self.send(b, dp, v, to)?;
            }
            if self.me == to && self.received.get(v.index()).is_some_and(Option::is_none) {
                b.chunk = self.plan.chunk(k);
                let got = self.recv(b, dp, v, from, role)?;
                self.received[v.index()] = Some(got);
            }
        }
        b.role = role;
        b.chunk = self.plan.chunk(k);
        if self.me != to {
            return Ok(false);
        }
        for slot in 0..local.inputs.len() {
            for j in 0..local.inputs[slot].len() {
                let v = local.inputs[slot][j];
                if let Some(&Some(got)) = self.received.get(v.index()) {
                    if got != v {
                        Arc::make_mut(local).inputs[slot][j] = got;
                    }
                }
            }
        }
        Ok(true)
    }

    /// An every-stage op keeps the variables of its slots that live on this rank's stage
    /// (or on every stage, or are sources), and its dist attr the same slot entries: each
    /// stage checks, sums or scales its own share.
    fn keep_own_stage(
        &self,
        local: &mut Arc<Op>,
        attr: &mut std::borrow::Cow<'_, crate::dist::OperatorDistAttr>,
    ) {
        let mine = |v: VarId| match self.plan.home.get(v.index()).copied().flatten() {
            None => true,
            Some(h) => {
                let s = self.plan.physical(h);
                s == ALL_STAGES || s == self.me
            }
        };
        if local.all_inputs().chain(local.all_outputs()).all(mine) {
            return;
        }
        let keep = |slots: &[crate::ir::Slot]| -> Vec<Vec<bool>> {
            slots
                .iter()
                .map(|s| s.iter().map(|&v| mine(v)).collect())
                .collect()
        };
        let (ins, outs) = (keep(&local.inputs), keep(&local.outputs));
        let op = Arc::make_mut(local);
        filter_slots(&mut op.inputs, &ins);
        filter_slots(&mut op.outputs, &outs);
        let a = attr.to_mut();
        filter_slots(&mut a.inputs, &ins);
        filter_slots(&mut a.outputs, &outs);
    }

    fn recipe(&self, stage: usize, send: bool) -> Result<RankAttrs, PartitionError> {
        let pp = self
            .plan
            .stages
            .axis
            .ok_or(PartitionError::NoPipelineAxis)?;
        Ok(RankAttrs::P2P { pp, stage, send })
    }

    fn send(
        &self,
        b: &mut RankBuilder,
        dp: &DistProgram,
        v: VarId,
        to: usize,
    ) -> Result<(), PartitionError> {
        let x = reshard(b, v, &dp.tensors[v.index()])?;
        let mut op = Op::new(OpType::Send);
        op.inputs = crate::slots![[x]];
        op.namescope = Purpose::Pipeline.namescope().into();
        op.attrs.insert("peer".into(), Attr::Int(0));
        let recipe = self.recipe(to, true)?;
        b.rank_dependent(op, recipe);
        Ok(())
    }

    fn recv(
        &self,
        b: &mut RankBuilder,
        dp: &DistProgram,
        v: VarId,
        from: usize,
        role: OpRole,
    ) -> Result<VarId, PartitionError> {
        let attr = dp.tensors[v.index()].clone();
        let into = if role == OpRole::Backward {
            b.temp(v, &attr, "recv")?
        } else {
            v
        };
        let ty = b.program.var(into).ty.clone();
        let mut op = Op::new(OpType::Recv);
        op.outputs = crate::slots![[into]];
        op.namescope = Purpose::Pipeline.namescope().into();
        op.attrs.insert("peer".into(), Attr::Int(0));
        op.attrs.insert(
            "shape".into(),
            Attr::Ints(ty.shape.iter().map(|&d| d as i64).collect()),
        );
        op.attrs
            .insert("dtype".into(), Attr::Str(ty.dtype.name().into()));
        let recipe = self.recipe(from, false)?;
        b.rank_dependent(op, recipe);
        b.cur[into.index()] = attr.clone();
        if role != OpRole::Backward {
            return Ok(into);
        }
        let out = b.temp(v, &attr, "RESHARD")?;
        let mut assign = Op::new(OpType::Assign);
        assign.inputs = crate::slots![[into]];
        assign.outputs = crate::slots![[out]];
        assign.namescope = Purpose::Reshard.namescope().into();
        b.local(assign);
        Ok(out)
    }
}
