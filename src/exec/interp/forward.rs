//! Forward ops: one method per op family, each computing its outputs from its inputs.

use super::{perm, Rank};
use crate::exec::kernels::layout::{concat, lookup, slice_axis, split, transpose};
use crate::exec::kernels::matmul::matmul;
use crate::exec::kernels::normalize::{layer_norm, reduce, softmax, softmax_ce};
use crate::exec::kernels::pointwise::{binary, dropout, unary, unary_in_place, Binary, Unary};
use crate::exec::tensor::Tensor;
use crate::ir::infer::{axis, reduce_axes, reshape_target, split_sections};
use crate::ir::{DType, Op, OpType, TensorType};

use crate::exec::op_error::OpError;

type Res = Result<(), OpError>;

impl Rank<'_> {
    pub(super) fn matmul(&mut self, op: &Op) -> Res {
        let out = matmul(
            self.slot(op, "X")?,
            self.slot(op, "Y")?,
            op.attr_bool("trans_x", false),
            op.attr_bool("trans_y", false),
        )?;
        self.set(op, "Out", out);
        Ok(())
    }

    pub(super) fn binary(&mut self, op: &Op, kind: Binary) -> Res {
        let out = binary(
            kind,
            self.slot(op, "X")?,
            self.slot(op, "Y")?,
            op.attr_int("axis", -1),
        )?;
        self.set(op, "Out", out);
        Ok(())
    }

    pub(super) fn unary(&mut self, op: &Op, kind: Unary) -> Res {
        if let Some(t) = self.in_place(op, "X", "Out") {
            unary_in_place(kind, t);
            return Ok(());
        }
        let out = unary(kind, self.slot(op, "X")?);
        self.set(op, "Out", out);
        Ok(())
    }

    pub(super) fn cast(&mut self, op: &Op) -> Res {
        let dtype = op
            .attr_str("out_dtype")
            .and_then(DType::from_name)
            .ok_or(OpError::BadAttr("out_dtype"))?;
        let t = self.slot(op, "X")?;
        self.set(op, "Out", Tensor::float(dtype, t.shape.clone(), t.to_f64()));
        Ok(())
    }

    pub(super) fn assign(&mut self, op: &Op) -> Res {
        let t = self.slot(op, "X")?.clone();
        self.set(op, "Out", t);
        Ok(())
    }

    pub(super) fn dropout(&mut self, op: &Op) -> Res {
        let t = self.slot(op, "X")?;
        let out_var = op.output("Out").first().copied();
        let shape = t.shape.clone();
        let placement = self.placement;
        // The mask follows the element's global index, so every rank drops the same ones.
        let global = |i: usize| match (placement, out_var) {
            (Some(p), Some(v)) => p.global_index(v, &shape, i),
            (None, _) | (_, None) => i,
        };
        let (out, mask) = dropout(
            t,
            op.attr_float("dropout_prob", 0.5),
            op.attr_int("seed", 0) as u64,
            op.attr_bool("is_test", false),
            &global,
        );
        self.set(op, "Out", out);
        self.set(op, "Mask", mask);
        Ok(())
    }

    /// Softmax over `axis` (plain), or the causal softmax over the last two dims.
    pub(super) fn softmax(&mut self, op: &Op, causal: bool) -> Res {
        let t = self.slot(op, "X")?;
        let a = if causal {
            t.shape.len().saturating_sub(1)
        } else {
            axis(op.attr_int("axis", -1), t.shape.len(), "axis").map_err(OpError::Attr)?
        };
        self.set(op, "Out", softmax(t, a, causal));
        Ok(())
    }

    pub(super) fn layer_norm(&mut self, op: &Op) -> Res {
        let t = self.slot(op, "X")?;
        let begin = op.attr_int("begin_norm_axis", 1) as usize;
        let (y, m, v) = layer_norm(
            t,
            self.opt_slot(op, "Scale"),
            self.opt_slot(op, "Bias"),
            begin,
            op.attr_float("epsilon", 1e-5),
        );
        self.set(op, "Y", y);
        self.set(op, "Mean", m);
        self.set(op, "Variance", v);
        Ok(())
    }

    /// `lookup_table_v2` (the whole table: an id outside it is bad input) or the
    /// vocab-parallel `c_embedding` (a range of rows; ids outside it give zeros).
    pub(super) fn lookup(&mut self, op: &Op, vocab_shard: bool) -> Res {
        let pad = if vocab_shard {
            -1
        } else {
            op.attr_int("padding_idx", -1)
        };
        let (w, ids) = (self.slot(op, "W")?, self.slot(op, "Ids")?);
        if !vocab_shard {
            let rows = w.shape.first().copied().unwrap_or(0) as i64;
            // A padding id is a row of the table too; -1 means "no padding" (Paddle's
            // kNoPadding), not a valid id.
            if let Some(bad) = ids.to_i64().into_iter().find(|&i| i < 0 || i >= rows) {
                return Err(OpError::TokenId { id: bad, rows });
            }
        }
        let out = lookup(w, ids, op.attr_int("start_index", 0), pad);
        self.set(op, "Out", out);
        Ok(())
    }

    pub(super) fn reshape(&mut self, op: &Op) -> Res {
        let t = self.slot(op, "X")?.clone();
        let ty = TensorType::new(t.dtype(), t.shape.clone());
        let shape =
            reshape_target(&ty, op.attr_ints("shape").unwrap_or(&[])).map_err(OpError::Attr)?;
        self.set(op, "Out", t.reshaped(shape));
        Ok(())
    }

    pub(super) fn transpose(&mut self, op: &Op) -> Res {
        let t = self.slot(op, "X")?;
        let perm = perm(op, t.shape.len())?;
        self.set(op, "Out", transpose(t, &perm));
        Ok(())
    }

    pub(super) fn split(&mut self, op: &Op) -> Res {
        let t = self.slot(op, "X")?;
        let ty = TensorType::new(t.dtype(), t.shape.clone());
        let (a, sizes) = split_sections(op, &ty).map_err(OpError::Attr)?;
        let parts = split(t, a, &sizes);
        for (&v, p) in op.output("Out").iter().zip(parts) {
            self.set_var(v, p);
        }
        Ok(())
    }

    pub(super) fn concat(&mut self, op: &Op) -> Res {
        let xs = self.inputs(op, "X")?;
        let rank = xs.first().map_or(0, |t| t.shape.len());
        let a = axis(op.attr_int("axis", 0), rank, "axis").map_err(OpError::Attr)?;
        let out = concat(&xs, a)?;
        self.set(op, "Out", out);
        Ok(())
    }

    /// The elementwise sum of every X (gradient accumulation, clipping's norms).
    pub(super) fn sum(&mut self, op: &Op) -> Res {
        let xs = self.inputs(op, "X")?;
        let first = xs.first().ok_or(OpError::Empty("sum"))?;
        let mut acc = first.to_f64();
        for t in &xs[1..] {
            acc.iter_mut().zip(t.to_f64()).for_each(|(a, b)| *a += b);
        }
        let out = Tensor::float(first.dtype(), first.shape.clone(), acc);
        self.set(op, "Out", out);
        Ok(())
    }

    /// reduce_sum, reduce_mean (`mean`), or `mean` of every element (`all`).
    pub(super) fn reduce(&mut self, op: &Op, mean: bool, all: bool) -> Res {
        let t = self.slot(op, "X")?;
        let (axes, keep) = if all {
            ((0..t.shape.len()).collect(), false)
        } else {
            (
                reduce_axes(op, t.shape.len()).map_err(OpError::Attr)?,
                op.attr_bool("keep_dim", false),
            )
        };
        let out = reduce(t, &axes, keep, mean);
        self.set(op, "Out", out);
        Ok(())
    }

    pub(super) fn squared_l2_norm(&mut self, op: &Op) -> Res {
        let t = self.slot(op, "X")?;
        let s: f64 = t.to_f64().iter().map(|v| v * v).sum();
        self.set(op, "Out", Tensor::float(t.dtype(), vec![], vec![s]));
        Ok(())
    }

    pub(super) fn softmax_ce(&mut self, op: &Op) -> Res {
        let logits = self.slot(op, "Logits")?;
        let a = axis(op.attr_int("axis", -1), logits.shape.len(), "axis").map_err(OpError::Attr)?;
        let (sm, loss) = softmax_ce(
            logits,
            self.slot(op, "Label")?,
            a,
            op.attr_bool("soft_label", false),
        )?;
        self.set(op, "Softmax", sm);
        self.set(op, "Loss", loss);
        Ok(())
    }

    pub(super) fn fill_constant(&mut self, op: &Op) -> Res {
        let attr = op
            .attr_str("dtype")
            .and_then(DType::from_name)
            .ok_or(OpError::BadAttr("dtype"))?;
        // The output's declared dtype where it has one: a run in f64 promotes the f32
        // variables, and a seed of 1/M made in f32 would round (1/3 by 3·10⁻⁸, a false FAIL
        // of every gradient under 3 micro-batches).
        let dtype = op
            .output("Out")
            .first()
            .map_or(attr, |&v| self.program.var(v).ty.dtype);
        let shape: Vec<usize> = op
            .attr_ints("shape")
            .unwrap_or(&[])
            .iter()
            .map(|&d| d.max(0) as usize)
            .collect();
        let n = shape.iter().product();
        let out = Tensor::float(dtype, shape, vec![op.attr_float("value", 0.0); n]);
        self.set(op, "Out", out);
        Ok(())
    }

    /// The reshard's local slice of `Input` along `axes`.
    /// The rank-local ops that only move data: a reshard's slice, ZeRO's flat buffers.
    pub(super) fn move_data(&mut self, op: &Op) -> Res {
        if op.ty == OpType::FlattenPad {
            self.flatten_pad(op)
        } else if op.ty == OpType::UnpadReshape {
            self.unpad_reshape(op)
        } else if op.ty == OpType::Pad {
            let x = self.slot(op, "X")?;
            let axis = usize::try_from(op.attr_int("axis", 0)).unwrap_or(usize::MAX);
            let pad = usize::try_from(op.attr_int("pad_size", 0)).unwrap_or(0);
            let out = crate::exec::kernels::layout::pad_axis(x, axis, pad)?;
            self.set(op, "Out", out);
            Ok(())
        } else {
            self.slice(op)
        }
    }

    /// A gradient bucket: `coalesce_tensor` concatenates its inputs' values into one flat
    /// buffer; `uncoalesce_tensor` cuts the buffer back into them.
    pub(super) fn bucket(&mut self, op: &Op) -> Res {
        if op.ty == OpType::CoalesceTensor {
            let mut values = Vec::new();
            let mut dtype = crate::ir::DType::F32;
            for &v in op.input("Input") {
                let t = self.get(v)?;
                dtype = t.dtype();
                values.extend(t.to_f64());
            }
            let n = values.len();
            self.set(op, "FusedOutput", Tensor::float(dtype, vec![n], values));
            return Ok(());
        }
        let fused = self.slot(op, "FusedOutput")?.clone();
        let mut start = 0;
        for (&like, &out) in op.input("Input").iter().zip(op.output("Output")) {
            let shape = self.get(like)?.shape.clone();
            let n: usize = shape.iter().product();
            let part = fused.flat_range(start, start + n).reshaped(shape);
            start += n;
            self.set_var(out, part);
        }
        Ok(())
    }

    /// ZeRO's flat buffer: the values flattened and zero-padded to `numel`.
    fn flatten_pad(&mut self, op: &Op) -> Res {
        let t = self.slot(op, "X")?;
        let numel = usize::try_from(op.attr_int("numel", 0))
            .map_err(|_| OpError::NegativeDim(op.attr_int("numel", 0)))?;
        if numel < t.numel() {
            return Err(OpError::FlattenPad {
                numel,
                x: t.numel(),
            });
        }
        let out = t.flat_range(0, numel);
        self.set(op, "Out", out);
        Ok(())
    }

    /// The first elements of a flat buffer, reshaped to `shape`.
    fn unpad_reshape(&mut self, op: &Op) -> Res {
        let t = self.slot(op, "X")?;
        let shape: Vec<usize> = op
            .attr_ints("shape")
            .unwrap_or(&[])
            .iter()
            .map(|&d| usize::try_from(d).map_err(|_| OpError::NegativeDim(d)))
            .collect::<Result<_, _>>()?;
        let numel = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        let numel = numel
            .filter(|&n| n <= t.numel())
            .ok_or_else(|| OpError::UnpadReshape {
                shape: shape.clone(),
                numel: t.numel(),
            })?;
        let out = t.flat_range(0, numel).reshaped(shape);
        self.set(op, "Out", out);
        Ok(())
    }

    fn slice(&mut self, op: &Op) -> Res {
        let mut t = self.slot(op, "Input")?.clone();
        let (axes, starts, ends) = (
            op.attr_ints("axes").unwrap_or(&[]),
            op.attr_ints("starts").unwrap_or(&[]),
            op.attr_ints("ends").unwrap_or(&[]),
        );
        for ((&a, &s), &e) in axes.iter().zip(starts).zip(ends) {
            let a = axis(a, t.shape.len(), "axes").map_err(OpError::Attr)?;
            t = slice_axis(
                &t,
                a,
                s.max(0) as usize,
                (e.max(0) as usize).min(t.shape[a]),
            );
        }
        self.set(op, "Out", t);
        Ok(())
    }
}

/// gelu's kernel: exact, or the tanh approximation.
pub(super) fn gelu(op: &Op) -> Unary {
    Unary::Gelu {
        tanh: op.attr_bool("approximate", false),
    }
}

/// scale's kernel: `scale · x + bias`, the bias before or after the scale.
pub(super) fn scale(op: &Op) -> Unary {
    Unary::Scale {
        scale: op.attr_float("scale", 1.0),
        bias: op.attr_float("bias", 0.0),
        bias_after: op.attr_bool("bias_after_scale", true),
    }
}
