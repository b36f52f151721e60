//! The precision verification runs in. The error bound that sets a tensor's tolerance
//! (`bound.rs`) is a worst case: each layer multiplies its inputs' bounds by its gain, so
//! the bound grows geometrically with depth. In f32 it outgrows the values themselves: on a
//! 12-layer gpt (dp × Megatron mp on [2, 4]), 194 of 460 one-rank deletions of an inserted
//! all-reduce or 1/N scale passed verification, the last layer's missing scale included.
//! Run in f64, the same program's unit roundoff is 2⁻⁵³ instead of 2⁻²⁴, the bounds shrink
//! by 5·10⁸, and only the deletions whose gradient is analytically zero pass (attention's
//! key bias, which softmax ignores; `tests/mutation.rs` lists them).
//!
//! So `run`, the playground's Run and break-it verify the program with its f32 variables
//! made f64 (the planned programs are otherwise unchanged: the same ops, layouts and
//! collectives). What is checked is the plan's arithmetic — every synchronisation, scale
//! and reshard — not f32 rounding, which the executor's kernels share between the two runs.

use crate::passes::driver::Passes;
use serde::Serialize;

/// What precision a run computes in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// f32 variables computed in f64 (the default for verification).
    #[default]
    F64,
    /// Each variable in its declared dtype (the executor's real f32 arithmetic; the bound
    /// is too loose to catch every error on deep models).
    Program,
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Precision::F64 => "f64",
            Precision::Program => "program",
        }
    }
}

/// `p` to run in `precision`: a copy with its f32 variables made f64 (the serial program
/// and every rank's), or `p` itself.
pub fn in_precision(p: &Passes, precision: Precision) -> std::borrow::Cow<'_, Passes> {
    match precision {
        Precision::Program => std::borrow::Cow::Borrowed(p),
        Precision::F64 => {
            let mut q = p.clone();
            q.full.program.promote_floats();
            for r in &mut q.partitioned.ranks {
                r.program.promote_floats();
            }
            std::borrow::Cow::Owned(q)
        }
    }
}
