//! `ProcessMesh`: an n-D array of process ids with named axes, and the communication groups
//! of a rank along some of its axes (Paddle's `_get_comm_group`).

use super::layout::{MeshAxis, MAX_MESH_NDIM};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Why a mesh is invalid.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MeshError {
    #[error("a mesh needs at least one axis")]
    NoAxes,
    #[error("the mesh has {axes} axes; at most {max} are supported")]
    TooManyAxes { axes: usize, max: usize },
    #[error("mesh axis {axis} has size 0; sizes must be at least 1")]
    ZeroSize { axis: usize },
    #[error("mesh shape {shape:?} holds {expected} processes but {got} process ids were given")]
    WrongIdCount {
        shape: Vec<usize>,
        expected: usize,
        got: usize,
    },
    #[error("process id {id} appears twice in the mesh")]
    DuplicateId { id: u32 },
    #[error("the mesh has {axes} axes but {names} axis names were given")]
    WrongNameCount { axes: usize, names: usize },
    #[error("mesh axis name `{name}` is used twice")]
    DuplicateName { name: String },
    #[error("mesh axis name `{name}` is not a valid name (letters, digits, `_`; not starting with a digit)")]
    BadName { name: String },
    #[error("the mesh has {size} processes; at most {max} are supported")]
    TooLarge { size: usize, max: usize },
    #[error("rank {0} is not on the mesh")]
    NoSuchRank(u32),
}

/// The largest mesh we plan for: 16,384 devices, the largest published training runs'
/// (Llama 3 405B). The playground draws up to 8×8×8; the cost model prices a mesh this
/// large by rank classes (`cost::classes`), not rank by rank.
pub const MAX_MESH_SIZE: usize = 16384;

/// An n-D array of process ids with named axes, row-major.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ProcessMesh {
    shape: Vec<usize>,
    process_ids: Vec<u32>,
    dim_names: Vec<String>,
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl ProcessMesh {
    /// A validated mesh: sizes ≥ 1, ids unique and as many as the shape holds, names unique.
    pub fn new(
        shape: Vec<usize>,
        process_ids: Vec<u32>,
        dim_names: Vec<String>,
    ) -> Result<ProcessMesh, MeshError> {
        if shape.is_empty() {
            return Err(MeshError::NoAxes);
        }
        if shape.len() > MAX_MESH_NDIM {
            return Err(MeshError::TooManyAxes {
                axes: shape.len(),
                max: MAX_MESH_NDIM,
            });
        }
        if let Some(axis) = shape.iter().position(|&s| s == 0) {
            return Err(MeshError::ZeroSize { axis });
        }
        let size = shape
            .iter()
            .try_fold(1usize, |acc, &s| acc.checked_mul(s))
            .unwrap_or(usize::MAX);
        if size > MAX_MESH_SIZE {
            return Err(MeshError::TooLarge {
                size,
                max: MAX_MESH_SIZE,
            });
        }
        if process_ids.len() != size {
            return Err(MeshError::WrongIdCount {
                shape,
                expected: size,
                got: process_ids.len(),
            });
        }
        let mut sorted = process_ids.clone();
        sorted.sort_unstable();
        if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
            return Err(MeshError::DuplicateId { id: w[0] });
        }
        if dim_names.len() != shape.len() {
            return Err(MeshError::WrongNameCount {
                axes: shape.len(),
                names: dim_names.len(),
            });
        }
        for (i, n) in dim_names.iter().enumerate() {
            if !valid_name(n) {
                return Err(MeshError::BadName { name: n.clone() });
            }
            if dim_names[..i].contains(n) {
                return Err(MeshError::DuplicateName { name: n.clone() });
            }
        }
        Ok(ProcessMesh {
            shape,
            process_ids,
            dim_names,
        })
    }

    /// A mesh with ids 0..N-1 row-major.
    pub fn with_names(shape: &[usize], names: &[&str]) -> Result<ProcessMesh, MeshError> {
        let size = shape
            .iter()
            .try_fold(1usize, |acc, &s| acc.checked_mul(s))
            .unwrap_or(usize::MAX)
            .min(MAX_MESH_SIZE + 1);
        ProcessMesh::new(
            shape.to_vec(),
            (0..size as u32).collect(),
            names.iter().map(|s| s.to_string()).collect(),
        )
    }

    /// A mesh with ids 0..N-1 and default axis names `d0`, `d1`, ... (as Paddle does).
    pub fn from_shape(shape: &[usize]) -> Result<ProcessMesh, MeshError> {
        let names: Vec<String> = (0..shape.len()).map(|i| format!("d{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        ProcessMesh::with_names(shape, &refs)
    }

    /// Sizes of the axes.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Process ids in row-major order.
    pub fn process_ids(&self) -> &[u32] {
        &self.process_ids
    }

    /// Axis names.
    pub fn dim_names(&self) -> &[String] {
        &self.dim_names
    }

    /// Number of axes.
    pub fn ndim(&self) -> usize {
        self.shape.len()
    }

    /// Number of processes.
    pub fn size(&self) -> usize {
        self.process_ids.len()
    }

    /// The axes, in order.
    pub fn axes(&self) -> impl Iterator<Item = MeshAxis> {
        MeshAxis::all(self.ndim())
    }

    /// Size of one axis (1 for an axis that does not exist, so callers never index out).
    pub fn axis_size(&self, axis: MeshAxis) -> usize {
        self.shape.get(axis.index()).copied().unwrap_or(1)
    }

    /// The axis called `name`.
    pub fn axis_by_name(&self, name: &str) -> Option<MeshAxis> {
        self.dim_names
            .iter()
            .position(|n| n == name)
            .and_then(MeshAxis::new)
    }

    /// The name of an axis (or `?` for an axis that does not exist).
    pub fn axis_name(&self, axis: MeshAxis) -> &str {
        self.dim_names.get(axis.index()).map_or("?", String::as_str)
    }

    /// This rank's coordinate on `axis` (0 off the mesh).
    pub fn coord(&self, rank: u32, axis: MeshAxis) -> usize {
        self.coords_of(rank)
            .and_then(|c| c.get(axis.index()).copied())
            .unwrap_or(0)
    }

    /// Whether the ids are exactly 0..N-1 in row-major order.
    pub fn has_default_ids(&self) -> bool {
        self.process_ids
            .iter()
            .enumerate()
            .all(|(i, &p)| p as usize == i)
    }

    /// The coordinates of process `rank` on the mesh, or `None` if it is not on the mesh.
    pub fn coords_of(&self, rank: u32) -> Option<Vec<usize>> {
        let mut linear = self.process_ids.iter().position(|&p| p == rank)?;
        let mut coords = vec![0; self.ndim()];
        for (c, &s) in coords.iter_mut().zip(&self.shape).rev() {
            *c = linear % s;
            linear /= s;
        }
        Some(coords)
    }

    /// The process at `coords`.
    pub fn process_at(&self, coords: &[usize]) -> Option<u32> {
        if coords.len() != self.ndim() || coords.iter().zip(&self.shape).any(|(c, s)| c >= s) {
            return None;
        }
        let linear = coords
            .iter()
            .zip(&self.shape)
            .fold(0, |acc, (c, s)| acc * s + c);
        self.process_ids.get(linear).copied()
    }

    /// The communication group of `rank` along `axes`: every process that shares all of
    /// `rank`'s coordinates on the other axes, in row-major order. On `[2,4]` rank 5 has
    /// group [1, 5] along axis 0 and [4, 5, 6, 7] along axis 1.
    pub fn group_of(&self, rank: u32, axes: &[MeshAxis]) -> Option<Vec<u32>> {
        let coords = self.coords_of(rank)?;
        Some(
            self.process_ids
                .iter()
                .enumerate()
                .filter(|(linear, _)| {
                    let mut l = *linear;
                    (0..self.ndim()).rev().all(|a| {
                        let c = l % self.shape[a];
                        l /= self.shape[a];
                        axes.iter().any(|x| x.index() == a) || c == coords[a]
                    })
                })
                .map(|(_, &p)| p)
                .collect(),
        )
    }

    /// Every distinct group along `axes`, ordered by their first process.
    pub fn all_groups(&self, axes: &[MeshAxis]) -> Vec<Vec<u32>> {
        let mut groups: Vec<Vec<u32>> = Vec::new();
        for &p in &self.process_ids {
            if let Some(g) = self.group_of(p, axes) {
                if !groups.contains(&g) {
                    groups.push(g);
                }
            }
        }
        groups
    }
}

impl fmt::Display for ProcessMesh {
    /// `[2, 4] (dp, mp)`, plus `ids [..]` when the ids are not 0..N-1.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shape: Vec<String> = self.shape.iter().map(|s| s.to_string()).collect();
        write!(f, "[{}] ({})", shape.join(", "), self.dim_names.join(", "))?;
        if !self.has_default_ids() {
            let ids: Vec<String> = self.process_ids.iter().map(|s| s.to_string()).collect();
            write!(f, " ids [{}]", ids.join(", "))?;
        }
        Ok(())
    }
}
