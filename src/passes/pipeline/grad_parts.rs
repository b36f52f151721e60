//! A grad op's outputs in two parts: the gradients of the forward op's activation inputs
//! (needed right away by the previous op's backward) and of its parameters (needed only by
//! the optimizer). The zero-bubble pipeline schedule runs the two parts as separate jobs —
//! input-grad (B) then, later, weight-grad (W) — to fill the pipeline's bubbles.

use super::super::backward::Backward;
use crate::ir::{OpId, VarId, VarKind};

/// Which part of a backward op's work an output belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GradPart {
    /// The gradient of an activation (an input of the forward op that is not a parameter).
    Input,
    /// The gradient of a parameter.
    Weight,
}

/// Each output of grad op `op` with its part, in slot order; empty for a non-grad op. An
/// output is a weight gradient when the forward input it differentiates is a parameter.
pub fn grad_parts(b: &Backward, op: OpId) -> Vec<(VarId, GradPart)> {
    let Some(&fwd) = b.forward_of.get(&op) else {
        return Vec::new();
    };
    let (grad, forward) = (b.program.op(op), b.program.op(fwd));
    // A grad op's output slot k holds the gradients of the forward op's input slot k.
    grad.outputs
        .iter()
        .zip(&forward.inputs)
        .flat_map(|(outs, ins)| outs.iter().zip(ins))
        .map(|(&g, &x)| {
            let part = if b.program.var(x).kind == VarKind::Parameter {
                GradPart::Weight
            } else {
                GradPart::Input
            };
            (g, part)
        })
        .collect()
}
