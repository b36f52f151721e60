//! Reshard (Paddle's `Resharder`): the communication that turns a variable's current
//! layout on this rank into the layout its consumer wants. Primitives, in the order they
//! are applied:
//!
//! ```text
//! partial -> replicated        all_reduce(reduce type) over the partial axes
//! partial -> split             reduce_scatter along the dim that axis will split
//! split d -> split e           all_to_all (split e, concat d) over the axis (innermost
//!                              on d, becoming innermost on e)
//! split   -> replicated        all_gather along the dim (our all_gather takes the axis,
//!                              so Paddle's gather-then-split/concat is one op)
//! replicated -> split          a local slice: no communication
//! replicated -> partial (SUM)  a local scale by 1/n
//! ```
//! Every op goes to namescope `/auto_parallel/reshard` and produces a temporary
//! (`x@RESHARD@k`); a second consumer wanting the same layout reuses it.
//!
//! Uneven splits (see `dist::chunk`): a collective needs equal pieces, so an all-gather
//! or a reduce-scatter over an uneven dim pads its input with a `pad` op (`x@PAD@k`) and
//! unpads its output with a `slice`; the rank program shows both. An all-to-all over an
//! uneven dim is an all-gather and a slice instead.

use super::rank::{PartitionError, RankBuilder};
use super::stamp::RankAttrs;
use crate::dist::{MeshAxis, ReduceType, TensorDistAttr};
use crate::ir::{Attr, Op, OpType, Purpose, VarId};

/// Makes `v`'s contents available on this rank in layout `to`; returns the variable that
/// holds them (`v` itself when nothing is needed).
pub fn reshard(
    b: &mut RankBuilder,
    v: VarId,
    to: &TensorDistAttr,
) -> Result<VarId, PartitionError> {
    if b.cur[v.index()].layout == to.layout {
        return Ok(v);
    }
    if let Some(&done) = b.reshard_cache.get(&(v, to.layout.clone())) {
        return Ok(done);
    }
    take_back_all_reduce(b, v, to);
    let from = b.cur[v.index()].clone();
    let mut s = Step {
        cur: v,
        attr: from.clone(),
    };
    drop_partials(b, &mut s, to)?;
    all_to_all(b, &mut s, to)?;
    gather(b, &mut s, to)?;
    slice(b, &mut s, to)?;
    add_partials(b, &mut s, to)?;
    if s.attr.layout != to.layout {
        let name = b.program.var(v).name.clone();
        return Err(PartitionError::Reshard {
            var: name.to_string(),
            from: format!("{:?} {:?}", from.dims, from.partial),
            to: format!("{:?} {:?}", to.dims, to.partial),
        });
    }
    b.reshard_cache.insert((v, to.layout.clone()), s.cur);
    Ok(s.cur)
}

/// Where a reshard has got to: the variable holding the contents so far, and its layout.
struct Step {
    cur: VarId,
    attr: TensorDistAttr,
}

/// Megatron's sequence-parallel backward: a tensor-parallel all-reduce of `v` just
/// appended (a column-parallel layer's input gradient), which every rank then cuts to its
/// split of the sequence, is taken back, so `v` stays partial and the reshard below
/// reduce-scatters it: each rank receives only its part of the sum, half the bytes of
/// all-reducing (`(t−1)/t` of the tensor against `2(t−1)/t`). A later reader wanting `v`
/// whole all-reduces it then, as a reshard.
fn take_back_all_reduce(b: &mut RankBuilder, v: VarId, to: &TensorDistAttr) {
    let n = b.program.ops().len();
    let Some((i, RankAttrs::Collective { axes, .. })) = b.recipes.last() else {
        return;
    };
    let split = |a: &MeshAxis| to.dims.iter().any(|d| d.contains(a));
    if *i + 1 != n || !to.partial.is_empty() || !axes.iter().all(split) {
        return;
    }
    let last = &b.program.ops()[n - 1];
    let sum = matches!(last.attrs.get("reduce_type"), Some(Attr::Str(s)) if s == "SUM");
    if last.ty != OpType::AllReduce
        || last.purpose() != Some(Purpose::TensorParallel)
        || last.inputs[0][0] != v
        || !sum
    {
        return;
    }
    let mut partial = b.cur[v.index()].clone();
    for &a in axes.iter() {
        partial.set_partial(a, ReduceType::Sum);
    }
    b.cur[v.index()] = partial;
    b.recipes.pop();
    b.op_chunks.pop();
    b.program.remove_op(n - 1);
}

/// Step 1: Partial axes the target does not keep: reduce_scatter onto the dim the target splits
/// over that axis, else all_reduce (axes with the same reduce type together).
fn drop_partials(
    b: &mut RankBuilder,
    s: &mut Step,
    to: &TensorDistAttr,
) -> Result<(), PartitionError> {
    let (mut cur, mut attr) = (s.cur, s.attr.clone());
    let from = attr.clone();
    // 1. Partial axes the target does not keep.
    let dropped: Vec<(MeshAxis, ReduceType)> = from
        .partial
        .iter()
        .filter(|p| !to.partial.contains(p))
        .collect();
    let mut to_all_reduce: Vec<(MeshAxis, ReduceType)> = Vec::new();
    for (axis, reduce) in dropped {
        // partial -> split: reduce_scatter when the target appends this axis to one dim.
        let target_dim = (0..to.rank()).find(|&d| {
            to.dims[d].starts_with(&attr.dims[d])
                && to.dims[d].get(attr.dims[d].len()) == Some(&axis)
        });
        let still_partial = attr.clone();
        attr.partial.remove(axis);
        match target_dim {
            Some(d) if reduce == ReduceType::Sum => {
                let mut next = attr.clone();
                next.dims[d].push(axis);
                cur = reduce_scatter(b, cur, &still_partial, &next, d, axis)?;
                attr = next;
            }
            _ => to_all_reduce.push((axis, reduce)),
        }
    }
    // Axes with the same reduce type are reduced together over their joint group.
    let mut reduces: Vec<ReduceType> = to_all_reduce.iter().map(|p| p.1).collect();
    reduces.dedup();
    for reduce in reduces {
        let axes: Vec<MeshAxis> = to_all_reduce
            .iter()
            .filter(|p| p.1 == reduce)
            .map(|p| p.0)
            .collect();
        let out = b.temp(cur, &attr, "RESHARD")?;
        b.collective(
            OpType::AllReduce,
            cur,
            out,
            &axes,
            vec![("reduce_type", Attr::Str(reduce.name().into()))],
            Purpose::Reshard,
        );
        cur = out;
    }
    *s = Step { cur, attr };
    Ok(())
}

/// `cur` (laid out `from`, partial over `axis`) reduce-scattered onto dim `d`, laid out
/// `to`; over an uneven dim the whole is padded first and the rank's chunk unpadded after.
fn reduce_scatter(
    b: &mut RankBuilder,
    cur: VarId,
    from: &TensorDistAttr,
    to: &TensorDistAttr,
    d: usize,
    axis: MeshAxis,
) -> Result<VarId, PartitionError> {
    let attrs = vec![
        ("axis", Attr::Int(d as i64)),
        ("reduce_type", Attr::Str(ReduceType::Sum.name().into())),
    ];
    let n = b.global_shape(cur)[d];
    if crate::dist::chunk::even(n, &to.dims[d], b.mesh) {
        let out = b.temp(cur, to, "RESHARD")?;
        b.collective(
            OpType::ReduceScatter,
            cur,
            out,
            &[axis],
            attrs,
            Purpose::Reshard,
        );
        return Ok(out);
    }
    let whole = RankAttrs::Pad {
        n,
        outer: from.dims[d],
        axis,
        whole: true,
    };
    let padded = pad(b, cur, from, d, whole);
    let mut shape = b.program.var(padded).ty.shape.to_vec();
    shape[d] /= b.mesh.axis_size(axis).max(1);
    let scattered = b.shaped_temp(cur, to, shape, "RESHARD");
    b.collective(
        OpType::ReduceScatter,
        padded,
        scattered,
        &[axis],
        attrs,
        Purpose::Reshard,
    );
    unpad(b, scattered, to, d)
}

/// Step 2: split d -> split e of one axis: all_to_all.
fn all_to_all(
    b: &mut RankBuilder,
    s: &mut Step,
    to: &TensorDistAttr,
) -> Result<(), PartitionError> {
    let (mut cur, mut attr) = (s.cur, s.attr.clone());
    // 2. split d -> split e of one axis: all_to_all. The axis moves from innermost on d
    // (the axes outer to it stay, so the pieces its group members hold are adjacent) to
    // innermost on e (each member's piece of e is cut in the group's order).
    for d in 0..attr.rank() {
        let Some((&axis, outer)) = attr.dims[d].as_slice().split_last() else {
            continue;
        };
        if !to.dims[d].starts_with(outer) || to.dims[d].contains(&axis) {
            continue;
        }
        let Some(e) = (0..to.rank()).find(|&e| {
            e != d
                && to.dims[e].starts_with(&attr.dims[e])
                && to.dims[e].get(attr.dims[e].len()) == Some(&axis)
        }) else {
            continue;
        };
        let mut next = attr.clone();
        next.dims[d].pop();
        next.dims[e].push(axis);
        let global = b.global_shape(cur);
        let even = |dim: usize, axes| crate::dist::chunk::even(global[dim], axes, b.mesh);
        if !even(d, &attr.dims[d]) || !even(e, &next.dims[e]) {
            continue; // the gather and the slice below do it
        }
        let out = b.temp(cur, &next, "RESHARD")?;
        let attrs = vec![
            ("split_axis", Attr::Int(e as i64)),
            ("concat_axis", Attr::Int(d as i64)),
        ];
        b.collective(OpType::AllToAll, cur, out, &[axis], attrs, Purpose::Reshard);
        cur = out;
        attr = next;
    }
    *s = Step { cur, attr };
    Ok(())
}

/// Step 3: Gather axes the target does not have on a dim (innermost first).
fn gather(b: &mut RankBuilder, s: &mut Step, to: &TensorDistAttr) -> Result<(), PartitionError> {
    let (mut cur, mut attr) = (s.cur, s.attr.clone());
    // 3. Gather axes the target does not have on this dim (innermost first).
    for d in 0..attr.rank() {
        let common = attr.dims[d]
            .iter()
            .zip(&to.dims[d])
            .take_while(|(a, b)| a == b)
            .count();
        while attr.dims[d].len() > common {
            let axis = attr.dims[d][attr.dims[d].len() - 1];
            let mut next = attr.clone();
            next.dims[d].pop();
            let n = b.global_shape(cur)[d];
            let gather_attrs = vec![("axis", Attr::Int(d as i64))];
            if crate::dist::chunk::even(n, &attr.dims[d], b.mesh) {
                let out = b.temp(cur, &next, "RESHARD")?;
                b.collective(
                    OpType::AllGather,
                    cur,
                    out,
                    &[axis],
                    gather_attrs,
                    Purpose::Reshard,
                );
                cur = out;
            } else {
                let shard = RankAttrs::Pad {
                    n,
                    outer: next.dims[d],
                    axis,
                    whole: false,
                };
                let padded = pad(b, cur, &attr, d, shard);
                let mut shape = b.program.var(padded).ty.shape.to_vec();
                shape[d] *= b.mesh.axis_size(axis);
                let gathered = b.shaped_temp(cur, &next, shape, "RESHARD");
                b.collective(
                    OpType::AllGather,
                    padded,
                    gathered,
                    &[axis],
                    gather_attrs,
                    Purpose::Reshard,
                );
                cur = unpad(b, gathered, &next, d)?;
            }
            attr = next;
        }
    }
    *s = Step { cur, attr };
    Ok(())
}

/// Step 4: Slice axes the target adds (local, no communication).
fn slice(b: &mut RankBuilder, s: &mut Step, to: &TensorDistAttr) -> Result<(), PartitionError> {
    let (mut cur, mut attr) = (s.cur, s.attr.clone());
    // 4. Slice axes the target adds (local, no communication).
    for d in 0..attr.rank() {
        while attr.dims[d].len() < to.dims[d].len() {
            let axis = to.dims[d][attr.dims[d].len()];
            let n = b.global_shape(cur)[d];
            let mut next = attr.clone();
            next.dims[d].push(axis);
            let out = b.temp(cur, &next, "RESHARD")?;
            let mut op = Op::new(OpType::Slice);
            op.inputs = crate::slots![[cur]];
            op.outputs = crate::slots![[out]];
            op.attrs.insert("axes".into(), Attr::Ints(vec![d as i64]));
            op.namescope = Purpose::Reshard.namescope().into();
            let axes = next.dims[d];
            b.rank_dependent(op, RankAttrs::Slice { n, axes });
            cur = out;
            attr = next;
        }
    }
    *s = Step { cur, attr };
    Ok(())
}

/// `v` (laid out `attr`) padded along `d` with the zeros `recipe` (a [`RankAttrs::Pad`])
/// gives this rank: the input of a collective over an uneven dim.
fn pad(b: &mut RankBuilder, v: VarId, attr: &TensorDistAttr, d: usize, recipe: RankAttrs) -> VarId {
    b.uneven = true;
    let mut shape = b.program.var(v).ty.shape.to_vec();
    shape[d] += b.pad_size(&recipe);
    let out = b.shaped_temp(v, attr, shape, "PAD");
    let mut op = Op::new(OpType::Pad);
    op.inputs = crate::slots![[v]];
    op.outputs = crate::slots![[out]];
    op.attrs.insert("axis".into(), Attr::Int(d as i64));
    op.namescope = Purpose::Reshard.namescope().into();
    b.rank_dependent(op, recipe);
    out
}

/// The real elements of `padded` (a collective's padded output, laid out `attr` once
/// unpadded): the first ones along `d`, as many as the rank's chunk holds.
fn unpad(
    b: &mut RankBuilder,
    padded: VarId,
    attr: &TensorDistAttr,
    d: usize,
) -> Result<VarId, PartitionError> {
    let n = b.global_shape(padded)[d];
    let out = b.temp(padded, attr, "RESHARD")?;
    let mut op = Op::new(OpType::Slice);
    op.inputs = crate::slots![[padded]];
    op.outputs = crate::slots![[out]];
    op.attrs.insert("axes".into(), Attr::Ints(vec![d as i64]));
    op.namescope = Purpose::Reshard.namescope().into();
    b.rank_dependent(
        op,
        RankAttrs::Unpad {
            n,
            axes: attr.dims[d],
        },
    );
    Ok(out)
}

/// Step 5: replicated -> partial: SUM partial values that add up to the replicated one.
fn add_partials(
    b: &mut RankBuilder,
    s: &mut Step,
    to: &TensorDistAttr,
) -> Result<(), PartitionError> {
    let (mut cur, mut attr) = (s.cur, s.attr.clone());
    // 5. replicated -> partial: SUM partial values that add up to the replicated one.
    let added: Vec<(MeshAxis, ReduceType)> = to
        .partial
        .iter()
        .filter(|p| !attr.partial.contains(p))
        .collect();
    if !added.is_empty() {
        let n: usize = added
            .iter()
            .filter(|p| p.1 == ReduceType::Sum)
            .map(|p| b.mesh.axis_size(p.0))
            .product();
        let mut next = attr.clone();
        for (a, r) in added {
            next.set_partial(a, r);
        }
        let out = b.temp(cur, &next, "RESHARD")?;
        let mut op = Op::new(OpType::Scale);
        op.inputs = crate::slots![[cur]];
        op.outputs = crate::slots![[out]];
        op.attrs.insert("scale".into(), Attr::Float(1.0 / n as f64));
        op.namescope = Purpose::Reshard.namescope().into();
        b.local(op);
        cur = out;
        attr = next;
    }
    *s = Step { cur, attr };
    Ok(())
}
