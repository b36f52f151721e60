//! The canonical text form of a program: its `Display`. Parsing this text gives the same
//! program back, and printing that gives the same text.

use crate::ir::attr::write_quoted;
use crate::ir::op_type::OpRole;
use crate::ir::program::{Op, Program, ROOT_SCOPE};
use crate::ir::schema::{Arity, SlotSpec};
use crate::ir::types::Var;
use std::fmt::{self, Write};

/// Writes one `var` statement.
pub fn write_var(f: &mut impl Write, var: &Var) -> fmt::Result {
    write!(f, "var {}: {} {}", var.name, var.ty, var.kind.name())?;
    if var.persistable {
        f.write_str(" persistable")?;
    }
    Ok(())
}

/// Writes one `op` statement.
pub fn write_op(f: &mut impl Write, program: &Program, op: &Op) -> fmt::Result {
    write!(f, "op {}", op.ty)?;
    write_slots(f, program, op.ty.input_slots(), &op.inputs)?;
    f.write_str(" -> ")?;
    write_slots(f, program, op.ty.output_slots(), &op.outputs)?;
    if !op.attrs.is_empty() {
        f.write_str(" {")?;
        for (i, (k, v)) in op.attrs.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{k}={v}")?;
        }
        f.write_str("}")?;
    }
    if op.role != OpRole::Forward {
        write!(f, " role={}", op.role.name())?;
    }
    if op.namescope != ROOT_SCOPE {
        f.write_str(" scope=")?;
        write_quoted(f, &op.namescope)?;
    }
    Ok(())
}

fn write_slots(
    f: &mut impl Write,
    program: &Program,
    specs: &[SlotSpec],
    slots: &[crate::ir::Slot],
) -> fmt::Result {
    f.write_str("(")?;
    let mut first = true;
    for (spec, vars) in specs.iter().zip(slots) {
        if vars.is_empty() {
            continue;
        }
        if !first {
            f.write_str(", ")?;
        }
        first = false;
        write!(f, "{}=", spec.name)?;
        // A list slot always prints as a list, so one-element lists round-trip.
        let as_list = vars.len() > 1 || matches!(spec.arity, Arity::List | Arity::Many);
        if as_list {
            f.write_str("[")?;
        }
        for (i, v) in vars.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(
                program
                    .vars()
                    .get(v.index())
                    .map_or("<invalid>", |var| &var.name),
            )?;
        }
        if as_list {
            f.write_str("]")?;
        }
    }
    f.write_str(")")
}

impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for var in self.vars() {
            write_var(f, var)?;
            f.write_char('\n')?;
        }
        if !self.vars().is_empty() && !self.ops().is_empty() {
            f.write_char('\n')?;
        }
        for op in self.ops() {
            write_op(f, self, op)?;
            f.write_char('\n')?;
        }
        Ok(())
    }
}
