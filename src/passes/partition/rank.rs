//! Building one rank's program: local variables (one per serial variable, same ids, local
//! shapes, plus temporaries), the layout each variable is materialised in so far, and the
//! job-wide registry of communication groups.

use super::stamp::{with_rank_attrs, RankAttrs, RankCtx, Recipes};
use crate::dist::{local_shape_at, Layout, MeshAxis, ProcessMesh, TensorDistAttr};
use crate::ir::{
    Attr, Attrs, Op, OpRole, OpType, Program, Purpose, TensorType, Var, VarId, VarKind,
};
use rustc_hash::FxHashMap as HashMap;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Communication groups of the job, deduplicated. Ring ids are canonical: ring 0 is the
/// world, then the groups along each subset of the mesh's non-trivial axes (in subset
/// order, then by first rank), so an id does not depend on which ranks were partitioned or
/// in what order. The table of ids is built once per mesh and shared by every rank's copy.
#[derive(Clone, Debug, Default)]
pub struct Groups {
    /// The rings in use: id → sorted ranks.
    pub rings: BTreeMap<usize, Vec<u32>>,
    table: Arc<HashMap<Vec<u32>, usize>>,
    /// Whether `table` holds every group along every axis subset; if not, groups outside it
    /// are numbered as they appear, and ranks must share one registry (see `is_complete`).
    complete: bool,
    extra: usize,
    /// Point-to-point rings (one per direction between two ranks) are numbered after the
    /// table: `p2p_base + src · p2p_stride + dst`, canonical without enumerating them.
    p2p_base: usize,
    p2p_stride: usize,
}

impl PartialEq for Groups {
    fn eq(&self, other: &Groups) -> bool {
        self.rings == other.rings
    }
}

/// Enumerating every group costs (axis subsets × ranks); beyond this the table holds only
/// the world and the single-axis groups.
const CANONICAL_WORK: usize = 1 << 20;

impl Groups {
    /// The groups of `mesh`.
    pub fn new(mesh: &ProcessMesh) -> Groups {
        let axes: Vec<usize> = (0..mesh.ndim()).filter(|&a| mesh.shape()[a] > 1).collect();
        let subsets = 1usize.checked_shl(axes.len() as u32).unwrap_or(usize::MAX);
        let complete = subsets.saturating_mul(mesh.size()) <= CANONICAL_WORK;
        let mut world = mesh.process_ids().to_vec();
        world.sort_unstable();
        let mut table = HashMap::default();
        table.insert(world, 0);
        let masks: Vec<Vec<usize>> = if complete {
            (1..subsets)
                .map(|m| {
                    (0..axes.len())
                        .filter(|i| m & (1 << i) != 0)
                        .map(|i| axes[i])
                        .collect()
                })
                .collect()
        } else {
            axes.iter().map(|&a| vec![a]).collect()
        };
        for along in masks {
            for g in groups_along(mesh, &along) {
                let next = table.len();
                table.entry(g).or_insert(next);
            }
        }
        let p2p_stride = mesh
            .process_ids()
            .iter()
            .max()
            .map_or(1, |&m| m as usize + 1);
        let p2p_base = table.len();
        Groups {
            rings: BTreeMap::new(),
            extra: p2p_base + p2p_stride * p2p_stride,
            table: Arc::new(table),
            complete,
            p2p_base,
            p2p_stride,
        }
    }

    /// An empty registry sharing this one's id table.
    pub fn fresh(&self) -> Groups {
        Groups {
            rings: BTreeMap::new(),
            table: Arc::clone(&self.table),
            complete: self.complete,
            extra: self.p2p_base + self.p2p_stride * self.p2p_stride,
            p2p_base: self.p2p_base,
            p2p_stride: self.p2p_stride,
        }
    }

    /// Whether every group a rank can use has a canonical id, so ranks may be partitioned
    /// independently and their registries merged.
    pub fn is_complete(&self) -> bool {
        self.complete
    }

    /// The ring id of `group`, recording it as in use.
    pub fn ring_of(&mut self, group: &[u32]) -> usize {
        let mut g = group.to_vec();
        g.sort_unstable();
        let id = match self.table.get(&g) {
            Some(&i) => i,
            None => match self.rings.iter().find(|(_, r)| **r == g) {
                Some((&i, _)) => i,
                None => {
                    self.extra += 1;
                    self.extra - 1
                }
            },
        };
        self.rings.insert(id, g);
        id
    }

    /// The ring from `src` to `dst` (a pipeline send/recv; each direction has its own, as
    /// Paddle gives each its own two-rank ring), recording it as in use as `[src, dst]`.
    pub fn p2p_ring(&mut self, src: u32, dst: u32) -> usize {
        let id = self.p2p_base + src as usize * self.p2p_stride + dst as usize;
        self.rings.insert(id, vec![src, dst]);
        id
    }

    /// Records the rings another registry of the same mesh used.
    pub fn merge(&mut self, other: &Groups) {
        for (id, g) in &other.rings {
            self.rings.insert(*id, g.clone());
        }
        self.extra = self.extra.max(other.extra);
    }
}

/// Every group along the mesh axes `along`, sorted, in order of their first process: O(ranks).
fn groups_along(mesh: &ProcessMesh, along: &[usize]) -> Vec<Vec<u32>> {
    let shape = mesh.shape();
    let mut index: HashMap<usize, usize> = HashMap::default();
    let mut groups: Vec<Vec<u32>> = Vec::new();
    for (linear, &p) in mesh.process_ids().iter().enumerate() {
        // The key is the coordinate on the axes not in `along`, as a mixed-radix number.
        let (mut l, mut key, mut radix) = (linear, 0usize, 1usize);
        for a in (0..shape.len()).rev() {
            let c = l % shape[a];
            l /= shape[a];
            if !along.contains(&a) {
                key += c * radix;
                radix *= shape[a];
            }
        }
        let next = groups.len();
        let slot = *index.entry(key).or_insert(next);
        if slot == next {
            groups.push(Vec::new());
        }
        groups[slot].push(p);
    }
    for g in &mut groups {
        g.sort_unstable();
    }
    groups
}

/// Why planning a rank failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PartitionError {
    /// A variable's layout does not fit its shape (uneven, or the wrong rank).
    #[error("{source}")]
    Layout {
        var: String,
        source: Box<crate::dist::DistAttrError>,
    },
    #[error("cannot reshard `{var}` from {from} to {to}")]
    Reshard {
        var: String,
        from: String,
        to: String,
    },
    #[error(
        "ZeRO planned to shard `{param}` over mesh axes {planned:?}, but its gradient is \
         partial over {partial:?} when it is synchronised"
    )]
    ZeroPartial {
        param: String,
        planned: Vec<crate::dist::MeshAxis>,
        partial: Vec<crate::dist::MeshAxis>,
    },
    #[error("rank {rank}'s program does not verify: {first} ({count} problems)")]
    RankVerify {
        rank: u32,
        first: Box<crate::ir::VerifyError>,
        count: usize,
    },
    #[error(
        "ring attention needs `{var}`'s sequence ({seq}) to split evenly over its ring of          {ring} ranks; use cp_mode=ulysses or a sequence length that divides"
    )]
    RingUneven {
        var: String,
        seq: usize,
        ring: usize,
    },
    #[error("a pipeline send/recv needs the mesh's `pp` axis")]
    NoPipelineAxis,
    #[error("{ty} has no {slot}")]
    MissingSlot { ty: OpType, slot: &'static str },
    #[error("{0}")]
    Program(#[from] crate::ir::ProgramError),
}

impl crate::plan::Located for PartitionError {
    fn subject(&self) -> Option<crate::plan::PlanSubject> {
        use crate::plan::PlanSubject;
        match self {
            PartitionError::Layout { var, .. }
            | PartitionError::Reshard { var, .. }
            | PartitionError::ZeroPartial { param: var, .. }
            | PartitionError::RingUneven { var, .. } => Some(PlanSubject::Var(var.clone())),
            // A rank program's ops are not the plan's; its variables keep their names.
            PartitionError::RankVerify { first, .. } => match &first.subject {
                crate::ir::Subject::Var(name) => Some(PlanSubject::Var(name.clone())),
                crate::ir::Subject::Op(_) => None,
            },
            PartitionError::NoPipelineAxis => Some(PlanSubject::Mesh),
            PartitionError::MissingSlot { .. } => None,
            PartitionError::Program(e) => crate::plan::Located::subject(e),
        }
    }
}

/// The attributes a caller gives a collective besides its group.
pub type ExtraAttrs = Vec<(&'static str, Attr)>;

/// Every serial variable with its local shape under `attrs` at mesh coordinates `coords`
/// (the first rank's with none). Where layouts split evenly the local shapes are the same
/// on every rank: computed once and shared by them.
pub fn local_vars(
    mesh: &ProcessMesh,
    serial: &Program,
    attrs: &[TensorDistAttr],
    coords: &[usize],
) -> Result<Vec<Var>, PartitionError> {
    serial
        .vars()
        .iter()
        .zip(attrs)
        .map(|(v, attr)| {
            let shape =
                local_shape_at(&v.name, &v.ty.shape, attr, mesh, coords).map_err(|source| {
                    PartitionError::Layout {
                        var: v.name.to_string(),
                        source: Box::new(source),
                    }
                })?;
            Ok(Var {
                name: v.name.clone(),
                ty: TensorType::new(v.ty.dtype, shape),
                kind: v.kind,
                persistable: v.persistable,
            })
        })
        .collect()
}

/// One rank's program under construction. The builder does not expose which rank it
/// builds: only [`RankAttrs`] recipes see it (through [`RankCtx`]), which is what lets every
/// other rank's program be stamped from this one (see `stamp.rs`).
pub struct RankBuilder<'a> {
    ctx: RankCtx<'a>,
    pub mesh: &'a ProcessMesh,
    pub program: Program,
    /// The layout each local variable's contents are in right now.
    pub cur: super::layouts::Layouts,
    /// The serial variable each local variable holds (a piece of).
    pub origin: Vec<VarId>,
    /// The serial program: a local variable holds a piece of `serial.var(origin[v])`.
    serial: &'a Program,
    /// Role and namescope for ops appended now.
    pub role: OpRole,
    temps: usize,
    pub reshard_cache: HashMap<(VarId, Layout), VarId>,
    /// The ops whose attributes depend on the rank, and how to compute them.
    pub recipes: Recipes,
    /// The model chunk (virtual stage `chunk · pp + stage`) of the op being lowered; every op
    /// appended for it records it in `op_chunks` (the executor's jobs run one chunk's ops).
    pub chunk: u16,
    pub op_chunks: Vec<u16>,
    /// The attributes of the data-parallel gradient scale (the same 1/N for every gradient
    /// of the rank), built at its first use.
    pub gradient_scale: Option<Attrs>,
    /// Whether a temporary is split unevenly: its shape then depends on the rank, and the
    /// other ranks are built, not stamped from this one.
    pub uneven: bool,
}

impl<'a> RankBuilder<'a> {
    /// Starts rank `rank`'s program with `locals`, every serial variable with its local
    /// shape under `attrs` (see [`local_vars`]), a table every rank of the partition shares.
    pub fn new(
        rank: u32,
        mesh: &'a ProcessMesh,
        serial: &'a Program,
        attrs: &Arc<Vec<TensorDistAttr>>,
        locals: &Arc<Vec<Var>>,
        groups: &'a mut Groups,
    ) -> Self {
        // Room in the per-variable tables for the temporaries the rank adds (reshards,
        // receives): growing them by copying was a twentieth of the auto-planner's work. A
        // rank adds few (1.5% of its variables on average over the auto-planner's 8-device
        // search, at most 28% on the 1.3B model's): an eighth spare covers most ranks without
        // holding a quarter spare in every program kept (a tenth fewer page faults).
        let room = locals.len() + locals.len() / 8 + 16;
        let cur = super::layouts::Layouts::new(Arc::clone(attrs), room.saturating_sub(attrs.len()));
        let mut origin = Vec::with_capacity(room.max(serial.vars().len()));
        origin.extend((0..serial.vars().len() as u32).map(VarId));
        RankBuilder {
            ctx: RankCtx::new(rank, mesh, groups),
            mesh,
            program: Program::sharing_vars(Arc::clone(locals)),
            cur,
            origin,
            serial,
            role: OpRole::Forward,
            temps: 0,
            reshard_cache: HashMap::default(),
            recipes: Vec::new(),
            gradient_scale: None,
            chunk: 0,
            op_chunks: Vec::new(),
            uneven: false,
        }
    }

    /// The global shape of the serial variable `v` holds a piece of.
    pub fn global_shape(&self, v: VarId) -> &[usize] {
        &self.serial.var(self.origin[v.index()]).ty.shape
    }

    /// The rank's coordinates on the mesh (for the shapes of uneven splits; the structure
    /// of the program must not depend on them).
    pub fn coords(&self) -> &[usize] {
        self.ctx.coords()
    }

    /// The zeros a pad appends on this rank (see [`RankAttrs::Pad`]).
    pub fn pad_size(&self, recipe: &RankAttrs) -> usize {
        if let RankAttrs::Pad {
            n,
            outer,
            axis,
            whole,
        } = recipe
        {
            super::stamp::pad_size(&self.ctx, *n, outer, *axis, *whole)
        } else {
            0
        }
    }

    /// The rank being built (for error messages and the finished program; the program's
    /// structure must not depend on it).
    pub fn rank(&self) -> u32 {
        self.ctx.rank()
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
        let serial_shape = &self.serial.var(base).ty.shape;
        let coords = self.ctx.coords();
        let shape = local_shape_at(&serial_name, serial_shape, attr, self.mesh, coords).map_err(
            |source| PartitionError::Layout {
                var: serial_name.to_string(),
                source: Box::new(source),
            },
        )?;
        self.uneven |= crate::dist::chunk::splits_unevenly(serial_shape, &attr.dims, self.mesh);
        Ok(self.shaped_temp(of, attr, shape.to_vec(), tag))
    }

    /// A temporary of `shape` holding `of`'s contents in layout `attr`, padded: `shape` is
    /// not the layout's local shape but longer along a padded dim.
    pub fn shaped_temp(
        &mut self,
        of: VarId,
        attr: &TensorDistAttr,
        shape: Vec<usize>,
        tag: &str,
    ) -> VarId {
        let base = self.origin[of.index()];
        let serial_name = self.program.var(base).name.clone();
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
        id
    }

    /// A flat temporary of `len` elements holding a buffer of `of` (ZeRO's flat buffers:
    /// laid out as a replicated 1-D tensor on every rank).
    pub fn flat_temp(&mut self, of: VarId, len: usize, tag: &str) -> VarId {
        let base = self.origin[of.index()];
        let serial_name = self.program.var(base).name.clone();
        self.temps += 1;
        let ty = TensorType::new(self.program.var(of).ty.dtype, vec![len]);
        let id = self.program.add_var_unchecked(Var {
            name: format!("{serial_name}@{tag}@{}", self.temps).into(),
            ty,
            kind: VarKind::Activation,
            persistable: false,
        });
        self.cur
            .push(TensorDistAttr::replicated(crate::dist::MeshId::JOB, 1));
        self.origin.push(base);
        id
    }

    /// Appends a collective over `axes` with `attrs` (group and ring id are filled in).
    pub fn collective(
        &mut self,
        ty: OpType,
        x: VarId,
        out: VarId,
        axes: &[MeshAxis],
        attrs: ExtraAttrs,
        purpose: Purpose,
    ) {
        let mut op = Op::new(ty);
        op.inputs = crate::slots![[x]];
        op.outputs = crate::slots![[out]];
        op.namescope = purpose.namescope().into();
        let recipe = RankAttrs::Collective {
            axes: axes.iter().copied().collect(),
            extra: attrs,
        };
        self.rank_dependent(op, recipe);
    }

    /// Appends `op` with the attributes `recipe` computes for this rank, and records the
    /// recipe so other ranks' programs can be stamped from this one.
    pub fn rank_dependent(&mut self, op: Op, recipe: RankAttrs) {
        let op = with_rank_attrs(op, &recipe, &mut self.ctx);
        self.recipes.push((self.program.ops().len(), recipe));
        self.local(op);
    }

    /// Appends a local op (shared with the serial program when it runs unchanged).
    pub fn local(&mut self, op: impl Into<Arc<Op>>) {
        let mut op = op.into();
        if op.role != self.role {
            Arc::make_mut(&mut op).role = self.role;
        }
        self.program.push_shared(op);
        self.op_chunks.push(self.chunk);
    }
}
