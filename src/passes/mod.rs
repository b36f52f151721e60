//! The planning passes, in pipeline order (see `../shared/DESIGN.md`):
//!
//! 1. [`complete`]: complete the dist attrs of every tensor and op (SPMD rules, forward and
//!    reverse sweeps to a fixpoint), recording a trace that explains every decision.
//!
//! Architecture invariant: passes depend on `ir`, `dist`, `spmd` and `plan` only; never on
//! `exec`, `web` or `cli`.

pub mod backward;
pub mod complete;
pub mod complete_backward;
pub mod dist_program;
pub mod driver;
pub mod ledger;
pub mod optimizer;
pub mod partition;
pub mod pipeline;
pub mod recompute;

pub use complete::{complete, complete_from, CompleteError, Completed};
