//! The value types of the IR: element types, variable kinds, variables and typed ids.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Element type of a tensor. `i64` is for ids and hard labels only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DType {
    F32,
    F64,
    I64,
}

impl DType {
    /// All element types, in the order they are documented.
    pub const ALL: [DType; 3] = [DType::F32, DType::F64, DType::I64];

    /// The name used in the text format (`f32`, `f64`, `i64`).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I64 => "i64",
        }
    }

    /// Parses a text-format name.
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }

    /// Whether gradients can flow through values of this type.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64)
    }

    /// Size of one element in bytes (for the communication and memory model).
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F64 | DType::I64 => 8,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What role a variable plays in training. Decides which variables get gradients,
/// which are fed, and which survive across steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum VarKind {
    /// Fed data (no gradient).
    Input,
    /// Fed target (no gradient).
    Label,
    /// Trainable weight.
    Parameter,
    /// Produced by a forward op.
    Activation,
    /// Produced by the backward pass (`@GRAD`).
    Gradient,
    /// Optimizer state: moments, learning rate, loss scaling.
    OptimizerState,
}

impl VarKind {
    /// All kinds, in the order they are documented.
    pub const ALL: [VarKind; 6] = [
        VarKind::Input,
        VarKind::Label,
        VarKind::Parameter,
        VarKind::Activation,
        VarKind::Gradient,
        VarKind::OptimizerState,
    ];

    /// The keyword used in the text format.
    pub fn name(self) -> &'static str {
        match self {
            VarKind::Input => "input",
            VarKind::Label => "label",
            VarKind::Parameter => "parameter",
            VarKind::Activation => "activation",
            VarKind::Gradient => "gradient",
            VarKind::OptimizerState => "optimizer_state",
        }
    }

    /// Parses a text-format keyword.
    pub fn from_name(name: &str) -> Option<VarKind> {
        VarKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Variables of these kinds exist before the first op runs (fed or persistent).
    pub fn is_source(self) -> bool {
        matches!(
            self,
            VarKind::Input | VarKind::Label | VarKind::Parameter | VarKind::OptimizerState
        )
    }
}

/// The most elements a tensor may have: 2^53, the largest count an f64 holds exactly. Far
/// beyond what can be allocated, so planning (which only holds shapes) works at any real
/// model size, on every target: element counts are u64 even in the browser, whose `usize`
/// is 32 bits (a Llama 3 70B's attention scores at sequence 8,192 are 2^32 elements), and a
/// product of dims can never overflow them.
pub const MAX_ELEMENTS: u64 = 1 << 53;

/// [`MAX_ELEMENTS`] in words, for the errors that name it.
pub const MAX_ELEMENTS_TEXT: &str = "2^53";

/// Dense id of a variable in its [`crate::ir::Program`]. Prints as `%3`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct VarId(pub u32);

/// Dense id of an operator in its [`crate::ir::Program`]. Prints as `op3`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct OpId(pub u32);

impl VarId {
    /// The index into `Program::vars`.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl OpId {
    /// The index into `Program::ops`.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for VarId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.0)
    }
}

impl fmt::Display for OpId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "op{}", self.0)
    }
}

/// Element type and global shape of a tensor. A scalar has shape `[]`.
#[derive(Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TensorType {
    pub dtype: DType,
    pub shape: Shape,
}

/// By copying the shape's slice (smallvec's derived clone collects element by element;
/// every rank program copies every variable's type).
impl Clone for TensorType {
    fn clone(&self) -> TensorType {
        TensorType {
            dtype: self.dtype,
            shape: Shape::from_slice(&self.shape),
        }
    }
}

/// A tensor's dims, inline up to rank 4: every rank's program declares thousands of
/// variables, and a shape should not cost an allocation each.
pub type Shape = smallvec::SmallVec<[usize; 4]>;

impl TensorType {
    /// A tensor type from its parts.
    pub fn new(dtype: DType, shape: impl Into<Shape>) -> TensorType {
        TensorType {
            dtype,
            shape: shape.into(),
        }
    }

    /// Number of elements (1 for a scalar), or `None` when the product of the dims exceeds
    /// [`MAX_ELEMENTS`]. The verifier rejects such a variable, so every shape of a verified
    /// program, and every sub-product of its dims, multiplies without overflow in u64.
    pub fn checked_numel(&self) -> Option<u64> {
        self.shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64))
            .filter(|&n| n <= MAX_ELEMENTS)
    }

    /// Number of elements (1 for a scalar); saturates at `u64::MAX` for a shape the
    /// verifier would reject (see [`TensorType::checked_numel`]).
    pub fn numel(&self) -> u64 {
        self.checked_numel().unwrap_or(u64::MAX)
    }

    /// Bytes of the tensor (numel × the dtype's size), saturating.
    pub fn bytes(&self) -> u64 {
        self.numel().saturating_mul(self.dtype.size_bytes() as u64)
    }

    /// Rank (number of dims).
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[", self.dtype)?;
        for (i, d) in self.shape.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

/// A variable: a named tensor of the program.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Var {
    pub name: std::sync::Arc<str>,
    pub ty: TensorType,
    pub kind: VarKind,
    /// Survives across steps (parameters, optimizer state).
    pub persistable: bool,
}
