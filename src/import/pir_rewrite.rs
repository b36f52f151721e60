//! Rewrites of a parsed Paddle program before its analysis (`pir.rs`):
//! - a `split_with_num` whose vector of pieces one `builtin.split` unpacks becomes one op
//!   with the pieces as its results;
//! - GShard's Mixture-of-Experts routing, written out in primitive ops from a `pd_op.topk`
//!   to the two einsums that dispatch the tokens (`sec,sm->ecm`) and combine the experts'
//!   outputs (`sec,ecm->sm`), is fused into ShardLab's `moe_dispatch` and `moe_combine`
//!   (`ir::ops::moe`, whose drop rule it is). The ops between are recognised by their
//!   sequence, which must be [`ROUTING`]'s, and the capacity they compare against must be
//!   the dispatch's slot count; anything else is refused by name, not guessed at.

use super::pir::at;
use super::pir_text::{PirAttr, PirOp, PirType};
use super::ImportError;
use std::collections::{HashMap, HashSet};

/// The routing's ops between `pd_op.topk` and the einsums, in program order, as
/// `scripts/models/make_moe_fixtures.py` writes them (GShard's position-in-expert by a
/// cumulative sum over the choice-major one-hot choices, kept below the capacity).
pub const ROUTING: &[&str] = &[
    "pd_op.transpose",
    "pd_op.reshape",
    "pd_op.one_hot",
    "pd_op.cumsum",
    "pd_op.scale",
    "pd_op.multiply",
    "pd_op.sum",
    "pd_op.less_than",
    "pd_op.cast",
    "pd_op.clip",
    "pd_op.cast",
    "pd_op.one_hot",
    "pd_op.unsqueeze",
    "pd_op.multiply",
    "pd_op.unsqueeze",
    "pd_op.unsqueeze",
    "pd_op.multiply",
    "pd_op.reshape",
    "pd_op.sum",
    "pd_op.transpose",
    "pd_op.reshape",
    "pd_op.multiply",
    "pd_op.sum",
    "builtin.combine",
    "builtin.combine",
];

/// The rewritten program and what was fused.
/// Every routing is found on the program as parsed (the layers' regions are disjoint) and
/// the program is rebuilt once: linear in its size.
pub(super) fn rewrite(mut ops: Vec<PirOp>) -> Result<(Vec<PirOp>, Vec<String>), ImportError> {
    merge_splits(&mut ops);
    let mut notes = Vec::new();
    let mut replace: HashMap<usize, PirOp> = HashMap::new();
    let mut dropped: HashSet<usize> = HashSet::new();
    {
        let g = Graph::new(&ops);
        for topk in (0..ops.len()).filter(|&i| ops[i].name == "pd_op.topk") {
            let note = fuse_routing(&g, topk, &mut replace, &mut dropped)?;
            notes.push(note);
        }
    }
    if replace.is_empty() {
        return Ok((ops, notes));
    }
    let out = ops
        .into_iter()
        .enumerate()
        .filter_map(|(i, op)| match replace.remove(&i) {
            Some(fused) => Some(fused),
            None => (!dropped.contains(&i)).then_some(op),
        })
        .collect();
    Ok((out, notes))
}

/// A program's values: who reads each, and which op defines it.
struct Graph<'a> {
    ops: &'a [PirOp],
    read: HashMap<&'a str, Vec<usize>>,
    def: HashMap<&'a str, usize>,
}

impl<'a> Graph<'a> {
    fn new(ops: &'a [PirOp]) -> Graph<'a> {
        let def = ops
            .iter()
            .enumerate()
            .flat_map(|(i, op)| op.results.iter().map(move |v| (v.as_str(), i)))
            .collect();
        Graph {
            ops,
            read: readers(ops),
            def,
        }
    }

    fn readers_of(&self, v: &str) -> &[usize] {
        self.read.get(v).map(Vec::as_slice).unwrap_or(&[])
    }
}

/// Each value's readers (op indices, in order).
fn readers(ops: &[PirOp]) -> HashMap<&str, Vec<usize>> {
    let mut out: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, op) in ops.iter().enumerate() {
        for x in &op.operands {
            out.entry(x.as_str()).or_default().push(i);
        }
    }
    out
}

/// `(%v) = split_with_num(x, axis) {num}` read only by `(%a, %b, …) = builtin.split(%v)`
/// becomes `(%a, %b, …) = split_with_num(x, axis) {num}`.
fn merge_splits(ops: &mut Vec<PirOp>) {
    let mut drop = HashSet::new();
    let mut moves = Vec::new();
    {
        let read = readers(ops);
        for (i, op) in ops.iter().enumerate() {
            if op.name != "pd_op.split_with_num" || op.results.len() != 1 {
                continue;
            }
            if let Some([j]) = read.get(op.results[0].as_str()).map(Vec::as_slice) {
                if ops[*j].name == "builtin.split" {
                    moves.push((i, *j));
                    drop.insert(*j);
                }
            }
        }
    }
    for (i, j) in moves {
        ops[i].results = ops[j].results.clone();
        ops[i].result_types = ops[j].result_types.clone();
    }
    let mut k = 0;
    ops.retain(|_| {
        k += 1;
        !drop.contains(&(k - 1))
    });
}

fn dims(op: &PirOp, k: usize) -> Option<&[i64]> {
    match op.result_types.get(k) {
        Some(PirType::Tensor { dims, .. }) => Some(dims),
        _ => None,
    }
}

fn equation(op: &PirOp) -> &str {
    op.attr("equation").and_then(|a| a.text()).unwrap_or("")
}

/// What a routing region is made of.
struct Region {
    /// The region's op indices (the top-k included), sorted.
    ops: Vec<usize>,
    dispatch: usize,
    combine: usize,
}

/// The ops a top-k's results reach before the einsums, checked to be GShard's routing.
fn region(g: &Graph, topk: usize) -> Result<Region, ImportError> {
    let ops = g.ops;
    let refuse = |message: String| ImportError::Node {
        node: at(&ops[topk]),
        op_type: "pd_op.topk".into(),
        message,
    };
    let mut inside: HashSet<usize> = HashSet::from([topk]);
    let mut einsums = Vec::new();
    let mut todo = vec![topk];
    while let Some(i) = todo.pop() {
        for r in &ops[i].results {
            for &j in g.readers_of(r) {
                if ops[j].name == "pd_op.einsum" {
                    if !einsums.contains(&j) {
                        einsums.push(j);
                    }
                } else if inside.insert(j) {
                    todo.push(j);
                }
            }
        }
    }
    let find = |eq: &str| einsums.iter().copied().find(|&j| equation(&ops[j]) == eq);
    let (Some(dispatch), Some(combine), 2) =
        (find("sec,sm->ecm"), find("sec,ecm->sm"), einsums.len())
    else {
        return Err(refuse(format!(
            "the top-k feeds {} einsum(s), not the dispatch `sec,sm->ecm` and the combine \
             `sec,ecm->sm` of a Mixture-of-Experts routing ShardLab imports",
            einsums.len()
        )));
    };
    let mut region: Vec<usize> = inside.into_iter().collect();
    region.sort_unstable();
    let sequence: Vec<&str> = region[1..].iter().map(|&i| ops[i].name.as_str()).collect();
    if sequence != ROUTING {
        return Err(refuse(format!(
            "the ops from the top-k to the einsums at lines {} and {} are not the routing \
             ShardLab recognises (GShard's choice-major capacity rule, docs/moe.md); found: {}",
            ops[dispatch].line,
            ops[combine].line,
            sequence.join(" ")
        )));
    }
    Ok(Region {
        ops: region,
        dispatch,
        combine,
    })
}

fn node_error(op: &PirOp, message: String) -> ImportError {
    ImportError::Node {
        node: at(op),
        op_type: op.name.clone(),
        message,
    }
}

/// What a region computes leaves it only for its two einsums.
fn check_closed(g: &Graph, r: &Region, inside: &HashSet<usize>) -> Result<(), ImportError> {
    let ops = g.ops;
    for &i in &r.ops {
        for v in &ops[i].results {
            let outside = g
                .readers_of(v)
                .iter()
                .find(|&&j| !inside.contains(&j) && j != r.dispatch && j != r.combine);
            if let Some(&j) = outside {
                return Err(node_error(
                    &ops[j],
                    format!("reads {v}, a value of the Mixture-of-Experts routing"),
                ));
            }
        }
    }
    Ok(())
}

/// An einsum's operand from outside the routing: it reads `builtin.combine(mask, operand)`.
fn einsum_operand(
    ops: &[PirOp],
    def: &HashMap<&str, usize>,
    e: usize,
) -> Result<String, ImportError> {
    let packed = ops[e].operands.first().and_then(|v| def.get(v.as_str()));
    match packed.map(|&c| &ops[c]) {
        Some(c) if c.name == "builtin.combine" && c.operands.len() == 2 => {
            Ok(c.operands[1].clone())
        }
        _ => Err(node_error(
            &ops[e],
            "its operands are not a builtin.combine of two".into(),
        )),
    }
}

fn int_attrs(pairs: &[(&str, i64)]) -> Vec<(String, PirAttr)> {
    pairs
        .iter()
        .map(|&(n, v)| (n.to_string(), PirAttr::Int(v)))
        .collect()
}

fn tensor(dims: Vec<i64>, dtype: &str) -> PirType {
    PirType::Tensor {
        dims,
        dtype: dtype.into(),
    }
}

/// The two fused ops standing for the region's einsums: the dispatch keeps the einsum's
/// results' names (its weights and index take the names of Paddle's cache and shape
/// results, which nothing reads), the combine reads them.
fn fused_pair(g: &Graph, r: &Region, topk: usize) -> Result<(PirOp, PirOp, String), ImportError> {
    let (ops, def) = (g.ops, &g.def);
    let (x, expert_out) = (
        einsum_operand(ops, def, r.dispatch)?,
        einsum_operand(ops, def, r.combine)?,
    );
    let (top, dispatch, comb) = (&ops[topk], &ops[r.dispatch], &ops[r.combine]);
    let (Some(&[s, k]), Some(&[e, c, _])) = (dims(top, 0), dims(dispatch, 0)) else {
        return Err(node_error(
            top,
            "the top-k's or the dispatch's shape is not known".into(),
        ));
    };
    check_capacity(ops, r, def, c)?;
    let ([out, w, idx, ..], [combined, ..]) =
        (dispatch.results.as_slice(), comb.results.as_slice())
    else {
        return Err(node_error(
            dispatch,
            "expected the einsums' three results".into(),
        ));
    };
    let fused_dispatch = PirOp {
        line: dispatch.line,
        results: vec![out.clone(), w.clone(), idx.clone()],
        name: "pd_op.moe_dispatch".into(),
        operands: vec![x, top.operands.first().cloned().unwrap_or_default()],
        attrs: int_attrs(&[("k", k), ("capacity", c), ("group_size", s)]),
        result_types: vec![
            dispatch
                .result_types
                .first()
                .cloned()
                .unwrap_or(tensor(vec![], "f32")),
            tensor(vec![s, k], "f32"),
            tensor(vec![k, s], "i64"),
        ],
    };
    let fused_combine = PirOp {
        line: comb.line,
        results: vec![combined.clone()],
        name: "pd_op.moe_combine".into(),
        operands: vec![expert_out, w.clone(), idx.clone()],
        attrs: int_attrs(&[("capacity", c), ("group_size", s)]),
        result_types: comb.result_types.first().cloned().into_iter().collect(),
    };
    let note = format!(
        "line {}: a Mixture-of-Experts routing (the top-{k} of {e} experts, {} ops to the einsums \
         at lines {} and {}) is fused as moe_dispatch and moe_combine, with capacity {c} per \
         expert and one group of {s} tokens",
        top.line,
        r.ops.len() - 1,
        dispatch.line,
        comb.line
    );
    Ok((fused_dispatch, fused_combine, note))
}

/// Fuses the routing of the top-k at `topk`: its einsums' replacements into `replace`,
/// the ops it removes into `dropped`; returns the note.
fn fuse_routing(
    g: &Graph,
    topk: usize,
    replace: &mut HashMap<usize, PirOp>,
    dropped: &mut HashSet<usize>,
) -> Result<String, ImportError> {
    let r = region(g, topk)?;
    let inside: HashSet<usize> = r.ops.iter().copied().collect();
    check_closed(g, &r, &inside)?;
    let (dispatch, combine, note) = fused_pair(g, &r, topk)?;
    // The einsums' other results (Paddle's cache and shape) are unpacked by `builtin.split`s
    // nobody reads; they go with the einsums.
    for &e in &[r.dispatch, r.combine] {
        for v in g.ops[e].results.iter().skip(1) {
            let splits = g.readers_of(v).iter().copied();
            dropped.extend(splits.filter(|&j| g.ops[j].name == "builtin.split"));
        }
    }
    dropped.extend(inside);
    replace.insert(r.dispatch, dispatch);
    replace.insert(r.combine, combine);
    Ok(note)
}

/// The capacity the routing compares positions against (its `less_than`'s constant) is the
/// dispatch's slot count.
fn check_capacity(
    ops: &[PirOp],
    r: &Region,
    def: &HashMap<&str, usize>,
    capacity: i64,
) -> Result<(), ImportError> {
    let less = r
        .ops
        .iter()
        .map(|&i| &ops[i])
        .find(|op| op.name == "pd_op.less_than");
    let bound = less
        .and_then(|op| op.operands.get(1))
        .and_then(|v| def.get(v.as_str()))
        .map(|&i| &ops[i])
        .filter(|c| c.name == "pd_op.full")
        .and_then(|c| c.attr("value"))
        .and_then(PirAttr::number);
    match (less, bound) {
        (_, Some(b)) if b == capacity as f64 => Ok(()),
        (Some(op), b) => Err(ImportError::Node {
            node: at(op),
            op_type: op.name.clone(),
            message: format!(
                "the routing keeps positions below {}, not below the dispatch's {capacity} slots",
                b.map_or("a computed value".to_string(), |b| b.to_string())
            ),
        }),
        (None, _) => Ok(()),
    }
}
