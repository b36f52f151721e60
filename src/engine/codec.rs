//! The wire format between the page and the engine's worker: postcard (a compact binary
//! serde format), posted as bytes. Chosen over structured-cloned JS objects
//! (serde-wasm-bindgen) for the page module's size: decoding a reply from bytes takes a
//! fraction of the code that walking JS objects field by field does. It carries every f64
//! bit for bit (NaN, infinities and -0 of a broken run included), which JSON cannot.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// `v` as bytes.
pub fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, String> {
    postcard::to_allocvec(v).map_err(|e| format!("could not encode: {e}"))
}

/// The value `bytes` encode.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    postcard::from_bytes(bytes).map_err(|e| format!("could not decode: {e}"))
}
