//! The Mixture-of-Experts routing kernels (`ir::ops::moe` states the drop rule). Local
//! shapes are whole groups (the rule `spmd::moe` splits tokens only so), so a rank routes
//! its groups exactly as the serial program does.

use crate::exec::tensor::Tensor;
use crate::ir::DType;

/// The routing attributes: choices per token, slots per expert and group, tokens per group
/// (the combine reads its `k` from the weights' shape).
#[derive(Clone, Copy, Debug)]
pub struct Routing {
    pub k: usize,
    pub capacity: usize,
    pub group_size: usize,
}

impl Routing {
    /// The row of `X`'s slot dim for token `s` at `index` (`e·C + position`), with
    /// `experts` experts of `slots` slots each: `(expert, group · C + position)`. `None` for
    /// a dropped choice (−1), and for an index outside the slots, which only a hand-written
    /// or fed `Index` can hold: it reads and writes nothing, as a dropped choice.
    fn row(&self, s: usize, index: i64, experts: usize, slots: usize) -> Option<usize> {
        let i = usize::try_from(index).ok()?;
        let (e, pos) = (i / self.capacity, i % self.capacity);
        let slot = (s / self.group_size.max(1)) * self.capacity + pos;
        (e < experts && slot < slots).then_some(e * slots + slot)
    }
}

/// Each token's top `k` experts, best first (ties to the lower expert, as a stable sort).
fn top_k(gates: &[f64], experts: usize, k: usize, s: usize) -> Vec<usize> {
    let row = &gates[s * experts..(s + 1) * experts];
    let mut order: Vec<usize> = (0..experts).collect();
    crate::sort::sort_by(&mut order, |&a, &b| row[b].total_cmp(&row[a]));
    order.truncate(k);
    order
}

/// `moe_dispatch`: `(Out [E, G·C, H], Weights [S, k], Index [k, S])`.
pub fn dispatch(x: &Tensor, gates: &Tensor, r: Routing) -> (Tensor, Tensor, Tensor) {
    let (s_n, h) = (x.shape[0], x.shape[1]);
    let e_n = gates.shape[1];
    let groups = s_n / r.group_size.max(1);
    let slots = groups * r.capacity;
    let (xv, gv) = (x.to_f64(), gates.to_f64());
    let mut out = vec![0.0; e_n * slots * h];
    let mut weights = vec![0.0; s_n * r.k];
    let mut index = vec![-1i64; r.k * s_n];
    let tops: Vec<Vec<usize>> = (0..s_n).map(|s| top_k(&gv, e_n, r.k, s)).collect();
    for g in 0..groups {
        let mut filled = vec![0usize; e_n];
        for j in 0..r.k {
            for s in g * r.group_size..(g + 1) * r.group_size {
                let e = tops[s][j];
                let pos = filled[e];
                filled[e] += 1;
                if pos >= r.capacity {
                    continue;
                }
                let i = (e * r.capacity + pos) as i64;
                index[j * s_n + s] = i;
                weights[s * r.k + j] = gv[s * e_n + e];
                let row = e * slots + g * r.capacity + pos;
                out[row * h..(row + 1) * h].copy_from_slice(&xv[s * h..(s + 1) * h]);
            }
        }
    }
    (
        Tensor::float(x.dtype(), vec![e_n, slots, h], out),
        Tensor::float(gates.dtype(), vec![s_n, r.k], weights),
        Tensor::float(
            DType::I64,
            vec![r.k, s_n],
            index.into_iter().map(|i| i as f64).collect(),
        ),
    )
}

/// `moe_dispatch_grad`: `(X@GRAD, Gates@GRAD)`; a missing output gradient counts as zero.
pub fn dispatch_grad(
    x: &Tensor,
    gates: &Tensor,
    index: &Tensor,
    d_out: Option<&Tensor>,
    d_weights: Option<&Tensor>,
    r: Routing,
) -> (Tensor, Tensor) {
    let (s_n, h) = (x.shape[0], x.shape[1]);
    let e_n = gates.shape[1];
    let idx = index.to_f64();
    let mut dx = vec![0.0; s_n * h];
    let mut dg = vec![0.0; s_n * e_n];
    let d_out = d_out.map(|t| (t.shape[1], t.to_f64()));
    let d_w = d_weights.map(Tensor::to_f64);
    for j in 0..r.k {
        for s in 0..s_n {
            let i = idx[j * s_n + s] as i64;
            if i < 0 {
                continue;
            }
            if let Some((slots, d)) = &d_out {
                if let Some(row) = r.row(s, i, e_n, *slots) {
                    for c in 0..h {
                        dx[s * h + c] += d[row * h + c];
                    }
                }
            }
            let e = i as usize / r.capacity;
            if let (Some(d), true) = (&d_w, e < e_n) {
                dg[s * e_n + e] += d[s * r.k + j];
            }
        }
    }
    (
        Tensor::float(x.dtype(), x.shape.clone(), dx),
        Tensor::float(gates.dtype(), gates.shape.clone(), dg),
    )
}

/// `moe_combine`: `Out [S, H]`, each token's kept rows weighted and summed.
pub fn combine(x: &Tensor, weights: &Tensor, index: &Tensor, r: Routing) -> Tensor {
    let (slots, h) = (x.shape[1], x.shape[2]);
    let s_n = weights.shape[0];
    let r = Routing {
        k: weights.shape[1],
        ..r
    };
    let (xv, w, idx) = (x.to_f64(), weights.to_f64(), index.to_f64());
    let mut out = vec![0.0; s_n * h];
    for s in 0..s_n {
        for j in 0..r.k {
            let Some(row) = r.row(s, idx[j * s_n + s] as i64, x.shape[0], slots) else {
                continue;
            };
            let wt = w[s * r.k + j];
            for c in 0..h {
                out[s * h + c] += wt * xv[row * h + c];
            }
        }
    }
    Tensor::float(x.dtype(), vec![s_n, h], out)
}

/// `moe_combine_grad`: `(X@GRAD, Weights@GRAD)`.
pub fn combine_grad(
    x: &Tensor,
    weights: &Tensor,
    index: &Tensor,
    d_out: &Tensor,
    r: Routing,
) -> (Tensor, Tensor) {
    let (slots, h) = (x.shape[1], x.shape[2]);
    let s_n = weights.shape[0];
    let r = Routing {
        k: weights.shape[1],
        ..r
    };
    let (xv, w, idx, d) = (x.to_f64(), weights.to_f64(), index.to_f64(), d_out.to_f64());
    let mut dx = vec![0.0; xv.len()];
    let mut dw = vec![0.0; s_n * r.k];
    for s in 0..s_n {
        for j in 0..r.k {
            let Some(row) = r.row(s, idx[j * s_n + s] as i64, x.shape[0], slots) else {
                continue;
            };
            let wt = w[s * r.k + j];
            let mut dot = 0.0;
            for c in 0..h {
                dx[row * h + c] += wt * d[s * h + c];
                dot += xv[row * h + c] * d[s * h + c];
            }
            dw[s * r.k + j] = dot;
        }
    }
    (
        Tensor::float(x.dtype(), x.shape.clone(), dx),
        Tensor::float(weights.dtype(), weights.shape.clone(), dw),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(shape: &[usize], v: &[f64]) -> Tensor {
        Tensor::float(DType::F64, shape.to_vec(), v.to_vec())
    }

    /// Four tokens, two experts, top-1, capacity 1, one group: tokens 0 and 2 prefer expert
    /// 0, so token 2 is dropped; token 1 takes expert 1 and token 3 is dropped after it.
    #[test]
    fn the_capacity_drops_later_tokens_of_a_group() {
        let x = t(&[4, 1], &[10.0, 20.0, 30.0, 40.0]);
        let gates = t(&[4, 2], &[0.9, 0.1, 0.2, 0.8, 0.7, 0.3, 0.4, 0.6]);
        let r = Routing {
            k: 1,
            capacity: 1,
            group_size: 4,
        };
        let (out, w, idx) = dispatch(&x, &gates, r);
        assert_eq!(out.to_f64(), vec![10.0, 20.0]);
        assert_eq!(w.to_f64(), vec![0.9, 0.8, 0.0, 0.0]);
        assert_eq!(idx.to_f64(), vec![0.0, 1.0, -1.0, -1.0]);
        let y = combine(&out, &w, &idx, r);
        assert_eq!(y.to_f64(), vec![9.0, 16.0, 0.0, 0.0]);
        // Two groups of two: each group has its own capacity, and nothing is dropped.
        let r2 = Routing { group_size: 2, ..r };
        let (out, w, idx) = dispatch(&x, &gates, r2);
        assert_eq!(out.shape, vec![2, 2, 1]);
        assert_eq!(out.to_f64(), vec![10.0, 30.0, 20.0, 40.0]);
        assert_eq!(idx.to_f64(), vec![0.0, 1.0, 0.0, 1.0]);
        assert_eq!(
            combine(&out, &w, &idx, r2).to_f64(),
            vec![9.0, 16.0, 21.0, 24.0]
        );
    }

    /// First choices outrank second choices: with capacity 1 and top-2, every slot goes to a
    /// first choice.
    #[test]
    fn first_choices_are_placed_before_second_choices() {
        let x = t(&[2, 1], &[1.0, 2.0]);
        let gates = t(&[2, 2], &[0.6, 0.4, 0.3, 0.7]);
        let r = Routing {
            k: 2,
            capacity: 1,
            group_size: 2,
        };
        let (_, w, idx) = dispatch(&x, &gates, r);
        assert_eq!(idx.to_f64(), vec![0.0, 1.0, -1.0, -1.0]);
        assert_eq!(w.to_f64(), vec![0.6, 0.0, 0.7, 0.0]);
    }

    /// An index outside the experts' slots (a fed or hand-written `Index`) reads and writes
    /// nothing, as a dropped choice, instead of indexing past the tensors.
    #[test]
    fn an_index_outside_the_slots_is_a_dropped_choice() {
        let x = t(&[2, 2, 1], &[1.0, 2.0, 3.0, 4.0]);
        let w = t(&[2, 1], &[1.0, 1.0]);
        let r = Routing {
            k: 1,
            capacity: 2,
            group_size: 2,
        };
        let idx = Tensor::float(DType::I64, vec![1, 2], vec![99.0, 3.0]);
        assert_eq!(combine(&x, &w, &idx, r).to_f64(), vec![0.0, 4.0]);
        let (dx, dw) = combine_grad(&x, &w, &idx, &t(&[2, 1], &[1.0, 1.0]), r);
        assert_eq!(
            (dx.to_f64(), dw.to_f64()),
            (vec![0.0, 0.0, 0.0, 1.0], vec![0.0, 4.0])
        );
        let gates = t(&[2, 2], &[0.5, 0.5, 0.5, 0.5]);
        let (gx, gg) = dispatch_grad(
            &t(&[2, 1], &[0.0, 0.0]),
            &gates,
            &idx,
            Some(&x),
            Some(&w),
            r,
        );
        assert_eq!(
            (gx.to_f64(), gg.to_f64()),
            (vec![0.0, 4.0], vec![0.0, 0.0, 0.0, 1.0])
        );
    }

    /// The grads are the transposes: ⟨dispatch(x), d⟩ = ⟨x, dispatch_grad(d)⟩ and the same
    /// for combine, on random values with drops.
    #[test]
    fn the_grads_are_the_adjoints() {
        let (s, e, h) = (6, 3, 2);
        let xs: Vec<f64> = (0..s * h).map(|i| (i as f64 * 0.37).sin()).collect();
        let gs: Vec<f64> = (0..s * e).map(|i| (i as f64 * 0.91).cos().abs()).collect();
        let x = t(&[s, h], &xs);
        let gates = t(&[s, e], &gs);
        let r = Routing {
            k: 2,
            capacity: 2,
            group_size: 3,
        };
        let (out, w, idx) = dispatch(&x, &gates, r);
        let d: Vec<f64> = (0..out.numel()).map(|i| (i as f64 * 0.13).cos()).collect();
        let d_out = t(&out.shape, &d);
        let (dx, _) = dispatch_grad(&x, &gates, &idx, Some(&d_out), None, r);
        let lhs: f64 = out.to_f64().iter().zip(&d).map(|(a, b)| a * b).sum();
        let rhs: f64 = xs.iter().zip(dx.to_f64()).map(|(a, b)| a * b).sum();
        assert!((lhs - rhs).abs() < 1e-12, "{lhs} {rhs}");
        let y = combine(&out, &w, &idx, r);
        let dy: Vec<f64> = (0..y.numel()).map(|i| (i as f64 * 0.71).sin()).collect();
        let (dxc, dw) = combine_grad(&out, &w, &idx, &t(&y.shape, &dy), r);
        let lhs: f64 = y.to_f64().iter().zip(&dy).map(|(a, b)| a * b).sum();
        let rhs: f64 = out
            .to_f64()
            .iter()
            .zip(dxc.to_f64())
            .map(|(a, b)| a * b)
            .sum();
        assert!((lhs - rhs).abs() < 1e-12, "{lhs} {rhs}");
        // combine is linear in the weights too.
        let rhs_w: f64 = w.to_f64().iter().zip(dw.to_f64()).map(|(a, b)| a * b).sum();
        assert!((lhs - rhs_w).abs() < 1e-12, "{lhs} {rhs_w}");
    }
}
