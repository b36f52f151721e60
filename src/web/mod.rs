//! The browser playground (wasm32 only): Yew function components over the core's
//! [`crate::session::Session`] reducer. Only this module touches Yew or web-sys.

mod api;
mod api_import;
mod api_suggest;
mod app;
mod break_panel;
mod cost_panel;
mod editor;
pub mod engine_link;
mod exercise_panel;
mod export_panel;
mod import_box;
mod inspector;
mod ledger_view;
mod lesson_card;
mod mesh_editor;
mod mesh_view;
mod pipeline_view;
mod program_view;
mod rank_lens;
mod run_panel;
mod suggest_panel;
mod tile_view;
mod timeline;
mod values_panel;
pub mod worker;

pub use api::{bench_replan, export_jax, plan};
pub use api_import::import_model;
pub use api_suggest::{bench_cost, suggest, SuggestSearch};
pub use app::{App, AppCtx, AppProps, State};
pub use engine_link::{use_engine_answer, EngineLink};
pub use mesh_view::{MeshView, MeshViewProps};

/// Mounts the playground on `<body>`, unless the page only wants the JavaScript API
/// (`<body data-shardlab-api>`).
pub fn start() {
    let api_only = web_sys::window()
        .and_then(|w| w.document())
        .and_then(|d| d.body())
        .is_some_and(|b| b.has_attribute("data-shardlab-api"));
    if let Some(loader) = web_sys::window()
        .and_then(|w| w.document())
        .and_then(|d| d.get_element_by_id("loader"))
    {
        loader.remove();
    }
    if !api_only {
        yew::Renderer::<App>::new().render();
    }
}
