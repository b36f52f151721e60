//! Patterns of primitive ONNX operators that are one ShardLab op, found before the
//! translation (on the graph with its `Identity` nodes resolved, [`without_identities`]):
//!
//! ```text
//! exact GELU:  Div(x, √2) → Erf → Add(·, 1) → Mul(x, ·) → Mul(·, 0.5)          → gelu
//! SiLU:        Sigmoid(x) → Mul(x, ·)                                          → silu
//! RMSNorm:     Pow(x, 2) → ReduceMean(last axis) [→ Mul(·, 1)] → Add(·, ε)
//!              → Sqrt → Reciprocal → Mul(·, x) → Mul(·, w)                     → rms_norm
//! halves:      Slice(x, 0, h, axis), Slice(x, h, end, axis)                    → split
//! GQA heads:   Unsqueeze(x, 2) → Expand(·, [b, h, r, s, d]) → Reshape(·, [b, h·r, s, d])
//!                                                                              → repeat_interleave
//! ```
//!
//! (exporters without the fused operator write them so: paddle2onnx, torch before opset
//! 20). Each intermediate value must have the pattern's next node as its one consumer, so
//! nothing else reads what the fusion removes.

use super::onnx_proto::{GraphProto, NodeProto};
use std::collections::HashMap;

/// The op a pattern is.
#[derive(Clone, Debug, PartialEq)]
pub enum FusedOp {
    Gelu,
    Silu,
    /// With the weight's value name and ε.
    RmsNorm {
        weight: String,
        epsilon: f64,
    },
    /// Two `Slice`s taking the first and the second half of `axis` (rotary embeddings'
    /// rotate-half): one `split` in two.
    Halves {
        axis: i64,
        half: i64,
    },
    /// `Unsqueeze(x, 2) → Expand(·, [b, h, r, s, d]) → Reshape(·, [b, h·r, s, d])`
    /// (grouped-query attention's repeated key/value heads): `repeat_interleave`.
    RepeatHeads {
        /// The input's heads axis: 1 for `[b, kv, s, d]` (an ONNX export's), 2 for
        /// `[b, s, kv, d]` (Paddle's layout).
        axis: i64,
        repeats: i64,
        shape: Vec<i64>,
    },
}

/// A fused pattern: its nodes (the first is where the fused op goes), its input and its
/// output values (two for `Halves`).
#[derive(Clone, Debug, PartialEq)]
pub struct Fused {
    pub op: FusedOp,
    pub nodes: Vec<usize>,
    pub x: String,
    pub outs: Vec<String>,
}

/// What a pattern computes, in words.
pub fn describe(op: &FusedOp) -> &'static str {
    match op {
        FusedOp::Gelu => "x · (1 + erf(x / √2)) / 2",
        FusedOp::Silu => "x · sigmoid(x)",
        FusedOp::RmsNorm { .. } => "x / √(mean(x²) + ε) · w",
        FusedOp::Halves { .. } => "the two halves of an axis",
        FusedOp::RepeatHeads { .. } => "each key/value head repeated for its query heads",
    }
}

/// `graph` without its `Identity` nodes: every read of an identity's output reads its
/// input instead (the graph's outputs too). Returns the graph and how many it removed.
pub fn without_identities(graph: &GraphProto) -> (GraphProto, usize) {
    let mut alias: HashMap<String, String> = HashMap::new();
    let resolve = |alias: &HashMap<String, String>, v: &str| -> String {
        let mut v = v.to_string();
        // Chains end: each step goes to an earlier node's value (bounded by the count).
        for _ in 0..=alias.len() {
            match alias.get(&v) {
                Some(next) => v = next.clone(),
                None => break,
            }
        }
        v
    };
    let mut out = graph.clone();
    out.node.clear();
    let mut removed = 0;
    for n in &graph.node {
        let mut n = n.clone();
        for v in n.input.iter_mut() {
            *v = resolve(&alias, v);
        }
        let identity = n.op_type.as_deref() == Some("Identity") && n.input.len() == 1;
        if let (true, [o]) = (identity, n.output.as_slice()) {
            alias.insert(o.clone(), n.input[0].clone());
            removed += 1;
            continue;
        }
        out.node.push(n);
    }
    for o in out.output.iter_mut() {
        if let Some(name) = o.name.as_mut() {
            *name = resolve(&alias, name);
        }
    }
    (out, removed)
}

/// Who reads and who writes each value, and the scalar constants.
struct View<'g> {
    graph: &'g GraphProto,
    consumers: HashMap<&'g str, Vec<usize>>,
    producer: HashMap<&'g str, usize>,
    scalar: HashMap<String, f64>,
    ints: HashMap<String, Vec<i64>>,
}

impl<'g> View<'g> {
    fn new(graph: &'g GraphProto) -> View<'g> {
        let mut consumers: HashMap<&str, Vec<usize>> = HashMap::new();
        let mut producer = HashMap::new();
        for (i, n) in graph.node.iter().enumerate() {
            for v in &n.input {
                consumers.entry(v.as_str()).or_default().push(i);
            }
            for v in &n.output {
                producer.insert(v.as_str(), i);
            }
        }
        let (scalar, ints) = constants(graph);
        View {
            graph,
            consumers,
            producer,
            scalar,
            ints,
        }
    }

    fn node(&self, i: usize) -> &'g NodeProto {
        &self.graph.node[i]
    }

    fn is(&self, i: usize, ty: &str) -> bool {
        self.node(i).op_type.as_deref() == Some(ty)
    }

    fn out(&self, i: usize) -> &'g str {
        self.node(i)
            .output
            .first()
            .map(String::as_str)
            .unwrap_or("")
    }

    /// The one node reading `v`.
    fn only(&self, v: &str) -> Option<usize> {
        match self.consumers.get(v).map(Vec::as_slice) {
            Some(&[c]) => Some(c),
            _ => None,
        }
    }

    /// The node writing `v`.
    fn producer(&self, v: &str) -> Option<usize> {
        self.producer.get(v).copied()
    }

    /// Whether `v` is a scalar constant within 10⁻³ of `want`.
    fn near(&self, v: &str, want: f64) -> bool {
        self.scalar.get(v).is_some_and(|&c| (c - want).abs() < 1e-3)
    }

    /// The operand of binary node `i` other than `v`.
    fn other(&self, i: usize, v: &str) -> Option<&'g str> {
        match self.node(i).input.as_slice() {
            [a, b] if a == v => Some(b),
            [a, b] if b == v => Some(a),
            _ => None,
        }
    }

    /// The one consumer of node `i`'s output, if it is a `ty`.
    fn next(&self, i: usize, ty: &str) -> Option<usize> {
        self.only(self.out(i)).filter(|&j| self.is(j, ty))
    }
}

/// Small constants of the graph (initializers and `Constant` nodes): the one-element ones
/// as scalars, those of at most 16 elements as integer lists.
fn constants(graph: &GraphProto) -> (HashMap<String, f64>, HashMap<String, Vec<i64>>) {
    let (mut scalars, mut ints) = (HashMap::new(), HashMap::new());
    let nodes = graph
        .node
        .iter()
        .filter(|n| n.op_type.as_deref() == Some("Constant"))
        .filter_map(|n| {
            let t = super::onnx::attr(n, "value")?.t.as_ref()?;
            Some((n.output.first().cloned(), t))
        });
    let tensors = graph
        .initializer
        .iter()
        .map(|t| (t.name.clone(), t))
        .chain(nodes);
    for (name, t) in tensors {
        let Some(name) = name else { continue };
        if let Some(c) = super::onnx::scalar_constant(t) {
            scalars.insert(name.clone(), c);
        }
        if let Some(v) = super::onnx::small_ints(t) {
            ints.insert(name, v);
        }
    }
    (scalars, ints)
}

/// Every pattern of `graph` (with its identities resolved), none sharing a node.
pub fn patterns(graph: &GraphProto) -> Vec<Fused> {
    let view = View::new(graph);
    let mut found: Vec<Fused> = Vec::new();
    for i in 0..graph.node.len() {
        let f = if view.is(i, "Erf") {
            gelu(&view, i)
        } else if view.is(i, "Sigmoid") {
            silu(&view, i)
        } else if view.is(i, "Pow") {
            rms_norm(&view, i)
        } else if view.is(i, "Slice") {
            halves(&view, i)
        } else if view.is(i, "Unsqueeze") {
            repeat_heads(&view, i)
        } else {
            None
        };
        if let Some(f) = f {
            let taken = found
                .iter()
                .any(|g| g.nodes.iter().any(|n| f.nodes.contains(n)));
            if !taken {
                found.push(f);
            }
        }
    }
    found
}

fn gelu(v: &View, e: usize) -> Option<Fused> {
    let d = v.producer(v.node(e).input.first()?)?;
    let div = v.node(d);
    if !v.is(d, "Div") || !v.near(div.input.get(1)?, std::f64::consts::SQRT_2) {
        return None;
    }
    if v.only(v.out(d))? != e {
        return None;
    }
    let x = div.input.first()?.clone();
    let a = v.next(e, "Add")?;
    if !v.near(v.other(a, v.out(e))?, 1.0) {
        return None;
    }
    let m1 = v.next(a, "Mul")?;
    if v.other(m1, v.out(a))? != x {
        return None;
    }
    let m2 = v.next(m1, "Mul")?;
    if !v.near(v.other(m2, v.out(m1))?, 0.5) {
        return None;
    }
    Some(Fused {
        op: FusedOp::Gelu,
        nodes: vec![d, e, a, m1, m2],
        x,
        outs: vec![v.out(m2).to_string()],
    })
}

fn silu(v: &View, s: usize) -> Option<Fused> {
    let x = v.node(s).input.first()?.clone();
    let m = v.next(s, "Mul")?;
    if v.other(m, v.out(s))? != x {
        return None;
    }
    Some(Fused {
        op: FusedOp::Silu,
        nodes: vec![s, m],
        x,
        outs: vec![v.out(m).to_string()],
    })
}

fn rms_norm(v: &View, p: usize) -> Option<Fused> {
    let pow = v.node(p);
    if !v.near(pow.input.get(1)?, 2.0) {
        return None;
    }
    let x = pow.input.first()?.clone();
    let r = v.next(p, "ReduceMean")?;
    let axes = super::onnx::attr(v.node(r), "axes").map(|a| a.ints.clone());
    let keepdims = super::onnx::int_attr(v.node(r), "keepdims", 1);
    if axes.as_deref() != Some(&[-1]) || keepdims != 1 {
        return None;
    }
    let mut nodes = vec![p, r];
    let mut last = r;
    // paddle2onnx writes a `scale` of 1 here.
    if let Some(m) = v
        .next(last, "Mul")
        .filter(|&m| v.near(v.other(m, v.out(last)).unwrap_or(""), 1.0))
    {
        nodes.push(m);
        last = m;
    }
    let a = v.next(last, "Add")?;
    let epsilon = *v.scalar.get(v.other(a, v.out(last))?)?;
    let sq = v.next(a, "Sqrt")?;
    let rec = v.next(sq, "Reciprocal")?;
    let m1 = v.next(rec, "Mul")?;
    if v.other(m1, v.out(rec))? != x {
        return None;
    }
    let m2 = v.next(m1, "Mul")?;
    let weight = v.other(m2, v.out(m1))?.to_string();
    nodes.extend([a, sq, rec, m1, m2]);
    Some(Fused {
        op: FusedOp::RmsNorm { weight, epsilon },
        nodes,
        x,
        outs: vec![v.out(m2).to_string()],
    })
}

/// A `Slice`'s (start, end, axis) with step 1, from its constant inputs.
fn slice_range(v: &View, i: usize) -> Option<(i64, i64, i64)> {
    let n = v.node(i);
    let one = |k: usize| -> Option<i64> {
        match v.ints.get(n.input.get(k)?)?.as_slice() {
            [x] => Some(*x),
            _ => None,
        }
    };
    let step = if n.input.len() > 4 { one(4)? } else { 1 };
    (step == 1).then_some((one(1)?, one(2)?, one(3)?))
}

fn halves(v: &View, first: usize) -> Option<Fused> {
    let (start, h, axis) = slice_range(v, first)?;
    let x = v.node(first).input.first()?;
    if start != 0 || h <= 0 {
        return None;
    }
    let second = v.consumers.get(x.as_str())?.iter().copied().find(|&j| {
        j != first
            && v.is(j, "Slice")
            && slice_range(v, j).is_some_and(|(s, e, a)| s == h && a == axis && e >= 2 * h)
    })?;
    Some(Fused {
        op: FusedOp::Halves { axis, half: h },
        nodes: vec![first, second],
        x: x.clone(),
        outs: vec![v.out(first).to_string(), v.out(second).to_string()],
    })
}

fn repeat_heads(v: &View, u: usize) -> Option<Fused> {
    let n = v.node(u);
    // The size-1 axis the heads are repeated along, on the 5-dim expanded tensor: just after
    // the heads (2 or 3; written −3 or −2 too).
    let unsqueezed = match v.ints.get(n.input.get(1)?)?.as_slice() {
        [a @ (2 | 3)] => *a,
        [a @ (-3 | -2)] => a + 5,
        _ => return None,
    };
    let e = v.next(u, "Expand")?;
    let expand = v.ints.get(v.node(e).input.get(1)?)?;
    let r = v.next(e, "Reshape")?;
    let shape = v.ints.get(v.node(r).input.get(1)?)?.clone();
    let repeats = *expand.get(unsqueezed as usize)?;
    (expand.len() == 5 && shape.len() == 4).then_some(())?;
    Some(Fused {
        op: FusedOp::RepeatHeads {
            axis: unsqueezed - 1,
            repeats,
            shape,
        },
        nodes: vec![u, e, r],
        x: n.input.first()?.clone(),
        outs: vec![v.out(r).to_string()],
    })
}
