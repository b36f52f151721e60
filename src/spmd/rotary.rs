//! The rotary position embedding, as PaddlePaddle 3.3.1's `FusedRopeInferSpmd` with one
//! tensor (q; no k, v or position ids): head_dim, whose elements rotate in pairs, is
//! replicated; batch, sequence and heads keep their split, and the sin and cos tables take
//! the sequence's.
//!
//! ```text
//! rope x[0,1,-1,1] sin[-1,-1,-1,-1]  =>  x wanted [0,1,-1,-1], sin/cos [-1,1,-1,-1], out [0,1,-1,-1]
//! ```

use super::einsum::{merge, OnAxisConflict, OnMeshConflict};
use super::{arg, check_rank, DimAxes, Dims, DistTensor, Inferred, Layout, Result, SpmdError};

const AXES: &str = "abcd";

fn result(dims: Dims) -> Inferred {
    let mut x = dims;
    x[3] = DimAxes::WHOLE;
    let table: Dims = [DimAxes::WHOLE, x[1], DimAxes::WHOLE, DimAxes::WHOLE]
        .into_iter()
        .collect();
    Inferred {
        inputs: smallvec::smallvec![
            Layout::from_dims(x.clone()),
            Layout::from_dims(table.clone()),
            Layout::from_dims(table),
        ],
        outputs: smallvec::smallvec![Layout::from_dims(x)],
    }
}

/// The one tensor's mapping with a mesh axis used twice kept on its first dim.
fn merged(t: &DistTensor, what: &'static str) -> Result<Dims> {
    check_rank(t, what)?;
    if t.shape.len() != 4 {
        return Err(SpmdError::RotaryRank {
            what,
            rank: t.shape.len(),
        });
    }
    let map = merge(
        &[(AXES, t.dims())],
        OnAxisConflict::Error,
        OnMeshConflict::KeepFirst,
        None,
    )?;
    Ok(map.dims(AXES))
}

/// Forward from x (the tables' own splits do not count, as in Paddle).
pub fn forward(inputs: &[DistTensor]) -> Result<Inferred> {
    let x = arg(inputs, 0, "rotary")?;
    Ok(result(merged(x, "rotary X")?))
}

/// Backward from the output.
pub fn backward(outputs: &[DistTensor]) -> Result<Inferred> {
    let out = arg(outputs, 0, "rotary")?;
    Ok(result(merged(out, "rotary Out")?))
}
