//! Elementwise ops: binary with numpy broadcasting, and unary.
//!
//! ```text
//! add  x[0,-1,-1] + y[-1,1,-1]  =>  x, y, out [0,1,-1]
//! add  x[8,16,32][0,-1,-1] + y[16,1][1,-1]  =>  y's size-1 dim is broadcast: out [0,1,-1]
//! relu x[0,-1] partial{1}  =>  x wanted [0,-1] (not partial: a P->R reshard), out [0,-1]
//! ```
//! Two different mesh axes on one letter raise, as in Paddle. Partial inputs are dropped
//! (a reshard), except that multiply keeps x's partial (Paddle 3.3.1).

use super::einsum::{letters, merge, normalize_through_placements, OnAxisConflict, OnMeshConflict};
use super::{arg, check_rank, DistTensor, Inferred, Layout, MeshAxis, Partial, Result};
use crate::ir::infer::broadcast;

/// Letters of a broadcast operand: aligned right, `1` for a size-1 dim the output expands.
pub fn operand_letters(out: &str, out_shape: &[usize], shape: &[usize]) -> String {
    let skip = out.len().saturating_sub(shape.len());
    out.chars()
        .skip(skip)
        .zip(shape.iter().zip(&out_shape[skip..]))
        .map(|(l, (&s, &o))| if s == 1 && o != 1 { '1' } else { l })
        .collect()
}

/// Forward of a broadcasting binary op.
pub fn binary_forward(inputs: &[DistTensor], keep_x_partial: bool) -> Result<Inferred> {
    let (x, y) = (
        arg(inputs, 0, "elementwise")?,
        arg(inputs, 1, "elementwise")?,
    );
    check_rank(x, "elementwise X")?;
    check_rank(y, "elementwise Y")?;
    let out_shape = broadcast(&x.shape, &y.shape).unwrap_or_else(|| x.shape.to_vec());
    let ol = letters(out_shape.len());
    let xl = operand_letters(ol, &out_shape, &x.shape);
    let yl = operand_letters(ol, &out_shape, &y.shape);
    let map = merge(
        &[(&xl, x.dims()), (&yl, y.dims())],
        OnAxisConflict::Error,
        OnMeshConflict::KeepFirst,
        None,
    )?;
    let out_dims = map.dims(ol);
    let partial = if keep_x_partial {
        let used: Vec<MeshAxis> = out_dims.iter().flat_map(|d| d.iter().copied()).collect();
        x.layout
            .partial
            .iter()
            .filter(|(a, _)| !used.contains(a))
            .collect()
    } else {
        Partial::NONE
    };
    Ok(Inferred {
        inputs: smallvec::smallvec![
            Layout {
                dims: map.dims(&xl),
                partial,
            },
            Layout::from_dims(map.dims(&yl)),
        ],
        outputs: smallvec::smallvec![Layout {
            dims: out_dims,
            partial,
        }],
    })
}

/// Backward of a broadcasting binary op: the output decides both operands.
pub fn binary_backward(inputs: &[DistTensor], outputs: &[DistTensor]) -> Result<Inferred> {
    let (x, y) = (
        arg(inputs, 0, "elementwise")?,
        arg(inputs, 1, "elementwise")?,
    );
    let out = arg(outputs, 0, "elementwise")?;
    check_rank(out, "elementwise Out")?;
    let ol = letters(out.shape.len());
    let map = merge(
        &[(ol, out.dims())],
        OnAxisConflict::Error,
        OnMeshConflict::KeepFirst,
        None,
    )?;
    let xl = operand_letters(ol, &out.shape, &x.shape);
    let yl = operand_letters(ol, &out.shape, &y.shape);
    Ok(Inferred {
        inputs: smallvec::smallvec![
            Layout::from_dims(map.dims(&xl)),
            Layout::from_dims(map.dims(&yl)),
        ],
        outputs: smallvec::smallvec![Layout::from_dims(out.dims().clone())],
    })
}

/// Forward of a unary op with `n_outputs` outputs of the input's shape.
pub fn unary_forward(inputs: &[DistTensor], n_outputs: usize) -> Result<Inferred> {
    let x = arg(inputs, 0, "unary")?;
    check_rank(x, "unary X")?;
    let dims = normalize_through_placements(x.dims());
    Ok(Inferred {
        inputs: smallvec::smallvec![Layout::from_dims(dims.clone())],
        outputs: smallvec::smallvec![Layout::from_dims(dims); n_outputs.max(1)],
    })
}

/// Backward of a unary op: the (first) output decides the input; outputs merge.
pub fn unary_backward(inputs: &[DistTensor], outputs: &[DistTensor]) -> Result<Inferred> {
    let _ = arg(inputs, 0, "unary")?;
    let out = arg(outputs, 0, "unary")?;
    check_rank(out, "unary Out")?;
    let ol = letters(out.shape.len());
    let pairs: Vec<(&str, &super::Dims)> = outputs.iter().map(|o| (ol, o.dims())).collect();
    let map = merge(
        &pairs,
        OnAxisConflict::Error,
        OnMeshConflict::KeepFirst,
        None,
    )?;
    let dims = map.dims(ol);
    Ok(Inferred {
        inputs: smallvec::smallvec![Layout::from_dims(dims.clone())],
        outputs: smallvec::smallvec![Layout::from_dims(dims); outputs.len()],
    })
}
