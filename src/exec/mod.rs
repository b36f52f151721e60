//! The CPU executor: tensors, kernels for every op, the interpreter, communicators, the
//! serial and rank executors, and verification of the distributed step against the serial
//! one.

pub mod bound;
pub mod comm;
pub mod gather;
pub mod init;
pub mod interp;
pub mod kernels;
#[cfg(feature = "native")]
pub mod npy;
pub mod op_error;
pub mod pipe;
pub mod precision;
pub mod profile;
pub mod run;
pub mod run_memory;
pub mod run_pipe;
pub mod step;
pub mod sync_check;
pub mod tensor;
pub mod values;
pub mod verify;
