//! The meshes of a plan, each referenced by a small [`MeshId`]. A tensor's or op's dist attr
//! names its mesh by id, so attrs stay small and cheap to compare, and a plan can hold
//! several meshes: pipeline stages each live on their own (sub-)mesh. Today a plan has one
//! mesh, id 0.

use super::mesh::ProcessMesh;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;

/// A mesh of the plan's mesh table.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize)]
pub struct MeshId(pub u16);

impl MeshId {
    /// The job's whole mesh: the first of every plan's table. Until pipeline stages put ops
    /// on sub-meshes, every attr lives on it.
    pub const JOB: MeshId = MeshId(0);
}

impl fmt::Debug for MeshId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "mesh{}", self.0)
    }
}

/// The meshes of a plan, in the order they were added.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MeshTable {
    meshes: Vec<Arc<ProcessMesh>>,
}

impl MeshTable {
    /// A table of one mesh (id 0).
    pub fn single(mesh: Arc<ProcessMesh>) -> MeshTable {
        MeshTable { meshes: vec![mesh] }
    }

    /// Adds `mesh` (or finds an equal one) and returns its id; `None` past 65,536 meshes.
    pub fn add(&mut self, mesh: Arc<ProcessMesh>) -> Option<MeshId> {
        if let Some(i) = self.meshes.iter().position(|m| **m == *mesh) {
            return Some(MeshId(i as u16));
        }
        let id = u16::try_from(self.meshes.len()).ok()?;
        self.meshes.push(mesh);
        Some(MeshId(id))
    }

    /// The mesh `id` names.
    pub fn get(&self, id: MeshId) -> Option<&Arc<ProcessMesh>> {
        self.meshes.get(id.0 as usize)
    }

    /// The first mesh (the whole job's, while a plan has one).
    pub fn first(&self) -> Option<&Arc<ProcessMesh>> {
        self.meshes.first()
    }

    /// How many meshes there are.
    pub fn len(&self) -> usize {
        self.meshes.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.meshes.is_empty()
    }

    /// Every mesh with its id.
    pub fn iter(&self) -> impl Iterator<Item = (MeshId, &Arc<ProcessMesh>)> {
        self.meshes
            .iter()
            .enumerate()
            .map(|(i, m)| (MeshId(i as u16), m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_meshes_share_an_id() {
        let a = Arc::new(ProcessMesh::with_names(&[2, 2], &["dp", "mp"]).unwrap());
        let b = Arc::new(ProcessMesh::with_names(&[4], &["pp"]).unwrap());
        let mut t = MeshTable::single(a.clone());
        assert_eq!(t.add(b.clone()), Some(MeshId(1)));
        assert_eq!(t.add(Arc::new((*a).clone())), Some(MeshId(0)));
        assert_eq!(t.get(MeshId(1)), Some(&b));
        assert_eq!(t.get(MeshId(2)), None);
        assert_eq!(t.len(), 2);
    }
}
