//! `flash_attn`: q, k, v `[batch, seq, heads, head_dim]`, outputs out (q's letters) and the
//! log-sum-exp `[batch, heads, seq]`.
//!
//! Paddle 3.3.1's `FlashAttInferSpmd` merges batch and heads over q, k and v and leaves the
//! sequence and head_dim whole (a split sequence is gathered). Context parallelism needs
//! more, so the op's `cp_mode` picks:
//!
//! - `ring`: the sequence keeps its split, q's and k/v's alike (the partitioner runs the
//!   op as a ring of blocks, `passes::partition::ring`);
//! - `ulysses` (DeepSpeed-Ulysses): the sequence's axes move to the heads, innermost, so
//!   the reshards before the op are all-to-alls from sequence to heads and the one after
//!   it moves back;
//! - empty: Paddle's rule.
//!
//! ```text
//! ulysses q[0,1,2,-1] k,v alike  =>  q,k,v wanted [0,-1,[2,1],-1], out [0,-1,[2,1],-1], lse [0,[2,1],-1]
//! ring    q[0,1,2,-1] k,v alike  =>  q,k,v wanted [0,1,2,-1],      out [0,1,2,-1],      lse [0,2,1]
//! ```

#[cfg(feature = "context-parallel")]
use super::einsum::{merge, AxisMap, OnAxisConflict, OnMeshConflict};
#[cfg(feature = "context-parallel")]
use super::{arg, check_rank, DimAxes, Layout};
use super::{DistTensor, Inferred, Result, SpmdError};

/// How the rule treats a split sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpMode {
    /// Gathered (Paddle).
    Paddle,
    /// Moved to the heads (DeepSpeed-Ulysses).
    Ulysses,
    /// Kept: ring attention.
    Ring,
}

impl CpMode {
    /// The mode an op's `cp_mode` attribute names (anything else is Paddle's rule).
    pub fn of(name: &str) -> CpMode {
        match name {
            "ulysses" => CpMode::Ulysses,
            "ring" => CpMode::Ring,
            _ => CpMode::Paddle,
        }
    }
}

#[cfg(feature = "context-parallel")]
const QKV: &str = "bshd";

/// The rule of a `flash_attn` op, by its `cp_mode`.
pub fn rule(op: &crate::ir::Op) -> super::Rule {
    super::Rule::Attention {
        mode: CpMode::of(op.attr_str("cp_mode").unwrap_or("")),
    }
}

#[cfg(feature = "context-parallel")]
fn rank4(t: &DistTensor, what: &'static str) -> Result<()> {
    check_rank(t, what)?;
    if t.shape.len() != 4 {
        return Err(SpmdError::RotaryRank {
            what,
            rank: t.shape.len(),
        });
    }
    Ok(())
}

#[cfg(feature = "context-parallel")]
/// The merged map with head_dim whole and the sequence treated as `mode` says.
fn settle(mut map: AxisMap, mode: CpMode) -> Inferred {
    map.set('d', DimAxes::WHOLE);
    let seq = map.get('s');
    match mode {
        CpMode::Ring => {}
        CpMode::Paddle => map.set('s', DimAxes::WHOLE),
        CpMode::Ulysses => {
            let mut heads = map.get('h');
            for &a in seq.iter() {
                if !heads.contains(&a) {
                    heads.push(a);
                }
            }
            map.set('h', heads);
            map.set('s', DimAxes::WHOLE);
        }
    }
    let qkv = Layout::from_dims(map.dims(QKV));
    Inferred {
        inputs: smallvec::smallvec![qkv.clone(), qkv.clone(), qkv.clone()],
        outputs: smallvec::smallvec![qkv, Layout::from_dims(map.dims("bhs"))],
    }
}

/// Forward from q, k and v.
#[cfg(not(feature = "context-parallel"))]
pub fn forward(_: &[DistTensor], _: CpMode) -> Result<Inferred> {
    Err(SpmdError::NotInThisBuild("flash_attn"))
}

/// Backward from out and the log-sum-exp.
#[cfg(not(feature = "context-parallel"))]
pub fn backward(_: &[DistTensor], _: CpMode) -> Result<Inferred> {
    Err(SpmdError::NotInThisBuild("flash_attn"))
}

/// Forward from q, k and v.
#[cfg(feature = "context-parallel")]
pub fn forward(inputs: &[DistTensor], mode: CpMode) -> Result<Inferred> {
    let names = ["attention Q", "attention K", "attention V"];
    let mut tensors = Vec::with_capacity(3);
    for (i, what) in names.into_iter().enumerate() {
        let t = arg(inputs, i, "attention")?;
        rank4(t, what)?;
        tensors.push((QKV, t.dims()));
    }
    let map = merge(
        &tensors,
        OnAxisConflict::Error,
        OnMeshConflict::KeepFirst,
        None,
    )?;
    Ok(settle(map, mode))
}

/// Backward from out and the log-sum-exp.
#[cfg(feature = "context-parallel")]
pub fn backward(outputs: &[DistTensor], mode: CpMode) -> Result<Inferred> {
    let out = arg(outputs, 0, "attention")?;
    rank4(out, "attention Out")?;
    let mut tensors = vec![(QKV, out.dims())];
    if let Some(lse) = outputs.get(1).filter(|l| l.shape.len() == 3) {
        tensors.push(("bhs", lse.dims()));
    }
    let map = merge(
        &tensors,
        OnAxisConflict::Error,
        OnMeshConflict::KeepFirst,
        None,
    )?;
    Ok(settle(map, mode))
}
