//! How a tensor is laid out on a mesh, as one small value: for each tensor dim the mesh axes
//! that split it (outermost first; none = replicated, two or more = co-sharded), and the mesh
//! axes over which each rank holds a partial value with their reduce types.
//!
//! `Layout` is the one form of a layout in the crate: the SPMD rules read and return it, the
//! completion trace records it, the reshard cache keys on it, and a `TensorDistAttr` is a
//! `Layout` on a mesh. Paddle's `dims_mapping` (`Vec<i64>`) exists only at the boundary
//! (`Layout::from_dims_mapping`, `Layout::dims_mapping`).
//!
//! Everything per dim is `Copy` and inline: a mesh has at most [`MAX_MESH_NDIM`] axes, so a
//! dim's axes fit in 13 bytes and the partial status in 12; a layout of rank ≤ 4 allocates
//! nothing.

use super::attr::ReduceType;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use smallvec::SmallVec;
use std::fmt;
use std::ops::Deref;

/// The most axes a mesh may have: a mesh holds at most 4,096 = 2^12 processes
/// (`MAX_MESH_SIZE`), so 12 axes of size 2 is the most that are not size 1.
pub const MAX_MESH_NDIM: usize = 12;

/// One axis of a mesh (an index into its shape), typed so it is never confused with a
/// tensor dim.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MeshAxis(u8);

impl MeshAxis {
    /// Axis `i`, if a mesh can have it.
    pub fn new(i: usize) -> Option<MeshAxis> {
        (i < MAX_MESH_NDIM).then_some(MeshAxis(i as u8))
    }

    /// The axes of an `ndim`-axis mesh, in order.
    pub fn all(ndim: usize) -> impl Iterator<Item = MeshAxis> {
        (0..ndim.min(MAX_MESH_NDIM)).map(|i| MeshAxis(i as u8))
    }

    /// The axis' position in the mesh shape.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Debug for MeshAxis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for MeshAxis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl Serialize for MeshAxis {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u8(self.0)
    }
}

impl<'de> Deserialize<'de> for MeshAxis {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<MeshAxis, D::Error> {
        let i = u8::deserialize(d)?;
        MeshAxis::new(i as usize)
            .ok_or_else(|| serde::de::Error::custom(format!("mesh axis {i} out of range")))
    }
}

/// The mesh axes splitting one tensor dim, outermost first. Empty: the dim is whole.
/// Invariant: the slots past `len` hold axis 0, so derived equality and hashing compare
/// only the axes (every mutation keeps it; `equal_axes_are_equal_values` tests it).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DimAxes {
    len: u8,
    axes: [MeshAxis; MAX_MESH_NDIM],
}

impl DimAxes {
    /// No axis: the dim is whole.
    pub const WHOLE: DimAxes = DimAxes {
        len: 0,
        axes: [MeshAxis(0); MAX_MESH_NDIM],
    };

    /// Split by one axis.
    pub fn one(axis: MeshAxis) -> DimAxes {
        let mut d = DimAxes::WHOLE;
        d.push(axis);
        d
    }

    /// Split by `axes`, outermost first; `None` if there are more than a mesh can have.
    pub fn from_axes(axes: impl IntoIterator<Item = MeshAxis>) -> Option<DimAxes> {
        let mut d = DimAxes::WHOLE;
        for a in axes {
            if !d.push(a) {
                return None;
            }
        }
        Some(d)
    }

    /// Appends `axis` as the innermost; false if the dim already has the most axes a mesh
    /// can have.
    pub fn push(&mut self, axis: MeshAxis) -> bool {
        match self.axes.get_mut(self.len as usize) {
            Some(slot) => {
                *slot = axis;
                self.len += 1;
                true
            }
            None => false,
        }
    }

    /// Removes and returns the innermost axis.
    pub fn pop(&mut self) -> Option<MeshAxis> {
        let last = self.last().copied()?;
        self.len -= 1;
        // Slots past `len` stay zero, so the derived equality and hash see only the axes.
        self.axes[self.len as usize] = MeshAxis(0);
        Some(last)
    }

    /// Keeps the axes for which `keep` holds.
    pub fn retain(&mut self, mut keep: impl FnMut(MeshAxis) -> bool) {
        let mut out = DimAxes::WHOLE;
        for &a in self.iter() {
            if keep(a) {
                out.push(a);
            }
        }
        *self = out;
    }

    /// The axes, outermost first.
    pub fn as_slice(&self) -> &[MeshAxis] {
        self
    }

    /// Removes every axis.
    pub fn clear(&mut self) {
        *self = DimAxes::WHOLE;
    }
}

impl Deref for DimAxes {
    type Target = [MeshAxis];
    fn deref(&self) -> &[MeshAxis] {
        &self.axes[..self.len as usize]
    }
}

impl fmt::Debug for DimAxes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a> IntoIterator for &'a DimAxes {
    type Item = &'a MeshAxis;
    type IntoIter = std::slice::Iter<'a, MeshAxis>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl Serialize for DimAxes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for DimAxes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<DimAxes, D::Error> {
        let axes = Vec::<MeshAxis>::deserialize(d)?;
        DimAxes::from_axes(axes)
            .ok_or_else(|| serde::de::Error::custom("a dim is split by too many mesh axes"))
    }
}

/// The mesh axes over which each rank holds a partial value, each with its reduce type.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Partial {
    reduce: [Option<ReduceType>; MAX_MESH_NDIM],
}

impl Partial {
    /// Not partial.
    pub const NONE: Partial = Partial {
        reduce: [None; MAX_MESH_NDIM],
    };

    /// Whether no axis is partial.
    pub fn is_empty(&self) -> bool {
        self.reduce.iter().all(Option::is_none)
    }

    /// How many axes are partial.
    pub fn len(&self) -> usize {
        self.reduce.iter().filter(|r| r.is_some()).count()
    }

    /// The partial axes and their reduce types, by axis.
    pub fn iter(&self) -> impl Iterator<Item = (MeshAxis, ReduceType)> + '_ {
        self.reduce
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.map(|r| (MeshAxis(i as u8), r)))
    }

    /// The partial axes, by axis.
    pub fn axes(&self) -> impl Iterator<Item = MeshAxis> + '_ {
        self.iter().map(|(a, _)| a)
    }

    /// The reduce type over `axis`, if partial there.
    pub fn get(&self, axis: MeshAxis) -> Option<ReduceType> {
        self.reduce[axis.index()]
    }

    /// Marks `axis` partial with `reduce`.
    pub fn set(&mut self, axis: MeshAxis, reduce: ReduceType) {
        self.reduce[axis.index()] = Some(reduce);
    }

    /// Keeps the partial axes for which `keep` holds.
    pub fn retain(&mut self, mut keep: impl FnMut(MeshAxis, ReduceType) -> bool) {
        for (a, r) in self.to_vec() {
            if !keep(a, r) {
                self.remove(a);
            }
        }
    }

    /// Whether `axis` is partial with `reduce`.
    pub fn contains(&self, &(axis, reduce): &(MeshAxis, ReduceType)) -> bool {
        self.get(axis) == Some(reduce)
    }

    /// Clears `axis`.
    pub fn remove(&mut self, axis: MeshAxis) {
        self.reduce[axis.index()] = None;
    }

    /// The reduce type of the first partial axis.
    pub fn first(&self) -> Option<(MeshAxis, ReduceType)> {
        self.iter().next()
    }

    /// Every partial axis with its type, by axis (for printing and comparisons).
    pub fn to_vec(&self) -> Vec<(MeshAxis, ReduceType)> {
        self.iter().collect()
    }
}

impl FromIterator<(MeshAxis, ReduceType)> for Partial {
    fn from_iter<I: IntoIterator<Item = (MeshAxis, ReduceType)>>(iter: I) -> Partial {
        let mut p = Partial::NONE;
        for (a, r) in iter {
            p.set(a, r);
        }
        p
    }
}

impl fmt::Debug for Partial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Serialize for Partial {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for Partial {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Partial, D::Error> {
        Ok(Vec::<(MeshAxis, ReduceType)>::deserialize(d)?
            .into_iter()
            .collect())
    }
}

/// Per tensor dim its mesh axes (inline up to rank 4).
pub type Dims = SmallVec<[DimAxes; 4]>;

/// How one tensor is laid out: per dim the splitting mesh axes, and the partial axes.
#[derive(PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Layout {
    pub dims: Dims,
    pub partial: Partial,
}

/// By copying the dims' slice: smallvec's derived clone collects element by element, and
/// the planner clones every variable's layout per rank (a twentieth of the auto-planner's
/// instructions went to it).
impl Clone for Layout {
    fn clone(&self) -> Layout {
        Layout {
            dims: Dims::from_slice(&self.dims),
            partial: self.partial,
        }
    }
}

impl Layout {
    /// Whole on every rank: `rank` dims, none split, not partial.
    pub fn replicated(rank: usize) -> Layout {
        Layout {
            dims: smallvec::smallvec![DimAxes::WHOLE; rank],
            partial: Partial::NONE,
        }
    }

    /// Not partial, with these dims.
    pub fn from_dims(dims: impl IntoIterator<Item = DimAxes>) -> Layout {
        Layout {
            dims: dims.into_iter().collect(),
            partial: Partial::NONE,
        }
    }

    /// From per-dim lists of axis indices; `None` if an index is not a mesh axis a mesh
    /// can have or a dim has too many.
    pub fn from_axis_lists(dims: &[Vec<usize>]) -> Option<Layout> {
        let dims = dims
            .iter()
            .map(|d| {
                DimAxes::from_axes(
                    d.iter()
                        .map(|&a| MeshAxis::new(a))
                        .collect::<Option<Vec<_>>>()?,
                )
            })
            .collect::<Option<Dims>>()?;
        Some(Layout {
            dims,
            partial: Partial::NONE,
        })
    }

    /// From Paddle's `dims_mapping` (`-1` whole); `None` for an entry that is not -1 or an
    /// axis a mesh can have.
    pub fn from_dims_mapping(mapping: &[i64]) -> Option<Layout> {
        let dims = mapping
            .iter()
            .map(|&m| match m {
                -1 => Some(DimAxes::WHOLE),
                m => usize::try_from(m)
                    .ok()
                    .and_then(MeshAxis::new)
                    .map(DimAxes::one),
            })
            .collect::<Option<Dims>>()?;
        Some(Layout {
            dims,
            partial: Partial::NONE,
        })
    }

    /// Paddle's `dims_mapping`, with a co-sharded dim shown by its outermost axis.
    pub fn dims_mapping(&self) -> Vec<i64> {
        self.dims
            .iter()
            .map(|d| d.first().map_or(-1, |a| a.index() as i64))
            .collect()
    }

    /// Per-dim axis indices (for printing and tests).
    pub fn axis_lists(&self) -> Vec<Vec<usize>> {
        self.dims
            .iter()
            .map(|d| d.iter().map(|a| a.index()).collect())
            .collect()
    }

    /// The tensor's rank.
    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    /// Whether any rank holds a partial value.
    pub fn is_partial(&self) -> bool {
        !self.partial.is_empty()
    }

    /// The same layout, not partial.
    pub fn settled(&self) -> Layout {
        Layout {
            dims: self.dims.clone(),
            partial: Partial::NONE,
        }
    }

    /// The dim `axis` splits, if any.
    pub fn dim_of(&self, axis: MeshAxis) -> Option<usize> {
        self.dims.iter().position(|d| d.contains(&axis))
    }
}

impl fmt::Debug for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.dims.as_slice())?;
        if self.is_partial() {
            write!(f, " partial{:?}", self.partial)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ax(i: usize) -> MeshAxis {
        MeshAxis::new(i).unwrap()
    }

    #[test]
    fn dims_mapping_round_trips_at_the_boundary() {
        let l = Layout::from_dims_mapping(&[0, -1, 1]).unwrap();
        assert_eq!(l.dims_mapping(), vec![0, -1, 1]);
        assert_eq!(l.axis_lists(), vec![vec![0], vec![], vec![1]]);
        assert!(Layout::from_dims_mapping(&[MAX_MESH_NDIM as i64]).is_none());
        assert!(Layout::from_dims_mapping(&[-2]).is_none());
    }

    #[test]
    fn co_shards_keep_their_order_and_partial_keeps_types() {
        let d = DimAxes::from_axes([ax(1), ax(0)]).unwrap();
        assert_eq!(d.iter().map(|a| a.index()).collect::<Vec<_>>(), vec![1, 0]);
        assert!(DimAxes::from_axes((0..=MAX_MESH_NDIM).map(|_| ax(0))).is_none());
        let mut p = Partial::NONE;
        p.set(ax(2), ReduceType::Max);
        p.set(ax(0), ReduceType::Sum);
        assert_eq!(
            p.to_vec(),
            vec![(ax(0), ReduceType::Sum), (ax(2), ReduceType::Max)]
        );
        assert_eq!(p.len(), 2);
        p.remove(ax(0));
        assert_eq!(p.first(), Some((ax(2), ReduceType::Max)));
    }

    #[test]
    fn equal_axes_are_equal_values() {
        let mut d = DimAxes::from_axes([ax(3), ax(1)]).unwrap();
        d.pop();
        assert_eq!(d, DimAxes::one(ax(3)));
        d.pop();
        assert_eq!(d, DimAxes::WHOLE);
        let mut e = DimAxes::from_axes([ax(2), ax(5)]).unwrap();
        e.retain(|a| a == ax(5));
        assert_eq!(e, DimAxes::one(ax(5)));
        let hash = |d: &DimAxes| {
            use std::hash::{BuildHasher, BuildHasherDefault};
            BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default().hash_one(d)
        };
        assert_eq!(hash(&d), hash(&DimAxes::WHOLE));
    }

    #[test]
    fn small_and_cheap() {
        assert!(std::mem::size_of::<DimAxes>() <= MAX_MESH_NDIM + 1);
        assert!(std::mem::size_of::<Partial>() <= MAX_MESH_NDIM);
        let l = Layout::replicated(4);
        assert!(!l.dims.spilled(), "rank 4 stays inline");
    }
}
