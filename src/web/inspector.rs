//! The tensor inspector: the selected tensor's sharding in all six notations, a selector
//! per dim (free, replicated, a mesh axis; axes another dim uses are disabled, a rejected
//! choice is explained at the dim), the tensor as tiles coloured by device (following the
//! timeline), the matmul that produced it as A · B = C. Why each dim is split is shown beside
//! the program ([`WhyPanel`]), where a lecture's eyes are.

use super::app::AppCtx;
use super::tile_view::TileView;
use crate::dist::{render, Notation, Typed};
use crate::passes::complete::explain_text;
use crate::session::{Action, DimChoice};
use web_sys::HtmlSelectElement;
use yew::prelude::*;

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
            // Axes another dim of this tensor already uses cannot split this one.
            let used_elsewhere = |a: crate::dist::MeshAxis| (0..attr.rank()).any(|o| o != d && attr.dims[o].as_slice().contains(&a));
            let error = s.dim_error.as_ref().filter(|(v, dd, _)| *v == name && *dd == d).map(|(_, _, why)| why.clone());
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
                    <select key={format!("{d}-{current}-{}", s.rejections)} data-dim={d.to_string()} aria-label={format!("{name} dim {d}")} {onchange}>
                        <option value="?" selected={current == "?"}>{ "free (?)" }</option>
                        <option value="-" selected={current == "-"}>{ "replicated (-)" }</option>
                        { for mesh.axes().map(|a| html! {
                            <option value={a.to_string()} selected={current == a.to_string()} disabled={used_elsewhere(a)}>{ format!("split over {}", mesh.axis_name(a)) }{ if used_elsewhere(a) { " (used by another dim)" } else { "" } }</option>
                        }) }
                    </select>
                    if pinned { <span class="pin" title="pinned: completion will not change it">{ "pinned" }</span> }
                    if let Some(why) = error { <span class="dim-error" role="alert">{ why }</span> }
                </label>
            }
        }).collect::<Html>()
    });
    let (tiles, matmul, resolver) = pictures(s, &name, attr.is_partial());
    let clear = {
        let n = name.clone();
        ctx.on(move |_: MouseEvent| Action::ClearAnnotation(n.clone()))
    };
    html! {
        <section class="panel inspector">
            <h2>{ name.clone() }<small>{ format!(" {} {}", var.ty, var.kind.name()) }</small></h2>
            <dl class="notations">
                { for Notation::ALL.into_iter().map(|n| html! { <><dt>{ n.label() }</dt><dd class={classes!((n == s.notation).then_some("current"))}>{ render(&attr, &mesh, n, Typed { shape: &var.ty.shape[..], dtype: var.ty.dtype.name() }) }</dd></> }) }
            </dl>
            if let Some(sel) = selectors { <div class="dims">{ sel }</div> }
            if annotation.is_some() { <button class="small" onclick={clear}>{ "clear annotation" }</button> }
            <h3>{ "Tiles (colour = device; stacked = copies; Σ = partial addends)" }</h3>
            { tiles }
            if let Some(m) = matmul { <h3>{ "A · B = C (k is contracted)" }</h3>{ m } }
            if let Some(r) = resolver { <p class="resolver">{ r }</p> }
        </section>
    }
}

/// The tensor's tiles, the matmul producing it (A · B = C), and for a partial value the op
/// summing it on the selected rank.
fn pictures(
    s: &crate::session::Session,
    name: &str,
    partial: bool,
) -> (Option<Html>, Option<Html>, Option<String>) {
    let name = name.to_string();
    let tiles = s.tiles_of(&name).map(|(tiling, shape)| html! {
        <TileView {tiling} {shape} caption={AttrValue::from(name.clone())} mine={Some(s.selected_rank)} size={170.0} />
    });
    let matmul = s.matmul_of(&name).map(|[x, y, out]| {
        let operand = |o: crate::session::Operand| html! {
            <TileView tiling={o.tiling} shape={o.shape} caption={AttrValue::from(o.name)} mine={Some(s.selected_rank)} size={110.0} contracted={o.contracted} />
        };
        html! {
            <div class="matmul" aria-label="the matmul producing this tensor">
                { operand(x) }<span class="op-sign">{ "·" }</span>{ operand(y) }<span class="op-sign">{ "=" }</span>{ operand(out) }
            </div>
        }
    });
    let resolver = partial
        .then(|| s.resolver_of(&name))
        .flatten()
        .map(|(i, ty)| {
            format!(
                "On rank {}, {ty} at op {i} sums the partial addends into the whole value.",
                s.selected_rank
            )
        });
    (tiles, matmul, resolver)
}

/// Why the selected tensor is split the way it is, shown above the program (one screen at
/// 1280×800: the explanation beside the ops it talks about).
#[component]
pub fn WhyPanel() -> Html {
    let Some(ctx) = use_context::<AppCtx>() else {
        return html! {};
    };
    let s = ctx.session();
    let (Some(name), Some(p)) = (s.selected_var.as_deref(), s.pipeline.as_ref()) else {
        return html! {};
    };
    let Some(f) = s.plan.program.var_id(name) else {
        return html! {};
    };
    let text = explain_text(&s.plan.program, &p.completed, f);
    let close = ctx.on(|_: MouseEvent| Action::SelectVar(None));
    html! {
        <section class="panel why-panel" aria-label="why this tensor is split this way">
            <h2>{ format!("Why is {name} split this way?") }<button class="small close" onclick={close} aria-label="close">{ "×" }</button></h2>
            <pre class="why" tabindex="0">{ text }</pre>
        </section>
    }
}
