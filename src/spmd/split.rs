//! split: the split axis is replicated; every piece gets the input's sharding.
//!
//! ```text
//! split(axis=1, sections=[8,8]) x[0,1,-1]  =>  x wanted [0,-1,-1], outs [0,-1,-1] x2
//! ```

use super::einsum::{letters, merge, OnAxisConflict, OnMeshConflict};
use super::{arg, check_rank, DimAxes, Dims, DistTensor, Inferred, Layout, Result};

fn without_axis(dims: &Dims, axis: usize) -> Dims {
    dims.iter()
        .enumerate()
        .map(|(d, a)| if d == axis { DimAxes::WHOLE } else { *a })
        .collect()
}

/// Forward: replicate the split axis.
pub fn forward(inputs: &[DistTensor], axis: usize, outputs: usize) -> Result<Inferred> {
    let x = arg(inputs, 0, "split")?;
    check_rank(x, "split X")?;
    let dims = without_axis(x.dims(), axis);
    Ok(Inferred {
        inputs: smallvec::smallvec![Layout::from_dims(dims.clone())],
        outputs: smallvec::smallvec![Layout::from_dims(dims); outputs],
    })
}

/// Backward: merge the pieces, replicate the split axis.
pub fn backward(inputs: &[DistTensor], outputs: &[DistTensor], axis: usize) -> Result<Inferred> {
    let x = arg(inputs, 0, "split")?;
    let xl = letters(x.shape.len());
    let pairs: Vec<(&str, &Dims)> = outputs.iter().map(|o| (xl, o.dims())).collect();
    let map = merge(
        &pairs,
        OnAxisConflict::Error,
        OnMeshConflict::KeepFirst,
        None,
    )?;
    let dims = without_axis(&map.dims(xl), axis);
    Ok(Inferred {
        inputs: smallvec::smallvec![Layout::from_dims(dims.clone())],
        outputs: smallvec::smallvec![Layout::from_dims(dims); outputs.len()],
    })
}
