//! transpose: `out[i] = x[perm[i]]`.
//!
//! ```text
//! transpose(perm=[2,0,1]) x[0,1,-1]  =>  out [-1,0,1]
//! transpose(perm=[1,0])   x[0,0]       =>  out [0,-1]   (x read as [-1,0], Paddle 3.3.1)
//! ```

use super::{arg, check_rank, DimAxes, Dims, DistTensor, Inferred, Layout, Result, SpmdError};

fn check_perm(perm: &[usize], rank: usize) -> Result<()> {
    let mut seen = vec![false; rank];
    for &p in perm {
        if p >= rank || std::mem::replace(&mut seen[p], true) {
            return Err(SpmdError::NotPermutation {
                perm: perm.to_vec(),
                rank,
            });
        }
    }
    if perm.len() == rank {
        Ok(())
    } else {
        Err(SpmdError::NotPermutation {
            perm: perm.to_vec(),
            rank,
        })
    }
}

/// Forward: permute the input's dims.
pub fn forward(inputs: &[DistTensor], perm: &[usize]) -> Result<Inferred> {
    let x = arg(inputs, 0, "transpose")?;
    check_rank(x, "transpose X")?;
    check_perm(perm, x.shape.len())?;
    // An input that uses one mesh axis twice is read as Paddle reads it, through placements:
    // the last dim keeps the axis (x [0, 0] is [-1, 0]), and that is what is permuted. The
    // input's own mapping is returned unchanged, as Paddle does.
    let normal = super::einsum::normalize_through_placements(x.dims());
    let out: Dims = perm.iter().map(|&p| normal[p]).collect();
    Ok(Inferred {
        inputs: smallvec::smallvec![Layout::from_dims(x.dims().clone())],
        outputs: smallvec::smallvec![Layout::from_dims(out)],
    })
}

/// Backward: un-permute the output's dims.
pub fn backward(inputs: &[DistTensor], outputs: &[DistTensor], perm: &[usize]) -> Result<Inferred> {
    let x = arg(inputs, 0, "transpose")?;
    let out = arg(outputs, 0, "transpose")?;
    check_rank(out, "transpose Out")?;
    check_perm(perm, x.shape.len())?;
    let mut dims: Dims = smallvec::smallvec![DimAxes::WHOLE; x.shape.len()];
    for (i, &p) in perm.iter().enumerate() {
        dims[p] = out.dims()[i];
    }
    Ok(Inferred {
        inputs: smallvec::smallvec![Layout::from_dims(dims)],
        outputs: smallvec::smallvec![Layout::from_dims(out.dims().clone())],
    })
}
