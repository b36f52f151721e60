//! Autodiff (Paddle's `append_backward`): a `<type>_grad` op for every forward op on a path
//! from a parameter to the loss, in reverse order, with `@GRAD` variables; a variable used
//! by several ops gets its contributions (`x@GRAD@RENAME@k`) added by a `sum` op. Inputs
//! and labels get no gradient.
//!
//! ```text
//! op matmul_v2(X=x, Y=w) -> (Out=y)
//! ...
//! op matmul_v2_grad(X=x, Y=w, Out@GRAD=y@GRAD) -> (Y@GRAD=w@GRAD) role=backward
//! ```

use crate::ir::{
    Attr, DType, Op, OpId, OpRole, OpType, Program, ProgramError, Slot, TensorType, VarId, VarKind,
};
use rustc_hash::FxHashMap as HashMap;

/// Why the backward pass failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum BackwardError {
    #[error("the program has no loss: mark the op computing it with role=loss")]
    NoLoss,
    #[error("the loss `{0}` must be a scalar (one element), got {1}")]
    LossNotScalar(String, TensorType),
    #[error("no parameter reaches the loss, so there is nothing to train")]
    NothingToTrain,
    #[error("op{op} ({ty}) has no gradient, but a parameter reaches the loss through it; its gradient would be silently lost")]
    NotDifferentiable { op: usize, ty: &'static str },
    #[error("{0}")]
    Program(#[from] ProgramError),
}

impl crate::plan::Located for BackwardError {
    fn subject(&self) -> Option<crate::plan::PlanSubject> {
        use crate::plan::PlanSubject;
        match self {
            BackwardError::LossNotScalar(name, _) => Some(PlanSubject::Var(name.clone())),
            BackwardError::NotDifferentiable { op, .. } => {
                Some(PlanSubject::Op(crate::ir::OpId(*op as u32)))
            }
            BackwardError::NoLoss | BackwardError::NothingToTrain => None,
            BackwardError::Program(e) => crate::plan::Located::subject(e),
        }
    }
}

/// The program with its backward ops appended, and where things are.
#[derive(Clone, Debug)]
pub struct Backward {
    pub program: Program,
    /// The loss variable.
    pub loss: VarId,
    /// For each grad op (by id), the forward op it differentiates.
    pub forward_of: HashMap<OpId, OpId>,
    /// Each parameter's final gradient, in parameter order.
    pub param_grads: Vec<(VarId, VarId)>,
    /// Index of the first backward op.
    pub first_backward_op: usize,
}

/// The forward outputs a grad kernel reads besides the forward inputs.
pub fn forward_outputs_needed(ty: OpType) -> &'static [&'static str] {
    ty.as_forward().map_or(&[], |f| f.def().saves)
}

/// The loss: the output of the last op with role `loss`.
pub fn find_loss(program: &Program) -> Result<VarId, BackwardError> {
    let op = program
        .ops()
        .iter()
        .rev()
        .find(|o| o.role == OpRole::Loss)
        .ok_or(BackwardError::NoLoss)?;
    let loss = op.all_outputs().next().ok_or(BackwardError::NoLoss)?;
    let ty = &program.var(loss).ty;
    if ty.numel() != 1 {
        return Err(BackwardError::LossNotScalar(
            program.var(loss).name.to_string(),
            ty.clone(),
        ));
    }
    Ok(loss)
}

/// Which variables need a gradient: float, downstream of a parameter, upstream of the loss.
fn needs_grad(program: &Program, loss: VarId) -> Vec<bool> {
    let n = program.vars().len();
    let mut from_param: Vec<bool> = program
        .vars()
        .iter()
        .map(|v| v.kind == VarKind::Parameter)
        .collect();
    for op in program.ops() {
        if op.ty.grad().is_some() && op.all_inputs().any(|v| from_param[v.index()]) {
            for v in op.all_outputs() {
                from_param[v.index()] = program.var(v).ty.dtype.is_float();
            }
        }
    }
    let mut to_loss = vec![false; n];
    to_loss[loss.index()] = true;
    for op in program.ops().iter().rev() {
        if op.all_outputs().any(|v| to_loss[v.index()]) {
            for v in op.all_inputs() {
                to_loss[v.index()] = true;
            }
        }
    }
    (0..n)
        .map(|i| from_param[i] && to_loss[i] && program.vars()[i].ty.dtype.is_float())
        .collect()
}

struct Grads {
    /// Contributions to each variable's gradient, in the order they were produced.
    parts: HashMap<VarId, Vec<VarId>>,
    /// How many grad ops will contribute to each variable's gradient.
    expected: HashMap<VarId, usize>,
    /// The final gradient of each variable, once summed.
    total: HashMap<VarId, VarId>,
}

/// An op without a gradient between a parameter and the loss (the planner's math ops, such
/// as `elementwise_max`, written in a plan): the parameter's gradient would stop there.
fn check_differentiable(program: &Program, loss: VarId) -> Result<(), BackwardError> {
    let n = program.vars().len();
    let mut from_param: Vec<bool> = program
        .vars()
        .iter()
        .map(|v| v.kind == VarKind::Parameter)
        .collect();
    for op in program.ops() {
        if op.all_inputs().any(|v| from_param[v.index()]) {
            for v in op.all_outputs() {
                from_param[v.index()] = true;
            }
        }
    }
    let mut to_loss = vec![false; n];
    to_loss[loss.index()] = true;
    let mut blocking = None;
    for (i, op) in program.ops().iter().enumerate().rev() {
        if op.all_outputs().any(|v| to_loss[v.index()]) {
            for v in op.all_inputs() {
                to_loss[v.index()] = true;
            }
            let float_input = op
                .all_inputs()
                .any(|v| from_param[v.index()] && program.var(v).ty.dtype.is_float());
            if op.ty.grad().is_none() && float_input {
                blocking = Some((i, op.ty.name()));
            }
        }
    }
    match blocking {
        Some((op, ty)) => Err(BackwardError::NotDifferentiable { op, ty }),
        None => Ok(()),
    }
}

/// Appends the backward ops of `program` (which must have a loss op).
pub fn append_backward(forward: &Program) -> Result<Backward, BackwardError> {
    let loss = find_loss(forward)?;
    check_differentiable(forward, loss)?;
    let need = needs_grad(forward, loss);
    let mut program = forward.clone();
    let first_backward_op = program.ops().len();
    let mut grads = Grads {
        parts: HashMap::default(),
        expected: HashMap::default(),
        total: HashMap::default(),
    };
    let active = |op: &Op| {
        op.ty.grad().is_some()
            && op.all_inputs().any(|v| need[v.index()])
            && op.all_outputs().any(|v| need[v.index()] || v == loss)
    };
    for op in forward.ops().iter().filter(|o| active(o)) {
        for v in op.all_inputs().filter(|v| need[v.index()]) {
            *grads.expected.entry(v).or_default() += 1;
        }
    }
    if !forward
        .vars()
        .iter()
        .enumerate()
        .any(|(i, v)| v.kind == VarKind::Parameter && need[i])
    {
        return Err(BackwardError::NothingToTrain);
    }
    // d loss / d loss = 1.
    let loss_var = forward.var(loss).clone();
    let loss_grad = program.declare(
        &format!("{}@GRAD", loss_var.name),
        loss_var.ty.clone(),
        VarKind::Gradient,
    )?;
    let mut fill = Op::new(OpType::FillConstant);
    fill.role = OpRole::Backward;
    fill.outputs = crate::slots![[loss_grad]];
    fill.attrs.insert(
        "shape".into(),
        Attr::Ints(loss_var.ty.shape.iter().map(|&d| d as i64).collect()),
    );
    fill.attrs.insert("value".into(), Attr::Float(1.0));
    fill.attrs
        .insert("dtype".into(), Attr::Str(loss_var.ty.dtype.name().into()));
    program.push_op(fill);
    grads.total.insert(loss, loss_grad);
    let mut forward_of = HashMap::default();
    for (i, op) in forward.ops().iter().enumerate().rev() {
        if !active(op) {
            continue;
        }
        let Some(grad_ty) = op.ty.grad() else {
            continue;
        };
        let mut g = Op::new(grad_ty);
        g.role = OpRole::Backward;
        g.namescope = op.namescope.clone();
        g.attrs = op.attrs.clone();
        let (fwd_in, fwd_out) = op.ty.slots();
        for (k, vars) in op.inputs.iter().enumerate() {
            g.inputs[k] = vars.clone();
        }
        let needed = forward_outputs_needed(op.ty);
        for (k, spec) in fwd_out.iter().enumerate() {
            if needed.contains(&spec.name) {
                g.inputs[fwd_in.len() + k] = op.outputs[k].clone();
            }
        }
        let mut has_out_grad = false;
        for (k, vars) in op.outputs.iter().enumerate() {
            let mut list = Vec::new();
            for &v in vars {
                match total_grad(&mut program, &mut grads, v)? {
                    Some(gv) => {
                        has_out_grad = true;
                        list.push(gv);
                    }
                    // A list output without a gradient (an unused split piece) gets zeros.
                    None if vars.len() > 1 => list.push(zeros(&mut program, v)?),
                    None => {}
                }
            }
            g.inputs[fwd_in.len() + fwd_out.len() + k] = Slot::from_vec(list);
        }
        if !has_out_grad {
            continue;
        }
        for (k, vars) in op.inputs.iter().enumerate() {
            if vars.iter().any(|v| need[v.index()]) {
                let mut outs = Vec::new();
                for &v in vars {
                    outs.push(if need[v.index()] {
                        new_part(&mut program, &mut grads, v)?
                    } else {
                        discard(&mut program, v)?
                    });
                }
                g.outputs[k] = Slot::from_vec(outs);
            }
        }
        let id = program.push_op(g);
        forward_of.insert(id, OpId(i as u32));
    }
    let mut param_grads = Vec::new();
    for (i, v) in forward.vars().iter().enumerate() {
        if v.kind == VarKind::Parameter && need[i] {
            let p = VarId(i as u32);
            if let Some(g) = total_grad(&mut program, &mut grads, p)? {
                param_grads.push((p, g));
            }
        }
    }
    Ok(Backward {
        program,
        loss,
        forward_of,
        param_grads,
        first_backward_op,
    })
}

/// A fresh variable for one contribution to `v`'s gradient.
fn new_part(program: &mut Program, grads: &mut Grads, v: VarId) -> Result<VarId, BackwardError> {
    let var = program.var(v).clone();
    let parts = grads.parts.entry(v).or_default();
    let name = if grads.expected.get(&v).copied().unwrap_or(1) <= 1 {
        format!("{}@GRAD", var.name)
    } else {
        format!("{}@GRAD@RENAME@{}", var.name, parts.len())
    };
    let id = program.declare(&name, var.ty, VarKind::Gradient)?;
    parts.push(id);
    Ok(id)
}

/// A variable for a gradient nobody needs (a list input of which only some pieces train).
fn discard(program: &mut Program, v: VarId) -> Result<VarId, BackwardError> {
    let var = program.var(v).clone();
    Ok(program.declare(
        &format!("{}@GRAD@UNUSED", var.name),
        var.ty,
        VarKind::Gradient,
    )?)
}

/// Zeros standing in for a missing gradient of `v`.
fn zeros(program: &mut Program, v: VarId) -> Result<VarId, BackwardError> {
    let var = program.var(v).clone();
    let id = program.declare(
        &format!("{}@GRAD@ZERO", var.name),
        var.ty.clone(),
        VarKind::Gradient,
    )?;
    let mut fill = Op::new(OpType::FillConstant);
    fill.role = OpRole::Backward;
    fill.outputs = crate::slots![[id]];
    fill.attrs.insert(
        "shape".into(),
        Attr::Ints(var.ty.shape.iter().map(|&d| d as i64).collect()),
    );
    fill.attrs.insert("value".into(), Attr::Float(0.0));
    fill.attrs
        .insert("dtype".into(), Attr::Str(var.ty.dtype.name().into()));
    program.push_op(fill);
    Ok(id)
}

/// The whole gradient of `v`: its only contribution, or the `sum` of all of them.
fn total_grad(
    program: &mut Program,
    grads: &mut Grads,
    v: VarId,
) -> Result<Option<VarId>, BackwardError> {
    if let Some(&g) = grads.total.get(&v) {
        return Ok(Some(g));
    }
    let parts = grads.parts.get(&v).cloned().unwrap_or_default();
    let total = match parts.as_slice() {
        [] => return Ok(None),
        [one] if grads.expected.get(&v).copied().unwrap_or(1) <= 1 => *one,
        many => {
            let var = program.var(v).clone();
            let id = program.declare(&format!("{}@GRAD", var.name), var.ty, VarKind::Gradient)?;
            let mut sum = Op::new(OpType::Sum);
            sum.role = OpRole::Backward;
            sum.inputs = crate::slots![many.to_vec()];
            sum.outputs = crate::slots![[id]];
            program.push_op(sum);
            id
        }
    };
    grads.total.insert(v, total);
    Ok(Some(total))
}

/// The dtype of gradients (the loss's).
pub fn grad_dtype(program: &Program, loss: VarId) -> DType {
    program.var(loss).ty.dtype
}
