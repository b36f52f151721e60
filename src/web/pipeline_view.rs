//! The pipeline panel: the schedule menu, the micro-batch slider and the chunk count (the
//! plan's options), and the schedule as an SVG Gantt chart — a row per stage, each job a
//! box coloured by kind with its micro-batch, the bubbles hatched — with each stage's bubble
//! fraction and the activations it holds, updating as the controls move.

use super::app::AppCtx;
use super::engine_link::use_engine_answer;
use super::ledger_view::bytes;
use crate::cost::diff::human_seconds;
use crate::cost::pipeline_cost::PipelineCost;
use crate::engine::{Outcome, Task};
use crate::passes::pipeline::schedule::JobKind;
use crate::plan::ScheduleKind;
use crate::session::{Action, PipelineAction};
use web_sys::{HtmlInputElement, HtmlSelectElement};
use yew::prelude::*;

/// Jobs drawn at most (a huge schedule is summarised).
const MAX_JOBS: usize = 4000;

fn kind_class(kind: JobKind) -> &'static str {
    kind.name()
}

fn gantt(c: &PipelineCost) -> Html {
    let tl = &c.timeline;
    let (w, row, left) = (300.0, 20.0, 26.0);
    let height = row * tl.stages.len() as f64 + 16.0;
    let scale = if tl.step > 0.0 { w / tl.step } else { 0.0 };
    let total: usize = tl.stages.iter().map(Vec::len).sum();
    if total > MAX_JOBS {
        return html! { <p class="hint">{ format!("{total} jobs: too many to draw; see the bubble figures below") }</p> };
    }
    let rows = tl.stages.iter().enumerate().map(|(s, jobs)| {
        let y = 2.0 + row * s as f64;
        let boxes = jobs.iter().filter(|p| !matches!(p.job.kind, JobKind::RecvForward | JobKind::SendBackward)).map(|p| {
            let x = left + p.start * scale;
            let width = ((p.end - p.start) * scale).max(0.0);
            let label = match p.job.chunk {
                Some(ch) => format!("{}.{ch}", p.job.micro_batch),
                None => p.job.micro_batch.to_string(),
            };
            let what = format!("stage {s}: {} {} ({} to {})", p.job.kind.name(), label,
                human_or_units(c, p.start), human_or_units(c, p.end));
            html! {
                <g class={classes!("job", kind_class(p.job.kind))}>
                    <rect x={format!("{x:.2}")} y={format!("{:.1}", y + 1.0)} width={format!("{width:.2}")} height={format!("{:.1}", row - 4.0)}>
                        <title>{ what }</title>
                    </rect>
                    if width > 9.0 && p.job.kind != JobKind::Optimizer {
                        <text x={format!("{:.2}", x + width / 2.0)} y={format!("{:.1}", y + row - 7.0)} text-anchor="middle">{ label }</text>
                    }
                </g>
            }
        });
        html! {
            <g class="stage-row" data-stage={s.to_string()}>
                <rect class="idle" x={left.to_string()} y={format!("{:.1}", y + 1.0)} width={w.to_string()} height={format!("{:.1}", row - 4.0)} />
                <text x={(left - 4.0).to_string()} y={format!("{:.1}", y + row - 7.0)} text-anchor="end">{ format!("S{s}") }</text>
                { for boxes }
            </g>
        }
    });
    html! {
        <svg class="gantt" viewBox={format!("0 0 {} {height:.0}", w + left + 4.0)} role="img"
             aria-label={format!("{} schedule: a row of jobs per stage, bubbles hatched", c.schedule)}>
            <defs>
                <pattern id="bubble-hatch" width="5" height="5" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">
                    <rect width="5" height="5" fill="#f1f3f5" />
                    <line x1="0" y1="0" x2="0" y2="5" stroke="#ced4da" stroke-width="2" />
                </pattern>
            </defs>
            { for rows }
            <text x={left.to_string()} y={format!("{:.0}", height - 2.0)}>{ "0" }</text>
            <text x={format!("{:.0}", left + w)} y={format!("{:.0}", height - 2.0)} text-anchor="end">{ human_or_units(c, tl.step) }</text>
        </svg>
    }
}

fn human_or_units(c: &PipelineCost, t: f64) -> String {
    if c.ideal {
        format!("{t:.1}")
    } else {
        human_seconds(t)
    }
}

fn stats(c: &PipelineCost) -> Html {
    html! {
        <table class="pipeline-stats">
            <tr><th>{ "stage" }</th><th>{ "bubble" }</th><th>{ "in flight" }</th><th>{ "activations held" }</th></tr>
            { for c.stages.iter().map(|s| html! {
                <tr data-stage={s.stage.to_string()}>
                    <td>{ format!("S{}", s.stage) }</td>
                    <td class="bubble">{ format!("{:.1}%", 100.0 * c.timeline.bubble.get(s.stage).copied().unwrap_or(0.0)) }</td>
                    <td>{ s.in_flight }</td>
                    <td>{ bytes(s.peak_activation_bytes) }</td>
                </tr>
            }) }
        </table>
    }
}

fn select_value(e: &Event) -> String {
    e.target_dyn_into::<HtmlSelectElement>()
        .map(|s| s.value())
        .unwrap_or_default()
}

fn input_value(e: &InputEvent) -> usize {
    e.target_dyn_into::<HtmlInputElement>()
        .and_then(|i| i.value().parse().ok())
        .unwrap_or(1)
}

/// The schedule in time, as the engine laid it out (`None`: still working).
fn schedule_view(computed: Option<&Outcome>) -> Html {
    match computed {
        None => html! { <p class="hint waiting" role="status">{ "Laying out the schedule…" }</p> },
        Some(Outcome::PipelineCost(Ok(c))) => html! {
            <>
                <p class="pipeline-summary">
                    { format!("step {} · bubble fraction ", human_or_units(c, c.timeline.step)) }
                    <strong id="bubble-fraction">{ format!("{:.3}", c.bubble) }</strong>
                    { format!(" · {} on {} stages, {} micro-batches", c.schedule, c.stages.len(), c.micro_batches) }
                </p>
                { gantt(c) }
                <p class="cost-legend">
                    <span class="key forward"></span>{ "forward " }
                    <span class="key backward"></span>{ "backward " }
                    <span class="key backward_b"></span>{ "input grad " }
                    <span class="key backward_w"></span>{ "weight grad " }
                    <span class="key optimizer"></span>{ "optimizer (and gradient sync) · hatched: idle" }
                </p>
                { stats(c) }
            </>
        },
        Some(Outcome::PipelineCost(Err(m))) => {
            html! { <p class="hint">{ m.to_string() }</p> }
        }
        Some(Outcome::Failed(m)) => {
            html! { <p class="hint">{ m }</p> }
        }
        Some(_) => html! {},
    }
}

/// The pipeline panel.
#[component]
pub fn PipelinePanel() -> Html {
    let Some(ctx) = use_context::<AppCtx>() else {
        return html! {};
    };
    let s = ctx.session();
    let has_pp = s
        .mesh()
        .is_some_and(|m| crate::dist::Stages::of(m, 1).stages > 1);
    let o = &s.plan.options;
    let key = (
        s.pipeline
            .as_ref()
            .map(|p| std::sync::Arc::as_ptr(p) as usize),
        s.topology.clone(),
        s.gantt_ideal,
    );
    let computed = use_engine_answer(&ctx, key, Task::PipelineCost);
    let on_schedule = ctx.on(|e: Event| {
        Action::Pipeline(PipelineAction::SetSchedule(
            ScheduleKind::from_name(&select_value(&e)).unwrap_or_default(),
        ))
    });
    let on_mb =
        ctx.on(|e: InputEvent| Action::Pipeline(PipelineAction::SetMicroBatches(input_value(&e))));
    let on_chunks = ctx.on(|e: Event| {
        Action::Pipeline(PipelineAction::SetChunks(
            select_value(&e).parse().unwrap_or(1),
        ))
    });
    let ideal = s.gantt_ideal;
    let on_ideal = ctx.on(move |_: Event| Action::Pipeline(PipelineAction::SetGanttIdeal(!ideal)));
    let body = schedule_view(computed.as_deref());
    html! {
        <section class="panel pipeline-panel">
            <h2>{ "Pipeline" }</h2>
            if !has_pp {
                <p class="hint">{ "Name a mesh axis pp to split the model into pipeline stages (each pp coordinate is a stage); drag the dashed stage boundaries in the program to move layers between stages." }</p>
            }
            <div class="pipeline-controls">
                <label>{ "schedule " }
                    <select id="schedule" aria-label="pipeline schedule" onchange={on_schedule}>
                        { for ScheduleKind::ALL.iter().map(|k| html! { <option value={k.name()} selected={o.schedule == *k}>{ k.name() }</option> }) }
                    </select>
                </label>
                <label>{ format!("micro-batches {} ", o.micro_batches) }
                    <input id="micro-batches" type="range" min="1" max="32" value={o.micro_batches.to_string()}
                           aria-label="micro-batches" oninput={on_mb} />
                </label>
                <label>{ "chunks " }
                    <select id="chunks" aria-label="model chunks per stage (vpp)" onchange={on_chunks}>
                        { for (1..=4usize).map(|v| html! { <option value={v.to_string()} selected={o.chunks == v}>{ v }</option> }) }
                    </select>
                </label>
                <label><input id="gantt-ideal" type="checkbox" checked={ideal} onchange={on_ideal} />{ " ideal units (F 1, B 2)" }</label>
            </div>
            { body }
        </section>
    }
}
