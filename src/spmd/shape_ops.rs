//! slice, squeeze, unsqueeze and tile: dims move or appear; sliced and tiled dims are
//! replicated.
//!
//! ```text
//! slice(axes=[1]) x[0,1,-1]              =>  x wanted [0,-1,-1], out [0,-1,-1]
//! squeeze(axis=[-2]) x[8,1,32][0,-1,1]   =>  out [0,1]
//! unsqueeze(axis=[-1]) x[0,1,-1]         =>  out [0,1,-1,-1]
//! tile(repeat=[2,1,1]) x[0,1]            =>  out [-1,0,1]
//! ```

use super::{arg, check_rank, replicate, DimAxes, Dims, DistTensor, Inferred, Layout, Result};

/// `dims` without the dims at `removed` (squeeze, decreased slice axes).
fn drop_dims(dims: &Dims, removed: &[usize]) -> Dims {
    dims.iter()
        .enumerate()
        .filter(|(d, _)| !removed.contains(d))
        .map(|(_, a)| *a)
        .collect()
}

/// A `rank`-dim mapping with replicated dims at `inserted` and `kept` filling the others in
/// order (the inverse of `drop_dims`).
fn insert_replicated(rank: usize, inserted: &[usize], kept: &Dims) -> Dims {
    let mut from_kept = kept.iter();
    (0..rank)
        .map(|d| {
            if inserted.contains(&d) {
                DimAxes::WHOLE
            } else {
                from_kept.next().cloned().unwrap_or_default()
            }
        })
        .collect()
}

/// slice forward: sliced axes replicated; decreased axes dropped from the output.
pub fn slice_forward(
    inputs: &[DistTensor],
    axes: &[usize],
    decrease: &[usize],
) -> Result<Inferred> {
    let x = arg(inputs, 0, "slice")?;
    check_rank(x, "slice X")?;
    let dims = replicate(x.dims(), axes);
    let out = drop_dims(&dims, decrease);
    Ok(Inferred {
        inputs: smallvec::smallvec![Layout::from_dims(dims)],
        outputs: smallvec::smallvec![Layout::from_dims(out)],
    })
}

/// slice backward: decreased axes come back replicated; sliced axes replicated.
pub fn slice_backward(
    inputs: &[DistTensor],
    outputs: &[DistTensor],
    axes: &[usize],
    decrease: &[usize],
) -> Result<Inferred> {
    let x = arg(inputs, 0, "slice")?;
    let out = arg(outputs, 0, "slice")?;
    let dims = insert_replicated(x.shape.len(), decrease, out.dims());
    let dims = replicate(&dims, axes);
    let out_dims = drop_dims(&dims, decrease);
    Ok(Inferred {
        inputs: smallvec::smallvec![Layout::from_dims(dims)],
        outputs: smallvec::smallvec![Layout::from_dims(out_dims)],
    })
}

/// squeeze forward: drop the squeezed dims.
pub fn squeeze_forward(inputs: &[DistTensor], axes: &[usize]) -> Result<Inferred> {
    let x = arg(inputs, 0, "squeeze")?;
    check_rank(x, "squeeze X")?;
    let out = drop_dims(x.dims(), axes);
    let wanted = replicate(x.dims(), axes);
    Ok(Inferred {
        inputs: smallvec::smallvec![Layout::from_dims(wanted)],
        outputs: smallvec::smallvec![Layout::from_dims(out)],
    })
}

/// squeeze backward: the squeezed dims come back replicated.
pub fn squeeze_backward(
    inputs: &[DistTensor],
    outputs: &[DistTensor],
    axes: &[usize],
) -> Result<Inferred> {
    let x = arg(inputs, 0, "squeeze")?;
    let out = arg(outputs, 0, "squeeze")?;
    let dims = insert_replicated(x.shape.len(), axes, out.dims());
    Ok(Inferred {
        inputs: smallvec::smallvec![Layout::from_dims(dims)],
        outputs: smallvec::smallvec![Layout::from_dims(out.dims().clone())],
    })
}

/// unsqueeze forward: replicated dims appear at `positions` of the output.
pub fn unsqueeze_forward(inputs: &[DistTensor], positions: &[usize]) -> Result<Inferred> {
    let x = arg(inputs, 0, "unsqueeze")?;
    check_rank(x, "unsqueeze X")?;
    let out = insert_replicated(x.shape.len() + positions.len(), positions, x.dims());
    Ok(Inferred {
        inputs: smallvec::smallvec![Layout::from_dims(x.dims().clone())],
        outputs: smallvec::smallvec![Layout::from_dims(out)],
    })
}

/// unsqueeze backward: drop the inserted dims.
pub fn unsqueeze_backward(
    inputs: &[DistTensor],
    outputs: &[DistTensor],
    positions: &[usize],
) -> Result<Inferred> {
    let _ = arg(inputs, 0, "unsqueeze")?;
    let out = arg(outputs, 0, "unsqueeze")?;
    let dims = drop_dims(out.dims(), positions);
    let out_dims = replicate(out.dims(), positions);
    Ok(Inferred {
        inputs: smallvec::smallvec![Layout::from_dims(dims)],
        outputs: smallvec::smallvec![Layout::from_dims(out_dims)],
    })
}

/// tile forward: dims repeated more than once are replicated; new leading dims too.
pub fn tile_forward(inputs: &[DistTensor], repeat: &[usize]) -> Result<Inferred> {
    let x = arg(inputs, 0, "tile")?;
    check_rank(x, "tile X")?;
    let rank = x.shape.len().max(repeat.len());
    let lead = rank - x.shape.len();
    // `repeat` aligns with the output's trailing dims.
    let rep_at = |p: usize| -> usize {
        let offset = rank - repeat.len();
        if p >= offset {
            repeat[p - offset]
        } else {
            1
        }
    };
    let wanted: Dims = x
        .dims()
        .iter()
        .enumerate()
        .map(|(d, a)| {
            if rep_at(d + lead) > 1 {
                DimAxes::WHOLE
            } else {
                *a
            }
        })
        .collect();
    let mut out: Dims = smallvec::smallvec![DimAxes::WHOLE; lead];
    out.extend(wanted.iter().cloned());
    Ok(Inferred {
        inputs: smallvec::smallvec![Layout::from_dims(wanted)],
        outputs: smallvec::smallvec![Layout::from_dims(out)],
    })
}

/// tile backward: the input takes the output's trailing dims where not repeated.
pub fn tile_backward(
    inputs: &[DistTensor],
    outputs: &[DistTensor],
    repeat: &[usize],
) -> Result<Inferred> {
    let x = arg(inputs, 0, "tile")?;
    let out = arg(outputs, 0, "tile")?;
    let rank = out.shape.len();
    let lead = rank.saturating_sub(x.shape.len());
    let offset = rank.saturating_sub(repeat.len());
    let rep_at = |p: usize| {
        if p >= offset {
            repeat.get(p - offset).copied().unwrap_or(1)
        } else {
            1
        }
    };
    let dims: Dims = (0..x.shape.len())
        .map(|d| {
            if rep_at(d + lead) > 1 {
                DimAxes::WHOLE
            } else {
                out.dims().get(d + lead).cloned().unwrap_or_default()
            }
        })
        .collect();
    let mut out_dims: Dims = smallvec::smallvec![DimAxes::WHOLE; lead];
    out_dims.extend(dims.iter().cloned());
    Ok(Inferred {
        inputs: smallvec::smallvec![Layout::from_dims(dims)],
        outputs: smallvec::smallvec![Layout::from_dims(out_dims)],
    })
}
