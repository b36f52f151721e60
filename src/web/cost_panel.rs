//! The cost panel: the plan priced on a topology preset — per-rank stacked bars of
//! compute, communication and idle time, the selected rank's memory over the step with its
//! peak marked — the ZeRO stage, and the comparison with a pinned plan. Charts are SVG.

use super::app::AppCtx;
use super::engine_link::use_engine_answer;
use super::ledger_view::bytes;
use crate::cost::diff::{human_seconds, PlanDiff};
use crate::cost::estimate::Estimate;
use crate::engine::{Outcome, Task};
use crate::session::{Action, TOPOLOGIES};
use web_sys::HtmlSelectElement;
use yew::prelude::*;

/// Bars drawn at most (the rest are summarised in a line).
const MAX_BARS: usize = 32;

fn bars(e: &Estimate) -> Html {
    let ranks = &e.step.ranks;
    let shown = &ranks[..ranks.len().min(MAX_BARS)];
    let longest = shown
        .iter()
        .map(|r| r.total_s)
        .fold(0.0, f64::max)
        .max(1e-12);
    let (w, row) = (260.0, 14.0);
    let height = row * shown.len() as f64 + 4.0;
    let bar = |r: &crate::cost::simulate::RankTime, i: usize| {
        let y = 2.0 + row * i as f64;
        // With overlap the three can exceed the total: scale them into the total's length.
        let sum = (r.compute_s + r.comm_s + r.idle_s).max(1e-12);
        let len = w * r.total_s / longest;
        let seg = |x: f64, t: f64, class: &'static str, what: &'static str| {
            let width = len * t / sum;
            html! {
                <rect class={classes!("seg", class)} x={format!("{:.2}", 40.0 + x)} y={format!("{y:.1}")}
                      width={format!("{width:.2}")} height={format!("{:.1}", row - 3.0)}>
                    <title>{ format!("rank {}: {what} {}", r.rank, human_seconds(t)) }</title>
                </rect>
            }
        };
        let c = len * r.compute_s / sum;
        let m = len * r.comm_s / sum;
        html! {
            <g class="bar" data-rank={r.rank.to_string()}>
                <text x="34" y={format!("{:.1}", y + row - 5.0)} text-anchor="end">{ r.rank }</text>
                { seg(0.0, r.compute_s, "compute", "compute") }
                { seg(c, r.comm_s, "comm", "communication") }
                { seg(c + m, r.idle_s, "idle", "idle") }
            </g>
        }
    };
    html! {
        <>
            <svg class="cost-bars" viewBox={format!("0 0 {} {height:.0}", w + 44.0)} role="img"
                 aria-label="time per rank: compute, communication, idle">
                { for shown.iter().enumerate().map(|(i, r)| bar(r, i)) }
            </svg>
            if ranks.len() > shown.len() {
                <p class="hint">{ format!("first {} of {} ranks", shown.len(), ranks.len()) }</p>
            }
            <p class="cost-legend">
                <span class="key compute"></span>{ "compute " }
                <span class="key comm"></span>{ "communication " }
                <span class="key idle"></span>{ "idle" }
            </p>
        </>
    }
}

fn memory_chart(e: &Estimate, rank: u32) -> Html {
    let Some((i, _)) = e
        .step
        .ranks
        .iter()
        .enumerate()
        .find(|(_, r)| r.rank == rank)
    else {
        return html! {};
    };
    let Some(m) = e.memory.get(i) else {
        return html! {};
    };
    let (w, h) = (300.0, 90.0);
    let n = m.at_op.len().max(2) as f64 - 1.0;
    let top = m.peak.max(1.0);
    let point = |k: usize, b: f64| {
        (
            4.0 + (w - 8.0) * k as f64 / n,
            h - 14.0 - (h - 24.0) * b / top,
        )
    };
    let points: Vec<String> = m
        .at_op
        .iter()
        .enumerate()
        .map(|(k, &b)| {
            let (x, y) = point(k, b);
            format!("{x:.1},{y:.1}")
        })
        .collect();
    let (px, py) = point(m.peak_op, m.peak);
    let anchor = if px > w / 2.0 { "end" } else { "start" };
    html! {
        <svg class="memory-chart" viewBox={format!("0 0 {w} {h}")} role="img"
             aria-label={format!("memory of rank {rank} over the step")}>
            <line class="axis" x1="4" y1={format!("{}", h - 14.0)} x2={format!("{}", w - 4.0)} y2={format!("{}", h - 14.0)} />
            <polyline class="timeline" points={points.join(" ")} />
            <circle class="peak" cx={format!("{px:.1}")} cy={format!("{py:.1}")} r="3.5">
                <title>{ format!("peak {} at op {}", bytes(m.peak), m.peak_op) }</title>
            </circle>
            <text class="peak-label" x={format!("{px:.1}")} y="10" text-anchor={anchor}>
                { format!("peak {} at op {}", bytes(m.peak), m.peak_op) }
            </text>
            <text x="4" y={format!("{}", h - 2.0)}>{ "op 0" }</text>
            <text x={format!("{}", w - 4.0)} y={format!("{}", h - 2.0)} text-anchor="end">{ format!("op {}", m.at_op.len().saturating_sub(1)) }</text>
        </svg>
    }
}

fn delta_row(name: &str, a: f64, b: f64, fmt: fn(f64) -> String) -> Html {
    let d = b - a;
    let class = if d < 0.0 {
        "better"
    } else if d > 0.0 {
        "worse"
    } else {
        "same"
    };
    let pct = (a != 0.0).then(|| format!("{:+.1}%", 100.0 * d / a));
    html! {
        <tr class={classes!(class)}>
            <td>{ name.to_string() }</td><td>{ fmt(a) }</td><td>{ fmt(b) }</td>
            <td>{ format!("{}{}", if d >= 0.0 { "+" } else { "-" }, fmt(d.abs())) }
                if let Some(p) = pct { <br /><small>{ p }</small> }</td>
        </tr>
    }
}

fn diff_view(d: &PlanDiff) -> Html {
    let changed: Vec<_> = d.collectives.iter().filter(|c| c.a != c.b).collect();
    html! {
        <div class="diff">
            <table class="diff-table">
                <tr><th></th><th>{ "pinned" }</th><th>{ "now" }</th><th>{ "change" }</th></tr>
                { delta_row("step time", d.step_time_s.a, d.step_time_s.b, human_seconds) }
                { delta_row("peak memory", d.peak_memory.a, d.peak_memory.b, bytes) }
                { delta_row("bytes sent", d.bytes.a, d.bytes.b, bytes) }
                { for changed.iter().map(|c| html! {
                    <tr class="collective"><td>{ format!("{} {}", c.phase, c.op) }</td><td>{ c.a }</td><td>{ c.b }</td><td>{ format!("{:+}", c.b as i64 - c.a as i64) }</td></tr>
                }) }
            </table>
            if d.layouts.is_empty() {
                <p class="hint">{ "Every tensor is laid out as in the pinned plan." }</p>
            } else {
                <details class="layout-changes">
                    <summary>{ format!("{} tensors laid out differently", d.layouts.len()) }</summary>
                    <ul>
                        { for d.layouts.iter().take(50).map(|c| html! {
                            <li><code>{ c.tensor.clone() }</code>{ format!(" {} → {}", c.a.clone().unwrap_or_else(|| "—".into()), c.b.clone().unwrap_or_else(|| "—".into())) }</li>
                        }) }
                    </ul>
                </details>
            }
        </div>
    }
}

fn select_value(e: &Event) -> String {
    e.target_dyn_into::<HtmlSelectElement>()
        .map(|s| s.value())
        .unwrap_or_default()
}

/// The plan's cost: the summary, the bars, the selected rank's memory.
fn cost_view(cost: &Result<Estimate, crate::protocol::Failure>, rank: u32) -> Html {
    match cost {
        Ok(e) => html! {
            <>
                <p class="cost-summary">
                    { format!("step {} · MFU {:.1}% · critical rank {}", human_seconds(e.step_s()), 100.0 * e.mfu, e.step.critical_rank) }
                </p>
                { bars(e) }
                <h3>{ format!("Memory of rank {rank}") }</h3>
                { memory_chart(e, rank) }
            </>
        },
        Err(m) => html! { <p class="hint">{ format!("No cost: {m}") }</p> },
    }
}

/// The comparison with the pinned plan.
fn compare_view(diff: &Option<Result<PlanDiff, crate::protocol::Failure>>) -> Html {
    match diff {
        Some(Ok(d)) => diff_view(d),
        Some(Err(m)) => html! { <p class="hint">{ format!("No comparison: {m}") }</p> },
        None => html! { <p class="hint">{ "Pin this plan, change something, and compare." }</p> },
    }
}

/// The cost panel.
#[component]
pub fn CostPanel() -> Html {
    let Some(ctx) = use_context::<AppCtx>() else {
        return html! {};
    };
    let s = ctx.session();
    // The engine prices the plan (every rank) when the plan, topology or pin changes.
    let key = (
        s.pipeline
            .as_ref()
            .map(|p| std::sync::Arc::as_ptr(p) as usize),
        s.topology.clone(),
        s.pinned.as_ref().map(|p| p.link.clone()),
    );
    let pinned = s.pinned.as_ref().map(|p| p.link.clone());
    let answer = use_engine_answer(&ctx, key, Task::Cost { pinned });
    let on_topology = ctx.on(|e: Event| Action::SetTopology(select_value(&e)));
    let on_zero = ctx.on(|e: Event| Action::SetZero(select_value(&e).parse().unwrap_or(0)));
    let on_pin = if s.pinned.is_some() {
        ctx.on(|_: MouseEvent| Action::Unpin)
    } else {
        ctx.on(|_: MouseEvent| Action::Pin)
    };
    let (cost, pinned) = match answer.as_deref() {
        None => {
            let waiting =
                || html! { <p class="hint waiting" role="status">{ "Pricing the plan…" }</p> };
            (waiting(), waiting())
        }
        Some(Outcome::Cost(v)) => (cost_view(&v.cost, s.selected_rank), compare_view(&v.diff)),
        Some(Outcome::Failed(m)) => (
            html! { <p class="hint">{ format!("No cost: {m}") }</p> },
            html! {},
        ),
        Some(_) => (html! {}, html! {}),
    };
    html! {
        <section class="panel cost-panel">
            <h2>
                { "Cost on " }
                <select id="topology" aria-label="topology" onchange={on_topology}>
                    { for TOPOLOGIES.iter().map(|t| html! { <option value={*t} selected={s.topology == *t}>{ *t }</option> }) }
                </select>
                <label class="zero">{ "ZeRO " }
                    <select id="zero" aria-label="ZeRO stage" onchange={on_zero}>
                        { for (0..=3u8).map(|z| html! { <option value={z.to_string()} selected={s.plan.options.zero == z}>{ if z == 0 { "off".to_string() } else { format!("stage {z}") } }</option> }) }
                    </select>
                </label>
                <button id="pin" class="small" onclick={on_pin}>{ if s.pinned.is_some() { "Unpin" } else { "Pin plan" } }</button>
            </h2>
            { cost }
            <h3>{ "Compared with the pinned plan" }</h3>
            { pinned }
        </section>
    }
}
