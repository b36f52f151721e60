//! The rank lens: pick a device; see its local shapes, the communication it takes part in,
//! and its groups (lit on the mesh in the mesh panel).

use super::app::AppCtx;
use super::inspector::block_owners;
use super::program_view::scope_class;
use crate::ir::OpClass;
use crate::session::{Action, Stage};
use web_sys::HtmlSelectElement;
use yew::prelude::*;

/// The rank panel.
#[component]
pub fn RankLens() -> Html {
    let Some(ctx) = use_context::<AppCtx>() else {
        return html! {};
    };
    let s = ctx.session();
    let (Some(p), Some(mesh)) = (s.pipeline.clone(), s.mesh().cloned()) else {
        return html! {};
    };
    let Some(r) = p
        .partitioned
        .ranks
        .iter()
        .find(|r| r.rank == s.selected_rank)
    else {
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
    let comm: Vec<Html> = r
        .program
        .ops()
        .iter()
        .filter(|o| o.ty.class() == OpClass::Collective)
        .map(|o| {
            let x = o.input("X").first().map(|&v| r.program.var(v).name.to_string()).unwrap_or_default();
            let group = o.attr_ints("group").map(|g| format!("{g:?}")).unwrap_or_default();
            let reduce = o.attr_str("reduce_type").map(|t| format!(" {t}")).unwrap_or_default();
            html! { <li class={scope_class(o)}>{ format!("{}{reduce} {x} over {group}", o.ty.name()) }<small>{ format!(" {}", o.role.name()) }</small></li> }
        })
        .collect();
    // Each parameter's blocks drawn on its grid (dims 0 and 1), this rank's block filled:
    // which device holds which block, as JAX's visualize_array_sharding draws it.
    let params: Vec<Html> = r
        .program
        .vars()
        .iter()
        .zip(p.full.program.vars().iter().zip(&p.full.tensors))
        .filter(|(v, _)| v.kind == crate::ir::VarKind::Parameter)
        .map(|(v, (global, attr))| {
            let blocks = block_owners(attr, &p.full.mesh);
            let cols = blocks.first().map_or(1, Vec::len).max(1);
            let cells = blocks.iter().flatten().map(|devs| {
                let mine = devs.contains(&r.rank);
                let title = format!("devices {devs:?}");
                html! { <span class={classes!("cell", mine.then_some("mine"))} {title}></span> }
            });
            let style = format!("grid-template-columns: repeat({cols}, 9px)");
            let name = v.name.to_string();
            let onclick = ctx.on(move |_: MouseEvent| Action::SelectVar(Some(name.clone())));
            html! {
                <li {onclick} title="inspect this tensor">
                    <span class="mini-grid" {style}>{ for cells }</span>
                    { format!("{} {:?} of {:?}", v.name, v.ty.shape, global.ty.shape) }
                </li>
            }
        })
        .collect();
    html! {
        <section class="panel rank-lens">
            <h2>{ "Rank " }
                <select id="rank" {onchange}>
                    { for mesh.process_ids().iter().map(|&id| html! { <option value={id.to_string()} selected={id == s.selected_rank}>{ id }</option> }) }
                </select>
                <small>{ format!(" coordinates {:?}", mesh.coords_of(r.rank).unwrap_or_default()) }</small>
                <button class="small" onclick={open}>{ "open its program" }</button>
            </h2>
            <h3>{ format!("Communication ({})", comm.len()) }</h3>
            if comm.is_empty() { <p class="hint">{ "none: this rank computes alone" }</p> } else { <ul class="comm-list">{ for comm }</ul> }
            <h3>{ "Parameter shards (local of global)" }</h3>
            <ul class="shards">{ for params }</ul>
        </section>
    }
}
