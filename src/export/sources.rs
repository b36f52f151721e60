//! `SOURCES`: every variable a step reads before writing (inputs, labels, parameters,
//! optimizer state), with its global shape, dtype and the recipe of its seeded initial
//! value (`exec::init::init_recipe`, the one definition the executor uses too).

use super::py;
use super::ExportError;
use crate::exec::init::{init_recipe, InitOptions, InitRecipe};
use crate::ir::VarKind;
use crate::passes::driver::Passes;

/// The `SOURCES = {...}` statement.
pub fn table(p: &Passes, init: &InitOptions) -> Result<String, ExportError> {
    let program = &p.full.program;
    let mut out = String::from(
        "# Every variable the step reads before writing: global shape, dtype, and how its\n\
         # initial value is drawn (\"uniform\": bound * (2u - 1); \"ints\": floor(u * hi);\n\
         # \"const\"), u being ShardLab's seeded uniform numbers for the variable's name\n\
         # (a tied copy `w@TIED@k` takes w's).\n\
         SOURCES = {\n",
    );
    for v in program.vars().iter().filter(|v| v.kind.is_source()) {
        let recipe = match init_recipe(program, v, init) {
            Some(InitRecipe::Ints { hi, .. }) => format!("(\"ints\", {hi}.0)"),
            Some(InitRecipe::Uniform { bound, .. }) => {
                format!("(\"uniform\", {})", py::float(bound))
            }
            Some(InitRecipe::Const(c)) => format!("(\"const\", {})", py::float(c)),
            None => {
                return Err(ExportError::Plan(format!(
                    "`{}` is a source variable without an initial value",
                    v.name
                )))
            }
        };
        // With micro-batches an input is the whole batch (`exec::run_pipe`): M times the
        // program's rows, micro-batch i taking the i-th block.
        let mut shape = v.ty.shape.to_vec();
        if p.micro_batches() > 1 && matches!(v.kind, VarKind::Input | VarKind::Label) {
            if let Some(rows) = shape.first_mut() {
                *rows *= p.micro_batches();
            }
        }
        out.push_str(&format!(
            "    {}: ({}, {}, {recipe}),\n",
            py::string(&v.name),
            py::ints(shape.iter()),
            py::string(v.ty.dtype.name()),
        ));
    }
    out.push_str("}\n");
    Ok(out)
}
