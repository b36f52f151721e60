//! Browser tests (wasm-bindgen-test in headless Chromium): mount each panel, act, assert
//! the DOM. Run by scripts/test.sh with `cargo test --target wasm32-unknown-unknown`.
#![cfg(target_arch = "wasm32")]

use shardlab::dist::ProcessMesh;
use shardlab::web::{App, AppProps, EngineLink, MeshView, MeshViewProps};
use std::sync::Arc;
use std::time::Duration;
use wasm_bindgen::JsCast;
use wasm_bindgen_test::*;
use web_sys::{Element, Event, HtmlElement, HtmlSelectElement, HtmlTextAreaElement};

wasm_bindgen_test_configure!(run_in_browser);

fn document() -> web_sys::Document {
    web_sys::window().unwrap().document().unwrap()
}

/// A fresh `div` under `<body>`, with the URL hash and the autosave cleared first.
fn fresh_root(hash: &str) -> Element {
    let w = web_sys::window().unwrap();
    if let Ok(Some(s)) = w.local_storage() {
        s.clear().unwrap();
    }
    w.history()
        .unwrap()
        .replace_state_with_url(
            &wasm_bindgen::JsValue::NULL,
            "",
            Some(&format!("{}#{hash}", w.location().pathname().unwrap())),
        )
        .unwrap();
    let div = document().create_element("div").unwrap();
    document().body().unwrap().append_child(&div).unwrap();
    div
}

async fn settle() {
    yew::platform::time::sleep(Duration::from_millis(40)).await;
}

/// Waits until `done` holds (a re-plan can take longer than `settle` on a loaded machine),
/// at most 5 s; the caller's assertion then reports what is on the page.
async fn until(done: impl Fn() -> bool) {
    for _ in 0..100 {
        if done() {
            return;
        }
        yew::platform::time::sleep(Duration::from_millis(50)).await;
    }
}

fn q(root: &Element, selector: &str) -> Element {
    root.query_selector(selector)
        .unwrap()
        .unwrap_or_else(|| panic!("{selector} is on the page"))
}

fn text(root: &Element, selector: &str) -> String {
    q(root, selector).text_content().unwrap_or_default()
}

fn count(root: &Element, selector: &str) -> u32 {
    root.query_selector_all(selector).unwrap().length()
}

fn click(root: &Element, selector: &str) {
    let el = q(root, selector);
    match el.dyn_ref::<HtmlElement>() {
        Some(h) => h.click(),
        // SVG elements have no click(): dispatch the event.
        None => {
            let init = web_sys::MouseEventInit::new();
            init.set_bubbles(true);
            let e = web_sys::MouseEvent::new_with_mouse_event_init_dict("click", &init).unwrap();
            el.dispatch_event(&e).unwrap();
        }
    }
}

fn select(root: &Element, selector: &str, value: &str) {
    let s: HtmlSelectElement = q(root, selector).dyn_into().unwrap();
    s.set_value(value);
    s.dispatch_event(&Event::new("change").unwrap()).unwrap();
}

/// The app's props for a test page: the engine in-process (there is no worker here; the
/// end-to-end tests run the real one), through the worker's codec.
fn in_process() -> AppProps {
    AppProps {
        engine: Some(EngineLink::in_process(shardlab::engine::handle)),
    }
}

async fn app(hash: &str) -> Element {
    let root = fresh_root(hash);
    yew::Renderer::<App>::with_root_and_props(root.clone(), in_process()).render();
    settle().await;
    root
}

#[wasm_bindgen_test]
async fn the_app_shows_mesh_program_and_panels() {
    let root = app("s=megatron_mlp").await;
    assert_eq!(
        count(&root, ".mesh-panel .device"),
        4,
        "Megatron MLP on [4]"
    );
    assert_eq!(count(&root, ".program-panel .op"), 7);
    assert!(text(&root, ".program-panel h2").starts_with("Forward program — 7 ops"));
    assert!(text(&root, ".ledger").contains("tensor parallel"));
}

#[wasm_bindgen_test]
async fn choosing_a_preset_replans() {
    let root = app("s=megatron_mlp").await;
    select(&root, "#preset", "gpt_dp_mp");
    until(|| count(&root, ".mesh-panel .device") == 8).await;
    assert_eq!(count(&root, ".mesh-panel .device"), 8);
    assert!(text(&root, ".program-panel").contains("fused_softmax_mask_upper_triangle"));
}

#[wasm_bindgen_test]
async fn the_mesh_editor_resizes_by_dragging() {
    let root = app("s=megatron_mlp").await;
    let cell = q(&root, ".shape-grid .cell[data-rc='2x4']");
    cell.dispatch_event(&web_sys::MouseEvent::new("mousedown").unwrap())
        .unwrap();
    cell.dispatch_event(&web_sys::MouseEvent::new("mouseup").unwrap())
        .unwrap();
    settle().await;
    // Growing 1×4 to 2×4 adds `dp` in front: `mp` keeps its 4 ways (section 6 of issue 14).
    assert_eq!(
        text(&root, ".mesh-view figcaption"),
        "mesh [2, 4] (dp, mp): 8 devices"
    );
    assert_eq!(text(&root, ".mesh-panel .hint"), "2×4 — drag to resize");
    click(&root, ".device[data-rank='6']");
    settle().await;
    assert!(text(&root, ".rank-lens h2").contains("coordinates [1, 2]"));
}

#[wasm_bindgen_test]
async fn the_timeline_steps_and_highlights() {
    let root = app("s=megatron_mlp").await;
    let total = text(&root, ".timeline .count");
    assert!(total.starts_with("4 / 4 events"), "{total}");
    click(&root, ".timeline button[title='start (Home)']");
    settle().await;
    assert!(text(&root, ".timeline .count").starts_with("0 / 4"));
    assert_eq!(
        text(&root, ".timeline .event"),
        "the annotations, before completion"
    );
    click(&root, ".timeline button[title='step (→)']");
    settle().await;
    assert!(
        text(&root, ".timeline .event").contains("op0 matmul_v2 [matmul rule]"),
        "{}",
        text(&root, ".timeline .event")
    );
    assert_eq!(count(&root, ".op.current"), 1);
    assert_eq!(
        count(&root, ".op.current .chip.changed"),
        1,
        "the output the event set"
    );
}

#[wasm_bindgen_test]
async fn the_cost_panel_draws_time_and_memory_and_compares_with_a_pinned_plan() {
    let root = app("#s=dp_mlp").await;
    // The engine's answer can take longer than `settle` on a loaded machine.
    until(|| count(&root, ".cost-bars .bar") > 0).await;
    // One stacked bar per rank, three segments each; a memory line with its peak marked.
    assert_eq!(count(&root, ".cost-bars .bar"), 4);
    assert_eq!(count(&root, ".cost-bars .bar rect.seg"), 12);
    assert_eq!(count(&root, ".memory-chart polyline.timeline"), 1);
    assert!(text(&root, ".memory-chart .peak-label").starts_with("peak "));
    assert!(text(&root, ".cost-summary").starts_with("step "));
    let before = text(&root, ".cost-summary");
    // Another topology re-prices the same plan.
    let hash = || document().location().unwrap().hash().unwrap();
    select(&root, "#topology", "tpu-v5e-16");
    until(|| text(&root, ".cost-summary") != before && hash().contains("topo=tpu-v5e-16")).await;
    assert_ne!(text(&root, ".cost-summary"), before);
    assert!(hash().contains("topo=tpu-v5e-16"), "{}", hash());
    // Pin, switch ZeRO on: the plan text carries it, the ledger shows the sharding
    // collectives, and the comparison lists what changed.
    click(&root, "#pin");
    until(|| text(&root, "#pin") == "Unpin").await;
    assert_eq!(text(&root, "#pin"), "Unpin");
    select(&root, "#zero", "3");
    until(|| count(&root, ".diff-table tr.collective") > 0).await;
    let editor: HtmlTextAreaElement = q(&root, "#plan-text").dyn_into().unwrap();
    assert!(
        editor.value().contains("options zero=3"),
        "{}",
        editor.value()
    );
    assert!(
        text(&root, ".ledger").contains("ZeRO sharding"),
        "{}",
        text(&root, ".ledger")
    );
    let table = text(&root, ".diff-table");
    assert!(
        table.contains("step time") && table.contains("peak memory"),
        "{table}"
    );
    assert!(table.contains("backward reduce_scatter"), "{table}");
    until(|| hash().contains("zero=3")).await;
    assert!(hash().contains("zero=3"), "{}", hash());
    // Peak memory per rank fell (the parameters are sharded): its row is marked better.
    let better = root.query_selector_all(".diff-table tr.better").unwrap();
    let rows: Vec<String> = (0..better.length())
        .filter_map(|i| better.item(i))
        .map(|r| r.text_content().unwrap_or_default())
        .collect();
    assert!(
        rows.iter().any(|r| r.starts_with("peak memory")),
        "{rows:?}"
    );
}

#[wasm_bindgen_test]
async fn the_megatron_sums_toggle_replans_the_ledger() {
    let root = app("#s=gpt_dp_mp&rank=5").await;
    let backward_tp = |root: &Element| {
        let rows = root
            .query_selector_all(".ledger-table tr.purpose-TensorParallel")
            .unwrap();
        (0..rows.length())
            .filter_map(|i| rows.item(i))
            .map(|r| r.text_content().unwrap_or_default())
            .find(|t| t.starts_with("backward"))
            .unwrap_or_default()
    };
    assert!(
        backward_tp(&root).starts_with("backwardtensor parallelall_reduce4"),
        "{}",
        backward_tp(&root)
    );
    let toggle: web_sys::HtmlInputElement = q(&root, "#megatron-sums").dyn_into().unwrap();
    toggle.click();
    settle().await;
    until(|| backward_tp(&root).starts_with("backwardtensor parallelall_reduce2")).await;
    assert!(
        backward_tp(&root).starts_with("backwardtensor parallelall_reduce2"),
        "{}",
        backward_tp(&root)
    );
    // The link follows in an effect after the render: wait for it on a loaded machine.
    let hash = || document().location().unwrap().hash().unwrap();
    until(|| hash().contains("ms=1")).await;
    assert!(hash().contains("ms=1"), "{}", hash());
}

#[wasm_bindgen_test]
async fn conflicts_are_marked_on_their_op_once_reached() {
    let root = app("#s=reshard_conflict").await;
    assert!(text(&root, ".timeline .count").contains("conflict"));
    assert!(count(&root, ".op.conflict") >= 1);
    let badge = q(&root, ".op.conflict .conflict-badge");
    let why = badge.get_attribute("title").unwrap_or_default();
    assert!(why.contains("pinned"), "{why}");
    click(&root, ".timeline button[title='start (Home)']");
    settle().await;
    assert_eq!(
        count(&root, ".op.conflict"),
        0,
        "not before the timeline reaches it"
    );
}

#[wasm_bindgen_test]
async fn the_inspector_annotates_a_dim() {
    let root = app("s=megatron_mlp").await;
    click(&root, ".chip[data-var='x']");
    settle().await;
    assert!(text(&root, ".inspector h2").starts_with("x"));
    select(&root, ".inspector select[data-dim='0']", "0");
    settle().await;
    let editor: HtmlTextAreaElement = q(&root, "#plan-text").dyn_into().unwrap();
    assert!(
        editor.value().contains("shard x [mp, ?]"),
        "{}",
        editor.value()
    );
    assert!(text(&root, ".inspector .notations").contains("P('mp', None)"));
    assert!(text(&root, ".why-panel .why").contains("annotated"));
    // An invalid choice explains itself at the dim, and the menu reverts.
    select(&root, ".inspector select[data-dim='1']", "0");
    settle().await;
    assert_eq!(count(&root, ".banner"), 0, "no page banner");
    assert!(text(&root, ".inspector .dim-error").contains("splits more than one dim"));
    let menu: HtmlSelectElement = q(&root, ".inspector select[data-dim='1']")
        .dyn_into()
        .unwrap();
    assert_ne!(
        menu.value(),
        "0",
        "the menu no longer says the rejected axis"
    );
    // The axis another dim uses is disabled in this dim's menu.
    assert!(
        q(&root, ".inspector select[data-dim='1'] option[value='0']").has_attribute("disabled")
    );
}

#[wasm_bindgen_test]
async fn the_partition_stage_colours_communication() {
    let root = app("s=megatron_mlp").await;
    click(&root, ".tabs .tab:nth-child(3)");
    settle().await;
    assert!(text(&root, ".program-panel h2").starts_with("Rank 0 — "));
    assert_eq!(
        count(&root, ".op.comm.tp"),
        1,
        "one tensor-parallel all-reduce"
    );
    assert_eq!(
        text(&root, ".op.comm.tp .impl"),
        "group [0, 1, 2, 3] · SUM · 960 B sent"
    );
    select(&root, "#rank", "2");
    settle().await;
    assert!(text(&root, ".program-panel h2").starts_with("Rank 2 — "));
    assert!(text(&root, ".rank-lens").contains("all_reduce linear_1.tmp_0 over [0, 1, 2, 3]"));
    assert!(text(&root, ".rank-lens .comm-group.tp summary").contains("tensor parallel (1)"));
    // The rank program's chips show each variable's layout: the column-parallel weight
    // split, the all-reduced output settled to replicated.
    assert_eq!(
        text(
            &root,
            ".program-panel .chip[data-var='linear_0.w_0'] .shard"
        ),
        "[-1, 0]"
    );
    assert_eq!(
        text(
            &root,
            ".program-panel .op.comm.tp .chip[data-var='linear_1.tmp_0'] .shard"
        ),
        "[-1, -1]"
    );
    // linear_0.w_0 is split by columns over the 4 ranks: rank 2 holds the third block.
    let first = q(&root, ".rank-lens .shards li");
    assert!(
        text(&first, "figcaption").starts_with("linear_0.w_0 local [64, 64]"),
        "{}",
        text(&first, "figcaption")
    );
    let tiles = first.query_selector_all("rect.tile").unwrap();
    let mine: Vec<String> = (0..tiles.length())
        .filter_map(|i| tiles.item(i).and_then(|n| n.dyn_into::<Element>().ok()))
        .filter(|e| {
            e.get_attribute("class")
                .unwrap_or_default()
                .split_whitespace()
                .any(|c| c == "mine")
        })
        .filter_map(|e| e.get_attribute("data-devices"))
        .collect();
    assert_eq!((tiles.length(), mine), (4, vec!["2".to_string()]));
}

#[wasm_bindgen_test]
async fn the_run_panel_verifies_in_the_browser() {
    let root = app("s=megatron_mlp").await;
    click(&root, "#run");
    settle().await;
    assert!(text(&root, ".run-panel .verdict").ends_with("tensors match the serial run"));
    assert_eq!(count(&root, ".run-panel tr.fail"), 0);
    assert!(count(&root, ".run-panel tr.pass") > 3);
}

#[wasm_bindgen_test]
async fn the_editor_reports_errors_at_line_and_column() {
    let root = app("s=megatron_mlp").await;
    let editor: HtmlTextAreaElement = q(&root, "#plan-text").dyn_into().unwrap();
    editor.set_value("mesh [4] (mp)\nvar x f32[2] input\n");
    editor
        .dispatch_event(&web_sys::InputEvent::new("input").unwrap())
        .unwrap();
    yew::platform::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        text(&root, ".editor .errors"),
        "2:7: expected `:`, found `f32`"
    );
    // The same error is marked in the text, on the token at line 2, column 7.
    let mark = q(&root, ".editor .code-backdrop mark.err");
    assert_eq!(mark.text_content().unwrap_or_default(), "f32[2]");
    assert_eq!(
        mark.get_attribute("title").as_deref(),
        Some("expected `:`, found `f32`")
    );
    let backdrop = text(&root, ".editor .code-backdrop");
    assert_eq!(backdrop, "mesh [4] (mp)\nvar x f32[2] input\n\n");
    // Clicking the error in the list puts the caret on it: line 2 starts at 14, column 7.
    click(&root, ".editor .errors li");
    assert_eq!(editor.selection_start().ok().flatten(), Some(14 + 6));
}

#[wasm_bindgen_test]
async fn links_restore_state_and_bad_links_explain() {
    let root = app("s=gpt_dp_mp&stage=partition&rank=5&n=jax").await;
    assert!(text(&root, ".program-panel h2").starts_with("Rank 5 — "));
    let root = app("s=warp_drive").await;
    assert!(text(&root, ".banner")
        .contains("This link could not be opened: unknown preset `warp_drive`"));
    assert_eq!(
        count(&root, ".mesh-panel .device"),
        8,
        "the default preset (GPT-3 13B on dp 2 × tp 4) is shown"
    );
}

/// With a topology, the API returns the cost: step time, MFU and 8 ranks' memory.
#[wasm_bindgen_test]
fn the_javascript_api_costs_a_plan() {
    let get = |o: &wasm_bindgen::JsValue, k: &str| js_sys::Reflect::get(o, &k.into()).unwrap();
    let req = js_sys::JSON::parse(r#"{"preset": "gpt_dp_mp", "topology": "h100x8"}"#).unwrap();
    let out = shardlab::web::plan(req).unwrap();
    let cost = get(&out, "cost");
    assert_eq!(
        get(&cost, "topology").as_string().as_deref(),
        Some("h100x8")
    );
    assert!(get(&cost, "step_time_s").as_f64().unwrap() > 0.0);
    let ranks = js_sys::Array::from(&get(&cost, "ranks"));
    assert_eq!(ranks.length(), 8);
    assert!(get(&ranks.get(0), "peak_memory_bytes").as_f64().unwrap() > 0.0);
    let bad = js_sys::JSON::parse(r#"{"preset": "dp_mlp", "topology": "a100"}"#).unwrap();
    let e = shardlab::web::plan(bad).unwrap_err().as_string().unwrap();
    assert!(e.contains("unknown topology `a100`"), "{e}");
}

#[wasm_bindgen_test]
async fn the_export_panel_shows_a_script_to_copy_and_download() {
    let root = app("s=megatron_mlp").await;
    click(&root, "#export-shard-map");
    settle().await;
    let script = text(&root, "#export-script");
    assert!(
        script.starts_with("#!/usr/bin/env python3"),
        "{}",
        &script[..80.min(script.len())]
    );
    assert!(script.contains("jax.shard_map") && script.contains("def rank_step(v, me):"));
    let href = q(&root, "#export-download").get_attribute("href").unwrap();
    assert!(href.starts_with("data:text/x-python;charset=utf-8,%23!%2Fusr%2Fbin%2Fenv"));
    assert_eq!(
        q(&root, "#export-download")
            .get_attribute("download")
            .as_deref(),
        Some("shardlab_shard_map.py")
    );
    click(&root, "#export-gspmd");
    settle().await;
    assert!(text(&root, "#export-script").contains("def forward(v):"));
}

#[wasm_bindgen_test]
fn the_javascript_api_exports_a_script() {
    let req = js_sys::JSON::parse(r#"{"preset": "megatron_mlp", "mode": "shard_map"}"#).unwrap();
    let script = shardlab::web::export_jax(req).unwrap();
    assert!(script.contains("all_reduce(") && script.contains("MODE = \"shard_map\""));
    let gspmd =
        shardlab::web::export_jax(js_sys::JSON::parse(r#"{"preset": "megatron_mlp"}"#).unwrap())
            .unwrap();
    assert!(gspmd.contains("MODE = \"gspmd\"") && !gspmd.contains("all_reduce(v["));
    let bad = js_sys::JSON::parse(r#"{"preset": "dp_mlp", "mode": "pmap"}"#).unwrap();
    let e = shardlab::web::export_jax(bad)
        .unwrap_err()
        .as_string()
        .unwrap();
    assert!(e.contains("mode: `pmap` is not gspmd or shard_map"), "{e}");
}

#[wasm_bindgen_test]
fn the_javascript_api_plans() {
    let req = js_sys::JSON::parse(r#"{"preset": "dp_mlp"}"#).unwrap();
    let out = shardlab::web::plan(req).unwrap();
    let ranks = js_sys::Reflect::get(&out, &"ranks".into()).unwrap();
    assert_eq!(js_sys::Array::from(&ranks).length(), 4);
    let err = |request: &str| {
        shardlab::web::plan(js_sys::JSON::parse(request).unwrap())
            .unwrap_err()
            .as_string()
            .unwrap_or_default()
    };
    assert!(err(r#"{"scenario": "nope"}"#).starts_with("unknown scenario `nope` (one of dp_mlp,"));
    // Unknown keys are errors naming the key, not silently ignored (issue 14, section 6).
    let typo = err(r#"{"scenario": "gpt_dp_mp", "layer": 4}"#);
    assert!(typo.contains("unknown field `layer`"), "{typo}");
    assert!(err(r#"{"scenario": "gpt_dp_mp", "layers": 0}"#)
        .contains("layers: 0 is not between 1 and 96"));
    // `layers` sizes the scenario's model: 4 blocks plan 4 blocks.
    let out = shardlab::web::plan(
        js_sys::JSON::parse(r#"{"scenario": "gpt_dp_mp", "layers": 4}"#).unwrap(),
    )
    .unwrap();
    let text = js_sys::JSON::stringify(&out).unwrap().as_string().unwrap();
    assert!(
        text.contains("h3.mlp.fc2.w") && !text.contains("h4."),
        "4 layers"
    );
    // Megatron's sums halve the backward tensor-parallel all-reduces of a GPT layer.
    let backward_tp = |request: &str| {
        let out = shardlab::web::plan(js_sys::JSON::parse(request).unwrap()).unwrap();
        let ledger = js_sys::Array::from(&js_sys::Reflect::get(&out, &"ledger".into()).unwrap());
        ledger
            .iter()
            .filter(|e| {
                let field = |k: &str| js_sys::Reflect::get(e, &k.into()).unwrap();
                field("rank").as_f64() == Some(5.0)
                    && field("phase").as_string().as_deref() == Some("backward")
                    && field("purpose").as_string().as_deref() == Some("TensorParallel")
            })
            .count()
    };
    assert_eq!(backward_tp(r#"{"preset": "gpt_dp_mp"}"#), 4);
    assert_eq!(
        backward_tp(r#"{"preset": "gpt_dp_mp", "megatron_sums": true}"#),
        2
    );
}

#[wasm_bindgen_test]
async fn mesh_view_draws_every_device_with_its_process_id() {
    let root = fresh_root("");
    let ids = vec![7, 6, 5, 4, 3, 2, 1, 0];
    let mesh = ProcessMesh::new(
        vec![2, 2, 2],
        ids,
        vec!["pp".into(), "dp".into(), "mp".into()],
    )
    .unwrap();
    let props = MeshViewProps {
        mesh: Arc::new(mesh),
        selected: None,
        lit: vec![],
        on_select: None,
    };
    yew::Renderer::<MeshView>::with_root_and_props(root.clone(), props).render();
    settle().await;
    let devices = root.query_selector_all(".device").unwrap();
    assert_eq!(devices.length(), 8);
    let first = devices.item(0).unwrap().dyn_into::<Element>().unwrap();
    assert_eq!(first.get_attribute("data-rank").as_deref(), Some("7"));
    let labels: Vec<String> = {
        let nodes = root.query_selector_all(".axis-label").unwrap();
        (0..nodes.length())
            .map(|i| nodes.item(i).unwrap().text_content().unwrap_or_default())
            .collect()
    };
    // Three axes draw as two layers (pp = 0, pp = 1) of dp × mp.
    assert_eq!(labels, ["mp →", "dp →", "pp = 0", "pp = 1"]);
    assert_eq!(
        text(&root, "figcaption"),
        "mesh [2, 2, 2] (pp, dp, mp) ids [7, 6, 5, 4, 3, 2, 1, 0]: 8 devices · 2 pipeline \
         stages (S0–S1), one per `pp` coordinate"
    );
}

fn slide(root: &Element, selector: &str, value: &str) {
    let i: web_sys::HtmlInputElement = q(root, selector).dyn_into().unwrap();
    i.set_value(value);
    i.dispatch_event(&Event::new("input").unwrap()).unwrap();
}

#[wasm_bindgen_test]
async fn the_pipeline_panel_draws_the_gantt_and_follows_the_controls() {
    let root = app("#s=megatron_mlp&mesh=2x2:pp,mp&ideal=1").await;
    // The pp axis colours the mesh by stage; the Gantt has a row per stage.
    assert_eq!(count(&root, ".mesh-view .device.stage-0"), 2);
    assert_eq!(count(&root, ".mesh-view .device.stage-1"), 2);
    until(|| count(&root, ".gantt .stage-row") == 2).await;
    assert_eq!(count(&root, ".gantt .stage-row"), 2);
    // One micro-batch (fthenb): a forward and a backward per stage, and the optimizer.
    assert_eq!(count(&root, ".gantt .job.forward"), 2);
    assert_eq!(count(&root, ".gantt .job.backward"), 2);
    assert_eq!(text(&root, "#bubble-fraction"), "0.500");
    // 4 micro-batches, 1F1B: the bubble follows (p−1)/(M+p−1) = 1/5.
    slide(&root, "#micro-batches", "4");
    until(|| text(&root, "#bubble-fraction") == "0.200").await;
    select(&root, "#schedule", "1f1b");
    until(|| count(&root, ".gantt .job.forward") == 8).await;
    assert_eq!(count(&root, ".gantt .job.forward"), 8);
    assert_eq!(text(&root, "#bubble-fraction"), "0.200");
    let hash = || document().location().unwrap().hash().unwrap();
    until(|| hash().contains("sched=1f1b") && hash().contains("mb=4")).await;
    assert!(
        hash().contains("sched=1f1b") && hash().contains("mb=4"),
        "{}",
        hash()
    );
    // Zero bubble splits backwards into input and weight halves.
    select(&root, "#schedule", "zbh1_paper");
    until(|| count(&root, ".gantt .job.backward_w") == 8).await;
    assert_eq!(count(&root, ".gantt .job.backward_b"), 8);
    // Held activations: 1F1B's first stage holds p micro-batches, the last one.
    select(&root, "#schedule", "1f1b");
    until(|| count(&root, ".gantt .job.backward") == 8).await;
    assert_eq!(
        text(&root, ".pipeline-stats tr[data-stage='0'] td:nth-child(3)"),
        "2"
    );
    assert_eq!(
        text(&root, ".pipeline-stats tr[data-stage='1'] td:nth-child(3)"),
        "1"
    );
}

#[wasm_bindgen_test]
async fn stage_boundaries_move_in_the_program_view() {
    let root = app("#s=megatron_mlp&mesh=2x2:pp,mp").await;
    until(|| count(&root, ".stage-boundary") == 1).await;
    assert_eq!(count(&root, ".stage-boundary"), 1);
    // The boundary sits before stage 1's first op (op 3), and the marks agree.
    let marks = |i: usize| text(&root, &format!("li.op[data-op='{i}'] .stage-mark"));
    assert_eq!((marks(2), marks(3)), ("S0".to_string(), "S1".to_string()));
    click(&root, ".stage-boundary .earlier");
    until(|| marks(2) == "S1").await;
    assert_eq!(marks(2), "S1");
    let hash = || document().location().unwrap().hash().unwrap();
    until(|| hash().contains("pps=0,2")).await;
    assert!(hash().contains("pps=0,2"), "{}", hash());
    // Dropping the boundary on op 4 (a drag from the boundary onto an op row).
    let dt = web_sys::DataTransfer::new().unwrap();
    dt.set_data("application/x-shardlab-stage", "1").unwrap();
    let init = web_sys::DragEventInit::new();
    init.set_bubbles(true);
    init.set_data_transfer(Some(&dt));
    let drop = web_sys::DragEvent::new_with_event_init_dict("drop", &init).unwrap();
    q(&root, "li.op[data-op='4']")
        .dispatch_event(&drop)
        .unwrap();
    until(|| marks(3) == "S0").await;
    assert_eq!((marks(3), marks(4)), ("S0".to_string(), "S1".to_string()));
}

/// Mounts the app at `?query#hash` (lessons and embeds read the query).
async fn app_at(query: &str, hash: &str) -> Element {
    let root = fresh_root(hash);
    let w = web_sys::window().unwrap();
    w.history()
        .unwrap()
        .replace_state_with_url(
            &wasm_bindgen::JsValue::NULL,
            "",
            Some(&format!(
                "{}?{query}#{hash}",
                w.location().pathname().unwrap()
            )),
        )
        .unwrap();
    yew::Renderer::<App>::with_root_and_props(root.clone(), in_process()).render();
    settle().await;
    root
}

fn attr(root: &Element, selector: &str, name: &str) -> String {
    q(root, selector).get_attribute(name).unwrap_or_default()
}

#[wasm_bindgen_test]
async fn the_inspector_draws_tiles_the_matmul_and_who_sums_a_partial() {
    let root = app("s=megatron_mlp&stage=partition").await;
    click(&root, ".chip[data-var='linear_1.tmp_0']");
    settle().await;
    // The row-parallel output: one block, 4 partial addends (Σ), no identical copies.
    let fig = ".inspector > .tile-view";
    assert_eq!(attr(&root, fig, "data-addends"), "4");
    assert_eq!(attr(&root, fig, "data-replicas"), "1");
    assert_eq!(count(&root, &format!("{fig} rect.tile.partial")), 4);
    // A · B = C, with the contracted dim marked on both inputs.
    assert_eq!(count(&root, ".inspector .matmul .tile-view"), 3);
    assert_eq!(count(&root, ".inspector .matmul .k-mark"), 2);
    assert!(text(&root, ".inspector .resolver").contains("all_reduce at op"));
    assert!(text(&root, ".why-panel .why").contains("reduces over the contraction k"));
    // The column-parallel weight: 4 blocks side by side, this rank's outlined.
    click(&root, ".chip[data-var='linear_0.w_0']");
    settle().await;
    assert_eq!(attr(&root, fig, "data-splits"), "[1, 4]");
    assert_eq!(count(&root, &format!("{fig} rect.tile.mine")), 1);
}

#[wasm_bindgen_test]
async fn six_notations_in_the_menu_and_the_inspector() {
    let root = app("s=megatron_mlp").await;
    assert_eq!(count(&root, "#notation option"), 6);
    select(&root, "#notation", "typed");
    settle().await;
    assert!(
        text(&root, ".chip[data-var='linear_0.w_0'] .shard").starts_with("f32[64, 256@mp]"),
        "{}",
        text(&root, ".chip[data-var='linear_0.w_0'] .shard")
    );
    select(&root, "#notation", "book");
    settle().await;
    assert_eq!(
        text(&root, ".chip[data-var='linear_0.w_0'] .shard"),
        "[I, J_mp]"
    );
    click(&root, ".chip[data-var='linear_1.tmp_0']");
    settle().await;
    assert!(text(&root, ".inspector .notations").contains("{U_mp}"));
}

#[wasm_bindgen_test]
async fn the_backward_tab_marks_inserted_sync_and_links_to_it() {
    let root = app("s=dp_mlp&stage=backward").await;
    let markers = count(&root, ".inserted-marker");
    assert!(markers >= 2, "{markers} markers");
    assert!(text(&root, ".program-panel").contains("scale linear_0.w_0@GRAD ×0.25"));
    click(&root, ".inserted-marker button.comm.dp");
    settle().await;
    settle().await;
    assert!(text(&root, ".program-panel h2").starts_with("Rank 0 — "));
    assert_eq!(count(&root, ".op.focused"), 1);
}

#[wasm_bindgen_test]
async fn rank_lens_groups_by_purpose_and_lights_one_group_in_its_colour() {
    let root = app("s=gpt_dp_mp&rank=5").await;
    assert!(count(&root, ".rank-lens details.comm-group") >= 2);
    assert!(text(&root, ".rank-lens details.comm-group.dp summary").starts_with("data parallel ("));
    // Before a click every group of rank 5 is lit: dp [1, 5] and tp [4..7].
    assert!(count(&root, ".mesh-panel .device[data-lit~='tp']") == 4);
    click(&root, ".rank-lens details.comm-group.dp button");
    settle().await;
    settle().await;
    assert_eq!(count(&root, ".mesh-panel .device[data-lit~='dp']"), 2);
    assert_eq!(
        count(&root, ".mesh-panel .device[data-lit~='tp']"),
        0,
        "only the clicked group"
    );
    assert_eq!(count(&root, ".op.focused"), 1);
}

#[wasm_bindgen_test]
async fn break_it_shows_what_diverges_with_a_diagnosis_and_heatmap() {
    let root = app("s=dp_mlp").await;
    let toggle: web_sys::HtmlInputElement = q(&root, "#break-mode").dyn_into().unwrap();
    toggle.set_checked(true);
    toggle
        .dispatch_event(&Event::new("change").unwrap())
        .unwrap();
    settle().await;
    assert!(count(&root, ".break-op") >= 4);
    // Drop the first scale.
    let scale = root.query_selector_all(".break-op .delete").unwrap();
    let drop = (0..scale.length())
        .filter_map(|i| scale.item(i).and_then(|n| n.dyn_into::<HtmlElement>().ok()))
        .find(|b| b.text_content().unwrap_or_default() == "drop the scale")
        .expect("a scale to drop");
    drop.click();
    settle().await;
    assert_eq!(count(&root, ".breaks li"), 1);
    click(&root, "#run-broken");
    settle().await;
    until(|| count(&root, ".break-report") == 1).await;
    assert!(text(&root, ".break-report .verdict.fail").contains("diverge from the serial run"));
    assert!(text(&root, ".diverged .diagnosis").contains("4.0000× the serial value on every copy"));
    assert_eq!(count(&root, ".diverged:first-child .heatmap"), 1);
}

#[wasm_bindgen_test]
async fn a_lesson_link_opens_its_state_text_and_focus() {
    let root = app_at("lesson=4", "").await;
    assert!(text(&root, ".lesson-card h2").starts_with("Lesson 4 of 13: Row-parallel"));
    assert_eq!(attr(&root, "main.app", "data-focus"), "inspector");
    assert_eq!(attr(&root, ".lesson-nav .next", "href"), "?lesson=5");
    assert!(text(&root, ".inspector h2").starts_with("linear_1.tmp_0"));
    assert_eq!(count(&root, ".lesson-menu li"), 13);
    let root = app_at("lesson=99", "").await;
    assert!(text(&root, ".banner").contains("there is no lesson 99"));
}

#[wasm_bindgen_test]
async fn an_embed_has_its_own_bar_never_autosaves_and_resets() {
    let root = app_at("embed=1", "s=dp_mlp").await;
    assert!(attr(&root, "#open-in-shardlab", "href").contains("#s=dp_mlp"));
    let storage = web_sys::window().unwrap().local_storage().unwrap().unwrap();
    storage.set_item("shardlab", "s=gpt_dp_mp").unwrap();
    click(&root, ".tabs .tab:nth-child(2)");
    settle().await;
    assert_eq!(
        storage.get_item("shardlab").unwrap().as_deref(),
        Some("s=gpt_dp_mp"),
        "the reader's session is kept"
    );
    click(&root, "#embed-reset");
    settle().await;
    assert!(text(&root, ".program-panel h2").starts_with("Forward program"));
}

#[wasm_bindgen_test]
async fn mesh_editor_third_axis_keeps_names_and_hints_the_whole_shape() {
    let root = app("s=gpt_dp_mp").await;
    select(&root, "#depth", "2");
    settle().await;
    until(|| text(&root, ".mesh-view figcaption").contains("16 devices")).await;
    assert_eq!(
        text(&root, ".mesh-view figcaption"),
        "mesh [2, 2, 4] (d0, dp, mp): 16 devices"
    );
    assert_eq!(text(&root, ".mesh-panel .hint"), "2×2×4 — drag to resize");
    assert_eq!(count(&root, ".mesh-view .axis-label.layer"), 2);
    // Every device carries its colour swatch, the same colour its tiles have.
    assert_eq!(count(&root, ".mesh-view rect.swatch"), 16);
}

#[wasm_bindgen_test]
async fn presenter_mode_skip_link_and_labels() {
    let root = app("s=megatron_mlp").await;
    click(&root, "#presenter");
    settle().await;
    assert!(attr(&root, "main.app", "class")
        .split_whitespace()
        .any(|c| c == "presenter"));
    assert_eq!(count(&root, "a.skip-link[href='#program']"), 1);
    assert_eq!(attr(&root, "#rank", "aria-label"), "rank");
    assert_eq!(count(&root, "#copy-link"), 1);
    assert_eq!(attr(&root, "a.small-link", "href"), "api.html");
}

#[wasm_bindgen_test]
async fn a_collective_shows_real_values_and_steps_through_its_ring() {
    let root = app("s=megatron_mlp&stage=partition").await;
    click(&root, ".op.comm.tp button.values");
    settle().await;
    until(|| count(&root, ".values-panel .value-blocks tbody tr") == 4).await;
    assert_eq!(count(&root, ".values-panel .value-blocks tbody tr"), 4);
    assert!(text(&root, ".values-panel .ring-title").starts_with("start"));
    for _ in 0..6 {
        click(&root, "#ring-next");
        settle().await;
    }
    assert_eq!(
        text(&root, ".values-panel .ring-title"),
        "all-gather step 3/3"
    );
    assert!(q(&root, "#ring-next").has_attribute("disabled"));
    assert_eq!(count(&root, ".values-panel .ring td.received"), 4);
    click(&root, ".values-panel button.close");
    settle().await;
    assert_eq!(count(&root, ".values-panel"), 0);
}

/// A send between pipeline stages shows the block sent and the block that arrived (a dash
/// where a send has no output or a recv no input), equal.
#[wasm_bindgen_test]
async fn a_send_between_stages_shows_the_block_sent_and_received() {
    let root = app("#s=megatron_mlp&mesh=2x2:pp,mp&stage=partition").await;
    let ops = root.query_selector_all("li.op").unwrap();
    let send = (0..ops.length())
        .filter_map(|i| ops.item(i))
        .filter_map(|n| n.dyn_into::<Element>().ok())
        .find(|e| {
            let ty = e.query_selector(".type").ok().flatten();
            ty.and_then(|t| t.text_content()).as_deref() == Some("send")
                && e.query_selector("button.values").ok().flatten().is_some()
        })
        .expect("rank 0 sends to stage 1");
    send.query_selector("button.values")
        .unwrap()
        .unwrap()
        .dyn_into::<web_sys::HtmlElement>()
        .unwrap()
        .click();
    settle().await;
    until(|| count(&root, ".values-panel .value-blocks tbody tr") == 2).await;
    let cell = |row: u32, col: u32| {
        text(
            &root,
            &format!(".values-panel .value-blocks tbody tr:nth-child({row}) td:nth-child({col})"),
        )
    };
    assert_eq!(cell(1, 3), "—", "a send has no output block");
    assert_eq!(cell(2, 2), "—", "a recv has no input block");
    assert_eq!(cell(1, 2), cell(2, 3), "what arrived is what was sent");
    assert!(text(&root, ".values-panel .hint").contains("sends"));
}

#[wasm_bindgen_test]
async fn exercises_are_graded_explained_and_remembered() {
    let root = app_at("exercises=1", "s=megatron_mlp&rank=2").await;
    assert_eq!(count(&root, ".exercise"), 5);
    let answer = |id: &str, value: &str| {
        let li = q(&root, &format!(".exercise[data-id^='{id}']"));
        let input: web_sys::HtmlInputElement = q(&li, "input.answer").dyn_into().unwrap();
        input.set_value(value);
        let form: web_sys::HtmlFormElement = q(&li, "form").dyn_into().unwrap();
        form.request_submit().unwrap();
    };
    answer("shape:linear_0.w_0", "[64, 256]");
    settle().await;
    assert!(text(
        &root,
        ".exercise[data-id='shape:linear_0.w_0'] .feedback.wrong"
    )
    .starts_with("Not quite: the plan says [64, 64]"));
    answer("kind:", "allreduce");
    settle().await;
    assert!(
        text(&root, ".exercise[data-id^='kind:'] .feedback.right").starts_with("Right: all_reduce")
    );
    let stored = web_sys::window()
        .unwrap()
        .local_storage()
        .unwrap()
        .unwrap()
        .get_item("shardlab-exercises")
        .unwrap()
        .unwrap_or_default();
    assert!(stored.contains("|kind:"), "{stored}");
    assert!(text(&root, ".exercise-panel h2").contains("1 of 5 solved"));
}

fn key(el: &Element, key: &str) {
    let init = web_sys::KeyboardEventInit::new();
    init.set_key(key);
    init.set_bubbles(true);
    init.set_cancelable(true);
    el.dispatch_event(
        &web_sys::KeyboardEvent::new_with_keyboard_event_init_dict("keydown", &init).unwrap(),
    )
    .unwrap();
}

#[wasm_bindgen_test]
async fn the_mesh_grid_and_devices_work_from_the_keyboard() {
    let root = app("s=megatron_mlp").await;
    let grid = q(&root, ".shape-grid");
    assert_eq!(grid.get_attribute("tabindex").as_deref(), Some("0"));
    key(&grid, "ArrowDown");
    settle().await;
    key(&q(&root, ".shape-grid"), "Enter");
    settle().await;
    until(|| text(&root, ".mesh-view figcaption").contains("8 devices")).await;
    assert_eq!(
        text(&root, ".mesh-view figcaption"),
        "mesh [2, 4] (dp, mp): 8 devices"
    );
    let device = q(&root, ".mesh-panel .device[data-rank='6']");
    assert_eq!(device.get_attribute("role").as_deref(), Some("button"));
    key(&device, "Enter");
    settle().await;
    assert!(text(&root, ".rank-lens h2").contains("coordinates [1, 2]"));
    // The conflict badge is a focusable button carrying its reason.
    let root = app("s=reshard_conflict").await;
    assert!(attr(&root, "button.conflict-badge", "aria-label").starts_with("conflict: "));
}

#[wasm_bindgen_test]
async fn the_layers_box_grows_the_model_and_the_link_says_layers() {
    let root = app("s=gpt_dp_mp").await;
    let input: web_sys::HtmlInputElement = q(&root, "#layers").dyn_into().unwrap();
    input.set_value("3");
    input
        .dispatch_event(&Event::new("change").unwrap())
        .unwrap();
    settle().await;
    until(|| text(&root, ".program-panel").contains("h2.")).await;
    let hash = || document().location().unwrap().hash().unwrap();
    until(|| hash().contains("layers=3")).await;
    assert!(hash().contains("s=gpt_dp_mp&layers=3"), "{}", hash());
    assert_eq!(count(&root, "#layers"), 1);
    // A scenario without blocks has no layers box.
    let root = app("s=dp_mlp").await;
    assert_eq!(count(&root, "#layers"), 0);
}

#[wasm_bindgen_test]
async fn hovering_a_chip_floats_its_tiles() {
    let root = app("s=megatron_mlp").await;
    let chip = q(&root, ".chip[data-var='linear_0.w_0']");
    chip.dispatch_event(&web_sys::MouseEvent::new("mouseenter").unwrap())
        .unwrap();
    settle().await;
    assert_eq!(count(&root, ".program-panel .hover-tiles .tile-view"), 1);
    assert_eq!(
        attr(&root, ".hover-tiles .tile-view", "data-splits"),
        "[1, 4]"
    );
    chip.dispatch_event(&web_sys::MouseEvent::new("mouseleave").unwrap())
        .unwrap();
    settle().await;
    assert_eq!(count(&root, ".program-panel .hover-tiles"), 0);
}

#[wasm_bindgen_test]
async fn the_backward_tab_has_its_own_timeline() {
    let root = app("s=dp_mlp&stage=backward").await;
    assert!(text(&root, ".timeline .count").contains("backward ops"));
    click(&root, ".timeline button[title='start (Home)']");
    settle().await;
    assert!(text(&root, ".timeline .count").starts_with("0 / "));
    assert_eq!(
        text(&root, ".chip[data-var='linear_0.w_0@GRAD'] .shard"),
        "…"
    );
    click(&root, ".timeline button[title='end (End)']");
    settle().await;
    assert_ne!(
        text(&root, ".chip[data-var='linear_0.w_0@GRAD'] .shard"),
        "…"
    );
}

#[wasm_bindgen_test]
async fn the_suggest_panel_searches_in_chunks_and_loads_the_winner_for_comparison() {
    let root = app("#s=gpt_dp_mp").await;
    click(&root, "#suggest-run");
    // The search yields to the page between chunks: the progress bar shows first.
    until(|| count(&root, ".suggest-table tbody tr") > 0 || count(&root, ".suggest-error") > 0)
        .await;
    assert_eq!(
        count(&root, ".suggest-error"),
        0,
        "{}",
        text(&root, ".suggest-panel")
    );
    // Five candidates and the session's own plan, priced the same way.
    assert_eq!(count(&root, ".suggest-table tbody tr"), 6);
    assert_eq!(count(&root, ".suggest-table tbody tr.mine"), 1);
    let reason = text(&root, ".suggest-reason");
    assert!(reason.contains(" beats "), "{reason}");
    // Compare: the current plan is pinned and the winner loaded; the cost panel diffs them.
    let winner_mesh = text(&root, ".suggest-table tbody tr:first-child td:nth-child(2)");
    click(&root, "#suggest-compare");
    until(|| text(&root, "#pin") == "Unpin").await;
    assert_eq!(text(&root, "#pin"), "Unpin");
    let editor: HtmlTextAreaElement = q(&root, "#plan-text").dyn_into().unwrap();
    assert!(editor.value().starts_with("mesh "), "{}", editor.value());
    until(|| count(&root, ".diff-table") > 0).await;
    assert!(
        text(&root, ".diff-table").contains("step time"),
        "{winner_mesh}"
    );
}

#[wasm_bindgen_test]
async fn the_suggest_panel_explains_a_plan_it_cannot_search() {
    // The sequence-parallel program has gather points no preset has.
    let root = app("#s=gpt_sequence_parallel").await;
    click(&root, "#suggest-run");
    until(|| count(&root, ".suggest-error") > 0).await;
    assert!(
        text(&root, ".suggest-error").contains("preset models"),
        "{}",
        text(&root, ".suggest-panel")
    );
}

/// The worker's codec (bytes in a `Uint8Array`) carries what JSON cannot: a broken run's
/// NaN and infinite losses, and negative zero.
#[wasm_bindgen_test]
fn a_reply_with_nan_and_infinity_crosses_the_worker_codec() {
    use shardlab::engine::{Outcome, Reply};
    use shardlab::session::RunSummary;
    let r = Reply {
        id: 3,
        outcome: Outcome::Run(Ok(RunSummary {
            serial_losses: vec![1.5, f64::NAN],
            dist_losses: vec![f64::INFINITY, -0.0],
            checks: Vec::new(),
            shrunk: vec!["hidden 4096 → 64".into()],
        })),
    };
    let js = shardlab::web::engine_link::to_js(&r).unwrap();
    assert!(js.is_instance_of::<js_sys::Uint8Array>());
    let back: Reply = shardlab::web::engine_link::from_js(js).unwrap();
    let Outcome::Run(Ok(b)) = back.outcome else {
        panic!("{back:?}");
    };
    assert_eq!(back.id, 3);
    assert_eq!(b.serial_losses[0], 1.5);
    assert!(b.serial_losses[1].is_nan());
    assert_eq!(b.dist_losses[0], f64::INFINITY);
    assert!(b.dist_losses[1] == 0.0 && b.dist_losses[1].is_sign_negative());
}

/// Without its worker (here the test server has no `shardlab-engine_loader.js`), the page
/// still works, and what needs the engine says it failed instead of waiting forever.
#[wasm_bindgen_test]
async fn a_missing_engine_is_reported_where_its_answer_would_be() {
    let root = fresh_root("#s=dp_mlp");
    yew::Renderer::<App>::with_root(root.clone()).render();
    settle().await;
    assert_eq!(
        count(&root, ".mesh-view"),
        1,
        "the page works without the engine"
    );
    until(|| text(&root, ".cost-panel").contains("the engine failed")).await;
    assert!(
        text(&root, ".cost-panel").contains("No cost: the engine failed"),
        "{}",
        text(&root, ".cost-panel")
    );
    click(&root, "#run");
    until(|| count(&root, ".banner") > 0).await;
    assert!(
        text(&root, ".banner").contains("the engine failed"),
        "{}",
        text(&root, ".banner")
    );
}

/// Cost jobs the counting engine below was given.
static COST_JOBS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The in-process engine, counting cost jobs.
fn counting_engine(
    job: &shardlab::engine::Job,
    progress: &mut dyn FnMut(usize, usize),
) -> shardlab::engine::Outcome {
    if matches!(job.task, shardlab::engine::Task::Cost { .. }) {
        COST_JOBS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
    shardlab::engine::handle(job, progress)
}

/// A burst of changes while the engine works costs a panel two jobs (the one at the
/// engine, then the newest), not one per change, and the panel shows the newest plan's
/// figures.
#[wasm_bindgen_test]
async fn a_burst_of_changes_asks_a_slow_engine_twice_and_shows_the_last() {
    use std::sync::atomic::Ordering;
    let root = fresh_root("#s=dp_mlp");
    let props = AppProps {
        // Slow enough that three renders fit well inside one job even on a loaded machine
        // (at 300 ms a busy CI machine's renders outlasted it).
        engine: Some(EngineLink::in_process_after(counting_engine, 1500)),
    };
    yew::Renderer::<App>::with_root_and_props(root.clone(), props).render();
    until(|| count(&root, ".cost-summary") > 0).await;
    let before = COST_JOBS.load(Ordering::SeqCst);
    // Three topologies in a row, each rendered, all before the engine answers the first.
    for t in ["tpu-v5e-16", "cpu", "h100x8x4"] {
        select(&root, "#topology", t);
        yew::platform::time::sleep(Duration::from_millis(30)).await;
    }
    assert_eq!(
        COST_JOBS.load(Ordering::SeqCst),
        before,
        "the engine is still busy"
    );
    // The newest topology's figures: the same plan priced on h100x8x4 directly.
    let want = shardlab::session::Session::from_hash("s=dp_mlp&topo=h100x8x4")
        .unwrap()
        .cost()
        .unwrap();
    let want = format!(
        "step {}",
        shardlab::cost::diff::human_seconds(want.step_s())
    );
    // (While a job is out the panel may show no summary: read it without panicking.)
    let summary = || {
        root.query_selector(".cost-summary")
            .ok()
            .flatten()
            .and_then(|e| e.text_content())
            .unwrap_or_default()
    };
    until(|| summary().starts_with(&want)).await;
    let shown = text(&root, ".cost-summary");
    assert!(shown.starts_with(&want), "{shown}");
    assert_eq!(
        COST_JOBS.load(Ordering::SeqCst) - before,
        2,
        "one at the engine, then the newest"
    );
}

/// While a search runs the panel offers Stop and "Search again": Stop drops the search (the
/// engine's late answer lands nowhere) and the panel is as before it.
#[wasm_bindgen_test]
async fn a_running_search_can_be_stopped_and_its_late_answer_is_dropped() {
    let root = fresh_root("#s=gpt_dp_mp");
    let props = AppProps {
        engine: Some(EngineLink::in_process_after(shardlab::engine::handle, 300)),
    };
    yew::Renderer::<App>::with_root_and_props(root.clone(), props).render();
    until(|| count(&root, "#suggest-run") > 0).await;
    click(&root, "#suggest-run");
    settle().await;
    assert_eq!(count(&root, "#suggest-progress"), 1, "the search runs");
    assert_eq!(text(&root, "#suggest-run"), "Search again");
    click(&root, "#suggest-stop");
    settle().await;
    assert_eq!(count(&root, "#suggest-progress"), 0);
    assert_eq!(count(&root, "#suggest-stop"), 0);
    assert_eq!(text(&root, "#suggest-run"), "Search");
    // Past the engine's answer: nothing lands.
    yew::platform::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        count(&root, ".suggest-table"),
        0,
        "{}",
        text(&root, ".suggest-panel")
    );
}

/// A cancelled job's replies reach nobody.
#[wasm_bindgen_test]
async fn a_cancelled_job_is_answered_to_nobody() {
    let engine = EngineLink::in_process_after(shardlab::engine::handle, 50);
    let s = shardlab::session::Session::from_scenario("dp_mlp").unwrap();
    let got = std::rc::Rc::new(std::cell::Cell::new(0));
    for cancel in [true, false] {
        let job = s.job(shardlab::engine::Task::PipelineCost);
        let (id, got) = (job.id, got.clone());
        engine.send(job, yew::Callback::from(move |_| got.set(got.get() + 1)));
        if cancel {
            engine.cancel(id);
        }
    }
    yew::platform::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(got.get(), 1, "only the job not cancelled is answered");
}

/// The page opens on GPT-3 13B at its real size on one 8-GPU node: the cost panel speaks
/// milliseconds, gigabytes and an MFU; the size menu offers the family's other sizes; Run
/// executes the shrunk twin and says so.
#[wasm_bindgen_test]
async fn the_page_opens_on_a_published_model_at_real_size() {
    let root = app("").await;
    assert_eq!(
        root.query_selector("#preset")
            .unwrap()
            .unwrap()
            .dyn_into::<HtmlSelectElement>()
            .unwrap()
            .value(),
        "gpt3-13b"
    );
    assert_eq!(count(&root, ".banner.error"), 0, "{}", text(&root, "main"));
    assert_eq!(
        count(&root, "#size option"),
        5,
        "GPT-2 small and XL, GPT-3 1.3B, 13B, 175B"
    );
    assert_eq!(count(&root, ".mesh-panel .device"), 8);
    until(|| text(&root, ".cost-panel").contains("MFU")).await;
    let cost = text(&root, ".cost-panel");
    assert!(cost.contains("ms ·") && cost.contains(" GiB"), "{cost}");
    click(&root, "#run");
    until(|| count(&root, ".run-panel .verdict") > 0).await;
    assert!(
        text(&root, ".run-panel .twin-note")
            .starts_with("Executed the shrunk twin: layers 40 → 2, hidden 5120 → "),
        "{}",
        text(&root, ".run-panel")
    );
    assert!(text(&root, ".run-panel .verdict").ends_with("tensors match the serial run"));
}

/// Element counts are 64-bit in the browser too: Llama 3 70B's attention scores at 8,192
/// tokens are 2^32 elements for one sequence, one more than a 32-bit `usize` counts.
#[wasm_bindgen_test]
fn element_counts_do_not_wrap_in_the_browser() {
    let scores = shardlab::ir::TensorType::new(shardlab::ir::DType::F32, vec![1, 64, 8192, 8192]);
    assert_eq!(scores.numel(), 1u64 << 32);
    assert_eq!(scores.bytes(), 1u64 << 34);
}

/// Llama 3 70B plans and prices in the page at its real size (eight sequences of 8,192
/// tokens: attention scores of 2^35 elements), which 32-bit sizes refused.
#[wasm_bindgen_test]
async fn llama3_70b_plans_in_the_page_at_real_size() {
    let root = app("s=llama3-70b").await;
    assert_eq!(count(&root, ".banner.error"), 0, "{}", text(&root, "main"));
    until(|| text(&root, ".cost-panel").contains("MFU")).await;
    let cost = text(&root, ".cost-panel");
    assert!(cost.contains(" GiB"), "{cost}");
}

/// GPT-3 on a pipeline in the page: the tied embedding gets its copy on the last stage and
/// the cost panel prices the plan (refused before the copy existed).
#[wasm_bindgen_test]
async fn gpt3_on_a_pipeline_ties_its_embedding_in_the_page() {
    let root = app("s=gpt3-1.3b&parallel=dp=2,tp=2,pp=2&stage=partition&rank=4").await;
    assert_eq!(count(&root, ".banner.error"), 0, "{}", text(&root, "main"));
    until(|| text(&root, ".cost-panel").contains("MFU")).await;
    // Rank 4 is on the last stage: its head reads the copy, whose gradient it all-reduces
    // with rank 0's share.
    let program = text(&root, ".program-panel");
    assert!(
        program.contains("wte@TIED@1@GRAD"),
        "{}",
        &program[..program.len().min(3000)]
    );
}

/// The Mixture-of-Experts ops infer and plan in the browser too (a usize is 32 bits there:
/// the element limit must saturate, not truncate to 0).
#[wasm_bindgen_test]
fn moe_plans_in_the_browser() {
    let (plan, _) = shardlab::plan::parse_plan(include_str!("plans/moe.plan")).unwrap();
    let p = shardlab::passes::driver::run_passes(&plan, &Default::default()).unwrap();
    assert_eq!(p.partitioned.ranks.len(), 2);
}
