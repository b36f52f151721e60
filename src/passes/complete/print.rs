//! Completed programs as text and JSON, and explanations as text.

use super::trace::{EventKind, Step};
use super::Completed;
use crate::dist::{MeshAxis, OperatorDistAttr, ProcessMesh, TensorDistAttr};
use crate::ir::{OpId, Program, VarId};
use serde_json::{json, Value};

/// `[dp, -]`, co-shards as `(dp, mp)`, plus ` partial(mp=SUM)`.
pub fn shard_text(attr: &TensorDistAttr, mesh: &ProcessMesh) -> String {
    let name = |a: MeshAxis| mesh.axis_name(a).to_string();
    let dims: Vec<String> = attr
        .dims
        .iter()
        .map(|axes| match axes.as_slice() {
            [] => "-".to_string(),
            [a] => name(*a),
            many => format!(
                "({})",
                many.iter().map(|&a| name(a)).collect::<Vec<_>>().join(", ")
            ),
        })
        .collect();
    let mut s = format!("[{}]", dims.join(", "));
    if attr.is_partial() {
        let p: Vec<String> = attr
            .partial
            .iter()
            .map(|(a, r)| format!("{}={}", name(a), r))
            .collect();
        s.push_str(&format!(" partial({})", p.join(", ")));
    }
    s
}

/// Every tensor's dist attr, then every op with its impl and the dist attrs it wants (a
/// `*` marks an input that must be resharded).
pub fn attrs_text(
    program: &Program,
    mesh: &ProcessMesh,
    tensors: &[TensorDistAttr],
    ops: &[OperatorDistAttr],
) -> String {
    let mut out = String::from("tensors:\n");
    let width = program
        .vars()
        .iter()
        .map(|v| v.name.len())
        .max()
        .unwrap_or(0)
        .min(80); // longer names overflow their column rather than widen every row
    for (i, v) in program.vars().iter().enumerate() {
        let attr = &tensors[i];
        let pinned = if attr.annotated.iter().any(|&a| a) {
            "  (annotated)"
        } else {
            ""
        };
        out.push_str(&format!(
            "  {:width$}  {:<16}  {}{pinned}\n",
            v.name,
            v.ty.to_string(),
            shard_text(attr, mesh)
        ));
    }
    out.push_str("\nops:\n");
    for (i, op) in program.ops().iter().enumerate() {
        let attr = &ops[i];
        out.push_str(&format!(
            "  op{i} {} [{} #{}: {}]",
            op.ty,
            attr.imp.paddle_id().0,
            attr.imp.paddle_id().1,
            attr.imp.describe()
        ));
        let slots = |specs: &[crate::ir::SlotSpec],
                     vars: &[crate::ir::Slot],
                     attrs: &[crate::dist::SlotAttrs],
                     inputs: bool| {
            let mut parts = Vec::new();
            for ((spec, vs), ats) in specs.iter().zip(vars).zip(attrs) {
                for (v, a) in vs.iter().zip(ats) {
                    let t = &tensors[v.index()];
                    let reshard = inputs && (t.dims != a.dims || t.partial != a.partial);
                    parts.push(format!(
                        "{}={}{}{}",
                        spec.name,
                        program.var(*v).name,
                        shard_text(a, mesh),
                        if reshard { "*" } else { "" }
                    ));
                }
            }
            parts.join(" ")
        };
        out.push_str(&format!(
            " {} -> {}\n",
            slots(op.ty.input_slots(), &op.inputs, &attr.inputs, true),
            slots(op.ty.output_slots(), &op.outputs, &attr.outputs, false)
        ));
    }
    out
}

/// The completed program: every tensor's dist attr, then every op with its impl and the
/// dist attrs it wants (a `*` marks an input that must be resharded).
pub fn completed_text(program: &Program, c: &Completed) -> String {
    let mut out = format!("mesh {}\n", c.mesh);
    let conflicts = c
        .trace
        .events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Rejected(_)))
        .count();
    out.push_str(&format!(
        "# completed in {} sweeps: {} events, {} conflicts, {} rule errors\n\n",
        c.sweeps,
        c.trace.events.len(),
        conflicts,
        c.trace.rule_errors.len()
    ));
    out.push_str(&attrs_text(program, &c.mesh, &c.tensors, &c.ops));
    for (op, message) in &c.trace.rule_errors {
        out.push_str(&format!(
            "# rule error at {op} ({}): {message}; its inputs fall back to replicated\n",
            program.op(*op).ty
        ));
    }
    out
}

fn attr_json(attr: &TensorDistAttr, mesh: &ProcessMesh) -> Value {
    json!({
        "dims_mapping": attr.dims_mapping(),
        "multi_dims_mapping": attr.dims,
        "partial": attr.partial.iter().map(|(a, r)| (a.to_string(), Value::from(r.name()))).collect::<serde_json::Map<_, _>>(),
        "annotated": attr.annotated,
        "text": shard_text(attr, mesh),
    })
}

/// Everything as JSON: mesh, tensors, ops (with impls and wanted attrs), the trace.
pub fn completed_json(program: &Program, c: &Completed) -> Value {
    let vars: Vec<Value> = program
        .vars()
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let mut a = attr_json(&c.tensors[i], &c.mesh);
            a["name"] = json!(v.name);
            a["shape"] = json!(v.ty.shape);
            a["dtype"] = json!(v.ty.dtype.name());
            a["kind"] = json!(v.kind.name());
            a
        })
        .collect();
    let ops: Vec<Value> = program
        .ops()
        .iter()
        .enumerate()
        .map(|(i, op)| {
            let attr = &c.ops[i];
            let slots = |specs: &[crate::ir::SlotSpec],
                         vars: &[crate::ir::Slot],
                         attrs: &[crate::dist::SlotAttrs]| {
                let mut m = serde_json::Map::new();
                for ((spec, vs), ats) in specs.iter().zip(vars).zip(attrs) {
                    if vs.is_empty() {
                        continue;
                    }
                    let list: Vec<Value> = vs
                        .iter()
                        .zip(ats)
                        .map(|(v, a)| {
                            let mut j = attr_json(a, &c.mesh);
                            j["var"] = json!(program.var(*v).name);
                            j
                        })
                        .collect();
                    m.insert(spec.name.to_string(), Value::Array(list));
                }
                Value::Object(m)
            };
            json!({
                "id": i,
                "type": op.ty.name(),
                "impl_type": attr.imp.paddle_id().0,
                "impl_idx": attr.imp.paddle_id().1,
                "inputs": slots(op.ty.input_slots(), &op.inputs, &attr.inputs),
                "outputs": slots(op.ty.output_slots(), &op.outputs, &attr.outputs),
            })
        })
        .collect();
    json!({
        "mesh": { "shape": c.mesh.shape(), "dim_names": c.mesh.dim_names(), "process_ids": c.mesh.process_ids() },
        "sweeps": c.sweeps,
        "vars": vars,
        "ops": ops,
        "trace": {
            "annotations": c.trace.annotations.iter().map(|(v, d, a)| json!({"var": program.var(*v).name, "dim": d, "axes": a.to_vec()})).collect::<Vec<_>>(),
            "events": c.trace.events.iter().map(|e| json!({
                "sweep": e.sweep, "direction": e.direction, "op": e.op.0, "var": program.var(e.var).name,
                "dim": e.dim, "before": e.before.to_vec(), "after": e.after.to_vec(), "kind": e.kind,
            })).collect::<Vec<_>>(),
            "rule_errors": c.trace.rule_errors.iter().map(|(o, m)| json!({"op": o.0, "message": m.to_string()})).collect::<Vec<_>>(),
        },
    })
}

/// The variables of an op with their ranks (for [`super::Trace::explain`]).
pub fn op_vars(program: &Program, op: OpId) -> Vec<(VarId, usize)> {
    let o = program.op(op);
    o.all_inputs()
        .chain(o.all_outputs())
        .map(|v| (v, program.var(v).ty.rank()))
        .collect()
}

/// Why each dim of `var` is split the way it is, as text.
pub fn explain_text(program: &Program, c: &Completed, var: VarId) -> String {
    let v = program.var(var);
    let attr = &c.tensors[var.index()];
    let names = |axes: &[MeshAxis]| {
        if axes.is_empty() {
            "-".to_string()
        } else {
            axes.iter()
                .map(|&a| c.mesh.axis_name(a).to_string())
                .collect::<Vec<_>>()
                .join("+")
        }
    };
    let mut out = format!("{} {}: {}\n", v.name, v.ty, shard_text(attr, &c.mesh));
    for d in 0..attr.rank() {
        out.push_str(&format!("dim {d} = {}", names(&attr.dims[d])));
        let steps = c.trace.explain(var, d as u16, |op| op_vars(program, op));
        if steps.is_empty() {
            let why = super::why_not::why_not_split(program, c, var, d);
            out.push_str(&format!(": {}\n", why.describe(program, c)));
            continue;
        }
        out.push_str(":\n");
        for (n, step) in steps.iter().enumerate() {
            let line = match *step {
                Step::Annotated { var, dim, axes } => {
                    format!(
                        "annotated: {} dim {dim} = {}",
                        program.var(var).name,
                        names(&axes)
                    )
                }
                Step::Event(i) => {
                    let e = c.trace.events[i];
                    let how = match e.kind {
                        EventKind::Set { from_outputs: true } => "from its outputs",
                        EventKind::Set {
                            from_outputs: false,
                        }
                        | EventKind::Partial
                        | EventKind::Rejected(_) => "from its inputs",
                    };
                    format!(
                        "sweep {} {:?}: {} ({}) set {} dim {} = {} {how}",
                        e.sweep,
                        e.direction,
                        e.op,
                        program.op(e.op).ty,
                        program.var(e.var).name,
                        e.dim.unwrap_or(0),
                        names(&e.after)
                    )
                    .replace("Forward", "forward")
                    .replace("Reverse", "reverse")
                }
            };
            out.push_str(&format!("  {}. {line}\n", n + 1));
        }
    }
    if let Some(line) = partial_text(program, c, var) {
        out.push_str(&line);
    }
    let rejected: Vec<String> = c
        .trace
        .events
        .iter()
        .filter(|e| e.var == var)
        .filter_map(|e| match e.kind {
            EventKind::Rejected(conflict) => Some(format!(
                "  {} ({}) proposed dim {} = {}: rejected, {}\n",
                e.op,
                program.op(e.op).ty,
                e.dim.unwrap_or(0),
                names(&e.after),
                conflict.describe()
            )),
            EventKind::Set { .. } | EventKind::Partial => None,
        })
        .collect();
    if !rejected.is_empty() {
        out.push_str("conflicts:\n");
        out.extend(rejected);
    }
    out
}

/// Why a tensor is a partial value: the op producing it reduces over a dim its inputs split
/// on the partial axes (a matmul's contraction k), so each rank holds one addend. The
/// all-reduce (or reduce-scatter) resolving it is inserted by the partition pass.
fn partial_text(program: &Program, c: &Completed, var: VarId) -> Option<String> {
    let attr = &c.tensors[var.index()];
    if !attr.is_partial() {
        return None;
    }
    let axes: Vec<MeshAxis> = attr.partial.axes().collect();
    let names = axes
        .iter()
        .map(|&a| {
            format!(
                "{}={}",
                c.mesh.axis_name(a),
                attr.partial.get(a).map_or("?", |r| r.name())
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let (op_id, op) = program
        .ops()
        .iter()
        .enumerate()
        .rev()
        .find(|(_, op)| op.all_outputs().any(|o| o == var))?;
    // The inputs' dims split over a partial axis: the dims the op reduces away.
    let split: Vec<String> = op
        .all_inputs()
        .flat_map(|i| {
            let a = &c.tensors[i.index()];
            (0..a.rank())
                .filter(|&d| a.dims[d].iter().any(|x| axes.contains(x)))
                .map(move |d| format!("{} dim {d}", program.var(i).name))
        })
        .collect();
    let why = match (split.is_empty(), op.ty == crate::ir::OpType::MatmulV2) {
        (true, _) => format!("op {op_id} ({}) makes it partial", op.ty),
        (false, true) => format!(
            "op {op_id} ({}) reduces over the contraction k, which is split ({}), so each rank holds one addend of the result",
            op.ty,
            split.join(", ")
        ),
        (false, false) => format!(
            "op {op_id} ({}) reduces over split input dims ({}), so each rank holds one addend of the result",
            op.ty,
            split.join(", ")
        ),
    };
    Some(format!(
        "partial({names}): {why}; the partition pass inserts the all-reduce (or reduce-scatter) that sums the addends where a consumer needs the whole value\n"
    ))
}
