//! Every stage of a pipeline as one JSON value: what `shardlab plan --format json` prints
//! and what the JavaScript API returns.

use crate::passes::complete::completed_json;
use crate::passes::dist_program::DistProgram;
use crate::passes::pipeline::Pipeline;
use serde_json::{json, Value};

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
            "impl_type": a.imp.paddle_id().0,
            "impl_idx": a.imp.paddle_id().1,
            "inputs": o.inputs.iter().flatten().map(|v| dp.program.var(*v).name.clone()).collect::<Vec<_>>(),
            "outputs": o.outputs.iter().flatten().map(|v| dp.program.var(*v).name.clone()).collect::<Vec<_>>(),
            "input_attrs": a.inputs.iter().flatten().map(attr).collect::<Vec<_>>(),
            "output_attrs": a.outputs.iter().flatten().map(attr).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

/// Everything as JSON.
/// The version of the JSON documents `plan --format json` and the JavaScript API write. A
/// change to a field (renamed, removed, or changed in meaning) bumps it; the README lists
/// the changes.
pub const SCHEMA_VERSION: u32 = 1;

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
        "schema_version": SCHEMA_VERSION,
        "complete": completed_json(&p.plan.program, &p.completed),
        "backward": dist_json(&p.backward_dist()),
        "optimizer": dist_json(&p.full),
        "ranks": ranks,
        "groups": p.partitioned.groups.rings,
        "ledger": p.ledger,
    })
}
