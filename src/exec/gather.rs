//! Putting a variable back together from every rank's piece, using each piece's dist
//! attr: split dims are placed at their block, partial values are reduced, and replicas
//! are checked against each other.

use super::interp::reduce_all;
use super::tensor::{strides, Tensor};
use crate::dist::{ProcessMesh, TensorDistAttr};

/// One rank's piece of a variable.
pub struct Piece<'a> {
    pub rank: u32,
    pub value: &'a Tensor,
    pub attr: &'a TensorDistAttr,
}

/// The global tensor, and the largest difference found between replicas.
pub fn gather(
    mesh: &ProcessMesh,
    global_shape: &[usize],
    pieces: &[Piece],
) -> Result<(Tensor, f64), String> {
    let first = pieces.first().ok_or("no pieces")?;
    let attr = first.attr;
    let split_axes: Vec<usize> = attr.dims.iter().flatten().copied().collect();
    let partial_axes = attr.partial_axes();
    let reduce = attr
        .partial
        .first()
        .map(|p| p.1)
        .unwrap_or(crate::dist::ReduceType::Sum);
    // Group pieces by their block (coordinates on split axes); within a block, the pieces
    // with all replicated coordinates at 0 are the partial contributions to reduce.
    let mut out = vec![0.0; global_shape.iter().product()];
    let mut filled = vec![false; out.len()];
    let mut replica_diff: f64 = 0.0;
    let mut blocks: Vec<(Vec<usize>, Vec<&Tensor>, Vec<&Tensor>)> = Vec::new();
    for p in pieces {
        let coords = mesh
            .coords_of(p.rank)
            .ok_or_else(|| format!("rank {} is not on the mesh", p.rank))?;
        let key: Vec<usize> = split_axes.iter().map(|&a| coords[a]).collect();
        let representative = (0..mesh.ndim())
            .all(|a| split_axes.contains(&a) || partial_axes.contains(&a) || coords[a] == 0);
        let entry = match blocks.iter_mut().find(|b| b.0 == key) {
            Some(e) => e,
            None => {
                blocks.push((key.clone(), Vec::new(), Vec::new()));
                blocks.last_mut().ok_or("no block")?
            }
        };
        if representative {
            entry.1.push(p.value);
        } else {
            entry.2.push(p.value);
        }
    }
    let gs = strides(global_shape);
    for (key, reps, others) in &blocks {
        let Some(first_rep) = reps.first() else {
            continue;
        };
        let value = if partial_axes.is_empty() {
            (*first_rep).clone()
        } else {
            reduce_all(
                &reps.iter().map(|t| (*t).clone()).collect::<Vec<_>>(),
                reduce,
            )
        };
        if partial_axes.is_empty() {
            let base = first_rep.to_f64();
            for o in others {
                for (a, b) in base.iter().zip(o.to_f64()) {
                    replica_diff = replica_diff.max((a - b).abs());
                }
            }
        }
        // The block's offset: for each dim, its position among the shards of that dim.
        let coords_of_axis = |a: usize| {
            split_axes
                .iter()
                .position(|&s| s == a)
                .map(|i| key[i])
                .unwrap_or(0)
        };
        let local = &value.shape;
        let ls = strides(local);
        let vals = value.to_f64();
        for (i, v) in vals.iter().enumerate() {
            let mut g = 0;
            for d in 0..local.len() {
                let idx = (i / ls[d]) % local[d].max(1);
                let block = attr.dims[d]
                    .iter()
                    .fold(0, |acc, &a| acc * mesh.axis_size(a) + coords_of_axis(a));
                g += (block * local[d] + idx) * gs[d];
            }
            if g < out.len() {
                out[g] = *v;
                filled[g] = true;
            }
        }
    }
    if filled.iter().any(|f| !f) {
        return Err("some elements are held by no rank".into());
    }
    Ok((
        Tensor::float(first.value.dtype(), global_shape.to_vec(), out),
        replica_diff,
    ))
}

/// Cuts this rank's piece of a global tensor laid out as `attr`.
pub fn shard(
    global: &Tensor,
    attr: &TensorDistAttr,
    mesh: &ProcessMesh,
    rank: u32,
) -> Result<Tensor, String> {
    let coords = mesh
        .coords_of(rank)
        .ok_or_else(|| format!("rank {rank} is not on the mesh"))?;
    let mut t = global.clone();
    for (d, axes) in attr.dims.iter().enumerate() {
        let n: usize = axes.iter().map(|&a| mesh.axis_size(a)).product();
        if n <= 1 {
            continue;
        }
        let block = axes
            .iter()
            .fold(0, |acc, &a| acc * mesh.axis_size(a) + coords[a]);
        let piece = t.shape[d] / n;
        t = super::kernels::layout::slice_axis(&t, d, block * piece, (block + 1) * piece);
    }
    Ok(t)
}
