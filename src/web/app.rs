//! The root component: the session reducer, URL and localStorage sync, the play timer,
//! keyboard shortcuts, and the page layout.

use super::break_panel::BreakPanel;
use super::cost_panel::CostPanel;
use super::editor::Editor;
use super::engine_link::EngineLink;
use super::exercise_panel::ExercisePanel;
use super::export_panel::ExportPanel;
use super::import_box::{import_box, on_drop};
use super::inspector::{Inspector, WhyPanel};
use super::ledger_view::LedgerView;
use super::lesson_card::{lesson_menu, LessonCard};
use super::mesh_editor::MeshEditor;
use super::pipeline_view::PipelinePanel;
use super::program_view::ProgramView;
use super::rank_lens::RankLens;
use super::run_panel::RunPanel;
use super::suggest_panel::SuggestPanel;
use super::timeline::Timeline;
use super::values_panel::ValuesPanel;
use crate::dist::Notation;
use crate::session::{preset_names, Action, Session, Stage};
use std::rc::Rc;
use wasm_bindgen::JsCast;
use web_sys::HtmlSelectElement;
use yew::prelude::*;

/// The reducer's state.
#[derive(Clone, PartialEq)]
pub struct State(pub Session);

impl Reducible for State {
    type Action = Action;
    fn reduce(self: Rc<Self>, action: Action) -> Rc<Self> {
        Rc::new(State(self.0.clone().reduce(action)))
    }
}

/// What every panel gets: the state and a way to change it.
#[derive(Clone, PartialEq)]
pub struct AppCtx {
    pub state: UseReducerHandle<State>,
    /// Panels hidden by `?hide=a,b` (embedding).
    pub hidden: Rc<Vec<String>>,
    /// The state the page opened with (an embed's reset returns to it).
    pub initial_hash: Rc<String>,
    /// Where Run, break-it, values, export and suggest are done (`crate::engine`).
    pub engine: EngineLink,
}

impl AppCtx {
    /// The session.
    pub fn session(&self) -> &Session {
        &self.state.0
    }

    /// A callback dispatching `f(event)`.
    pub fn on<E: 'static>(&self, f: impl Fn(E) -> Action + 'static) -> Callback<E> {
        let state = self.state.clone();
        Callback::from(move |e| state.dispatch(f(e)))
    }

    /// Whether a panel is shown.
    pub fn shows(&self, panel: &str) -> bool {
        !self.hidden.iter().any(|h| h == panel)
    }
}

fn window() -> Option<web_sys::Window> {
    web_sys::window()
}

fn query_flag(name: &str) -> Option<String> {
    let search = window()?.location().search().ok()?;
    search.trim_start_matches('?').split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == name).then(|| v.to_string())
    })
}

/// The lesson a `?lesson=N` link opens.
fn lesson_number() -> Option<usize> {
    query_flag("lesson")?.parse().ok()
}

/// The first state: a lesson, else the URL hash, else the autosave, else the default
/// preset.
fn initial() -> Session {
    if let Some(n) = lesson_number() {
        let lesson = crate::session::Lesson::by_number(n)
            .ok_or_else(|| format!("there is no lesson {n}"))
            .and_then(|l| l.session().map_err(|e| e.to_string()));
        match lesson {
            Ok(s) => return s,
            Err(e) => {
                return Session {
                    message: Some(e),
                    ..Session::default()
                }
            }
        }
    }
    let hash = window()
        .and_then(|w| w.location().hash().ok())
        .unwrap_or_default();
    let saved = || window()?.local_storage().ok()??.get_item("shardlab").ok()?;
    let mut session = if hash.len() > 1 {
        Session::from_hash(&hash).unwrap_or_else(|e| Session {
            message: Some(format!(
                "This link could not be opened: {e}. Showing the default preset instead."
            )),
            ..Session::default()
        })
    } else {
        saved()
            .and_then(|h| Session::from_hash(&h).ok())
            .unwrap_or_default()
    };
    session.embed = query_flag("embed").is_some_and(|v| v != "0");
    session
}

/// What the page keeps in step with outside the component tree: the engine's worker and
/// the address's hash.
#[hook]
fn use_outside_world(ctx: &AppCtx) {
    use_engine(ctx);
    use_hash_changes(ctx);
}

/// Opens the link when the address's hash is changed in an open tab (an edited address, an
/// embed that swaps its hash, back and forward). The page's own updates of the hash use
/// `history.replaceState`, which fires no `hashchange`, so they do not come back here.
#[hook]
fn use_hash_changes(ctx: &AppCtx) {
    let state = ctx.state.clone();
    use_effect_with((), move |_| {
        let listener = window().map(|w| {
            gloo::events::EventListener::new(&w, "hashchange", move |_| {
                if let Some(hash) = window().and_then(|w| w.location().hash().ok()) {
                    state.dispatch(Action::OpenLink(hash));
                }
            })
        });
        move || drop(listener)
    });
}

/// Starts the engine loading once the page is up, and sends it the job the session waits
/// for (each job once: its id changes), dispatching the replies.
#[hook]
fn use_engine(ctx: &AppCtx) {
    let (engine, job) = (ctx.engine.clone(), ctx.session().job.clone());
    {
        let engine = engine.clone();
        use_effect_with((), move |_| engine.warm());
    }
    let state = ctx.state.clone();
    use_effect_with(job, move |job| {
        let sent = job.as_ref().map(|j| j.id);
        if let Some(job) = job {
            let id = job.id;
            engine.send(
                job.clone(),
                Callback::from(move |outcome| {
                    state.dispatch(Action::Reply(std::rc::Rc::new(crate::engine::Reply {
                        id,
                        outcome,
                    })))
                }),
            );
        }
        // When the session stops waiting for it (answered, or dropped by a plan change or
        // a newer click), the engine may drop it too if it has not begun it.
        move || {
            if let Some(id) = sent {
                engine.cancel(id);
            }
        }
    });
}

/// The right column: rank lens, cost, ledger, run.
fn right_column(ctx: &AppCtx) -> Html {
    html! {
        <aside class="column right">
            if query_flag("exercises").is_some_and(|v| v != "0") { <ExercisePanel /> }
            if ctx.shows("rank") { <RankLens /> }
            if ctx.shows("cost") { <CostPanel /> }
            if ctx.shows("suggest") { <SuggestPanel /> }
            if ctx.shows("pipeline") { <PipelinePanel /> }
            if ctx.shows("ledger") { <LedgerView /> }
            if ctx.shows("run") { <RunPanel /> }
            if ctx.shows("break") { <BreakPanel /> }
            if ctx.shows("export") { <ExportPanel /> }
        </aside>
    }
}

/// The playground.
/// The root's properties.
#[derive(Properties, PartialEq, Default)]
pub struct AppProps {
    /// The engine to use (the browser tests pass one in-process); by default the engine's
    /// Web Worker.
    #[prop_or_default]
    pub engine: Option<EngineLink>,
}

/// The session's message, as a banner the reader can dismiss.
fn banner(ctx: &AppCtx, message: String) -> Html {
    let dismiss = ctx.on(|_: MouseEvent| Action::Dismiss);
    html! { <div class="banner" role="alert">{ message }<button class="dismiss" onclick={dismiss}>{ "×" }</button></div> }
}

#[component]
pub fn App(props: &AppProps) -> Html {
    let state = use_reducer_eq(|| State(initial()));
    let engine = use_memo((), {
        let given = props.engine.clone();
        move |_| given.unwrap_or_else(EngineLink::worker)
    });
    let initial_hash = use_memo((), {
        let h = state.0.to_hash();
        move |_| h
    });
    let hidden = use_memo((), |_| {
        query_flag("hide")
            .map(|h| h.split(',').map(str::to_string).collect::<Vec<_>>())
            .unwrap_or_default()
    });
    let ctx = AppCtx {
        state: state.clone(),
        hidden: Rc::new((*hidden).clone()),
        initial_hash: Rc::new((*initial_hash).clone()),
        engine: (*engine).clone(),
    };
    let s = &state.0;
    use_outside_world(&ctx);

    // Keep the URL and the autosave in step with the state.
    let hash = s.to_hash();
    let embed = s.embed;
    use_effect_with(hash.clone(), move |hash| {
        if let Some(w) = window() {
            if let Ok(history) = w.history() {
                let _ = history.replace_state_with_url(
                    &wasm_bindgen::JsValue::NULL,
                    "",
                    Some(&format!(
                        "{}#{hash}",
                        w.location().search().unwrap_or_default()
                    )),
                );
            }
            // An embed never autosaves: it would overwrite the reader's own session.
            if !embed {
                if let Ok(Some(storage)) = w.local_storage() {
                    let _ = storage.set_item("shardlab", hash);
                }
            }
        }
    });
    // Play the timeline.
    {
        let state = state.clone();
        use_effect_with(s.playing, move |playing| {
            let interval = playing.then(|| {
                gloo::timers::callback::Interval::new(140, move || state.dispatch(Action::Tick))
            });
            move || drop(interval)
        });
    }
    use_keyboard(state.clone());
    let on_preset = ctx.on(|e: Event| {
        Action::LoadScenario(
            e.target_dyn_into::<HtmlSelectElement>()
                .map(|s| s.value())
                .unwrap_or_default(),
        )
    });
    let on_notation = ctx.on(|e: Event| {
        let id = e
            .target_dyn_into::<HtmlSelectElement>()
            .map(|s| s.value())
            .unwrap_or_default();
        Action::SetNotation(Notation::from_id(&id).unwrap_or(Notation::Paddle))
    });
    let stage_tab = |stage: Stage, label: &str| {
        let onclick = ctx.on(move |_: MouseEvent| Action::SetStage(stage));
        html! { <button class={classes!("tab", (s.stage == stage).then_some("active"))} {onclick}>{ label.to_string() }</button> }
    };
    let message = s.message.clone().map(|m| banner(&ctx, m));
    let lesson = lesson_number().and_then(crate::session::Lesson::by_number);
    let presenter = use_state(|| query_flag("present").is_some_and(|v| v != "0"));
    let (ondragover, ondrop) = on_drop(&ctx);
    let plan_error = s.plan_error.clone().map(|m| html! { <div class="banner error" role="alert">{ format!("The plan cannot be completed: {m}") }</div> });
    html! {
        <ContextProvider<AppCtx> context={ctx.clone()}>
            <a class="skip-link" href="#program">{ "Skip to the program" }</a>
            <main class={classes!("app", s.embed.then_some("embed"), presenter.then_some("presenter"))} data-focus={lesson.map(|l| l.focus)} {ondragover} {ondrop}>
                if s.embed { { embed_bar(&ctx, &hash) } }
                if !s.embed {
                    <header class="topbar">
                        <h1>{ "ShardLab" }</h1>
                        <p class="tagline">{ "Draw a mesh, annotate a few tensors, watch the planner split everything." }</p>
                        <label class="preset">{ "Preset " }
                            <select id="preset" onchange={on_preset}>
                                { preset_group("Toy models", false, &s.scenario) }
                                { preset_group("Published models, real size", true, &s.scenario) }
                                if s.scenario == "custom" { <option value="custom" selected=true>{ "Custom (edited)" }</option> }
                            </select>
                        </label>
                        { size_menu(&ctx) }
                        { layers_box(&ctx) }
                        { import_box(&ctx) }
                        { lesson_menu() }
                        { link_tools(&hash, &presenter) }
                        <label class="preset">{ "Notation " }
                            <select id="notation" onchange={on_notation}>
                                { for Notation::ALL.into_iter().map(|n| html! {
                                    <option value={n.id()} selected={s.notation == n}>{ n.label() }</option>
                                }) }
                            </select>
                        </label>
                    </header>
                }
                <div class="notices">
                    if let Some(l) = lesson { <LessonCard number={l.number} /> }
                    { message }
                    { plan_error }
                </div>
                <aside class="column left">
                    if ctx.shows("mesh") { <MeshEditor /> }
                    if ctx.shows("inspector") { <Inspector /> }
                </aside>
                <section class="column center" id="program" tabindex="-1">
                    <nav class="tabs" aria-label="stage">
                        { stage_tab(Stage::Forward, "Forward completion") }
                        { stage_tab(Stage::Backward, "Backward + optimizer") }
                        { stage_tab(Stage::Partition, "Per-rank programs") }
                    </nav>
                    if s.stage != Stage::Partition && ctx.shows("timeline") { <Timeline /> }
                    if ctx.shows("inspector") { <WhyPanel /> }
                    <ValuesPanel />
                    if ctx.shows("program") { <ProgramView /> }
                    if ctx.shows("editor") && !s.embed { <Editor /> }
                </section>
                { right_column(&ctx) }
            </main>
        </ContextProvider<AppCtx>>
    }
}

/// Copies `text` to the clipboard (best effort: the page may not be allowed to).
fn copy_text(text: &str) {
    if let Some(w) = window() {
        let _ = w.navigator().clipboard().write_text(text);
    }
}

/// The page's address with `hash` and without the embed flag.
fn full_link(hash: &str) -> String {
    let Some(w) = window() else {
        return format!("#{hash}");
    };
    let loc = w.location();
    let base = format!(
        "{}{}",
        loc.origin().unwrap_or_default(),
        loc.pathname().unwrap_or_default()
    );
    format!("{base}#{hash}")
}

/// The top bar's link tools: copy the link, the JavaScript API page, presenter mode.
fn link_tools(hash: &str, presenter: &UseStateHandle<bool>) -> Html {
    let link = full_link(hash);
    let copy = Callback::from(move |_: MouseEvent| copy_text(&link));
    let toggle = {
        let presenter = presenter.clone();
        Callback::from(move |_: MouseEvent| presenter.set(!*presenter))
    };
    html! {
        <span class="link-tools">
            <button id="copy-link" class="small" onclick={copy} title="copy a link to this exact state">{ "copy link" }</button>
            <button id="presenter" class={classes!("small", presenter.then_some("active"))} onclick={toggle} aria-pressed={presenter.to_string()}>{ "presenter mode" }</button>
            <a class="small-link" href="api.html">{ "JavaScript API" }</a>
        </span>
    }
}

/// An embed's own small bar: open the full playground at this state, and reset to what the
/// page embedded.
fn embed_bar(ctx: &AppCtx, hash: &str) -> Html {
    let initial = ctx.initial_hash.clone();
    let reset = ctx.on(move |_: MouseEvent| Action::OpenLink((*initial).clone()));
    html! {
        <div class="embed-bar">
            <a id="open-in-shardlab" href={full_link(hash)} target="_blank" rel="noopener">{ "open in ShardLab ↗" }</a>
            <button id="embed-reset" class="small" onclick={reset}>{ "reset" }</button>
        </div>
    }
}

/// Keyboard: ← → step, space plays, Home / End jump (not while typing).
#[hook]
fn use_keyboard(state: UseReducerHandle<State>) {
    use_effect_with((), move |_| {
        let listener = window().and_then(|w| w.document()).map(|doc| {
            // Not passive: the keys that step the timeline must not also scroll the page.
            let options = gloo::events::EventListenerOptions::enable_prevent_default();
            gloo::events::EventListener::new_with_options(&doc, "keydown", options, move |e| {
                let Some(e) = e.dyn_ref::<web_sys::KeyboardEvent>() else {
                    return;
                };
                let typing = e
                    .target()
                    .and_then(|t| t.dyn_into::<web_sys::Element>().ok())
                    .is_some_and(|el| {
                        matches!(el.tag_name().as_str(), "TEXTAREA" | "INPUT" | "SELECT")
                    });
                if typing {
                    return;
                }
                let action = match e.key().as_str() {
                    "ArrowRight" => Action::Step(1),
                    "ArrowLeft" => Action::Step(-1),
                    " " => Action::TogglePlay,
                    "Home" => Action::Seek(0),
                    "End" => Action::Seek(usize::MAX),
                    _ => return,
                };
                e.prevent_default();
                state.dispatch(action);
            })
        });
        move || drop(listener)
    });
}

/// The number of blocks of a scenario whose annotations repeat per block (a link field).
fn layers_box(ctx: &AppCtx) -> Html {
    let s = ctx.session();
    let Some(sc) = crate::models::scenarios::Scenario::by_name(&s.scenario) else {
        return html! {};
    };
    if sc.per_layer.shards(1).is_none() {
        return html! {};
    }
    let n = s.layers.unwrap_or(sc.layers);
    let onchange = ctx.on(|e: Event| {
        let n = e
            .target_dyn_into::<web_sys::HtmlInputElement>()
            .and_then(|i| i.value().parse().ok())
            .unwrap_or(1);
        Action::SetLayers(n)
    });
    html! {
        <label class="preset">{ "layers " }
            <input id="layers" type="number" min="1" max={crate::session::MAX_BROWSER_LAYERS.to_string()} value={n.to_string()} {onchange} aria-label="transformer blocks" />
        </label>
    }
}

/// One group of the preset menu: the toy scenarios, or the published models.
fn preset_group(label: &'static str, published: bool, current: &str) -> Html {
    let is_published = |id: &str| crate::models::published::Published::find(id).is_some();
    html! {
        <optgroup {label}>
            { for preset_names().into_iter().filter(|(id, _)| is_published(id) == published).map(|(id, title)| html! {
                <option value={id} selected={current == id}>{ title }</option>
            }) }
        </optgroup>
    }
}

/// The size menu of a published model: the same family at its other published sizes
/// (the plan, topology and view stay).
fn size_menu(ctx: &AppCtx) -> Html {
    let s = ctx.session();
    let sizes = crate::models::published_plans::sizes_of(&s.scenario);
    if sizes.len() < 2 {
        return html! {};
    }
    let onchange = ctx.on(|e: Event| {
        Action::LoadScenario(
            e.target_dyn_into::<HtmlSelectElement>()
                .map(|s| s.value())
                .unwrap_or_default(),
        )
    });
    html! {
        <label class="preset">{ "size " }
            <select id="size" {onchange} aria-label="model size">
                { for sizes.into_iter().map(|p| html! {
                    <option value={p.name} selected={s.scenario == p.name}>{ format!("{} ({})", p.name, parameters(p.params)) }</option>
                }) }
            </select>
        </label>
    }
}

/// A parameter count as a model card gives it: 124M, 8.0B.
fn parameters(n: u64) -> String {
    let n = n as f64;
    if n >= 1e9 {
        format!("{:.1}B", n / 1e9)
    } else {
        format!("{:.0}M", n / 1e6)
    }
}
