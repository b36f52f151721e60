//! The inference of the Mixture-of-Experts routing ops (`ir::ops::moe`).

use super::{fail, float, one, InferError, Res, E};
use crate::ir::program::Op;
use crate::ir::types::{DType, TensorType};

type Outs = Res<Vec<Vec<TensorType>>>;

/// The routing attributes, checked against the token count: (k, capacity, groups).
fn routing(op: &Op, tokens: usize, experts: Option<usize>) -> Res<(usize, usize, usize)> {
    let positive = |name: &'static str| {
        let v = op.attr_int(name, 0);
        usize::try_from(v)
            .ok()
            .filter(|&v| v >= 1)
            .ok_or_else(|| InferError::from(E::MoeAttr { name, value: v }))
    };
    let k = if experts.is_some() { positive("k")? } else { 1 };
    let capacity = positive("capacity")?;
    let group = positive("group_size")?;
    if !tokens.is_multiple_of(group) {
        return fail(E::MoeGroups { tokens, group });
    }
    if let Some(e) = experts {
        if k > e {
            return fail(E::MoeTopK { k, experts: e });
        }
    }
    Ok((k, capacity, tokens / group))
}

/// `X [S, H]`, `Gates [S, E]` → `Out [E, G·C, H]`, `Weights [S, k]`, `Index [k, S]` (i64).
pub fn dispatch(op: &Op, ins: &[Vec<&TensorType>]) -> Outs {
    let x = float(one(op, ins, 0)?, "X")?;
    let gates = float(one(op, ins, 1)?, "Gates")?;
    let ([s, h], [gs, e]) = (x.shape.as_slice(), gates.shape.as_slice()) else {
        return fail(E::MoeDispatchShapes {
            x: x.clone(),
            gates: gates.clone(),
        });
    };
    if s != gs {
        return fail(E::MoeDispatchShapes {
            x: x.clone(),
            gates: gates.clone(),
        });
    }
    let (k, capacity, groups) = routing(op, *s, Some(*e))?;
    let slots = groups
        .checked_mul(capacity)
        .filter(|&n| (n as u64).saturating_mul((*e * *h) as u64) <= crate::ir::MAX_ELEMENTS)
        .ok_or(E::MoeTooLarge {
            experts: *e,
            slots: groups.saturating_mul(capacity),
        })?;
    Ok(vec![
        vec![TensorType::new(x.dtype, vec![*e, slots, *h])],
        vec![TensorType::new(gates.dtype, vec![*s, k])],
        vec![TensorType::new(DType::I64, vec![k, *s])],
    ])
}

/// `X [E, G·C, H]`, `Weights [S, k]`, `Index [k, S]` → `Out [S, H]`.
pub fn combine(op: &Op, ins: &[Vec<&TensorType>]) -> Outs {
    let x = float(one(op, ins, 0)?, "X")?;
    let w = float(one(op, ins, 1)?, "Weights")?;
    let index = one(op, ins, 2)?;
    let bad = || E::MoeCombineShapes {
        x: x.clone(),
        weights: w.clone(),
        index: index.clone(),
    };
    let ([_, slots, h], [s, k], [ik, is]) = (
        x.shape.as_slice(),
        w.shape.as_slice(),
        index.shape.as_slice(),
    ) else {
        return fail(bad());
    };
    if index.dtype != DType::I64 || (ik, is) != (k, s) {
        return fail(bad());
    }
    let (_, capacity, groups) = routing(op, *s, None)?;
    if groups.checked_mul(capacity) != Some(*slots) {
        return fail(bad());
    }
    Ok(vec![vec![TensorType::new(x.dtype, vec![*s, *h])]])
}
