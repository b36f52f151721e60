//! layer_norm: the normalised axes (from begin_norm_axis on) are replicated, as are scale
//! and bias; Mean and Variance take x's first begin_norm_axis mappings.
//!
//! ```text
//! layer_norm(begin_norm_axis=2) x[0,1,-1] scale[-1] bias[-1]  =>  y [0,1,-1], mean/var [0,1]
//! layer_norm(begin_norm_axis=1) x[0,1]                        =>  x wanted [0,-1], mean [0]
//! ```

use super::einsum::{letters, merge, OnAxisConflict, OnMeshConflict};
use super::{arg, check_rank, DimAxes, Dims, DistTensor, Inferred, Layout, Result};

fn result(x_dims: &Dims, begin: usize, has_scale: bool, has_bias: bool) -> Inferred {
    let dims: Dims = x_dims
        .iter()
        .enumerate()
        .map(|(d, a)| if d >= begin { DimAxes::WHOLE } else { *a })
        .collect();
    let stats: Dims = dims.iter().take(begin).cloned().collect();
    let mut inputs: super::Layouts = smallvec::smallvec![Layout::from_dims(dims.clone())];
    inputs
        .extend((0..usize::from(has_scale) + usize::from(has_bias)).map(|_| Layout::replicated(1)));
    Inferred {
        inputs,
        outputs: smallvec::smallvec![
            Layout::from_dims(dims),
            Layout::from_dims(stats.clone()),
            Layout::from_dims(stats),
        ],
    }
}

/// Forward from x.
pub fn forward(
    inputs: &[DistTensor],
    begin: usize,
    has_scale: bool,
    has_bias: bool,
) -> Result<Inferred> {
    let x = arg(inputs, 0, "layer_norm")?;
    check_rank(x, "layer_norm X")?;
    Ok(result(x.dims(), begin, has_scale, has_bias))
}

/// Backward from y, mean and variance (merged letter by letter).
pub fn backward(
    inputs: &[DistTensor],
    outputs: &[DistTensor],
    begin: usize,
    has_scale: bool,
    has_bias: bool,
) -> Result<Inferred> {
    let x = arg(inputs, 0, "layer_norm")?;
    let y = arg(outputs, 0, "layer_norm")?;
    check_rank(y, "layer_norm Y")?;
    let xl = letters(x.shape.len());
    let sl: String = xl.chars().take(begin).collect();
    let mut pairs: Vec<(&str, &Dims)> = vec![(xl, y.dims())];
    for stat in outputs.iter().skip(1) {
        if stat.dims().len() == sl.len() {
            pairs.push((&sl, stat.dims()));
        }
    }
    let map = merge(
        &pairs,
        OnAxisConflict::Error,
        OnMeshConflict::KeepFirst,
        None,
    )?;
    Ok(result(&map.dims(xl), begin, has_scale, has_bias))
}
