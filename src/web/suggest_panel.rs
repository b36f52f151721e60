//! Suggest: the auto-planner over the session's model on the cost panel's topology. The
//! search runs in the engine's worker (`crate::engine`), which reports progress for the bar
//! while the page stays live. The winner can be loaded, or loaded with the current plan
//! pinned to see the diff in the cost panel.

use super::app::AppCtx;
use crate::engine::{Outcome, SuggestRow, SuggestView, Task};
use crate::session::Action;
use std::rc::Rc;
use yew::prelude::*;

/// The search's state as the panel shows it.
#[derive(Clone)]
enum Status {
    Idle,
    Running(usize, usize),
    Done(Rc<SuggestView>),
    Failed(String),
}

fn row_view(i: usize, r: &SuggestRow) -> Html {
    html! {
        <tr class={classes!(r.mine.then_some("mine"))}>
            <td>{ if r.mine { "*".into() } else { (i + 1).to_string() } }</td>
            <td><code>{ r.mesh.clone() }</code></td>
            <td>{ r.strategy.clone() }</td>
            <td>{ r.zero.clone() }</td>
            <td>{ r.schedule.clone() }</td>
            <td>{ r.recompute.clone() }</td>
            <td class="num">{ r.compute.clone() }</td>
            <td class="num">{ r.comm.clone() }</td>
            <td class="num">{ r.bubble.clone() }</td>
            <td class="num">{ r.peak.clone() }</td>
            <td class="num"><strong>{ r.step.clone() }</strong></td>
        </tr>
    }
}

fn result_view(ctx: &AppCtx, s: &SuggestView) -> Html {
    let text = s.plan.clone();
    let load = {
        let text = text.clone();
        ctx.on(move |_: MouseEvent| Action::AdoptSuggestion {
            text: text.clone(),
            compare: false,
        })
    };
    let compare = ctx.on(move |_: MouseEvent| Action::AdoptSuggestion {
        text: text.clone(),
        compare: true,
    });
    html! {
        <>
            <div class="table-scroll" tabindex="0" role="region" aria-label="candidates">
                <table class="suggest-table">
                    <thead><tr>
                        <th>{ "#" }</th><th>{ "mesh" }</th><th>{ "strategy" }</th><th>{ "ZeRO" }</th>
                        <th>{ "schedule" }</th><th>{ "recompute" }</th><th>{ "compute" }</th>
                        <th>{ "comm" }</th><th>{ "bubble" }</th><th>{ "peak" }</th><th>{ "step" }</th>
                    </tr></thead>
                    <tbody>
                        { for s.rows.iter().enumerate().map(|(i, r)| row_view(i, r)) }
                    </tbody>
                </table>
            </div>
            <p class="suggest-reason"><strong>{ "Why: " }</strong>{ s.reason.clone() }</p>
            <p class="hint">{ s.stats.clone() }</p>
            <div class="buttons">
                <button id="suggest-load" class="small" onclick={load}>{ "Load the winner" }</button>
                <button id="suggest-compare" class="small" onclick={compare}>{ "Compare with my plan" }</button>
            </div>
        </>
    }
}

fn input_value(e: &Event) -> String {
    e.target_dyn_into::<web_sys::HtmlInputElement>()
        .map(|i| i.value())
        .unwrap_or_default()
}

/// Sends the search to the engine; its replies move `status` (only the latest search's).
fn start_search(
    ctx: &AppCtx,
    status: UseStateHandle<Status>,
    latest: Rc<std::cell::RefCell<u64>>,
    devices: UseStateHandle<String>,
    memory: UseStateHandle<String>,
) -> Callback<MouseEvent> {
    let ctx = ctx.clone();
    Callback::from(move |_: MouseEvent| {
        let task = Task::Suggest {
            devices: devices.parse().ok(),
            memory_gb: memory.parse().ok(),
        };
        let job = ctx.session().job(task);
        // A new search supersedes the last: the engine drops it rather than finish it.
        let last = std::mem::replace(&mut *latest.borrow_mut(), job.id);
        if last != 0 {
            ctx.engine.cancel(last);
        }
        status.set(Status::Running(0, 1));
        let (status, latest, id) = (status.clone(), latest.clone(), job.id);
        let on = Callback::from(move |outcome| {
            if *latest.borrow() != id {
                return;
            }
            match outcome {
                Outcome::Progress { done, total } => status.set(Status::Running(done, total)),
                Outcome::Suggest(Ok(v)) => status.set(Status::Done(Rc::new(v))),
                Outcome::Suggest(Err(e)) => status.set(Status::Failed(e.to_string())),
                Outcome::Failed(e) => status.set(Status::Failed(e)),
                Outcome::Run(_)
                | Outcome::Broken(_)
                | Outcome::Values(_)
                | Outcome::Export(_)
                | Outcome::Cost(_)
                | Outcome::PipelineCost(_)
                | Outcome::Import(_)
                | Outcome::Lesson { .. } => {}
            }
        });
        ctx.engine.send(job, on);
    })
}

/// The Suggest panel.
#[component]
pub fn SuggestPanel() -> Html {
    let status = use_state(|| Status::Idle);
    // The search whose answer is wanted (a later search supersedes an earlier one).
    let latest = use_mut_ref(|| 0u64);
    let devices = use_state(String::new);
    let memory = use_state(String::new);
    let Some(ctx) = use_context::<AppCtx>() else {
        return html! {};
    };
    let s = ctx.session();
    let start = start_search(
        &ctx,
        status.clone(),
        latest.clone(),
        devices.clone(),
        memory.clone(),
    );
    let on_devices = {
        let devices = devices.clone();
        Callback::from(move |e: Event| devices.set(input_value(&e)))
    };
    let on_memory = {
        let memory = memory.clone();
        Callback::from(move |e: Event| memory.set(input_value(&e)))
    };
    let running = matches!(*status, Status::Running(..));
    // Stop: the engine drops the search, and the panel is as before it.
    let stop = {
        let (engine, status, latest) = (ctx.engine.clone(), status.clone(), latest.clone());
        Callback::from(move |_: MouseEvent| {
            engine.cancel(std::mem::take(&mut *latest.borrow_mut()));
            status.set(Status::Idle);
        })
    };
    // A search nobody will see (the panel is gone) is dropped too.
    {
        let (engine, latest) = (ctx.engine.clone(), latest.clone());
        use_effect_with((), move |_| {
            move || {
                let last = *latest.borrow();
                if last != 0 {
                    engine.cancel(last);
                }
            }
        });
    }
    let body = match &*status {
        Status::Idle => {
            html! { <p class="hint">{ "Search the meshes, layer strategies, ZeRO stages, pipelines and micro-batches of this model, priced by the cost model." }</p> }
        }
        Status::Running(d, t) => html! {
            <p class="suggest-progress">
                <progress id="suggest-progress" max={t.to_string()} value={d.to_string()} aria-label="search progress"></progress>
                { format!(" {d}/{t}") }
            </p>
        },
        Status::Done(found) => result_view(&ctx, found),
        Status::Failed(e) => html! { <p class="error suggest-error">{ e.clone() }</p> },
    };
    let mesh_size = s.plan.mesh().map_or(1, |m| m.size());
    html! {
        <section class="panel suggest-panel">
            <h2>{ format!("Suggest a plan on {}", s.topology) }</h2>
            <div class="suggest-inputs">
                <label>{ "devices " }
                    <input id="suggest-devices" type="number" min="1" placeholder={mesh_size.to_string()} value={(*devices).clone()} onchange={on_devices} />
                </label>
                <label>{ "memory GB " }
                    <input id="suggest-memory" type="number" min="0" step="any" placeholder="device" value={(*memory).clone()} onchange={on_memory} />
                </label>
                // While a search runs, a new one supersedes it (the engine drops the old).
                <button id="suggest-run" class="small" onclick={start}>{ if running { "Search again" } else { "Search" } }</button>
                if running {
                    <button id="suggest-stop" class="small" onclick={stop}>{ "Stop" }</button>
                }
            </div>
            { body }
        </section>
    }
}
