//! softmax_with_cross_entropy: logits `abc`, hard labels `ab1`, soft labels `abc`;
//! outputs softmax `abc` and loss `ab1`.
//!
//! ```text
//! logits[0,-1,1] label[0,-1,-1] (hard, axis -1)  =>  softmax [0,-1,1], loss [0,-1,-1]
//! logits[0,-1,1] soft label                       =>  error: class axis split with soft labels
//! ```
//! The class axis may be split only when it is the last axis and labels are hard (the
//! vocab-parallel cross-entropy); otherwise it is an error, as in Paddle.

use super::einsum::{letters, merge, AxisMap, OnAxisConflict, OnMeshConflict};
use super::{arg, check_rank, DistTensor, Inferred, Layout, Result, SpmdError};

fn notation(rank: usize, axis: usize, soft: bool) -> (String, String) {
    let ll = letters(rank);
    let label: String = ll
        .chars()
        .enumerate()
        .map(|(d, l)| if d == axis && !soft { '1' } else { l })
        .collect();
    (ll.to_string(), label)
}

fn result(
    map: &AxisMap,
    ll: &str,
    label: &str,
    axis: usize,
    rank: usize,
    soft: bool,
) -> Result<Inferred> {
    let class = ll.chars().nth(axis).unwrap_or('a');
    let class_axes = map.get(class);
    if !class_axes.is_empty() {
        if soft {
            return Err(SpmdError::SoftLabelSharded);
        }
        if axis + 1 != rank {
            return Err(SpmdError::ClassAxisNotLast { axis, rank });
        }
    }
    let logits = map.dims(ll);
    let loss: String = ll
        .chars()
        .enumerate()
        .map(|(d, l)| if d == axis { '1' } else { l })
        .collect();
    Ok(Inferred {
        inputs: smallvec::smallvec![
            Layout::from_dims(logits.clone()),
            Layout::from_dims(map.dims(label)),
        ],
        outputs: smallvec::smallvec![
            Layout::from_dims(logits),
            Layout::from_dims(map.dims(&loss)),
        ],
    })
}

/// Forward from logits and label.
pub fn forward(inputs: &[DistTensor], axis: usize, soft: bool) -> Result<Inferred> {
    let (logits, label) = (
        arg(inputs, 0, "cross_entropy")?,
        arg(inputs, 1, "cross_entropy")?,
    );
    check_rank(logits, "cross_entropy Logits")?;
    check_rank(label, "cross_entropy Label")?;
    let rank = logits.shape.len();
    let (ll, lab) = notation(rank, axis, soft);
    let map = merge(
        &[(&ll, logits.dims()), (&lab, label.dims())],
        OnAxisConflict::Error,
        OnMeshConflict::KeepFirst,
        None,
    )?;
    result(&map, &ll, &lab, axis, rank, soft)
}

/// Backward from softmax and loss.
pub fn backward(
    inputs: &[DistTensor],
    outputs: &[DistTensor],
    axis: usize,
    soft: bool,
) -> Result<Inferred> {
    let logits = arg(inputs, 0, "cross_entropy")?;
    let rank = logits.shape.len();
    let (ll, lab) = notation(rank, axis, soft);
    let loss: String = ll
        .chars()
        .enumerate()
        .map(|(d, l)| if d == axis { '1' } else { l })
        .collect();
    let mut pairs = Vec::new();
    if let Some(s) = outputs.first() {
        check_rank(s, "cross_entropy Softmax")?;
        pairs.push((ll.as_str(), s.dims()));
    }
    if let Some(l) = outputs.get(1) {
        check_rank(l, "cross_entropy Loss")?;
        pairs.push((loss.as_str(), l.dims()));
    }
    let map = merge(
        &pairs,
        OnAxisConflict::Error,
        OnMeshConflict::KeepFirst,
        None,
    )?;
    result(&map, &ll, &lab, axis, rank, soft)
}
