//! Suggest: the auto-planner over the session's model on the cost panel's topology. The
//! search runs a family at a time between frames (a zero-delay timer per step, about 30 ms
//! of work each), with a progress bar, so the page never freezes. The winner can be loaded,
//! or loaded with the current plan pinned to see the diff in the cost panel.

use super::app::AppCtx;
use crate::session::Action;
use crate::suggest::report::{human_bytes, human_seconds};
use crate::suggest::{Row, Search, Suggestion};
use std::cell::RefCell;
use std::rc::Rc;
use yew::prelude::*;

/// How long one chunk of the search may run before yielding to the page (ms).
const SLICE_MS: f64 = 30.0;

fn now() -> f64 {
    web_sys::window()
        .and_then(|w| w.performance())
        .map_or(0.0, |p| p.now())
}

/// The search's state as the panel shows it.
#[derive(Clone)]
enum Status {
    Idle,
    Running(usize, usize),
    Done(Rc<Suggestion>),
    Failed(String),
}

/// Runs `search` a slice at a time on zero-delay timers, reporting to `status`.
fn drive(search: Rc<RefCell<Option<Search>>>, status: UseStateHandle<Status>) {
    let started = now();
    let mut finished = None;
    {
        let mut slot = search.borrow_mut();
        let Some(s) = slot.as_mut() else {
            return;
        };
        while now() - started < SLICE_MS {
            if let Some(done) = s.step() {
                finished = Some(done);
                break;
            }
        }
        if finished.is_none() {
            let (d, t) = s.progress();
            status.set(Status::Running(d, t));
        }
    }
    match finished {
        Some(Ok(s)) => {
            search.borrow_mut().take();
            status.set(Status::Done(Rc::new(s)));
        }
        Some(Err(e)) => {
            search.borrow_mut().take();
            status.set(Status::Failed(e.to_string()));
        }
        None => {
            gloo::timers::callback::Timeout::new(0, move || drive(search, status)).forget();
        }
    }
}

fn row_view(model: crate::models::Model, i: usize, r: &Row) -> Html {
    let (mesh, strategy, zero, schedule) = match &r.candidate {
        Some(c) => (
            c.mesh.spec(),
            c.strategy(model),
            c.zero.to_string(),
            if c.micro_batches > 1 {
                format!("{}×{}", c.micro_batches, c.schedule.name())
            } else {
                "-".into()
            },
        ),
        None => (
            "your plan".into(),
            "as written".into(),
            String::new(),
            String::new(),
        ),
    };
    let recompute = r.candidate.as_ref().map_or("", |c| c.recompute.name());
    html! {
        <tr class={classes!(r.candidate.is_none().then_some("mine"))}>
            <td>{ if r.candidate.is_some() { (i + 1).to_string() } else { "*".into() } }</td>
            <td><code>{ mesh }</code></td>
            <td>{ strategy }</td>
            <td>{ zero }</td>
            <td>{ schedule }</td>
            <td>{ recompute }</td>
            <td class="num">{ human_seconds(r.terms.compute_s) }</td>
            <td class="num">{ human_seconds(r.terms.comm_total()) }</td>
            <td class="num">{ human_seconds(r.terms.bubble_s) }</td>
            <td class="num">{ human_bytes(r.terms.peak_bytes) }</td>
            <td class="num"><strong>{ human_seconds(r.terms.step_s) }</strong></td>
        </tr>
    }
}

fn result_view(ctx: &AppCtx, s: &Suggestion, model: crate::models::Model) -> Html {
    let text = s.plan.to_string();
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
                        { for s.table.iter().enumerate().map(|(i, r)| row_view(model, i, r)) }
                        { for s.mine.iter().map(|r| row_view(model, 0, r)) }
                    </tbody>
                </table>
            </div>
            <p class="suggest-reason"><strong>{ "Why: " }</strong>{ s.reason.clone() }</p>
            <p class="hint">{ format!(
                "{} families planned, {} cut by the bound, {} escalated for memory, {} ZeRO 2-3 \
                 skipped as a lower stage fits, {} priced exactly.",
                s.stats.families, s.stats.bounded, s.stats.escalations, s.stats.dominated,
                s.stats.exact) }</p>
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

/// The Suggest panel.
#[component]
pub fn SuggestPanel() -> Html {
    let status = use_state(|| Status::Idle);
    let search = use_mut_ref(|| None::<Search>);
    let devices = use_state(String::new);
    let memory = use_state(String::new);
    let model = use_state(|| crate::models::Model::Gpt);
    let Some(ctx) = use_context::<AppCtx>() else {
        return html! {};
    };
    let s = ctx.session();
    let start = {
        let (status, search, devices, memory, model) = (
            status.clone(),
            search.clone(),
            devices.clone(),
            memory.clone(),
            model.clone(),
        );
        let session = s.clone();
        Callback::from(move |_: MouseEvent| {
            let req = session.suggest_request(devices.parse().ok(), memory.parse().ok());
            let built = req.problem().and_then(|(p, mine, top)| {
                model.set(p.model);
                Search::new(p, top, mine).map_err(|e| e.to_string())
            });
            match built {
                Ok(found) => {
                    *search.borrow_mut() = Some(found);
                    status.set(Status::Running(0, 1));
                    let (search, status) = (search.clone(), status.clone());
                    gloo::timers::callback::Timeout::new(0, move || drive(search, status)).forget();
                }
                Err(e) => status.set(Status::Failed(e)),
            }
        })
    };
    let on_devices = {
        let devices = devices.clone();
        Callback::from(move |e: Event| devices.set(input_value(&e)))
    };
    let on_memory = {
        let memory = memory.clone();
        Callback::from(move |e: Event| memory.set(input_value(&e)))
    };
    let running = matches!(*status, Status::Running(..));
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
        Status::Done(found) => result_view(&ctx, found, *model),
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
                <button id="suggest-run" class="small" onclick={start} disabled={running}>{ "Search" }</button>
            </div>
            { body }
        </section>
    }
}
