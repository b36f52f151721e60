//! The guided tour's card: the lesson's title and text, what to try, and links to the
//! previous and next lessons. The panel the lesson is about is outlined (the page's
//! `data-focus`, see `www/style.css`).

use super::app::AppCtx;
use crate::session::{Lesson, LESSONS};
use yew::prelude::*;

/// Properties of [`LessonCard`].
#[derive(Properties, PartialEq)]
pub struct LessonCardProps {
    pub number: usize,
}

/// The lesson card.
#[component]
pub fn LessonCard(props: &LessonCardProps) -> Html {
    let Some(l) = Lesson::by_number(props.number) else {
        return html! {};
    };
    // The words come from the engine's module (`session::lesson_words`), asked for when
    // the lesson opens: the page's module stays under its size budget.
    let words = use_context::<AppCtx>().and_then(|c| c.session().lesson_words.clone());
    let busy = words.is_none().to_string();
    let (text, try_this) = words.unwrap_or_else(|| ("…".into(), "…".into()));
    let link = |n: usize| format!("?lesson={n}");
    let prev = (l.number > 1)
        .then(|| html! { <a class="prev" href={link(l.number - 1)}>{ "← previous" }</a> });
    let next = (l.number < LESSONS.len())
        .then(|| html! { <a class="next" href={link(l.number + 1)}>{ "next →" }</a> });
    html! {
        <section class="lesson-card" aria-label="lesson" data-lesson={l.number.to_string()}>
            <h2>{ format!("Lesson {} of {}: {}", l.number, LESSONS.len(), l.title) }</h2>
            <p class="lesson-text" aria-busy={busy}>{ text }</p>
            <p class="try-this"><strong>{ "Try this: " }</strong>{ try_this }</p>
            <nav class="lesson-nav">{ prev }<a href="./">{ "leave the tour" }</a>{ next }</nav>
        </section>
    }
}

/// The tour's menu for the top bar: every lesson as a link.
pub fn lesson_menu() -> Html {
    html! {
        <details class="lesson-menu">
            <summary>{ "Lessons" }</summary>
            <ol>
                { for LESSONS.iter().map(|l| html! { <li><a href={format!("?lesson={}", l.number)}>{ l.title }</a></li> }) }
            </ol>
            <p class="exercise-link"><a href="?exercises=1#s=gpt_dp_mp&rank=5">{ "Exercises: predict shapes, collectives, groups and bytes" }</a></p>
        </details>
    }
}
