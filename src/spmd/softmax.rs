//! softmax and the causal fused softmax: the normalised axes must be replicated.
//!
//! ```text
//! softmax(axis=-1) x[0,1,-1]   =>  x, out [0,1,-1]
//! softmax(axis=-1) x[0,-1,1]   =>  x wanted [0,-1,-1] (a reshard), out [0,-1,-1]
//! ```

use super::{arg, check_rank, replicate, DistTensor, Inferred, Layout, Result};

/// Forward: the input with the softmax axes replicated; the output the same.
pub fn forward(inputs: &[DistTensor], axes: &[usize]) -> Result<Inferred> {
    let x = arg(inputs, 0, "softmax")?;
    check_rank(x, "softmax X")?;
    let dims = replicate(x.dims(), axes);
    Ok(Inferred {
        inputs: smallvec::smallvec![Layout::from_dims(dims.clone())],
        outputs: smallvec::smallvec![Layout::from_dims(dims)],
    })
}

/// Backward: the output with the softmax axes replicated decides both.
pub fn backward(inputs: &[DistTensor], outputs: &[DistTensor], axes: &[usize]) -> Result<Inferred> {
    let _ = arg(inputs, 0, "softmax")?;
    let out = arg(outputs, 0, "softmax")?;
    check_rank(out, "softmax Out")?;
    let dims = replicate(out.dims(), axes);
    Ok(Inferred {
        inputs: smallvec::smallvec![Layout::from_dims(dims.clone())],
        outputs: smallvec::smallvec![Layout::from_dims(dims)],
    })
}
