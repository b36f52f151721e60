//! A Paddle program (`pir.rs`'s analysis) as the graph the ONNX import reads: each trained
//! op the loss needs becomes the ONNX nodes that compute it (or a `pd_op` node where ONNX
//! has no equivalent ShardLab translates: `matmul` with its transposes, `silu`,
//! `cross_entropy_with_softmax`), trainable parameters become initializers, and the values
//! those ops read from the untrained part become inputs or constants.

use super::onnx_proto::{
    data_type, AttributeProto, Dimension, GraphProto, NodeProto, TensorProto, TensorShapeProto,
    TypeProto, TypeProtoTensor, ValueInfoProto,
};
use super::pir::{at, Program};
use super::pir_text::{PirOp, PirType};
use super::{ImportError, UnsupportedOps};
use std::collections::{HashMap, HashSet};

/// The Paddle ops the import lowers (when a trainable parameter reaches them).
pub const LOWERED: &[&str] = &[
    "builtin.parameter",
    "builtin.combine",
    "pd_op.embedding",
    "pd_op.matmul",
    "pd_op.add",
    "pd_op.subtract",
    "pd_op.multiply",
    "pd_op.divide",
    "pd_op.scale",
    "pd_op.pow",
    "pd_op.mean",
    "pd_op.sum",
    "pd_op.rsqrt",
    "pd_op.silu",
    "pd_op.gelu",
    "pd_op.relu",
    "pd_op.softmax",
    "pd_op.reshape",
    "pd_op.transpose",
    "pd_op.unsqueeze",
    "pd_op.expand",
    "pd_op.slice",
    "pd_op.concat",
    "pd_op.cast",
    "pd_op.layer_norm",
    "pd_op.dropout",
    "pd_op.share_data_",
    "pd_op.assign",
    "pd_op.cross_entropy_with_softmax",
    "pd_op.sigmoid",
    "pd_op.tile",
    "pd_op.split_with_num",
    "pd_op.stack",
    "pd_op.moe_dispatch",
    "pd_op.moe_combine",
];

pub(super) struct Lower<'p, 'a> {
    pub(super) p: &'p Program<'a>,
    pub(super) graph: GraphProto,
    pub(super) notes: Vec<String>,
    /// The values already in the graph (as a node's output, an input or a constant).
    pub(super) emitted: HashSet<String>,
    /// Each value's name in the graph.
    pub(super) names: HashMap<&'a str, String>,
    /// `builtin.combine`'s lists, by value.
    pub(super) lists: HashMap<&'a str, Vec<String>>,
}

/// Lowers the ops the loss needs; returns the graph and what the lowering decided.
pub(super) fn lower(p: &Program) -> Result<(GraphProto, Vec<String>), ImportError> {
    refuse_unsupported(p)?;
    let mut l = Lower {
        p,
        graph: GraphProto::default(),
        notes: Vec::new(),
        emitted: HashSet::new(),
        names: names(p.ops),
        lists: HashMap::new(),
    };
    let mut left_out: Vec<&str> = Vec::new();
    for (i, op) in p.ops.iter().enumerate() {
        if !op.results.iter().any(|r| p.trained.contains(r.as_str())) {
            continue;
        }
        if !p.needed.contains(&i) {
            left_out.push(&op.name);
            continue;
        }
        for x in &op.operands {
            if !p.trained.contains(x.as_str()) {
                l.leaf(x)?;
            }
        }
        l.op(op)?;
    }
    if !left_out.is_empty() {
        l.notes.push(format!(
            "{} ops with a gradient do not reach the loss and are left out ({})",
            left_out.len(),
            left_out.join(", ")
        ));
    }
    let loss = l.name(p.loss);
    l.graph.output.push(ValueInfoProto {
        name: Some(loss),
        r#type: None,
    });
    Ok((l.graph, l.notes))
}

/// Lists the trained ops the import does not lower, each with its count and first lines.
fn refuse_unsupported(p: &Program) -> Result<(), ImportError> {
    let mut needed: Vec<usize> = p.needed.iter().copied().collect();
    needed.sort_unstable();
    let missing = needed
        .into_iter()
        .map(|i| &p.ops[i])
        .filter(|op| !LOWERED.contains(&op.name.as_str()))
        .map(|op| (op.name.clone(), at(op)));
    UnsupportedOps::check(missing)
}

/// Each value's name in the graph: a parameter's `parameter_name`, an input's `name`,
/// else the op's short name and the value's number (`%90` of `pd_op.matmul` is
/// `matmul_90`), so a note or an error leads back to the program's line.
fn names(ops: &[PirOp]) -> HashMap<&str, String> {
    let mut out = HashMap::new();
    for op in ops {
        let given = match op.name.as_str() {
            "builtin.parameter" => op.attr("parameter_name"),
            "pd_op.data" => op.attr("name"),
            _ => None,
        }
        .and_then(|a| a.text())
        .filter(|s| !s.is_empty() && op.results.len() == 1);
        let short = op
            .name
            .rsplit('.')
            .next()
            .unwrap_or("v")
            .trim_end_matches('_');
        for r in &op.results {
            let name = match given {
                Some(g) => g.to_string(),
                None => format!("{short}_{}", r.trim_start_matches('%')),
            };
            out.insert(r.as_str(), name);
        }
    }
    out
}

pub(super) fn attr_int(name: &str, i: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        i: Some(i),
        ..Default::default()
    }
}

pub(super) fn attr_float(name: &str, f: f64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        f: Some(f as f32),
        ..Default::default()
    }
}

pub(super) fn attr_ints(name: &str, ints: Vec<i64>) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        ints,
        ..Default::default()
    }
}

/// ONNX's element type of Paddle's (`f32`, `i64`, `b`, ...).
pub(super) fn element_type(dtype: &str) -> Option<i32> {
    Some(match dtype {
        "f32" | "float32" => data_type::FLOAT,
        "f64" | "float64" => data_type::DOUBLE,
        "f16" | "float16" => data_type::FLOAT16,
        "bf16" | "bfloat16" => data_type::BFLOAT16,
        "i64" | "int64" => data_type::INT64,
        "i32" | "int32" => data_type::INT32,
        "b" | "bool" => data_type::BOOL,
        _ => return None,
    })
}

impl<'a> Lower<'_, 'a> {
    pub(super) fn name(&self, v: &str) -> String {
        self.names.get(v).cloned().unwrap_or_else(|| v.to_string())
    }

    pub(super) fn error(&self, op: &PirOp, message: impl Into<String>) -> ImportError {
        ImportError::Node {
            node: at(op),
            op_type: op.name.clone(),
            message: message.into(),
        }
    }

    /// The op defining `v`, and `v`'s result index.
    fn def(&self, v: &str) -> (&'a PirOp, usize) {
        let (i, k) = self.p.def.get(v).copied().unwrap_or((0, 0));
        (&self.p.ops[i], k)
    }

    /// `v`'s type (`None` for a result the op does not type).
    pub(super) fn ty(&self, v: &str) -> Option<&'a PirType> {
        let (op, k) = self.def(v);
        op.result_types.get(k)
    }

    pub(super) fn push(
        &mut self,
        op: &PirOp,
        ty: &str,
        domain: Option<&str>,
        ins: Vec<String>,
        outs: Vec<String>,
        attrs: Vec<AttributeProto>,
    ) {
        self.emitted.extend(outs.iter().cloned());
        self.graph.node.push(NodeProto {
            input: ins,
            output: outs,
            name: Some(at(op)),
            op_type: Some(ty.into()),
            domain: domain.map(str::to_string),
            attribute: attrs,
        });
    }

    /// A constant node named `name`.
    fn constant(&mut self, op: &PirOp, name: String, t: TensorProto) {
        let value = AttributeProto {
            name: Some("value".into()),
            t: Some(t),
            ..Default::default()
        };
        self.push(op, "Constant", None, Vec::new(), vec![name], vec![value]);
    }

    /// A fresh constant scalar for `op`.
    pub(super) fn scalar(&mut self, op: &PirOp, tag: &str, x: f64) -> String {
        let name = format!("{}.{tag}", at(op).replace(' ', "_"));
        let t = TensorProto {
            data_type: Some(data_type::DOUBLE),
            double_data: vec![x],
            name: Some(name.clone()),
            ..Default::default()
        };
        self.constant(op, name.clone(), t);
        name
    }

    /// A fresh constant list of integers for `op`.
    pub(super) fn ints(&mut self, op: &PirOp, tag: &str, ints: Vec<i64>) -> String {
        let name = format!("{}.{tag}", at(op).replace(' ', "_"));
        let t = TensorProto {
            dims: vec![ints.len() as i64],
            data_type: Some(data_type::INT64),
            int64_data: ints,
            name: Some(name.clone()),
            ..Default::default()
        };
        self.constant(op, name.clone(), t);
        name
    }

    /// The value of a `full` or `full_int_array` (`None` for anything else).
    pub(super) fn known(&self, v: &str) -> Option<Vec<f64>> {
        let (op, _) = self.def(v);
        match op.name.as_str() {
            "pd_op.full_int_array" => {
                let ints = op.attr("value")?.ints()?;
                Some(ints.iter().map(|&x| x as f64).collect())
            }
            "pd_op.full" => {
                let shape = op.attr("shape").and_then(|a| a.ints()).unwrap_or_default();
                let n: i64 = shape.iter().product();
                (n <= 1).then_some(vec![op.attr("value")?.number()?])
            }
            _ => None,
        }
    }

    /// An untrained value a trained op reads: a fed input, a constant, or a table the
    /// program computes from its inputs and constants (fed as an input).
    fn leaf(&mut self, v: &str) -> Result<(), ImportError> {
        let name = self.name(v);
        if self.emitted.contains(&name) {
            return Ok(());
        }
        let (op, _) = self.def(v);
        let ty = self.ty(v).cloned();
        let Some(PirType::Tensor { dims, dtype }) = ty else {
            return Err(self.error(op, format!("`{v}` is not a tensor")));
        };
        let elem = element_type(&dtype)
            .ok_or_else(|| self.error(op, format!("element type `{dtype}` of `{v}`")))?;
        if let Some(values) = self.known(v) {
            let int = matches!(elem, data_type::INT64 | data_type::INT32 | data_type::BOOL);
            let t = TensorProto {
                dims: dims.clone(),
                data_type: Some(if int {
                    data_type::INT64
                } else {
                    data_type::DOUBLE
                }),
                int64_data: if int {
                    values.iter().map(|&x| x as i64).collect()
                } else {
                    Vec::new()
                },
                double_data: if int { Vec::new() } else { values },
                name: Some(name.clone()),
                ..Default::default()
            };
            self.constant(op, name, t);
            return Ok(());
        }
        if dims.contains(&0) {
            // An empty tensor (an empty KV cache): a constant the import concatenates away.
            let t = TensorProto {
                dims,
                data_type: Some(data_type::FLOAT),
                name: Some(name.clone()),
                ..Default::default()
            };
            self.constant(op, name, t);
            return Ok(());
        }
        if op.name != "pd_op.data" {
            self.notes.push(format!(
                "{}: `{name}` {dims:?} is computed from the program's inputs and constants only \
                 ({}): an input, not imported",
                at(op),
                op.name
            ));
        }
        let dim = dims
            .iter()
            .map(|&d| Dimension {
                dim_value: (d >= 0).then_some(d),
                dim_param: None,
            })
            .collect();
        self.emitted.insert(name.clone());
        self.graph.input.push(ValueInfoProto {
            name: Some(name),
            r#type: Some(TypeProto {
                tensor_type: Some(TypeProtoTensor {
                    elem_type: Some(elem),
                    shape: Some(TensorShapeProto { dim }),
                }),
            }),
        });
        Ok(())
    }
}
