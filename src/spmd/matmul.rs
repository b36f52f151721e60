//! matmul: `mk,kn->mn` with broadcast batch letters.
//!
//! ```text
//! x[-1,1] @ y[1,-1]   =>  out [-1,-1] partial{1: SUM}        (row parallel)
//! x[0,-1] @ y[-1,1]   =>  out [0,1]                           (column parallel)
//! x[-1,1] @ y[0,-1]   =>  k co-sharded [1,0]; out partial{0,1: SUM} (Paddle 3.3.1)
//! ```
//! A split k gives a SUM partial and is propagated to both inputs; size-1 (broadcast) dims
//! are replicated, their shard moving to the other operand. A mesh axis claimed by two
//! letters stays with the output's (batch, m, n before k); a co-shard lists the larger mesh
//! axis first.

use super::einsum::{letter_sizes, letters, merge, AxisMap, OnAxisConflict, OnMeshConflict, Sizes};
use super::{arg, check_rank, DimAxes, Dims, DistTensor, Inferred, Layout, Result, SpmdError};
use crate::dist::ReduceType;

/// Which letter keeps a mesh axis that several claim (Paddle 3.3.1): the output's letters in
/// order (batch letters, then m, then n), then the contracted k. `x[-1,0] @ y[-1,0]` keeps n
/// on mesh axis 0 and replicates k; `x[0,-1] @ y[-1,0]` keeps m.
const KEEP_ORDER: &str = "abcdefghijlopqrstuvwxyzmnk";

/// Operand ranks whose notation is built once and kept (see [`notation_of`]).
const KEPT_RANKS: usize = 8;

/// Letters of x, y and out, built once per pair of ranks up to [`KEPT_RANKS`]: rules run
/// for every matmul of every completion sweep.
fn notation_of(x_rank: usize, y_rank: usize) -> Result<std::borrow::Cow<'static, Notation>> {
    static KEPT: std::sync::OnceLock<Vec<Result<Notation>>> = std::sync::OnceLock::new();
    if x_rank >= KEPT_RANKS || y_rank >= KEPT_RANKS {
        return notation(x_rank, y_rank).map(std::borrow::Cow::Owned);
    }
    let kept = KEPT.get_or_init(|| {
        (0..KEPT_RANKS * KEPT_RANKS)
            .map(|i| notation(i / KEPT_RANKS, i % KEPT_RANKS))
            .collect()
    });
    match &kept[x_rank * KEPT_RANKS + y_rank] {
        Ok(n) => Ok(std::borrow::Cow::Borrowed(n)),
        Err(e) => Err(e.clone()),
    }
}

/// The letters of x, y and out.
type Notation = (String, String, String);

/// Letters of x, y and out (Paddle's `FillMatmulOperandNotation`).
pub fn notation(x_rank: usize, y_rank: usize) -> Result<Notation> {
    let batch = |rank: usize, max: usize| -> String {
        let all = letters(max.saturating_sub(2));
        all.chars()
            .skip(max.saturating_sub(2) - rank.saturating_sub(2))
            .collect()
    };
    Ok(match (x_rank, y_rank) {
        (1, 1) => ("k".into(), "k".into(), String::new()),
        (1, y) => {
            let b = batch(y, y);
            ("k".into(), format!("{b}kn"), format!("{b}n"))
        }
        (x, 1) => {
            let b = batch(x, x);
            (format!("{b}mk"), "k".into(), format!("{b}m"))
        }
        (x, y) if x > 1 && y > 1 => {
            let max = x.max(y);
            let (bx, by) = (batch(x, max), batch(y, max));
            let out = if x > y {
                format!("{bx}mn")
            } else {
                format!("{by}mn")
            };
            (format!("{bx}mk"), format!("{by}kn"), out)
        }
        _ => {
            return Err(SpmdError::MatmulRanks {
                x: x_rank,
                y: y_rank,
            })
        }
    })
}

fn swap_last_two<T>(v: &mut [T], trans: bool) {
    let n = v.len();
    if trans && n >= 2 {
        v.swap(n - 1, n - 2);
    }
}

/// The dims of an operand from the merged letters: size-1 dims replicated, transposed back.
fn operand_dims(map: &AxisMap, letters: &str, shape: &[usize], trans: bool) -> Dims {
    let mut dims: Dims = letters
        .chars()
        .zip(shape)
        .map(|(l, &s)| if s == 1 { DimAxes::WHOLE } else { map.get(l) })
        .collect();
    swap_last_two(&mut dims, trans);
    dims
}

/// Forward: merge x and y (co-sharding a conflicting letter), out from the merged letters,
/// SUM-partial on the mesh axes of k.
pub fn forward(
    mesh: &[usize],
    inputs: &[DistTensor],
    trans_x: bool,
    trans_y: bool,
) -> Result<Inferred> {
    let (x, y) = (arg(inputs, 0, "matmul")?, arg(inputs, 1, "matmul")?);
    check_rank(x, "matmul X")?;
    check_rank(y, "matmul Y")?;
    let n = notation_of(x.shape.len(), y.shape.len())?;
    let (xl, yl, ol) = (&n.0, &n.1, &n.2);
    let (mut xd, mut yd) = (x.dims().clone(), y.dims().clone());
    let (mut xs, mut ys) = (x.shape.clone(), y.shape.clone());
    swap_last_two(&mut xd, trans_x);
    swap_last_two(&mut yd, trans_y);
    swap_last_two(&mut xs, trans_x);
    swap_last_two(&mut ys, trans_y);
    let sizes = Sizes {
        letters: letter_sizes(&[(xl, &xs), (yl, &ys)]),
        mesh,
    };
    let map = merge(
        &[(xl, &xd), (yl, &yd)],
        OnAxisConflict::CoShard,
        OnMeshConflict::KeepByPriority(KEEP_ORDER),
        Some(&sizes),
    )?;
    let out = Layout {
        dims: map.dims(ol),
        partial: map
            .contracted_axes(ol)
            .into_iter()
            .map(|a| (a, ReduceType::Sum))
            .collect(),
    };
    Ok(Inferred {
        inputs: smallvec::smallvec![
            Layout::from_dims(operand_dims(&map, xl, &xs, trans_x)),
            Layout::from_dims(operand_dims(&map, yl, &ys, trans_y)),
        ],
        outputs: smallvec::smallvec![out],
    })
}

/// Backward: the output's letters alone decide both operands; k stays replicated.
pub fn backward(
    inputs: &[DistTensor],
    outputs: &[DistTensor],
    trans_x: bool,
    trans_y: bool,
) -> Result<Inferred> {
    let (x, y) = (arg(inputs, 0, "matmul")?, arg(inputs, 1, "matmul")?);
    let out = arg(outputs, 0, "matmul")?;
    check_rank(out, "matmul Out")?;
    let n = notation_of(x.shape.len(), y.shape.len())?;
    let (xl, yl, ol) = (&n.0, &n.1, &n.2);
    if ol.len() != out.shape.len() {
        return Err(SpmdError::MatmulOutputRank {
            inputs: ol.len(),
            output: out.shape.len(),
        });
    }
    let map = merge(
        &[(ol, out.dims())],
        OnAxisConflict::Error,
        OnMeshConflict::KeepFirst,
        None,
    )?;
    let (mut xs, mut ys) = (x.shape.clone(), y.shape.clone());
    swap_last_two(&mut xs, trans_x);
    swap_last_two(&mut ys, trans_y);
    Ok(Inferred {
        inputs: smallvec::smallvec![
            Layout::from_dims(operand_dims(&map, xl, &xs, trans_x)),
            Layout::from_dims(operand_dims(&map, yl, &ys, trans_y)),
        ],
        outputs: smallvec::smallvec![Layout::from_dims(out.dims().clone())],
    })
}
