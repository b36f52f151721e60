//! A tensor as tiles: which block of the global tensor each device holds, which devices hold
//! identical copies, and which hold different partial addends of the same block. The
//! playground draws this picture; it is computed here so it is tested natively and cannot
//! disagree with the layout it draws.

use super::attr::ReduceType;
use super::layout::{Layout, MeshAxis};
use super::mesh::ProcessMesh;

/// One block of the global tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tile {
    /// The block's coordinate along each tensor dim (0 ≤ index < splits).
    pub index: Vec<usize>,
    /// The global element range `[start, end)` it covers along each dim.
    pub ranges: Vec<(usize, usize)>,
    /// Devices holding the block: one list per partial addend (one list when the tensor is
    /// not partial), the devices of a list holding bit-identical copies. Ordered by the
    /// partial axes' coordinates, devices ascending within a list.
    pub addends: Vec<Vec<u32>>,
}

/// Every block of a tensor on a mesh.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tiling {
    /// Blocks along each tensor dim (the product of the sizes of the axes splitting it).
    pub splits: Vec<usize>,
    /// Blocks in row-major order of `index`.
    pub tiles: Vec<Tile>,
    /// Identical copies of each addend (devices on axes that neither split nor sum it).
    pub replicas: usize,
    /// The axes the value is a partial reduction over.
    pub partial: Vec<(MeshAxis, ReduceType)>,
}

impl Tiling {
    /// Partial addends per block (1 when the tensor is not partial).
    pub fn addends(&self) -> usize {
        self.tiles.first().map_or(1, |t| t.addends.len())
    }

    /// The tile a device holds.
    pub fn tile_of(&self, device: u32) -> Option<&Tile> {
        self.tiles
            .iter()
            .find(|t| t.addends.iter().any(|a| a.contains(&device)))
    }
}

/// The tiles of a tensor of `shape` laid out as `layout` on `mesh`. Uneven splits are cut
/// as `torch.chunk` does (`super::chunk`): the trailing blocks are short or empty.
/// Devices the mesh does not hold (a layout naming axes past the mesh) are ignored.
pub fn tiling(layout: &Layout, shape: &[usize], mesh: &ProcessMesh) -> Tiling {
    let axes_of = |d: usize| layout.dims.get(d).map_or(&[][..], |a| a.as_slice());
    let valid = |a: &MeshAxis| a.index() < mesh.ndim();
    let splits: Vec<usize> = (0..shape.len())
        .map(|d| {
            axes_of(d)
                .iter()
                .filter(|a| valid(a))
                .map(|&a| mesh.axis_size(a))
                .product::<usize>()
                .max(1)
        })
        .collect();
    let partial: Vec<(MeshAxis, ReduceType)> =
        layout.partial.iter().filter(|(a, _)| valid(a)).collect();
    let n_addends: usize = partial.iter().map(|&(a, _)| mesh.axis_size(a)).product();
    let n_blocks: usize = splits.iter().product();
    let mut tiles: Vec<Tile> = (0..n_blocks)
        .map(|flat| {
            let index = unflatten(flat, &splits);
            let ranges = index
                .iter()
                .zip(shape)
                .enumerate()
                .map(|(d, (&i, &size))| {
                    // The block index's digits are the coordinates on the dim's axes.
                    let axes: Vec<MeshAxis> = axes_of(d).iter().copied().filter(valid).collect();
                    let mut coords = vec![0; mesh.ndim()];
                    let mut rest = i;
                    for &a in axes.iter().rev() {
                        coords[a.index()] = rest % mesh.axis_size(a);
                        rest /= mesh.axis_size(a);
                    }
                    let axes = super::DimAxes::from_axes(axes).unwrap_or_default();
                    super::chunk::extent(size, &axes, mesh, &coords)
                })
                .collect();
            Tile {
                index,
                ranges,
                addends: vec![Vec::new(); n_addends.max(1)],
            }
        })
        .collect();
    for &pid in mesh.process_ids() {
        let Some(coords) = mesh.coords_of(pid) else {
            continue;
        };
        let fold = |axes: &mut dyn Iterator<Item = MeshAxis>| {
            axes.fold(0, |acc, a| acc * mesh.axis_size(a) + coords[a.index()])
        };
        let index: Vec<usize> = (0..shape.len())
            .map(|d| fold(&mut axes_of(d).iter().copied().filter(valid)))
            .collect();
        let addend = fold(&mut partial.iter().map(|&(a, _)| a));
        let flat = index
            .iter()
            .zip(&splits)
            .fold(0, |acc, (&i, &n)| acc * n + i);
        if let Some(slot) = tiles.get_mut(flat).and_then(|t| t.addends.get_mut(addend)) {
            slot.push(pid);
        }
    }
    tiles
        .iter_mut()
        .flat_map(|t| t.addends.iter_mut())
        .for_each(|a| a.sort_unstable());
    let replicas = tiles
        .first()
        .and_then(|t| t.addends.first())
        .map_or(1, Vec::len)
        .max(1);
    Tiling {
        splits,
        tiles,
        replicas,
        partial,
    }
}

fn unflatten(mut flat: usize, splits: &[usize]) -> Vec<usize> {
    let mut index = vec![0; splits.len()];
    for (slot, &n) in index.iter_mut().zip(splits).rev() {
        *slot = flat % n;
        flat /= n;
    }
    index
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mesh(shape: &[usize], names: &[&str]) -> ProcessMesh {
        ProcessMesh::with_names(shape, names).expect("mesh")
    }

    #[test]
    fn column_split_on_2x4_has_four_blocks_of_two_replicas() {
        let m = mesh(&[2, 4], &["dp", "mp"]);
        let layout = Layout::from_dims_mapping(&[-1, 1]).expect("layout");
        let t = tiling(&layout, &[64, 256], &m);
        assert_eq!(t.splits, vec![1, 4]);
        assert_eq!(t.replicas, 2);
        assert_eq!(t.tiles.len(), 4);
        assert_eq!(t.tiles[1].ranges, vec![(0, 64), (64, 128)]);
        assert_eq!(t.tiles[1].addends, vec![vec![1, 5]]);
        assert_eq!(t.tile_of(7).map(|t| t.index.clone()), Some(vec![0, 3]));
    }

    #[test]
    fn co_shard_subdivides_major_axis_first() {
        let m = mesh(&[2, 2], &["dp", "mp"]);
        let layout = Layout::from_axis_lists(&[vec![0, 1], vec![]]).expect("layout");
        let t = tiling(&layout, &[8, 3], &m);
        assert_eq!(t.splits, vec![4, 1]);
        let owners: Vec<u32> = t.tiles.iter().map(|t| t.addends[0][0]).collect();
        assert_eq!(owners, vec![0, 1, 2, 3]);
        assert_eq!(t.tiles[3].ranges, vec![(6, 8), (0, 3)]);
    }

    #[test]
    fn partial_sum_gives_one_addend_per_coordinate() {
        let m = mesh(&[2, 4], &["dp", "mp"]);
        let mut layout = Layout::from_dims_mapping(&[0, -1]).expect("layout");
        layout
            .partial
            .set(MeshAxis::new(1).expect("axis"), ReduceType::Sum);
        let t = tiling(&layout, &[4, 4], &m);
        assert_eq!(t.tiles.len(), 2);
        assert_eq!(t.addends(), 4);
        assert_eq!(t.replicas, 1);
        assert_eq!(t.tiles[1].addends, vec![vec![4], vec![5], vec![6], vec![7]]);
    }

    #[test]
    fn uneven_split_keeps_every_element_once() {
        let m = mesh(&[4], &["mp"]);
        let layout = Layout::from_dims_mapping(&[0]).expect("layout");
        let t = tiling(&layout, &[10], &m);
        let covered: usize = t.tiles.iter().map(|t| t.ranges[0].1 - t.ranges[0].0).sum();
        assert_eq!(covered, 10);
        assert_eq!(t.tiles[3].ranges, vec![(9, 10)]);
    }

    #[test]
    fn scalar_is_one_tile_on_every_device() {
        let m = mesh(&[2, 2], &["dp", "mp"]);
        let t = tiling(&Layout::replicated(0), &[], &m);
        assert_eq!(t.tiles.len(), 1);
        assert_eq!(t.tiles[0].addends, vec![vec![0, 1, 2, 3]]);
    }
}
