//! Every stage of a pipeline as one JSON value: what `shardlab plan --format json` prints
//! and what the JavaScript API returns.

use crate::passes::complete::completed_json;
use crate::passes::dist_program::DistProgram;
use crate::passes::driver::Passes;
use crate::passes::partition::RankProgram;
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde::Serialize;
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

/// The version of the JSON documents `plan --format json` and the JavaScript API write. A
/// change to a field (renamed, removed, or changed in meaning) bumps it; docs/cli.md lists
/// the changes.
pub const SCHEMA_VERSION: u32 = 1;

/// One rank's program as JSON.
fn rank_json(r: &RankProgram) -> Value {
    let names = |vars: &[crate::ir::VarId]| {
        json!(vars
            .iter()
            .map(|x| r.program.var(*x).name.clone())
            .collect::<Vec<_>>())
    };
    let slots = |specs: &[crate::ir::SlotSpec], vars: &[crate::ir::Slot]| {
        specs
            .iter()
            .zip(vars)
            .filter(|(_, v)| !v.is_empty())
            .map(|(s, v)| (s.name.to_string(), names(v)))
            .collect::<serde_json::Map<_, _>>()
    };
    json!({
        "rank": r.rank,
        "vars": r.program.vars().iter().map(|v| json!({"name": v.name, "shape": v.ty.shape, "dtype": v.ty.dtype.name(), "kind": v.kind.name()})).collect::<Vec<_>>(),
        "ops": r.program.ops().iter().map(|o| json!({
            "type": o.ty.name(),
            "role": o.role.name(),
            "namescope": o.namescope,
            "inputs": slots(o.ty.input_slots(), &o.inputs),
            "outputs": slots(o.ty.output_slots(), &o.outputs),
            "attrs": o.attrs.iter().map(|(k, v)| (k.clone(), json!(v.to_string()))).collect::<serde_json::Map<_, _>>(),
        })).collect::<Vec<_>>(),
    })
}

/// The ranks asked for, serialized one at a time: only one rank's JSON exists at once, so
/// the document for a mesh of any size is written without holding every rank's JSON.
struct Ranks<'a> {
    pipeline: &'a Passes,
    rank: Option<u32>,
}

impl Serialize for Ranks<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(None)?;
        for r in self
            .pipeline
            .partitioned
            .ranks
            .iter()
            .filter(|r| self.rank.is_none_or(|x| x == r.rank))
        {
            seq.serialize_element(&rank_json(r))?;
        }
        seq.end()
    }
}

/// The whole pipeline as one JSON document (see [`write_pipeline_json`]).
pub struct PipelineDoc<'a> {
    pub pipeline: &'a Passes,
    /// Only this rank's program (all ranks when `None`).
    pub rank: Option<u32>,
}

impl Serialize for PipelineDoc<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let p = self.pipeline;
        // Fields in name order, as a JSON object value prints them.
        let mut map = s.serialize_map(Some(8))?;
        map.serialize_entry("backward", &dist_json(&p.backward_dist()))?;
        map.serialize_entry("complete", &completed_json(&p.plan.program, &p.completed))?;
        map.serialize_entry("groups", &p.partitioned.groups.rings)?;
        map.serialize_entry("ledger", &p.ledger)?;
        map.serialize_entry("optimizer", &dist_json(&p.full))?;
        map.serialize_entry("pipeline", &schedule_json(p))?;
        map.serialize_entry(
            "ranks",
            &Ranks {
                pipeline: p,
                rank: self.rank,
            },
        )?;
        map.serialize_entry("schema_version", &SCHEMA_VERSION)?;
        map.end()
    }
}

/// A pipelined plan's schedule in ideal units (forward 1, backward 2, free transfers; the
/// cost model's seconds are in `shardlab cost --format json`), or null.
fn schedule_json(p: &Passes) -> Value {
    if !p.is_pipelined() || !p.is_fully_partitioned() {
        return Value::Null;
    }
    let elem = crate::cost::work::ElementBytes(4.0);
    match crate::cost::pipeline_cost::pipeline_cost(p, None, elem) {
        Ok(c) => crate::cost::estimate::pipeline_json(&c),
        Err(e) => json!({ "error": e.to_string() }),
    }
}

/// Writes the pipeline as one pretty-printed JSON document (and a newline) to `w`,
/// incrementally: one rank's JSON at a time.
pub fn write_pipeline_json(
    w: &mut impl std::io::Write,
    p: &Passes,
    rank: Option<u32>,
) -> std::io::Result<()> {
    serde_json::to_writer_pretty(&mut *w, &PipelineDoc { pipeline: p, rank })?;
    w.write_all(b"\n")
}

/// Everything as one JSON value (the JavaScript API's result).
pub fn pipeline_json(p: &Passes, rank: Option<u32>) -> Result<Value, serde_json::Error> {
    serde_json::to_value(PipelineDoc { pipeline: p, rank })
}
