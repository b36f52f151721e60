//! A serial program with a dist attr for every variable and every op: what each stage of
//! the pipeline (forward, backward, optimizer) hands to the next.

use crate::dist::MeshId;
use crate::dist::{OperatorDistAttr, ProcessMesh, TensorDistAttr};
use crate::ir::{Op, Program};
use std::sync::Arc;

/// A program and its dist attrs (`tensors[v]` for variable `v`, `ops[i]` for op `i`).
#[derive(Clone, Debug)]
pub struct DistProgram {
    pub mesh: Arc<ProcessMesh>,
    pub program: Program,
    pub tensors: Vec<TensorDistAttr>,
    pub ops: Vec<OperatorDistAttr>,
}

impl DistProgram {
    /// The first variable some mesh axes split unevenly (`dist::chunk`), if any: its
    /// local shape then depends on the rank.
    pub fn uneven_var(&self) -> Option<crate::ir::VarId> {
        let vars = self.program.vars().iter().zip(self.tensors.iter());
        vars.enumerate().find_map(|(i, (v, a))| {
            crate::dist::chunk::splits_unevenly(&v.ty.shape, &a.dims, &self.mesh)
                .then_some(crate::ir::VarId(i as u32))
        })
    }

    /// An op attr whose slots mirror `op`'s, every slot attr replicated over its variable's
    /// rank, with the `default` implementation.
    pub fn replicated_op_attr(&self, op: &Op) -> OperatorDistAttr {
        let slot = |vars: &crate::ir::Slot| {
            vars.iter()
                .map(|&v| TensorDistAttr::replicated(MeshId::JOB, self.program.var(v).ty.rank()))
                .collect()
        };
        let mut attr = OperatorDistAttr::new(MeshId::JOB);
        attr.inputs = op.inputs.iter().map(slot).collect();
        attr.outputs = op.outputs.iter().map(slot).collect();
        attr
    }

    /// Every variable's attr without partial status (what a consumer normally wants).
    /// The first `vars` variables and `ops` ops with their attrs (see `Program::prefix`).
    pub fn prefix(&self, vars: usize, ops: usize) -> DistProgram {
        let program = self.program.prefix(vars, ops);
        DistProgram {
            mesh: self.mesh.clone(),
            tensors: self.tensors[..program.vars().len()].to_vec(),
            ops: self.ops[..program.ops().len()].to_vec(),
            program,
        }
    }

    pub fn settled(attr: &TensorDistAttr) -> TensorDistAttr {
        TensorDistAttr {
            layout: attr.layout.settled(),
            ..attr.clone()
        }
    }
}
