//! Reductions: sum (SUM), mean (AVG), max (MAX); keep_dim; mean of all elements (AVG).
//!
//! ```text
//! sum  x[0,1,-1] over axis 2          =>  out [0,1]
//! mean x[0,1,-1] over axis 1, keepdim =>  out [0,-1,-1] partial{1: AVG}
//! mean_all x[0,-1]                    =>  out [] partial{0: AVG}
//! ```
//! A reduced letter that is split makes the output partial on its mesh axes.

use super::einsum::{letters, merge, OnAxisConflict, OnMeshConflict};
use super::{arg, check_rank, DistTensor, Inferred, Layout, Result};
use crate::dist::ReduceType;

/// Output letters: the input's without the reduced ones (`1` for them with keep_dim).
fn out_letters(xl: &str, axes: &[usize], keep_dim: bool) -> String {
    xl.chars()
        .enumerate()
        .filter_map(|(d, l)| match (axes.contains(&d), keep_dim) {
            (false, _) => Some(l),
            (true, true) => Some('1'),
            (true, false) => None,
        })
        .collect()
}

/// Forward of a reduction over `axes`.
pub fn forward(
    inputs: &[DistTensor],
    axes: &[usize],
    keep_dim: bool,
    reduce: ReduceType,
) -> Result<Inferred> {
    let x = arg(inputs, 0, "reduction")?;
    check_rank(x, "reduction X")?;
    let xl = letters(x.shape.len());
    let ol = out_letters(xl, axes, keep_dim);
    let map = merge(
        &[(xl, x.dims())],
        OnAxisConflict::Error,
        OnMeshConflict::KeepFirst,
        None,
    )?;
    let partial = map
        .contracted_axes(&ol)
        .into_iter()
        .map(|a| (a, reduce))
        .collect();
    Ok(Inferred {
        inputs: smallvec::smallvec![Layout::from_dims(map.dims(xl))],
        outputs: smallvec::smallvec![Layout {
            dims: map.dims(&ol),
            partial,
        }],
    })
}

/// Forward of `mean` over all elements. A mean is linear, so an input that is a partial
/// value (a sum or average not yet taken over some axes, such as a `reduce_mean` of a
/// batch split over `dp`) stays partial through it: the loss is then the partial value,
/// averaged where it is read and scaled by 1/N in the gradients, as a plain data-parallel
/// loss is. Reducing the input first (an all-reduce before the mean) would leave every
/// rank's backward seeded as if its share were the whole: gradients N times too large.
pub fn mean_all_forward(inputs: &[DistTensor]) -> Result<Inferred> {
    let x = arg(inputs, 0, "mean_all")?;
    let rank = x.shape.len();
    let mut r = forward(
        inputs,
        &(0..rank).collect::<Vec<_>>(),
        false,
        ReduceType::Avg,
    )?;
    for (axis, reduce) in x.layout.partial.iter() {
        if let (Some(i), Some(o)) = (r.inputs.first_mut(), r.outputs.first_mut()) {
            i.partial.set(axis, reduce);
            o.partial.set(axis, reduce);
        }
    }
    Ok(r)
}

/// Backward of a reduction: the output's letters decide the input; reduced dims replicated.
/// mean_all backward: the scalar says nothing about the input, which is proposed whole.
pub fn mean_all_backward(inputs: &[DistTensor], outputs: &[DistTensor]) -> Result<Inferred> {
    let x = arg(inputs, 0, "mean_all")?;
    let out = arg(outputs, 0, "mean_all")?;
    check_rank(out, "mean_all Out")?;
    Ok(Inferred {
        inputs: smallvec::smallvec![Layout::replicated(x.shape.len())],
        outputs: smallvec::smallvec![Layout::from_dims(out.dims().clone())],
    })
}

pub fn backward(
    inputs: &[DistTensor],
    outputs: &[DistTensor],
    axes: &[usize],
    keep_dim: bool,
) -> Result<Inferred> {
    let x = arg(inputs, 0, "reduction")?;
    let out = arg(outputs, 0, "reduction")?;
    check_rank(out, "reduction Out")?;
    let xl = letters(x.shape.len());
    let ol = out_letters(xl, axes, keep_dim);
    let map = merge(
        &[(&ol, out.dims())],
        OnAxisConflict::Error,
        OnMeshConflict::KeepFirst,
        None,
    )?;
    Ok(Inferred {
        inputs: smallvec::smallvec![Layout::from_dims(map.dims(xl))],
        outputs: smallvec::smallvec![Layout::from_dims(out.dims().clone())],
    })
}
