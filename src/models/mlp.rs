//! The two MLPs of the oracle data.

use super::{ModelConfig, ModelError};
use crate::ir::{Attr, Builder, DType, OpRole, OpType, Program};

/// Paddle's MLP (`../shared/oracle/paddle/complete_mlp.json`), with Paddle's variable names:
/// `x[16,64] @ W1[64,256] + b1 -> gelu -> @ W2[256,10] + b2 -> softmax_with_cross_entropy -> mean`.
pub fn mlp(cfg: &ModelConfig) -> Result<Program, ModelError> {
    let dt = cfg.dtype;
    let mut b = Builder::new();
    let x = b.input("x", dt, &[cfg.batch, cfg.features])?;
    let label = b.label("label", DType::I64, &[cfg.batch, 1])?;
    let w0 = b.param("linear_0.w_0", dt, &[cfg.features, cfg.hidden])?;
    let b0 = b.param("linear_0.b_0", dt, &[cfg.hidden])?;
    let w1 = b.param("linear_1.w_0", dt, &[cfg.hidden, cfg.classes])?;
    let b1 = b.param("linear_1.b_0", dt, &[cfg.classes])?;
    let add_axis = [("axis", Attr::Int(-1))];
    let mm = [
        ("trans_x", Attr::Bool(false)),
        ("trans_y", Attr::Bool(false)),
    ];
    let t0 = b.op1(OpType::MatmulV2, &[&[x], &[w0]], &mm, "linear_0.tmp_0")?;
    let t1 = b.op1(
        OpType::ElementwiseAdd,
        &[&[t0], &[b0]],
        &add_axis,
        "linear_0.tmp_1",
    )?;
    let g = b.op1(
        OpType::Gelu,
        &[&[t1]],
        &[("approximate", Attr::Bool(false))],
        "gelu_0.tmp_0",
    )?;
    let t2 = b.op1(OpType::MatmulV2, &[&[g], &[w1]], &mm, "linear_1.tmp_0")?;
    let t3 = b.op1(
        OpType::ElementwiseAdd,
        &[&[t2], &[b1]],
        &add_axis,
        "linear_1.tmp_1",
    )?;
    let outs = b.op(
        OpType::SoftmaxWithCrossEntropy,
        &[&[t3], &[label]],
        &[("axis", Attr::Int(-1)), ("soft_label", Attr::Bool(false))],
        &[
            "softmax_with_cross_entropy_0.tmp_0",
            "softmax_with_cross_entropy_0.tmp_1",
        ],
    )?;
    b.set_role(OpRole::Loss);
    let reduce_all = [
        ("dim", Attr::Ints(vec![])),
        ("keep_dim", Attr::Bool(false)),
        ("reduce_all", Attr::Bool(true)),
    ];
    b.op1(
        OpType::ReduceMean,
        &[&[outs[1]]],
        &reduce_all,
        "mean_0.tmp_0",
    )?;
    Ok(b.finish())
}

/// JAX's MLP (`../shared/oracle/jax/mlp_mse`): no biases, tanh gelu, mean squared error.
/// Variable names match the oracle's `.npy` files (`params.W1`, `batch.x`, ...).
pub fn mlp_mse(cfg: &ModelConfig) -> Result<Program, ModelError> {
    let dt = cfg.dtype;
    let mut b = Builder::new();
    let x = b.input("batch.x", dt, &[cfg.batch, cfg.features])?;
    let y = b.label("batch.y", dt, &[cfg.batch, cfg.classes])?;
    let w1 = b.param("params.W1", dt, &[cfg.features, cfg.hidden])?;
    let w2 = b.param("params.W2", dt, &[cfg.hidden, cfg.classes])?;
    let h = b.op1(OpType::MatmulV2, &[&[x], &[w1]], &[], "hidden")?;
    let a = b.op1(
        OpType::Gelu,
        &[&[h]],
        &[("approximate", Attr::Bool(true))],
        "hidden.gelu",
    )?;
    let pred = b.op1(OpType::MatmulV2, &[&[a], &[w2]], &[], "pred")?;
    let diff = b.op1(OpType::ElementwiseSub, &[&[pred], &[y]], &[], "diff")?;
    let sq = b.op1(OpType::Square, &[&[diff]], &[], "diff.sq")?;
    b.set_role(OpRole::Loss);
    b.op1(OpType::Mean, &[&[sq]], &[], "loss")?;
    Ok(b.finish())
}
