//! Patterns of primitive ONNX operators that are one ShardLab op, found before the
//! translation: exporters without a `Gelu` operator (opset < 20, paddle2onnx, torch's
//! default) write GELU as `x · (1 + erf(x / √2)) · 0.5`, five nodes:
//!
//! ```text
//! Div(x, √2) → Erf → Add(·, 1) → Mul(x, ·) → Mul(·, 0.5)
//! ```
//!
//! which fuse into one `gelu` (exact, not the tanh approximation). Each intermediate value
//! must have that one consumer, so nothing else reads what the fusion removes.

use super::onnx_proto::{GraphProto, NodeProto};
use std::collections::HashMap;

/// A fused pattern: its nodes (the first is where the fused op goes), its input and its
/// output value.
#[derive(Clone, Debug, PartialEq)]
pub struct Fused {
    pub nodes: Vec<usize>,
    pub x: String,
    pub out: String,
}

/// Scalar constants of the graph (initializers and `Constant` nodes with one value).
fn scalars(graph: &GraphProto) -> HashMap<String, f64> {
    let mut out = HashMap::new();
    let tensors = graph.initializer.iter().map(|t| (t.name.clone(), t)).chain(
        graph
            .node
            .iter()
            .filter(|n| n.op_type.as_deref() == Some("Constant"))
            .filter_map(|n| {
                let t = super::onnx::attr(n, "value")?.t.as_ref()?;
                Some((n.output.first().cloned(), t))
            }),
    );
    for (name, t) in tensors {
        let Some(name) = name else { continue };
        if let Some(c) = super::onnx::scalar_constant(t) {
            out.insert(name, c);
        }
    }
    out
}

/// Every exact-GELU pattern of `graph`.
pub fn gelus(graph: &GraphProto) -> Vec<Fused> {
    let scalar = scalars(graph);
    let near = |name: &str, want: f64| scalar.get(name).is_some_and(|&c| (c - want).abs() < 1e-3);
    let mut consumers: HashMap<&str, Vec<usize>> = HashMap::new();
    let mut producer: HashMap<&str, usize> = HashMap::new();
    for (i, n) in graph.node.iter().enumerate() {
        for v in &n.input {
            consumers.entry(v.as_str()).or_default().push(i);
        }
        for v in &n.output {
            producer.insert(v.as_str(), i);
        }
    }
    let only = |v: &str| match consumers.get(v).map(Vec::as_slice) {
        Some(&[c]) => Some(c),
        _ => None,
    };
    let is = |i: usize, ty: &str| graph.node[i].op_type.as_deref() == Some(ty);
    let out = |i: usize| {
        graph.node[i]
            .output
            .first()
            .map(String::as_str)
            .unwrap_or("")
    };
    // The operand of binary node `i` other than `v`.
    let other = |i: usize, v: &str| -> Option<String> {
        let n: &NodeProto = &graph.node[i];
        match n.input.as_slice() {
            [a, b] if a == v => Some(b.clone()),
            [a, b] if b == v => Some(a.clone()),
            _ => None,
        }
    };
    let mut found = Vec::new();
    for (e, n) in graph.node.iter().enumerate() {
        if n.op_type.as_deref() != Some("Erf") {
            continue;
        }
        let fused = (|| {
            let d = *producer.get(n.input.first()?.as_str())?;
            let div = &graph.node[d];
            let scaled = is(d, "Div") && near(div.input.get(1)?, std::f64::consts::SQRT_2);
            if !scaled || only(out(d))? != e {
                return None;
            }
            let x = div.input.first()?.clone();
            let a = only(out(e))?;
            if !is(a, "Add") || !near(&other(a, out(e))?, 1.0) {
                return None;
            }
            let m1 = only(out(a))?;
            if !is(m1, "Mul") || other(m1, out(a))? != x {
                return None;
            }
            let m2 = only(out(m1))?;
            if !is(m2, "Mul") || !near(&other(m2, out(m1))?, 0.5) {
                return None;
            }
            Some(Fused {
                nodes: vec![d, e, a, m1, m2],
                x,
                out: out(m2).to_string(),
            })
        })();
        found.extend(fused);
    }
    found
}
