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
    /// A reshard's local slice of the dim split over `axis` into pieces of `piece`:
    /// `starts` and `ends` of the rank's piece.
    Slice { axis: MeshAxis, piece: usize },
    /// `start_index` of a vocab-parallel embedding (or its grad): the rank's first row of a
    /// table whose rows are split over `axes` in blocks of `rows`.
    TableStart { axes: DimAxes, rows: usize },
    /// The vocab-parallel cross-entropy over the classes split on `axes` in blocks of
    /// `cols`: `start_index`, and the group's `ring_id`, `rank`, `nranks` and `group`.
    VocabCrossEntropy { axes: DimAxes, cols: usize },
    /// A pipeline send (or recv) to (from) the rank of stage `stage` along the `pp` axis at
    /// this rank's coordinates on the other axes: `peer`, the ordered two-rank `group`
    /// `[src, dst]` and its `ring_id` (one ring per direction).
    P2P {
        pp: MeshAxis,
        stage: usize,
        send: bool,
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

    /// The index of this rank's block of a dim split over `axes` (the first axis is the
    /// major one, as in `local_shape`).
    fn block(&self, axes: &[MeshAxis]) -> usize {
        axes.iter().fold(0usize, |acc, &a| {
            acc * self.mesh.axis_size(a) + self.coords.get(a.index()).copied().unwrap_or(0)
        })
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
            RankAttrs::Slice { axis, piece } => {
                let start = ctx.block(&[*axis]) * piece;
                attrs.insert("starts".into(), Attr::Ints(vec![start as i64]));
                attrs.insert("ends".into(), Attr::Ints(vec![(start + piece) as i64]));
            }
            RankAttrs::TableStart { axes, rows } => {
                let start = ctx.block(axes) * rows;
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
            RankAttrs::VocabCrossEntropy { axes, cols } => {
                let group = ctx.group(axes);
                let me = group.iter().position(|&r| r == ctx.rank).unwrap_or(0);
                let start = ctx.block(axes) * cols;
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
