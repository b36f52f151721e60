//! Putting a variable back together from every rank's piece, using each piece's dist
//! attr: split dims are placed at their block, partial values are reduced, and every
//! replica is assembled on its own.

use super::interp::reduce_all;
use super::tensor::{strides, Tensor};
use crate::dist::MeshAxis;
use crate::dist::{ProcessMesh, TensorDistAttr};
use std::collections::BTreeMap;

/// One rank's piece of a variable.
pub struct Piece<'a> {
    pub rank: u32,
    pub value: &'a Tensor,
    pub attr: &'a TensorDistAttr,
}

/// Every replica of the global tensor, assembled from the pieces.
///
/// Why rank pieces do not assemble into a global tensor.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GatherError {
    #[error("no pieces")]
    NoPieces,
    #[error("rank {rank} lays the tensor out differently from rank {first}")]
    Layouts { rank: u32, first: u32 },
    #[error("partial over several reduce types, which do not commute")]
    ReduceTypes,
    #[error("the global shape overflows")]
    Overflow,
    #[error("rank {0} is not on the mesh")]
    NotOnMesh(u32),
    #[error("replica {replica:?}, block {block:?}: {got} of {want} partial values")]
    Contributions {
        replica: Vec<usize>,
        block: Vec<usize>,
        got: usize,
        want: usize,
    },
    #[error("a piece has shape {piece:?}, the tensor {global:?}")]
    PieceRank {
        piece: Vec<usize>,
        global: Vec<usize>,
    },
    #[error("replica {0:?}: some elements are held by no rank")]
    Holes(Vec<usize>),
}

/// Every partial contribution of a block arrived.
fn all_contributed(
    replica: &[usize],
    block: &[usize],
    got: usize,
    want: usize,
) -> Result<(), GatherError> {
    if got == want {
        return Ok(());
    }
    Err(GatherError::Contributions {
        replica: replica.to_vec(),
        block: block.to_vec(),
        got,
        want,
    })
}

/// Mesh axes that neither split a dim nor hold a partial value replicate the tensor: each
/// coordinate on those axes holds a whole copy, and each copy is assembled separately (its
/// blocks placed, its partial contributions reduced), so verification compares every copy
/// with the serial value and a rank whose copy went wrong cannot hide behind coordinate 0.
/// Copies come in mesh order of their replica coordinates; the first is coordinate 0's.
pub fn gather(
    mesh: &ProcessMesh,
    global_shape: &[usize],
    pieces: &[Piece],
) -> Result<Vec<Tensor>, GatherError> {
    let first = pieces.first().ok_or(GatherError::NoPieces)?;
    let attr = first.attr;
    if let Some(p) = pieces
        .iter()
        .find(|p| p.attr.dims != attr.dims || p.attr.partial != attr.partial)
    {
        return Err(GatherError::Layouts {
            rank: p.rank,
            first: first.rank,
        });
    }
    let split_axes: Vec<MeshAxis> = attr.dims.iter().flatten().copied().collect();
    let partial_axes = attr.partial_axes();
    let reduce = attr
        .partial
        .first()
        .map(|p| p.1)
        .unwrap_or(crate::dist::ReduceType::Sum);
    if attr.partial.iter().any(|p| p.1 != reduce) {
        return Err(GatherError::ReduceTypes);
    }
    let contributions: usize = partial_axes.iter().map(|&a| mesh.axis_size(a)).product();
    let numel = global_shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or(GatherError::Overflow)?;
    // replica coordinates -> block coordinates -> partial contributions
    type Blocks<'t> = BTreeMap<Vec<usize>, Vec<&'t Tensor>>;
    let mut replicas: BTreeMap<Vec<usize>, Blocks> = BTreeMap::new();
    for p in pieces {
        let coords = mesh
            .coords_of(p.rank)
            .ok_or(GatherError::NotOnMesh(p.rank))?;
        let replica: Vec<usize> = mesh
            .axes()
            .filter(|a| !split_axes.contains(a) && !partial_axes.contains(a))
            .map(|a| coords[a.index()])
            .collect();
        let block: Vec<usize> = split_axes.iter().map(|a| coords[a.index()]).collect();
        replicas
            .entry(replica)
            .or_default()
            .entry(block)
            .or_default()
            .push(p.value);
    }
    let gs = strides(global_shape);
    let mut copies = Vec::with_capacity(replicas.len());
    for (replica, blocks) in &replicas {
        let mut out = vec![0.0; numel];
        let mut filled = vec![false; numel];
        for (key, parts) in blocks {
            all_contributed(replica, key, parts.len(), contributions)?;
            let value = if partial_axes.is_empty() {
                (*parts[0]).clone()
            } else {
                reduce_all(
                    &parts.iter().map(|t| (*t).clone()).collect::<Vec<_>>(),
                    reduce,
                )
            };
            // The block's offset: for each dim, where its chunk starts (`dist::chunk`).
            let mut coords = vec![0; mesh.ndim()];
            for (&a, &c) in split_axes.iter().zip(key) {
                coords[a.index()] = c;
            }
            let local = &value.shape;
            if local.len() != global_shape.len() {
                return Err(GatherError::PieceRank {
                    piece: local.clone(),
                    global: global_shape.to_vec(),
                });
            }
            let starts: Vec<usize> = (0..local.len())
                .map(|d| {
                    crate::dist::chunk::extent(global_shape[d], &attr.dims[d], mesh, &coords).0
                })
                .collect();
            let ls = strides(local);
            for (i, v) in value.to_f64().iter().enumerate() {
                let mut g = 0;
                for d in 0..local.len() {
                    let idx = (i / ls[d]) % local[d].max(1);
                    g += (starts[d] + idx) * gs[d];
                }
                if g < out.len() {
                    out[g] = *v;
                    filled[g] = true;
                }
            }
        }
        if filled.iter().any(|f| !f) {
            return Err(GatherError::Holes(replica.clone()));
        }
        copies.push(Tensor::float(
            first.value.dtype(),
            global_shape.to_vec(),
            out,
        ));
    }
    Ok(copies)
}

/// Cuts this rank's piece of a global tensor laid out as `attr`.
pub fn shard(
    global: &Tensor,
    attr: &TensorDistAttr,
    mesh: &ProcessMesh,
    rank: u32,
) -> Result<Tensor, crate::dist::MeshError> {
    let coords = mesh
        .coords_of(rank)
        .ok_or(crate::dist::MeshError::NoSuchRank(rank))?;
    // Slice the global tensor itself first, so a sharded one is never copied whole.
    let mut t: Option<Tensor> = None;
    for (d, axes) in attr.dims.iter().enumerate() {
        if axes.is_empty() {
            continue;
        }
        let from = t.as_ref().unwrap_or(global);
        let Some(&len) = from.shape.get(d) else {
            continue;
        };
        let (start, end) = crate::dist::chunk::extent(len, axes, mesh, &coords);
        t = Some(super::kernels::layout::slice_axis(from, d, start, end));
    }
    Ok(t.unwrap_or_else(|| global.clone()))
}
