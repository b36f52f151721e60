//! The mesh editor: drag (or click) across an 8×8 grid to set the shape, a third axis,
//! axis names, and the device picture (click a device to select its rank).

use super::app::AppCtx;
use super::mesh_view::MeshView;
use crate::session::Action;
use web_sys::{HtmlInputElement, HtmlSelectElement};
use yew::prelude::*;

const GRID: usize = 8;

/// The mesh panel.
#[component]
pub fn MeshEditor() -> Html {
    let Some(ctx) = use_context::<AppCtx>() else {
        return html! {};
    };
    let hover = use_state(|| None::<(usize, usize)>);
    let dragging = use_state(|| false);
    let s = ctx.session();
    let Some(mesh) = s.mesh().cloned() else {
        return html! {};
    };
    let shape = mesh.shape().to_vec();
    let (rows, cols) = match shape.as_slice() {
        [c] => (1, *c),
        [r, c] => (*r, *c),
        [_, r, c] => (*r, *c),
        _ => (1, 1),
    };
    let depth = if shape.len() == 3 { shape[0] } else { 1 };
    let shape_for = std::rc::Rc::new(move |r: usize, c: usize| -> Vec<usize> {
        let mut v = if r == 1 { vec![c] } else { vec![r, c] };
        if depth > 1 {
            if v.len() == 1 {
                v.insert(0, 1);
            }
            v.insert(0, depth);
        }
        v
    });
    let (hr, hc) = hover.unwrap_or((rows, cols));
    let cells = (0..GRID * GRID).map(|i| {
        let (r, c) = (i / GRID + 1, i % GRID + 1);
        let inside = r <= hr && c <= hc;
        let onmouseenter = {
            let hover = hover.clone();
            Callback::from(move |_: MouseEvent| hover.set(Some((r, c))))
        };
        let onmousedown = {
            let dragging = dragging.clone();
            Callback::from(move |_: MouseEvent| dragging.set(true))
        };
        let onmouseup = {
            let (state, dragging) = (ctx.state.clone(), dragging.clone());
            let shape = shape_for(r, c);
            Callback::from(move |_: MouseEvent| {
                dragging.set(false);
                state.dispatch(Action::SetMeshShape(shape.clone()));
            })
        };
        html! { <div class={classes!("cell", inside.then_some("on"))} data-rc={format!("{r}x{c}")} {onmouseenter} {onmousedown} {onmouseup}></div> }
    });
    let onkeydown = grid_keys(
        hover.clone(),
        ctx.state.clone(),
        shape_for.clone(),
        (rows, cols),
    );
    let onmouseleave = {
        let hover = hover.clone();
        Callback::from(move |_: MouseEvent| hover.set(None))
    };
    let on_depth = {
        let state = ctx.state.clone();
        let (rows, cols) = (rows, cols);
        Callback::from(move |e: Event| {
            let d: usize = e
                .target_dyn_into::<HtmlSelectElement>()
                .and_then(|s| s.value().parse().ok())
                .unwrap_or(1);
            let mut v = if rows == 1 {
                vec![cols]
            } else {
                vec![rows, cols]
            };
            if d > 1 {
                if v.len() == 1 {
                    v.insert(0, 1);
                }
                v.insert(0, d);
            }
            state.dispatch(Action::SetMeshShape(v));
        })
    };
    let names = mesh.dim_names().iter().enumerate().map(|(i, n)| {
        let onchange = ctx.on(move |e: Event| Action::RenameAxis(i, e.target_dyn_into::<HtmlInputElement>().map(|x| x.value()).unwrap_or_default()));
        // Drag an axis onto a tensor dim in the inspector to split that dim over it.
        let ondragstart = Callback::from(move |e: DragEvent| {
            if let Some(t) = e.data_transfer() {
                let _ = t.set_data(super::inspector::AXIS_DRAG_TYPE, &i.to_string());
            }
        });
        html! { <label class="axis-name" draggable="true" {ondragstart} data-axis={i.to_string()} title="drag onto a tensor dim to split it over this axis">{ format!("axis {i} ({}): ", mesh.shape().get(i).copied().unwrap_or(1)) }<input type="text" value={n.clone()} {onchange} size="5" /></label> }
    });
    let lit = s.lit_groups();
    let on_select = ctx.on(Action::SelectRank);
    html! {
        <section class="panel mesh-panel">
            <h2>{ "Process mesh" }</h2>
            <div class="mesh-row">
                <div>
                    <div class="shape-grid" {onmouseleave} {onkeydown} tabindex="0" role="grid" aria-label={format!("mesh shape {} by {}: arrow keys resize, Enter applies", hr, hc)} title="drag or click (or use the arrow keys and Enter) to set the mesh shape">{ for cells }</div>
                    <p class="hint">{ size_hint(&shape, hover.map(|_| (hr, hc))) }</p>
                </div>
                <div class="axes">
                    { for names }
                    <label class="axis-name">{ "third axis: " }
                        <select id="depth" onchange={on_depth}>
                            { for [1usize, 2, 4].into_iter().map(|d| html! { <option value={d.to_string()} selected={d == depth}>{ if d == 1 { "none".to_string() } else { format!("size {d}") } }</option> }) }
                        </select>
                    </label>
                </div>
            </div>
            <MeshView mesh={mesh.clone()} selected={Some(s.selected_rank)} lit={lit} on_select={Some(on_select)} />
            <p class="hint">{ format!("rank {} selected; its communication groups are outlined in their purpose's colour", s.selected_rank) }</p>
        </section>
    }
}

/// The size under the grid: the whole shape (`2×4×2`), or while hovering the shape the grid
/// would set (the third axis kept).
fn size_hint(shape: &[usize], hover: Option<(usize, usize)>) -> String {
    let join = |v: &[usize]| {
        v.iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join("×")
    };
    match hover {
        None => format!("{} — drag to resize", join(shape)),
        Some((r, c)) => {
            let mut v = vec![r, c];
            if shape.len() == 3 {
                v.insert(0, shape[0]);
            }
            format!("{} — release to set", join(&v))
        }
    }
}

/// Keyboard on the shape grid: the arrows move the corner the grid would set, Enter applies.
fn grid_keys(
    hover: UseStateHandle<Option<(usize, usize)>>,
    state: UseReducerHandle<super::app::State>,
    shape_for: std::rc::Rc<dyn Fn(usize, usize) -> Vec<usize>>,
    (rows, cols): (usize, usize),
) -> Callback<KeyboardEvent> {
    Callback::from(move |e: KeyboardEvent| {
        let (r, c) = hover.unwrap_or((rows, cols));
        let next = match e.key().as_str() {
            "ArrowRight" => Some((r, (c + 1).min(GRID))),
            "ArrowLeft" => Some((r, c.saturating_sub(1).max(1))),
            "ArrowDown" => Some(((r + 1).min(GRID), c)),
            "ArrowUp" => Some((r.saturating_sub(1).max(1), c)),
            "Enter" | " " => {
                state.dispatch(Action::SetMeshShape(shape_for(r, c)));
                hover.set(None);
                None
            }
            _ => return,
        };
        e.prevent_default();
        e.stop_propagation();
        if let Some(n) = next {
            hover.set(Some(n));
        }
    })
}
