//! The ranks of one mesh (or one pipeline stage's sub-mesh) as one SPMD body: their
//! programs must be the same ops over the same variables (the partitioner stamps them from
//! one template), and what differs between them becomes either mesh axes (a collective's
//! group) or a per-rank table indexed by the rank's position (`me`).

use super::ops::Env;
use super::py;
use super::ExportError;
use crate::ir::{Attr, Program};
use std::cell::RefCell;

/// A dropout whose mask the script computes on the host and feeds to every rank.
#[derive(Clone, Debug, PartialEq)]
pub struct MaskFeed {
    pub name: String,
    pub op: usize,
}

/// The ranks of a (sub-)mesh, by position (row-major over `shape`).
pub struct RanksEnv<'a> {
    pub shape: Vec<usize>,
    pub names: Vec<String>,
    pub ranks: Vec<u32>,
    pub programs: Vec<&'a Program>,
    /// Dropout masks the body reads, in the order it asked for them.
    pub masks: RefCell<Vec<MaskFeed>>,
}

impl<'a> RanksEnv<'a> {
    /// Checks that every rank runs the template's ops on the same variables.
    pub fn new(
        shape: Vec<usize>,
        names: Vec<String>,
        ranks: Vec<u32>,
        programs: Vec<&'a Program>,
    ) -> Result<RanksEnv<'a>, ExportError> {
        let template = programs
            .first()
            .ok_or_else(|| ExportError::Plan("no ranks".into()))?;
        for (pos, p) in programs.iter().enumerate().skip(1) {
            let same = p.ops().len() == template.ops().len()
                && p.vars().len() == template.vars().len()
                && p.ops()
                    .iter()
                    .zip(template.ops())
                    .all(|(a, b)| a.ty == b.ty && a.inputs == b.inputs && a.outputs == b.outputs);
            if !same {
                return Err(ExportError::Plan(format!(
                    "rank {} runs other ops than rank {}: shard_map needs one program for \
                     every rank of a mesh",
                    ranks[pos], ranks[0]
                )));
            }
        }
        Ok(RanksEnv {
            shape,
            names,
            ranks,
            programs,
            masks: RefCell::new(Vec::new()),
        })
    }

    /// Mesh coordinates of position `pos`.
    pub fn coords(&self, pos: usize) -> Vec<usize> {
        let mut c = vec![0; self.shape.len()];
        let mut l = pos;
        for a in (0..self.shape.len()).rev() {
            c[a] = l % self.shape[a].max(1);
            l /= self.shape[a].max(1);
        }
        c
    }

    /// The positions of `pos`'s group along `axes`, ordered as JAX orders a collective
    /// over the axis tuple `axes` (the first axis major).
    fn group(&self, pos: usize, axes: &[usize]) -> Vec<u32> {
        let c = self.coords(pos);
        let mut members: Vec<(usize, u32)> = (0..self.ranks.len())
            .filter_map(|q| {
                let d = self.coords(q);
                let same = (0..self.shape.len()).all(|a| axes.contains(&a) || d[a] == c[a]);
                let block = axes.iter().fold(0, |b, &a| b * self.shape[a] + d[a]);
                same.then_some((block, self.ranks[q]))
            })
            .collect();
        crate::sort::sort(&mut members);
        members.into_iter().map(|(_, r)| r).collect()
    }

    /// Every ordering of every subset of the mesh axes, smallest first.
    fn axis_tuples(&self) -> Vec<Vec<usize>> {
        let n = self.shape.len();
        let mut out: Vec<Vec<usize>> = Vec::new();
        fn extend(prefix: &mut Vec<usize>, n: usize, out: &mut Vec<Vec<usize>>) {
            out.push(prefix.clone());
            for a in 0..n {
                if !prefix.contains(&a) {
                    prefix.push(a);
                    extend(prefix, n, out);
                    prefix.pop();
                }
            }
        }
        extend(&mut Vec::new(), n, &mut out);
        crate::sort::sort_by_key(&mut out, |t| (t.len(), t.windows(2).any(|w| w[0] > w[1])));
        out
    }

    fn attr<'p>(&'p self, pos: usize, op: usize, name: &str) -> Option<&'p Attr> {
        self.programs.get(pos)?.ops().get(op)?.attrs.get(name)
    }
}

impl Env for RanksEnv<'_> {
    fn program(&self) -> &Program {
        self.programs[0]
    }

    fn rank_int(&self, op: usize, attr: &str, item: usize) -> Result<String, ExportError> {
        let values: Vec<i64> = (0..self.programs.len())
            .map(|pos| match self.attr(pos, op, attr) {
                Some(Attr::Int(i)) => Some(*i),
                Some(Attr::Ints(v)) => v.get(item).copied(),
                Some(_) | None => None,
            })
            .collect::<Option<_>>()
            .ok_or_else(|| ExportError::Op {
                index: op,
                ty: self.program().ops()[op].ty.to_string(),
                message: format!("no integer attribute {attr}"),
            })?;
        if values.iter().all(|&v| v == values[0]) {
            return Ok(values[0].to_string());
        }
        Ok(format!("jnp.asarray({})[me]", py::ints(values)))
    }

    fn axes(&self, op: usize) -> Result<String, ExportError> {
        let groups: Vec<Vec<u32>> = (0..self.programs.len())
            .map(|pos| match self.attr(pos, op, "group") {
                Some(Attr::Ints(g)) => g.iter().map(|&r| r as u32).collect(),
                Some(_) | None => Vec::new(),
            })
            .collect();
        let found = self.axis_tuples().into_iter().find(|axes| {
            groups
                .iter()
                .enumerate()
                .all(|(pos, g)| *g == self.group(pos, axes))
        });
        match found {
            Some(axes) => Ok(py::tuple(axes.iter().map(|&a| py::string(&self.names[a])))),
            None => Err(ExportError::Op {
                index: op,
                ty: self.program().ops()[op].ty.to_string(),
                message: format!(
                    "its group {:?} (on rank {}) is not a group along mesh axes, which is \
                     all a JAX collective can name",
                    groups.first().cloned().unwrap_or_default(),
                    self.ranks.first().copied().unwrap_or(0)
                ),
            }),
        }
    }

    fn mask(&self, op: usize) -> Result<String, ExportError> {
        let name = format!("__dropout_mask_op{op}");
        self.masks.borrow_mut().push(MaskFeed {
            name: name.clone(),
            op,
        });
        Ok(format!("v[{}]", py::string(&name)))
    }
}
