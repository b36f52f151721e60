//! A rank's environment: reading an op's inputs, writing its outputs, and taking a value
//! out to update it in place where the op's output is its input.

use super::Rank;
use crate::exec::op_error::OpError;
use crate::exec::tensor::Tensor;
use crate::ir::{Op, VarId};

impl Rank<'_> {
    pub(super) fn get(&self, v: VarId) -> Result<&Tensor, OpError> {
        self.env
            .get(v.index())
            .and_then(|t| t.as_ref())
            .ok_or_else(|| OpError::NoValue(self.program.var(v).name.to_string()))
    }

    pub(super) fn slot(&self, op: &Op, name: &str) -> Result<&Tensor, OpError> {
        let v = *op
            .input(name)
            .first()
            .ok_or_else(|| OpError::MissingInput(name.to_string()))?;
        self.get(v)
    }

    pub(super) fn opt_slot(&self, op: &Op, name: &str) -> Option<&Tensor> {
        op.input(name).first().and_then(|&v| self.get(v).ok())
    }

    /// The value of an op's input slot `input` to overwrite, when its output slot `output` is
    /// the same variable (Paddle's in-place ops: the data-parallel scale of a gradient, an
    /// optimizer's ParamOut); `None` otherwise or without a value.
    pub(super) fn in_place(&mut self, op: &Op, input: &str, output: &str) -> Option<&mut Tensor> {
        let v = *op.input(input).first()?;
        if op.output(output).first() != Some(&v) {
            return None;
        }
        self.env.get_mut(v.index())?.as_mut()
    }

    /// The value of input slot `input`, owned: taken out of the environment when output
    /// slot `output` is the same variable (the op writes it back), else copied.
    pub(super) fn owned(&mut self, op: &Op, input: &str, output: &str) -> Result<Tensor, OpError> {
        let v = *op
            .input(input)
            .first()
            .ok_or_else(|| OpError::MissingInput(input.to_string()))?;
        if op.output(output).first() == Some(&v) {
            if let Some(t) = self.env.get_mut(v.index()).and_then(Option::take) {
                return Ok(t);
            }
        }
        self.get(v).cloned()
    }

    pub(super) fn set(&mut self, op: &Op, slot: &str, t: Tensor) {
        if let Some(&v) = op.output(slot).first() {
            self.set_var(v, t);
        }
    }

    pub(super) fn set_var(&mut self, v: VarId, t: Tensor) {
        if let Some(s) = self.env.get_mut(v.index()) {
            *s = Some(t);
        }
    }
}
