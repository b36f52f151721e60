//! `shardlab-engine`: the playground's engine as its own wasm module (`crate::engine`).
//! The page runs it in a Web Worker for Run, break-it, a collective's values, export and
//! the auto-planner, so the page's module carries none of them. It is also the JavaScript
//! API's module (`www/api.html`): `plan`, `export_jax`, `import_model`, `suggest` and `SuggestSearch`
//! and the benchmark hooks are exported here. Natively there is nothing to run: the command-line tool is `shardlab`.

#[cfg(target_arch = "wasm32")]
mod api {
    use wasm_bindgen::prelude::*;

    /// Plans a request (see `www/api.html`).
    #[wasm_bindgen]
    pub fn plan(request: JsValue) -> Result<JsValue, JsValue> {
        shardlab::web::plan(request)
    }

    /// The plan as a JAX script.
    #[wasm_bindgen]
    pub fn export_jax(request: JsValue) -> Result<String, JsValue> {
        shardlab::web::export_jax(request)
    }

    /// An ONNX model's bytes as a plan's text: `{text, summary}` (see `www/api.html`).
    #[wasm_bindgen]
    pub fn import_model(bytes: &[u8], request: JsValue) -> Result<JsValue, JsValue> {
        shardlab::web::import_model(bytes, request)
    }

    /// Runs the auto-planner to the end (blocking: prefer `SuggestSearch` for large ones).
    #[wasm_bindgen]
    pub fn suggest(request: JsValue) -> Result<JsValue, JsValue> {
        shardlab::web::suggest(request)
    }

    /// A benchmark hook (`tests/e2e/bench_replan.mjs`): the re-planning the playground does
    /// after an edit, timed (the page's module plans with the same code).
    #[wasm_bindgen]
    pub fn bench_replan(text: &str, repeat: u32) -> Result<JsValue, JsValue> {
        shardlab::web::bench_replan(text, repeat)
    }

    /// A benchmark hook (`tests/e2e/bench_suggest.mjs`).
    #[wasm_bindgen]
    pub fn bench_cost(text: &str, topology: &str, repeat: u32) -> Result<f64, JsValue> {
        shardlab::web::bench_cost(text, topology, repeat)
    }

    /// The auto-planner a step at a time: `step()` returns `undefined` until the answer.
    #[wasm_bindgen]
    pub struct SuggestSearch(shardlab::web::SuggestSearch);

    #[wasm_bindgen]
    impl SuggestSearch {
        #[wasm_bindgen(constructor)]
        pub fn new(request: JsValue) -> Result<SuggestSearch, JsValue> {
            shardlab::web::SuggestSearch::new(request).map(SuggestSearch)
        }

        /// Screens the next family (or finishes): the answer when done, else `undefined`.
        pub fn step(&mut self) -> Result<Option<JsValue>, JsValue> {
            self.0.step()
        }

        /// `[done, total]` work units.
        pub fn progress(&self) -> Vec<u32> {
            self.0.progress()
        }
    }
}

#[cfg(target_arch = "wasm32")]
fn main() {
    shardlab::web::worker::serve();
}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    eprintln!("shardlab-engine is the playground's web worker (wasm32 only); the command-line tool is `shardlab`");
    std::process::exit(2);
}
