//! ONNX to ShardLab's IR, node by node in the graph's (topological) order. Each supported
//! operator becomes the Paddle op it is (MatMul → `matmul_v2`, LayerNormalization →
//! `layer_norm`, Gather of a weight by ids → `lookup_table_v2`, ...); shapes come from
//! ShardLab's own inference, so a graph whose ops disagree with their declared shapes is
//! refused at the node. Operators outside the table are counted first and refused together
//! (each with its count and first nodes), before any translation.

use super::onnx_proto::{
    data_type, GraphProto, ModelProto, NodeProto, TensorProto, ValueInfoProto,
};
use super::{ImportError, ImportOptions, Imported, UnsupportedOps};
use crate::ir::{Attr, Builder, DType, OpRole, OpType, VarId};
use prost::Message;
use std::collections::{HashMap, HashSet};

/// The operators an import translates.
pub const SUPPORTED: &[&str] = &[
    "MatMul",
    "Gemm",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Relu",
    "Gelu",
    "Softmax",
    "LayerNormalization",
    "Reshape",
    "Transpose",
    "Gather",
    "Identity",
    "Dropout",
    "Constant",
];

/// Constants whose values an import reads (shapes, scalars): at most this many elements.
const MAX_CONSTANT_VALUES: usize = 1 << 16;

/// A value of the graph: a variable of the program, or a constant (an initializer or a
/// `Constant` node) not yet made one.
#[derive(Clone, Debug)]
enum Value {
    Var(VarId),
    Const(Constant),
}

#[derive(Clone, Debug)]
struct Constant {
    name: String,
    dtype: DType,
    dims: Vec<usize>,
    /// The values, for small constants (see [`MAX_CONSTANT_VALUES`]).
    values: Option<Vec<f64>>,
}

struct Importer<'a> {
    b: Builder,
    opts: &'a ImportOptions,
    values: HashMap<String, Value>,
    /// Program names taken so far.
    used: HashSet<String>,
    notes: Vec<String>,
}

/// Imports the ONNX model in `bytes`.
pub fn import(bytes: &[u8], opts: &ImportOptions) -> Result<Imported, ImportError> {
    let model = ModelProto::decode(bytes).map_err(|e| ImportError::Decode(e.to_string()))?;
    let graph = model.graph.as_ref().ok_or(ImportError::NoGraph)?;
    let census = census(graph);
    let fused = super::onnx_fuse::gelus(graph);
    let in_pattern: HashSet<usize> = fused.iter().flat_map(|f| f.nodes.iter().copied()).collect();
    refuse_unsupported(graph, &in_pattern)?;
    let mut im = Importer {
        b: Builder::new(),
        opts,
        values: HashMap::new(),
        used: HashSet::new(),
        notes: Vec::new(),
    };
    for t in &graph.initializer {
        let c = constant(t)?;
        im.define("initializer", &c.name.clone(), Value::Const(c))?;
    }
    for input in &graph.input {
        let name = input.name.clone().unwrap_or_default();
        if !im.values.contains_key(&name) {
            im.input(input)?;
        }
    }
    for (i, node) in graph.node.iter().enumerate() {
        match fused.iter().find(|f| f.nodes.first() == Some(&i)) {
            Some(f) => im.gelu(&node_name(i, node), f)?,
            None if in_pattern.contains(&i) => {}
            None => im.node(i, node)?,
        }
    }
    let out = graph.output.first().ok_or(ImportError::NoOutput)?;
    let out_name = out.name.clone().unwrap_or_default();
    let y = im.var("graph output", &out_name)?;
    im.b.set_role(OpRole::Loss);
    let loss = im.fresh("loss");
    im.b.op1(OpType::Mean, vec![vec![y]], &[], &loss)
        .map_err(|e| node_error("loss", "Mean", e))?;
    im.notes.push(format!(
        "the loss is the mean of the graph's output `{out_name}` (an inference graph has none)"
    ));
    Ok(Imported {
        program: im.b.finish(),
        notes: im.notes,
        census,
    })
}

/// Every operator type of `graph` with its node count, most frequent first.
fn census(graph: &GraphProto) -> Vec<(String, usize)> {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for node in &graph.node {
        let ty = node.op_type.clone().unwrap_or_default();
        match counts.iter_mut().find(|(t, _)| *t == ty) {
            Some((_, n)) => *n += 1,
            None => counts.push((ty, 1)),
        }
    }
    crate::sort::sort_by_key(&mut counts, |(t, n)| (std::cmp::Reverse(*n), t.clone()));
    counts
}

/// Refuses a graph with operators outside [`SUPPORTED`] (or outside ONNX's default
/// domain), listing each with its count and its first three nodes.
fn refuse_unsupported(graph: &GraphProto, fused: &HashSet<usize>) -> Result<(), ImportError> {
    let mut missing: Vec<(String, usize, Vec<String>)> = Vec::new();
    for (i, node) in graph.node.iter().enumerate() {
        if fused.contains(&i) {
            continue;
        }
        let ty = node.op_type.as_deref().unwrap_or("");
        let domain = node.domain.as_deref().unwrap_or("");
        let known = SUPPORTED.contains(&ty) && (domain.is_empty() || domain == "ai.onnx");
        if known {
            continue;
        }
        let ty = if domain.is_empty() {
            ty.to_string()
        } else {
            format!("{domain}.{ty}")
        };
        let name = node_name(i, node);
        match missing.iter_mut().find(|(t, _, _)| *t == ty) {
            Some((_, n, names)) => {
                *n += 1;
                if names.len() < 3 {
                    names.push(name);
                }
            }
            None => missing.push((ty, 1, vec![name])),
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    crate::sort::sort_by_key(&mut missing, |(t, n, _)| (std::cmp::Reverse(*n), t.clone()));
    Err(ImportError::Unsupported(UnsupportedOps(missing)))
}

/// A node's name, or `#i (OpType)` for an unnamed one.
fn node_name(i: usize, node: &NodeProto) -> String {
    match node.name.as_deref() {
        Some(n) if !n.is_empty() => n.to_string(),
        _ => format!("#{i} ({})", node.op_type.as_deref().unwrap_or("?")),
    }
}

fn node_error(node: &str, op_type: &str, e: impl std::fmt::Display) -> ImportError {
    ImportError::Node {
        node: node.to_string(),
        op_type: op_type.to_string(),
        message: e.to_string(),
    }
}

/// ONNX's element type as ShardLab's: floats of 16 bits are priced as f32 (the planner's
/// layouts do not depend on it), integers as i64.
fn dtype(value: &str, ty: i32) -> Result<DType, ImportError> {
    match ty {
        data_type::FLOAT | data_type::FLOAT16 | data_type::BFLOAT16 => Ok(DType::F32),
        data_type::DOUBLE => Ok(DType::F64),
        data_type::INT64 | data_type::INT32 => Ok(DType::I64),
        other => Err(ImportError::ElementType {
            value: value.to_string(),
            ty: other,
        }),
    }
}

/// A dim as a size (1 to 2^53).
fn size(value: &str, dim: usize, d: i64) -> Result<usize, ImportError> {
    let ok = d >= 1 && (d as u64) <= crate::ir::MAX_ELEMENTS;
    ok.then_some(d as usize).ok_or(ImportError::BadDim {
        value: value.to_string(),
        dim,
        size: d,
    })
}

/// An initializer or a `Constant` node's tensor, its values read when it is small.
fn constant(t: &TensorProto) -> Result<Constant, ImportError> {
    let name = t.name.clone().unwrap_or_default();
    let ty = t.data_type.unwrap_or(0);
    let dtype = dtype(&name, ty)?;
    let dims = t
        .dims
        .iter()
        .enumerate()
        .map(|(i, &d)| size(&name, i, d))
        .collect::<Result<Vec<_>, _>>()?;
    let numel = crate::ir::TensorType::new(dtype, dims.clone())
        .checked_numel()
        .ok_or(ImportError::BadDim {
            value: name.clone(),
            dim: 0,
            size: i64::MAX,
        })?;
    let values = (numel <= MAX_CONSTANT_VALUES as u64)
        .then(|| constant_values(t, ty, numel as usize))
        .flatten();
    Ok(Constant {
        name,
        dtype,
        dims,
        values,
    })
}

/// The value of a one-element constant tensor.
pub(super) fn scalar_constant(t: &TensorProto) -> Option<f64> {
    match constant(t).ok()?.values.as_deref() {
        Some(&[x]) => Some(x),
        Some(_) | None => None,
    }
}

/// A small tensor's values, from its typed field or its little-endian `raw_data`.
fn constant_values(t: &TensorProto, ty: i32, numel: usize) -> Option<Vec<f64>> {
    let typed: Vec<f64> = match ty {
        data_type::FLOAT => t.float_data.iter().map(|&x| f64::from(x)).collect(),
        data_type::DOUBLE => t.double_data.clone(),
        data_type::INT64 => t.int64_data.iter().map(|&x| x as f64).collect(),
        data_type::INT32 => t.int32_data.iter().map(|&x| f64::from(x)).collect(),
        _ => Vec::new(),
    };
    if typed.len() == numel {
        return Some(typed);
    }
    let raw = t.raw_data.as_deref()?;
    let width = match ty {
        data_type::FLOAT | data_type::INT32 => 4,
        data_type::DOUBLE | data_type::INT64 => 8,
        _ => return None,
    };
    if raw.len() != numel * width {
        return None;
    }
    let values = raw
        .chunks_exact(width)
        .map(|c| match (ty, c) {
            (data_type::FLOAT, &[a, b, c, d]) => f64::from(f32::from_le_bytes([a, b, c, d])),
            (data_type::INT32, &[a, b, c, d]) => f64::from(i32::from_le_bytes([a, b, c, d])),
            (data_type::DOUBLE, c) => f64::from_le_bytes(c.try_into().unwrap_or([0; 8])),
            (_, c) => i64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f64,
        })
        .collect();
    Some(values)
}

/// `name` as a program name: characters the plan text does not allow become `_`.
fn sanitize(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '@') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let s_trimmed = s.trim_start_matches('_').to_string();
    if !s_trimmed.is_empty() {
        s = s_trimmed;
    }
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit() || c == '.' || c == '@') {
        s = format!("v{s}");
    }
    s
}

impl Importer<'_> {
    /// A program name for `name`, unused so far.
    fn fresh(&mut self, name: &str) -> String {
        let base = sanitize(name);
        let mut s = base.clone();
        let mut k = 1;
        while self.used.contains(&s) {
            s = format!("{base}.{k}");
            k += 1;
        }
        self.used.insert(s.clone());
        s
    }

    fn define(&mut self, node: &str, name: &str, v: Value) -> Result<(), ImportError> {
        if self.values.insert(name.to_string(), v).is_some() {
            return Err(ImportError::Duplicate {
                node: node.to_string(),
                value: name.to_string(),
            });
        }
        Ok(())
    }

    /// A graph input that no initializer gives: a fed input, its symbolic dims sized by
    /// `--dim`.
    fn input(&mut self, input: &ValueInfoProto) -> Result<(), ImportError> {
        let name = input.name.clone().unwrap_or_default();
        let tensor = input.r#type.as_ref().and_then(|t| t.tensor_type.as_ref());
        let Some(tensor) = tensor else {
            return Err(ImportError::ElementType { value: name, ty: 0 });
        };
        let dtype = dtype(&name, tensor.elem_type.unwrap_or(0))?;
        let dims = tensor
            .shape
            .as_ref()
            .map(|s| s.dim.as_slice())
            .unwrap_or(&[]);
        let mut shape = Vec::with_capacity(dims.len());
        for (i, d) in dims.iter().enumerate() {
            // A symbolic dim is sized by its name, an unnamed one by `{input}_dim{i}`.
            let n = match (&d.dim_value, &d.dim_param) {
                (Some(v), _) => size(&name, i, *v)?,
                (None, p) => {
                    let key = p
                        .clone()
                        .unwrap_or_else(|| format!("{}_dim{i}", sanitize(&name)));
                    match self.opts.dims.iter().find(|(k, _)| *k == key) {
                        Some(&(_, n)) => n,
                        None => {
                            return Err(ImportError::Symbolic {
                                input: name,
                                dim: i,
                                name: key,
                            })
                        }
                    }
                }
            };
            shape.push(n);
        }
        let var_name = self.fresh(&name);
        let v = self
            .b
            .input(&var_name, dtype, &shape)
            .map_err(|e| node_error("graph input", &name, e))?;
        self.define("graph input", &name, Value::Var(v))
    }

    /// The value `name` as a variable: a constant becomes a parameter (a weight) the first
    /// time an op reads it as a tensor.
    fn var(&mut self, node: &str, name: &str) -> Result<VarId, ImportError> {
        let value = self
            .values
            .get(name)
            .cloned()
            .ok_or_else(|| ImportError::Undefined {
                node: node.to_string(),
                value: name.to_string(),
            })?;
        match value {
            Value::Var(v) => Ok(v),
            Value::Const(c) => {
                let var_name = self.fresh(&c.name);
                let v = self
                    .b
                    .param(&var_name, c.dtype, &c.dims)
                    .map_err(|e| node_error(node, "initializer", e))?;
                self.values.insert(name.to_string(), Value::Var(v));
                Ok(v)
            }
        }
    }

    /// The value `name` if it is a constant with known values.
    fn constant_of(&self, name: &str) -> Option<&Constant> {
        match self.values.get(name) {
            Some(Value::Const(c)) if c.values.is_some() => Some(c),
            Some(Value::Const(_)) | Some(Value::Var(_)) | None => None,
        }
    }

    /// The value `name` if it is a one-element constant.
    fn scalar(&self, name: &str) -> Option<f64> {
        let c = self.constant_of(name)?;
        match c.values.as_deref() {
            Some([x]) => Some(*x),
            Some(_) | None => None,
        }
    }

    /// A fused exact GELU (`onnx_fuse`), at the place of its first node.
    fn gelu(&mut self, name: &str, f: &super::onnx_fuse::Fused) -> Result<(), ImportError> {
        let x = self.var(name, &f.x)?;
        let out = self.fresh(&f.out);
        let y = self
            .b
            .op1(
                OpType::Gelu,
                vec![vec![x]],
                &[("approximate", Attr::Bool(false))],
                &out,
            )
            .map_err(|e| node_error(name, "Gelu", e))?;
        self.notes.push(format!(
            "{name}: Div, Erf, Add, Mul, Mul are x · (1 + erf(x / √2)) / 2, fused into one gelu"
        ));
        self.define(name, &f.out, Value::Var(y))
    }

    fn node(&mut self, i: usize, node: &NodeProto) -> Result<(), ImportError> {
        let name = node_name(i, node);
        let ty = node.op_type.clone().unwrap_or_default();
        let outs: Vec<String> = node.output.clone();
        let first_out = outs.first().cloned().unwrap_or_default();
        match ty.as_str() {
            "Constant" => {
                let t = attr(node, "value")
                    .and_then(|a| a.t.as_ref())
                    .ok_or_else(|| node_error(&name, &ty, "a Constant without a tensor `value`"))?;
                let mut c = constant(t)?;
                c.name = first_out.clone();
                self.define(&name, &first_out, Value::Const(c))
            }
            "Identity" | "Dropout" => {
                let x = node.input.first().cloned().unwrap_or_default();
                let v = self
                    .values
                    .get(&x)
                    .cloned()
                    .ok_or_else(|| ImportError::Undefined {
                        node: name.clone(),
                        value: x.clone(),
                    })?;
                if ty == "Dropout" {
                    self.notes.push(format!(
                        "{name}: Dropout is the identity (an inference graph)"
                    ));
                }
                self.define(&name, &first_out, v)
            }
            _ => {
                let v = super::onnx_ops::translate(self, &name, &ty, node)?;
                self.define(&name, &first_out, Value::Var(v))
            }
        }
    }
}

/// Node `node`'s attribute `name`.
pub(super) fn attr<'n>(
    node: &'n NodeProto,
    name: &str,
) -> Option<&'n super::onnx_proto::AttributeProto> {
    node.attribute
        .iter()
        .find(|a| a.name.as_deref() == Some(name))
}

/// What [`super::onnx_ops`] needs of the importer.
pub(super) trait Translate {
    fn var(&mut self, node: &str, name: &str) -> Result<VarId, ImportError>;
    fn scalar(&self, name: &str) -> Option<f64>;
    fn ints(&self, name: &str) -> Option<Vec<i64>>;
    fn fresh(&mut self, name: &str) -> String;
    fn builder(&mut self) -> &mut Builder;
    fn rank(&self, v: VarId) -> usize;
    fn note(&mut self, line: String);
    fn is_float_weight(&self, name: &str) -> bool;
}

impl Translate for Importer<'_> {
    fn var(&mut self, node: &str, name: &str) -> Result<VarId, ImportError> {
        Importer::var(self, node, name)
    }
    fn scalar(&self, name: &str) -> Option<f64> {
        Importer::scalar(self, name)
    }
    fn ints(&self, name: &str) -> Option<Vec<i64>> {
        let c = self.constant_of(name)?;
        c.values
            .as_ref()
            .map(|v| v.iter().map(|&x| x as i64).collect())
    }
    fn fresh(&mut self, name: &str) -> String {
        Importer::fresh(self, name)
    }
    fn builder(&mut self) -> &mut Builder {
        &mut self.b
    }
    fn rank(&self, v: VarId) -> usize {
        self.b.program().var(v).ty.rank()
    }
    fn note(&mut self, line: String) {
        self.notes.push(line);
    }
    fn is_float_weight(&self, name: &str) -> bool {
        match self.values.get(name) {
            Some(Value::Const(c)) => c.dtype != DType::I64,
            Some(Value::Var(v)) => self.b.program().var(*v).kind == crate::ir::VarKind::Parameter,
            None => false,
        }
    }
}

/// Attribute helpers for translations.
pub(super) fn int_attr(node: &NodeProto, name: &str, default: i64) -> i64 {
    attr(node, name).and_then(|a| a.i).unwrap_or(default)
}

pub(super) fn float_attr(node: &NodeProto, name: &str, default: f32) -> f32 {
    attr(node, name).and_then(|a| a.f).unwrap_or(default)
}

/// `Attr::Float` of an ONNX float attribute.
pub(super) fn float(x: f32) -> Attr {
    Attr::Float(f64::from(x))
}
