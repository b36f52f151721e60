//! The page's handle on the engine (`crate::engine`): a Web Worker running the engine's
//! own wasm module (`shardlab-engine`, which Trunk builds beside the page's), or, in the
//! browser tests, the engine in-process. Jobs and replies cross as bytes
//! (`crate::engine::codec`); the in-process link sends them through the same codec.

use crate::engine::{Job, Outcome, Reply, Request, Task};
use std::cell::RefCell;
use std::rc::{Rc, Weak};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use yew::Callback;

/// Where the worker's loader is, beside the page (Trunk's `data-loader-shim`).
pub const WORKER_URL: &str = "./shardlab-engine_loader.js";

/// The engine in-process: `crate::engine::handle`.
pub type Handler = fn(&Job, &mut dyn FnMut(usize, usize)) -> Outcome;

/// A cheap, shared handle; equal when it is the same engine.
#[derive(Clone)]
pub struct EngineLink(Rc<Inner>);

impl PartialEq for EngineLink {
    fn eq(&self, other: &Self) -> bool {
        Rc::ptr_eq(&self.0, &other.0)
    }
}

struct Inner {
    kind: Kind,
    /// Who waits for which job's replies.
    waiting: RefCell<Vec<(u64, Callback<Outcome>)>>,
}

/// Runs a job in-process, delivering its replies. A closure made by
/// [`EngineLink::in_process`], so the page's module (which never makes one) links neither
/// the engine nor the job's decoder.
type Local = Rc<dyn Fn(&Weak<Inner>, &Job)>;

enum Kind {
    /// Spawned on first use (or `warm`); dropped after an error, so the next job respawns.
    Worker(RefCell<Option<Spawned>>),
    InProcess(Local),
}

struct Spawned {
    worker: web_sys::Worker,
    /// Jobs posted before the worker said it is ready. A worker loads its wasm
    /// asynchronously, and a message that arrives before it listens is lost.
    queue: Option<Vec<JsValue>>,
    _on_message: Closure<dyn FnMut(web_sys::MessageEvent)>,
    _on_error: Closure<dyn FnMut(web_sys::Event)>,
}

/// `v` as a message: its bytes (`crate::engine::codec`) in a `Uint8Array`.
pub fn to_js<T: serde::Serialize>(v: &T) -> Result<JsValue, String> {
    let bytes = crate::engine::codec::encode(v).map_err(|e| e.to_string())?;
    Ok(js_sys::Uint8Array::from(bytes.as_slice()).into())
}

/// The value a message's bytes encode.
pub fn from_js<T: serde::de::DeserializeOwned>(v: JsValue) -> Result<T, String> {
    let bytes = v
        .dyn_into::<js_sys::Uint8Array>()
        .map_err(|_| "the message is not bytes".to_string())?
        .to_vec();
    crate::engine::codec::decode(&bytes).map_err(|e| e.to_string())
}

impl EngineLink {
    /// The engine in its Web Worker (the playground).
    pub fn worker() -> EngineLink {
        EngineLink(Rc::new(Inner {
            kind: Kind::Worker(RefCell::new(None)),
            waiting: RefCell::new(Vec::new()),
        }))
    }

    /// The engine in-process (the browser tests): each job runs on a zero-delay timer,
    /// its job and replies through the worker's codec.
    pub fn in_process(handler: Handler) -> EngineLink {
        EngineLink::in_process_after(handler, 0)
    }

    /// The engine in-process, each job `delay_ms` after it is sent (a slow engine, for
    /// tests of what the page does meanwhile).
    pub fn in_process_after(handler: Handler, delay_ms: u32) -> EngineLink {
        let local: Local = Rc::new(move |inner, job| {
            let (inner, job) = (inner.clone(), job.clone());
            gloo::timers::callback::Timeout::new(delay_ms, move || {
                in_process(&inner, handler, &job)
            })
            .forget();
        });
        EngineLink(Rc::new(Inner {
            kind: Kind::InProcess(local),
            waiting: RefCell::new(Vec::new()),
        }))
    }

    /// Starts the worker loading, so the first job does not wait for it.
    pub fn warm(&self) {
        if let Kind::Worker(slot) = &self.0.kind {
            if let Err(e) = spawn_into(&self.0, slot) {
                web_sys::console::warn_1(&JsValue::from_str(&e));
            }
        }
    }

    /// Sends `job`; `on` gets its progress replies, then its outcome.
    pub fn send(&self, job: Job, on: Callback<Outcome>) {
        self.0.waiting.borrow_mut().push((job.id, on));
        match &self.0.kind {
            Kind::Worker(slot) => {
                let id = job.id;
                let posted =
                    spawn_into(&self.0, slot).and_then(|()| post(slot, &Request::Job(job)));
                if let Err(e) = posted {
                    deliver(
                        &self.0,
                        id,
                        Outcome::Failed(format!("the engine failed: {e}")),
                    );
                }
            }
            Kind::InProcess(local) => local(&Rc::downgrade(&self.0), &job),
        }
    }

    /// Stops waiting for job `id`, and tells the worker, which drops it whether it waits
    /// or its search is under way (a new search supersedes the last).
    pub fn cancel(&self, id: u64) {
        self.0.waiting.borrow_mut().retain(|(j, _)| *j != id);
        if let Kind::Worker(slot) = &self.0.kind {
            if slot.borrow().is_some() {
                if let Err(e) = post(slot, &Request::Cancel(id)) {
                    web_sys::console::warn_1(&JsValue::from_str(&e));
                }
            }
        }
    }
}

/// Posts `request` to the worker, or queues it until the worker listens (in order).
fn post(slot: &RefCell<Option<Spawned>>, request: &Request) -> Result<(), String> {
    let js = to_js(request)?;
    match slot.borrow_mut().as_mut() {
        Some(Spawned { queue: Some(q), .. }) => {
            q.push(js);
            Ok(())
        }
        Some(s) => s.worker.post_message(&js).map_err(|e| format!("{e:?}")),
        None => Err("the engine is not running".into()),
    }
}

/// Runs `job` in-process through the codec, delivering its replies.
fn in_process(inner: &Weak<Inner>, handler: Handler, job: &Job) {
    let through = |r: Reply| -> Reply {
        to_js(&r).and_then(from_js).unwrap_or_else(|e| Reply {
            id: r.id,
            outcome: Outcome::Failed(format!("the engine's reply did not cross: {e}")),
        })
    };
    let job: Job = match to_js(job).and_then(from_js) {
        Ok(j) => j,
        Err(e) => {
            if let Some(inner) = inner.upgrade() {
                deliver(
                    &inner,
                    job.id,
                    Outcome::Failed(format!("the job did not cross: {e}")),
                );
            }
            return;
        }
    };
    let id = job.id;
    let outcome = handler(&job, &mut |done, total| {
        if let Some(inner) = inner.upgrade() {
            let r = through(Reply {
                id,
                outcome: Outcome::Progress { done, total },
            });
            deliver(&inner, r.id, r.outcome);
        }
    });
    if let Some(inner) = inner.upgrade() {
        let r = through(Reply { id, outcome });
        deliver(&inner, r.id, r.outcome);
    }
}

/// Hands `outcome` to whoever waits for job `id` (and stops waiting unless it is progress).
fn deliver(inner: &Inner, id: u64, outcome: Outcome) {
    let on = {
        let mut waiting = inner.waiting.borrow_mut();
        let Some(at) = waiting.iter().position(|(j, _)| *j == id) else {
            return;
        };
        if outcome.is_progress() {
            waiting[at].1.clone()
        } else {
            waiting.remove(at).1
        }
    };
    on.emit(outcome);
}

/// Spawns the worker into `slot` unless it runs.
fn spawn_into(inner: &Rc<Inner>, slot: &RefCell<Option<Spawned>>) -> Result<(), String> {
    if slot.borrow().is_some() {
        return Ok(());
    }
    let opts = web_sys::WorkerOptions::new();
    opts.set_type(web_sys::WorkerType::Module);
    let worker = web_sys::Worker::new_with_options(WORKER_URL, &opts)
        .map_err(|e| format!("the engine's worker did not start: {e:?}"))?;
    let weak = Rc::downgrade(inner);
    let on_message =
        Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |e: web_sys::MessageEvent| {
            let Some(inner) = weak.upgrade() else {
                return;
            };
            if e.data().as_string().as_deref() == Some(READY) {
                return ready(&inner);
            }
            match from_js::<Reply>(e.data()) {
                Ok(r) => deliver(&inner, r.id, r.outcome),
                Err(err) => fail_all(&inner, &format!("the engine's reply did not parse: {err}")),
            }
        });
    let weak = Rc::downgrade(inner);
    let on_error = Closure::<dyn FnMut(web_sys::Event)>::new(move |e: web_sys::Event| {
        let Some(inner) = weak.upgrade() else {
            return;
        };
        let why = e
            .dyn_ref::<web_sys::ErrorEvent>()
            .map_or_else(|| "it did not load".to_string(), |e| e.message());
        if let Kind::Worker(slot) = &inner.kind {
            if let Some(s) = slot.borrow_mut().take() {
                s.worker.terminate();
            }
        }
        fail_all(&inner, &format!("the engine failed: {why}"));
    });
    worker.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    worker.set_onerror(Some(on_error.as_ref().unchecked_ref()));
    *slot.borrow_mut() = Some(Spawned {
        worker,
        queue: Some(Vec::new()),
        _on_message: on_message,
        _on_error: on_error,
    });
    Ok(())
}

/// What the worker posts once it listens (`super::worker::serve`).
pub const READY: &str = "ready";

/// The worker listens: post the jobs queued until now.
fn ready(inner: &Inner) {
    let Kind::Worker(slot) = &inner.kind else {
        return;
    };
    let mut failed = None;
    if let Some(s) = slot.borrow_mut().as_mut() {
        for js in s.queue.take().unwrap_or_default() {
            if let Err(e) = s.worker.post_message(&js) {
                failed = Some(format!("the engine failed: {e:?}"));
            }
        }
    }
    if let Some(why) = failed {
        fail_all(inner, &why);
    }
}

/// Every waiting job fails with `why`.
fn fail_all(inner: &Inner, why: &str) {
    let waiting: Vec<_> = inner.waiting.borrow_mut().drain(..).collect();
    for (_, on) in waiting {
        on.emit(Outcome::Failed(why.to_string()));
    }
}

/// A panel's asks: whether one is at the engine, and the newest made meanwhile.
#[derive(Default)]
struct Asks {
    busy: bool,
    next: Option<(yew::UseReducerHandle<super::app::State>, Task)>,
}

/// What an ask needs: the engine, where the answer goes, and the panel's asks.
#[derive(Clone)]
struct Asker {
    engine: EngineLink,
    out: yew::UseStateHandle<Option<Rc<Outcome>>>,
    /// The job whose answer is shown (0: none; a superseded job's answer is dropped).
    latest: Rc<RefCell<u64>>,
    asks: Rc<RefCell<Asks>>,
}

impl Asker {
    /// Sends `task` on `state`'s session; when it is answered, sends the newest ask made
    /// meanwhile, if any. So a panel has at most one job at the engine, and a burst of
    /// changes (a mesh dragged through sizes) costs two jobs, not one per change.
    fn ask(self, state: yew::UseReducerHandle<super::app::State>, task: Task) {
        let job = state.0.job(task);
        let id = job.id;
        *self.latest.borrow_mut() = id;
        self.asks.borrow_mut().busy = true;
        let engine = self.engine.clone();
        engine.send(
            job,
            Callback::from(move |o: Outcome| {
                if o.is_progress() {
                    return;
                }
                if *self.latest.borrow() == id {
                    self.out.set(Some(Rc::new(o)));
                }
                let next = {
                    let mut asks = self.asks.borrow_mut();
                    asks.busy = false;
                    asks.next.take()
                };
                if let Some((state, task)) = next {
                    self.clone().ask(state, task);
                }
            }),
        );
    }
}

/// The engine's answer to `task` on the current session, asked again whenever `key`
/// changes (`None` while it works), shared rather than copied (a deep copy of every kind of
/// answer would be code the page downloads for nothing). A panel's figures that are derived from the plan (the
/// cost panel's, the Gantt chart's) come this way.
#[yew::hook]
pub fn use_engine_answer<K: PartialEq + 'static>(
    ctx: &super::app::AppCtx,
    key: K,
    task: Task,
) -> Option<Rc<Outcome>> {
    let answer = yew::use_state(|| None::<Rc<Outcome>>);
    let latest = yew::use_mut_ref(|| 0u64);
    let asks = yew::use_mut_ref(Asks::default);
    let asker = Asker {
        engine: ctx.engine.clone(),
        out: answer.clone(),
        latest,
        asks,
    };
    let state = ctx.state.clone();
    yew::use_effect_with(key, move |_| {
        asker.out.set(None);
        let busy = asker.asks.borrow().busy;
        if busy {
            // The job at the engine is about an older plan: drop its answer, ask again
            // when it is done.
            *asker.latest.borrow_mut() = 0;
            asker.asks.borrow_mut().next = Some((state, task));
        } else {
            asker.ask(state, task);
        }
    });
    (*answer).clone()
}
