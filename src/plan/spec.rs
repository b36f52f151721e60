//! Compact one-line specs for meshes and annotations, as typed on a command line or kept
//! in a URL: `2x4:dp,mp` and `x=dp,-`.

use super::Annotation;
use crate::dist::MAX_MESH_NDIM;
use crate::dist::{DimAxes, DistAttrError, MeshError, MeshId, ProcessMesh, TensorDistAttr};
use crate::ir::Program;
use std::sync::Arc;

/// Why a mesh or shard spec does not parse; each names the spec and what is wrong in it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("mesh `{spec}`: `{part}` is not an axis size (write e.g. 2x4:dp,mp)")]
    NotASize { spec: String, part: String },
    #[error("mesh `{spec}`: {source}")]
    Mesh { spec: String, source: MeshError },
    #[error("shard `{spec}`: expected VAR=AXIS,AXIS,... (e.g. x=dp,-)")]
    NoEquals { spec: String },
    #[error("shard `{spec}`: unknown variable `{name}`")]
    UnknownVar { spec: String, name: String },
    #[error("shard `{spec}`: unknown mesh axis `{axis}`; the mesh has ({axes})")]
    UnknownAxis {
        spec: String,
        axis: String,
        axes: String,
    },
    #[error("shard `{spec}`: a dim is split by at most {MAX_MESH_NDIM} mesh axes")]
    TooManyAxes { spec: String },
    #[error("shard `{spec}`: {source}")]
    Layout {
        spec: String,
        source: Box<DistAttrError>,
    },
}

/// The command line and the playground report a spec error as its message.
impl From<SpecError> for String {
    fn from(e: SpecError) -> String {
        e.to_string()
    }
}

/// Parses `2x4:dp,mp` (or `2x4`, naming axes `d0, d1`) into a mesh with ids 0..N-1.
pub fn parse_mesh_spec(spec: &str) -> Result<ProcessMesh, SpecError> {
    let (shape_part, names_part) = match spec.split_once(':') {
        Some((s, n)) => (s, Some(n)),
        None => (spec, None),
    };
    let shape = shape_part
        .split('x')
        .map(|s| {
            s.trim().parse::<usize>().map_err(|_| SpecError::NotASize {
                spec: spec.into(),
                part: s.into(),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mesh = match names_part {
        Some(names) => {
            let names: Vec<&str> = names.split(',').map(str::trim).collect();
            ProcessMesh::with_names(&shape, &names)
        }
        None => ProcessMesh::from_shape(&shape),
    };
    mesh.map_err(|source| SpecError::Mesh {
        spec: spec.into(),
        source,
    })
}

/// Parses `VAR=dp,-,?` (or `VAR=dp+mp,-` for co-sharding) against a program and mesh.
pub fn parse_shard_spec(
    spec: &str,
    program: &Program,
    mesh: &Arc<ProcessMesh>,
) -> Result<Annotation, SpecError> {
    let (name, dims) = spec
        .split_once('=')
        .ok_or_else(|| SpecError::NoEquals { spec: spec.into() })?;
    let var = program
        .var_id(name.trim())
        .ok_or_else(|| SpecError::UnknownVar {
            spec: spec.into(),
            name: name.trim().into(),
        })?;
    let mut attr = TensorDistAttr::replicated(MeshId::JOB, 0);
    for item in dims.split(',').map(str::trim) {
        let (axes, pinned) = match item {
            "-" => (DimAxes::WHOLE, true),
            "?" => (DimAxes::WHOLE, false),
            names => {
                let axes = names
                    .split('+')
                    .map(|a| {
                        mesh.axis_by_name(a.trim())
                            .ok_or_else(|| SpecError::UnknownAxis {
                                spec: spec.into(),
                                axis: a.into(),
                                axes: mesh.dim_names().join(", "),
                            })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let axes = DimAxes::from_axes(axes)
                    .ok_or_else(|| SpecError::TooManyAxes { spec: spec.into() })?;
                (axes, true)
            }
        };
        attr.dims.push(axes);
        attr.annotated.push(pinned);
    }
    let v = program.var(var);
    attr.validate(&v.name, &v.ty.shape, mesh)
        .map_err(|source| SpecError::Layout {
            spec: spec.into(),
            source: Box::new(source),
        })?;
    Ok(Annotation { var, attr })
}

/// The one-line spec of a mesh with ids 0..N-1: `2x4:dp,mp`.
pub fn mesh_spec(mesh: &ProcessMesh) -> String {
    let shape: Vec<String> = mesh.shape().iter().map(|s| s.to_string()).collect();
    format!("{}:{}", shape.join("x"), mesh.dim_names().join(","))
}

/// The one-line spec of an annotation: `x=dp,-,?` (`dp+mp` for co-sharding).
pub fn shard_spec(program: &Program, mesh: &ProcessMesh, ann: &Annotation) -> String {
    let dims: Vec<String> = ann
        .attr
        .dims
        .iter()
        .zip(&ann.attr.annotated)
        .map(|(axes, &pinned)| match (axes.as_slice(), pinned) {
            ([], true) => "-".to_string(),
            ([], false) => "?".to_string(),
            (axes, _) => axes
                .iter()
                .map(|&a| mesh.axis_name(a).to_string())
                .collect::<Vec<_>>()
                .join("+"),
        })
        .collect();
    format!("{}={}", program.var(ann.var).name, dims.join(","))
}
