//! Process meshes and distributed attributes: communication groups, tensor and operator
//! dist attrs, local shapes, tiles, and the six notations for writing a sharding.
//!
//! Architecture invariant: `dist` depends on nothing else in the crate.

pub mod attr;
pub mod chunk;
pub mod dist_impl;
pub mod layout;
pub mod mesh;
pub mod mesh_table;
pub mod notation;
pub mod pipeline;
pub mod tiles;

pub use attr::{
    local_shape, local_shape_at, DistAttrError, OperatorDistAttr, ReduceType, SlotAttrs,
    TensorDistAttr,
};
pub use dist_impl::DistImpl;
pub use layout::{DimAxes, Dims, Layout, MeshAxis, Partial, MAX_MESH_NDIM};
pub use mesh::{MeshError, ProcessMesh, MAX_MESH_SIZE};
pub use mesh_table::{MeshId, MeshTable};
pub use notation::{render, Notation, Typed};
pub use pipeline::{corresponding_rank, p2p_sources, Stages, PP_AXIS};
pub use tiles::{tiling, Tile, Tiling};
