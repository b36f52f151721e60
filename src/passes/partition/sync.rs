//! Gradient synchronisation (the seed's `gradient_synchronization`): after a backward op
//! produces a parameter gradient, the gradient is all-reduced (SUM) in place over each
//! data-parallel group and, when gradient scaling is on, scaled by 1/|group|:
//!
//! ```text
//! op all_reduce(X=w@GRAD) -> (Out=w@GRAD) {group=[0, 4], reduce_type="SUM"} scope="/auto_parallel/data_parallel"
//! op scale(X=w@GRAD) -> (Out=w@GRAD) {scale=0.5} scope="/auto_parallel/data_parallel"
//! ```
//! The groups come from the gradient's partial axes (the partial-producing grad ops:
//! matmul_v2_grad, elementwise_*_grad, layer_norm_grad, lookup_table_v2_grad, and the `sum`
//! of a shared parameter's contributions). The scale is 1/N for the N ranks whose losses
//! are averaged (see [`sync_gradients`]); where the seed falls back to the activation's
//! batch axis for a non-partial gradient, we scale without reducing, which is what makes
//! such a gradient correct. Never for optimizer ops.
//!
//! The other two synchronisations live here too: AMP's found_inf flag (all-reduce MAX over
//! the mesh) and global-norm clipping's squared-norm shards (all-reduce SUM per group).

use super::rank::{PartitionError, RankBuilder};
use crate::dist::MeshAxis;
use crate::dist::MeshId;
use crate::dist::{ReduceType, TensorDistAttr};
use crate::ir::{Attr, Attrs, Op, OpRole, OpType, Purpose, VarId};
use crate::passes::dist_program::DistProgram;

/// What gradient synchronisation needs to know, and the rank's open gradient buckets.
pub struct GradSync<'a> {
    /// Per serial variable: is it a parameter gradient.
    pub is_param_grad: &'a [bool],
    /// The mesh axes the loss is averaged over.
    pub loss_avg_axes: &'a [MeshAxis],
    /// Scale by 1/N after the sum (Paddle's default).
    pub scale: bool,
    pub zero: &'a super::zero::ZeroLayout,
    pub buckets: super::bucket::Buckets,
}

impl GradSync<'_> {
    /// The data-parallel scale's attributes, or `None` without one: 1/N where N is the
    /// size of the mesh axes the loss is averaged over.
    ///
    /// Why N and not the reduced group: every rank seeds its backward with d loss = 1, so
    /// every gradient it computes is a gradient of the *sum* of the per-rank losses.
    /// Dividing by the number of summed losses gives the gradient of their mean, also for a
    /// parameter whose gradient is not partial (its activations were gathered, say), which
    /// the seed's rule (scale by the reduced group only) would leave N times too large.
    fn scale_attrs(&self, b: &mut RankBuilder) -> Option<Attrs> {
        let n: usize = self
            .loss_avg_axes
            .iter()
            .map(|&a| b.mesh.axis_size(a))
            .product();
        (self.scale && n > 1).then(|| {
            b.gradient_scale
                .get_or_insert_with(|| {
                    [("scale".to_string(), Attr::Float(1.0 / n as f64))]
                        .into_iter()
                        .collect()
                })
                .clone()
        })
    }

    /// Inserts the synchronisation of the parameter gradients `op` produced: an in-place
    /// all-reduce (SUM) over each mesh axis the gradient is partial on, then the scale;
    /// under ZeRO a reduce-scatter into the gradient's shard instead; with buckets, the
    /// gradient joins its bucket.
    pub fn after_op(&mut self, b: &mut RankBuilder, op: &Op) -> Result<(), PartitionError> {
        let is_grad = |g: &VarId| self.is_param_grad.get(g.index()).copied().unwrap_or(false);
        if op.role != OpRole::Backward || !op.all_outputs().any(|g| is_grad(&g)) {
            return Ok(());
        }
        // Paddle visits an op's outputs by slot name (its OpDesc keeps them in a sorted
        // map), so layer_norm_grad's Bias@GRAD is synchronised before its Scale@GRAD.
        let (_, out_specs) = op.ty.slots();
        let mut slots: Vec<usize> = (0..op.outputs.len()).collect();
        crate::sort::sort_by_key(&mut slots, |&i| out_specs.get(i).map(|s| s.name));
        let grads: Vec<_> = slots
            .into_iter()
            .flat_map(|i| op.outputs[i].iter().copied())
            .filter(is_grad)
            .collect();
        for g in grads {
            self.sync_one(b, g)?;
        }
        Ok(())
    }

    fn sync_one(&mut self, b: &mut RankBuilder, g: VarId) -> Result<(), PartitionError> {
        let cur = b.cur[g.index()].clone();
        let scale = self.scale_attrs(b);
        // Under ZeRO the gradient is reduce-scattered into its shard, which is scaled; the
        // whole local gradient keeps its unreduced (partial) value.
        if let Some(p) = self.zero.by_grad(g) {
            if p.axes != cur.partial_axes() {
                return Err(PartitionError::ZeroPartial {
                    param: b.program.var(p.param).name.to_string(),
                    planned: p.axes.clone(),
                    partial: cur.partial_axes().into_iter().collect(),
                });
            }
            super::zero::reduce_scatter(b, p);
            push_scale(b, p.grad_shard, scale, Purpose::Sharding);
            return Ok(());
        }
        let axes = cur.partial_axes();
        if self.buckets.enabled() && !axes.is_empty() {
            self.buckets.add(b, g, axes, scale);
            return Ok(());
        }
        // One all-reduce over every partial axis together (the batch split over `dp` and
        // `ep`, or `dp` and a sequence-parallel `tp`): DDP's one group of every replica,
        // 2(n−1)/n of the bytes where one all-reduce per axis would send the sum of each.
        if !axes.is_empty() {
            b.collective(
                OpType::AllReduce,
                g,
                g,
                &axes,
                vec![("reduce_type", Attr::Str("SUM".into()))],
                Purpose::DataParallel,
            );
        }
        push_scale(b, g, scale, Purpose::DataParallel);
        b.cur[g.index()] = DistProgram::settled(&cur);
        Ok(())
    }
}

/// `scale(target)` in place with `attrs` (nothing without them).
fn push_scale(b: &mut RankBuilder, target: VarId, attrs: Option<Attrs>, purpose: Purpose) {
    if let Some(attrs) = attrs {
        let mut s = Op::new(OpType::Scale);
        s.inputs = crate::slots![[target]];
        s.outputs = crate::slots![[target]];
        s.attrs = attrs;
        s.namescope = purpose.namescope().into();
        b.local(s);
    }
}

/// AMP's `found_inf` after `check_finite_and_unscale`: all-reduced (MAX) over the whole
/// mesh, so every rank skips or takes the step alike (the seed's AMP flag sync).
pub fn sync_amp_flag(b: &mut RankBuilder, op: &Op) {
    if op.ty != OpType::CheckFiniteAndUnscale || b.mesh.size() <= 1 {
        return;
    }
    if let Some(&found) = op.output("FoundInfinite").first() {
        let all: Vec<MeshAxis> = b.mesh.axes().collect();
        b.collective(
            OpType::AllReduce,
            found,
            found,
            &all,
            vec![("reduce_type", Attr::Str("MAX".into()))],
            Purpose::AmpFlag,
        );
    }
}

/// Global-norm clipping's sum of squared norms: norms sharded over the same mesh axes are
/// summed locally and all-reduced once (global-norm synchronisation), then all are added.
/// With pipeline stages each stage sums its own gradients' squares, and the stage sums are
/// all-reduced over the `pp` axis. Returns false if `op` is not that sum.
pub fn global_norm_sum(
    b: &mut RankBuilder,
    op: &Op,
    pp: Option<MeshAxis>,
) -> Result<bool, PartitionError> {
    let inputs = op.input("X").to_vec();
    let Some(&out) = op.output("Out").first() else {
        return Ok(false);
    };
    if &*b.program.var(out).name != "global_norm_sq_0" {
        return Ok(false);
    }
    let mut by_axes: Vec<(Vec<MeshAxis>, Vec<VarId>)> = Vec::new();
    for v in inputs {
        let axes = b.cur[v.index()].partial_axes();
        match by_axes.iter_mut().find(|(a, _)| *a == axes) {
            Some((_, vs)) => vs.push(v),
            None => by_axes.push((axes, vec![v])),
        }
    }
    let mut totals = Vec::new();
    for (axes, vars) in by_axes {
        if axes.is_empty() {
            totals.extend(vars);
            continue;
        }
        let mut partial_attr = TensorDistAttr::replicated(MeshId::JOB, 0);
        for &a in &axes {
            partial_attr.set_partial(a, ReduceType::Sum);
        }
        let group_sum = b.temp(out, &partial_attr, "PARTIAL")?;
        let mut sum = Op::new(OpType::Sum);
        sum.inputs = crate::slots![vars];
        sum.outputs = crate::slots![[group_sum]];
        b.local(sum);
        b.collective(
            OpType::AllReduce,
            group_sum,
            group_sum,
            &axes,
            vec![("reduce_type", Attr::Str("SUM".into()))],
            Purpose::GlobalNorm,
        );
        b.cur[group_sum.index()] = DistProgram::settled(&partial_attr);
        totals.push(group_sum);
    }
    if totals.is_empty() {
        // A pipeline stage without parameters adds nothing to the norm.
        let ty = b.program.var(out).ty.clone();
        let mut zero = Op::new(OpType::FillConstant);
        zero.outputs = crate::slots![[out]];
        zero.attrs.insert("shape".into(), Attr::Ints(Vec::new()));
        zero.attrs.insert("value".into(), Attr::Float(0.0));
        zero.attrs
            .insert("dtype".into(), Attr::Str(ty.dtype.name().into()));
        b.local(zero);
    } else {
        let mut sum = Op::new(OpType::Sum);
        sum.inputs = crate::slots![totals];
        sum.outputs = crate::slots![[out]];
        b.local(sum);
    }
    if let Some(pp) = pp {
        b.collective(
            OpType::AllReduce,
            out,
            out,
            &[pp],
            vec![("reduce_type", Attr::Str("SUM".into()))],
            Purpose::GlobalNorm,
        );
    }
    b.cur[out.index()] = TensorDistAttr::replicated(MeshId::JOB, 0);
    Ok(true)
}

/// A tied parameter's gradient sum (`pipeline::tied`): the serial `sum` of the copies'
/// gradients becomes, on each rank of a tied stage, an all-reduce (SUM) of its own copy's
/// gradient (its ZeRO shard under ZeRO) over the tied stages; the `assign` that hands the
/// sum to the copies is that same all-reduce, so it emits nothing. `local` is the op with
/// this rank's stage's slots only (`p2p::RankPipe`), `serial` the whole op.
pub fn tied_sum(
    b: &mut RankBuilder,
    local: &Op,
    serial: &Op,
    plan: &super::p2p::StagePlan,
    zero: &super::zero::ZeroLayout,
) -> Result<(), PartitionError> {
    if local.ty != OpType::Sum {
        return Ok(());
    }
    let Some(&g) = local.input("X").first() else {
        return Ok(());
    };
    let pp = plan.stages.axis.ok_or(PartitionError::NoPipelineAxis)?;
    let stages: smallvec::SmallVec<[usize; 4]> =
        serial.input("X").iter().map(|&v| plan.owner(v)).collect();
    let target = zero.by_grad(g).map_or(g, |p| p.grad_shard);
    let mut op = Op::new(OpType::AllReduce);
    op.inputs = crate::slots![[target]];
    op.outputs = crate::slots![[target]];
    op.namescope = Purpose::TiedParameter.namescope().into();
    let extra = vec![("reduce_type", Attr::Str("SUM".into()))];
    b.rank_dependent(op, super::stamp::RankAttrs::Stages { pp, stages, extra });
    Ok(())
}

/// A data-parallel gradient scaling op (the seed's `is_data_parallel_scale_op`).
pub fn is_data_parallel_scale_op(op: &Op) -> bool {
    op.ty == OpType::Scale && op.purpose() == Some(Purpose::DataParallel)
}

/// A data-parallel gradient all-reduce (the seed's `is_data_parallel_reduce_op`).
pub fn is_data_parallel_reduce_op(op: &Op) -> bool {
    op.ty == OpType::AllReduce
        && op.purpose() == Some(Purpose::DataParallel)
        && op.attr_str("reduce_type") == Some("SUM")
}

/// The all-reduce (MAX) of AMP's `found_inf` flag (the seed's `is_amp_flag_sync_op`).
pub fn is_amp_flag_sync_op(op: &Op) -> bool {
    op.ty == OpType::AllReduce
        && op.purpose() == Some(Purpose::AmpFlag)
        && op.attr_str("reduce_type") == Some("MAX")
}

/// The all-reduce of global-norm partial sums (the seed's `is_global_norm_sync_op`).
pub fn is_global_norm_sync_op(op: &Op) -> bool {
    op.ty == OpType::AllReduce && op.purpose() == Some(Purpose::GlobalNorm)
}
