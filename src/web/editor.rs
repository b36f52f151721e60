//! The plan editor: the text format, applied when it parses and verifies; errors shown at
//! their line and column, both in a list and marked in the text itself (a backdrop behind a
//! transparent textarea, scrolled with it). Typing is never blocked: the text is applied
//! after a pause.

use super::app::AppCtx;
use crate::session::Action;
use std::cell::RefCell;
use std::rc::Rc;
use web_sys::HtmlTextAreaElement;
use yew::prelude::*;

/// One piece of a line of the backdrop: text, and the error message if it is marked.
#[derive(Debug, PartialEq)]
pub struct Segment {
    pub text: String,
    pub error: Option<String>,
}

/// Splits `text` into lines of segments, marking for each error the token that starts at its
/// line and column (1-based, in characters); an error past the end of its line marks a
/// single space there. Errors on lines that do not exist mark the last line.
pub fn mark_errors(text: &str, errors: &[(usize, usize, String)]) -> Vec<Vec<Segment>> {
    let lines: Vec<&str> = text.split('\n').collect();
    let mut out = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        let here: Vec<&(usize, usize, String)> = errors
            .iter()
            .filter(|e| e.0 == i + 1 || (i + 1 == lines.len() && e.0 > lines.len()))
            .collect();
        let chars: Vec<char> = line.chars().collect();
        let mut segments = Vec::new();
        let mut at = 0;
        let mut marks: Vec<(usize, usize, &str)> = here
            .iter()
            .map(|e| {
                let start = e.1.saturating_sub(1).min(chars.len());
                let end = (start..chars.len())
                    .find(|&j| chars[j].is_whitespace())
                    .unwrap_or(chars.len())
                    .max(start);
                (start, end, e.2.as_str())
            })
            .collect();
        crate::sort::sort_by_key(&mut marks, |m| m.0);
        for (start, end, message) in marks {
            if start < at {
                continue; // two errors at one place: the first one marks it
            }
            let plain: String = chars[at..start].iter().collect();
            if !plain.is_empty() {
                segments.push(Segment {
                    text: plain,
                    error: None,
                });
            }
            let marked: String = if end > start {
                chars[start..end].iter().collect()
            } else {
                " ".into()
            };
            segments.push(Segment {
                text: marked,
                error: Some(message.to_string()),
            });
            at = end;
        }
        let rest: String = chars[at.min(chars.len())..].iter().collect();
        if !rest.is_empty() {
            segments.push(Segment {
                text: rest,
                error: None,
            });
        }
        out.push(segments);
    }
    out
}

/// The textarea offset (UTF-16 code units, as the DOM counts) of 1-based `line` and `col`
/// (in characters), clamped to the text.
pub fn utf16_offset(text: &str, line: usize, col: usize) -> u32 {
    let mut offset = 0usize;
    for (i, l) in text.split('\n').enumerate() {
        if i + 1 == line {
            let within: usize = l
                .chars()
                .take(col.saturating_sub(1))
                .map(char::len_utf16)
                .sum();
            return (offset + within) as u32;
        }
        offset += l.encode_utf16().count() + 1;
    }
    text.encode_utf16().count() as u32
}

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
    let backdrop = use_node_ref();
    let textarea = use_node_ref();
    let onscroll = {
        let backdrop = backdrop.clone();
        Callback::from(move |e: Event| {
            if let (Some(t), Some(b)) = (
                e.target_dyn_into::<HtmlTextAreaElement>(),
                backdrop.cast::<web_sys::Element>(),
            ) {
                b.set_scroll_top(t.scroll_top());
                b.set_scroll_left(t.scroll_left());
            }
        })
    };
    let lines = mark_errors(&s.text, &s.text_errors);
    let marked = lines.iter().map(|segments| {
        html! { <>{ for segments.iter().map(|seg| match &seg.error {
            Some(m) => html! { <mark class="err" title={m.clone()}>{ seg.text.clone() }</mark> },
            None => html! { { seg.text.clone() } },
        }) }{ "\n" }</> }
    });
    html! {
        <section class="panel editor">
            <h2>{ "Plan text" }<small>{ " — edit the mesh, program or shard lines; applied when valid" }</small></h2>
            <div class="code-wrap">
                <pre class="code-backdrop" aria-hidden="true" ref={backdrop}>{ for marked }</pre>
                <textarea id="plan-text" aria-label="plan text" ref={textarea.clone()} spellcheck="false" wrap="off" value={s.text.clone()} {oninput} {onscroll} rows="14" />
            </div>
            if !s.text_errors.is_empty() {
                <ul class="errors">
                    { for s.text_errors.iter().map(|(l, c, m)| {
                        // Clicking an error puts the caret at its line and column.
                        let (text, textarea, line, col) = (s.text.clone(), textarea.clone(), *l, *c);
                        let onclick = Callback::from(move |_: MouseEvent| {
                            if let Some(t) = textarea.cast::<HtmlTextAreaElement>() {
                                let at = utf16_offset(&text, line, col);
                                let _ = t.focus();
                                let _ = t.set_selection_range(at, at);
                            }
                        });
                        html! { <li {onclick} title="go to this place in the text">{ format!("{l}:{c}: {m}") }</li> }
                    }) }
                </ul>
            }
        </section>
    }
}
