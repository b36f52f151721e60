//! The engine's side of the worker (`src/bin/engine.rs` calls [`serve`]): each message is a
//! [`Request`], a job or the cancellation of one, kept in an [`engine::Queue`]; the answers
//! are each job's progress replies, then its outcome. The queue is worked in slices of
//! about [`SLICE_MS`], each woken by a message to itself (a `MessageChannel`: no timer
//! clamping), so the requests that come meanwhile are taken between slices: a job behind a
//! search is answered between its steps, and a cancelled search stops. On a page (the
//! JavaScript API's `api.html` imports the same module) there is nothing to serve.
//!
//! [`engine::Queue`]: crate::engine::Queue

use crate::engine::{Outcome, Queue, Reply, Request};
use std::cell::RefCell;
use std::rc::Rc;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

/// Least time between two progress replies (ms): enough for a progress bar.
const PROGRESS_MS: f64 = 50.0;

/// Most time a slice of work takes before the worker takes new requests (ms): a search's
/// step can take longer; a slice ends after it.
const SLICE_MS: f64 = 30.0;

/// The worker's state between messages.
struct Worker {
    queue: Queue,
    /// Whether a slice is due (a wake-up message is on its way).
    due: bool,
    /// When progress was last posted.
    last_progress: f64,
    scope: web_sys::DedicatedWorkerGlobalScope,
    /// Posting to it wakes the worker for the next slice.
    wake: web_sys::MessagePort,
}

/// Answers requests posted to this worker.
pub fn serve() {
    let Ok(scope) = js_sys::global().dyn_into::<web_sys::DedicatedWorkerGlobalScope>() else {
        return;
    };
    let Ok(channel) = web_sys::MessageChannel::new() else {
        return;
    };
    let worker = Rc::new(RefCell::new(Worker {
        queue: Queue::default(),
        due: false,
        last_progress: f64::NEG_INFINITY,
        scope: scope.clone(),
        wake: channel.port2(),
    }));
    let w = worker.clone();
    let on_wake = Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |_| slice(&w));
    channel
        .port1()
        .set_onmessage(Some(on_wake.as_ref().unchecked_ref()));
    let on_message =
        Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |e: web_sys::MessageEvent| {
            match super::engine_link::from_js::<Request>(e.data()) {
                Ok(r) => worker.borrow_mut().queue.push(r),
                // Without a job there is no id to answer; id 0 is never a job's.
                Err(err) => post(
                    &worker.borrow().scope,
                    &Reply {
                        id: 0,
                        outcome: Outcome::Failed(format!("the engine got a bad request: {err}")),
                    },
                ),
            }
            wake(&mut worker.borrow_mut());
        });
    scope.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    // The worker lives as long as the page; so do its handlers.
    on_message.forget();
    on_wake.forget();
    // The page queues requests until now: a message that came before the handler was lost.
    let _ = scope.post_message(&JsValue::from_str(super::engine_link::READY));
}

/// Asks for a slice unless one is due or there is nothing to do.
fn wake(w: &mut Worker) {
    if !w.due && !w.queue.is_idle() {
        w.due = w.wake.post_message(&JsValue::NULL).is_ok();
    }
}

/// Works the queue for about [`SLICE_MS`], posting its replies (progress at most every
/// [`PROGRESS_MS`]), then asks for the next slice if work is left.
fn slice(worker: &Rc<RefCell<Worker>>) {
    let start = js_sys::Date::now();
    let mut w = worker.borrow_mut();
    w.due = false;
    while let Some(reply) = w.queue.work() {
        let now = js_sys::Date::now();
        if !reply.outcome.is_progress() || now - w.last_progress >= PROGRESS_MS {
            if reply.outcome.is_progress() {
                w.last_progress = now;
            }
            post(&w.scope, &reply);
        }
        if now - start >= SLICE_MS {
            break;
        }
    }
    wake(&mut w);
}

fn post(scope: &web_sys::DedicatedWorkerGlobalScope, reply: &Reply) {
    if let Ok(v) = super::engine_link::to_js(reply) {
        let _ = scope.post_message(&v);
    }
}
