//! Browser tests (wasm-bindgen-test in headless Chromium): mount the app, act, assert the
//! DOM. Run by scripts/test.sh with `cargo test --target wasm32-unknown-unknown`.
#![cfg(target_arch = "wasm32")]

use shardlab::dist::ProcessMesh;
use shardlab::web::{App, MeshView, MeshViewProps};
use std::sync::Arc;
use std::time::Duration;
use wasm_bindgen::JsCast;
use wasm_bindgen_test::*;
use web_sys::{Element, Event, HtmlSelectElement};

wasm_bindgen_test_configure!(run_in_browser);

/// A fresh `div` under `<body>` for one test to mount into.
fn fresh_root() -> Element {
    let document = web_sys::window().unwrap().document().unwrap();
    let div = document.create_element("div").unwrap();
    document.body().unwrap().append_child(&div).unwrap();
    div
}

/// Lets Yew render.
async fn settle() {
    yew::platform::time::sleep(Duration::from_millis(30)).await;
}

fn text_of(root: &Element, selector: &str) -> String {
    root.query_selector(selector)
        .unwrap()
        .unwrap_or_else(|| panic!("{selector} is on the page"))
        .text_content()
        .unwrap_or_default()
}

#[wasm_bindgen_test]
async fn app_shows_the_mesh_and_the_program() {
    let root = fresh_root();
    yew::Renderer::<App>::with_root(root.clone()).render();
    settle().await;
    assert_eq!(root.query_selector_all(".device").unwrap().length(), 8);
    assert_eq!(
        text_of(&root, ".mesh-view figcaption"),
        "mesh [2, 4] (dp, mp): 8 devices"
    );
    let program = text_of(&root, ".program-text");
    assert!(
        program.contains("op matmul_v2(X=x, Y=linear_0.w_0) -> (Out=linear_0.tmp_0)"),
        "{program}"
    );
    assert!(program.contains("var linear_1.b_0: f32[10] parameter persistable"));
}

#[wasm_bindgen_test]
async fn choosing_a_preset_shows_its_program() {
    let root = fresh_root();
    yew::Renderer::<App>::with_root(root.clone()).render();
    settle().await;
    let select: HtmlSelectElement = root
        .query_selector("#preset")
        .unwrap()
        .unwrap()
        .dyn_into()
        .unwrap();
    select.set_value("gpt");
    select
        .dispatch_event(&Event::new("change").unwrap())
        .unwrap();
    settle().await;
    let program = text_of(&root, ".program-text");
    assert!(program.contains(
        "op fused_softmax_mask_upper_triangle(X=h0.attn.scores.scaled) -> (Out=h0.attn.probs)"
    ));
    assert!(text_of(&root, ".program-panel h2").starts_with("Program: gpt"));
}

#[wasm_bindgen_test]
async fn mesh_view_draws_every_device_with_its_process_id() {
    let root = fresh_root();
    let ids = vec![7, 6, 5, 4, 3, 2, 1, 0];
    let mesh = ProcessMesh::new(
        vec![2, 2, 2],
        ids,
        vec!["pp".into(), "dp".into(), "mp".into()],
    )
    .unwrap();
    let props = MeshViewProps {
        mesh: Arc::new(mesh),
    };
    yew::Renderer::<MeshView>::with_root_and_props(root.clone(), props).render();
    settle().await;
    let devices = root.query_selector_all(".device").unwrap();
    assert_eq!(devices.length(), 8);
    let first = devices.item(0).unwrap().dyn_into::<Element>().unwrap();
    assert_eq!(first.get_attribute("data-rank").as_deref(), Some("7"));
    assert_eq!(first.text_content().as_deref(), Some("7"));
    let labels: Vec<String> = {
        let nodes = root.query_selector_all(".axis-label").unwrap();
        (0..nodes.length())
            .map(|i| nodes.item(i).unwrap().text_content().unwrap_or_default())
            .collect()
    };
    assert_eq!(labels, ["mp →", "pp×dp →"]);
    assert_eq!(
        text_of(&root, "figcaption"),
        "mesh [2, 2, 2] (pp, dp, mp) ids [7, 6, 5, 4, 3, 2, 1, 0]: 8 devices"
    );
}
