//! The program verifier: checks every op and reports all problems, not just the first.
//! Passes run it after they change a program.

use super::attr::AttrKind;
use super::infer::infer_op;
use super::op_type::OpRole;
use super::program::{Op, Program};
use super::schema::Arity;
use super::types::{OpId, TensorType, VarKind};
use serde::Serialize;
use std::fmt;

/// What a verifier problem is about.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Subject {
    Op(OpId),
    Var(String),
}

/// One verifier problem.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct VerifyError {
    pub subject: Subject,
    pub message: String,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.subject {
            Subject::Op(id) => write!(f, "{id}: {}", self.message),
            Subject::Var(name) => write!(f, "variable `{name}`: {}", self.message),
        }
    }
}

/// Checks `program`: slot arities, attributes against the schema, every input defined
/// before use, each variable written once, and declared output types equal to inferred ones.
pub fn verify_program(program: &Program) -> Vec<VerifyError> {
    let mut errors = Vec::new();
    let mut flow = Dataflow::new(program, &mut errors);
    for (i, op) in program.ops().iter().enumerate() {
        let id = OpId(i as u32);
        let mut err = |message: String| {
            errors.push(VerifyError {
                subject: Subject::Op(id),
                message: format!("{}: {message}", op.ty),
            })
        };
        let (in_specs, out_specs) = op.ty.slots();
        if op.inputs.len() != in_specs.len() || op.outputs.len() != out_specs.len() {
            err("slot table does not match the op type's schema".into());
            continue;
        }
        if op
            .all_inputs()
            .chain(op.all_outputs())
            .any(|v| v.index() >= flow.defined.len())
        {
            err("refers to a variable id that does not exist".into());
            continue;
        }
        let arity_ok = check_arity(op, &mut err);
        let attrs_complete = check_attrs(op, &mut err);
        flow.visit(program, id, op, &mut err);
        if !attrs_complete
            || !arity_ok
            || op
                .all_inputs()
                .chain(op.all_outputs())
                .any(|v| flow.oversized[v.index()])
        {
            continue; // inference would only repeat what was just reported
        }
        check_inferred(program, op, &mut err);
    }
    errors
}

/// What the ops so far have defined and written, per variable.
struct Dataflow {
    defined: Vec<bool>,
    writer: Vec<Option<OpId>>,
    /// Variables whose shape has too many elements (reported once, up front; ops that use
    /// them are not inferred).
    oversized: Vec<bool>,
}

impl Dataflow {
    /// Sources (inputs, labels, parameters, optimizer state) start defined; oversized
    /// shapes are reported.
    fn new(program: &Program, errors: &mut Vec<VerifyError>) -> Dataflow {
        let nvars = program.vars().len();
        let mut oversized = vec![false; nvars];
        for (i, v) in program.vars().iter().enumerate() {
            if v.ty.checked_numel().is_none() {
                oversized[i] = true;
                errors.push(VerifyError {
                    subject: Subject::Var(v.name.to_string()),
                    message: format!(
                        "shape {:?} has more elements than a tensor may hold ({}; the product of its dims)",
                        v.ty.shape,
                        crate::ir::MAX_ELEMENTS_TEXT
                    ),
                });
            }
        }
        Dataflow {
            defined: program.vars().iter().map(|v| v.kind.is_source()).collect(),
            writer: vec![None; nvars],
            oversized,
        }
    }

    /// Every input defined before use; every output written once (or updated in place),
    /// and never an input, label or (outside the optimizer) parameter.
    fn visit(&mut self, program: &Program, id: OpId, op: &Op, err: &mut impl FnMut(String)) {
        for v in op.all_inputs() {
            if !self.defined[v.index()] {
                let var = program.var(v);
                err(format!(
                    "input `{}` is used before any op defines it",
                    var.name
                ));
            }
        }
        for v in op.all_outputs() {
            let var = program.var(v);
            // Writing a variable the op also reads is an in-place update (an optimizer on its
            // parameter, a collective on its buffer); so is handing a tied parameter's summed
            // gradient to its copies (`passes::pipeline::tied`, one all-reduce on the ranks);
            // anything else is a second definition.
            let in_place = op.all_inputs().any(|i| i == v)
                || op.purpose() == Some(super::Purpose::TiedParameter);
            match var.kind {
                VarKind::Input | VarKind::Label => err(format!(
                    "writes `{}`, but {} variables are set from outside the program, not by ops",
                    var.name,
                    var.kind.name()
                )),
                VarKind::Parameter
                    if !(op.role == OpRole::Optimize
                        && (in_place || op.purpose() == Some(super::Purpose::Sharding))) =>
                {
                    err(format!(
                        "writes parameter `{}`; only optimizer ops update parameters, in place \
                         (or ZeRO rebuilds one from its shards)",
                        var.name
                    ))
                }
                VarKind::Parameter
                | VarKind::Activation
                | VarKind::Gradient
                | VarKind::OptimizerState => {}
            }
            if let Some(first) = self.writer[v.index()].filter(|_| !in_place) {
                err(format!("writes `{}`, already written by {first}", var.name));
            }
            self.writer[v.index()] = Some(id);
            self.defined[v.index()] = true;
        }
    }
}

/// Checks each slot holds as many variables as its arity allows; returns whether all do.
fn check_arity(op: &Op, err: &mut impl FnMut(String)) -> bool {
    let (in_specs, out_specs) = op.ty.slots();
    let mut ok = true;
    for (specs, slots, what) in [
        (in_specs, &op.inputs, "input"),
        (out_specs, &op.outputs, "output"),
    ] {
        for (spec, vars) in specs.iter().zip(slots) {
            let fits = match spec.arity {
                Arity::One => vars.len() == 1,
                Arity::Optional => vars.len() <= 1,
                Arity::List => !vars.is_empty(),
                Arity::Many => true,
            };
            if !fits {
                let want = match spec.arity {
                    Arity::One => "exactly one variable",
                    Arity::Optional => "at most one variable",
                    Arity::List => "at least one variable",
                    Arity::Many => "any number of variables",
                };
                err(format!(
                    "{what} {} must hold {want}, has {}",
                    spec.name,
                    vars.len()
                ));
                ok = false;
            }
        }
    }
    ok
}

/// Checks the declared output types against the types inferred from the inputs.
fn check_inferred(program: &Program, op: &Op, err: &mut impl FnMut(String)) {
    let (_, out_specs) = op.ty.slots();
    let inputs: Vec<Vec<&TensorType>> = op
        .inputs
        .iter()
        .map(|s| s.iter().map(|&v| &program.var(v).ty).collect())
        .collect();
    match infer_op(op, &inputs) {
        Err(e) => err(e.to_string()),
        Ok(inferred) => {
            for ((spec, vars), types) in out_specs.iter().zip(&op.outputs).zip(&inferred) {
                if vars.len() != types.len() {
                    err(format!(
                        "output {} has {} variables but the op produces {}",
                        spec.name,
                        vars.len(),
                        types.len()
                    ));
                    continue;
                }
                for (&v, t) in vars.iter().zip(types) {
                    let var = program.var(v);
                    if &var.ty != t {
                        err(format!(
                            "output {} `{}` is declared {} but the op produces {}",
                            spec.name, var.name, var.ty, t
                        ));
                    }
                }
            }
        }
    }
}

/// Checks attribute names and kinds; returns whether every required attribute is present.
fn check_attrs(op: &Op, err: &mut impl FnMut(String)) -> bool {
    let schema = op.ty.attr_schema();
    for (name, value) in &op.attrs {
        match schema.iter().find(|s| s.name == name) {
            None => {
                let known: Vec<_> = schema.iter().map(|s| s.name).collect();
                err(format!(
                    "unknown attribute `{name}` (accepted: [{}])",
                    known.join(", ")
                ))
            }
            Some(spec) => {
                let ok = value.kind() == spec.kind
                    || (spec.kind == AttrKind::Float && value.kind() == AttrKind::Int);
                if !ok {
                    err(format!(
                        "attribute `{name}` must be a {}, got {value}",
                        spec.kind.name()
                    ));
                }
            }
        }
    }
    let mut complete = true;
    for spec in schema.iter().filter(|s| s.required) {
        if !op.attrs.contains_key(spec.name) {
            err(format!("attribute `{}` is required", spec.name));
            complete = false;
        }
    }
    complete
}
