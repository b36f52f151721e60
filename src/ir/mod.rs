//! The program IR: variables, operators with named slots and typed attributes, shape and
//! dtype inference, the canonical text format and the verifier.
//!
//! Architecture invariant: `ir` depends on nothing else in the crate.

pub mod attr;
pub mod builder;
pub mod infer;
pub mod infer_error;
pub mod infer_planner;
pub mod op_type;
pub mod ops;
pub mod program;
pub mod purpose;
pub mod schema;
pub mod text;
pub mod types;
pub mod vars;
pub mod verify;

pub use attr::{Attr, AttrKind, Attrs};
pub use builder::Builder;
pub use op_type::{
    AmpOp, CollectiveOp, ForwardOp, MathOp, OpClass, OpRole, OpType, OptimizerOp, RankLocalOp,
};
pub use ops::{Family, Flops, Formula, InferFn, Numel, OpDef};
pub use program::{layer_of_name, Op, Program, ProgramError, Slot, Slots, ROOT_SCOPE};
pub use purpose::Purpose;
pub use schema::{Arity, AttrSpec, SlotSpec};
pub use text::{parse_program, ParseError};
pub use types::{
    DType, OpId, Shape, TensorType, Var, VarId, VarKind, MAX_ELEMENTS, MAX_ELEMENTS_TEXT,
};
pub use vars::Vars;
pub use verify::{verify_program, Subject, VerifyError};
