//! Distributed attributes: how a tensor is laid out on a mesh (`TensorDistAttr`) and what
//! an operator wants of its inputs and outputs (`OperatorDistAttr`).

use super::layout::{Layout, MeshAxis, MAX_MESH_NDIM};
use super::mesh::ProcessMesh;
use super::mesh_table::MeshId;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use std::fmt;
use std::ops::{Deref, DerefMut};

/// How partial values combine into the true tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ReduceType {
    Sum,
    Avg,
    Max,
    Min,
    Prod,
}

impl ReduceType {
    /// All reduce types.
    pub const ALL: [ReduceType; 5] = [
        ReduceType::Sum,
        ReduceType::Avg,
        ReduceType::Max,
        ReduceType::Min,
        ReduceType::Prod,
    ];

    /// Paddle's name (`SUM`, `AVG`, ...).
    pub fn name(self) -> &'static str {
        match self {
            ReduceType::Sum => "SUM",
            ReduceType::Avg => "AVG",
            ReduceType::Max => "MAX",
            ReduceType::Min => "MIN",
            ReduceType::Prod => "PROD",
        }
    }

    /// Parses Paddle's name, case-insensitively.
    pub fn from_name(name: &str) -> Option<ReduceType> {
        ReduceType::ALL
            .into_iter()
            .find(|r| r.name().eq_ignore_ascii_case(name))
    }
}

impl fmt::Display for ReduceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a dist attr does not fit its tensor or mesh.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DistAttrError {
    #[error("`{tensor}` is annotated on a mesh the plan does not have")]
    NoSuchMesh { tensor: String },
    #[error("dims mapping entry {entry} (dim {dim}) is neither -1 nor a mesh axis")]
    BadMapping { dim: usize, entry: i64 },
    #[error("`{tensor}` has rank {rank} but its dims mapping has {mapping} entries")]
    RankMismatch {
        tensor: String,
        rank: usize,
        mapping: usize,
    },
    #[error("`{tensor}` dim {dim}: mesh axis {axis} does not exist on a mesh with {ndim} axes")]
    NoSuchAxis {
        tensor: String,
        dim: usize,
        axis: usize,
        ndim: usize,
    },
    #[error("`{tensor}`: mesh axis `{axis}` splits more than one dim (dims {first} and {second})")]
    AxisReused {
        tensor: String,
        axis: String,
        first: usize,
        second: usize,
    },
    #[error("`{tensor}`: partial with {first} over `{axis_a}` and {second} over `{axis_b}`; reductions of different types do not commute (a sum of maxima is not a maximum of sums), so one tensor takes one reduce type")]
    MixedReduceTypes {
        tensor: String,
        axis_a: String,
        first: &'static str,
        axis_b: String,
        second: &'static str,
    },
    #[error("`{tensor}`: mesh axis `{axis}` is both partial and splitting dim {dim}")]
    PartialAndSplit {
        tensor: String,
        axis: String,
        dim: usize,
    },
    #[error("`{tensor}` dim {dim} has size {size}, fewer than the {shards} shards `{axes}` cut it into: some rank would hold nothing of it")]
    TooSmall {
        tensor: String,
        dim: usize,
        size: usize,
        axes: String,
        shards: usize,
    },
}

/// A tensor's layout on a mesh of the plan's mesh table, and which dims the user pinned. It
/// dereferences to its [`Layout`], so `attr.dims` and `attr.partial` read the layout.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorDistAttr {
    pub mesh: MeshId,
    pub layout: Layout,
    /// Dims the user annotated; completion never changes them (inline up to rank 8: rank
    /// programs copy every attr).
    pub annotated: SmallVec<[bool; 8]>,
}

/// By copying slices, as [`Layout`]'s clone does (rank programs copy every attr).
impl Clone for TensorDistAttr {
    fn clone(&self) -> TensorDistAttr {
        TensorDistAttr {
            mesh: self.mesh,
            layout: self.layout.clone(),
            annotated: SmallVec::from_slice(&self.annotated),
        }
    }
}

impl Deref for TensorDistAttr {
    type Target = Layout;
    fn deref(&self) -> &Layout {
        &self.layout
    }
}

impl DerefMut for TensorDistAttr {
    fn deref_mut(&mut self) -> &mut Layout {
        &mut self.layout
    }
}

impl TensorDistAttr {
    /// `layout` on `mesh`, nothing annotated.
    pub fn new(mesh: MeshId, layout: Layout) -> TensorDistAttr {
        let rank = layout.rank();
        TensorDistAttr {
            mesh,
            layout,
            annotated: smallvec::smallvec![false; rank],
        }
    }

    /// Fully replicated on `mesh`, nothing annotated.
    pub fn replicated(mesh: MeshId, rank: usize) -> TensorDistAttr {
        TensorDistAttr::new(mesh, Layout::replicated(rank))
    }

    /// From a Paddle `dims_mapping` (`-1` replicated). An entry that is neither -1 nor an
    /// axis a mesh can have is an error; an axis this mesh lacks is rejected by
    /// [`TensorDistAttr::validate`].
    pub fn from_dims_mapping(
        mesh: MeshId,
        mapping: &[i64],
    ) -> Result<TensorDistAttr, DistAttrError> {
        match Layout::from_dims_mapping(mapping) {
            Some(layout) => Ok(TensorDistAttr::new(mesh, layout)),
            None => {
                let (dim, &m) = mapping
                    .iter()
                    .enumerate()
                    .find(|(_, &m)| Layout::from_dims_mapping(&[m]).is_none())
                    .unwrap_or((0, &-2));
                Err(DistAttrError::BadMapping { dim, entry: m })
            }
        }
    }

    /// Marks `axis` partial with `reduce`.
    pub fn set_partial(&mut self, axis: MeshAxis, reduce: ReduceType) {
        self.layout.partial.set(axis, reduce);
    }

    /// The partial mesh axes, by axis.
    pub fn partial_axes(&self) -> Vec<MeshAxis> {
        self.layout.partial.axes().collect()
    }

    /// Product of the sizes of the mesh axes splitting `dim` (on this attr's `mesh`).
    pub fn shards_of_dim(&self, dim: usize, mesh: &ProcessMesh) -> usize {
        self.dims
            .get(dim)
            .map_or(1, |axes| axes.iter().map(|&a| mesh.axis_size(a)).product())
    }

    /// Checks this attr against a tensor called `tensor` of `shape` on `mesh` (the mesh its
    /// id names): rank, axes in range, each mesh axis used at most once and never both
    /// partial and splitting, even splits.
    pub fn validate(
        &self,
        tensor: &str,
        shape: &[usize],
        mesh: &ProcessMesh,
    ) -> Result<(), DistAttrError> {
        let t = || tensor.to_string();
        if self.dims.len() != shape.len() {
            return Err(DistAttrError::RankMismatch {
                tensor: t(),
                rank: shape.len(),
                mapping: self.dims.len(),
            });
        }
        let ndim = mesh.ndim();
        let mut owner: [Option<usize>; MAX_MESH_NDIM] = [None; MAX_MESH_NDIM];
        for (dim, axes) in self.dims.iter().enumerate() {
            for &axis in axes.iter() {
                if axis.index() >= ndim {
                    return Err(DistAttrError::NoSuchAxis {
                        tensor: t(),
                        dim,
                        axis: axis.index(),
                        ndim,
                    });
                }
                if let Some(first) = owner[axis.index()] {
                    let axis = mesh.axis_name(axis).to_string();
                    return Err(DistAttrError::AxisReused {
                        tensor: t(),
                        axis,
                        first,
                        second: dim,
                    });
                }
                owner[axis.index()] = Some(dim);
            }
        }
        for (axis, _) in self.partial.iter() {
            if axis.index() >= ndim {
                return Err(DistAttrError::NoSuchAxis {
                    tensor: t(),
                    dim: usize::MAX,
                    axis: axis.index(),
                    ndim,
                });
            }
            if let Some(dim) = owner[axis.index()] {
                return Err(DistAttrError::PartialAndSplit {
                    tensor: t(),
                    axis: mesh.axis_name(axis).to_string(),
                    dim,
                });
            }
        }
        if let (Some((a, ra)), Some((b, rb))) = (
            self.partial.first(),
            self.partial
                .iter()
                .find(|p| Some(p.1) != self.partial.first().map(|f| f.1)),
        ) {
            return Err(DistAttrError::MixedReduceTypes {
                tensor: t(),
                axis_a: mesh.axis_name(a).to_string(),
                first: ra.name(),
                axis_b: mesh.axis_name(b).to_string(),
                second: rb.name(),
            });
        }
        local_shape(tensor, shape, self, mesh).map(|_| ())
    }
}

/// The shape of the largest block (the first rank's): each global dim cut by the mesh
/// axes that split it, shard 0 of each chunking (see [`super::chunk`]; Paddle's
/// `_get_dist_shape` when the axes divide the dim). A dim with fewer elements than its axes
/// have shards is an error naming the tensor, the dim and the axes: no semantics gives
/// every rank of such a split something to hold.
pub fn local_shape(
    tensor: &str,
    shape: &[usize],
    attr: &Layout,
    mesh: &ProcessMesh,
) -> Result<smallvec::SmallVec<[usize; 4]>, DistAttrError> {
    local_shape_at(tensor, shape, attr, mesh, &[])
}

/// The shape of the block held at mesh coordinates `coords` (missing coordinates are 0):
/// uneven dims give the trailing ranks shorter or empty blocks.
pub fn local_shape_at(
    tensor: &str,
    shape: &[usize],
    attr: &Layout,
    mesh: &ProcessMesh,
    coords: &[usize],
) -> Result<smallvec::SmallVec<[usize; 4]>, DistAttrError> {
    if attr.dims.len() != shape.len() {
        return Err(DistAttrError::RankMismatch {
            tensor: tensor.to_string(),
            rank: shape.len(),
            mapping: attr.dims.len(),
        });
    }
    shape
        .iter()
        .zip(&attr.dims)
        .enumerate()
        .map(|(dim, (&size, axes))| {
            let shards: usize = axes.iter().map(|&a| mesh.axis_size(a)).product();
            if size < shards {
                return Err(DistAttrError::TooSmall {
                    tensor: tensor.to_string(),
                    dim,
                    size,
                    axes: axes
                        .iter()
                        .map(|&a| mesh.axis_name(a))
                        .collect::<Vec<_>>()
                        .join("+"),
                    shards,
                });
            }
            let (start, end) = super::chunk::extent(size, axes, mesh, coords);
            Ok(end - start)
        })
        .collect()
}

/// The attrs of one slot's variables: inline for one (most slots hold one; every op of
/// every planning has an attr per slot, and their allocations were a tenth of the
/// auto-planner's allocations).
pub type SlotAttrs = SmallVec<[TensorDistAttr; 1]>;

/// What an operator wants: a dist attr per variable of each input and output slot, and the
/// distributed implementation chosen for it, plus its pipeline chunk.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorDistAttr {
    pub mesh: MeshId,
    pub inputs: Vec<SlotAttrs>,
    pub outputs: Vec<SlotAttrs>,
    pub imp: super::DistImpl,
    pub chunk_id: usize,
}

impl OperatorDistAttr {
    /// An op attr on `mesh` with no slot attrs yet and the default implementation.
    pub fn new(mesh: MeshId) -> OperatorDistAttr {
        OperatorDistAttr {
            mesh,
            inputs: Vec::new(),
            outputs: Vec::new(),
            imp: super::DistImpl::Default,
            chunk_id: 0,
        }
    }
}
