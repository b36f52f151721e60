//! Pipeline stages on a process mesh, and the two ways Paddle pairs a rank with a rank of
//! another stage.
//!
//! A mesh axis named `pp` makes stages: stage `i` is the sub-mesh at `pp = i` (Paddle's
//! `mesh.get_mesh_with_dim("pp")[i]`). Layouts never split a dim over `pp`, so a stage's
//! communication groups along the other axes stay inside the stage, and every stage
//! sub-mesh has the same shape. With `chunks` virtual stages per rank (interleaved 1F1B),
//! virtual stage `k` runs on stage `k % p` as chunk `k / p` (Megatron's and Paddle's
//! assignment).
//!
//! Pairing: [`p2p_sources`] is the Resharder's rule (each destination rank receives the
//! piece it needs from a source rank holding it, rotating among holders);
//! [`corresponding_rank`] is the seed's `_get_corresponding_rank`, the fallback for
//! gradient-sync groups when a rank is not in an op's mesh (equal shapes: the same
//! coordinate; otherwise the target mesh's first rank).

use super::{Layout, MeshAxis, ProcessMesh};
use serde::Serialize;

/// The name of the pipeline axis.
pub const PP_AXIS: &str = "pp";

/// The most virtual stages a plan may have (stage numbers are `u16` in dist attrs).
pub const MAX_VIRTUAL_STAGES: usize = 4096;

/// A mesh's pipeline stages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Stages {
    /// The `pp` axis, if the mesh has one.
    pub axis: Option<MeshAxis>,
    /// Physical stages: the `pp` axis's size (1 without one).
    pub stages: usize,
    /// Virtual stages (model chunks) per physical stage.
    pub chunks: usize,
}

impl Stages {
    /// No pipeline: one stage, one chunk.
    pub const NONE: Stages = Stages {
        axis: None,
        stages: 1,
        chunks: 1,
    };

    /// The stages of `mesh` (its `pp` axis) with `chunks` chunks per stage.
    pub fn of(mesh: &ProcessMesh, chunks: usize) -> Stages {
        let axis = mesh.axis_by_name(PP_AXIS);
        Stages {
            axis,
            stages: axis.map_or(1, |a| mesh.axis_size(a)),
            chunks: chunks.max(1),
        }
    }

    /// Whether there is more than one (virtual) stage.
    pub fn is_pipelined(&self) -> bool {
        self.virtual_count() > 1
    }

    /// How many virtual stages there are (`stages × chunks`).
    pub fn virtual_count(&self) -> usize {
        self.stages.saturating_mul(self.chunks)
    }

    /// Virtual stage `k` as (physical stage, chunk).
    pub fn split(&self, k: usize) -> (usize, usize) {
        (k % self.stages.max(1), k / self.stages.max(1))
    }

    /// The physical stage `rank` belongs to.
    pub fn stage_of(&self, mesh: &ProcessMesh, rank: u32) -> usize {
        self.axis.map_or(0, |a| mesh.coord(rank, a))
    }

    /// The rank of stage `stage` at `rank`'s coordinates on every other axis.
    pub fn peer(&self, mesh: &ProcessMesh, rank: u32, stage: usize) -> Option<u32> {
        let Some(a) = self.axis else {
            return Some(rank);
        };
        let mut coords = mesh.coords_of(rank)?;
        *coords.get_mut(a.index())? = stage;
        mesh.process_at(&coords)
    }

    /// The ranks of stage `stage`, in mesh order.
    pub fn ranks_of(&self, mesh: &ProcessMesh, stage: usize) -> Vec<u32> {
        mesh.process_ids()
            .iter()
            .copied()
            .filter(|&r| self.stage_of(mesh, r) == stage)
            .collect()
    }

    /// Stage `stage`'s sub-mesh with the `pp` axis dropped (as Paddle prints it).
    pub fn stage_mesh(&self, mesh: &ProcessMesh, stage: usize) -> Option<ProcessMesh> {
        let Some(a) = self.axis else {
            return Some(mesh.clone());
        };
        let keep: Vec<usize> = (0..mesh.ndim()).filter(|&d| d != a.index()).collect();
        let shape: Vec<usize> = keep.iter().map(|&d| mesh.shape()[d]).collect();
        let names: Vec<String> = keep.iter().map(|&d| mesh.dim_names()[d].clone()).collect();
        let ids = self.ranks_of(mesh, stage);
        ProcessMesh::new(shape, ids, names).ok()
    }
}

/// The seed's `_get_corresponding_rank(dist_context, target_mesh, rank)`: the rank of
/// `target` at `rank`'s coordinate in the first of `meshes` that holds `rank` and has
/// `target`'s shape; `target`'s first rank when no such mesh exists (the seed assumes all
/// stage meshes evenly divide one parent mesh and have one shape).
pub fn corresponding_rank(meshes: &[&ProcessMesh], target: &ProcessMesh, rank: u32) -> u32 {
    let found = meshes
        .iter()
        .find(|m| m.shape() == target.shape() && m.process_ids().contains(&rank));
    match found.and_then(|m| m.coords_of(rank)) {
        Some(coords) => target.process_at(&coords).unwrap_or(rank),
        None => target.process_ids().first().copied().unwrap_or(rank),
    }
}

/// A half-open range of indices along one dim.
pub type Span = (usize, usize);

/// The block of a tensor of `shape` that `rank` holds under `layout` on `mesh`, per dim.
pub fn block_of(shape: &[usize], layout: &Layout, mesh: &ProcessMesh, rank: u32) -> Vec<Span> {
    shape
        .iter()
        .enumerate()
        .map(|(d, &n)| {
            let axes = layout.dims.get(d).copied().unwrap_or_default();
            let coords: Vec<usize> = mesh.axes().map(|a| mesh.coord(rank, a)).collect();
            super::chunk::extent(n, &axes, mesh, &coords)
        })
        .collect()
}

/// One transfer of a pipeline send/recv: `src` sends `dst` the region `region`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transfer {
    pub src: u32,
    pub dst: u32,
    pub region: Vec<Span>,
}

/// The Resharder's pairing for a tensor of `shape` moving from `src` (laid out `src_layout`)
/// to `dst` (laid out `dst_layout`): for each destination rank in mesh order, each source
/// block that intersects the destination's block comes from one of the source ranks holding
/// it, the holders taken in turn (replicas share the load). Layouts must not be partial.
pub fn p2p_sources(
    shape: &[usize],
    src: &ProcessMesh,
    src_layout: &Layout,
    dst: &ProcessMesh,
    dst_layout: &Layout,
) -> Vec<Transfer> {
    // The distinct source blocks, each with its holders in mesh order.
    let mut blocks: Vec<(Vec<Span>, Vec<u32>)> = Vec::new();
    for &r in src.process_ids() {
        let b = block_of(shape, src_layout, src, r);
        match blocks.iter_mut().find(|(blk, _)| *blk == b) {
            Some((_, holders)) => holders.push(r),
            None => blocks.push((b, vec![r])),
        }
    }
    let mut used = vec![0usize; blocks.len()];
    let mut out = Vec::new();
    for &d in dst.process_ids() {
        let want = block_of(shape, dst_layout, dst, d);
        for (i, (blk, holders)) in blocks.iter().enumerate() {
            let region: Option<Vec<Span>> = want
                .iter()
                .zip(blk)
                .map(|(&(a0, a1), &(b0, b1))| {
                    let (lo, hi) = (a0.max(b0), a1.min(b1));
                    (lo < hi || (a0 == a1 && b0 == b1)).then_some((lo, hi))
                })
                .collect();
            if let Some(region) = region {
                let src_rank = holders[used[i] % holders.len()];
                used[i] += 1;
                out.push(Transfer {
                    src: src_rank,
                    dst: d,
                    region,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::DimAxes;

    fn mesh(shape: &[usize], ids: &[u32], names: &[&str]) -> ProcessMesh {
        ProcessMesh::new(
            shape.to_vec(),
            ids.to_vec(),
            names.iter().map(|s| s.to_string()).collect(),
        )
        .unwrap()
    }

    #[test]
    fn stages_are_the_pp_sub_meshes() {
        let m = ProcessMesh::with_names(&[2, 2, 2], &["pp", "dp", "mp"]).unwrap();
        let s = Stages::of(&m, 2);
        assert_eq!((s.stages, s.chunks, s.virtual_count()), (2, 2, 4));
        assert_eq!(s.ranks_of(&m, 1), vec![4, 5, 6, 7]);
        assert_eq!(s.peer(&m, 1, 1), Some(5));
        assert_eq!(s.split(3), (1, 1));
        let sub = s.stage_mesh(&m, 1).unwrap();
        assert_eq!(sub.shape(), &[2, 2]);
        assert_eq!(sub.process_ids(), &[4, 5, 6, 7]);
        assert!(!Stages::of(&ProcessMesh::from_shape(&[4]).unwrap(), 1).is_pipelined());
    }

    #[test]
    fn corresponding_rank_matches_coordinates_or_falls_back_to_the_first() {
        let s0 = mesh(&[2], &[0, 1], &["dp"]);
        let s1 = mesh(&[2], &[2, 3], &["dp"]);
        let wide = mesh(&[4], &[4, 5, 6, 7], &["dp"]);
        let meshes = [&s0, &s1, &wide];
        assert_eq!(corresponding_rank(&meshes, &s1, 1), 3);
        assert_eq!(corresponding_rank(&meshes, &s0, 2), 0);
        // Unequal shapes: no mesh of the target's shape holds rank 1, so the seed returns
        // the target's first rank.
        assert_eq!(corresponding_rank(&meshes, &wide, 1), 4);
        assert_eq!(corresponding_rank(&meshes, &s0, 6), 0);
    }

    /// The seed computes a gradient-sync group on the op's stage mesh, mapping a rank that
    /// is not in it with `_get_corresponding_rank`; the partitioner takes the group along
    /// `dp` on the job mesh at the peer's coordinates. The two agree for every rank and
    /// every stage.
    #[test]
    fn sync_groups_match_the_seeds_corresponding_rank_path() {
        let job = ProcessMesh::with_names(&[2, 2, 2], &["pp", "dp", "mp"]).unwrap();
        let s = Stages::of(&job, 1);
        let subs: Vec<ProcessMesh> = (0..2).map(|k| s.stage_mesh(&job, k).unwrap()).collect();
        let refs: Vec<&ProcessMesh> = subs.iter().collect();
        let dp_job = job.axis_by_name("dp").unwrap();
        for &rank in job.process_ids() {
            for (k, sub) in subs.iter().enumerate() {
                let mapped = corresponding_rank(&refs, sub, rank);
                let seed = sub.group_of(mapped, &[sub.axis_by_name("dp").unwrap()]);
                let peer = s.peer(&job, rank, k).unwrap();
                let ours = job.group_of(peer, &[dp_job]);
                assert_eq!(seed, ours, "rank {rank}, stage {k}");
            }
        }
    }

    #[test]
    fn equal_stage_meshes_pair_equal_coordinates() {
        let src = mesh(&[2, 2], &[0, 1, 2, 3], &["dp", "mp"]);
        let dst = mesh(&[2, 2], &[4, 5, 6, 7], &["dp", "mp"]);
        let l = Layout::from_dims(vec![
            DimAxes::one(MeshAxis::new(0).unwrap()),
            DimAxes::WHOLE,
        ]);
        let t = p2p_sources(&[8, 4], &src, &l, &dst, &l);
        let pairs: Vec<(u32, u32)> = t.iter().map(|t| (t.src, t.dst)).collect();
        assert_eq!(pairs, vec![(0, 4), (1, 5), (2, 6), (3, 7)]);
    }

    #[test]
    fn unequal_stage_meshes_split_and_rotate() {
        // Batch split in two on the source, in four on the destination: each source half
        // feeds two destination quarters.
        let src = mesh(&[2], &[0, 1], &["dp"]);
        let dst = mesh(&[4], &[2, 3, 4, 5], &["dp"]);
        let split = Layout::from_dims(vec![
            DimAxes::one(MeshAxis::new(0).unwrap()),
            DimAxes::WHOLE,
        ]);
        let t = p2p_sources(&[8, 4], &src, &split, &dst, &split);
        let got: Vec<(u32, u32, Span)> = t.iter().map(|t| (t.src, t.dst, t.region[0])).collect();
        assert_eq!(
            got,
            vec![
                (0, 2, (0, 2)),
                (0, 3, (2, 4)),
                (1, 4, (4, 6)),
                (1, 5, (6, 8))
            ]
        );
        // Replicated on two ranks, wanted whole on four: the two holders take turns.
        let whole = Layout::replicated(2);
        let t = p2p_sources(&[8, 4], &src, &whole, &dst, &whole);
        let srcs: Vec<u32> = t.iter().map(|t| t.src).collect();
        assert_eq!(srcs, vec![0, 1, 0, 1]);
        assert!(t.iter().all(|t| t.region == vec![(0, 8), (0, 4)]));
    }
}
