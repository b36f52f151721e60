//! Bringing a model ShardLab did not write: an ONNX file (`onnx.rs`, the protobuf decoded
//! by `onnx_proto.rs`) becomes a program of ShardLab's IR, which is then annotated,
//! planned, run, priced and exported like any other. Pure: bytes in, a program or an
//! error out (the CLI reads the file; the playground hands the engine's worker the bytes).
//! `strategy.rs` makes the program a plan under a strategy by sizes, for all three.
//!
//! An imported graph is an inference graph: its first output becomes the loss through a
//! `mean` (role `loss`), so the program trains. Weights (initializers) become parameters;
//! their values are not read. Integer constants (a reshape's target shape) and scalar
//! float constants (attention's `1/√d`) are folded into attributes. What the import did
//! beyond a one-for-one translation is said in [`Imported::notes`].

pub mod onnx;
mod onnx_fuse;
mod onnx_moe;
mod onnx_ops;
pub mod onnx_proto;
mod onnx_values;
mod pir;
mod pir_lower;
mod pir_ops;
pub mod pir_rewrite;
pub mod pir_text;
mod strategy;

pub use strategy::{parse_dims, plan_under, DimSpecError, StrategyError};

use crate::ir::Program;

/// The largest file an import reads: protobuf's own limit (ONNX files past it keep their
/// weights in external data files).
pub const MAX_IMPORT_BYTES: usize = (1 << 31) - 1;

/// How to import.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ImportOptions {
    /// Sizes of the graph's symbolic dims (`batch_size=8`), by name.
    pub dims: Vec<(String, usize)>,
}

/// An imported program and what the import decided.
#[derive(Clone, Debug)]
pub struct Imported {
    pub program: Program,
    /// Renamed values, folded constants, the loss added: one line each.
    pub notes: Vec<String>,
    /// The graph's operators by type, with how many nodes each (the census).
    pub census: Vec<(String, usize)>,
    /// How many patterns of primitives were fused into one op each.
    pub fused: usize,
    /// Each parameter and table the import made from a constant of the file: the
    /// program's name and the graph's (for [`onnx_values`]).
    pub sources: Vec<(String, String)>,
}

/// Why a file does not import.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ImportError {
    #[error("the file is {bytes} bytes; an ONNX file is at most 2 GiB (larger models keep their weights in external data)")]
    TooLarge { bytes: usize },
    #[error("not an ONNX model: the protobuf does not decode ({0})")]
    Decode(String),
    #[error("the ONNX model has no graph")]
    NoGraph,
    #[error("{0}")]
    Unsupported(UnsupportedOps),
    #[error(
        "input `{input}` dim {dim} is symbolic (`{name}`): give it a size with --dim {name}=N"
    )]
    Symbolic {
        input: String,
        dim: usize,
        name: String,
    },
    #[error("`{value}` has dim {dim} = {size}: a dim is a size from 1 to 2^53")]
    BadDim {
        value: String,
        dim: usize,
        size: i64,
    },
    #[error("`{value}` has element type {ty}, which ShardLab does not model")]
    ElementType { value: String, ty: i32 },
    #[error("node `{node}` reads `{value}`, which no input, initializer or earlier node defines (a model lists its nodes in topological order)")]
    Undefined { node: String, value: String },
    #[error("`{value}` is defined twice (the second time by node `{node}`)")]
    Duplicate { node: String, value: String },
    #[error("node `{node}` ({op_type}): {message}")]
    Node {
        node: String,
        op_type: String,
        message: String,
    },
    #[error("the graph has no output to train")]
    NoOutput,
    #[error("`{value}` has no values ShardLab reads ({why})")]
    NoValues { value: String, why: String },
    #[error("not a Paddle program: {0}")]
    PirSyntax(pir_text::PirSyntaxError),
}

/// The operators an import does not support, each with its node count and first nodes.
#[derive(Clone, Debug, PartialEq)]
pub struct UnsupportedOps(pub Vec<(String, usize, Vec<String>)>);

impl UnsupportedOps {
    /// Refuses when `missing` (each unsupported node's operator and name, in order) is not
    /// empty: the operators with their counts and first three nodes, most frequent first.
    pub(super) fn check(
        missing: impl IntoIterator<Item = (String, String)>,
    ) -> Result<(), ImportError> {
        let mut out: Vec<(String, usize, Vec<String>)> = Vec::new();
        for (ty, name) in missing {
            match out.iter_mut().find(|(t, _, _)| *t == ty) {
                Some((_, n, names)) => {
                    *n += 1;
                    if names.len() < 3 {
                        names.push(name);
                    }
                }
                None => out.push((ty, 1, vec![name])),
            }
        }
        if out.is_empty() {
            return Ok(());
        }
        crate::sort::sort_by_key(&mut out, |(t, n, _)| (std::cmp::Reverse(*n), t.clone()));
        Err(ImportError::Unsupported(UnsupportedOps(out)))
    }
}

/// Every operator of a model with its count, most frequent first (the census).
pub(super) fn census<'a>(ops: impl IntoIterator<Item = &'a str>) -> Vec<(String, usize)> {
    let mut counts: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for op in ops {
        *counts.entry(op).or_default() += 1;
    }
    let mut out: Vec<(String, usize)> = counts
        .into_iter()
        .map(|(k, n)| (k.to_string(), n))
        .collect();
    crate::sort::sort_by_key(&mut out, |(t, n)| (std::cmp::Reverse(*n), t.clone()));
    out
}

/// Whether `bytes` are a Paddle program's text: its first non-blank byte is `{`, which no
/// ONNX protobuf's is (it would open a group of field 15).
pub fn is_paddle_text(bytes: &[u8]) -> bool {
    bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

impl std::fmt::Display for UnsupportedOps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let nodes: usize = self.0.iter().map(|(_, n, _)| n).sum();
        write!(
            f,
            "{nodes} nodes of {} operator types ShardLab does not import:",
            self.0.len()
        )?;
        for (op, n, names) in &self.0 {
            write!(f, "\n  {op} × {n}: {}", names.join(", "))?;
            if *n > names.len() {
                write!(f, ", …")?;
            }
        }
        Ok(())
    }
}

/// Imports a model file of either format, told apart by its content ([`is_paddle_text`];
/// anything else is read as ONNX).
pub fn import_model(bytes: &[u8], opts: &ImportOptions) -> Result<Imported, ImportError> {
    if !is_paddle_text(bytes) {
        return import_onnx(bytes, opts);
    }
    let text = std::str::from_utf8(bytes).map_err(|e| {
        ImportError::PirSyntax(pir_text::PirSyntaxError {
            line: 1 + bytes[..e.valid_up_to()]
                .iter()
                .filter(|&&b| b == b'\n')
                .count(),
            col: 1,
            message: format!("not UTF-8 text (byte {})", e.valid_up_to()),
        })
    })?;
    import_pir(text, opts)
}

/// The values in an ONNX file of `imported`'s parameters and tables (its weights, the
/// rotary tables and masks the exporter computed), by the program's names: what `import
/// --with-values` writes for `run --inputs`.
pub fn onnx_values(bytes: &[u8], imported: &Imported) -> Result<Vec<NamedValues>, ImportError> {
    onnx_values::of_model(bytes, imported)
}

/// A variable's values from the file.
#[derive(Clone, Debug, PartialEq)]
pub struct NamedValues {
    pub var: String,
    pub dims: Vec<usize>,
    pub values: Vec<f64>,
}

/// Imports a Paddle program from its text (PIR, as Paddle 3 prints a program).
pub fn import_pir(text: &str, opts: &ImportOptions) -> Result<Imported, ImportError> {
    if text.len() > MAX_IMPORT_BYTES {
        return Err(ImportError::TooLarge { bytes: text.len() });
    }
    pir::import(text, opts)
}

/// Imports an ONNX model from its bytes.
pub fn import_onnx(bytes: &[u8], opts: &ImportOptions) -> Result<Imported, ImportError> {
    if bytes.len() > MAX_IMPORT_BYTES {
        return Err(ImportError::TooLarge { bytes: bytes.len() });
    }
    onnx::import(bytes, opts)
}
