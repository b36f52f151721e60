//! Kernels, by family. Each takes and returns [`crate::exec::tensor::Tensor`]s; float
//! kernels compute in f64 and store in the tensor's precision, matmul runs natively.

pub mod attention;
pub mod decoder;
pub mod layout;
pub mod matmul;
pub mod moe;
pub mod normalize;
pub mod optim;
pub mod pointwise;
pub mod vocab_ce;
