//! Parameters read on several pipeline stages, tied as Megatron ties GPT's word embedding
//! (read by the lookup on the first stage and by the logits on the last): each later stage
//! that reads the parameter holds its own copy, `wte@TIED@7` on stage 7, initialised to the
//! same values; each stage accumulates its own share of the gradient; at the start of the
//! optimizer phase the shares are summed over the stages that hold a copy (an all-reduce
//! in the rank programs, Megatron's "embedding group"), and every copy takes the same
//! update, so the copies stay equal step after step.
//!
//! In the serial program the tie is two ops in namescope `/auto_parallel/tied_parameter`:
//!
//! ```text
//! op sum(X=[wte@GRAD, wte@TIED@7@GRAD]) -> (Out=wte@GRAD)
//! op assign(X=wte@GRAD) -> (Out=wte@TIED@7@GRAD)
//! ```
//!
//! so the serial step is the untied model's step exactly, and verification compares every
//! copy with it. The partitioner lowers the pair to one all-reduce (SUM) of each stage's
//! own gradient over the tied stages (`partition::sync::tied_sum`). The global norm counts
//! the tied gradient once (its copies are left out of the sum of squares), as Megatron's
//! `param_is_not_shared` does.
//!
//! Paddle's static planner would instead move the parameter between the stage meshes
//! (a send of the weight forward and of its gradient back, per micro-batch); the copy
//! and one all-reduce per step is what Megatron and Paddle's own fleet pipeline
//! (`SharedLayerDesc`) do, and it costs one gradient's bytes per step.

use super::stages::StageError;
use crate::dist::Stages;
use crate::ir::{VarId, VarKind};
use crate::plan::{Annotation, Plan};

/// What a tied copy's name puts between the parameter's name and the stage.
pub const TIED_MARK: &str = "@TIED@";

/// The parameter a tied copy copies (`wte` for `wte@TIED@7`), or `None` for any other name.
pub fn tied_base(name: &str) -> Option<&str> {
    name.split_once(TIED_MARK).map(|(base, _)| base)
}

/// A parameter read on several pipeline stages and its copies, one per later stage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tie {
    pub param: VarId,
    pub copies: Vec<VarId>,
}

/// Gives every parameter read by forward ops on several physical stages a copy per later
/// stage (the one its first reader is on keeps the parameter), renames the later stages'
/// reads to their copy, and annotates each copy as its parameter is annotated. Returns the
/// ties (none without a pipeline).
pub fn tie_parameters(plan: &mut Plan) -> Result<Vec<Tie>, StageError> {
    let Some(mesh) = plan.mesh() else {
        return Ok(Vec::new());
    };
    let stages = Stages::of(mesh, plan.options.chunks);
    if !stages.is_pipelined() {
        return Ok(Vec::new());
    }
    let op_stage = super::stages::forward_stages(plan, stages.virtual_count())?;
    // Per parameter: the physical stages that read it, the first reader's first.
    let mut readers: Vec<Vec<usize>> = vec![Vec::new(); plan.program.vars().len()];
    for (op, &k) in plan.program.ops().iter().zip(&op_stage) {
        let physical = stages.split(k).0;
        for v in op.all_inputs() {
            let list = &mut readers[v.index()];
            if plan.program.var(v).kind == VarKind::Parameter && !list.contains(&physical) {
                list.push(physical);
            }
        }
    }
    let mut ties = Vec::new();
    for (param, on) in readers.into_iter().enumerate() {
        if on.len() < 2 {
            continue;
        }
        let param = VarId(param as u32);
        let mut copies = Vec::new();
        for &stage in &on[1..] {
            let copy = declare_copy(plan, param, stage)?;
            for (i, &k) in op_stage.iter().enumerate() {
                if stages.split(k).0 == stage {
                    rename_input(plan, i, param, copy);
                }
            }
            copies.push(copy);
        }
        ties.push(Tie { param, copies });
    }
    Ok(ties)
}

/// Declares `param`'s copy on `stage`, annotated as `param` is.
fn declare_copy(plan: &mut Plan, param: VarId, stage: usize) -> Result<VarId, StageError> {
    let var = plan.program.var(param).clone();
    let name = format!("{}{TIED_MARK}{stage}", var.name);
    let copy = plan
        .program
        .declare(&name, var.ty, VarKind::Parameter)
        .map_err(|e| StageError::Tie(e.to_string()))?;
    let annotated: Vec<Annotation> = plan
        .annotations
        .iter()
        .filter(|a| a.var == param)
        .map(|a| Annotation {
            var: copy,
            attr: a.attr.clone(),
        })
        .collect();
    plan.annotations.extend(annotated);
    Ok(copy)
}

/// Op `i` reads `to` wherever it read `from`.
fn rename_input(plan: &mut Plan, i: usize, from: VarId, to: VarId) {
    let reads = plan
        .program
        .ops()
        .get(i)
        .is_some_and(|op| op.all_inputs().any(|v| v == from));
    if !reads {
        return;
    }
    if let Some(op) = plan.program.op_mut(i) {
        for slot in op.inputs.iter_mut() {
            for v in slot.iter_mut() {
                if *v == from {
                    *v = to;
                }
            }
        }
    }
}
