//! Export: the plan as a self-contained JAX script (`crate::export`), shown with copy and
//! download. The script runs the plan on XLA (8 simulated CPU devices on a laptop) and
//! checks it against the numbers ShardLab computes.

use super::app::AppCtx;
use crate::engine::{Outcome, Task};
use crate::export::ExportMode;
use yew::prelude::*;

/// The script state: the mode shown, and the script (`None` while the engine writes it).
type Script = Option<(ExportMode, Option<Result<String, String>>)>;

/// A button's handler: asks the engine for `mode`'s script (a later click supersedes it).
fn ask_for_script(
    ctx: &AppCtx,
    mode: ExportMode,
    script: UseStateHandle<Script>,
    copied: UseStateHandle<bool>,
    latest: std::rc::Rc<std::cell::RefCell<u64>>,
) -> Callback<MouseEvent> {
    let ctx = ctx.clone();
    Callback::from(move |_: MouseEvent| {
        copied.set(false);
        script.set(Some((mode, None)));
        let job = ctx.session().job(Task::Export(mode));
        *latest.borrow_mut() = job.id;
        let (script, latest, id) = (script.clone(), latest.clone(), job.id);
        let on = Callback::from(move |outcome| {
            let r = match outcome {
                Outcome::Export(r) => r.map_err(|e| e.to_string()),
                Outcome::Failed(e) => Err(e),
                Outcome::Progress { .. }
                | Outcome::Run(_)
                | Outcome::Broken(_)
                | Outcome::Values(_)
                | Outcome::Cost(_)
                | Outcome::PipelineCost(_)
                | Outcome::Suggest(_)
                | Outcome::Import(_)
                | Outcome::Lesson { .. } => return,
            };
            if *latest.borrow() == id {
                script.set(Some((mode, Some(r))));
            }
        });
        ctx.engine.send(job, on);
    })
}

/// The export panel. The engine writes the script (`crate::engine`).
#[component]
pub fn ExportPanel() -> Html {
    let script = use_state(|| None::<(ExportMode, Option<Result<String, String>>)>);
    let copied = use_state(|| false);
    // The job whose answer is wanted (a later click supersedes an earlier one).
    let latest = use_mut_ref(|| 0u64);
    let Some(ctx) = use_context::<AppCtx>() else {
        return html! {};
    };
    let make = |mode: ExportMode| {
        ask_for_script(&ctx, mode, script.clone(), copied.clone(), latest.clone())
    };
    let shown = script.as_ref().map(|(m, _)| *m);
    let class = |mode: ExportMode| classes!("small", (shown == Some(mode)).then_some("primary"));
    let body = match &*script {
        None => html! {},
        Some((_, None)) => html! { <p class="hint export-waiting">{ "Writing the script…" }</p> },
        Some((_, Some(Err(e)))) => html! { <p class="error export-error">{ e.clone() }</p> },
        Some((mode, Some(Ok(text)))) => {
            let href = format!(
                "data:text/x-python;charset=utf-8,{}",
                String::from(js_sys::encode_uri_component(text))
            );
            let copy = {
                let text = text.clone();
                let copied = copied.clone();
                Callback::from(move |_: MouseEvent| {
                    if let Some(w) = web_sys::window() {
                        let _ = w.navigator().clipboard().write_text(&text);
                        copied.set(true);
                    }
                })
            };
            html! {
                <>
                    <p class="export-actions">
                        <button id="export-copy" class="small" onclick={copy}>{ if *copied { "Copied" } else { "Copy" } }</button>
                        <a id="export-download" class="button small" {href} download={format!("shardlab_{}.py", mode.name())}>{ "Download" }</a>
                        <span class="hint">{ format!("{} lines; run with `python shardlab_{}.py --dump out`", text.lines().count(), mode.name()) }</span>
                    </p>
                    <pre id="export-script" class="export-script">{ text.clone() }</pre>
                </>
            }
        }
    };
    html! {
        <section class="panel export-panel">
            <h2>{ "Export to JAX" }
                <button id="export-gspmd" class={class(ExportMode::Gspmd)} onclick={make(ExportMode::Gspmd)} title="the serial program with shardings; XLA partitions it">{ "gspmd" }</button>
                <button id="export-shard-map" class={class(ExportMode::ShardMap)} onclick={make(ExportMode::ShardMap)} title="ShardLab's per-rank programs and collectives in jax.shard_map">{ "shard_map" }</button>
            </h2>
            <p class="hint">{ "One Python file needing only jax and numpy: it runs the plan on XLA (simulated CPU devices on a laptop), writes what `shardlab run --dump` writes, and prints XLA's collectives." }</p>
            { body }
        </section>
    }
}
