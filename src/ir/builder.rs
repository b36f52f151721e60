//! A small builder for writing programs in Rust (the model presets use it): declare
//! sources, then append ops whose output variables are created from shape inference.

use super::attr::Attr;
use super::infer::infer_op;
use super::op_type::{OpRole, OpType};
use super::program::{Op, Program, ProgramError, Slot, Slots};
use super::types::{DType, TensorType, VarId, VarKind};

/// Builds a [`Program`] op by op.
pub struct Builder {
    program: Program,
    role: OpRole,
}

impl Default for Builder {
    fn default() -> Self {
        Builder::new()
    }
}

impl Builder {
    /// An empty builder appending forward ops.
    pub fn new() -> Builder {
        Builder {
            program: Program::new(),
            role: OpRole::Forward,
        }
    }

    /// Sets the role of the ops appended from now on.
    pub fn set_role(&mut self, role: OpRole) {
        self.role = role;
    }

    /// Declares a fed input.
    pub fn input(
        &mut self,
        name: &str,
        dtype: DType,
        shape: &[usize],
    ) -> Result<VarId, ProgramError> {
        self.program
            .declare(name, TensorType::new(dtype, shape.to_vec()), VarKind::Input)
    }

    /// Declares a fed label.
    pub fn label(
        &mut self,
        name: &str,
        dtype: DType,
        shape: &[usize],
    ) -> Result<VarId, ProgramError> {
        self.program
            .declare(name, TensorType::new(dtype, shape.to_vec()), VarKind::Label)
    }

    /// Declares a trainable parameter.
    pub fn param(
        &mut self,
        name: &str,
        dtype: DType,
        shape: &[usize],
    ) -> Result<VarId, ProgramError> {
        self.program.declare(
            name,
            TensorType::new(dtype, shape.to_vec()),
            VarKind::Parameter,
        )
    }

    /// Appends an op. `inputs` has one list per input slot of `ty`; `outputs` names every
    /// output variable in slot order. Output types come from shape inference.
    pub fn op(
        &mut self,
        ty: OpType,
        inputs: &[&[VarId]],
        attrs: &[(&str, Attr)],
        outputs: &[&str],
    ) -> Result<Vec<VarId>, ProgramError> {
        let mut op = Op::new(ty);
        op.role = self.role;
        // Slices, not vectors: the presets' hundred call sites build no vectors (the page's
        // module carries each call).
        op.inputs = inputs.iter().map(|s| Slot::from_slice(s)).collect();
        op.attrs = attrs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        let name = || format!("{} ({})", outputs.first().copied().unwrap_or("?"), ty);
        if op.inputs.len() != ty.input_slots().len() {
            return Err(ProgramError::InputSlots {
                op: name(),
                expected: ty.input_slots().len(),
            });
        }
        let types: Vec<Vec<&TensorType>> = op
            .inputs
            .iter()
            .map(|slot| slot.iter().map(|&v| &self.program.var(v).ty).collect())
            .collect();
        let inferred =
            infer_op(&op, &types).map_err(|error| ProgramError::Infer { op: name(), error })?;
        let total: usize = inferred.iter().map(Vec::len).sum();
        if total != outputs.len() {
            return Err(ProgramError::OutputNames {
                op: name(),
                produced: total,
                named: outputs.len(),
            });
        }
        let mut names = outputs.iter();
        let mut all = Vec::with_capacity(total);
        op.outputs = Slots::with_capacity(inferred.len());
        for slot in inferred {
            let mut ids = Vec::with_capacity(slot.len());
            for ty in slot {
                let name = names.next().copied().unwrap_or_default();
                let id = self.program.declare(name, ty, VarKind::Activation)?;
                ids.push(id);
                all.push(id);
            }
            op.outputs.push(Slot::from_vec(ids));
        }
        self.program.push_op(op);
        Ok(all)
    }

    /// Appends an op with a single output and returns it.
    pub fn op1(
        &mut self,
        ty: OpType,
        inputs: &[&[VarId]],
        attrs: &[(&str, Attr)],
        output: &str,
    ) -> Result<VarId, ProgramError> {
        let outs = self.op(ty, inputs, attrs, &[output])?;
        outs.first()
            .copied()
            .ok_or_else(|| ProgramError::OutputNames {
                op: output.to_string(),
                produced: 0,
                named: 1,
            })
    }

    /// The program so far.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// The program built.
    pub fn finish(self) -> Program {
        self.program
    }
}
