//! embedding / lookup_table_v2: `ab,jk->abk` (ids, table -> out).
//!
//! ```text
//! ids[0,-1] table[-1,-1]  =>  out [0,-1,-1]
//! ids[0,-1] table[1,-1]   =>  out [0,-1,-1] partial{1: SUM}   (vocab parallel)
//! ids[0,-1] table[-1,0]   =>  error: mesh axis 0 on two letters
//! ```
//! A vocab-split table with a padding_idx is an error (Paddle raises too).

use super::einsum::{letters, merge, OnAxisConflict, OnMeshConflict};
use super::{arg, check_rank, DistTensor, Inferred, Layout, Result, SpmdError};
use crate::dist::ReduceType;

/// Forward from ids and table.
pub fn forward(inputs: &[DistTensor], padding_idx: i64) -> Result<Inferred> {
    let (ids, table) = (arg(inputs, 0, "embedding")?, arg(inputs, 1, "embedding")?);
    check_rank(ids, "embedding Ids")?;
    check_rank(table, "embedding W")?;
    let il = letters(ids.shape.len());
    let ol = format!("{il}k");
    let map = merge(
        &[(il, ids.dims()), ("jk", table.dims())],
        OnAxisConflict::Error,
        OnMeshConflict::Error,
        None,
    )?;
    let vocab = map.get('j');
    if !vocab.is_empty() && padding_idx != -1 {
        return Err(SpmdError::PaddedVocabSharded {
            padding_idx,
            axes: vocab.iter().copied().collect(),
        });
    }
    let partial = vocab.iter().map(|&a| (a, ReduceType::Sum)).collect();
    Ok(Inferred {
        inputs: smallvec::smallvec![
            Layout::from_dims(map.dims(il)),
            Layout::from_dims(map.dims("jk")),
        ],
        outputs: smallvec::smallvec![Layout {
            dims: map.dims(&ol),
            partial,
        }],
    })
}

/// Backward from the output: ids take the leading dims, the table its width dim.
pub fn backward(inputs: &[DistTensor], outputs: &[DistTensor]) -> Result<Inferred> {
    let ids = arg(inputs, 0, "embedding")?;
    let out = arg(outputs, 0, "embedding")?;
    check_rank(out, "embedding Out")?;
    let il = letters(ids.shape.len());
    let ol = format!("{il}k");
    let map = merge(
        &[(&ol, out.dims())],
        OnAxisConflict::Error,
        OnMeshConflict::KeepFirst,
        None,
    )?;
    Ok(Inferred {
        inputs: smallvec::smallvec![
            Layout::from_dims(map.dims(il)),
            Layout::from_dims(map.dims("jk")),
        ],
        outputs: smallvec::smallvec![Layout::from_dims(out.dims().clone())],
    })
}
