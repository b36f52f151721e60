//! Break it: make a deliberate mistake in the rank programs (delete an inserted op, drop the
//! 1/N scale, change a reduce type or group, skip a sync on one rank), run, and see which
//! tensors diverge from serial, first divergence first, each with the verifier's one-line
//! diagnosis and a per-element difference map.

use super::app::AppCtx;
use super::program_view::purpose_class;
use crate::dist::ReduceType;
use crate::engine::Task;
use crate::ir::OpType;
use crate::session::{Action, Breakage, Divergence, GroupChange, InsertedOp};
use web_sys::{HtmlInputElement, HtmlSelectElement};
use yew::prelude::*;

/// The mistakes one inserted op offers.
fn op_row(ctx: &AppCtx, o: &InsertedOp, rank: u32) -> Html {
    let i = o.op;
    let delete = ctx.on(move |_: MouseEvent| Action::Break(Breakage::Delete { op: i }));
    let skip = ctx.on(move |_: MouseEvent| Action::Break(Breakage::SkipOnRank { op: i, rank }));
    let is_collective = o.group.is_some();
    let is_scale = o.label.starts_with(OpType::Scale.name());
    let on_reduce = ctx.on(move |e: Event| {
        let v = e
            .target_dyn_into::<HtmlSelectElement>()
            .map(|s| s.value())
            .unwrap_or_default();
        match ReduceType::from_name(&v) {
            Some(reduce) => Action::Break(Breakage::SetReduce { op: i, reduce }),
            None => Action::Dismiss,
        }
    });
    let on_group = ctx.on(move |e: Event| {
        let v = e
            .target_dyn_into::<HtmlSelectElement>()
            .map(|s| s.value())
            .unwrap_or_default();
        match v.as_str() {
            "alone" => Action::Break(Breakage::SetGroup {
                op: i,
                group: GroupChange::Alone,
            }),
            "mesh" => Action::Break(Breakage::SetGroup {
                op: i,
                group: GroupChange::WholeMesh,
            }),
            _ => Action::Dismiss,
        }
    });
    html! {
        <li class={classes!("break-op", purpose_class(o.purpose))} data-op={i.to_string()}>
            <span class="label">{ format!("op {i}: {}", o.label) }</span>
            <span class="actions">
                <button class="small delete" onclick={delete}>{ if is_scale { "drop the scale" } else { "delete" } }</button>
                <button class="small skip" onclick={skip}>{ format!("skip on rank {rank} only") }</button>
                if is_collective && o.label.starts_with(OpType::AllReduce.name()) {
                    <select class="reduce" aria-label={format!("reduce type of op {i}")} onchange={on_reduce}>
                        <option value="" selected=true>{ "reduce…" }</option>
                        { for ["SUM", "MAX", "MIN", "AVG", "PROD"].into_iter().map(|r| html! { <option value={r}>{ r }</option> }) }
                    </select>
                }
                if is_collective {
                    <select class="group" aria-label={format!("group of op {i}")} onchange={on_group}>
                        <option value="" selected=true>{ "group…" }</option>
                        <option value="alone">{ "each rank alone" }</option>
                        <option value="mesh">{ "the whole mesh" }</option>
                    </select>
                }
            </span>
        </li>
    }
}

/// A difference map: one cell per (pooled) element, darker = further from serial.
fn heatmap(d: &Divergence) -> Html {
    let rows = d.heat.len();
    let cols = d.heat.first().map_or(0, Vec::len);
    if rows == 0 || cols == 0 {
        return html! {};
    }
    let top = d
        .heat
        .iter()
        .flatten()
        .copied()
        .filter(|x| x.is_finite())
        .fold(0.0f64, f64::max);
    let cell = (160.0 / cols.max(rows) as f64).clamp(3.0, 16.0);
    let cells = d.heat.iter().enumerate().flat_map(|(r, row)| {
        row.iter().enumerate().map(move |(c, &v)| {
            let t = if !v.is_finite() { 1.0 } else if top > 0.0 { v / top } else { 0.0 };
            let over = v > d.tolerance;
            // White (equal) to the tensor-parallel red (the worst element).
            let light = 100.0 - 55.0 * t;
            let fill = if over { format!("hsl(18, 90%, {light:.0}%)") } else { "#f1f3f5".into() };
            html! { <rect x={(c as f64 * cell).to_string()} y={(r as f64 * cell).to_string()} width={cell.to_string()} height={cell.to_string()} {fill}><title>{ format!("|diff| {v:.3e}") }</title></rect> }
        })
    });
    let (w, h) = (cols as f64 * cell, rows as f64 * cell);
    html! {
        <svg class="heatmap" viewBox={format!("0 0 {w} {h}")} width={w.to_string()} height={h.to_string()} role="img"
            aria-label={format!("difference map of {}: {rows}×{cols} cells, largest {top:.3e}", d.tensor)}>
            { for cells }
        </svg>
    }
}

/// The break-it panel.
#[component]
pub fn BreakPanel() -> Html {
    let Some(ctx) = use_context::<AppCtx>() else {
        return html! {};
    };
    let s = ctx.session();
    let toggle = ctx.on(|e: Event| {
        Action::SetBreakMode(
            e.target_dyn_into::<HtmlInputElement>()
                .is_some_and(|i| i.checked()),
        )
    });
    let head = html! {
        <h2>{ "Break it " }
            <label class="small-label"><input id="break-mode" type="checkbox" checked={s.break_mode} onchange={toggle} />{ " break-it mode" }</label>
        </h2>
    };
    if !s.break_mode {
        return html! {
            <section class="panel break-panel">{ head }
                <p class="hint">{ "Delete an inserted op, drop the 1/N scale, change a reduce type or a group, or skip a sync on one rank; then run and see what breaks." }</p>
            </section>
        };
    }
    let rows = s
        .inserted_ops()
        .iter()
        .map(|o| op_row(&ctx, o, s.selected_rank))
        .collect::<Html>();
    let run = ctx.on(|_: MouseEvent| Action::RunBroken);
    let clear = ctx.on(|_: MouseEvent| Action::ClearBreaks);
    let made = s
        .breaks
        .iter()
        .map(|(_, b)| html! { <li>{ s.describe_break(b) }</li> })
        .collect::<Html>();
    let report = s.break_report.as_ref().map(|r| {
        let verdict = match (&r.failure, r.diverged.len()) {
            (Some(f), _) => format!("The run could not finish: {f}"),
            (None, 0) => format!("All {} tensors still match the serial run.", r.compared),
            (None, n) => format!("{n} of {} tensors diverge from the serial run, first divergence first:", r.compared),
        };
        let items = r.diverged.iter().take(8).map(|d| html! {
            <li class="diverged">
                <div class="tensor">{ d.tensor.clone() }</div>
                <div class="diagnosis">{ d.diagnosis.clone() }</div>
                { heatmap(d) }
            </li>
        });
        html! {
            <div class="break-report" aria-live="polite">
                { super::run_panel::twin_note(&r.shrunk) }
                <p class={classes!("verdict", (r.failure.is_some() || !r.diverged.is_empty()).then_some("fail"))}>{ verdict }</p>
                <ol class="diverged-list">{ for items }</ol>
                if r.diverged.len() > 8 { <p class="hint">{ format!("… and {} more", r.diverged.len() - 8) }</p> }
            </div>
        }
    });
    html! {
        <section class="panel break-panel">
            { head }
            <p class="hint">{ format!("Ops inserted into rank {}'s program. Each mistake applies to every rank that has the op, unless it says one rank.", s.selected_rank) }</p>
            <ul class="break-ops">{ rows }</ul>
            if !s.breaks.is_empty() { <h3>{ "Mistakes made" }</h3><ul class="breaks">{ made }</ul> }
            <p>
                <button id="run-broken" class="small primary" onclick={run}>{ "Run the broken programs" }</button>
                { " " }
                <button class="small" onclick={clear} disabled={s.breaks.is_empty()}>{ "undo all" }</button>
            </p>
            if matches!(s.waiting_for(), Some(Task::RunBroken(_))) {
                <p class="hint waiting" role="status">{ "Running the broken programs…" }</p>
            }
            { report }
        </section>
    }
}
