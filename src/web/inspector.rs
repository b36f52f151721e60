//! The tensor inspector: the selected tensor's sharding in all four notations, a selector
//! per dim (free, replicated, a mesh axis), which device holds which block (like JAX's
//! `visualize_array_sharding`), and why each dim is split.

use super::app::AppCtx;
use crate::dist::{render, Notation, ProcessMesh, TensorDistAttr};
use crate::passes::complete::explain_text;
use crate::session::{Action, DimChoice};
use web_sys::HtmlSelectElement;
use yew::prelude::*;

/// Devices holding each block of a tensor: `blocks[row][col]` for dims 0 and 1 (a rank-1
/// tensor has one row; a scalar one block).
pub fn block_owners(attr: &TensorDistAttr, mesh: &ProcessMesh) -> Vec<Vec<Vec<u32>>> {
    let shards = |d: usize| attr.shards_of_dim(d, mesh);
    let (rows, cols) = match attr.rank() {
        0 => (1, 1),
        1 => (1, shards(0)),
        _ => (shards(0), shards(1)),
    };
    let mut blocks = vec![vec![Vec::new(); cols]; rows];
    for &p in mesh.process_ids() {
        let Some(coords) = mesh.coords_of(p) else {
            continue;
        };
        let index = |d: usize| {
            attr.dims.get(d).map_or(0, |axes| {
                axes.iter()
                    .fold(0, |acc, &a| acc * mesh.axis_size(a) + coords[a.index()])
            })
        };
        let (r, c) = match attr.rank() {
            0 => (0, 0),
            1 => (0, index(0)),
            _ => (index(0), index(1)),
        };
        if let Some(b) = blocks.get_mut(r).and_then(|row| row.get_mut(c)) {
            b.push(p);
        }
    }
    blocks
}

/// The drag-and-drop data type carrying a mesh axis index from the mesh editor.
pub const AXIS_DRAG_TYPE: &str = "application/x-shardlab-axis";

/// The inspector panel.
#[component]
pub fn Inspector() -> Html {
    let Some(ctx) = use_context::<AppCtx>() else {
        return html! {};
    };
    let s = ctx.session();
    let (Some(name), Some(p), Some(mesh)) = (
        s.selected_var.clone(),
        s.pipeline.clone(),
        s.mesh().cloned(),
    ) else {
        return html! { <section class="panel inspector"><h2>{ "Tensor" }</h2><p class="hint">{ "Click a tensor in the program to inspect and annotate it." }</p></section> };
    };
    let program = &p.full.program;
    let Some(v) = program.var_id(&name) else {
        return html! {};
    };
    let var = program.var(v).clone();
    let attr = p.full.tensors[v.index()].clone();
    let forward = s.plan.program.var_id(&name);
    let annotation = forward.and_then(|f| s.plan.annotation(f)).cloned();
    let selectors = forward.map(|_| {
        (0..var.ty.rank()).map(|d| {
            let current = match &annotation {
                Some(a) if a.annotated.get(d).copied().unwrap_or(false) => match a.dims[d].as_slice() {
                    [] => "-".to_string(),
                    axes => axes.iter().map(|x| x.to_string()).collect::<Vec<_>>().join("+"),
                },
                _ => "?".to_string(),
            };
            let var_name = name.clone();
            let onchange = ctx.on(move |e: Event| {
                let value = e.target_dyn_into::<HtmlSelectElement>().map(|x| x.value()).unwrap_or_default();
                let choice = match value.as_str() {
                    "?" => DimChoice::Free,
                    "-" => DimChoice::Replicated,
                    axes => DimChoice::Axes(axes.split('+').filter_map(|a| a.parse().ok()).collect()),
                };
                Action::SetDim { var: var_name.clone(), dim: d, choice }
            });
            let pinned = current != "?";
            // An axis dragged from the mesh editor and dropped here splits this dim over it.
            let ondragover = Callback::from(|e: DragEvent| e.prevent_default());
            let ondrop = {
                let (state, var_name, ndim) = (ctx.state.clone(), name.clone(), mesh.ndim());
                Callback::from(move |e: DragEvent| {
                    e.prevent_default();
                    let data = e.data_transfer().and_then(|t| t.get_data(AXIS_DRAG_TYPE).ok());
                    if let Some(axis) = data.and_then(|a| a.parse::<usize>().ok()).filter(|&a| a < ndim) {
                        state.dispatch(Action::SetDim { var: var_name.clone(), dim: d, choice: DimChoice::Axes(vec![axis]) });
                    }
                })
            };
            html! {
                <label class={classes!("dim", pinned.then_some("pinned"))} data-drop-dim={d.to_string()} {ondragover} {ondrop}>
                    { format!("dim {d} ({}) ", var.ty.shape[d]) }
                    <select data-dim={d.to_string()} {onchange}>
                        <option value="?" selected={current == "?"}>{ "free (?)" }</option>
                        <option value="-" selected={current == "-"}>{ "replicated (-)" }</option>
                        { for mesh.axes().map(|a| html! {
                            <option value={a.to_string()} selected={current == a.to_string()}>{ format!("split over {}", mesh.axis_name(a)) }</option>
                        }) }
                    </select>
                    if pinned { <span class="pin" title="pinned: completion will not change it">{ "pinned" }</span> }
                </label>
            }
        }).collect::<Html>()
    });
    let blocks = block_owners(&attr, &mesh);
    let grid = html! {
        <table class="blocks" aria-label="which devices hold which block">
            { for blocks.iter().map(|row| html! {
                <tr>{ for row.iter().map(|devs| html! {
                    <td class={classes!(devs.contains(&s.selected_rank).then_some("mine"))}>{ devs.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(",") }</td>
                }) }</tr>
            }) }
        </table>
    };
    let why = forward
        .filter(|_| v.index() < s.plan.program.vars().len())
        .map(|f| explain_text(&s.plan.program, &p.completed, f));
    let clear = {
        let n = name.clone();
        ctx.on(move |_: MouseEvent| Action::ClearAnnotation(n.clone()))
    };
    html! {
        <section class="panel inspector">
            <h2>{ name.clone() }<small>{ format!(" {} {}", var.ty, var.kind.name()) }</small></h2>
            <dl class="notations">
                { for Notation::ALL.into_iter().map(|n| html! { <><dt>{ n.label() }</dt><dd class={classes!((n == s.notation).then_some("current"))}>{ render(&attr, &mesh, n) }</dd></> }) }
            </dl>
            if let Some(sel) = selectors { <div class="dims">{ sel }</div> }
            if annotation.is_some() { <button class="small" onclick={clear}>{ "clear annotation" }</button> }
            <h3>{ "Blocks (devices holding each)" }</h3>
            { grid }
            if let Some(text) = why { <h3>{ "Why is it split this way?" }</h3><pre class="why">{ text }</pre> }
        </section>
    }
}
