//! The registry: every op type of the IR and its SPMD rule, with the op's variables in the
//! rule's argument order. The `match` is exhaustive, so a new op type needs a rule.

use super::{Rule, SpmdError};
use crate::dist::ReduceType;
use crate::ir::infer::{axis, reduce_axes, reshape_target, split_sections};
use crate::ir::{Family, ForwardOp, Op, OpType, Program, VarId};

/// Where a rule argument sits in the op: (slot index, index within the slot).
pub type SlotPos = (usize, usize);

/// An op's rule and its variables in the rule's order, with their slot positions.
#[derive(Clone, Debug, PartialEq)]
pub struct Binding {
    pub rule: Rule,
    pub inputs: Vec<VarId>,
    pub outputs: Vec<VarId>,
    pub input_pos: Vec<SlotPos>,
    pub output_pos: Vec<SlotPos>,
}

fn positions(slots: &[crate::ir::Slot]) -> Vec<SlotPos> {
    slots
        .iter()
        .enumerate()
        .flat_map(|(s, vars)| (0..vars.len()).map(move |i| (s, i)))
        .collect()
}

/// `rule` bound to `op`'s variables in slot order.
fn binding(op: &Op, rule: Rule) -> Binding {
    Binding {
        rule,
        inputs: op.all_inputs().collect(),
        outputs: op.all_outputs().collect(),
        input_pos: positions(&op.inputs),
        output_pos: positions(&op.outputs),
    }
}

/// The rule of `op` (attributes resolved against the program's shapes).
pub fn rule_for(op: &Op, program: &Program) -> Result<Binding, SpmdError> {
    let err = |error| SpmdError::Attr { op: op.ty, error };
    let first_input = op.all_inputs().next().map(|v| &program.var(v).ty);
    let rank = first_input.map_or(0, |t| t.rank());
    let with = |rule: Rule| binding(op, rule);
    let binding = match op.ty {
        OpType::Forward(f) => forward_rule(op, program, f)?,
        OpType::FillConstant => with(Rule::Source),
        OpType::Sqrt => with(Rule::Unary { outputs: 1 }),
        OpType::ElementwiseMax => with(Rule::Elementwise {
            keep_x_partial: false,
        }),
        OpType::SquaredL2Norm => with(Rule::Reduce {
            axes: (0..rank).collect(),
            keep_dim: false,
            reduce: ReduceType::Sum,
        }),
        OpType::Slice => {
            let axes = op.attr_ints("axes").unwrap_or(&[]);
            let axes = axes
                .iter()
                .map(|&a| axis(a, rank, "axes"))
                .collect::<Result<Vec<_>, _>>()
                .map_err(err)?;
            with(Rule::Slice {
                axes,
                decrease: Vec::new(),
            })
        }
        OpType::Grad(_)
        | OpType::Sum
        | OpType::Optimizer(_)
        | OpType::Amp(_)
        | OpType::Collective(_)
        | OpType::CEmbedding
        | OpType::CEmbeddingGrad
        | OpType::CSoftmaxWithCrossEntropy
        | OpType::CSoftmaxWithCrossEntropyGrad
        | OpType::FlattenPad
        | OpType::Pad
        | OpType::UnpadReshape
        | OpType::CoalesceTensor
        | OpType::UncoalesceTensor
        | OpType::RingAttnBlock
        | OpType::RingAttnBlockGrad => return Err(SpmdError::PlannerOp(op.ty)),
    };
    Ok(binding)
}

/// An attribute that sizes or places something, so may not be negative.
fn non_negative(op: &Op, attr: &'static str, default: i64) -> Result<usize, SpmdError> {
    let value = op.attr_int(attr, default);
    usize::try_from(value).map_err(|_| SpmdError::Negative {
        op: op.ty,
        attr,
        value,
    })
}

/// A lookup's rule, which takes its inputs in Paddle's order (ids, then the table).
fn embedding_binding(op: &Op) -> Binding {
    Binding {
        rule: Rule::Embedding {
            padding_idx: op.attr_int("padding_idx", -1),
        },
        inputs: op
            .input("Ids")
            .iter()
            .chain(op.input("W"))
            .copied()
            .collect(),
        input_pos: vec![(1, 0), (0, 0)],
        ..binding(op, Rule::Source)
    }
}

/// A Mixture-of-Experts op's rule: its tensors' letters and its group size.
fn moe_rule(op: &Op, f: ForwardOp) -> Rule {
    Rule::Moe {
        letters: if f == ForwardOp::MoeDispatch {
            super::moe::DISPATCH
        } else {
            super::moe::COMBINE
        },
        group_size: op.attr_int("group_size", 1).max(1) as usize,
    }
}

/// The rule of a forward op.
fn forward_rule(op: &Op, program: &Program, f: ForwardOp) -> Result<Binding, SpmdError> {
    let err = |error| SpmdError::Attr { op: op.ty, error };
    let first_input = op.all_inputs().next().map(|v| &program.var(v).ty);
    let rank = first_input.map_or(0, |t| t.rank());
    let with = |rule: Rule| binding(op, rule);
    let axis0 = || axis(op.attr_int("axis", 0), rank, "axis").map_err(err);
    Ok(match f.family() {
        Family::Matmul => with(Rule::Matmul {
            trans_x: op.attr_bool("trans_x", false),
            trans_y: op.attr_bool("trans_y", false),
        }),
        // A product keeps X's partial sums: (Σ x_i)·y = Σ (x_i·y).
        Family::ElementwiseBinary => with(Rule::Elementwise {
            keep_x_partial: f == ForwardOp::ElementwiseMul,
        }),
        Family::ElementwiseUnary => with(Rule::Unary {
            outputs: op.all_outputs().count(),
        }),
        Family::Softmax => with(Rule::Softmax {
            axes: vec![axis(op.attr_int("axis", -1), rank, "axis").map_err(err)?],
        }),
        Family::MaskedSoftmax => with(Rule::Softmax {
            axes: vec![rank.saturating_sub(2), rank.saturating_sub(1)],
        }),
        Family::Norm => {
            let begin_norm_axis = non_negative(op, "begin_norm_axis", 1)?;
            with(if f == ForwardOp::RmsNorm {
                Rule::RmsNorm { begin_norm_axis }
            } else {
                Rule::LayerNorm {
                    begin_norm_axis,
                    has_scale: !op.input("Scale").is_empty(),
                    has_bias: !op.input("Bias").is_empty(),
                }
            })
        }
        Family::Embedding => embedding_binding(op),
        Family::Reshape => {
            let x = first_input.ok_or(SpmdError::MissingInput(op.ty))?;
            let target = reshape_target(x, op.attr_ints("shape").unwrap_or(&[])).map_err(err)?;
            with(Rule::Reshape { target })
        }
        Family::Transpose => {
            let perm = op.attr_ints("axis").unwrap_or(&[]);
            let perm = perm
                .iter()
                .map(|&p| axis(p, rank, "axis"))
                .collect::<Result<Vec<_>, _>>()
                .map_err(err)?;
            with(Rule::Transpose { perm })
        }
        Family::Split => {
            let x = first_input.ok_or(SpmdError::MissingInput(op.ty))?;
            let (a, sections) = split_sections(op, x).map_err(err)?;
            with(Rule::Split {
                axis: a,
                outputs: sections.len(),
            })
        }
        Family::Concat => with(Rule::Concat { axis: axis0()? }),
        Family::Reduce => {
            let reduce = if op.ty == OpType::ReduceSum {
                ReduceType::Sum
            } else {
                ReduceType::Avg
            };
            with(Rule::Reduce {
                axes: reduce_axes(op, rank).map_err(err)?,
                keep_dim: op.attr_bool("keep_dim", false),
                reduce,
            })
        }
        Family::Mean => with(Rule::MeanAll),
        Family::Rotary => with(Rule::Rotary),
        Family::Attention => with(super::attention::rule(op)),
        Family::Repeat => with(Rule::Repeat { axis: axis0()? }),
        Family::MoeDispatch | Family::MoeCombine => with(moe_rule(op, f)),
        Family::CrossEntropy => with(Rule::CrossEntropy {
            axis: axis(op.attr_int("axis", -1), rank, "axis").map_err(err)?,
            soft_label: op.attr_bool("soft_label", false),
        }),
    })
}
