//! The engine's side of the worker (`src/bin/engine.rs` calls [`serve`]): each message is a
//! [`Job`]; the answer is its progress replies, then its outcome. On a page (the
//! JavaScript API's `api.html` imports the same module) there is nothing to serve.

use crate::engine::{handle, Job, Outcome, Reply};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

/// Least time between two progress replies (ms): enough for a progress bar.
const PROGRESS_MS: f64 = 50.0;

/// Answers jobs posted to this worker.
pub fn serve() {
    let Ok(scope) = js_sys::global().dyn_into::<web_sys::DedicatedWorkerGlobalScope>() else {
        return;
    };
    let out = scope.clone();
    let on_message =
        Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |e: web_sys::MessageEvent| {
            let post = |r: &Reply| {
                if let Ok(v) = super::engine_link::to_js(r) {
                    let _ = out.post_message(&v);
                }
            };
            let job: Job = match super::engine_link::from_js(e.data()) {
                Ok(j) => j,
                Err(err) => {
                    // Without a job there is no id to answer; id 0 is never a job's.
                    return post(&Reply {
                        id: 0,
                        outcome: Outcome::Failed(format!("the engine got a bad job: {err}")),
                    });
                }
            };
            let mut last = f64::NEG_INFINITY;
            let outcome = handle(&job, &mut |done, total| {
                let now = js_sys::Date::now();
                if now - last >= PROGRESS_MS {
                    last = now;
                    post(&Reply {
                        id: job.id,
                        outcome: Outcome::Progress { done, total },
                    });
                }
            });
            post(&Reply {
                id: job.id,
                outcome,
            });
        });
    scope.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    // The worker lives as long as the page; so does its handler.
    on_message.forget();
    // The page queues jobs until now: a message that came before the handler was lost.
    let _ = scope.post_message(&JsValue::from_str(super::engine_link::READY));
}
