//! ONNX to ShardLab's IR, node by node in the graph's (topological) order. Each supported
//! operator becomes the Paddle op it is (MatMul → `matmul_v2`, LayerNormalization →
//! `layer_norm`, Gather of a weight by ids → `lookup_table_v2`, ...); shapes come from
//! ShardLab's own inference, so a graph whose ops disagree with their declared shapes is
//! refused at the node. Operators outside the table are counted first and refused together
//! (each with its count and first nodes), before any translation.

use super::onnx_proto::{data_type, GraphProto, ModelProto, NodeProto, ValueInfoProto};
pub(super) use super::onnx_values::{constant, scalar_constant, small_ints, Constant};
use super::onnx_values::{dtype, size};
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
    "Sigmoid",
    "Gelu",
    "Softmax",
    "LayerNormalization",
    "Reshape",
    "Transpose",
    "Gather",
    "Identity",
    "Dropout",
    "Constant",
    "Cast",
    "Concat",
    "ReduceMean",
    "ReduceSum",
];

/// A value of the graph: a variable of the program, or a constant (an initializer or a
/// `Constant` node) not yet made one.
#[derive(Clone, Debug)]
enum Value {
    Var(VarId),
    Const(Constant),
}

struct Importer<'a> {
    b: Builder,
    opts: &'a ImportOptions,
    values: HashMap<String, Value>,
    /// Program names taken so far.
    used: HashSet<String>,
    /// Parameters and tables made from constants: (program name, graph name).
    sources: Vec<(String, String)>,
    notes: Vec<String>,
}

/// Imports the ONNX model in `bytes`.
pub fn import(bytes: &[u8], opts: &ImportOptions) -> Result<Imported, ImportError> {
    let model = ModelProto::decode(bytes).map_err(|e| ImportError::Decode(e.to_string()))?;
    let graph = model.graph.as_ref().ok_or(ImportError::NoGraph)?;
    let front = Front {
        census: super::census(
            graph
                .node
                .iter()
                .map(|n| n.op_type.as_deref().unwrap_or("")),
        ),
        notes: Vec::new(),
        loss_note: |out| {
            format!(
                "the loss is the mean of the graph's output `{out}` (an inference graph has none)"
            )
        },
    };
    import_graph(graph, opts, front)
}

/// What the front end that made a graph says about it: the census of its own operators,
/// its notes, and how it names the loss (`super::pir` lowers Paddle's programs to a graph).
pub(super) struct Front {
    pub census: Vec<(String, usize)>,
    pub notes: Vec<String>,
    pub loss_note: fn(&str) -> String,
}

/// Imports `graph`: identities resolved, patterns fused, node by node, the loss the mean
/// of its first output.
pub(super) fn import_graph(
    graph: &GraphProto,
    opts: &ImportOptions,
    front: Front,
) -> Result<Imported, ImportError> {
    let census = front.census;
    let (resolved, identities) = super::onnx_fuse::without_identities(graph);
    let graph = &resolved;
    let fused = super::onnx_fuse::patterns(graph);
    let in_pattern: HashSet<usize> = fused.iter().flat_map(|f| f.nodes.iter().copied()).collect();
    refuse_unsupported(graph, &in_pattern)?;
    let mut im = Importer {
        b: Builder::new(),
        opts,
        values: HashMap::new(),
        used: HashSet::new(),
        sources: Vec::new(),
        notes: front.notes,
    };
    if identities > 0 {
        im.notes.push(format!(
            "{identities} Identity nodes are aliases of their inputs"
        ));
    }
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
            Some(f) => im.fused(&node_name(i, node), f)?,
            None if in_pattern.contains(&i) => {}
            None => im.node(i, node)?,
        }
    }
    let out = graph.output.first().ok_or(ImportError::NoOutput)?;
    let out_name = out.name.clone().unwrap_or_default();
    let y = im.var("graph output", &out_name)?;
    im.b.set_role(OpRole::Loss);
    let loss = im.fresh("loss");
    im.b.op1(OpType::Mean, &[&[y]], &[], &loss)
        .map_err(|e| node_error("loss", "Mean", e))?;
    im.notes.push((front.loss_note)(&out_name));
    Ok(Imported {
        program: im.b.finish(),
        notes: im.notes,
        census,
        fused: fused.len(),
        sources: im.sources,
    })
}

/// Refuses a graph with operators outside [`SUPPORTED`] (or outside ONNX's default
/// domain), listing each with its count and its first three nodes.
fn refuse_unsupported(graph: &GraphProto, fused: &HashSet<usize>) -> Result<(), ImportError> {
    let missing = graph.node.iter().enumerate().filter_map(|(i, node)| {
        let ty = node.op_type.as_deref().unwrap_or("");
        let domain = node.domain.as_deref().unwrap_or("");
        let known = (SUPPORTED.contains(&ty) && (domain.is_empty() || domain == "ai.onnx"))
            || (domain == "pd_op" && super::onnx_ops::PADDLE_ONLY.contains(&ty));
        if known || fused.contains(&i) {
            return None;
        }
        let ty = if domain.is_empty() {
            ty.to_string()
        } else {
            format!("{domain}.{ty}")
        };
        Some((ty, node_name(i, node)))
    });
    UnsupportedOps::check(missing)
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
                if let Some(dim) = c.dims.iter().position(|&d| d == 0) {
                    return Err(ImportError::BadDim {
                        value: c.name,
                        dim,
                        size: 0,
                    });
                }
                let var_name = self.fresh(&c.name);
                let v = self
                    .b
                    .param(&var_name, c.dtype, &c.dims)
                    .map_err(|e| node_error(node, "initializer", e))?;
                self.sources.push((var_name, name.to_string()));
                self.values.insert(name.to_string(), Value::Var(v));
                Ok(v)
            }
        }
    }

    /// Whether `name` is a constant with no elements.
    fn empty(&self, name: &str) -> bool {
        matches!(self.values.get(name), Some(Value::Const(c)) if c.dims.contains(&0))
    }

    /// `out` is the value `input` already is.
    fn alias(&mut self, node: &str, input: Option<&String>, out: &str) -> Result<(), ImportError> {
        let x = input.cloned().unwrap_or_default();
        let v = self
            .values
            .get(&x)
            .cloned()
            .ok_or_else(|| ImportError::Undefined {
                node: node.to_string(),
                value: x.clone(),
            })?;
        self.define(node, out, v)
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

    /// A fused pattern (`onnx_fuse`), at the place of its first node.
    fn fused(&mut self, name: &str, f: &super::onnx_fuse::Fused) -> Result<(), ImportError> {
        let x = self.var(name, &f.x)?;
        let outs: Vec<String> = f.outs.iter().map(|o| self.fresh(o)).collect();
        let names: Vec<&str> = outs.iter().map(String::as_str).collect();
        let made = super::onnx_ops::fused(self, name, f, x, &names)?;
        let op = self.b.program().ops().last().map_or("", |o| o.ty.name());
        self.notes.push(format!(
            "{name}: {} nodes fused into one {op} ({})",
            f.nodes.len(),
            super::onnx_fuse::describe(&f.op)
        ));
        for (o, v) in f.outs.iter().zip(made) {
            self.define(name, o, Value::Var(v))?;
        }
        Ok(())
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
            "Cast" if float_to_float(self, node) => {
                self.notes.push(format!(
                    "{name}: a Cast between float types is the identity"
                ));
                self.alias(&name, node.input.first(), &first_out)
            }
            "Concat" if node.input.len() == 2 && self.empty(&node.input[0]) => {
                self.notes.push(format!(
                    "{name}: concatenating an empty constant (an empty KV cache) is the identity"
                ));
                self.alias(&name, node.input.get(1), &first_out)
            }
            "Identity" | "Dropout" => {
                if ty == "Dropout" {
                    self.notes.push(format!(
                        "{name}: Dropout is the identity (an inference graph)"
                    ));
                }
                self.alias(&name, node.input.first(), &first_out)
            }
            _ if node.domain.as_deref() == Some("pd_op") => {
                let made = super::onnx_ops::translate_paddle(self, &name, &ty, node)?;
                for (o, v) in outs.iter().zip(made) {
                    self.define(&name, o, Value::Var(v))?;
                }
                Ok(())
            }
            _ => {
                let v = super::onnx_ops::translate(self, &name, &ty, node)?;
                self.define(&name, &first_out, Value::Var(v))
            }
        }
    }
}

/// Whether a `Cast` node casts a float value to a float type (which ShardLab prices alike).
fn float_to_float(im: &Importer, node: &NodeProto) -> bool {
    use data_type::{BFLOAT16, DOUBLE, FLOAT, FLOAT16};
    let to = int_attr(node, "to", 0) as i32;
    let input_float = node.input.first().is_some_and(|x| match im.values.get(x) {
        Some(Value::Var(v)) => im.b.program().var(*v).ty.dtype != DType::I64,
        Some(Value::Const(c)) => c.dtype != DType::I64,
        None => false,
    });
    input_float && [FLOAT, FLOAT16, BFLOAT16, DOUBLE].contains(&to)
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
    /// An elementwise operand: a constant of rank 2 or more there is a table the exporter
    /// computed (rotary cos and sin, a causal mask), fed as an input, not trained.
    fn operand(&mut self, node: &str, name: &str) -> Result<VarId, ImportError>;
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
    fn operand(&mut self, node: &str, name: &str) -> Result<VarId, ImportError> {
        let table = match self.values.get(name) {
            Some(Value::Const(c)) if c.dims.len() >= 2 && !c.dims.contains(&0) => Some(c.clone()),
            Some(Value::Const(_)) | Some(Value::Var(_)) | None => None,
        };
        let Some(c) = table else {
            return Importer::var(self, node, name);
        };
        let var_name = self.fresh(&c.name);
        let v = self
            .b
            .input(&var_name, c.dtype, &c.dims)
            .map_err(|e| node_error(node, "constant", e))?;
        self.sources.push((var_name.clone(), name.to_string()));
        self.notes.push(format!(
            "{node}: `{var_name}` {:?} is a table the exporter computed (rotary cos or sin, a mask): an input, not a weight",
            c.dims
        ));
        self.values.insert(name.to_string(), Value::Var(v));
        Ok(v)
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
