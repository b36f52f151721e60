//! The vocab-parallel softmax cross-entropy (Paddle's `c_softmax_with_cross_entropy`,
//! Megatron's vocab-parallel loss), in the local steps around its three all-reduces.
//!
//! Each rank holds the columns `[start, start + V_local)` of every row of logits, split on
//! the last (class) axis. With `M` the row max over all columns, `S = Σ exp(x − M)` and
//! `t = x[label] − M`:
//!
//! 1. `row_max` → all_reduce MAX → `M`;
//! 2. `target_logit` (zero on the ranks that do not hold the label's column) → all_reduce
//!    SUM → `t`;
//! 3. `exp_sums` → all_reduce SUM → `S`;
//! 4. `finish`: softmax `exp(x − M) / S` on the local columns, loss `ln S − t`.
//!
//! The gradient needs no communication: `dLogits = dLoss · (softmax − onehot(label − start))`
//! on the local columns. So the logits are never gathered.

use crate::exec::tensor::Tensor;

use crate::exec::op_error::OpError;

type Res<T> = Result<T, OpError>;

/// (rows, local columns) of a tensor whose last axis is the class axis.
fn rows_cols(t: &Tensor) -> (usize, usize) {
    let cols = t.shape.last().copied().unwrap_or(1);
    (
        t.shape[..t.shape.len().saturating_sub(1)].iter().product(),
        cols,
    )
}

/// The `[.., 1]` shape of a per-row value.
fn row_shape(t: &Tensor) -> Vec<usize> {
    let mut s = t.shape.clone();
    if let Some(last) = s.last_mut() {
        *last = 1;
    }
    s
}

/// The max of each row's local columns.
pub fn row_max(logits: &Tensor) -> Tensor {
    let (rows, cols) = rows_cols(logits);
    let x = logits.to_f64();
    let m = (0..rows)
        .map(|r| {
            x[r * cols..(r + 1) * cols]
                .iter()
                .fold(f64::NEG_INFINITY, |a, &b| a.max(b))
        })
        .collect();
    Tensor::float(logits.dtype(), row_shape(logits), m)
}

/// Each row's `x[label] − M` if this rank holds the label's column, else 0. A label outside
/// the `classes` of the whole vocabulary is an error (on every rank alike).
pub fn target_logit(
    logits: &Tensor,
    label: &Tensor,
    max: &Tensor,
    start: i64,
    classes: usize,
) -> Res<Tensor> {
    let (rows, cols) = rows_cols(logits);
    let (x, lab, m) = (logits.to_f64(), label.to_f64(), max.to_f64());
    if lab.len() != rows || m.len() != rows {
        return Err(OpError::VocabRows {
            rows,
            label: lab.len(),
            max: m.len(),
        });
    }
    let mut t = vec![0.0; rows];
    for r in 0..rows {
        let c = lab[r] as i64;
        if c < 0 || c as u64 >= classes as u64 {
            return Err(OpError::Label { label: c, classes });
        }
        let local = c - start;
        if (0..cols as i64).contains(&local) {
            t[r] = x[r * cols + local as usize] - m[r];
        }
    }
    Ok(Tensor::float(logits.dtype(), row_shape(logits), t))
}

/// `exp(x − M)` on the local columns (kept in f64 for `finish`) and each row's local sum.
pub fn exp_sums(logits: &Tensor, max: &Tensor) -> (Vec<f64>, Tensor) {
    let (rows, cols) = rows_cols(logits);
    let (x, m) = (logits.to_f64(), max.to_f64());
    let mut e = vec![0.0; x.len()];
    let mut sums = vec![0.0; rows];
    for r in 0..rows {
        let mr = m.get(r).copied().unwrap_or(0.0);
        for c in 0..cols {
            let v = (x[r * cols + c] - mr).exp();
            e[r * cols + c] = v;
            sums[r] += v;
        }
    }
    (e, Tensor::float(logits.dtype(), row_shape(logits), sums))
}

/// The local softmax columns and the loss from the exponentials and the reduced sums.
pub fn finish(logits: &Tensor, exps: &[f64], sum: &Tensor, target: &Tensor) -> (Tensor, Tensor) {
    let (rows, cols) = rows_cols(logits);
    let (s, t) = (sum.to_f64(), target.to_f64());
    let mut sm = vec![0.0; exps.len()];
    let mut loss = vec![0.0; rows];
    for r in 0..rows.min(s.len()).min(t.len()) {
        for c in 0..cols {
            sm[r * cols + c] = exps[r * cols + c] / s[r];
        }
        loss[r] = s[r].ln() - t[r];
    }
    (
        Tensor::float(logits.dtype(), logits.shape.clone(), sm),
        Tensor::float(logits.dtype(), row_shape(logits), loss),
    )
}

/// `dLogits = dLoss · (softmax − onehot(label − start))` on the local columns.
pub fn grad(sm: &Tensor, label: &Tensor, dloss: &Tensor, start: i64) -> Tensor {
    let (rows, cols) = rows_cols(sm);
    let (s, lab, dl) = (sm.to_f64(), label.to_f64(), dloss.to_f64());
    let mut out = vec![0.0; s.len()];
    for r in 0..rows.min(lab.len()).min(dl.len()) {
        let local = lab[r] as i64 - start;
        for c in 0..cols {
            let onehot = f64::from(local == c as i64);
            out[r * cols + c] = dl[r] * (s[r * cols + c] - onehot);
        }
    }
    Tensor::float(sm.dtype(), sm.shape.clone(), out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::DType;

    /// Two ranks' halves of one row give the whole row's softmax and loss.
    #[test]
    fn halves_make_the_whole() {
        let row = [0.5, -1.0, 2.0, 0.25];
        let label = Tensor::float(DType::F64, vec![1, 1], vec![2.0]);
        let halves: Vec<Tensor> = [0, 2]
            .iter()
            .map(|&s| Tensor::float(DType::F64, vec![1, 2], row[s..s + 2].to_vec()))
            .collect();
        let m = halves
            .iter()
            .map(|h| row_max(h).to_f64()[0])
            .fold(f64::NEG_INFINITY, f64::max);
        let m = Tensor::float(DType::F64, vec![1, 1], vec![m]);
        let t: f64 = halves
            .iter()
            .zip([0, 2])
            .map(|(h, s)| target_logit(h, &label, &m, s, 4).unwrap().to_f64()[0])
            .sum();
        let parts: Vec<_> = halves.iter().map(|h| exp_sums(h, &m)).collect();
        let s: f64 = parts.iter().map(|(_, s)| s.to_f64()[0]).sum();
        let whole: f64 = row.iter().map(|x| (x - 2.0f64).exp()).sum();
        let want_loss = whole.ln() - 0.0; // the label's logit is the max
        let (sm0, loss) = finish(
            &halves[0],
            &parts[0].0,
            &Tensor::float(DType::F64, vec![1, 1], vec![s]),
            &Tensor::float(DType::F64, vec![1, 1], vec![t]),
        );
        assert!((loss.to_f64()[0] - want_loss).abs() < 1e-12);
        assert!((sm0.to_f64()[1] - (-1.0f64 - 2.0).exp() / whole).abs() < 1e-12);
        assert!(target_logit(&halves[0], &label, &m, 0, 4).is_ok());
        let bad = Tensor::float(DType::F64, vec![1, 1], vec![4.0]);
        assert_eq!(
            target_logit(&halves[0], &bad, &m, 0, 4).unwrap_err(),
            OpError::Label {
                label: 4,
                classes: 4
            }
        );
    }
}
