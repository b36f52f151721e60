//! The wire format between the page and the engine's worker: postcard (a compact binary
//! serde format), posted as bytes. Chosen over structured-cloned JS objects
//! (serde-wasm-bindgen) for the page module's size: decoding a reply from bytes takes a
//! fraction of the code that walking JS objects field by field does. It carries every f64
//! bit for bit (NaN, infinities and -0 of a broken run included), which JSON cannot.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// A value that did not cross: postcard's error, and which way it went.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    #[error("could not encode: {0}")]
    Encode(postcard::Error),
    #[error("could not decode: {0}")]
    Decode(postcard::Error),
}

/// `v` as bytes.
pub fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, CodecError> {
    postcard::to_allocvec(v).map_err(CodecError::Encode)
}

/// The value `bytes` encode.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    postcard::from_bytes(bytes).map_err(CodecError::Decode)
}
