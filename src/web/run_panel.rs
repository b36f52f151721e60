//! Run: two training steps serially and on every rank (stepped cooperatively in the engine's worker),
//! the losses, and the per-tensor verification table.

use super::app::AppCtx;
use crate::engine::Task;
use crate::session::Action;
use yew::prelude::*;

/// The run panel.
#[component]
pub fn RunPanel() -> Html {
    let Some(ctx) = use_context::<AppCtx>() else {
        return html! {};
    };
    let s = ctx.session();
    let onclick = ctx.on(|_: MouseEvent| Action::Run);
    let result = s.run.as_ref().map(|r| {
        let passed = r.checks.iter().filter(|c| c.pass).count();
        html! {
            <>
                <table class="losses">
                    <tr><th>{ "step" }</th><th>{ "serial loss" }</th><th>{ "all ranks" }</th></tr>
                    { for r.serial_losses.iter().zip(&r.dist_losses).enumerate().map(|(i, (a, b))| html! {
                        <tr><td>{ i + 1 }</td><td>{ format!("{a:.7}") }</td><td>{ format!("{b:.7}") }</td></tr>
                    }) }
                </table>
                { twin_note(&r.shrunk) }
                <p class={classes!("verdict", if passed == r.checks.len() { "pass" } else { "fail" })}>
                    { format!("{passed} of {} tensors match the serial run", r.checks.len()) }
                </p>
                <table class="checks">
                    <tr><th>{ "tensor" }</th><th>{ "max |diff|" }</th><th>{ "tolerance" }</th><th title="every replica's copy is compared">{ "copies" }</th><th title="the largest difference between two copies: replicas must be identical">{ "replica diff" }</th><th></th></tr>
                    { for r.checks.iter().map(|c| if let Some(note) = &c.note { html! {
                        <tr class={classes!(if c.pass { "pass" } else { "fail" })}>
                            <td>{ c.tensor.clone() }</td><td colspan="4">{ note.clone() }</td><td>{ if c.pass { "✓" } else { "✗" } }</td>
                        </tr>
                    } } else { html! {
                        <tr class={classes!(if c.pass { "pass" } else { "fail" })}>
                            <td>{ c.tensor.clone() }</td><td>{ format!("{:.2e}", c.max_abs_diff) }</td><td>{ format!("{:.2e}", c.tolerance) }</td><td>{ c.copies }</td><td>{ format!("{:.2e}", c.replica_diff) }</td><td>{ if c.pass { "✓" } else { "✗" } }</td>
                        </tr>
                    } }) }
                </table>
            </>
        }
    });
    html! {
        <section class="panel run-panel">
            <h2>{ "Run" }<button id="run" class="small primary" {onclick}>{ "Run 2 steps" }</button></h2>
            <p class="hint">{ "Executes the serial program and every rank's program (ranks stepped in turn, real collectives, computed in f64) and compares them: every copy within its tolerance of the serial value, and replicas identical." }</p>
            if matches!(s.waiting_for(), Some(Task::Run)) {
                <p class="hint waiting" role="status">{ "Running every rank…" }</p>
            }
            { result }
        </section>
    }
}

/// The sentence saying a published model's shrunk twin ran in its place (nothing when the
/// plan ran at its own size).
pub(super) fn twin_note(shrunk: &[String]) -> Html {
    match crate::models::twin::describe(shrunk) {
        Some(note) => {
            // The note is ASCII at its start ("executed ...").
            let (first, rest) = note.split_at(1);
            html! { <p class="hint twin-note">{ format!("{}{rest}.", first.to_ascii_uppercase()) }</p> }
        }
        None => html! {},
    }
}
