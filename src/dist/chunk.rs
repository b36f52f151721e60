//! Uneven shards, as `torch.chunk` and DTensor cut them: a dim of `n` elements split `k`
//! ways gives shard `i` the elements `[i·c, min((i+1)·c, n))` with `c = ⌈n/k⌉`, so the
//! leading shards are full and the trailing ones shorter or empty (6 rows on 4 ranks:
//! 2, 2, 2, 0). A dim split over several mesh axes is cut axis by axis, each axis chunking
//! the piece the axes before it left (DTensor's order), which keeps a later slice or
//! gather of the innermost axis local to the piece a rank already holds.
//!
//! Why this rule and not Paddle's: the real elements of every shard, padded to `c` and
//! concatenated, are the tensor followed by padding, so an all-gather of padded shards is
//! unpadded by one slice `[0, n)`. Paddle's R→S spreads the remainder (2, 2, 1, 1;
//! PaddlePaddle issue #56149), where the padding falls between shards; its P→S already
//! uses the ceiling (#62611). `docs/uneven.md` compares them.
//!
//! When `k` divides `n` every shard has `n/k` elements and shard `i` starts at `i·n/k`,
//! Paddle's `_get_dist_shape` exactly.

use super::{DimAxes, ProcessMesh};

/// Half-open range of indices along one dim.
pub type Extent = (usize, usize);

/// The largest shard of `n` elements split `k` ways: `⌈n/k⌉` (the padded length).
pub fn chunk_max(n: usize, k: usize) -> usize {
    n.div_ceil(k.max(1))
}

/// Shard `i` of `n` elements split `k` ways, as a range of `[0, n)`.
pub fn chunk(n: usize, k: usize, i: usize) -> Extent {
    let c = chunk_max(n, k);
    let start = (i * c).min(n);
    (start, ((i + 1) * c).min(n))
}

/// The range of a dim of `n` elements held at mesh coordinates `coords` when `axes` split
/// it (outermost first): each axis chunks the range the ones before it left.
pub fn extent(n: usize, axes: &DimAxes, mesh: &ProcessMesh, coords: &[usize]) -> Extent {
    let (mut start, mut len) = (0, n);
    for &a in axes.iter() {
        let (s, e) = chunk(
            len,
            mesh.axis_size(a),
            coords.get(a.index()).copied().unwrap_or(0),
        );
        start += s;
        len = e - s;
    }
    (start, start + len)
}

/// Whether `axes` split a dim of `n` elements into equal shards (no padding anywhere).
pub fn even(n: usize, axes: &DimAxes, mesh: &ProcessMesh) -> bool {
    let k: usize = axes.iter().map(|&a| mesh.axis_size(a)).product();
    n.is_multiple_of(k.max(1))
}

/// Whether a tensor of `shape` laid out with `dims` (each dim's axes) is split unevenly
/// anywhere: its local shape then depends on the rank.
pub fn splits_unevenly(shape: &[usize], dims: &[DimAxes], mesh: &ProcessMesh) -> bool {
    shape
        .iter()
        .zip(dims)
        .any(|(&n, axes)| !even(n, axes, mesh))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_full_then_short_then_empty() {
        let pieces: Vec<usize> = (0..4).map(|i| chunk(6, 4, i)).map(|(s, e)| e - s).collect();
        assert_eq!(pieces, [2, 2, 2, 0]);
        let pieces: Vec<usize> = (0..8)
            .map(|i| chunk(50257, 8, i))
            .map(|(s, e)| e - s)
            .collect();
        assert_eq!(pieces, [6283, 6283, 6283, 6283, 6283, 6283, 6283, 6276]);
        assert_eq!(chunk(10, 4, 3), (9, 10));
    }

    #[test]
    fn nested_axes_chunk_the_outer_piece() {
        let mesh =
            ProcessMesh::new(vec![2, 2], (0..4).collect(), vec!["a".into(), "b".into()]).unwrap();
        let axes = DimAxes::from_axes((0..2).filter_map(super::super::MeshAxis::new)).unwrap();
        // 10 → a: [0,5) [5,10) → b: [0,3) [3,5) | [5,8) [8,10)
        let got: Vec<Extent> = [[0, 0], [0, 1], [1, 0], [1, 1]]
            .iter()
            .map(|c| extent(10, &axes, &mesh, c))
            .collect();
        assert_eq!(got, [(0, 3), (3, 5), (5, 8), (8, 10)]);
        assert!(!even(10, &axes, &mesh));
        assert!(even(12, &axes, &mesh));
    }
}
