//! A collective with real values: each group member's input and output block (small numbers
//! from the executor's first step), and for an all-reduce the ring algorithm step by step.

use super::app::AppCtx;
use crate::engine::Task;
use crate::session::{Action, CollectiveView, RingStep};
use yew::prelude::*;

/// Numbers shown per block or chunk.
const SHOWN: usize = 6;

fn numbers(v: &[f64]) -> String {
    let mut s: Vec<String> = v.iter().take(SHOWN).map(|x| format!("{x:.3}")).collect();
    if v.len() > SHOWN {
        s.push(format!("… ({} in all)", v.len()));
    }
    s.join(" ")
}

/// A block's shape and first numbers ("—" for the side a send or recv does not have).
fn block(shape: &[usize], values: &[f64]) -> Html {
    if shape.is_empty() && values.is_empty() {
        return html! { { "—" } };
    }
    html! { <><small>{ format!("{shape:?} ") }</small>{ numbers(values) }</> }
}

fn blocks(v: &CollectiveView) -> Html {
    html! {
        <table class="value-blocks">
            <thead><tr><th>{ "rank" }</th><th>{ "input block" }</th><th>{ "output block" }</th></tr></thead>
            <tbody>
                { for v.blocks.iter().map(|b| html! {
                    <tr data-rank={b.rank.to_string()}>
                        <td>{ b.rank }</td>
                        <td>{ block(&b.in_shape, &b.input) }</td>
                        <td>{ block(&b.out_shape, &b.output) }</td>
                    </tr>
                }) }
            </tbody>
        </table>
    }
}

fn ring_step(step: &RingStep, group: &[u32]) -> Html {
    let sent_to = |member: usize, chunk: usize| {
        step.sends
            .iter()
            .any(|&(_, to, c)| to == member && c == chunk)
    };
    html! {
        <table class="ring">
            <thead><tr><th>{ "rank" }</th>{ for (0..step.chunks.first().map_or(0, Vec::len)).map(|c| html! { <th>{ format!("chunk {c}") }</th> }) }</tr></thead>
            <tbody>
                { for step.chunks.iter().enumerate().map(|(m, chunks)| html! {
                    <tr>
                        <td>{ group.get(m).copied().unwrap_or(0) }</td>
                        { for chunks.iter().enumerate().map(|(c, vals)| html! {
                            <td class={classes!(sent_to(m, c).then_some("received"))}>{ numbers(&vals[..vals.len().min(3)]) }</td>
                        }) }
                    </tr>
                }) }
            </tbody>
        </table>
    }
}

/// The values panel (shown when a collective is selected).
#[component]
pub fn ValuesPanel() -> Html {
    let step = use_state(|| 0usize);
    let Some(ctx) = use_context::<AppCtx>() else {
        return html! {};
    };
    let s = ctx.session();
    let Some(values) = &s.values else {
        if matches!(s.waiting_for(), Some(Task::Values(_))) {
            return html! {
                <section class="panel values-panel">
                    <p class="hint waiting" role="status">{ "Running the step for the values…" }</p>
                </section>
            };
        }
        return html! {};
    };
    let close = ctx.on(|_: MouseEvent| Action::ShowValues(None));
    let body = match values {
        Err(e) => html! { <p class="hint error">{ e.to_string() }</p> },
        Ok(v) => {
            let n = v.ring.len();
            let k = (*step).min(n.saturating_sub(1));
            let prev = {
                let step = step.clone();
                Callback::from(move |_: MouseEvent| step.set(k.saturating_sub(1)))
            };
            let next = {
                let step = step.clone();
                Callback::from(move |_: MouseEvent| step.set((k + 1).min(n.saturating_sub(1))))
            };
            html! {
                <>
                    if v.pair {
                        <p class="hint">{ format!("Op {} of rank {}'s program: rank {} sends, rank {} receives. Micro-batch 0 of the executor's first step: the block sent and the block that arrived, equal.", v.op, s.selected_rank, v.group.first().copied().unwrap_or(0), v.group.get(1).copied().unwrap_or(0)) }</p>
                    } else {
                        <p class="hint">{ format!("Op {} of rank {}'s program over group {:?}: every member's block in the first step, from the executor.", v.op, s.selected_rank, v.group) }</p>
                    }
                    { super::run_panel::twin_note(&v.shrunk) }
                    { blocks(v) }
                    if n > 0 {
                        <h3>{ "The ring all-reduce, step by step" }</h3>
                        <p class="ring-controls">
                            <button class="small" id="ring-prev" onclick={prev} disabled={k == 0}>{ "‹" }</button>
                            <span class="ring-title" aria-live="polite">{ v.ring[k].title.clone() }</span>
                            <button class="small" id="ring-next" onclick={next} disabled={k + 1 >= n}>{ "›" }</button>
                        </p>
                        { ring_step(&v.ring[k], &v.group) }
                        <p class="hint">{ "Each step every rank sends one chunk to the next rank (highlighted where it arrives): reduce-scatter adds it, all-gather copies it. After N − 1 + N − 1 steps every rank holds the whole sum." }</p>
                    }
                </>
            }
        }
    };
    let title = values
        .as_ref()
        .map_or_else(|_| "Collective values".to_string(), |v| v.label.clone());
    html! {
        <section class="panel values-panel">
            <h2>{ title }<button class="small close" onclick={close} aria-label="close the values">{ "×" }</button></h2>
            { body }
        </section>
    }
}
