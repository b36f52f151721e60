//! Building one rank's program: local variables (one per serial variable, same ids, local
//! shapes, plus temporaries), the layout each variable is materialised in so far, and the
//! job-wide registry of communication groups.

use crate::dist::{local_shape, ProcessMesh, TensorDistAttr};
use crate::ir::{Attr, Op, OpRole, OpType, Program, TensorType, Var, VarId, VarKind};
use std::collections::HashMap;

/// Namescopes of inserted communication (Paddle's).
pub mod scope {
    pub const DATA_PARALLEL: &str = "/auto_parallel/data_parallel";
    pub const TENSOR_PARALLEL: &str = "/auto_parallel/tensor_parallel";
    pub const RESHARD: &str = "/auto_parallel/reshard";
    pub const AMP: &str = "/auto_parallel/amp_flag_synchronization";
    pub const GLOBAL_NORM: &str = "/auto_parallel/global_norm_synchronization";
}

/// Communication groups of the job, deduplicated; ring 0 is the world group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Groups {
    pub rings: Vec<Vec<u32>>,
}

impl Groups {
    /// Groups with the world group (all of `mesh`'s processes) as ring 0.
    pub fn new(mesh: &ProcessMesh) -> Groups {
        let mut world = mesh.process_ids().to_vec();
        world.sort_unstable();
        Groups { rings: vec![world] }
    }

    /// The ring id of `group` (sorted), registering it if new.
    pub fn ring_of(&mut self, group: &[u32]) -> usize {
        let mut g = group.to_vec();
        g.sort_unstable();
        match self.rings.iter().position(|r| *r == g) {
            Some(i) => i,
            None => {
                self.rings.push(g);
                self.rings.len() - 1
            }
        }
    }
}

/// Why planning a rank failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PartitionError {
    #[error("{0}")]
    Layout(String),
    #[error("{0}")]
    Program(#[from] crate::ir::ProgramError),
}

/// One rank's program under construction.
pub struct RankBuilder<'a> {
    pub rank: u32,
    pub mesh: &'a ProcessMesh,
    pub program: Program,
    /// The layout each local variable's contents are in right now.
    pub cur: Vec<TensorDistAttr>,
    /// The serial variable each local variable holds (a piece of).
    pub origin: Vec<VarId>,
    /// The global shape of each local variable's contents.
    pub global: Vec<Vec<usize>>,
    pub groups: &'a mut Groups,
    /// Role and namescope for ops appended now.
    pub role: OpRole,
    temps: usize,
    pub reshard_cache: HashMap<(VarId, String), VarId>,
}

impl<'a> RankBuilder<'a> {
    /// Declares every serial variable with its local shape under `attrs`.
    pub fn new(
        rank: u32,
        mesh: &'a ProcessMesh,
        serial: &Program,
        attrs: &[TensorDistAttr],
        groups: &'a mut Groups,
    ) -> Result<Self, PartitionError> {
        let mut program = Program::new();
        for (v, attr) in serial.vars().iter().zip(attrs) {
            let shape = local_shape(&v.name, &v.ty.shape, attr)
                .map_err(|e| PartitionError::Layout(e.to_string()))?;
            program.add_var_unchecked(Var {
                name: v.name.clone(),
                ty: TensorType::new(v.ty.dtype, shape),
                kind: v.kind,
                persistable: v.persistable,
            });
        }
        Ok(RankBuilder {
            rank,
            mesh,
            program,
            cur: attrs.to_vec(),
            origin: (0..serial.vars().len() as u32).map(VarId).collect(),
            global: serial.vars().iter().map(|v| v.ty.shape.clone()).collect(),
            groups,
            role: OpRole::Forward,
            temps: 0,
            reshard_cache: HashMap::new(),
        })
    }

    /// A temporary holding `of`'s contents in layout `attr`.
    pub fn temp(
        &mut self,
        of: VarId,
        attr: &TensorDistAttr,
        tag: &str,
    ) -> Result<VarId, PartitionError> {
        let base = self.origin[of.index()];
        let serial_name = self.program.var(base).name.clone();
        let serial_shape = self.global[of.index()].clone();
        let shape = local_shape(&serial_name, &serial_shape, attr)
            .map_err(|e| PartitionError::Layout(e.to_string()))?;
        self.temps += 1;
        let ty = TensorType::new(self.program.var(of).ty.dtype, shape);
        // `@TAG@k` names are unique within the rank: k counts every temporary.
        let id = self.program.add_var_unchecked(Var {
            name: format!("{serial_name}@{tag}@{}", self.temps).into(),
            ty,
            kind: VarKind::Activation,
            persistable: false,
        });
        self.cur.push(attr.clone());
        self.origin.push(base);
        self.global.push(serial_shape);
        Ok(id)
    }

    /// The ranks of this rank's group along `axes`.
    pub fn group(&self, axes: &[usize]) -> Vec<u32> {
        self.mesh
            .group_of(self.rank, axes)
            .unwrap_or_else(|| vec![self.rank])
    }

    /// This rank's coordinate on mesh axis `axis`.
    pub fn coord(&self, axis: usize) -> usize {
        self.mesh
            .coords_of(self.rank)
            .and_then(|c| c.get(axis).copied())
            .unwrap_or(0)
    }

    /// Appends a collective over `axes` with `attrs` (group and ring id are filled in).
    pub fn collective(
        &mut self,
        ty: OpType,
        x: VarId,
        out: VarId,
        axes: &[usize],
        attrs: Vec<(&str, Attr)>,
        scope: &str,
    ) {
        let group = self.group(axes);
        let ring = self.groups.ring_of(&group);
        let mut op = Op::new(ty);
        op.inputs = vec![vec![x]];
        op.outputs = vec![vec![out]];
        op.attrs = attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        op.attrs.insert(
            "group".into(),
            Attr::Ints(group.iter().map(|&r| r as i64).collect()),
        );
        op.attrs.insert("ring_id".into(), Attr::Int(ring as i64));
        op.role = self.role;
        op.namescope = scope.to_string();
        self.program.push_op(op);
    }

    /// Appends a local op.
    pub fn local(&mut self, mut op: Op) {
        op.role = self.role;
        self.program.push_op(op);
    }
}
