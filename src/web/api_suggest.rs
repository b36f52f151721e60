//! The JavaScript API's auto-planner: `suggest(request)` runs the whole search and returns
//! the document `shardlab suggest --format json` prints; `SuggestSearch` runs it a step at
//! a time so a page can show progress without freezing (the playground's Suggest panel
//! does). The request is [`crate::suggest::request::SuggestRequest`].

use crate::suggest::request::{SuggestRequest, KEYS};
use crate::suggest::{report, Search, Suggestion};
use wasm_bindgen::prelude::*;

fn parse(request: JsValue) -> Result<SuggestRequest, JsValue> {
    super::api::reject_unknown_keys(&request, KEYS)?;
    serde_wasm_bindgen::from_value(request)
        .map_err(|e| JsValue::from_str(&format!("bad request: {e}")))
}

/// The answer as the CLI's JSON document.
pub fn document(
    s: &Suggestion,
    model: crate::models::Model,
    topology: &str,
    budget: f64,
) -> Result<JsValue, JsValue> {
    let mut doc = report::json(s, model, topology, budget);
    doc["schema_version"] = serde_json::json!(crate::report::SCHEMA_VERSION);
    serde::Serialize::serialize(&doc, &serde_wasm_bindgen::Serializer::json_compatible())
        .map_err(|e| JsValue::from_str(&e.to_string()))
}

/// Runs a search to the end (blocking: prefer `SuggestSearch` for large ones).
pub fn suggest(request: JsValue) -> Result<JsValue, JsValue> {
    let mut search = SuggestSearch::new(request)?;
    loop {
        if let Some(done) = search.step()? {
            return Ok(done);
        }
    }
}

/// A search run a step at a time: `step()` returns `undefined` until the answer.
pub struct SuggestSearch {
    search: Search,
    model: crate::models::Model,
    topology: &'static str,
    budget: f64,
}

impl SuggestSearch {
    pub fn new(request: JsValue) -> Result<SuggestSearch, JsValue> {
        let req = parse(request)?;
        let err = |m: String| JsValue::from_str(&m);
        let (problem, mine, top) = req.problem().map_err(|e| err(e.to_string()))?;
        let (model, topology, budget) =
            (problem.model, problem.topology.name, problem.budget_bytes);
        let search = Search::new(problem, top, mine).map_err(|e| err(e.to_string()))?;
        Ok(SuggestSearch {
            search,
            model,
            topology,
            budget,
        })
    }

    /// Screens the next family (or finishes): the answer when done, else `undefined`.
    pub fn step(&mut self) -> Result<Option<JsValue>, JsValue> {
        match self.search.step() {
            None => Ok(None),
            Some(Ok(s)) => document(&s, self.model, self.topology, self.budget).map(Some),
            Some(Err(e)) => Err(JsValue::from_str(&e.to_string())),
        }
    }

    /// `[done, total]` work units.
    pub fn progress(&self) -> Vec<u32> {
        let (d, t) = self.search.progress();
        vec![d as u32, t as u32]
    }
}

/// A browser benchmark hook, the baseline `bench_suggest.mjs` reports the search against:
/// the median time, over `repeat` runs, of planning `text` (every rank) and pricing it on
/// `topology`, as `shardlab bench --what suggest` times one costing natively (no JSON).
pub fn bench_cost(text: &str, topology: &str, repeat: u32) -> Result<f64, JsValue> {
    use crate::passes::driver::{run_passes, PassOptions};
    let err = |m: String| JsValue::from_str(&m);
    let (plan, _) = crate::plan::parse_plan(text).map_err(|e| err(format!("{e:?}")))?;
    let topo = crate::cost::device::Topology::preset(topology).map_err(|e| err(e.to_string()))?;
    let mut times = Vec::new();
    for _ in 0..repeat.max(1) {
        let t = super::api::now_ms();
        let p = run_passes(&plan, &PassOptions::from_plan(&plan.options))
            .map_err(|e| err(e.to_string()))?;
        crate::cost::estimate::estimate(
            &p,
            &topo,
            topo.default_dtype,
            crate::cost::estimate::CostOptions::default(),
        )
        .map_err(|e| err(e.to_string()))?;
        times.push(super::api::now_ms() - t);
    }
    crate::sort::sort_by(&mut times, f64::total_cmp);
    Ok(times[times.len() / 2])
}
