//! The ledger: collectives per phase and purpose with bytes per rank (ring model) and
//! totals, memory per rank, and the Megatron reference counts.

use super::app::AppCtx;
use crate::ir::VarKind;
use crate::passes::ledger::Purpose;
use crate::session::Action;
use yew::prelude::*;

/// Bytes in the largest binary unit that keeps a whole number in front (GiB at real sizes).
pub(super) fn bytes(b: f64) -> String {
    if b >= 1073741824.0 {
        format!("{:.1} GiB", b / 1073741824.0)
    } else if b >= 1048576.0 {
        format!("{:.1} MiB", b / 1048576.0)
    } else if b >= 1024.0 {
        format!("{:.1} KiB", b / 1024.0)
    } else {
        format!("{b:.0} B")
    }
}

/// The ledger panel.
#[component]
pub fn LedgerView() -> Html {
    let Some(ctx) = use_context::<AppCtx>() else {
        return html! {};
    };
    let s = ctx.session();
    let Some(p) = s.pipeline.clone() else {
        return html! {};
    };
    let rank = s.selected_rank;
    let rows = crate::passes::ledger::summary_rows(&p.ledger, rank);
    let total: f64 = rows.iter().map(|r| r.4).sum();
    let megatron = {
        let on = !s.megatron_sums;
        ctx.on(move |_: Event| Action::SetMegatronSums(on))
    };
    let count = |phase: &str| {
        p.ledger
            .iter()
            .filter(|e| e.rank == rank && e.phase == phase && e.purpose == Purpose::TensorParallel)
            .count()
    };
    let layers = s
        .plan
        .program
        .vars()
        .iter()
        .filter(|v| v.name.ends_with(".attn.o.w"))
        .count();
    let note = if layers > 0 {
        format!(
            "Tensor-parallel all-reduces: {} forward, {} backward for {layers} transformer layer(s). Megatron's reference is 2 + 2 per layer; Paddle's planner inserts one backward all-reduce per column-parallel matmul (4 per layer).",
            count("forward"),
            count("backward")
        )
    } else {
        format!("Tensor-parallel all-reduces: {} forward, {} backward. A Megatron MLP (column then row) needs 1 + 1; the backward one completes the input's gradient, so none is needed when the input is data.", count("forward"), count("backward"))
    };
    let r = p.partitioned.ranks.iter().find(|r| r.rank == rank);
    let memory = |kinds: &[VarKind]| -> f64 {
        r.map_or(0.0, |r| {
            r.program
                .vars()
                .iter()
                .filter(|v| kinds.contains(&v.kind))
                .map(|v| v.ty.bytes() as f64)
                .sum()
        })
    };
    html! {
        <section class="panel ledger">
            <h2>{ format!("Communication of rank {rank}") }</h2>
            <table class="ledger-table">
                <thead><tr><th>{ "phase" }</th><th>{ "purpose" }</th><th>{ "collective" }</th><th>{ "count" }</th><th>{ "bytes sent" }</th></tr></thead>
                <tbody>
                    { for rows.iter().map(|(phase, purpose, kind, n, b)| html! {
                        <tr class={classes!(format!("purpose-{purpose:?}"))}><td>{ *phase }</td><td>{ purpose.name() }</td><td>{ *kind }</td><td>{ n }</td><td>{ bytes(*b) }</td></tr>
                    }) }
                    <tr class="total"><td colspan="3">{ "total" }</td><td>{ rows.iter().map(|r| r.3).sum::<usize>() }</td><td>{ bytes(total) }</td></tr>
                </tbody>
            </table>
            <p class="note">{ note }</p>
            <label class="toggle" title="keep the q/k/v input gradients partial through their sum and all-reduce it once (Megatron), instead of once per column-parallel matmul (Paddle)">
                <input type="checkbox" id="megatron-sums" checked={s.megatron_sums} onchange={megatron} />
                { " Megatron sums (2 backward all-reduces per layer)" }
            </label>
            <h3>{ "Memory of rank " }{ rank }</h3>
            <table class="memory">
                <tr><td>{ "parameters" }</td><td>{ bytes(memory(&[VarKind::Parameter])) }</td></tr>
                <tr><td>{ "gradients" }</td><td>{ bytes(memory(&[VarKind::Gradient])) }</td></tr>
                <tr><td>{ "optimizer state" }</td><td>{ bytes(memory(&[VarKind::OptimizerState])) }</td></tr>
                <tr><td>{ "activations" }</td><td>{ bytes(memory(&[VarKind::Activation, VarKind::Input, VarKind::Label])) }</td></tr>
            </table>
        </section>
    }
}
