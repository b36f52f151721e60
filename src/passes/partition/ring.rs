//! Ring attention (Megatron-Core's context parallelism, Liu et al.'s ring attention): a
//! `flash_attn` whose sequence stays split over the context-parallel axes (`cp_mode` ring)
//! runs on each rank as `P` blocks, `P` the ring's size. Forward, the rank's queries attend
//! its own keys and values, then `P − 1` times the K/V block passes one rank on around the
//! ring (`ppermute`, shift +1) and is attended and merged by the online softmax. Backward
//! walks the ring the other way (shift −1): each step attends one visiting block, adds to
//! the rank's dq and to the dk, dv that travel with the block; after `P − 1` steps each
//! block's gradient is one rank short of home, and a last pass brings it there.
//!
//! Which block a rank holds at step `i` depends on the rank: the block ops' offsets are a
//! recipe ([`RingStep`]) like a slice's. The zig-zag order (`zigzag` = 2·P) is
//! the op's stored order: rank `r` holds original chunks `r` and `2P − 1 − r`, so every
//! rank's causal mask keeps the same number of pairs.

use super::rank::{PartitionError, RankBuilder};
use super::stamp::{RankAttrs, RingStep};
use crate::dist::DimAxes;
use crate::ir::{Attr, Op, OpType, Purpose, Slot, VarId};

/// A ring's forward or backward (an op only the builds with context parallelism plan;
/// see `spmd::attention`).
pub fn lower(b: &mut RankBuilder, op: &Op, axes: DimAxes) -> Result<(), PartitionError> {
    if cfg!(feature = "context-parallel") {
        if op.ty == OpType::FlashAttn {
            forward(b, op, axes)
        } else {
            backward(b, op, axes)
        }
    } else {
        Ok(())
    }
}

/// The sequence axes of `op`'s queries when it runs as ring attention (a `flash_attn` or
/// its grad with `cp_mode` ring and a split sequence).
pub fn ring_axes(b: &RankBuilder, op: &Op) -> Option<DimAxes> {
    if !cfg!(feature = "context-parallel") {
        return None;
    }
    let attention = op.ty == OpType::FlashAttn || op.ty == OpType::FlashAttnGrad;
    if !attention || op.attr_str("cp_mode") != Some("ring") {
        return None;
    }
    let q = *op.input("Q").first()?;
    let axes = *b.cur[q.index()].dims.get(1)?;
    (!axes.is_empty()).then_some(axes)
}

/// The first variable of each named slot (inputs, or outputs with `outputs`).
fn slots<const N: usize>(
    op: &Op,
    names: [&'static str; N],
    outputs: bool,
) -> Result<[VarId; N], PartitionError> {
    let mut out = [VarId(0); N];
    for (k, name) in names.into_iter().enumerate() {
        let vars = if outputs {
            op.output(name)
        } else {
            op.input(name)
        };
        out[k] = *vars.first().ok_or(PartitionError::MissingSlot {
            ty: op.ty,
            slot: name,
        })?;
    }
    Ok(out)
}

/// The ring's size and the sequence's length, after checking the sequence splits evenly
/// over the ring (every step's block must have one shape).
fn ring_size(b: &RankBuilder, q: VarId, axes: &DimAxes) -> Result<(usize, usize), PartitionError> {
    let p: usize = axes.iter().map(|&a| b.mesh.axis_size(a)).product();
    let seq = b.global_shape(q).get(1).copied().unwrap_or(0);
    if p == 0 || seq % p != 0 {
        return Err(PartitionError::RingUneven {
            var: b.program.var(q).name.to_string(),
            seq,
            ring: p,
        });
    }
    Ok((p, seq))
}

/// An op of `ty` in `like`'s role and scope, its slots from plain lists (one call site
/// for every op the ring adds keeps the page's module small).
fn new_op(ty: OpType, like: &Op, ins: &[&[VarId]], outs: &[&[VarId]]) -> Op {
    let mut o = Op::new(ty);
    o.inputs = ins.iter().map(|s| Slot::from_slice(s)).collect();
    o.outputs = outs.iter().map(|s| Slot::from_slice(s)).collect();
    o.role = like.role;
    o.namescope = like.namescope.clone();
    o
}

/// Appends step `step`'s block op, with the op's mask attributes and its offsets.
fn push_block(b: &mut RankBuilder, mut o: Op, like: &Op, seq: usize, axes: DimAxes, step: usize) {
    o.attrs.insert("seq".into(), Attr::Int(seq as i64));
    o.attrs
        .insert("zigzag".into(), Attr::Int(like.attr_int("zigzag", 0)));
    o.attrs
        .insert("causal".into(), Attr::Bool(like.attr_bool("causal", true)));
    let back = o.ty == OpType::RingAttnBlockGrad;
    let step = RingStep {
        n: seq,
        axes,
        step,
        back,
    };
    b.rank_dependent(o, RankAttrs::RingBlock(step));
}

/// A temporary like `of`, in its current layout.
fn like(b: &mut RankBuilder, of: VarId) -> Result<VarId, PartitionError> {
    let attr = b.cur[of.index()].clone();
    b.temp(of, &attr, "RING")
}

/// One `ppermute` of `xs` by `shift` over the ring; returns the received copies.
fn pass(
    b: &mut RankBuilder,
    xs: &[VarId],
    axes: &DimAxes,
    shift: i64,
    like_op: &Op,
) -> Result<Vec<VarId>, PartitionError> {
    let outs = xs
        .iter()
        .map(|&x| like(b, x))
        .collect::<Result<Vec<_>, _>>()?;
    let mut p = new_op(OpType::Ppermute, like_op, &[xs], &[&outs]);
    p.namescope = Purpose::ContextParallel.namescope().into();
    let recipe = RankAttrs::Collective {
        axes: axes.iter().copied().collect(),
        extra: vec![("shift", Attr::Int(shift))],
    };
    b.rank_dependent(p, recipe);
    Ok(outs)
}

/// The forward: `P` blocks, `P − 1` passes of K and V.
pub fn forward(b: &mut RankBuilder, op: &Op, axes: DimAxes) -> Result<(), PartitionError> {
    let [q, mut k, mut v] = slots(op, ["Q", "K", "V"], false)?;
    let [out, lse] = slots(op, ["Out", "SoftmaxLse"], true)?;
    let (p, seq) = ring_size(b, q, &axes)?;
    let mut acc: Vec<VarId> = Vec::new();
    for step in 0..p {
        if step > 0 {
            let got = pass(b, &[k, v], &axes, 1, op)?;
            (k, v) = (got[0], got[1]);
        }
        let res = if step + 1 == p {
            vec![out, lse]
        } else {
            vec![like(b, out)?, like(b, lse)?]
        };
        let (acc_o, acc_l) = acc.split_at(acc.len() / 2);
        let o = new_op(
            OpType::RingAttnBlock,
            op,
            &[&[q], &[k], &[v], acc_o, acc_l],
            &[&res[..1], &res[1..]],
        );
        push_block(b, o, op, seq, axes, step);
        acc = res;
    }
    Ok(())
}

/// The backward: `P` block gradients over `P − 1` passes of K, V and their running
/// gradients the other way round the ring, then one pass of the gradients home.
pub fn backward(b: &mut RankBuilder, op: &Op, axes: DimAxes) -> Result<(), PartitionError> {
    let [q, mut k, mut v, out, lse, dout] =
        slots(op, ["Q", "K", "V", "Out", "SoftmaxLse", "Out@GRAD"], false)?;
    let [dq_out, dk_out, dv_out] = slots(op, ["Q@GRAD", "K@GRAD", "V@GRAD"], true)?;
    let (p, seq) = ring_size(b, q, &axes)?;
    let mut acc: Vec<VarId> = Vec::new();
    for step in 0..p {
        if let [dq, dk, dv] = acc[..] {
            let got = pass(b, &[k, v, dk, dv], &axes, -1, op)?;
            (k, v) = (got[0], got[1]);
            acc = vec![dq, got[2], got[3]];
        }
        let dq = if step + 1 == p {
            dq_out
        } else {
            like(b, dq_out)?
        };
        let res = [dq, like(b, dk_out)?, like(b, dv_out)?];
        let carried: Vec<&[VarId]> = if acc.is_empty() {
            vec![&[], &[], &[]]
        } else {
            acc.chunks(1).collect()
        };
        let ins = [
            &[q][..],
            &[k],
            &[v],
            &[out],
            &[lse],
            &[dout],
            carried[0],
            carried[1],
            carried[2],
        ];
        let o = new_op(
            OpType::RingAttnBlockGrad,
            op,
            &ins,
            &[&res[..1], &res[1..2], &res[2..]],
        );
        push_block(b, o, op, seq, axes, step);
        acc = res.to_vec();
    }
    if let [_, dk, dv] = acc[..] {
        let home = pass(b, &[dk, dv], &axes, -1, op)?;
        for (g, to) in home.into_iter().zip([dk_out, dv_out]) {
            b.local(new_op(OpType::Assign, op, &[&[g]], &[&[to]]));
        }
    }
    Ok(())
}
