//! Printing the pipeline's stages: serial programs with dist attrs, per-rank programs, the
//! ledger; as text or JSON.

use crate::passes::complete::{attrs_text, completed_json, completed_text};
use crate::passes::dist_program::DistProgram;
use crate::passes::ledger::summary;
use crate::passes::pipeline::Pipeline;
use serde_json::{json, Value};

fn dist_text(title: &str, dp: &DistProgram) -> String {
    format!(
        "== {title}\nmesh {}\n\n{}",
        dp.mesh,
        attrs_text(&dp.program, &dp.tensors, &dp.ops)
    )
}

fn ranks_text(p: &Pipeline, rank: Option<u32>) -> String {
    let mut out = String::new();
    for r in p
        .partitioned
        .ranks
        .iter()
        .filter(|r| rank.is_none_or(|x| x == r.rank))
    {
        out.push_str(&format!("== rank {}\n{}\n", r.rank, r.program));
    }
    out.push_str("== communication groups (ring id: ranks)\n");
    for (i, g) in p.partitioned.groups.rings.iter().enumerate() {
        out.push_str(&format!("  ring {i}: {g:?}\n"));
    }
    out
}

/// The stage(s) asked for, as text.
pub fn pipeline_text(p: &Pipeline, stage: &str, rank: Option<u32>, ledger: bool) -> String {
    let mut out = String::new();
    if matches!(stage, "complete" | "all") {
        out.push_str("== complete\n");
        out.push_str(&completed_text(&p.plan.program, &p.completed));
        out.push('\n');
    }
    if matches!(stage, "backward" | "all") {
        out.push_str(&dist_text("backward", &p.backward_dist));
        out.push('\n');
    }
    if matches!(stage, "optimizer" | "all") {
        out.push_str(&dist_text("optimizer", &p.full));
        out.push('\n');
    }
    if matches!(stage, "partition" | "all") {
        out.push_str(&ranks_text(p, rank));
    }
    if ledger {
        for r in p
            .partitioned
            .ranks
            .iter()
            .filter(|r| rank.is_none_or(|x| x == r.rank))
        {
            out.push_str(&summary(&p.ledger, r.rank));
        }
        out.push_str("collectives:\n");
        for e in p.ledger.iter().filter(|e| rank.is_none_or(|x| x == e.rank)) {
            out.push_str(&format!(
                "  rank {} op{} {} {} group {:?} {}: {:.0} bytes ({}; {})\n",
                e.rank,
                e.op_index,
                e.phase,
                e.kind,
                e.group,
                e.tensor,
                e.bytes_per_rank,
                e.purpose.name(),
                e.reason
            ));
        }
    }
    out
}

fn dist_json(dp: &DistProgram) -> Value {
    let attr = |a: &crate::dist::TensorDistAttr| {
        json!({"dims_mapping": a.dims_mapping(), "multi_dims_mapping": a.dims,
               "partial": a.partial.iter().map(|(x, r)| json!([x, r.name()])).collect::<Vec<_>>()})
    };
    json!({
        "vars": dp.program.vars().iter().zip(&dp.tensors).map(|(v, a)| {
            let mut j = attr(a);
            j["name"] = json!(v.name);
            j["shape"] = json!(v.ty.shape);
            j["kind"] = json!(v.kind.name());
            j
        }).collect::<Vec<_>>(),
        "ops": dp.program.ops().iter().zip(&dp.ops).map(|(o, a)| json!({
            "type": o.ty.name(),
            "role": o.role.name(),
            "impl_type": a.impl_type,
            "impl_idx": a.impl_idx,
            "inputs": o.inputs.iter().flatten().map(|v| dp.program.var(*v).name.clone()).collect::<Vec<_>>(),
            "outputs": o.outputs.iter().flatten().map(|v| dp.program.var(*v).name.clone()).collect::<Vec<_>>(),
            "input_attrs": a.inputs.iter().flatten().map(attr).collect::<Vec<_>>(),
            "output_attrs": a.outputs.iter().flatten().map(attr).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

/// Everything as JSON.
pub fn pipeline_json(p: &Pipeline, rank: Option<u32>) -> Value {
    let ranks: Vec<Value> = p
        .partitioned
        .ranks
        .iter()
        .filter(|r| rank.is_none_or(|x| x == r.rank))
        .map(|r| {
            json!({
                "rank": r.rank,
                "vars": r.program.vars().iter().map(|v| json!({"name": v.name, "shape": v.ty.shape, "dtype": v.ty.dtype.name(), "kind": v.kind.name()})).collect::<Vec<_>>(),
                "ops": r.program.ops().iter().map(|o| json!({
                    "type": o.ty.name(),
                    "role": o.role.name(),
                    "namescope": o.namescope,
                    "inputs": o.ty.input_slots().iter().zip(&o.inputs).filter(|(_, v)| !v.is_empty()).map(|(s, v)| (s.name.to_string(), json!(v.iter().map(|x| r.program.var(*x).name.clone()).collect::<Vec<_>>()))).collect::<serde_json::Map<_, _>>(),
                    "outputs": o.ty.output_slots().iter().zip(&o.outputs).filter(|(_, v)| !v.is_empty()).map(|(s, v)| (s.name.to_string(), json!(v.iter().map(|x| r.program.var(*x).name.clone()).collect::<Vec<_>>()))).collect::<serde_json::Map<_, _>>(),
                    "attrs": o.attrs.iter().map(|(k, v)| (k.clone(), json!(v.to_string()))).collect::<serde_json::Map<_, _>>(),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "complete": completed_json(&p.plan.program, &p.completed),
        "backward": dist_json(&p.backward_dist),
        "optimizer": dist_json(&p.full),
        "ranks": ranks,
        "groups": p.partitioned.groups.rings,
        "ledger": p.ledger,
    })
}
