//! Rank classes: under SPMD, ranks with one role run one program up to the numbers of their
//! groups, so they share one cost. A mesh of 16,384 ranks has as many classes as pipeline
//! stages (times context-parallel positions): the cost model plans and simulates one rank
//! of each, the rank at coordinate 0 on every other axis, and its collectives complete
//! when that rank arrives (the absent members arrive at the same moment by symmetry; the
//! simulator completes a group when its present members have arrived).
//!
//! Which ranks differ in work:
//! - the pipeline axis (`pp`): each stage holds other layers;
//! - the context-parallel axis (`cp`): ring attention without zig-zag gives the last rank
//!   about twice the causal blocks of the first, so every position is priced.
//!
//! Every other axis splits work evenly or, for an uneven dimension, as `torch.chunk` does:
//! shard 0 holds `ceil(n/k)` elements, the most of any, so coordinate 0 is the class's
//! slowest and largest member, and the class's price is its worst case.

use crate::dist::ProcessMesh;

/// Up to this many ranks (eight 8-GPU nodes) `cost` prices every rank and prints every
/// rank's row; above it, rank classes, whose table a reader can still take in. Pricing
/// every rank of a 175B model on 384 GPUs took 19 s and 4.4 GB; its classes, 0.4 s.
pub const PRICE_EVERY_RANK_UP_TO: usize = 64;

/// The axes whose positions differ in work (see the module doc).
const CLASS_AXES: [&str; 2] = [crate::dist::pipeline::PP_AXIS, "cp"];

/// The ranks `cost` partitions and simulates for `mesh`: every rank up to
/// [`PRICE_EVERY_RANK_UP_TO`] (`None`), else one per class, in rank order.
pub fn representatives(mesh: &ProcessMesh) -> Option<Vec<u32>> {
    if mesh.size() <= PRICE_EVERY_RANK_UP_TO {
        return None;
    }
    let keep: Vec<bool> = mesh
        .dim_names()
        .iter()
        .map(|n| CLASS_AXES.contains(&n.as_str()))
        .collect();
    let reps = mesh
        .process_ids()
        .iter()
        .copied()
        .filter(|&r| {
            mesh.coords_of(r).is_some_and(|c| {
                c.iter()
                    .zip(&keep)
                    .all(|(&coord, &kept)| kept || coord == 0)
            })
        })
        .collect();
    Some(reps)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mesh(shape: &[usize], names: &[&str]) -> ProcessMesh {
        let n: usize = shape.iter().product();
        ProcessMesh::new(
            shape.to_vec(),
            (0..n as u32).collect(),
            names.iter().map(|s| s.to_string()).collect(),
        )
        .unwrap()
    }

    #[test]
    fn one_rank_per_stage_and_context_position() {
        let m = mesh(&[16, 128, 8], &["pp", "dp", "tp"]);
        let reps = representatives(&m).unwrap();
        assert_eq!(reps.len(), 16);
        assert_eq!(&reps[..3], &[0, 1024, 2048]);
        let m = mesh(&[16, 8, 16, 8], &["pp", "dp", "cp", "tp"]);
        let reps = representatives(&m).unwrap();
        assert_eq!(reps.len(), 256);
        assert_eq!(&reps[..3], &[0, 8, 16]);
        assert!(representatives(&mesh(&[4, 16], &["pp", "dp"])).is_none());
        assert!(representatives(&mesh(&[4, 32], &["pp", "dp"])).is_some());
    }
}
