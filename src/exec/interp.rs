//! The interpreter: runs one program (serial, or one rank's) op by op. A rank is a small
//! state machine (program counter, variables, per-group exchange counters), so the same
//! code runs ranks on threads (blocking exchanges) or cooperatively (a pending exchange
//! returns `Blocked` and the op is retried on the next step).

use super::comm::{Communicator, Exchange, ExchangeKey};
use super::kernels::layout::{concat, inverse, lookup, lookup_grad, slice_axis, split, transpose};
use super::kernels::matmul::{matmul, matmul_grad};
use super::kernels::normalize::{
    layer_norm, layer_norm_grad, reduce, reduce_grad, softmax, softmax_ce, softmax_ce_grad,
    softmax_grad,
};
use super::kernels::optim::{adam, momentum, sgd, AdamParams};
use super::kernels::pointwise::{
    binary, binary_grad, dropout, mul_same, unary, unary_grad, Binary, Unary,
};
use super::kernels::vocab_ce;
use super::tensor::{strides, Tensor};
use crate::dist::{ReduceType, TensorDistAttr};
use crate::ir::infer::{axis, reduce_axes, reshape_target, split_sections};
use crate::ir::{DType, Op, OpType, Program, VarId};
use std::collections::HashMap;

/// Why execution failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ExecError {
    #[error("rank {rank}, op{op} ({ty}): {message}")]
    Op {
        rank: u32,
        op: usize,
        ty: OpType,
        message: String,
    },
    #[error("{0}")]
    Setup(String),
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
            let block = axes.iter().fold(0, |acc, &a| {
                let size = self.mesh_shape.get(a.index()).copied().unwrap_or(1);
                acc * size + self.coords.get(a.index()).copied().unwrap_or(0)
            });
            out += (block * local_shape[d] + idx) * gs.get(d).copied().unwrap_or(0);
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
    completed: Vec<(Vec<Tensor>, usize)>,
    /// How many of `completed` the current attempt at the op has consumed.
    replayed: usize,
    placement: Option<&'a Placement>,
    /// Error bounds per variable (`bound.rs`), carried when the serial run is the
    /// reference of a verification.
    pub bounds: Option<Bounds>,
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
        }
    }

    /// Runs ops until the end or until an exchange is pending.
    pub fn step(&mut self, comm: &dyn Communicator) -> Result<Status, ExecError> {
        while self.pc < self.program.ops().len() {
            let op = &self.program.ops()[self.pc];
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
            let progress = self.exec(op, comm).map_err(|message| ExecError::Op {
                rank: self.rank,
                op: self.pc,
                ty: op.ty,
                message,
            })?;
            match progress {
                Progress::Next => {
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

    fn get(&self, v: VarId) -> Result<&Tensor, String> {
        self.env
            .get(v.index())
            .and_then(|t| t.as_ref())
            .ok_or_else(|| {
                format!(
                    "`{}` has no value (not fed and not computed)",
                    self.program.var(v).name
                )
            })
    }

    fn slot(&self, op: &Op, name: &str) -> Result<&Tensor, String> {
        let v = *op
            .input(name)
            .first()
            .ok_or_else(|| format!("missing input {name}"))?;
        self.get(v)
    }

    fn opt_slot(&self, op: &Op, name: &str) -> Option<&Tensor> {
        op.input(name).first().and_then(|&v| self.get(v).ok())
    }

    fn set(&mut self, op: &Op, slot: &str, t: Tensor) {
        if let Some(&v) = op.output(slot).first() {
            self.set_var(v, t);
        }
    }

    fn set_var(&mut self, v: VarId, t: Tensor) {
        if let Some(s) = self.env.get_mut(v.index()) {
            *s = Some(t);
        }
    }

    /// Exchanges `t` over the op's group.
    fn exchange(
        &mut self,
        op: &Op,
        t: Tensor,
        comm: &dyn Communicator,
    ) -> Result<Option<(Vec<Tensor>, usize)>, String> {
        if let Some(done) = self.completed.get(self.replayed) {
            self.replayed += 1;
            return Ok(Some(done.clone()));
        }
        let group: Vec<u32> = op
            .attr_ints("group")
            .ok_or("missing group")?
            .iter()
            .map(|&r| r as u32)
            .collect();
        let me = group
            .iter()
            .position(|&r| r == self.rank)
            .ok_or_else(|| format!("rank {} is not in its group {group:?}", self.rank))?;
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
            .map_err(|e| format!("group {group:?}: {e}"))?
        {
            Exchange::Ready(all) => {
                if let Some(other) = all
                    .iter()
                    .position(|a| a.shape != all[me].shape && op.ty != OpType::AllGather)
                {
                    return Err(format!(
                        "group {group:?}: rank {} sent shape {:?} but rank {} sent {:?}",
                        group[me], all[me].shape, group[other], all[other].shape
                    ));
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

    fn exec(&mut self, op: &Op, comm: &dyn Communicator) -> Result<Progress, String> {
        let x = || -> Result<&Tensor, String> { self.slot(op, "X") };
        let rank_of = |t: &Tensor| t.shape.len();
        match op.ty {
            OpType::MatmulV2 => {
                let out = matmul(
                    x()?,
                    self.slot(op, "Y")?,
                    op.attr_bool("trans_x", false),
                    op.attr_bool("trans_y", false),
                )?;
                self.set(op, "Out", out);
            }
            OpType::ElementwiseAdd
            | OpType::ElementwiseSub
            | OpType::ElementwiseMul
            | OpType::ElementwiseDiv
            | OpType::ElementwiseMax => {
                let b = binary_kind(op.ty);
                let out = binary(b, x()?, self.slot(op, "Y")?, op.attr_int("axis", -1))?;
                self.set(op, "Out", out);
            }
            OpType::Relu
            | OpType::Gelu
            | OpType::Silu
            | OpType::Square
            | OpType::Scale
            | OpType::Sqrt => {
                let out = unary(unary_kind(op), x()?);
                self.set(op, "Out", out);
            }
            OpType::Cast => {
                let dtype = op
                    .attr_str("out_dtype")
                    .and_then(DType::from_name)
                    .ok_or("bad out_dtype")?;
                let t = x()?;
                self.set(op, "Out", Tensor::float(dtype, t.shape.clone(), t.to_f64()));
            }
            OpType::Assign => {
                let t = x()?.clone();
                self.set(op, "Out", t);
            }
            OpType::Dropout => {
                let t = x()?;
                let out_var = op.output("Out").first().copied();
                let shape = t.shape.clone();
                let placement = self.placement;
                let global = |i: usize| match (placement, out_var) {
                    (Some(p), Some(v)) => p.global_index(v, &shape, i),
                    _ => i,
                };
                let (out, mask) = dropout(
                    t,
                    op.attr_float("dropout_prob", 0.5),
                    op.attr_int("seed", 0) as u64,
                    op.attr_bool("is_test", false),
                    &global,
                );
                self.set(op, "Out", out);
                self.set(op, "Mask", mask);
            }
            OpType::Softmax => {
                let t = x()?;
                let a = axis(op.attr_int("axis", -1), rank_of(t), "axis")?;
                self.set(op, "Out", softmax(t, a, false));
            }
            OpType::FusedSoftmaxMaskUpperTriangle => {
                let t = x()?;
                self.set(op, "Out", softmax(t, rank_of(t) - 1, true));
            }
            OpType::LayerNorm => {
                let t = x()?;
                let begin = op.attr_int("begin_norm_axis", 1) as usize;
                let (y, m, v) = layer_norm(
                    t,
                    self.opt_slot(op, "Scale"),
                    self.opt_slot(op, "Bias"),
                    begin,
                    op.attr_float("epsilon", 1e-5),
                );
                self.set(op, "Y", y);
                self.set(op, "Mean", m);
                self.set(op, "Variance", v);
            }
            OpType::LookupTableV2 | OpType::CEmbedding => {
                let pad = if op.ty == OpType::CEmbedding {
                    -1
                } else {
                    op.attr_int("padding_idx", -1)
                };
                let (w, ids) = (self.slot(op, "W")?, self.slot(op, "Ids")?);
                // A plain lookup holds the whole table: an id outside it is bad input, not a
                // zero vector (a vocab-parallel c_embedding owns a range and zeroes the rest).
                if op.ty == OpType::LookupTableV2 {
                    let rows = w.shape.first().copied().unwrap_or(0) as i64;
                    if let Some(bad) = ids
                        .to_i64()
                        .into_iter()
                        .find(|&i| (i < 0 || i >= rows) && i != pad)
                    {
                        return Err(format!(
                            "token id {bad} is outside the {rows} rows of the embedding table"
                        ));
                    }
                }
                let out = lookup(w, ids, op.attr_int("start_index", 0), pad);
                self.set(op, "Out", out);
            }
            OpType::Reshape2 => {
                let t = x()?.clone();
                let ty = crate::ir::TensorType::new(t.dtype(), t.shape.clone());
                let shape = reshape_target(&ty, op.attr_ints("shape").unwrap_or(&[]))?;
                self.set(op, "Out", t.reshaped(shape));
            }
            OpType::Transpose2 => {
                let t = x()?;
                let perm = perm(op, rank_of(t))?;
                self.set(op, "Out", transpose(t, &perm));
            }
            OpType::Split => {
                let t = x()?;
                let ty = crate::ir::TensorType::new(t.dtype(), t.shape.clone());
                let (a, sizes) = split_sections(op, &ty)?;
                let parts = split(t, a, &sizes);
                for (&v, p) in op.output("Out").iter().zip(parts) {
                    self.set_var(v, p);
                }
            }
            OpType::Concat | OpType::Sum => {
                let xs: Vec<&Tensor> = op
                    .input("X")
                    .iter()
                    .map(|&v| self.get(v))
                    .collect::<Result<_, _>>()?;
                let out = if op.ty == OpType::Concat {
                    let a = axis(
                        op.attr_int("axis", 0),
                        xs.first().map_or(0, |t| rank_of(t)),
                        "axis",
                    )?;
                    concat(&xs, a)?
                } else {
                    let first = xs.first().ok_or("sum of nothing")?;
                    let mut acc = first.to_f64();
                    for t in &xs[1..] {
                        acc.iter_mut().zip(t.to_f64()).for_each(|(a, b)| *a += b);
                    }
                    Tensor::float(first.dtype(), first.shape.clone(), acc)
                };
                self.set(op, "Out", out);
            }
            OpType::ReduceSum | OpType::ReduceMean => {
                let t = x()?;
                let axes = reduce_axes(op, rank_of(t))?;
                self.set(
                    op,
                    "Out",
                    reduce(
                        t,
                        &axes,
                        op.attr_bool("keep_dim", false),
                        op.ty == OpType::ReduceMean,
                    ),
                );
            }
            OpType::Mean => {
                let t = x()?;
                let axes: Vec<usize> = (0..rank_of(t)).collect();
                self.set(op, "Out", reduce(t, &axes, false, true));
            }
            OpType::SquaredL2Norm => {
                let t = x()?;
                let s: f64 = t.to_f64().iter().map(|v| v * v).sum();
                self.set(op, "Out", Tensor::float(t.dtype(), vec![], vec![s]));
            }
            OpType::SoftmaxWithCrossEntropy => {
                let logits = self.slot(op, "Logits")?;
                let a = axis(op.attr_int("axis", -1), rank_of(logits), "axis")?;
                let (sm, loss) = softmax_ce(
                    logits,
                    self.slot(op, "Label")?,
                    a,
                    op.attr_bool("soft_label", false),
                )?;
                self.set(op, "Softmax", sm);
                self.set(op, "Loss", loss);
            }
            OpType::FillConstant => {
                let dtype = op
                    .attr_str("dtype")
                    .and_then(DType::from_name)
                    .ok_or("bad dtype")?;
                let shape: Vec<usize> = op
                    .attr_ints("shape")
                    .unwrap_or(&[])
                    .iter()
                    .map(|&d| d.max(0) as usize)
                    .collect();
                let n = shape.iter().product();
                self.set(
                    op,
                    "Out",
                    Tensor::float(dtype, shape, vec![op.attr_float("value", 0.0); n]),
                );
            }
            OpType::Slice => {
                let mut t = self.slot(op, "Input")?.clone();
                let (axes, starts, ends) = (
                    op.attr_ints("axes").unwrap_or(&[]),
                    op.attr_ints("starts").unwrap_or(&[]),
                    op.attr_ints("ends").unwrap_or(&[]),
                );
                for ((&a, &s), &e) in axes.iter().zip(starts).zip(ends) {
                    let a = axis(a, rank_of(&t), "axes")?;
                    t = slice_axis(
                        &t,
                        a,
                        s.max(0) as usize,
                        (e.max(0) as usize).min(t.shape[a]),
                    );
                }
                self.set(op, "Out", t);
            }
            // ---- gradients ----
            OpType::MatmulV2Grad => {
                let (xv, yv, d) = (x()?, self.slot(op, "Y")?, self.slot(op, "Out@GRAD")?);
                let (dx, dy) = matmul_grad(
                    xv,
                    yv,
                    d,
                    op.attr_bool("trans_x", false),
                    op.attr_bool("trans_y", false),
                )?;
                self.set(op, "X@GRAD", dx);
                self.set(op, "Y@GRAD", dy);
            }
            OpType::ElementwiseAddGrad
            | OpType::ElementwiseSubGrad
            | OpType::ElementwiseMulGrad
            | OpType::ElementwiseDivGrad => {
                let b = binary_kind(op.ty.forward().unwrap_or(op.ty));
                let (dx, dy) = binary_grad(
                    b,
                    x()?,
                    self.slot(op, "Y")?,
                    self.slot(op, "Out@GRAD")?,
                    op.attr_int("axis", -1),
                )?;
                self.set(op, "X@GRAD", dx);
                self.set(op, "Y@GRAD", dy);
            }
            OpType::ReluGrad
            | OpType::GeluGrad
            | OpType::SiluGrad
            | OpType::SquareGrad
            | OpType::ScaleGrad => {
                let g = unary_grad(unary_kind(op), x()?, self.slot(op, "Out@GRAD")?);
                self.set(op, "X@GRAD", g);
            }
            OpType::CastGrad => {
                let (t, d) = (x()?, self.slot(op, "Out@GRAD")?);
                self.set(
                    op,
                    "X@GRAD",
                    Tensor::float(t.dtype(), t.shape.clone(), d.to_f64()),
                );
            }
            OpType::AssignGrad | OpType::Reshape2Grad => {
                let (t, d) = (x()?, self.slot(op, "Out@GRAD")?);
                self.set(op, "X@GRAD", d.clone().reshaped(t.shape.clone()));
            }
            OpType::DropoutGrad => {
                let g = mul_same(self.slot(op, "Out@GRAD")?, self.slot(op, "Mask")?);
                self.set(op, "X@GRAD", g);
            }
            OpType::SoftmaxGrad | OpType::FusedSoftmaxMaskUpperTriangleGrad => {
                let y = self.slot(op, "Out")?;
                let a = if op.ty == OpType::SoftmaxGrad {
                    axis(op.attr_int("axis", -1), rank_of(y), "axis")?
                } else {
                    rank_of(y) - 1
                };
                let g = softmax_grad(y, self.slot(op, "Out@GRAD")?, a);
                self.set(op, "X@GRAD", g);
            }
            OpType::LayerNormGrad => {
                let t = x()?;
                let begin = op.attr_int("begin_norm_axis", 1) as usize;
                let (dx, ds, db) = layer_norm_grad(
                    t,
                    self.opt_slot(op, "Scale"),
                    self.slot(op, "Mean")?,
                    self.slot(op, "Variance")?,
                    self.slot(op, "Y@GRAD")?,
                    begin,
                    op.attr_float("epsilon", 1e-5),
                );
                let width = vec![ds.len()];
                let dtype = t.dtype();
                self.set(op, "X@GRAD", dx);
                self.set(op, "Scale@GRAD", Tensor::float(dtype, width.clone(), ds));
                self.set(op, "Bias@GRAD", Tensor::float(dtype, width, db));
            }
            OpType::CEmbeddingGrad => {
                let g = lookup_grad(
                    self.slot(op, "W")?,
                    self.slot(op, "Ids")?,
                    self.slot(op, "Out@GRAD")?,
                    op.attr_int("start_index", 0),
                    -1,
                );
                self.set(op, "W@GRAD", g);
            }
            OpType::LookupTableV2Grad => {
                let g = lookup_grad(
                    self.slot(op, "W")?,
                    self.slot(op, "Ids")?,
                    self.slot(op, "Out@GRAD")?,
                    op.attr_int("start_index", 0),
                    op.attr_int("padding_idx", -1),
                );
                self.set(op, "W@GRAD", g);
            }
            OpType::Transpose2Grad => {
                let d = self.slot(op, "Out@GRAD")?;
                let p = perm(op, rank_of(d))?;
                self.set(op, "X@GRAD", transpose(d, &inverse(&p)));
            }
            OpType::SplitGrad => {
                let t = x()?;
                let parts: Vec<&Tensor> = op
                    .input("Out@GRAD")
                    .iter()
                    .map(|&v| self.get(v))
                    .collect::<Result<_, _>>()?;
                let ty = crate::ir::TensorType::new(t.dtype(), t.shape.clone());
                let (a, _) = split_sections(op, &ty)?;
                let g = concat(&parts, a)?;
                self.set(op, "X@GRAD", g);
            }
            OpType::ConcatGrad => {
                let xs: Vec<&Tensor> = op
                    .input("X")
                    .iter()
                    .map(|&v| self.get(v))
                    .collect::<Result<_, _>>()?;
                let a = axis(
                    op.attr_int("axis", 0),
                    xs.first().map_or(0, |t| rank_of(t)),
                    "axis",
                )?;
                let sizes: Vec<usize> = xs.iter().map(|t| t.shape[a]).collect();
                let parts = split(self.slot(op, "Out@GRAD")?, a, &sizes);
                for (&v, p) in op.output("X@GRAD").iter().zip(parts) {
                    self.set_var(v, p);
                }
            }
            OpType::ReduceSumGrad | OpType::ReduceMeanGrad | OpType::MeanGrad => {
                let t = x()?;
                let axes = if op.ty == OpType::MeanGrad {
                    (0..rank_of(t)).collect()
                } else {
                    reduce_axes(op, rank_of(t))?
                };
                let mean = op.ty != OpType::ReduceSumGrad;
                let g = reduce_grad(t, self.slot(op, "Out@GRAD")?, &axes, mean);
                self.set(op, "X@GRAD", g);
            }
            OpType::SoftmaxWithCrossEntropyGrad => {
                let sm = self.slot(op, "Softmax")?;
                let a = axis(op.attr_int("axis", -1), rank_of(sm), "axis")?;
                let g = softmax_ce_grad(
                    sm,
                    self.slot(op, "Label")?,
                    self.slot(op, "Loss@GRAD")?,
                    a,
                    op.attr_bool("soft_label", false),
                );
                self.set(op, "Logits@GRAD", g);
            }
            // ---- optimizers, AMP ----
            OpType::Sgd | OpType::Momentum | OpType::Adam | OpType::AdamW => self.update(op)?,
            OpType::CheckFiniteAndUnscale => {
                let inv = 1.0 / self.slot(op, "Scale")?.scalar();
                let mut found = false;
                let xs: Vec<VarId> = op.input("X").to_vec();
                for (&v, &o) in xs.iter().zip(op.output("Out")) {
                    let t = self.get(v)?;
                    let vals = t.to_f64();
                    found |= vals.iter().any(|a| !a.is_finite());
                    let out = Tensor::float(
                        t.dtype(),
                        t.shape.clone(),
                        vals.iter().map(|a| a * inv).collect(),
                    );
                    self.set_var(o, out);
                }
                self.set(
                    op,
                    "FoundInfinite",
                    Tensor::float(DType::F32, vec![], vec![f64::from(found)]),
                );
            }
            OpType::UpdateLossScaling => self.update_loss_scaling(op)?,
            // ---- communication ----
            OpType::AllReduce | OpType::AllGather | OpType::ReduceScatter | OpType::AllToAll => {
                let t = x()?.clone();
                let Some((all, me)) = self.exchange(op, t, comm)? else {
                    return Ok(Progress::Blocked);
                };
                let out = collective(op, all, me)?;
                self.set(op, "Out", out);
            }
            OpType::CSoftmaxWithCrossEntropy => {
                let logits = self.slot(op, "Logits")?.clone();
                let label = self.slot(op, "Label")?.clone();
                let start = op.attr_int("start_index", 0);
                let nranks = op.attr_ints("group").map_or(1, <[i64]>::len);
                let classes = logits
                    .shape
                    .last()
                    .copied()
                    .unwrap_or(1)
                    .saturating_mul(nranks);
                let Some((all, _)) = self.exchange(op, vocab_ce::row_max(&logits), comm)? else {
                    return Ok(Progress::Blocked);
                };
                let max = reduce_all(&all, ReduceType::Max);
                let target = vocab_ce::target_logit(&logits, &label, &max, start, classes)?;
                let Some((all, _)) = self.exchange(op, target, comm)? else {
                    return Ok(Progress::Blocked);
                };
                let target = reduce_all(&all, ReduceType::Sum);
                let (exps, sums) = vocab_ce::exp_sums(&logits, &max);
                let Some((all, _)) = self.exchange(op, sums, comm)? else {
                    return Ok(Progress::Blocked);
                };
                let sum = reduce_all(&all, ReduceType::Sum);
                let (sm, loss) = vocab_ce::finish(&logits, &exps, &sum, &target);
                self.set(op, "Softmax", sm);
                self.set(op, "Loss", loss);
            }
            OpType::CSoftmaxWithCrossEntropyGrad => {
                let g = vocab_ce::grad(
                    self.slot(op, "Softmax")?,
                    self.slot(op, "Label")?,
                    self.slot(op, "Loss@GRAD")?,
                    op.attr_int("start_index", 0),
                );
                self.set(op, "Logits@GRAD", g);
            }
            OpType::Send | OpType::Recv => {
                return Err(
                    "send/recv need a pipeline schedule, which this planner does not produce yet"
                        .into(),
                );
            }
        }
        Ok(Progress::Next)
    }

    fn update(&mut self, op: &Op) -> Result<(), String> {
        let lr = self.slot(op, "LearningRate")?.scalar();
        let g = self.slot(op, "Grad")?.to_f64();
        let p_t = self.slot(op, "Param")?;
        let (dtype, shape) = (p_t.dtype(), p_t.shape.clone());
        let mut p = p_t.to_f64();
        let float = |v: Vec<f64>, s: &[usize]| Tensor::float(dtype, s.to_vec(), v);
        match op.ty {
            OpType::Sgd => sgd(&mut p, &g, lr),
            OpType::Momentum => {
                let mut v = self.slot(op, "Velocity")?.to_f64();
                momentum(
                    &mut p,
                    &g,
                    &mut v,
                    lr,
                    op.attr_float("mu", 0.9),
                    op.attr_bool("use_nesterov", false),
                );
                self.set(op, "VelocityOut", float(v, &shape));
            }
            _ => {
                let mut m1 = self.slot(op, "Moment1")?.to_f64();
                let mut m2 = self.slot(op, "Moment2")?.to_f64();
                let (b1p, b2p) = (
                    self.slot(op, "Beta1Pow")?.scalar(),
                    self.slot(op, "Beta2Pow")?.scalar(),
                );
                let h = AdamParams {
                    lr,
                    beta1: op.attr_float("beta1", 0.9),
                    beta2: op.attr_float("beta2", 0.999),
                    epsilon: op.attr_float("epsilon", 1e-8),
                    coeff: if op.ty == OpType::AdamW {
                        op.attr_float("coeff", 0.01)
                    } else {
                        0.0
                    },
                };
                adam(&mut p, &g, &mut m1, &mut m2, b1p, b2p, h);
                self.set(op, "Moment1Out", float(m1, &shape));
                self.set(op, "Moment2Out", float(m2, &shape));
                self.set(op, "Beta1PowOut", float(vec![b1p * h.beta1], &[]));
                self.set(op, "Beta2PowOut", float(vec![b2p * h.beta2], &[]));
            }
        }
        self.set(op, "ParamOut", float(p, &shape));
        Ok(())
    }

    fn update_loss_scaling(&mut self, op: &Op) -> Result<(), String> {
        let found = self.slot(op, "FoundInfinite")?.scalar() != 0.0;
        let scale_t = self.slot(op, "PrevLossScaling")?.clone();
        let (mut scale, mut good, mut bad) = (
            scale_t.scalar(),
            self.slot(op, "InGoodSteps")?.scalar(),
            self.slot(op, "InBadSteps")?.scalar(),
        );
        if found {
            good = 0.0;
            bad += 1.0;
            if bad >= op.attr_int("decr_every_n_nan_or_inf", 2) as f64 {
                scale = (scale * op.attr_float("decr_ratio", 0.5)).max(1.0);
                bad = 0.0;
            }
        } else {
            bad = 0.0;
            good += 1.0;
            if good >= op.attr_int("incr_every_n_steps", 1000) as f64 {
                scale *= op.attr_float("incr_ratio", 2.0);
                good = 0.0;
            }
        }
        if found {
            // Zero the gradients so the update is a no-op this step.
            let xs: Vec<VarId> = op.input("X").to_vec();
            for (&v, &o) in xs.iter().zip(op.output("Out")) {
                let t = self.get(v)?;
                let z = Tensor::zeros(t.dtype(), t.shape.clone());
                self.set_var(o, z);
            }
        }
        let dtype = scale_t.dtype();
        self.set(op, "LossScaling", Tensor::float(dtype, vec![], vec![scale]));
        self.set(op, "OutGoodSteps", Tensor::float(dtype, vec![], vec![good]));
        self.set(op, "OutBadSteps", Tensor::float(dtype, vec![], vec![bad]));
        Ok(())
    }
}

fn perm(op: &Op, rank: usize) -> Result<Vec<usize>, String> {
    op.attr_ints("axis")
        .unwrap_or(&[])
        .iter()
        .map(|&p| axis(p, rank, "axis"))
        .collect()
}

fn binary_kind(ty: OpType) -> Binary {
    match ty {
        OpType::ElementwiseSub => Binary::Sub,
        OpType::ElementwiseMul => Binary::Mul,
        OpType::ElementwiseDiv => Binary::Div,
        OpType::ElementwiseMax => Binary::Max,
        _ => Binary::Add,
    }
}

fn unary_kind(op: &Op) -> Unary {
    match op.ty.forward().unwrap_or(op.ty) {
        OpType::Relu => Unary::Relu,
        OpType::Gelu => Unary::Gelu {
            tanh: op.attr_bool("approximate", false),
        },
        OpType::Silu => Unary::Silu,
        OpType::Square => Unary::Square,
        OpType::Sqrt => Unary::Sqrt,
        _ => Unary::Scale {
            scale: op.attr_float("scale", 1.0),
            bias: op.attr_float("bias", 0.0),
            bias_after: op.attr_bool("bias_after_scale", true),
        },
    }
}

/// Combines `all` contributions elementwise with `reduce`.
pub fn reduce_all(all: &[Tensor], reduce: ReduceType) -> Tensor {
    let mut acc = all[0].to_f64();
    for t in &all[1..] {
        for (a, b) in acc.iter_mut().zip(t.to_f64()) {
            *a = match reduce {
                ReduceType::Sum | ReduceType::Avg => *a + b,
                ReduceType::Max => a.max(b),
                ReduceType::Min => a.min(b),
                ReduceType::Prod => *a * b,
            };
        }
    }
    if reduce == ReduceType::Avg {
        let n = all.len() as f64;
        acc.iter_mut().for_each(|a| *a /= n);
    }
    Tensor::float(all[0].dtype(), all[0].shape.clone(), acc)
}

/// A collective's result on member `me` from every member's contribution.
fn collective(op: &Op, all: Vec<Tensor>, me: usize) -> Result<Tensor, String> {
    let reduce = || {
        ReduceType::from_name(op.attr_str("reduce_type").unwrap_or("SUM")).ok_or("bad reduce_type")
    };
    let n = all.len();
    let rank_of = all[me].shape.len();
    Ok(match op.ty {
        OpType::AllReduce => reduce_all(&all, reduce()?),
        OpType::AllGather => {
            let a = axis(op.attr_int("axis", 0), rank_of, "axis")?;
            concat(&all.iter().collect::<Vec<_>>(), a)?
        }
        OpType::ReduceScatter => {
            let a = axis(op.attr_int("axis", 0), rank_of, "axis")?;
            let whole = reduce_all(&all, reduce()?);
            let piece = whole.shape[a] / n;
            slice_axis(&whole, a, me * piece, (me + 1) * piece)
        }
        _ => {
            let s = axis(op.attr_int("split_axis", 0), rank_of, "split_axis")?;
            let c = axis(op.attr_int("concat_axis", 0), rank_of, "concat_axis")?;
            let piece = all[me].shape[s] / n;
            let mine: Vec<Tensor> = all
                .iter()
                .map(|t| slice_axis(t, s, me * piece, (me + 1) * piece))
                .collect();
            concat(&mine.iter().collect::<Vec<_>>(), c)?
        }
    })
}
