//! The walking-skeleton app: pick a preset, see its mesh and its program text.

use super::mesh_view::MeshView;
use crate::dist::ProcessMesh;
use crate::models::Model;
use std::sync::Arc;
use web_sys::HtmlSelectElement;
use yew::prelude::*;

/// The program text of a preset, or the error that stopped it being built.
fn preset_text(model: Model) -> Result<String, String> {
    model
        .build(&model.default_config())
        .map(|p| p.to_string())
        .map_err(|e| e.to_string())
}

/// The playground's root component.
#[component]
pub fn App() -> Html {
    let model = use_state(|| Model::Mlp);
    let mesh = use_memo((), |_| {
        ProcessMesh::with_names(&[2, 4], &["dp", "mp"])
            .ok()
            .map(Arc::new)
    });
    let text = use_memo(*model, |m| preset_text(*m));
    let onchange = {
        let model = model.clone();
        Callback::from(move |e: Event| {
            let name = e
                .target_dyn_into::<HtmlSelectElement>()
                .map(|s| s.value())
                .unwrap_or_default();
            if let Ok(m) = Model::from_name(&name) {
                model.set(m);
            }
        })
    };
    let lines = text
        .as_ref()
        .as_ref()
        .map(|t| t.lines().count())
        .unwrap_or(0);
    html! {
        <main class="app">
            <header class="topbar">
                <h1>{ "ShardLab" }</h1>
                <p class="tagline">{ "See how a network is split across devices." }</p>
                <label class="preset">
                    { "Preset " }
                    <select id="preset" {onchange}>
                        { for Model::ALL.iter().map(|m| html! {
                            <option value={m.name()} selected={*m == *model}>{ m.name() }</option>
                        }) }
                    </select>
                </label>
            </header>
            <section class="panel mesh-panel">
                <h2>{ "Process mesh" }</h2>
                { match mesh.as_ref() {
                    Some(m) => html! { <MeshView mesh={m.clone()} /> },
                    None => html! { <p class="error">{ "invalid mesh" }</p> },
                } }
            </section>
            <section class="panel program-panel">
                <h2>{ format!("Program: {} ", model.name()) }<small>{ format!("({lines} lines) — {}", model.description()) }</small></h2>
                { match text.as_ref() {
                    Ok(t) => html! { <pre class="program-text">{ t.clone() }</pre> },
                    Err(e) => html! { <p class="error">{ e.clone() }</p> },
                } }
            </section>
        </main>
    }
}
