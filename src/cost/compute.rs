//! A compute op's time on a device: the roofline at the device's achievable matmul rate,
//! and on this machine's executor (`cpu`) its measured kernel rates and per-GEMM cost.

use super::device::{ComputeDType, Topology};
use super::work::{op_work, ElementBytes};
use crate::ir::{Op, OpType, Program};

/// The roofline time of a compute op: max(FLOPs / achievable peak, bytes / memory
/// bandwidth), the achievable peak being the peak × the device's matmul efficiency. On this
/// CPU's executor (a device with `kernels`), an op other than a matmul also takes at least
/// its elements over the kernel rate for its size, and a matmul pays a fixed cost per GEMM
/// call it makes.
pub fn compute_time(program: &Program, op: &Op, topo: &Topology, dtype: ComputeDType) -> f64 {
    let w = op_work(program, op, ElementBytes(dtype.bytes()));
    let achievable = topo.device.peak(dtype) * topo.device.matmul_efficiency;
    let roofline = (w.flops / achievable).max(w.bytes / topo.device.mem_bandwidth);
    let matmul = matches!(op.ty, OpType::MatmulV2 | OpType::MatmulV2Grad);
    match topo.device.kernels {
        Some(k) if matmul => roofline + gemm_calls(program, op) * k.gemm_call_s,
        Some(k) => {
            let elems = w.bytes / dtype.bytes();
            roofline.max(elems / k.rate(elems))
        }
        None => roofline,
    }
}

/// How many GEMM calls the executor makes for a matmul (or its grad, two products): one
/// when the weight is a matrix (the batch folds into its rows), else one per batch.
fn gemm_calls(program: &Program, op: &Op) -> f64 {
    let shape = |slot: &str| {
        op.input(slot)
            .first()
            .map(|&v| program.var(v).ty.shape.clone())
    };
    let (Some(x), Some(y)) = (shape("X"), shape("Y")) else {
        return 1.0;
    };
    let batches = if y.len() <= 2 {
        1.0
    } else {
        x.iter().take(x.len().saturating_sub(2)).product::<usize>() as f64
    };
    let products = if op.ty == OpType::MatmulV2Grad {
        2.0
    } else {
        1.0
    };
    batches * products
}
