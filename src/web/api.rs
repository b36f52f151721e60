//! The JavaScript API for documentation pages that drive the planner without the UI:
//! `plan({scenario | text, layers?, mesh?, shards?, megatron_sums?, zero?, topology?,
//! compute_dtype?, overlap?})` returns
//! every stage, the dist attrs, the ledger and the trace as plain JS objects, and with a
//! `topology` the step time and memory per rank as `cost` (see `www/api.html`).

use crate::models::scenarios::Scenario;
use crate::passes::driver::{run_passes, PassOptions};
use crate::plan::{parse_mesh_spec, parse_plan, parse_shard_spec};
use serde::Deserialize;
use std::sync::Arc;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

/// What `plan` takes. Unknown keys are errors naming the key (a typo must not plan
/// something else silently): `serde_wasm_bindgen` reads only the fields it knows, so
/// [`parse_request`] checks the object's own keys against [`KEYS`] first. `scenario` is the CLI's word for a named plan; `preset` is
/// accepted as its old name.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Request {
    #[serde(alias = "preset")]
    scenario: Option<String>,
    /// The scenario's model with this many transformer layers (1-96).
    layers: Option<usize>,
    text: Option<String>,
    mesh: Option<String>,
    #[serde(default)]
    shards: Vec<String>,
    /// Megatron's backward sums (see `PartitionOptions::defer_partial_sums`).
    #[serde(default)]
    megatron_sums: bool,
    /// ZeRO stage 0-3 (overrides the plan text's `options`).
    zero: Option<i64>,
    /// Cost with gradient synchronisation overlapped with backward compute.
    #[serde(default)]
    overlap: bool,
    /// Cost the plan on this topology (`h100x8`, `h100x8x4`, `tpu-v5e-16`, or `cpu` with
    /// nominal figures: the browser does not measure): adds `cost` to the result.
    topology: Option<String>,
    /// The precision compute is priced at: `bf16`, `f16` or `f32` (default: the
    /// topology's).
    compute_dtype: Option<String>,
    /// `export_jax`: `gspmd` (default) or `shard_map`.
    mode: Option<String>,
    /// `export_jax`: `annotated` (default) or `all`.
    constrain: Option<String>,
}

/// Every key a request may have.
const KEYS: &[&str] = &[
    "scenario",
    "preset",
    "layers",
    "text",
    "mesh",
    "shards",
    "megatron_sums",
    "zero",
    "overlap",
    "topology",
    "compute_dtype",
    "mode",
    "constrain",
];

/// An error naming the first key of `request` that is not in `keys` (`serde_wasm_bindgen`
/// reads only the fields it knows, so unknown ones must be caught here).
pub(super) fn reject_unknown_keys(request: &JsValue, keys: &[&str]) -> Result<(), JsValue> {
    if let Some(obj) = request.dyn_ref::<js_sys::Object>() {
        for key in js_sys::Object::keys(obj).iter() {
            let key = key.as_string().unwrap_or_default();
            if !keys.contains(&key.as_str()) {
                return Err(JsValue::from_str(&format!(
                    "bad request: unknown field `{key}`, expected one of {}",
                    keys.join(", ")
                )));
            }
        }
    }
    Ok(())
}

/// The page's clock in milliseconds (0 without one), for the benchmark hooks.
pub(super) fn now_ms() -> f64 {
    web_sys::window()
        .and_then(|w| w.performance())
        .map_or(0.0, |p| p.now())
}

/// Reads a request, rejecting keys it does not know.
fn parse_request(request: JsValue) -> Result<Request, JsValue> {
    reject_unknown_keys(&request, KEYS)?;
    serde_wasm_bindgen::from_value(request)
        .map_err(|e| JsValue::from_str(&format!("bad request: {e}")))
}

/// Plans `request` and returns the whole pipeline as a JS object; errors are JS errors
/// with a message.
pub fn plan(request: JsValue) -> Result<JsValue, JsValue> {
    let req = parse_request(request)?;
    let err = |m: String| JsValue::from_str(&m);
    let plan = request_plan(&req)?;
    let opts = PassOptions::from_plan(&plan.options);
    let p = run_passes(&plan, &opts).map_err(|e| err(e.to_string()))?;
    let mut json = crate::report::pipeline_json(&p, None).map_err(|e| err(e.to_string()))?;
    if let Some(name) = &req.topology {
        use crate::cost::device::{ComputeDType, Topology};
        let topo = Topology::preset(name).map_err(|e| err(format!("topology: {e}")))?;
        let dtype = match req.compute_dtype.as_deref() {
            None => topo.default_dtype,
            Some("bf16") => ComputeDType::Bf16,
            Some("f16") => ComputeDType::F16,
            Some("f32") => ComputeDType::F32,
            Some(other) => {
                return Err(err(format!(
                    "compute_dtype: `{other}` is not one of bf16, f16, f32"
                )))
            }
        };
        let opts = crate::cost::estimate::CostOptions {
            mixed_precision: plan.options.amp,
            overlap_grad_sync: req.overlap,
        };
        let e = crate::cost::estimate::estimate(&p, &topo, dtype, opts)
            .map_err(|e| err(e.to_string()))?;
        json["cost"] = crate::cost::estimate::estimate_json(&e);
    }
    serde::Serialize::serialize(&json, &serde_wasm_bindgen::Serializer::json_compatible())
        .map_err(|e| err(e.to_string()))
}

/// The plan a request describes: a preset scenario or plan text, with its mesh, shards
/// and options applied.
fn request_plan(req: &Request) -> Result<crate::plan::Plan, JsValue> {
    let err = |m: String| JsValue::from_str(&m);
    let mut plan = match (&req.text, &req.scenario) {
        (Some(text), _) => {
            parse_plan(text)
                .map_err(|e| {
                    err(e
                        .iter()
                        .map(|e| e.to_string())
                        .collect::<Vec<_>>()
                        .join("\n"))
                })?
                .0
        }
        (None, Some(name)) => {
            let sc = Scenario::by_name(name).ok_or_else(|| {
                let known: Vec<&str> = crate::models::scenarios::scenarios()
                    .iter()
                    .map(|s| s.name)
                    .collect();
                err(format!(
                    "unknown scenario `{name}` (one of {})",
                    known.join(", ")
                ))
            })?;
            match req.layers {
                None => sc.plan().map_err(|e| err(e.to_string()))?,
                Some(l) if !(1..=96).contains(&l) => {
                    return Err(err(format!("layers: {l} is not between 1 and 96")))
                }
                // Annotated per block where the scenario's annotations repeat per block.
                Some(l) => match sc.plan_layers(l) {
                    Some(plan) => plan.map_err(|e| err(e.to_string()))?,
                    None => sc
                        .plan_with(&crate::models::ModelConfig {
                            layers: l,
                            ..sc.config()
                        })
                        .map_err(|e| err(e.to_string()))?,
                },
            }
        }
        (None, None) => return Err(err("give `scenario` or `text`".into())),
    };
    if req.layers.is_some() && req.text.is_some() {
        return Err(err(
            "layers: only with `scenario` (plan text has its own layers)".into(),
        ));
    }
    if let Some(m) = &req.mesh {
        plan.set_mesh(Arc::new(parse_mesh_spec(m).map_err(|e| err(e.into()))?));
        plan.annotations.clear();
    }
    let mesh = plan
        .mesh()
        .cloned()
        .ok_or_else(|| err("the plan has no mesh".into()))?;
    for spec in &req.shards {
        let ann = parse_shard_spec(spec, &plan.program, &mesh).map_err(|e| err(e.into()))?;
        plan.annotations.retain(|a| a.var != ann.var);
        plan.annotations.push(ann);
    }
    plan.options.megatron_sums |= req.megatron_sums;
    if let Some(z) = req.zero {
        plan.options.zero =
            crate::plan::PlanOptions::check_zero(z).map_err(|e| err(e.to_string()))?;
    }
    Ok(plan)
}

/// The plan as a self-contained JAX script (`shardlab export --to jax`): the request of
/// `plan` plus `mode` (`gspmd` or `shard_map`) and `constrain` (`annotated` or `all`).
/// Returns the script text; errors are JS errors with a message.
pub fn export_jax(request: JsValue) -> Result<String, JsValue> {
    use crate::export::{Constrain, ExportMode, ExportOptions};
    let req = parse_request(request)?;
    let err = |m: String| JsValue::from_str(&m);
    let mode = match req.mode.as_deref() {
        None => ExportMode::Gspmd,
        Some(m) => ExportMode::from_name(m)
            .ok_or_else(|| err(format!("mode: `{m}` is not gspmd or shard_map")))?,
    };
    let constrain = match req.constrain.as_deref() {
        None | Some("annotated") => Constrain::Annotated,
        Some("all") => Constrain::All,
        Some(other) => return Err(err(format!("constrain: `{other}` is not annotated or all"))),
    };
    let plan = request_plan(&req)?;
    let p = run_passes(&plan, &PassOptions::from_plan(&plan.options))
        .map_err(|e| err(e.to_string()))?;
    let opts = ExportOptions {
        mode,
        constrain,
        source: "the ShardLab JavaScript API".into(),
        init: Default::default(),
    };
    crate::export::export_jax(&p, &opts).map_err(|e| err(e.to_string()))
}

/// A browser benchmark hook: plans `text` once, then times re-planning after one
/// annotation change, `repeat` times. Returns medians: `pipeline_ms` (what the playground
/// does after an edit), `completion_ms` (completion alone), `all_ranks_ms` (every rank),
/// `timeline_step_ms` (one timeline step with the replayed attrs and the inspector's tiles)
/// and `select_ms` (selecting a matmul output: tiles, A · B = C, why, exercises). The DOM
/// update is not included.
pub fn bench_replan(text: &str, repeat: u32) -> Result<JsValue, JsValue> {
    use crate::session::{Action, DimChoice, Session};
    let (plan, _) = parse_plan(text).map_err(|e| JsValue::from_str(&format!("{e:?}")))?;
    let session = Session::from_plan("custom", plan);
    let var = session
        .plan
        .program
        .vars()
        .first()
        .map(|v| v.name.to_string())
        .ok_or_else(|| JsValue::from_str("empty program"))?;
    let now = now_ms;
    let mut times = Vec::new();
    for i in 0..repeat.max(1) {
        let choice = if i % 2 == 0 {
            DimChoice::Free
        } else {
            DimChoice::Replicated
        };
        let s = session.clone();
        let t = now();
        let s = s.reduce(Action::SetDim {
            var: var.clone(),
            dim: 1,
            choice,
        });
        times.push(now() - t);
        drop(s);
    }
    let mut completion = Vec::new();
    for _ in 0..repeat.max(1) {
        let t = now();
        let _ = crate::passes::complete(&session.plan);
        completion.push(now() - t);
    }
    let mut all_ranks = Vec::new();
    for _ in 0..repeat.max(1) {
        let t = now();
        let _ = run_passes(&session.plan, &PassOptions::default());
        all_ranks.push(now() - t);
    }
    let (steps, selects) = bench_teaching(&session, &var, repeat, &now);
    let median = |mut v: Vec<f64>| {
        crate::sort::sort_by(&mut v, f64::total_cmp);
        v[v.len() / 2]
    };
    let out = serde_json::json!({
        "pipeline_ms": median(times),
        "completion_ms": median(completion),
        "all_ranks_ms": median(all_ranks),
        "timeline_step_ms": median(steps),
        "select_ms": median(selects),
    });
    serde::Serialize::serialize(&out, &serde_wasm_bindgen::Serializer::json_compatible())
        .map_err(|e| JsValue::from_str(&e.to_string()))
}

/// Times the timeline step (the reducer, the replayed attrs and the inspector's tiles) and
/// selecting a tensor (its tiles, its matmul picture, the why text and the exercises).
fn bench_teaching(
    session: &crate::session::Session,
    var: &str,
    repeat: u32,
    now: &dyn Fn() -> f64,
) -> (Vec<f64>, Vec<f64>) {
    use crate::session::Action;
    let var = var.to_string();
    let probe = session
        .plan
        .program
        .ops()
        .iter()
        .find(|o| o.ty == crate::ir::OpType::MatmulV2)
        .and_then(|o| o.all_outputs().next())
        .map(|v| session.plan.program.var(v).name.to_string())
        .unwrap_or_else(|| var.clone());
    let mut at = session
        .clone()
        .reduce(Action::SelectVar(Some(probe.clone())));
    let half = at.events() / 2;
    at = at.reduce(Action::Seek(half));
    let mut steps = Vec::new();
    for i in 0..repeat.max(1) {
        let s = at.clone();
        let t = now();
        let s = s.reduce(Action::Step(if i % 2 == 0 { 1 } else { -1 }));
        let _ = s.tensors_at(s.timeline);
        let _ = s.tiles_of(&probe);
        steps.push(now() - t);
    }
    let mut selects = Vec::new();
    for _ in 0..repeat.max(1) {
        let s = session.clone();
        let t = now();
        let s = s.reduce(Action::SelectVar(Some(probe.clone())));
        let _ = (s.tiles_of(&probe), s.matmul_of(&probe), s.exercises());
        if let (Some(p), Some(v)) = (s.pipeline.as_ref(), s.plan.program.var_id(&probe)) {
            let _ = crate::passes::complete::explain_text(&s.plan.program, &p.completed, v);
        }
        selects.push(now() - t);
    }
    (steps, selects)
}
