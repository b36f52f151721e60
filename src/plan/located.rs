//! Errors that say what in the plan they are about. Every error of the core that a plan can
//! cause names its subject (an op, a variable, an annotation, the options, the mesh) as a
//! typed value; the shells turn it into `FILE:LINE:COL` through the plan's source map, so no
//! message is ever read back for a position.

use super::PlanSubject;
use std::fmt;

/// An error with the part of the plan it concerns (`None`: the plan as a whole).
pub trait Located: fmt::Display {
    fn subject(&self) -> Option<PlanSubject>;
}

/// A core error as the shells carry it: its message and its subject, taken from the typed
/// error where it was raised (for layers that wrap errors of several kinds).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanError {
    pub subject: Option<PlanSubject>,
    pub message: String,
}

impl PlanError {
    /// `e`'s subject and message, the message after `context` (`"planning fails"`).
    pub fn from_located(e: &dyn Located, context: Option<&str>) -> PlanError {
        PlanError {
            subject: e.subject(),
            message: match context {
                Some(c) => format!("{c}: {e}"),
                None => e.to_string(),
            },
        }
    }

    /// An error about the plan as a whole.
    pub fn whole(message: impl Into<String>) -> PlanError {
        PlanError {
            subject: None,
            message: message.into(),
        }
    }
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl Located for PlanError {
    fn subject(&self) -> Option<PlanSubject> {
        self.subject.clone()
    }
}

impl Located for super::PlanIssue {
    fn subject(&self) -> Option<PlanSubject> {
        Some(self.subject.clone())
    }
}

impl Located for crate::ir::VerifyError {
    fn subject(&self) -> Option<PlanSubject> {
        Some(PlanSubject::from(&self.subject))
    }
}

impl From<&crate::ir::Subject> for PlanSubject {
    fn from(s: &crate::ir::Subject) -> PlanSubject {
        match s {
            crate::ir::Subject::Op(id) => PlanSubject::Op(*id),
            crate::ir::Subject::Var(name) => PlanSubject::Var(name.clone()),
        }
    }
}

impl Located for crate::ir::ProgramError {
    fn subject(&self) -> Option<PlanSubject> {
        match self {
            crate::ir::ProgramError::DuplicateVar(name)
            | crate::ir::ProgramError::UnknownVar(name) => Some(PlanSubject::Var(name.clone())),
            crate::ir::ProgramError::Infer { .. }
            | crate::ir::ProgramError::InputSlots { .. }
            | crate::ir::ProgramError::OutputNames { .. } => None,
        }
    }
}
