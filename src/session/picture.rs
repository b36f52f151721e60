//! What the inspector draws: a tensor's tiles at the timeline's moment, the matmul that
//! produced it (A · B = C with the contraction visible), and the collective in the selected
//! rank's program that resolves a partial value.

use super::*;
use crate::dist::{tiling, Tiling};
use crate::ir::{OpClass, OpType};

/// One operand of a drawn matmul.
#[derive(Clone, Debug, PartialEq)]
pub struct Operand {
    pub name: String,
    pub shape: Vec<usize>,
    pub tiling: Tiling,
    /// The contracted dim (k), for the two inputs.
    pub contracted: Option<usize>,
}

impl Session {
    /// The selected rank's partitioned program, if it is built.
    pub fn rank_program(&self) -> Option<&crate::passes::partition::RankProgram> {
        self.pipeline
            .as_ref()?
            .partitioned
            .ranks
            .iter()
            .find(|r| r.rank == self.selected_rank)
    }

    /// The layout of forward variable `var` as the page shows it: at the timeline's moment
    /// on the Forward tab, else completed. Backward variables use the full program's attrs.
    pub fn layout_shown(&self, var: &str) -> Option<TensorDistAttr> {
        let p = self.pipeline.as_ref()?;
        if let Some(v) = self.plan.program.var_id(var) {
            if self.stage == Stage::Forward && self.timeline < self.events() {
                return self.tensors_at(self.timeline)?.get(v.index()).cloned();
            }
        }
        let v = p.full.program.var_id(var)?;
        p.full.tensors.get(v.index()).cloned()
    }

    /// The tiles of `var` as the page shows it, and its global shape.
    pub fn tiles_of(&self, var: &str) -> Option<(Tiling, Vec<usize>)> {
        let p = self.pipeline.as_ref()?;
        let v = p.full.program.var_id(var)?;
        let shape = p.full.program.var(v).ty.shape.to_vec();
        let attr = self.layout_shown(var)?;
        Some((tiling(&attr, &shape, self.mesh()?), shape))
    }

    /// When `var` is a matmul's output: the operands X, Y and the output, each tiled, with
    /// the contracted dims of X and Y marked.
    pub fn matmul_of(&self, var: &str) -> Option<[Operand; 3]> {
        let p = self.pipeline.as_ref()?;
        let program = &p.full.program;
        let v = program.var_id(var)?;
        let op = program
            .ops()
            .iter()
            .find(|op| op.ty == OpType::MatmulV2 && op.output("Out").contains(&v))?;
        let (x, y) = (*op.input("X").first()?, *op.input("Y").first()?);
        let rank = |id: crate::ir::VarId| program.var(id).ty.rank();
        let kx = if op.attr_bool("trans_x", false) {
            rank(x).checked_sub(2)
        } else {
            rank(x).checked_sub(1)
        };
        let ky = if op.attr_bool("trans_y", false) {
            rank(y).checked_sub(1)
        } else {
            rank(y).checked_sub(2)
        };
        let operand = |id: crate::ir::VarId, k: Option<usize>| {
            let name = program.var(id).name.to_string();
            let (tiling, shape) = self.tiles_of(&name)?;
            Some(Operand {
                name,
                shape,
                tiling,
                contracted: k,
            })
        };
        Some([operand(x, kx)?, operand(y, ky)?, operand(v, None)?])
    }

    /// The collective in the selected rank's program that consumes `var` (the all-reduce
    /// resolving a partial sum, say): its op index and type.
    pub fn resolver_of(&self, var: &str) -> Option<(usize, String)> {
        let program = &self.rank_program()?.program;
        let v = program.var_id(var)?;
        program.ops().iter().enumerate().find_map(|(i, op)| {
            (op.ty.class() == OpClass::Collective && op.all_inputs().any(|x| x == v))
                .then(|| (i, op.ty.to_string()))
        })
    }
}

/// An op the partition pass inserted into a rank's program.
#[derive(Clone, Debug, PartialEq)]
pub struct InsertedOp {
    /// Its index in the rank's program.
    pub op: usize,
    pub purpose: crate::ir::Purpose,
    /// `c_allreduce_sum linear_0.w_0@GRAD over [0, 4]`.
    pub label: String,
    /// The ranks it communicates with (none for a scale).
    pub group: Option<Vec<u32>>,
}

impl Session {
    /// The ops inserted into the selected rank's program, in program order.
    pub fn inserted_ops(&self) -> Vec<InsertedOp> {
        let Some(rank) = self.rank_program() else {
            return Vec::new();
        };
        let program = &rank.program;
        program
            .ops()
            .iter()
            .enumerate()
            .filter_map(|(i, op)| {
                let purpose = op.purpose()?;
                let x = op
                    .all_inputs()
                    .next()
                    .map(|v| program.var(v).name.to_string())
                    .unwrap_or_default();
                let group = op
                    .attr_ints("group")
                    .map(|g| g.iter().map(|&r| r as u32).collect::<Vec<_>>());
                let over = group
                    .as_ref()
                    .map(|g| format!(" over {g:?}"))
                    .unwrap_or_default();
                let scale = if op.ty == OpType::Scale {
                    format!(" ×{}", op.attr_float("scale", 1.0))
                } else {
                    String::new()
                };
                Some(InsertedOp {
                    op: i,
                    purpose,
                    label: format!("{} {x}{scale}{over}", op.ty),
                    group,
                })
            })
            .collect()
    }

    /// The groups lit on the mesh, each with its purpose: the focused op's group, else every
    /// group the selected rank communicates in.
    pub fn lit_groups(&self) -> Vec<(Vec<u32>, crate::ir::Purpose)> {
        let ops = self.inserted_ops();
        let focused: Vec<&InsertedOp> = ops
            .iter()
            .filter(|o| Some(o.op) == self.focus_op && o.group.is_some())
            .collect();
        let chosen = if focused.is_empty() {
            ops.iter().collect()
        } else {
            focused
        };
        let mut out: Vec<(Vec<u32>, crate::ir::Purpose)> = Vec::new();
        for o in chosen {
            if let Some(g) = &o.group {
                if !out.iter().any(|(h, p)| h == g && *p == o.purpose) {
                    out.push((g.clone(), o.purpose));
                }
            }
        }
        out
    }
}

impl Session {
    /// [`Session::inserted_by_serial_op`] on the Backward tab, else nothing.
    pub fn backward_markers(&self) -> std::collections::BTreeMap<usize, Vec<InsertedOp>> {
        if self.stage == Stage::Backward {
            self.inserted_by_serial_op()
        } else {
            Default::default()
        }
    }

    /// The selected rank's inserted ops placed in the serial program (the Backward tab):
    /// each after the last serial op producing the tensor it communicates, by serial op index.
    pub fn inserted_by_serial_op(&self) -> std::collections::BTreeMap<usize, Vec<InsertedOp>> {
        let mut out: std::collections::BTreeMap<usize, Vec<InsertedOp>> = Default::default();
        let Some(p) = self.pipeline.as_ref() else {
            return out;
        };
        let Some(rank) = self.rank_program() else {
            return out;
        };
        let serial = &p.full.program;
        for o in self.inserted_ops() {
            let op = &rank.program.ops()[o.op];
            let Some(local) = op.all_inputs().next() else {
                continue;
            };
            let Some(&origin) = rank.origin.get(local.index()) else {
                continue;
            };
            let producer = serial
                .ops()
                .iter()
                .rposition(|s| s.all_outputs().any(|v| v == origin));
            if let Some(i) = producer {
                out.entry(i).or_default().push(o);
            }
        }
        out
    }
}
