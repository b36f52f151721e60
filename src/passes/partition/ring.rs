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
use crate::ir::{Attr, Op, OpType, Purpose, VarId};

/// The sequence axes of `op`'s queries when it runs as ring attention (a `flash_attn` or
/// its grad with `cp_mode` ring and a split sequence).
pub fn ring_axes(b: &RankBuilder, op: &Op) -> Option<DimAxes> {
    let attention = op.ty == OpType::FlashAttn || op.ty == OpType::FlashAttnGrad;
    if !attention || op.attr_str("cp_mode") != Some("ring") {
        return None;
    }
    let q = *op.input("Q").first()?;
    let axes = *b.cur[q.index()].dims.get(1)?;
    (!axes.is_empty()).then_some(axes)
}

fn slot(op: &Op, name: &'static str, input: bool) -> Result<VarId, PartitionError> {
    let vars = if input {
        op.input(name)
    } else {
        op.output(name)
    };
    vars.first().copied().ok_or(PartitionError::MissingSlot {
        ty: op.ty,
        slot: name,
    })
}

/// The ring's size, after checking the sequence splits evenly over it (every step's block
/// must have one shape).
fn ring_size(b: &RankBuilder, op: &Op, axes: &DimAxes) -> Result<(usize, usize), PartitionError> {
    let q = slot(op, "Q", true)?;
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

/// A ring step's op with the op's mask attributes.
fn block(ty: OpType, op: &Op, seq: usize) -> Op {
    let mut o = Op::new(ty);
    o.role = op.role;
    o.namescope = op.namescope.clone();
    o.attrs.insert("seq".into(), Attr::Int(seq as i64));
    o.attrs
        .insert("zigzag".into(), Attr::Int(op.attr_int("zigzag", 0)));
    o.attrs
        .insert("causal".into(), Attr::Bool(op.attr_bool("causal", true)));
    o
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
) -> Result<Vec<VarId>, PartitionError> {
    let outs = xs
        .iter()
        .map(|&x| like(b, x))
        .collect::<Result<Vec<_>, _>>()?;
    let mut p = Op::new(OpType::Ppermute);
    p.inputs = crate::slots![xs.to_vec()];
    p.outputs = crate::slots![outs.clone()];
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
    let (p, seq) = ring_size(b, op, &axes)?;
    let (q, k, v) = (
        slot(op, "Q", true)?,
        slot(op, "K", true)?,
        slot(op, "V", true)?,
    );
    let (out, lse) = (slot(op, "Out", false)?, slot(op, "SoftmaxLse", false)?);
    let (mut ck, mut cv) = (k, v);
    let mut acc: Option<(VarId, VarId)> = None;
    for step in 0..p {
        if step > 0 {
            let got = pass(b, &[ck, cv], &axes, 1)?;
            (ck, cv) = (got[0], got[1]);
        }
        let (o, l) = if step + 1 == p {
            (out, lse)
        } else {
            (like(b, out)?, like(b, lse)?)
        };
        let mut blk = block(OpType::RingAttnBlock, op, seq);
        let (acc_o, acc_l): (Vec<VarId>, Vec<VarId>) = acc.into_iter().unzip();
        blk.inputs = crate::slots![[q], [ck], [cv], acc_o, acc_l];
        blk.outputs = crate::slots![[o], [l]];
        b.rank_dependent(
            blk,
            RankAttrs::RingBlock(RingStep {
                n: seq,
                axes,
                step,
                back: false,
            }),
        );
        acc = Some((o, l));
    }
    Ok(())
}

/// The backward: `P` block gradients over `P − 1` passes of K, V and their running
/// gradients the other way round the ring, then one pass of the gradients home.
pub fn backward(b: &mut RankBuilder, op: &Op, axes: DimAxes) -> Result<(), PartitionError> {
    let (p, seq) = ring_size(b, op, &axes)?;
    let ins = ["Q", "K", "V", "Out", "SoftmaxLse", "Out@GRAD"]
        .map(|s| slot(op, s, true))
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
    let outs = ["Q@GRAD", "K@GRAD", "V@GRAD"]
        .map(|s| slot(op, s, false))
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
    let (mut ck, mut cv) = (ins[1], ins[2]);
    let mut acc: Option<[VarId; 3]> = None;
    for step in 0..p {
        let mut carried: Vec<Vec<VarId>> = vec![vec![]; 3];
        if let Some([dq, dk, dv]) = acc {
            let got = pass(b, &[ck, cv, dk, dv], &axes, -1)?;
            (ck, cv) = (got[0], got[1]);
            carried = vec![vec![dq], vec![got[2]], vec![got[3]]];
        }
        let last = step + 1 == p;
        let dq = if last { outs[0] } else { like(b, outs[0])? };
        let (dk, dv) = (like(b, outs[1])?, like(b, outs[2])?);
        let mut blk = block(OpType::RingAttnBlockGrad, op, seq);
        blk.inputs = crate::slots![
            [ins[0]],
            [ck],
            [cv],
            [ins[3]],
            [ins[4]],
            [ins[5]],
            carried[0].clone(),
            carried[1].clone(),
            carried[2].clone()
        ];
        blk.outputs = crate::slots![[dq], [dk], [dv]];
        b.rank_dependent(
            blk,
            RankAttrs::RingBlock(RingStep {
                n: seq,
                axes,
                step,
                back: true,
            }),
        );
        acc = Some([dq, dk, dv]);
    }
    if let Some([_, dk, dv]) = acc {
        let home = pass(b, &[dk, dv], &axes, -1)?;
        for (k, &g) in home.iter().enumerate() {
            let mut assign = Op::new(OpType::Assign);
            assign.inputs = crate::slots![[g]];
            assign.outputs = crate::slots![[outs[k + 1]]];
            assign.role = op.role;
            assign.namescope = op.namescope.clone();
            b.local(assign);
        }
    }
    Ok(())
}
