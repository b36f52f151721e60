//! A planned pipeline at another micro-batch size, without planning it again: the
//! auto-planner prices a pipelined plan at several micro-batch counts, whose plannings
//! differ only in the size of the batch dim. The model at the new size gives the sources'
//! types; every op's outputs are re-inferred in program order; the partition is then
//! redone by the caller (`Passes::repartition`).
//!
//! Exact only where completion, differentiation and the optimizer made no choice that
//! depends on the batch's size, so it refuses (and the caller plans afresh) where one
//! could have:
//! - completion rejected a split of a dim smaller than its mesh axes (a different size
//!   could accept it), or the new size is smaller than a split's shards;
//! - a dim of size 1 changes size where completion split it (the rules treat size 1 as
//!   broadcast, which cannot be split: a dim no annotation or rule split stays whole);
//! - an op outside the forward has a `shape` attribute that is neither a scalar fill nor
//!   one the forward has (differentiation writes shapes into fills of zeros);
//! - the forward re-inferred differs from the model built at the new size.
//!
//! The search's tests compare every rebatched planning with a fresh one, order by order
//! and schedule by schedule (`rebatching_equals_planning_afresh`).

use super::super::complete::trace::{Conflict, EventKind};
use super::super::driver::Passes;
use crate::dist::TensorDistAttr;
use crate::ir::{infer::infer_op, OpType, Program, TensorType};

/// Why a planned pipeline cannot take another micro-batch size by re-inference (the caller
/// plans it afresh instead).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RebatchError {
    #[error("completion rejected a split of a dim smaller than its mesh axes")]
    TooSmall,
    #[error("`{0}` is not in the planned program")]
    Missing(String),
    #[error("`{0}` changes rank")]
    Rank(String),
    #[error("a split dim of `{0}` changes size, and a split is uneven at one of the sizes")]
    UnevenSize(String),
    #[error("a split dim of size 1 of `{0}` changes")]
    SplitSizeOne(String),
    #[error("{ty} has a shape {shape:?} of its own")]
    OwnShape { ty: OpType, shape: Vec<i64> },
    #[error("`{0}` re-inferred differs from the model's")]
    Differs(String),
    #[error("a variable id out of range")]
    VarOutOfRange,
    #[error("{op} ({ty}): {error}")]
    Infer {
        op: crate::ir::OpId,
        ty: OpType,
        error: crate::ir::infer::InferError,
    },
}

/// Gives `p` the types of the model at another micro-batch size (`forward`: the model's
/// program built at that size) and `micro_batches` in its options. The partition is left
/// for the caller to redo. On an error `p` is unchanged.
pub fn rebatch(
    p: &mut Passes,
    forward: &Program,
    micro_batches: usize,
) -> Result<(), RebatchError> {
    let uneven = p
        .completed
        .trace
        .events
        .iter()
        .any(|e| e.kind == EventKind::Rejected(Conflict::TooSmall));
    if uneven {
        return Err(RebatchError::TooSmall);
    }
    check_sizes(
        &p.plan.program,
        &p.completed.tensors,
        &p.plan.meshes,
        forward,
    )?;
    check_shape_attrs(&p.plan.program, &p.full.program)?;
    check_shape_attrs(&p.plan.program, &p.backward.program)?;
    let source = |name: &str| forward.var_id(name).map(|id| forward.var(id).ty.clone());
    let full = reinferred(&p.full.program, &source)?;
    // The forward and backward programs are prefixes of the full one (later passes only
    // append): their types are read from it where the variables line up.
    let plan = prefix_of(&p.plan.program, &p.full.program, &full)
        .map_or_else(|| reinferred(&p.plan.program, &source), Ok)?;
    for v in forward.vars() {
        let same = p
            .plan
            .program
            .var_id(&v.name)
            .and_then(|id| plan.get(id.index()))
            .is_some_and(|t| *t == v.ty);
        if !same {
            return Err(RebatchError::Differs(v.name.to_string()));
        }
    }
    let backward = prefix_of(&p.backward.program, &p.full.program, &full)
        .map_or_else(|| reinferred(&p.backward.program, &source), Ok)?;
    p.plan.program.set_types(plan);
    p.backward.program.set_types(backward);
    p.full.program.set_types(full);
    p.plan.options.micro_batches = micro_batches;
    Ok(())
}

/// Every forward variable keeps its rank, and no dim completion split (`attrs`, by
/// variable) changes from or to size 1.
fn check_sizes(
    old: &Program,
    attrs: &[TensorDistAttr],
    meshes: &crate::dist::MeshTable,
    forward: &Program,
) -> Result<(), RebatchError> {
    for v in forward.vars() {
        let Some(id) = old.var_id(&v.name) else {
            return Err(RebatchError::Missing(v.name.to_string()));
        };
        let before = &old.var(id).ty.shape;
        if before.len() != v.ty.shape.len() {
            return Err(RebatchError::Rank(v.name.to_string()));
        }
        let split = |d: usize| {
            attrs
                .get(id.index())
                .is_none_or(|a| a.dims.get(d).is_none_or(|axes| !axes.is_empty()))
        };
        let size_one = before
            .iter()
            .zip(&v.ty.shape)
            .enumerate()
            .any(|(d, (&a, &b))| a != b && (a == 1 || b == 1) && split(d));
        if size_one {
            return Err(RebatchError::SplitSizeOne(v.name.to_string()));
        }
        // The rules (reshape's) and the partition (padding, the uneven mean) decide by
        // whether a split divides its dim: only sizes that all divide keep every choice.
        let uneven = |shape: &[usize]| {
            attrs.get(id.index()).is_some_and(|a| {
                meshes
                    .get(a.mesh)
                    .is_some_and(|mesh| crate::dist::chunk::splits_unevenly(shape, &a.dims, mesh))
            })
        };
        if before != &v.ty.shape && (uneven(before) || uneven(&v.ty.shape)) {
            return Err(RebatchError::UnevenSize(v.name.to_string()));
        }
    }
    Ok(())
}

/// Every `shape` attribute of `program` is a scalar fill's or one the forward has (a
/// gradient op copies its forward op's), so re-inference cannot read a stale size.
fn check_shape_attrs(forward: &Program, program: &Program) -> Result<(), RebatchError> {
    let known: Vec<&[i64]> = forward
        .ops()
        .iter()
        .filter_map(|op| op.attr_ints("shape"))
        .collect();
    for op in program.ops() {
        let Some(shape) = op.attr_ints("shape") else {
            continue;
        };
        let scalar_fill = op.ty == OpType::FillConstant && shape.iter().product::<i64>() <= 1;
        if !scalar_fill && !known.contains(&shape) {
            return Err(RebatchError::OwnShape {
                ty: op.ty,
                shape: shape.to_vec(),
            });
        }
    }
    Ok(())
}

/// `program`'s types from `full_types` (the types of `full`'s variables) when its
/// variables are `full`'s first ones, name for name.
fn prefix_of(
    program: &Program,
    full: &Program,
    full_types: &[TensorType],
) -> Option<Vec<TensorType>> {
    let vars = program.vars();
    let lined_up = vars.len() <= full.vars().len()
        && vars.iter().zip(full.vars()).all(|(a, b)| a.name == b.name);
    lined_up.then(|| full_types.get(..vars.len()).map(<[TensorType]>::to_vec))?
}

/// Every variable's type with the sources (variables no op writes) from `source` where it
/// has them and every op's outputs re-inferred in order.
fn reinferred(
    program: &Program,
    source: &dyn Fn(&str) -> Option<TensorType>,
) -> Result<Vec<TensorType>, RebatchError> {
    let vars = program.vars();
    let mut written = vec![false; vars.len()];
    for op in program.ops() {
        for v in op.all_outputs() {
            if let Some(w) = written.get_mut(v.index()) {
                *w = true;
            }
        }
    }
    let mut types: Vec<TensorType> = vars
        .iter()
        .zip(&written)
        .map(|(v, &w)| match w {
            true => v.ty.clone(),
            false => source(&v.name).unwrap_or_else(|| v.ty.clone()),
        })
        .collect();
    for (i, op) in program.ops().iter().enumerate() {
        let inferred = {
            let inputs = op
                .inputs
                .iter()
                .map(|slot| slot.iter().map(|v| types.get(v.index())).collect())
                .collect::<Option<Vec<Vec<&TensorType>>>>()
                .ok_or(RebatchError::VarOutOfRange)?;
            infer_op(op, &inputs).map_err(|error| RebatchError::Infer {
                op: crate::ir::OpId(i as u32),
                ty: op.ty,
                error,
            })?
        };
        for (slot, slot_types) in op.outputs.iter().zip(inferred) {
            for (v, t) in slot.iter().zip(slot_types) {
                *types
                    .get_mut(v.index())
                    .ok_or(RebatchError::VarOutOfRange)? = t;
            }
        }
    }
    Ok(types)
}
