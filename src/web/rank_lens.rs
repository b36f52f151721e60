//! The rank lens: pick a device; see its parameters as tiles, and the ops inserted into its
//! program by purpose (click one to open it in the program and light its group on the mesh).

use super::app::AppCtx;
use super::program_view::purpose_class;
use super::tile_view::TileView;
use crate::ir::Purpose;
use crate::session::{Action, InsertedOp, Stage};
use web_sys::HtmlSelectElement;
use yew::prelude::*;

/// Parameters drawn at most.
const MAX_PARAMS: usize = 24;

/// The rank panel.
#[component]
pub fn RankLens() -> Html {
    let Some(ctx) = use_context::<AppCtx>() else {
        return html! {};
    };
    let s = ctx.session();
    let Some(mesh) = s.mesh().cloned() else {
        return html! {};
    };
    let Some(r) = s.rank_program() else {
        return html! {};
    };
    let onchange = ctx.on(|e: Event| {
        Action::SelectRank(
            e.target_dyn_into::<HtmlSelectElement>()
                .and_then(|x| x.value().parse().ok())
                .unwrap_or(0),
        )
    });
    let open = ctx.on(|_: MouseEvent| Action::SetStage(Stage::Partition));
    let inserted = s.inserted_ops();
    let groups = purpose_groups(&ctx, &inserted, s.focus_op);
    let n_inserted = inserted.len();
    // Each parameter's tiles at a readable size, coloured by device as on the mesh.
    let n_params = r
        .program
        .vars()
        .iter()
        .filter(|v| v.kind == crate::ir::VarKind::Parameter)
        .count();
    let params: Vec<Html> = r
        .program
        .vars()
        .iter()
        .filter(|v| v.kind == crate::ir::VarKind::Parameter)
        // A readable number of pictures: a 12-layer GPT has 150 parameters.
        .take(MAX_PARAMS)
        .filter_map(|v| {
            let (tiling, shape) = s.tiles_of(&v.name)?;
            let name = v.name.to_string();
            let onclick = ctx.on(move |_: MouseEvent| Action::SelectVar(Some(name.clone())));
            Some(html! {
                <li>
                    <button class="linkish param" {onclick} title="inspect this tensor">
                        <TileView {tiling} {shape} caption={AttrValue::from(format!("{} local {:?}", v.name, v.ty.shape))} mine={Some(r.rank)} size={96.0} />
                    </button>
                </li>
            })
        })
        .collect();
    html! {
        <section class="panel rank-lens">
            <h2>{ "Rank " }
                <select id="rank" aria-label="rank" {onchange}>
                    { for mesh.process_ids().iter().map(|&id| html! { <option value={id.to_string()} selected={id == s.selected_rank}>{ id }</option> }) }
                </select>
                <small>{ format!(" coordinates {:?}", mesh.coords_of(r.rank).unwrap_or_default()) }</small>
                <button class="small" onclick={open}>{ "open its program" }</button>
            </h2>
            <h3>{ format!("Inserted ops ({n_inserted}), by purpose") }</h3>
            if n_inserted == 0 { <p class="hint">{ "none: this rank computes alone" }</p> } else { { groups } }
            <h3>{ "Parameter shards (local of global)" }</h3>
            <ul class="shards">{ for params }</ul>
            if n_params > MAX_PARAMS { <p class="hint">{ format!("the first {MAX_PARAMS} of {n_params} parameters; click a tensor in the program to inspect any") }</p> }
        </section>
    }
}

/// Inserted ops (collectives and the 1/N scale) grouped by purpose, each group collapsed
/// with its count; clicking one opens the rank's program at it and lights its group.
fn purpose_groups(ctx: &AppCtx, inserted: &[InsertedOp], focus: Option<usize>) -> Html {
    // Inserted ops (collectives and the 1/N scale) grouped by purpose, each group collapsed
    // with its count; clicking one opens the rank's program at it and lights its group.
    Purpose::ALL.into_iter().filter_map(|purpose| {
        let ops: Vec<&InsertedOp> = inserted.iter().filter(|o| o.purpose == purpose).collect();
        if ops.is_empty() {
            return None;
        }
        let items = ops.iter().map(|o| {
            let i = o.op;
            let onclick = ctx.on(move |_: MouseEvent| Action::FocusOp(Some(i)));
            let focused = focus == Some(i);
            html! { <li><button class={classes!("linkish", purpose_class(purpose), focused.then_some("focused"))} {onclick} data-op={i.to_string()}>{ format!("op {i}: {}", o.label) }</button></li> }
        });
        Some(html! {
            <details class={classes!("comm-group", purpose_class(purpose))} data-purpose={purpose.name()}>
                <summary>{ format!("{} ({})", purpose.name(), ops.len()) }</summary>
                <ul class="comm-list">{ for items }</ul>
            </details>
        })
    }).collect::<Html>()
}
