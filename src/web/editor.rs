//! The plan editor: the text format, applied when it parses and verifies; errors shown at
//! their line and column. Typing is never blocked: the text is applied after a pause.

use super::app::AppCtx;
use crate::session::Action;
use std::cell::RefCell;
use std::rc::Rc;
use web_sys::HtmlTextAreaElement;
use yew::prelude::*;

/// The editor panel.
#[component]
pub fn Editor() -> Html {
    let Some(ctx) = use_context::<AppCtx>() else {
        return html! {};
    };
    let pending = use_mut_ref(|| None::<gloo::timers::callback::Timeout>);
    let s = ctx.session();
    let oninput = {
        let state = ctx.state.clone();
        let pending: Rc<RefCell<Option<gloo::timers::callback::Timeout>>> = pending.clone();
        Callback::from(move |e: InputEvent| {
            let Some(text) = e
                .target_dyn_into::<HtmlTextAreaElement>()
                .map(|t| t.value())
            else {
                return;
            };
            let state = state.clone();
            *pending.borrow_mut() = Some(gloo::timers::callback::Timeout::new(400, move || {
                state.dispatch(Action::EditText(text))
            }));
        })
    };
    html! {
        <section class="panel editor">
            <h2>{ "Plan text" }<small>{ " — edit the mesh, program or shard lines; applied when valid" }</small></h2>
            <textarea id="plan-text" spellcheck="false" value={s.text.clone()} {oninput} rows="14" />
            if !s.text_errors.is_empty() {
                <ul class="errors">
                    { for s.text_errors.iter().map(|(l, c, m)| html! { <li>{ format!("{l}:{c}: {m}") }</li> }) }
                </ul>
            }
        </section>
    }
}
