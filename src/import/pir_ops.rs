//! Each trained Paddle op as the graph's nodes (`pir_lower.rs` drives it): ONNX's operator
//! where there is one (`pd_op.add` is `Add`, `pd_op.rsqrt` a `Sqrt` and a `Reciprocal`, a
//! `scale` a `Mul` and an `Add` by constants), a `pd_op` node where ShardLab translates
//! Paddle's op directly (`matmul` with its transposes, `silu`, the softmax cross-entropy).

use super::onnx_proto::TensorProto;
use super::pir::at;
use super::pir_lower::{attr_float, attr_int, attr_ints, element_type, Lower};
use super::pir_text::{PirOp, PirType};
use super::ImportError;

impl<'a> Lower<'_, 'a> {
    /// Lowers one trained op the loss needs.
    pub(super) fn op(&mut self, op: &'a PirOp) -> Result<(), ImportError> {
        let least = arity(&op.name);
        if op.operands.len() < least || op.results.is_empty() {
            return Err(self.error(
                op,
                format!("expected at least {least} operands and a result"),
            ));
        }
        let ins: Vec<String> = op.operands.iter().map(|x| self.name(x)).collect();
        let outs: Vec<String> = op.results.iter().map(|r| self.name(r)).collect();
        match op.name.as_str() {
            "builtin.parameter" => self.parameter(op),
            "builtin.combine" => {
                self.lists.insert(op.results[0].as_str(), ins);
            }
            "pd_op.embedding" => {
                let what = "the padding row is trained like any other";
                self.note_attr(op, "padding_idx", what);
                let ids_last = vec![ins[1].clone(), ins[0].clone()];
                self.push(
                    op,
                    "Gather",
                    None,
                    ids_last,
                    outs,
                    vec![attr_int("axis", 0)],
                );
            }
            "pd_op.matmul" | "pd_op.silu" | "pd_op.cross_entropy_with_softmax" => {
                self.paddle_node(op, ins, outs)
            }
            "pd_op.moe_dispatch" | "pd_op.moe_combine" => {
                let attrs = ["k", "capacity", "group_size"]
                    .into_iter()
                    .filter(|k| op.attr(k).is_some())
                    .map(|k| attr_int(k, self.int_attr(op, k, 1)))
                    .collect();
                let ty = op.name.trim_start_matches("pd_op.");
                self.push(op, ty, Some("pd_op"), ins, outs, attrs);
            }
            "pd_op.split_with_num" => {
                let axis = self.second_scalar(op, "the axis is computed, not constant")?;
                let attrs = vec![
                    attr_int("axis", axis as i64),
                    attr_int("num", self.int_attr(op, "num", 1)),
                ];
                self.push(op, "split", Some("pd_op"), ins[..1].to_vec(), outs, attrs);
            }
            "pd_op.stack" => {
                let list = op.operands.first().map(String::as_str).unwrap_or("");
                let xs = self.lists.get(list).cloned().ok_or_else(|| {
                    self.error(op, "the tensors to stack are not a builtin.combine")
                })?;
                let axis = attr_int("axis", self.int_attr(op, "axis", 0));
                self.push(op, "stack", Some("pd_op"), xs, outs, vec![axis]);
            }
            "pd_op.scale" => self.scale(op, ins, outs)?,
            "pd_op.mean" | "pd_op.sum" => self.reduce(op, ins, outs)?,
            "pd_op.slice" => self.slice(op, ins, outs)?,
            "pd_op.tile" => self.tile(op, ins, outs)?,
            "pd_op.concat" => self.concat(op, outs)?,
            _ => self.onnx_node(op, ins, outs)?,
        }
        Ok(())
    }

    /// A node of the `pd_op` domain: Paddle's op, translated directly.
    fn paddle_node(&mut self, op: &PirOp, ins: Vec<String>, outs: Vec<String>) {
        let flag = |k: &str| i64::from(op.attr(k).and_then(|a| a.flag()).unwrap_or(false));
        let (ty, attrs) = match op.name.as_str() {
            "pd_op.matmul" => {
                let attrs = vec![
                    attr_int("transpose_x", flag("transpose_x")),
                    attr_int("transpose_y", flag("transpose_y")),
                ];
                ("matmul", attrs)
            }
            "pd_op.silu" => ("silu", Vec::new()),
            _ => {
                let what = "every label is a class (the fed labels are)";
                self.note_attr(op, "ignore_index", what);
                let attrs = vec![
                    attr_int("soft_label", flag("soft_label")),
                    attr_int("axis", self.int_attr(op, "axis", -1)),
                ];
                ("cross_entropy_with_softmax", attrs)
            }
        };
        self.push(op, ty, Some("pd_op"), ins, outs, attrs);
    }

    /// The ops with an ONNX operator of their own (two for `rsqrt`).
    fn onnx_node(
        &mut self,
        op: &PirOp,
        ins: Vec<String>,
        outs: Vec<String>,
    ) -> Result<(), ImportError> {
        let number = |k: &str| op.attr(k).and_then(|a| a.number());
        let flag = |k: &str| op.attr(k).and_then(|a| a.flag()).unwrap_or(false);
        let x = ins[..1].to_vec();
        let (ty, ins, attrs) = match op.name.as_str() {
            "pd_op.add" => ("Add", ins, Vec::new()),
            "pd_op.subtract" => ("Sub", ins, Vec::new()),
            "pd_op.multiply" => ("Mul", ins, Vec::new()),
            "pd_op.divide" => ("Div", ins, Vec::new()),
            "pd_op.relu" => ("Relu", x, Vec::new()),
            "pd_op.sigmoid" => ("Sigmoid", x, Vec::new()),
            "pd_op.reshape" => ("Reshape", ins, Vec::new()),
            "pd_op.unsqueeze" => ("Unsqueeze", ins, Vec::new()),
            "pd_op.expand" => ("Expand", ins, Vec::new()),
            "pd_op.share_data_" | "pd_op.assign" => ("Identity", x, Vec::new()),
            "pd_op.dropout" => ("Dropout", x, Vec::new()),
            "pd_op.pow" => {
                let y = self.scalar(op, "y", number("y").unwrap_or(1.0));
                ("Pow", vec![ins[0].clone(), y], Vec::new())
            }
            "pd_op.rsqrt" => {
                let root = format!("{}.sqrt", outs[0]);
                self.push(op, "Sqrt", None, x, vec![root.clone()], Vec::new());
                ("Reciprocal", vec![root], Vec::new())
            }
            "pd_op.gelu" => {
                let mut a = attr_int("approximate", 0);
                a.i = None;
                a.s = Some(if flag("approximate") {
                    b"tanh".to_vec()
                } else {
                    b"none".to_vec()
                });
                ("Gelu", x, vec![a])
            }
            "pd_op.softmax" => (
                "Softmax",
                x,
                vec![attr_int("axis", self.int_attr(op, "axis", -1))],
            ),
            "pd_op.transpose" => {
                let perm = op.attr("perm").and_then(|a| a.ints()).unwrap_or_default();
                ("Transpose", x, vec![attr_ints("perm", perm)])
            }
            "pd_op.cast" => {
                let to = op
                    .attr("dtype")
                    .and_then(|a| a.text())
                    .and_then(element_type);
                let to =
                    to.ok_or_else(|| self.error(op, "a cast to a type ShardLab does not model"))?;
                ("Cast", x, vec![attr_int("to", i64::from(to))])
            }
            "pd_op.layer_norm" => {
                let attrs = vec![
                    attr_int("axis", self.int_attr(op, "begin_norm_axis", -1)),
                    attr_float("epsilon", number("epsilon").unwrap_or(1e-5)),
                ];
                ("LayerNormalization", ins, attrs)
            }
            other => return Err(self.error(op, format!("`{other}` is not lowered"))),
        };
        self.push(op, ty, None, ins, outs, attrs);
        Ok(())
    }

    /// The constant scalar `op` reads second (a scale's factor, a concat's axis), or an
    /// error saying `what` it is instead.
    fn second_scalar(&self, op: &PirOp, what: &str) -> Result<f64, ImportError> {
        let v = op.operands.get(1).and_then(|v| self.known(v));
        v.and_then(|v| v.first().copied())
            .ok_or_else(|| self.error(op, what))
    }

    fn int_attr(&self, op: &PirOp, name: &str, default: i64) -> i64 {
        op.attr(name)
            .and_then(|a| a.number())
            .map_or(default, |x| x as i64)
    }

    /// Says that `op`'s attribute `name` is not modelled, when it is set (not −1 or absent).
    fn note_attr(&mut self, op: &PirOp, name: &str, what: &str) {
        if let Some(v) = op
            .attr(name)
            .and_then(|a| a.number())
            .filter(|&v| v != -1.0)
        {
            self.notes.push(format!(
                "{}: {} {name} {v} is not modelled: {what}",
                at(op),
                op.name
            ));
        }
    }

    /// A trainable parameter: an initializer without values.
    fn parameter(&mut self, op: &PirOp) {
        let Some(r) = op.results.first() else { return };
        let name = self.name(r);
        let (dims, elem) = match op.result_types.first() {
            Some(PirType::Tensor { dims, dtype }) => {
                (dims.clone(), element_type(dtype).unwrap_or(0))
            }
            _ => (Vec::new(), 0),
        };
        self.emitted.insert(name.clone());
        self.graph.initializer.push(TensorProto {
            dims,
            data_type: Some(elem),
            name: Some(name),
            ..Default::default()
        });
    }

    /// `scale(x, s)`: `x · s + bias` (or `(x + bias) · s`) as a `Mul` and an `Add` by
    /// constants, each left out when it does nothing (an `Identity` when both do).
    fn scale(
        &mut self,
        op: &PirOp,
        ins: Vec<String>,
        outs: Vec<String>,
    ) -> Result<(), ImportError> {
        let s = self.second_scalar(op, "a scale by a computed tensor")?;
        let bias = op.attr("bias").and_then(|a| a.number()).unwrap_or(0.0);
        let after = op
            .attr("bias_after_scale")
            .and_then(|a| a.flag())
            .unwrap_or(true);
        let mut steps: Vec<(&str, f64)> = vec![("Mul", s), ("Add", bias)];
        if !after {
            steps.reverse();
        }
        steps.retain(|&(ty, c)| if ty == "Mul" { c != 1.0 } else { c != 0.0 });
        if steps.is_empty() {
            self.push(op, "Identity", None, ins[..1].to_vec(), outs, Vec::new());
            return Ok(());
        }
        let mut x = ins[0].clone();
        let last = steps.len() - 1;
        for (k, (ty, c)) in steps.into_iter().enumerate() {
            let c = self.scalar(op, &ty.to_ascii_lowercase(), c);
            let out = if k == last {
                outs[0].clone()
            } else {
                format!("{}.{k}", outs[0])
            };
            self.push(op, ty, None, vec![x, c], vec![out.clone()], Vec::new());
            x = out;
        }
        Ok(())
    }

    /// `mean`/`sum` over constant axes (none: all) as `ReduceMean`/`ReduceSum`.
    fn reduce(
        &mut self,
        op: &PirOp,
        ins: Vec<String>,
        outs: Vec<String>,
    ) -> Result<(), ImportError> {
        let axes = op.operands.get(1).map(|v| self.known(v));
        let axes = match axes {
            None => Vec::new(),
            Some(Some(a)) => a.iter().map(|&x| x as i64).collect(),
            Some(None) => return Err(self.error(op, "the axes are computed, not constant")),
        };
        let mut attrs = vec![attr_int(
            "keepdims",
            i64::from(op.attr("keepdim").and_then(|a| a.flag()).unwrap_or(false)),
        )];
        if !axes.is_empty() {
            attrs.push(attr_ints("axes", axes));
        }
        let ty = if op.name == "pd_op.sum" {
            "ReduceSum"
        } else {
            "ReduceMean"
        };
        self.push(op, ty, None, ins[..1].to_vec(), outs, attrs);
        Ok(())
    }

    /// `tile(x, repeats)` that repeats only dims of size 1 (grouped-query attention's
    /// `repeat_kv` in Qwen2's code): a broadcast, so ONNX's `Expand` to the result's shape.
    fn tile(&mut self, op: &PirOp, ins: Vec<String>, outs: Vec<String>) -> Result<(), ImportError> {
        let repeats = self
            .known(&op.operands[1])
            .ok_or_else(|| self.error(op, "the repeats are computed, not constant"))?;
        let dims = |t: Option<&PirType>| match t {
            Some(PirType::Tensor { dims, .. }) => Some(dims.clone()),
            _ => None,
        };
        let (Some(x), Some(out)) = (
            dims(self.ty(&op.operands[0])),
            dims(op.result_types.first()),
        ) else {
            return Err(self.error(op, "the input's or the result's shape is not known"));
        };
        let broadcast =
            x.len() == repeats.len() && x.iter().zip(&repeats).all(|(&d, &r)| r == 1.0 || d == 1);
        if !broadcast {
            return Err(self.error(
                op,
                "a tile that repeats a dim larger than 1 (ShardLab imports tiles of size-1 dims, \
                 which are broadcasts)",
            ));
        }
        let shape = self.ints(op, "shape", out);
        self.push(
            op,
            "Expand",
            None,
            vec![ins[0].clone(), shape],
            outs,
            Vec::new(),
        );
        Ok(())
    }

    /// `slice(x, starts, ends)` on `axes` as ONNX's `Slice` (one that drops axes is refused).
    fn slice(
        &mut self,
        op: &PirOp,
        ins: Vec<String>,
        outs: Vec<String>,
    ) -> Result<(), ImportError> {
        let dropped = op
            .attr("decrease_axis")
            .and_then(|a| a.ints())
            .unwrap_or_default();
        if !dropped.is_empty() || ins.len() < 3 {
            return Err(self.error(op, "a slice that drops axes (decrease_axis)"));
        }
        let axes = op.attr("axes").and_then(|a| a.ints()).unwrap_or_default();
        let axes = self.ints(op, "axes", axes);
        let mut inputs = ins[..3].to_vec();
        inputs.push(axes);
        self.push(op, "Slice", None, inputs, outs, Vec::new());
        Ok(())
    }

    /// `concat(combine(xs…), axis)` as ONNX's `Concat`.
    fn concat(&mut self, op: &PirOp, outs: Vec<String>) -> Result<(), ImportError> {
        let list = op.operands.first().map(String::as_str).unwrap_or("");
        let xs = self.lists.get(list).cloned().ok_or_else(|| {
            self.error(op, "the tensors to concatenate are not a builtin.combine")
        })?;
        let axis = self.second_scalar(op, "the axis is computed, not constant")?;
        self.push(
            op,
            "Concat",
            None,
            xs,
            outs,
            vec![attr_int("axis", axis as i64)],
        );
        Ok(())
    }
}

/// The fewest operands each lowered op reads (its list, for `concat`).
fn arity(name: &str) -> usize {
    match name {
        "builtin.parameter" | "builtin.combine" => 0,
        "pd_op.embedding"
        | "pd_op.matmul"
        | "pd_op.add"
        | "pd_op.subtract"
        | "pd_op.multiply"
        | "pd_op.divide"
        | "pd_op.scale"
        | "pd_op.reshape"
        | "pd_op.unsqueeze"
        | "pd_op.expand"
        | "pd_op.concat"
        | "pd_op.split_with_num"
        | "pd_op.tile"
        | "pd_op.moe_dispatch"
        | "pd_op.cross_entropy_with_softmax" => 2,
        "pd_op.slice" | "pd_op.moe_combine" => 3,
        _ => 1,
    }
}
