//! `stage` statements: which (virtual) pipeline stage a range of ops or a tensor is on.
//!
//! ```text
//! stage 1 ops 12 to 23   # ops 12 to 23 (inclusive, in program order) run on stage 1
//! stage 1 var h          # h is received onto stage 1: its consumers run there
//! ```
//!
//! Stages exist when the mesh has a `pp` axis; with `chunks` model chunks per stage there
//! are `pp × chunks` virtual stages, virtual stage `k` running on stage `k % pp`. Ops not
//! placed take the latest stage of the tensors they read (completion propagates stages
//! forward, `passes::pipeline::stages`).

use super::Plan;
use crate::ir::text::{Cursor, ParseError};
use crate::ir::{OpId, Program, VarId};
use std::fmt;

/// What a `stage` statement places.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StageTarget {
    /// Ops `first..=last`.
    Ops { first: OpId, last: OpId },
    /// A tensor: its consumers run on the stage (Paddle: a tensor annotated on the stage's
    /// mesh).
    Var(VarId),
}

/// One `stage` statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StagePlacement {
    /// The virtual stage.
    pub stage: usize,
    pub target: StageTarget,
}

/// Parses the rest of a `stage` statement: `S ops A to B` or `S var NAME`.
pub fn parse_stage(cur: &mut Cursor, program: &Program) -> Result<StagePlacement, ParseError> {
    let col = cur.col();
    let stage = cur.int("the stage number")?;
    let stage = usize::try_from(stage)
        .ok()
        .filter(|&s| s < crate::dist::pipeline::MAX_VIRTUAL_STAGES)
        .ok_or_else(|| {
            cur.error_at(
                col,
                format!(
                    "stage {stage}: expected a stage from 0 to {}",
                    crate::dist::pipeline::MAX_VIRTUAL_STAGES - 1
                ),
            )
        })?;
    let (what, what_col) = cur.ident("`ops` or `var`")?;
    let target = match what.as_str() {
        "ops" => {
            let first = op_index(cur, program)?;
            if !cur.eat_keyword("to") {
                return Err(cur.expected("`to` between the first and the last op"));
            }
            let last = op_index(cur, program)?;
            if last < first {
                return Err(cur.error(format!(
                    "the op range {} to {} is empty: the first op comes after the last",
                    first.index(),
                    last.index()
                )));
            }
            StageTarget::Ops { first, last }
        }
        "var" => {
            let (name, name_col) = cur.ident("a variable name")?;
            let v = program.var_id(&name).ok_or_else(|| {
                cur.error_at(
                    name_col,
                    format!("unknown variable `{name}` (declare it before placing it)"),
                )
            })?;
            StageTarget::Var(v)
        }
        _ => {
            return Err(cur.error_at(
                what_col,
                format!("expected `ops A to B` or `var NAME` after the stage, found `{what}`"),
            ))
        }
    };
    Ok(StagePlacement { stage, target })
}

/// An op index of the program (`12` or `op12`).
fn op_index(cur: &mut Cursor, program: &Program) -> Result<OpId, ParseError> {
    let col = cur.col();
    let i = cur.int("an op index")?;
    let n = program.ops().len();
    usize::try_from(i)
        .ok()
        .filter(|&i| i < n)
        .map(|i| OpId(i as u32))
        .ok_or_else(|| {
            cur.error_at(
                col,
                format!(
                    "op {i} does not exist: the program has ops 0 to {}",
                    n.max(1) - 1
                ),
            )
        })
}

/// The stage statement as plan text (without the newline).
pub struct StageLine<'a>(pub &'a Plan, pub &'a StagePlacement);

impl fmt::Display for StageLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let StageLine(plan, s) = self;
        match s.target {
            StageTarget::Ops { first, last } => {
                write!(
                    f,
                    "stage {} ops {} to {}",
                    s.stage,
                    first.index(),
                    last.index()
                )
            }
            StageTarget::Var(v) => write!(f, "stage {} var {}", s.stage, plan.program.var(v).name),
        }
    }
}
