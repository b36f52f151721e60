//! The program: one row per op with its tensors as chips (shape and sharding in the chosen
//! notation), the completion timeline's current op and changes highlighted, inserted
//! communication coloured by purpose. Repeated transformer blocks fold into one row.

use super::app::AppCtx;
use crate::dist::{render, TensorDistAttr, Typed};
use crate::ir::{Op, OpClass, Program, Purpose, VarId};
use crate::passes::complete::EventKind;
use crate::session::{Action, PipelineAction, Stage};
use yew::prelude::*;

/// The CSS class of a purpose (the colour of its ops, its legend entry and its groups on
/// the mesh).
pub fn purpose_class(p: Purpose) -> &'static str {
    match p {
        Purpose::DataParallel => "dp",
        Purpose::TensorParallel => "tp",
        Purpose::Reshard => "reshard",
        // A tied parameter's all-reduce runs across the pipeline stages.
        Purpose::Pipeline | Purpose::TiedParameter => "pp",
        Purpose::AmpFlag => "amp",
        Purpose::GlobalNorm => "norm",
        Purpose::Sharding => "zero",
        Purpose::ContextParallel => "cp",
    }
}

/// The CSS classes of a communication op: `comm` and its purpose's class.
pub fn scope_class(op: &Op) -> String {
    match op.purpose() {
        Some(p) => format!("comm {}", purpose_class(p)),
        None if op.ty.class() == OpClass::Collective => "comm".into(),
        None => String::new(),
    }
}

/// The block (`h3`) an op belongs to, from its first output's name.
fn block_of(program: &Program, op: &Op) -> Option<usize> {
    program.layer_of(op)
}

struct ChipCtx<'a> {
    program: &'a Program,
    attrs: Option<&'a [TensorDistAttr]>,
    mesh: Option<&'a crate::dist::ProcessMesh>,
    notation: crate::dist::Notation,
    selected: Option<&'a str>,
    changed: Option<(VarId, Option<u16>)>,
    pinned: &'a dyn Fn(VarId) -> bool,
    /// The chip under the pointer (its tiles float beside the program).
    hover: UseStateHandle<Option<String>>,
    /// Whether a variable has its layout at the timeline's moment (Backward tab).
    done: &'a dyn Fn(VarId) -> bool,
}

fn chip(c: &ChipCtx, v: VarId, on_select: &Callback<String>) -> Html {
    let var = c.program.var(v);
    let name = var.name.to_string();
    let shard = c
        .attrs
        .and_then(|a| a.get(v.index()))
        .zip(c.mesh)
        .map(|(a, mesh)| {
            render(
                a,
                mesh,
                c.notation,
                Typed {
                    shape: &var.ty.shape[..],
                    dtype: var.ty.dtype.name(),
                },
            )
        })
        .unwrap_or_default();
    // Not yet completed at the backward timeline's moment.
    let shard = if (c.done)(v) {
        shard
    } else {
        "…".to_string()
    };
    let onclick = {
        let (cb, name) = (on_select.clone(), name.clone());
        Callback::from(move |_: MouseEvent| cb.emit(name.clone()))
    };
    let onmouseenter = {
        let (hover, name) = (c.hover.clone(), name.clone());
        Callback::from(move |_: MouseEvent| hover.set(Some(name.clone())))
    };
    let onmouseleave = {
        let hover = c.hover.clone();
        Callback::from(move |_: MouseEvent| hover.set(None))
    };
    let class = classes!(
        "chip",
        (c.selected == Some(name.as_str())).then_some("selected"),
        c.changed
            .is_some_and(|(cv, _)| cv == v)
            .then_some("changed"),
        (c.pinned)(v).then_some("pinned")
    );
    html! {
        <button {class} {onclick} {onmouseenter} {onmouseleave} data-var={name.clone()} title={format!("{} {}", name, var.ty)}>
            <span class="name">{ name.clone() }</span>
            <span class="shape">{ format!("{:?}", var.ty.shape) }</span>
            <span class="shard">{ shard }</span>
        </button>
    }
}

/// The shown rank's layouts as a table, copied only on the per-rank tab (its program
/// shares the serial layouts with the other ranks').
fn shown_rank_attrs(s: &crate::session::Session) -> Option<Vec<TensorDistAttr>> {
    let rank = s.rank_program().filter(|_| s.stage == Stage::Partition)?;
    Some(rank.attrs.to_vec())
}

/// The program panel.
#[component]
pub fn ProgramView() -> Html {
    let Some(ctx) = use_context::<AppCtx>() else {
        return html! {};
    };
    let unfold = use_state(|| false);
    let hover = use_state(|| None::<String>);
    let s = ctx.session();
    let Some(p) = s.pipeline.clone() else {
        return html! { <section class="panel program-panel"><h2>{ "Program" }</h2><p class="hint">{ "No plan to show." }</p></section> };
    };
    let on_select = ctx.on(|name: String| Action::SelectVar(Some(name)));
    let event = (s.stage == Stage::Forward)
        .then(|| {
            s.timeline
                .checked_sub(1)
                .and_then(|i| p.completed.trace.events.get(i))
        })
        .flatten();
    let conflicts = reached_conflicts(s, &p);
    let forward_attrs = if s.stage == Stage::Forward {
        s.tensors_at(s.timeline)
    } else {
        None
    };
    let rank_program = s.rank_program();
    let rank_attrs = shown_rank_attrs(s);
    let (program, attrs, title): (&Program, Option<&[TensorDistAttr]>, String) = match s.stage {
        Stage::Forward => (
            &s.plan.program,
            forward_attrs.as_deref(),
            format!("Forward program — {} ops", s.plan.program.ops().len()),
        ),
        Stage::Backward => (
            &p.full.program,
            Some(p.full.tensors.as_slice()),
            format!("Backward + optimizer — {} ops", p.full.program.ops().len()),
        ),
        Stage::Partition => match rank_program {
            Some(r) => (
                &r.program,
                rank_attrs.as_deref(),
                format!(
                    "Rank {} — {} ops with local shapes",
                    r.rank,
                    r.program.ops().len()
                ),
            ),
            None => (&s.plan.program, None, "Program".into()),
        },
    };
    let annotated: Vec<VarId> = s.plan.annotations.iter().map(|a| a.var).collect();
    let pinned = |v: VarId| s.stage == Stage::Forward && annotated.contains(&v);
    let chip_ctx = ChipCtx {
        program,
        attrs,
        mesh: s.mesh().map(|m| &**m),
        notation: s.notation,
        selected: s.selected_var.as_deref(),
        changed: event
            .filter(|e| matches!(e.kind, EventKind::Set { .. } | EventKind::Partial))
            .map(|e| (e.var, e.dim)),
        pinned: &pinned,
        hover: hover.clone(),
        done: &|v| s.stage != Stage::Backward || s.backward_done(v),
    };
    let blocks = program
        .ops()
        .iter()
        .filter_map(|o| block_of(program, o))
        .max()
        .unwrap_or(0);
    // Pipeline stages: a mark per op, and (forward view) a draggable boundary before each
    // stage's first op. Folding would hide boundaries, so a staged program is not folded.
    let staged = p.stages.is_pipelined();
    let starts = if staged && s.stage == Stage::Forward {
        s.stage_starts()
    } else {
        Vec::new()
    };
    let fold = blocks >= 1 && !*unfold && program.ops().len() > 60 && !staged;
    let markers = s.backward_markers();
    let mut rows = Vec::new();
    let mut folded = 0;
    for (i, op) in program.ops().iter().enumerate() {
        if fold && block_of(program, op).is_some_and(|b| b >= 1) {
            folded += 1;
            continue;
        }
        if folded > 0 {
            rows.push(fold_row(folded, blocks, &unfold));
            folded = 0;
        }
        let current = event.is_some_and(|e| e.op.index() == i)
            || (s.stage == Stage::Backward && s.backward_current() == Some(i));
        let impl_name = impl_label(s, &p, program, op, i);
        if let Some(k) = starts.iter().skip(1).position(|&st| st == i).map(|k| k + 1) {
            rows.push(boundary(&ctx, k, i, &starts));
        }
        let stage_mark = match s.stage {
            Stage::Forward | Stage::Backward if staged => Some(format!("S{}", s.stage_of_op(i))),
            Stage::Forward | Stage::Backward | Stage::Partition => None,
        };
        let drop = (!starts.is_empty() && i < crate::plan::forward_ops(program))
            .then(|| drop_handlers(&ctx, i));
        let conflict = conflicts.get(&i).map(|w| w.join("\n"));
        let class = classes!(
            "op",
            scope_class(op),
            current.then_some("current"),
            (s.stage == Stage::Partition && s.focus_op == Some(i)).then_some("focused"),
            conflict.is_some().then_some("conflict"),
            format!("role-{}", op.role.name())
        );
        let (ondragover, ondrop) = drop.unzip();
        rows.push(html! {
            <li {class} data-op={i.to_string()} {ondragover} {ondrop}>
                if let Some(m) = stage_mark { <span class="stage-mark">{ m }</span> }
                <span class="index">{ format!("{i}") }</span>
                <span class="type">{ op.ty.name() }</span>
                if let Some(m) = impl_name { <span class="impl">{ m }</span> }
                if let Some(why) = conflict { <button class="conflict-badge" title={why.clone()} aria-label={format!("conflict: {why}")}>{ "conflict" }</button> }
                if s.stage == Stage::Partition && op.ty.class() == OpClass::Collective { { values_button(&ctx, i) } }
                <span class="io">
                    { for op.all_inputs().map(|v| chip(&chip_ctx, v, &on_select)) }
                    <span class="arrow">{ "→" }</span>
                    { for op.all_outputs().map(|v| chip(&chip_ctx, v, &on_select)) }
                </span>
            </li>
        });
        if let Some(ms) = markers.get(&i) {
            rows.push(inserted_marker(&ctx, s.selected_rank, ms));
        }
    }
    if folded > 0 {
        rows.push(fold_row(folded, blocks, &unfold));
    }
    use_scroll_to_focus(s.focus_op, s.stage);
    let toggle = {
        let unfold = unfold.clone();
        Callback::from(move |_: MouseEvent| unfold.set(!*unfold))
    };
    html! {
        <section class="panel program-panel">
            <h2>{ title }
                if blocks >= 1 { <button class="small" onclick={toggle}>{ if *unfold { "fold blocks" } else { "unfold blocks" } }</button> }
            </h2>
            <div class="legend"><span class="comm tp">{ "tensor parallel" }</span><span class="comm dp">{ "data parallel" }</span><span class="comm reshard">{ "reshard" }</span><span class="comm amp">{ "AMP" }</span><span class="comm norm">{ "global norm" }</span><span class="comm zero">{ "ZeRO" }</span></div>
            { hover_tiles(s, hover.as_deref()) }
            <ol class="ops">{ for rows }</ol>
        </section>
    }
}

/// What an op row says after its type: the chosen implementation, or for inserted
/// communication its group, reduce type and bytes sent.
fn impl_label(
    s: &crate::session::Session,
    p: &crate::passes::driver::Passes,
    program: &Program,
    op: &crate::ir::Op,
    i: usize,
) -> Option<String> {
    match s.stage {
        Stage::Forward => p.completed.ops.get(i).map(|a| {
            let (container, index) = a.imp.paddle_id();
            format!("{container} #{index}")
        }),
        Stage::Backward => p.full.ops.get(i).map(|a| {
            let (container, index) = a.imp.paddle_id();
            format!("{container} #{index}")
        }),
        // Inserted communication shows what it costs: group, reduce type, bytes sent.
        Stage::Partition => op.attr_ints("group").map(|g| {
            let reduce = op
                .attr_str("reduce_type")
                .map(|r| format!(" · {r}"))
                .unwrap_or_default();
            let sent = crate::passes::ledger::bytes_per_rank(program, op);
            format!(
                "group {g:?}{reduce} · {} sent",
                super::ledger_view::bytes(sent)
            )
        }),
    }
}

/// The drag type of a stage boundary (its stage number).
const STAGE_DRAG_TYPE: &str = "application/x-shardlab-stage";

/// A forward op row as a drop target for a stage boundary: the stage then starts here.
fn drop_handlers(ctx: &AppCtx, i: usize) -> (Callback<DragEvent>, Callback<DragEvent>) {
    let over = Callback::from(|e: DragEvent| e.prevent_default());
    let state = ctx.state.clone();
    let drop = Callback::from(move |e: DragEvent| {
        e.prevent_default();
        let stage = e
            .data_transfer()
            .and_then(|t| t.get_data(STAGE_DRAG_TYPE).ok())
            .and_then(|d| d.parse::<usize>().ok());
        if let Some(stage) = stage {
            state.dispatch(Action::Pipeline(PipelineAction::MoveStageBoundary {
                stage,
                first_op: i,
            }));
        }
    });
    (over, drop)
}

/// The boundary before stage `k`'s first op `i`: drag it onto another op, or nudge it.
fn boundary(ctx: &AppCtx, k: usize, i: usize, starts: &[usize]) -> Html {
    let ondragstart = Callback::from(move |e: DragEvent| {
        if let Some(t) = e.data_transfer() {
            let _ = t.set_data(STAGE_DRAG_TYPE, &k.to_string());
        }
    });
    let lo = starts.get(k - 1).map_or(1, |&p| p + 1);
    let earlier = (i > lo).then(|| {
        ctx.on(move |_: MouseEvent| {
            Action::Pipeline(PipelineAction::MoveStageBoundary {
                stage: k,
                first_op: i - 1,
            })
        })
    });
    let later = ctx.on(move |_: MouseEvent| {
        Action::Pipeline(PipelineAction::MoveStageBoundary {
            stage: k,
            first_op: i + 1,
        })
    });
    html! {
        <li class="stage-boundary" draggable="true" {ondragstart} data-stage-boundary={k.to_string()}
            title="drag onto an op to start the stage there">
            { format!("stage {k} starts here ⇕ ") }
            <button class="small earlier" aria-label={format!("stage {k} starts one op earlier")} disabled={earlier.is_none()} onclick={earlier}>{ "▲" }</button>
            <button class="small later" aria-label={format!("stage {k} starts one op later")} onclick={later}>{ "▼" }</button>
        </li>
    }
}

fn fold_row(count: usize, blocks: usize, unfold: &UseStateHandle<bool>) -> Html {
    let onclick = {
        let unfold = unfold.clone();
        Callback::from(move |_: MouseEvent| unfold.set(true))
    };
    html! {
        <li class="op folded" {onclick}>{ format!("… {count} ops of blocks h1–h{blocks} (× {blocks}, the same as h0) — click to unfold") }</li>
    }
}

/// The communication the selected rank's program inserts after a serial op (the Backward
/// tab): each op a link to it in the rank's program.
fn inserted_marker(ctx: &AppCtx, rank: u32, ops: &[crate::session::InsertedOp]) -> Html {
    let items = ops.iter().map(|o| {
        let i = o.op;
        let onclick = ctx.on(move |_: MouseEvent| Action::FocusOp(Some(i)));
        html! { <button class={classes!("linkish", "comm", purpose_class(o.purpose))} {onclick}>{ format!("{} ({})", o.label, o.purpose.name()) }</button> }
    });
    html! {
        <li class="inserted-marker" data-inserted={ops.len().to_string()}>
            <span class="marker-head">{ format!("⇢ inserted on rank {rank}:") }</span>
            { for items }
        </li>
    }
}

/// A focused op (clicked in the rank lens) scrolls into view.
#[hook]
fn use_scroll_to_focus(focus: Option<usize>, stage: Stage) {
    use_effect_with((focus, stage), |(focus, _)| {
        if let Some(i) = focus {
            let el = web_sys::window().and_then(|w| w.document()).and_then(|d| {
                d.query_selector(&format!(".program-panel li.op[data-op='{i}']"))
                    .ok()
                    .flatten()
            });
            if let Some(el) = el {
                el.scroll_into_view_with_bool(false);
            }
        }
    });
}

/// Conflicts the timeline has reached, by op: the rule's wish that completion refused.
fn reached_conflicts(
    s: &crate::session::Session,
    p: &crate::passes::driver::Passes,
) -> std::collections::HashMap<usize, Vec<String>> {
    let mut conflicts: std::collections::HashMap<usize, Vec<String>> = Default::default();
    if s.stage == Stage::Forward {
        let reached = s.timeline.min(p.completed.trace.events.len());
        for (i, e) in p.completed.trace.events[..reached].iter().enumerate() {
            if matches!(e.kind, EventKind::Rejected(_)) {
                let why = s.event_text(i).unwrap_or_default();
                conflicts.entry(e.op.index()).or_default().push(why);
            }
        }
    }
    conflicts
}

/// Shows a collective's real values (the values panel).
fn values_button(ctx: &AppCtx, i: usize) -> Html {
    let onclick = ctx.on(move |_: MouseEvent| Action::ShowValues(Some(i)));
    html! { <button class="small values" {onclick} aria-label={format!("show the values of op {i}")}>{ "values" }</button> }
}

/// The hovered chip's tensor as tiles, floating over the program's corner.
fn hover_tiles(s: &crate::session::Session, var: Option<&str>) -> Html {
    let Some((tiling, shape)) = var.and_then(|v| s.tiles_of(v)) else {
        return html! {};
    };
    html! {
        <div class="hover-tiles" aria-hidden="true">
            <super::tile_view::TileView {tiling} {shape} caption={AttrValue::from(var.unwrap_or_default().to_string())} mine={Some(s.selected_rank)} size={110.0} />
        </div>
    }
}
