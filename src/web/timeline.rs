//! The completion timeline: step, play (at 1×, 4× or 16×), pause, scrub; the current event
//! in words, announced to screen readers.

use super::app::AppCtx;
use crate::session::Action;
use web_sys::{HtmlInputElement, HtmlSelectElement};
use yew::prelude::*;

/// The timeline panel.
#[component]
pub fn Timeline() -> Html {
    let Some(ctx) = use_context::<AppCtx>() else {
        return html! {};
    };
    let s = ctx.session();
    let backward = s.stage == crate::session::Stage::Backward;
    let (n, t) = if backward {
        let n = s.backward_events();
        (n, s.backward_step.min(n))
    } else {
        (s.events(), s.timeline.min(s.events()))
    };
    let oninput = ctx.on(|e: InputEvent| {
        Action::Seek(
            e.target_dyn_into::<HtmlInputElement>()
                .and_then(|i| i.value().parse().ok())
                .unwrap_or(0),
        )
    });
    let button = |label: &str, title: &str, action: Action| {
        let onclick = ctx.on(move |_: MouseEvent| action.clone());
        html! { <button class="small" title={title.to_string()} {onclick}>{ label.to_string() }</button> }
    };
    let on_speed = ctx.on(|e: Event| {
        Action::SetPlaySpeed(
            e.target_dyn_into::<HtmlSelectElement>()
                .and_then(|x| x.value().parse().ok())
                .unwrap_or(1),
        )
    });
    let current = match (backward, t) {
        (false, 0) => "the annotations, before completion".to_string(),
        (true, 0) => "the completed forward program, before backward".to_string(),
        (false, t) => s.event_text(t - 1).unwrap_or_default(),
        (true, t) => s.backward_event_text(t).unwrap_or_default(),
    };
    let conflicts = if backward {
        0
    } else {
        s.pipeline.as_ref().map_or(0, |p| {
            p.completed
                .trace
                .events
                .iter()
                .filter(|e| matches!(e.kind, crate::passes::complete::EventKind::Rejected(_)))
                .count()
        })
    };
    html! {
        <section class="panel timeline">
            <div class="controls">
                { button("«", "start (Home)", Action::Seek(0)) }
                { button("‹", "step back (←)", Action::Step(-1)) }
                { button(if s.playing { "pause" } else { "play" }, "play / pause (space)", Action::TogglePlay) }
                { button("›", "step (→)", Action::Step(1)) }
                { button("»", "end (End)", Action::Seek(usize::MAX)) }
                <input type="range" min="0" max={n.to_string()} value={t.to_string()} {oninput} aria-label={if backward { "backward step" } else { "completion step" }} />
                <select class="speed" aria-label="play speed" onchange={on_speed}>
                    { for [1usize, 4, 16].into_iter().map(|k| html! { <option value={k.to_string()} selected={s.play_speed == k}>{ format!("{k}×") }</option> }) }
                </select>
                <span class="count">{ format!("{t} / {n} {}{}", if backward { "backward ops" } else { "events" }, if conflicts == 1 { ", 1 conflict".to_string() } else if conflicts > 1 { format!(", {conflicts} conflicts") } else { String::new() }) }</span>
            </div>
            <p class="event" aria-live="polite">{ current }</p>
        </section>
    }
}
