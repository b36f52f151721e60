//! The inference of the Mixture-of-Experts routing ops (`ir::ops::moe`). Written small, with
//! its helpers out of line: the playground's page module carries every op's inference.

use super::{float, one, InferError, Res, E};
use crate::ir::program::Op;
use crate::ir::types::{DType, TensorType};

type Outs = Res<Vec<Vec<TensorType>>>;

const GATES: &str = "Gates [X's tokens, experts]";
const INDEX: &str = "Index i64 [k, tokens]";

#[inline(never)]
fn shape_error(want: &'static str, got: &TensorType) -> InferError {
    E::MoeShape {
        want,
        got: got.clone(),
    }
    .into()
}

#[inline(never)]
fn tensor(dtype: DType, shape: &[usize]) -> Vec<TensorType> {
    vec![TensorType::new(dtype, shape.to_vec())]
}

/// Attribute `name`, from 1 to `most`.
#[inline(never)]
fn attr(op: &Op, name: &'static str, most: usize) -> Res<usize> {
    let v = op.attr_int(name, 0);
    match usize::try_from(v) {
        Ok(n) if (1..=most).contains(&n) => Ok(n),
        _ => Err(E::MoeAttr {
            name,
            value: v,
            most,
        }
        .into()),
    }
}

/// `[a, b]` of a rank-2 tensor.
#[inline(never)]
fn pair(t: &TensorType, want: &'static str) -> Res<(usize, usize)> {
    match t.shape.as_slice() {
        [a, b] => Ok((*a, *b)),
        _ => Err(shape_error(want, t)),
    }
}

/// The slots per expert: groups of `group_size` tokens × `capacity`, at most a tensor's
/// elements.
#[inline(never)]
fn slots(op: &Op, tokens: usize, t: &TensorType) -> Res<usize> {
    // Saturating: on wasm32 a usize is narrower than the element limit.
    let most = usize::try_from(crate::ir::MAX_ELEMENTS).unwrap_or(usize::MAX);
    let group = attr(op, "group_size", tokens)?;
    if !tokens.is_multiple_of(group) {
        return Err(shape_error(
            "tokens (dim 0) in whole groups of `group_size`",
            t,
        ));
    }
    Ok((tokens / group).saturating_mul(attr(op, "capacity", most)?))
}

/// `X [S, H]`, `Gates [S, E]` → `Out [E, G·C, H]`, `Weights [S, k]`, `Index [k, S]` (i64).
pub fn dispatch(op: &Op, ins: &[Vec<&TensorType>]) -> Outs {
    let x = float(one(op, ins, 0)?, "X")?;
    let gates = float(one(op, ins, 1)?, "Gates")?;
    let (s, h) = pair(x, "X [tokens, width]")?;
    let (gs, e) = pair(gates, GATES)?;
    if gs != s {
        return Err(shape_error(GATES, gates));
    }
    let k = attr(op, "k", e)?;
    let slots = slots(op, s, x)?;
    let n = (e as u64)
        .saturating_mul(slots as u64)
        .saturating_mul(h as u64);
    if n > crate::ir::MAX_ELEMENTS {
        return Err(shape_error(
            "Out [experts, slots, width] within a tensor's size limit",
            x,
        ));
    }
    Ok(vec![
        tensor(x.dtype, &[e, slots, h]),
        tensor(gates.dtype, &[s, k]),
        tensor(DType::I64, &[k, s]),
    ])
}

/// `X [E, G·C, H]`, `Weights [S, k]`, `Index [k, S]` → `Out [S, H]`.
pub fn combine(op: &Op, ins: &[Vec<&TensorType>]) -> Outs {
    let x = float(one(op, ins, 0)?, "X")?;
    let w = float(one(op, ins, 1)?, "Weights")?;
    let index = one(op, ins, 2)?;
    let (s, k) = pair(w, "Weights [tokens, k]")?;
    if index.dtype != DType::I64 || pair(index, INDEX)? != (k, s) {
        return Err(shape_error(INDEX, index));
    }
    let slots = slots(op, s, w)?;
    match x.shape.as_slice() {
        [_, n, h] if *n == slots => Ok(vec![tensor(x.dtype, &[s, *h])]),
        _ => Err(shape_error("X [experts, groups × capacity, width]", x)),
    }
}
