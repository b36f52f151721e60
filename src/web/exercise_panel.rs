//! Exercises graded by the planner: predict a local shape, the collective, its group or its
//! bytes; each answer is checked against the real plan and explained. Progress is kept in
//! this browser (`localStorage`, per plan and rank), and a set is a link:
//! `?exercises=1#s=gpt_dp_mp&rank=5`.

use super::app::AppCtx;
use crate::session::{Exercise, Grade};
use std::collections::HashMap;
use web_sys::HtmlInputElement;
use yew::prelude::*;

const STORE: &str = "shardlab-exercises";

/// A short key for the plan and rank the questions are about (FNV-1a of the plan text).
fn set_key(text: &str, rank: u32) -> String {
    let h = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    format!("{h:016x}/{rank}")
}

fn solved() -> Vec<String> {
    web_sys::window()
        .and_then(|w| w.local_storage().ok().flatten())
        .and_then(|s| s.get_item(STORE).ok().flatten())
        .map(|v| v.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

fn remember(entry: &str) {
    let mut all = solved();
    if all.iter().any(|e| e == entry) {
        return;
    }
    all.push(entry.to_string());
    // Bounded: the newest 500 answers.
    let start = all.len().saturating_sub(500);
    if let Some(s) = web_sys::window().and_then(|w| w.local_storage().ok().flatten()) {
        let _ = s.set_item(STORE, &all[start..].join("\n"));
    }
}

fn question(
    e: &Exercise,
    key: &str,
    grades: &UseStateHandle<HashMap<String, Grade>>,
    done: bool,
) -> Html {
    let input = NodeRef::default();
    let check = {
        let (e, input, grades, entry) = (
            e.clone(),
            input.clone(),
            grades.clone(),
            format!("{key}|{}", e.id),
        );
        Callback::from(move |ev: SubmitEvent| {
            ev.prevent_default();
            let answer = input
                .cast::<HtmlInputElement>()
                .map(|i| i.value())
                .unwrap_or_default();
            let g = e.grade(&answer);
            if g.correct {
                remember(&entry);
            }
            let mut all = (*grades).clone();
            all.insert(e.id.clone(), g);
            grades.set(all);
        })
    };
    let grade = grades.get(&e.id).cloned();
    html! {
        <li class={classes!("exercise", done.then_some("done"))} data-id={e.id.clone()}>
            <form onsubmit={check}>
                <label>{ e.prompt.clone() }<input ref={input} type="text" class="answer" aria-label={e.prompt.clone()} /></label>
                <button class="small" type="submit">{ "check" }</button>
            </form>
            if let Some(g) = grade { <p class={classes!("feedback", if g.correct { "right" } else { "wrong" })} aria-live="polite">{ g.feedback }</p> }
        </li>
    }
}

/// The exercise panel.
#[component]
pub fn ExercisePanel() -> Html {
    let grades = use_state(HashMap::<String, Grade>::new);
    let Some(ctx) = use_context::<AppCtx>() else {
        return html! {};
    };
    let s = ctx.session();
    let key = set_key(&s.text, s.selected_rank);
    let done: Vec<String> = solved();
    let ex = s.exercises();
    let n_done = ex
        .iter()
        .filter(|e| done.contains(&format!("{key}|{}", e.id)))
        .count();
    html! {
        <section class="panel exercise-panel">
            <h2>{ "Exercises " }<small>{ format!("{n_done} of {} solved in this browser", ex.len()) }</small></h2>
            <p class="hint">{ format!("About rank {}'s program in this plan; answers are checked against the planner.", s.selected_rank) }</p>
            <ol class="exercises">
                { for ex.iter().map(|e| question(e, &key, &grades, done.contains(&format!("{key}|{}", e.id)))) }
            </ol>
        </section>
    }
}
