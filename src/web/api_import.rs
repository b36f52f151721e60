//! The JavaScript API's import: `import_model(bytes, {name?, dims?, parallel?})` turns an
//! ONNX file's bytes (a `Uint8Array`) into a plan's text, as `shardlab import` and the
//! playground's import box do (`crate::engine::import_model`); pass the text to `plan`.

use super::api::reject_unknown_keys;
use serde::Deserialize;
use wasm_bindgen::prelude::*;

/// What `import_model` takes besides the bytes.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ImportRequest {
    /// The file's name, for the plan's comments and errors (default `model.onnx`).
    name: Option<String>,
    /// Sizes of symbolic dims: `batch=8, seq=16`.
    #[serde(default)]
    dims: String,
    /// The strategy by sizes the plan gets (`dp=2,tp=2`; default none: no mesh).
    #[serde(default)]
    parallel: String,
}

/// Imports an ONNX model: `{text, summary}`, or a JS error naming the file and what is
/// wrong with it.
pub fn import_model(bytes: &[u8], request: JsValue) -> Result<JsValue, JsValue> {
    let req: ImportRequest = if request.is_undefined() || request.is_null() {
        ImportRequest::default()
    } else {
        reject_unknown_keys(&request, &["name", "dims", "parallel"])?;
        serde_wasm_bindgen::from_value(request)
            .map_err(|e| JsValue::from_str(&format!("bad request: {e}")))?
    };
    let name = req.name.as_deref().unwrap_or("model.onnx");
    let view = crate::engine::import_model(name, bytes, &req.dims, &req.parallel)
        .map_err(|e| JsValue::from_str(&e.message))?;
    let out = js_sys::Object::new();
    for (key, value) in [("text", view.text), ("summary", view.summary)] {
        js_sys::Reflect::set(&out, &key.into(), &value.into())?;
    }
    Ok(out.into())
}
