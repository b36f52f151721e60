//! One program, every rank. Under SPMD every rank of a mesh runs the same ops on the same
//! local shapes (layouts split evenly); what differs is a handful of attribute values: a
//! collective's group and ring, the offsets of a reshard's slice, the first vocabulary row
//! of a vocab-parallel table or loss. So the partitioner builds and verifies one rank's
//! program (the template) and records, for each op whose attributes depend on the rank, how
//! to compute them ([`RankAttrs`]); every other rank's program is the template with those
//! attributes recomputed for it ([`stamp`]). Unchanged ops stay shared, so a rank costs
//! its rank-dependent ops, not its whole program.
//!
//! Why a stamped program is as good as one built and verified on its own: the builder
//! cannot see which rank it builds except through [`RankCtx`], which only these recipes
//! use, so the template's structure (ops, slots, shapes, layouts) is the same for every
//! rank; and the verifier's checks (slots, attribute kinds, dataflow, shapes) do not depend
//! on the values a recipe writes. `tests/partition.rs` holds the stamped programs equal to
//! ones built rank by rank (`PartitionOptions::build_every_rank`) for every scenario and
//! random plans.

use super::rank::{ExtraAttrs, Groups};
use super::RankProgram;
use crate::dist::{DimAxes, MeshAxis, ProcessMesh};
use crate::ir::{Attr, Attrs, Op};
use smallvec::SmallVec;
use std::sync::Arc;

/// How to compute an op's rank-dependent attributes on any rank of the mesh.
#[derive(Clone, Debug, PartialEq)]
pub enum RankAttrs {
    /// A collective over mesh axes `axes`: `extra`, plus the rank's `group` and `ring_id`.
    Collective {
        axes: SmallVec<[MeshAxis; 4]>,
        extra: ExtraAttrs,
    },
    /// A reshard's local slice of a dim of `n` elements that the rank holds split over
    /// `axes` without the last, and wants split over all of `axes`: `starts` and `ends` of
    /// the rank's chunk within its piece (see `dist::chunk`).
    Slice { n: usize, axes: DimAxes },
    /// An unpad: the first elements of a padded dim, as many as the rank's chunk of a dim of
    /// `n` elements split over `axes` holds (`starts` 0, `ends` its length).
    Unpad { n: usize, axes: DimAxes },
    /// A pad before a collective over `axis` on a dim of `n` elements the rank holds split
    /// over `outer` (and, unless `whole`, over `axis` too): `pad_size`, the zeros that
    /// bring the rank's piece to the padded length, `⌈len/k⌉` per shard (`k·⌈len/k⌉` for
    /// the whole piece), `len` the piece `outer` leaves.
    Pad {
        n: usize,
        outer: DimAxes,
        axis: MeshAxis,
        whole: bool,
    },
    /// `start_index` of a vocab-parallel embedding (or its grad): the rank's first row of a
    /// table of `rows` rows split over `axes`.
    TableStart { axes: DimAxes, rows: usize },
    /// The vocab-parallel cross-entropy over `cols` classes split on `axes`:
    /// `start_index`, and the group's `ring_id`, `rank`, `nranks` and `group`.
    VocabCrossEntropy { axes: DimAxes, cols: usize },
    /// A pipeline send (or recv) to (from) the rank of stage `stage` along the `pp` axis at
    /// this rank's coordinates on the other axes: `peer`, the ordered two-rank `group`
    /// `[src, dst]` and its `ring_id` (one ring per direction).
    P2P {
        pp: MeshAxis,
        stage: usize,
        send: bool,
    },
    /// Step `step` of ring attention over a sequence of `n` stored positions split over
    /// `axes`: `q_offset`, the rank's first position, and `kv_offset`, the first position
    /// of the block it attends at that step, the block of the ring member `step` places
    /// back (forward) or on (`back`: the backward walks the ring the other way).
    RingBlock(RingStep),
    /// A collective over the ranks at `stages` along the `pp` axis, at this rank's
    /// coordinates on the other axes (a tied parameter's stages): `extra`, plus `group`
    /// and `ring_id`.
    Stages {
        pp: MeshAxis,
        stages: SmallVec<[usize; 4]>,
        extra: ExtraAttrs,
    },
}

/// What computing rank-dependent attributes needs: the rank, its mesh, the job's group
/// registry (ring ids), and the collective attributes built so far on this rank.
pub struct RankCtx<'a> {
    rank: u32,
    mesh: &'a ProcessMesh,
    pub groups: &'a mut Groups,
    /// (mesh-axis mask, extra attributes, all of them): a rank stamps the same few sets
    /// onto thousands of collectives, so each is built once and shared.
    collectives: Vec<(u32, ExtraAttrs, Attrs)>,
    /// The rank's coordinate on every mesh axis.
    coords: Vec<usize>,
}

impl<'a> RankCtx<'a> {
    /// The context of `rank` on `mesh`.
    pub fn new(rank: u32, mesh: &'a ProcessMesh, groups: &'a mut Groups) -> RankCtx<'a> {
        RankCtx {
            rank,
            mesh,
            groups,
            collectives: Vec::new(),
            coords: mesh.coords_of(rank).unwrap_or_else(|| vec![0; mesh.ndim()]),
        }
    }

    /// The rank being built.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The ranks of this rank's group along `axes`.
    fn group(&self, axes: &[MeshAxis]) -> Vec<u32> {
        self.mesh
            .group_of(self.rank, axes)
            .unwrap_or_else(|| vec![self.rank])
    }

    /// The rank's coordinate on every mesh axis.
    pub fn coords(&self) -> &[usize] {
        &self.coords
    }

    /// This rank's range of a dim of `n` elements split over `axes` (see `dist::chunk`).
    fn extent(&self, n: usize, axes: &DimAxes) -> (usize, usize) {
        crate::dist::chunk::extent(n, axes, self.mesh, &self.coords)
    }

    fn collective(&mut self, axes: &[MeshAxis], extra: &ExtraAttrs) -> Attrs {
        let mask = axes.iter().fold(0u32, |m, a| m | 1 << a.index());
        if let Some((_, _, attrs)) = self
            .collectives
            .iter()
            .find(|(m, e, _)| *m == mask && e == extra)
        {
            return attrs.clone();
        }
        let group = self.group(axes);
        let ring = self.groups.ring_of(&group);
        let mut attrs: Attrs = extra
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        attrs.insert("group".into(), ints(&group));
        attrs.insert("ring_id".into(), Attr::Int(ring as i64));
        self.collectives.push((mask, extra.clone(), attrs.clone()));
        attrs
    }
}

fn ints(ranks: &[u32]) -> Attr {
    Attr::Ints(ranks.iter().map(|&r| i64::from(r)).collect())
}

impl RankAttrs {
    /// Writes the attributes this recipe computes into `attrs`, for `ctx`'s rank.
    pub fn apply(&self, ctx: &mut RankCtx, attrs: &mut Attrs) {
        match self {
            RankAttrs::Collective { axes, extra } => *attrs = ctx.collective(axes, extra),
            RankAttrs::Slice { n, axes } => {
                let mut outer = *axes;
                outer.pop();
                let (held, _) = ctx.extent(*n, &outer);
                let (start, end) = ctx.extent(*n, axes);
                attrs.insert("starts".into(), Attr::Ints(vec![(start - held) as i64]));
                attrs.insert("ends".into(), Attr::Ints(vec![(end - held) as i64]));
            }
            RankAttrs::Unpad { n, axes } => {
                let (start, end) = ctx.extent(*n, axes);
                attrs.insert("starts".into(), Attr::Ints(vec![0]));
                attrs.insert("ends".into(), Attr::Ints(vec![(end - start) as i64]));
            }
            RankAttrs::Pad {
                n,
                outer,
                axis,
                whole,
            } => {
                let pad = pad_size(ctx, *n, outer, *axis, *whole);
                attrs.insert("pad_size".into(), Attr::Int(pad as i64));
            }
            RankAttrs::RingBlock(r) => r.apply(ctx, attrs),
            RankAttrs::TableStart { axes, rows } => {
                let (start, _) = ctx.extent(*rows, axes);
                attrs.insert("start_index".into(), Attr::Int(start as i64));
            }
            RankAttrs::P2P { pp, stage, send } => {
                let mut coords = ctx.coords.clone();
                if let Some(c) = coords.get_mut(pp.index()) {
                    *c = *stage;
                }
                let peer = ctx.mesh.process_at(&coords).unwrap_or(ctx.rank);
                let (src, dst) = if *send {
                    (ctx.rank, peer)
                } else {
                    (peer, ctx.rank)
                };
                let ring = ctx.groups.p2p_ring(src, dst);
                attrs.insert("peer".into(), Attr::Int(i64::from(peer)));
                attrs.insert("group".into(), ints(&[src, dst]));
                attrs.insert("ring_id".into(), Attr::Int(ring as i64));
            }
            RankAttrs::Stages { pp, stages, extra } => {
                let mut group: Vec<u32> = stages
                    .iter()
                    .filter_map(|&stage| {
                        let mut coords = ctx.coords.clone();
                        *coords.get_mut(pp.index())? = stage;
                        ctx.mesh.process_at(&coords)
                    })
                    .collect();
                group.sort_unstable();
                let ring = ctx.groups.ring_of(&group);
                for (k, v) in extra {
                    attrs.insert(k.to_string(), v.clone());
                }
                attrs.insert("group".into(), ints(&group));
                attrs.insert("ring_id".into(), Attr::Int(ring as i64));
            }
            RankAttrs::VocabCrossEntropy { axes, cols } => {
                let group = ctx.group(axes);
                let me = group.iter().position(|&r| r == ctx.rank).unwrap_or(0);
                let (start, _) = ctx.extent(*cols, axes);
                attrs.insert("start_index".into(), Attr::Int(start as i64));
                let ring = ctx.groups.ring_of(&group);
                attrs.insert("ring_id".into(), Attr::Int(ring as i64));
                attrs.insert("rank".into(), Attr::Int(me as i64));
                attrs.insert("nranks".into(), Attr::Int(group.len() as i64));
                attrs.insert("group".into(), ints(&group));
            }
        }
    }
}

/// Step `step` of ring attention over a sequence of `n` stored positions split over
/// `axes`: `q_offset`, the rank's first position, and `kv_offset`, the first position of
/// the block it attends at that step, the block of the ring member `step` places back
/// (forward) or on (`back`: the backward walks the ring the other way).
#[derive(Clone, Debug, PartialEq)]
pub struct RingStep {
    pub n: usize,
    pub axes: DimAxes,
    pub step: usize,
    pub back: bool,
}

impl RingStep {
    fn apply(&self, ctx: &mut RankCtx, attrs: &mut Attrs) {
        // Only the builds that plan ring attention make these steps.
        if !cfg!(feature = "context-parallel") {
            return;
        }
        let (q, _) = ctx.extent(self.n, &self.axes);
        let group = ctx.group(&self.axes);
        let p = group.len().max(1);
        let me = group.iter().position(|&r| r == ctx.rank).unwrap_or(0);
        let at = if self.back {
            (me + self.step) % p
        } else {
            (me + p - self.step % p) % p
        };
        let peer = group.get(at).copied().unwrap_or(ctx.rank);
        let coords = ctx
            .mesh
            .coords_of(peer)
            .unwrap_or_else(|| ctx.coords.clone());
        let (kv, _) = crate::dist::chunk::extent(self.n, &self.axes, ctx.mesh, &coords);
        attrs.insert("q_offset".into(), Attr::Int(q as i64));
        attrs.insert("kv_offset".into(), Attr::Int(kv as i64));
    }
}

/// The zeros a [`RankAttrs::Pad`] appends on `ctx`'s rank.
pub fn pad_size(ctx: &RankCtx, n: usize, outer: &DimAxes, axis: MeshAxis, whole: bool) -> usize {
    let (start, end) = ctx.extent(n, outer);
    let len = end - start;
    let k = ctx.mesh.axis_size(axis);
    let shard = crate::dist::chunk::chunk_max(len, k);
    if whole {
        k * shard - len
    } else {
        let i = ctx.coords.get(axis.index()).copied().unwrap_or(0);
        let (s, e) = crate::dist::chunk::chunk(len, k, i);
        shard - (e - s)
    }
}

/// The template's rank-dependent ops: (op index, recipe), in op order.
pub type Recipes = Vec<(usize, RankAttrs)>;

/// `template` (built for another rank of the same mesh) as `ctx`'s rank's program: every
/// op of `recipes` gets its attributes recomputed; the others are shared.
pub fn stamp(template: &RankProgram, recipes: &Recipes, ctx: &mut RankCtx) -> RankProgram {
    let mut program = template.program.clone();
    for (i, recipe) in recipes {
        if let Some(op) = program.op_mut(*i) {
            let mut attrs = op.attrs.clone();
            recipe.apply(ctx, &mut attrs);
            op.attrs = attrs;
        }
    }
    RankProgram {
        rank: ctx.rank,
        program,
        attrs: template.attrs.clone(),
        origin: template.origin.clone(),
        op_chunks: template.op_chunks.clone(),
    }
}

/// An op whose attributes depend on the rank, ready to push: `op` with `recipe` applied
/// for `ctx`'s rank.
pub fn with_rank_attrs(mut op: Op, recipe: &RankAttrs, ctx: &mut RankCtx) -> Arc<Op> {
    recipe.apply(ctx, &mut op.attrs);
    Arc::new(op)
}
