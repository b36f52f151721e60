//! ZeRO / sharding (Rajbhandari et al. 2020; PyTorch FSDP; Paddle's `sharding` stages 1–3):
//! the optimizer state, gradients and parameters sharded over the data-parallel axes.
//!
//! We follow the ZeRO paper and FSDP2: each parameter's local piece (after tensor
//! parallelism) is a flat buffer, zero-padded to a multiple of the sharding group's size
//! `n`, and member `i` of the group owns elements `[i·c, (i+1)·c)` with `c = ⌈numel / n⌉`.
//! So a parameter that does not divide over the group (the MLP's `[10]` bias on 4 ranks)
//! is padded, never an error. The padding is zero in the parameter, its gradient and its
//! state, and every update maps zeros to zeros (sgd, momentum, adam, adamw), so it stays
//! zero.
//!
//! - **Stage 1:** after backward, each gradient is flattened (`flatten_pad`),
//!   `reduce_scatter`ed (SUM) over the group and scaled by 1/N; each rank updates its shard
//!   of the parameter with its shard of the optimizer state, and the parameter is
//!   `all_gather`ed back (`unpad_reshape` to its shape). The full gradient buffer is kept
//!   to the end of the step (it is persistable; the memory model holds it from the op
//!   that makes it, as a stage 0 gradient is held to its update).
//! - **Stage 2:** the same ops; the full gradient lives only until its reduce-scatter.
//! - **Stage 3:** parameters live as their shards only: `all_gather`ed before their first use
//!   in forward and again before their first use in backward (into a second buffer, so
//!   each copy is freed after its last use), and not gathered after the update.
//!
//! Every inserted op is in namescope `/auto_parallel/sharding` (`Purpose::Sharding`).
//!
//! Bytes: a reduce-scatter plus an all-gather of S moves 2(n−1)/n·S, one all-reduce's worth,
//! so stages 1 and 2 move what data parallelism moves (plus the padding); stage 3 adds one
//! all-gather of the parameters (1.5×).
//!
//! Paddle's sharding pass instead gives each parameter an owner rank: gradients are
//! `c_reduce_sum`med to the owner and parameters `c_broadcast` from it, whole tensors. A
//! ring reduce to one root moves (n−1)/n·S per rank, like a reduce-scatter, and a
//! broadcast (n−1)/n·S, like an all-gather: the same bytes in total, but each collective
//! centres on one rank, and the shards are as uneven as the parameter sizes, where flat
//! buffers balance memory and update work to within the padding.
//!
//! What is sharded: a parameter whose update op the optimizer stage appended, whose gradient
//! is partial (SUM) over mesh axes of more than one rank in all (the axes the
//! data-parallel sync would all-reduce) and laid out like the parameter. The others keep
//! the plain data-parallel sync: a gradient that is not partial has nothing to
//! reduce-scatter.

use super::rank::RankBuilder;
use crate::dist::{MeshAxis, MeshId, ReduceType, TensorDistAttr};
use crate::ir::{Attr, Op, OpRole, OpType, Purpose, TensorType, Var, VarId, VarKind};
use crate::passes::dist_program::DistProgram;
use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;

/// The ZeRO stage: 0 (off), 1, 2 or 3.
pub type ZeroStage = u8;

/// The largest ZeRO stage.
pub const MAX_ZERO_STAGE: ZeroStage = 3;

/// One sharded parameter: its flat buffer over the sharding group, and the local variables
/// (the same ids on every rank) that hold the shards.
#[derive(Clone, Debug, PartialEq)]
pub struct ZeroParam {
    pub param: VarId,
    pub grad: VarId,
    /// The optimizer state that follows the parameter (velocity, moments).
    pub states: Vec<VarId>,
    /// The mesh axes the parameter is sharded over (its gradient's partial axes).
    pub axes: Vec<MeshAxis>,
    /// The number of ranks in a sharding group.
    pub group: usize,
    /// Elements of the local piece, and of each rank's shard (`shard · group ≥ numel`).
    /// Under an uneven split, of the largest piece (the first rank's): a rank whose piece
    /// is shorter pads more, and the zeros it pads stay zero through every optimizer.
    pub numel: usize,
    pub shard: usize,
    /// The shard variables: of the parameter, the gradient, and each state (in order).
    pub param_shard: VarId,
    pub grad_shard: VarId,
    pub state_shards: Vec<VarId>,
}

impl ZeroParam {
    /// Elements of the padded flat buffer.
    pub fn padded(&self) -> usize {
        self.shard * self.group
    }

    /// (whole variable, its shard variable) pairs: parameter, gradient, states.
    pub fn pairs(&self) -> impl Iterator<Item = (VarId, VarId)> + '_ {
        [(self.param, self.param_shard), (self.grad, self.grad_shard)]
            .into_iter()
            .chain(
                self.states
                    .iter()
                    .copied()
                    .zip(self.state_shards.iter().copied()),
            )
    }
}

/// The job's ZeRO plan: which parameters are sharded and where their shards live.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ZeroLayout {
    pub stage: ZeroStage,
    pub params: Vec<ZeroParam>,
    /// Whole variable → (index into `params`, its shard variable).
    shard_of: HashMap<VarId, (usize, VarId)>,
    /// The shard variables' ids: declared together, after the serial variables.
    shards: std::ops::Range<u32>,
}

impl ZeroLayout {
    /// Plans ZeRO `stage` over `dp` and declares the shard variables at the end of
    /// `locals` (the serial variables with their local shapes, shared by every rank); under
    /// stage 1 the full gradients become persistable, under stage 3 the full parameters
    /// become gathered buffers (activations).
    pub fn plan(dp: &DistProgram, locals: &mut Vec<Var>, stage: ZeroStage) -> ZeroLayout {
        let mut layout = ZeroLayout {
            stage,
            ..ZeroLayout::default()
        };
        let first = locals.len() as u32;
        layout.shards = first..first;
        if stage == 0 {
            return layout;
        }
        for op in dp.program.ops() {
            if !matches!(op.ty, OpType::Optimizer(_)) {
                continue;
            }
            let (Some(&w), Some(&g)) = (op.input("Param").first(), op.input("Grad").first()) else {
                continue;
            };
            let (wa, ga) = (&dp.tensors[w.index()], &dp.tensors[g.index()]);
            let sum = ga.partial.iter().all(|p| p.1 == ReduceType::Sum);
            let axes = ga.partial_axes();
            let group: usize = axes.iter().map(|&a| dp.mesh.axis_size(a)).product();
            if !sum || group <= 1 || ga.dims != wa.dims {
                continue;
            }
            let states: Vec<VarId> = ["Velocity", "Moment1", "Moment2"]
                .into_iter()
                .flat_map(|s| op.input(s).iter().copied())
                .collect();
            // A rank's own parameter: its size indexes this target's memory.
            let numel = usize::try_from(locals[w.index()].ty.numel()).unwrap_or(usize::MAX);
            let shard = numel.div_ceil(group);
            let mut declare = |of: VarId, kind: VarKind| {
                let v = &locals[of.index()];
                let var = Var {
                    name: format!("{}@ZERO", v.name).into(),
                    ty: TensorType::new(v.ty.dtype, vec![shard]),
                    kind,
                    persistable: kind != VarKind::Gradient,
                };
                locals.push(var);
                VarId(locals.len() as u32 - 1)
            };
            let param_shard = declare(w, VarKind::Parameter);
            let grad_shard = declare(g, VarKind::Gradient);
            let state_shards = states
                .iter()
                .map(|&s| declare(s, VarKind::OptimizerState))
                .collect();
            match stage {
                1 => locals[g.index()].persistable = true,
                3 => {
                    let whole = &mut locals[w.index()];
                    whole.kind = VarKind::Activation;
                    whole.persistable = false;
                }
                _ => {}
            }
            let k = layout.params.len();
            let p = ZeroParam {
                param: w,
                grad: g,
                states,
                axes,
                group,
                numel,
                shard,
                param_shard,
                grad_shard,
                state_shards,
            };
            for (whole, shard) in p.pairs() {
                layout.shard_of.insert(whole, (k, shard));
            }
            layout.params.push(p);
        }
        layout.shards = first..locals.len() as u32;
        layout
    }

    /// Whether `v` is a parameter's shard.
    pub fn is_param_shard(&self, v: VarId) -> bool {
        self.is_shard(v) && self.params.iter().any(|p| p.param_shard == v)
    }

    /// Whether `v` is a gradient's shard.
    pub fn is_grad_shard(&self, v: VarId) -> bool {
        self.is_shard(v) && self.params.iter().any(|p| p.grad_shard == v)
    }

    /// Whether `v` is a whole parameter that ZeRO shards.
    pub fn is_sharded_param(&self, v: VarId) -> bool {
        self.shard_of
            .get(&v)
            .and_then(|&(k, _)| self.params.get(k))
            .is_some_and(|p| p.param == v)
    }

    /// Whether any parameter is sharded.
    pub fn is_active(&self) -> bool {
        !self.params.is_empty()
    }

    /// The sharded parameter whose gradient is `g`.
    pub fn by_grad(&self, g: VarId) -> Option<&ZeroParam> {
        let &(k, _) = self.shard_of.get(&g)?;
        self.params.get(k).filter(|p| p.grad == g)
    }

    /// Where the step's value of serial variable `v` lives when it is not the whole local
    /// variable: a gradient's reduced value is only in its shards, and so is a parameter's
    /// under stage 3. `None`: read the whole variable.
    pub fn value_in_shards(&self, v: VarId) -> Option<(&ZeroParam, VarId)> {
        let &(k, shard) = self.shard_of.get(&v)?;
        let p = self.params.get(k)?;
        let sharded = p.grad == v || (p.param == v && self.stage >= 3);
        sharded.then_some((p, shard))
    }

    /// Every (whole, shard) pair whose shard starts as the rank's piece of the whole:
    /// parameters and optimizer state (gradients are computed).
    pub fn initial_shards(&self) -> impl Iterator<Item = (&ZeroParam, VarId, VarId)> + '_ {
        self.params.iter().flat_map(|p| {
            std::iter::once((p.param, p.param_shard))
                .chain(p.states.iter().copied().zip(p.state_shards.iter().copied()))
                .map(move |(w, s)| (p, w, s))
        })
    }

    fn is_shard(&self, v: VarId) -> bool {
        self.shards.contains(&v.0)
    }
}

/// Pushes the builder's layout and origin of every shard variable (a flat replicated buffer
/// holding a piece of its whole variable).
pub fn declare_shards(b: &mut RankBuilder, layout: &ZeroLayout) {
    for p in &layout.params {
        for (whole, _) in p.pairs() {
            b.cur.push(TensorDistAttr::replicated(MeshId::JOB, 1));
            b.origin.push(whole);
        }
    }
}

/// What one rank's builder tracks: which parameters stage 3 has gathered for forward and
/// the buffer it gathered each into for backward.
pub struct RankZero<'z> {
    layout: &'z ZeroLayout,
    forward_gathered: Vec<bool>,
    backward_copy: Vec<Option<VarId>>,
}

impl<'z> RankZero<'z> {
    pub fn new(layout: &'z ZeroLayout) -> RankZero<'z> {
        RankZero {
            layout,
            forward_gathered: vec![false; layout.params.len()],
            backward_copy: vec![None; layout.params.len()],
        }
    }

    /// Whether `v` is a shard variable (already local: no reshard applies to it).
    pub fn is_shard(&self, v: VarId) -> bool {
        self.layout.is_shard(v)
    }

    /// Before `local` (a serial op) runs on the rank: under stage 3 the parameters it reads
    /// are gathered (forward: into the whole variable; backward: into a second buffer it
    /// then reads); an optimizer op works on the shards.
    pub fn before(
        &mut self,
        b: &mut RankBuilder,
        local: &mut Arc<Op>,
    ) -> Result<(), super::rank::PartitionError> {
        if !self.layout.is_active() {
            return Ok(());
        }
        let params = &self.layout.params;
        match local.role {
            OpRole::Optimize => {
                let shard = |v: VarId| self.layout.shard_of.get(&v).map(|&(_, s)| s);
                if local
                    .all_inputs()
                    .chain(local.all_outputs())
                    .any(|v| shard(v).is_some())
                {
                    let op = Arc::make_mut(local);
                    for v in op.inputs.iter_mut().chain(op.outputs.iter_mut()).flatten() {
                        if let Some(s) = shard(*v) {
                            *v = s;
                        }
                    }
                }
            }
            OpRole::Forward | OpRole::Loss if self.layout.stage >= 3 => {
                let reads: Vec<VarId> = local.all_inputs().collect();
                for (k, p) in params.iter().enumerate() {
                    if !self.forward_gathered[k] && reads.contains(&p.param) {
                        gather(b, p, p.param);
                        self.forward_gathered[k] = true;
                    }
                }
            }
            OpRole::Backward if self.layout.stage >= 3 => {
                for (k, p) in params.iter().enumerate() {
                    if !local.all_inputs().any(|v| v == p.param) {
                        continue;
                    }
                    let copy = match self.backward_copy[k] {
                        Some(c) => c,
                        None => {
                            let attr = b.cur[p.param.index()].clone();
                            let c = b.temp(p.param, &attr, "ZERO_BW")?;
                            gather(b, p, c);
                            self.backward_copy[k] = Some(c);
                            c
                        }
                    };
                    let op = Arc::make_mut(local);
                    for v in op.inputs.iter_mut().flatten() {
                        if *v == p.param {
                            *v = copy;
                        }
                    }
                }
            }
            OpRole::Forward | OpRole::Loss | OpRole::Backward => {}
        }
        Ok(())
    }

    /// After serial op `op` ran on the rank: under stages 1 and 2 an updated parameter is
    /// gathered back from its shards; a squared norm of a gradient shard is a partial sum
    /// over the sharding axes too (global-norm clipping sums it over them).
    pub fn after(&self, b: &mut RankBuilder, op: &Op) {
        if !self.layout.is_active() {
            return;
        }
        if op.ty == OpType::SquaredL2Norm {
            let of_shard = op.input("X").first().and_then(|&g| self.layout.by_grad(g));
            if let (Some(p), Some(&out)) = (of_shard, op.output("Out").first()) {
                for &a in &p.axes {
                    b.cur[out.index()].set_partial(a, ReduceType::Sum);
                }
            }
        }
        if matches!(op.ty, OpType::Optimizer(_)) && self.layout.stage < 3 {
            let w = op.input("Param").first().copied();
            if let Some(p) = self.layout.params.iter().find(|p| Some(p.param) == w) {
                gather(b, p, p.param);
            }
        }
    }
}

/// `into` (the whole local parameter or a buffer like it) all-gathered from `p`'s shards.
fn gather(b: &mut RankBuilder, p: &ZeroParam, into: VarId) {
    let flat = b.flat_temp(p.param, p.padded(), "ZERO_FLAT");
    b.collective(
        OpType::AllGather,
        p.param_shard,
        flat,
        &p.axes,
        vec![("axis", Attr::Int(0))],
        Purpose::Sharding,
    );
    let shape = b
        .program
        .var(into)
        .ty
        .shape
        .iter()
        .map(|&d| d as i64)
        .collect();
    let mut unpad = Op::new(OpType::UnpadReshape);
    unpad.inputs = crate::slots![[flat]];
    unpad.outputs = crate::slots![[into]];
    unpad.attrs = [("shape".to_string(), Attr::Ints(shape))]
        .into_iter()
        .collect();
    unpad.namescope = Purpose::Sharding.namescope().into();
    b.local(unpad);
    b.cur[into.index()] = DistProgram::settled(&b.cur[into.index()]);
}

/// The gradient `p.grad` (partial over the sharding axes) reduce-scattered into its shard:
/// flattened and padded, then summed over the group with each member keeping its piece.
pub fn reduce_scatter(b: &mut RankBuilder, p: &ZeroParam) {
    let flat = b.flat_temp(p.grad, p.padded(), "ZERO_FLAT");
    let mut pad = Op::new(OpType::FlattenPad);
    pad.inputs = crate::slots![[p.grad]];
    pad.outputs = crate::slots![[flat]];
    pad.attrs = [("numel".to_string(), Attr::Int(p.padded() as i64))]
        .into_iter()
        .collect();
    pad.namescope = Purpose::Sharding.namescope().into();
    b.local(pad);
    b.collective(
        OpType::ReduceScatter,
        flat,
        p.grad_shard,
        &p.axes,
        vec![
            ("axis", Attr::Int(0)),
            ("reduce_type", Attr::Str("SUM".into())),
        ],
        Purpose::Sharding,
    );
}
