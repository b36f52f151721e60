//! The import box: open a model file (ONNX) with the file picker or by dropping it on the
//! page, as Netron does. The page only reads the file's bytes; the engine's worker imports
//! and plans them (`crate::engine::import_model`), so the page's module carries neither the
//! ONNX decoder nor the strategy's patterns.

use super::app::AppCtx;
use crate::protocol::ImportFile;
use crate::session::Action;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use yew::prelude::*;

/// The strategy an import is planned under until the user says otherwise.
const DEFAULT_STRATEGY: &str = "dp=2";

/// The value of the page's input `id` (blank when it is not there). The strategy box is
/// not a controlled input (a `value` attribute would put the default back at every render):
/// its default is its placeholder, read here when the box is blank.
fn input_value(id: &str) -> String {
    web_sys::window()
        .and_then(|w| w.document())
        .and_then(|d| d.get_element_by_id(id))
        .and_then(|e| e.dyn_into::<web_sys::HtmlInputElement>().ok())
        .map(|i| i.value())
        .unwrap_or_default()
}

/// Reads `file` and asks the session to import it with the box's sizes and strategy.
fn import_file(ctx: &AppCtx, file: web_sys::File) {
    let state = ctx.state.clone();
    let name = file.name();
    let dims = input_value("import-dims");
    let parallel = match input_value("import-parallel") {
        p if p.trim().is_empty() => DEFAULT_STRATEGY.to_string(),
        p => p,
    };
    let read = Closure::once(move |buffer: JsValue| {
        state.dispatch(Action::Import(ImportFile {
            name,
            bytes: js_sys::Uint8Array::new(&buffer).to_vec(),
            dims,
            parallel,
        }))
    });
    let _ = file.array_buffer().then(&read);
    // One small closure per import, freed with the page: the promise calls it once.
    read.forget();
}

/// The topbar's import controls: the file picker, the sizes of symbolic dims and the
/// strategy.
pub fn import_box(ctx: &AppCtx) -> Html {
    let onchange = {
        let ctx = ctx.clone();
        Callback::from(move |e: Event| {
            let input = e.target_dyn_into::<web_sys::HtmlInputElement>();
            if let Some(file) = input.and_then(|i| i.files()).and_then(|f| f.get(0)) {
                import_file(&ctx, file);
            }
        })
    };
    html! {
        <span class="import" title="an ONNX model or a Paddle program (or drop one on the page), planned under the strategy">
            <label class="preset">{ "Import " }
                <input id="import-file" type="file" accept=".onnx,.pir,.txt" {onchange} />
            </label>
            <input id="import-dims" size="10" placeholder="sizes: batch=8" aria-label="sizes of symbolic dims" />
            <input id="import-parallel" size="10" placeholder={DEFAULT_STRATEGY} aria-label="strategy (dp=1: one device)" />
        </span>
    }
}

/// The page's drop target: a dropped file is imported; dragging over the page allows it.
pub fn on_drop(ctx: &AppCtx) -> (Callback<DragEvent>, Callback<DragEvent>) {
    let ctx = ctx.clone();
    let over = Callback::from(|e: DragEvent| e.prevent_default());
    let drop = Callback::from(move |e: DragEvent| {
        let file = e
            .data_transfer()
            .and_then(|d| d.files())
            .and_then(|f| f.get(0));
        if let Some(file) = file {
            e.prevent_default();
            import_file(&ctx, file);
        }
    });
    (over, drop)
}
