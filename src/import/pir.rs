//! Paddle programs, as Paddle 3 prints them (PIR text, parsed by `pir_text.rs`): the program
//! is lowered to the graph the ONNX import reads (`pir_lower.rs`: `pd_op.matmul` becomes a
//! `matmul` node, `pd_op.rsqrt` a `Sqrt` and a `Reciprocal`, ...), so both formats share the
//! fusions (RMSNorm, rotary halves, grouped-query heads), the translation into ShardLab's
//! ops and the checks.
//!
//! What a trained program adds over an inference graph:
//! - **Its loss**: a training program computes one. The loss is the value with a gradient
//!   (`stop_gradient` false), of at most one element, that nothing reads; the ops it does not
//!   depend on (a detached loss sum) are left out.
//! - **Tables computed in the program**: the rotary cos and sin, the causal mask and the
//!   labels' mask are computed from the inputs and constants alone (`arange`, `tril`, `where`,
//!   `not_equal`, ...). No trained op's gradient flows into them, so each value a trained op
//!   reads from them is fed as an input (serial and distributed runs see the same values),
//!   and the ops computing them are not imported. Small constants (a `full_int_array` shape,
//!   a `full` scalar) are kept as constants.

use super::onnx::Front;
use super::pir_text::{PirOp, PirType};
use super::{ImportError, ImportOptions, Imported};
use std::collections::{HashMap, HashSet};

/// A parsed program with what the lowering needs to know of each value.
pub(super) struct Program<'a> {
    pub ops: &'a [PirOp],
    /// Each value's defining op and result index.
    pub def: HashMap<&'a str, (usize, usize)>,
    /// The values a trainable parameter reaches (their ops are imported).
    pub trained: HashSet<&'a str>,
    /// The ops the loss depends on.
    pub needed: HashSet<usize>,
    pub loss: &'a str,
    /// Whether the loss is the program's own (a scalar with a gradient), not the mean of
    /// an output (an inference program).
    pub own_loss: bool,
}

/// Imports the Paddle program in `text`.
pub fn import(text: &str, opts: &ImportOptions) -> Result<Imported, ImportError> {
    let ops = super::pir_text::parse(text).map_err(ImportError::PirSyntax)?;
    let census = super::census(ops.iter().map(|op| op.name.as_str()));
    let (ops, mut notes) = super::pir_rewrite::rewrite(ops)?;
    let program = analyse(&ops)?;
    let (graph, lowered) = super::pir_lower::lower(&program)?;
    notes.extend(lowered);
    let front = Front {
        census,
        notes,
        loss_note: if program.own_loss {
            |out: &str| {
                format!(
                    "the loss is `{out}`, the program's scalar with a gradient that no op reads"
                )
            }
        } else {
            |out: &str| {
                format!("the loss is the mean of `{out}`, the program's last output (it has no scalar loss)")
            }
        },
    };
    super::onnx::import_graph(&graph, opts, front)
}

/// Where an op is, for messages: its line.
pub(super) fn at(op: &PirOp) -> String {
    format!("line {}", op.line)
}

/// Whether `op` is a trainable parameter (`trainable:[true]`, or without that attribute a
/// parameter whose gradient is kept).
fn trainable(op: &PirOp) -> bool {
    op.name == "builtin.parameter"
        && match op.attr("trainable").and_then(|a| a.flag()) {
            Some(t) => t,
            None => op.attr("stop_gradient").and_then(|a| a.flag()) == Some(false),
        }
}

/// Whether result `k` of `op` has no gradient (`stop_gradient`, one flag per result).
fn stops_gradient(op: &PirOp, k: usize) -> bool {
    match op.attr("stop_gradient") {
        Some(super::pir_text::PirAttr::List(flags)) => {
            flags.get(k).and_then(|f| f.flag()).unwrap_or(false)
        }
        _ => false,
    }
}

/// A float tensor type of at most one element.
fn float_scalar(ty: Option<&PirType>) -> (bool, bool) {
    match ty {
        Some(PirType::Tensor { dims, dtype }) => {
            use super::onnx_proto::data_type::{BFLOAT16, DOUBLE, FLOAT, FLOAT16};
            let float = matches!(
                super::pir_lower::element_type(dtype),
                Some(FLOAT | DOUBLE | FLOAT16 | BFLOAT16)
            );
            (float, float && dims.iter().all(|&d| d == 1))
        }
        _ => (false, false),
    }
}

/// Defines each value once, finds what the parameters reach, the loss and what it needs.
fn analyse(ops: &[PirOp]) -> Result<Program<'_>, ImportError> {
    let mut def: HashMap<&str, (usize, usize)> = HashMap::new();
    let mut trained: HashSet<&str> = HashSet::new();
    let mut read: HashSet<&str> = HashSet::new();
    for (i, op) in ops.iter().enumerate() {
        for x in &op.operands {
            if !def.contains_key(x.as_str()) {
                return Err(ImportError::Undefined {
                    node: at(op),
                    value: x.clone(),
                });
            }
            read.insert(x);
        }
        let t = trainable(op) || op.operands.iter().any(|x| trained.contains(x.as_str()));
        for (k, r) in op.results.iter().enumerate() {
            if def.insert(r, (i, k)).is_some() {
                return Err(ImportError::Duplicate {
                    node: at(op),
                    value: r.clone(),
                });
            }
            if t {
                trained.insert(r);
            }
        }
    }
    let (loss, own_loss) = pick_loss(ops, &trained, &read).ok_or(ImportError::NoOutput)?;
    let mut needed = HashSet::new();
    let mut todo = vec![loss];
    while let Some(v) = todo.pop() {
        let Some(&(i, _)) = def.get(v) else { continue };
        if needed.insert(i) {
            todo.extend(
                ops[i]
                    .operands
                    .iter()
                    .map(String::as_str)
                    .filter(|x| trained.contains(x)),
            );
        }
    }
    Ok(Program {
        ops,
        def,
        trained,
        needed,
        loss,
        own_loss,
    })
}

/// The loss: the last float value with a gradient, of at most one element, that no op
/// reads (`true`: the program's own); else (an inference program) the last float value no
/// op reads (`false`: its mean is the loss).
fn pick_loss<'a>(
    ops: &'a [PirOp],
    trained: &HashSet<&str>,
    read: &HashSet<&str>,
) -> Option<(&'a str, bool)> {
    let mut fallback = None;
    for op in ops.iter().rev() {
        for (k, r) in op.results.iter().enumerate().rev() {
            if !trained.contains(r.as_str()) || read.contains(r.as_str()) {
                continue;
            }
            let (float, scalar) = float_scalar(op.result_types.get(k));
            if scalar && !stops_gradient(op, k) {
                return Some((r, true));
            }
            if float && fallback.is_none() {
                fallback = Some(r.as_str());
            }
        }
    }
    fallback.map(|r| (r, false))
}
