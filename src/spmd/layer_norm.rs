//! layer_norm and rms_norm: the normalised axes (from begin_norm_axis on) are replicated,
//! as are scale and bias; the row statistics (layer_norm's Mean and Variance, rms_norm's
//! InvVar) take x's first begin_norm_axis mappings.
//!
//! ```text
//! layer_norm(begin_norm_axis=2) x[0,1,-1] scale[-1] bias[-1]  =>  y [0,1,-1], mean/var [0,1]
//! layer_norm(begin_norm_axis=1) x[0,1]                        =>  x wanted [0,-1], mean [0]
//! rms_norm(begin_norm_axis=2)   x[0,-1,1] scale[-1]           =>  y [0,-1,-1], invvar [0,-1]
//! ```

use super::einsum::{letters, merge, OnAxisConflict, OnMeshConflict};
use super::{arg, check_rank, DimAxes, Dims, DistTensor, Inferred, Layout, Result};

/// The statistics a normalisation saves per row: layer_norm's mean and variance, or
/// rms_norm's inverse root mean square.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NormShape {
    /// Parameters after x (scale, bias), each replicated.
    pub params: usize,
    /// Row statistics among the outputs after y.
    pub stats: usize,
}

impl NormShape {
    /// layer_norm's: its optional scale and bias, and its mean and variance.
    pub fn layer_norm(has_scale: bool, has_bias: bool) -> NormShape {
        NormShape {
            params: usize::from(has_scale) + usize::from(has_bias),
            stats: 2,
        }
    }
}

fn result(x_dims: &Dims, begin: usize, shape: NormShape) -> Inferred {
    let dims: Dims = x_dims
        .iter()
        .enumerate()
        .map(|(d, a)| if d >= begin { DimAxes::WHOLE } else { *a })
        .collect();
    let stats: Dims = dims.iter().take(begin).cloned().collect();
    let mut inputs: super::Layouts = smallvec::smallvec![Layout::from_dims(dims.clone())];
    inputs.extend((0..shape.params).map(|_| Layout::replicated(1)));
    let mut outputs: super::Layouts = smallvec::smallvec![Layout::from_dims(dims)];
    outputs.extend((0..shape.stats).map(|_| Layout::from_dims(stats.clone())));
    Inferred { inputs, outputs }
}

/// Forward from x.
pub fn forward(inputs: &[DistTensor], begin: usize, shape: NormShape) -> Result<Inferred> {
    let x = arg(inputs, 0, "norm")?;
    check_rank(x, "norm X")?;
    Ok(result(x.dims(), begin, shape))
}

/// Backward from y and the row statistics (merged letter by letter).
pub fn backward(
    inputs: &[DistTensor],
    outputs: &[DistTensor],
    begin: usize,
    shape: NormShape,
) -> Result<Inferred> {
    let x = arg(inputs, 0, "norm")?;
    let y = arg(outputs, 0, "norm")?;
    check_rank(y, "norm Y")?;
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
    Ok(result(&map.dims(xl), begin, shape))
}
