//! Measures this machine for the `cpu` topology: the executor's f32 GEMM (peak FLOP/s), a
//! plain copy (memory bandwidth), an elementwise kernel from memory and in cache (elements
//! per second through the executor's f64-converting loops), a tiny GEMM (the fixed cost of
//! a call), and two threads exchanging tensors through the
//! executor's communicator (latency and bandwidth). Medians of a few runs: a fraction of a
//! second in all. Not deterministic, so nothing that depends on it is a golden.

use crate::cost::collective::Link;
use crate::cost::device::CpuCalibration;
use crate::exec::comm::{Communicator, ThreadComm};
use crate::exec::kernels::matmul::matmul;
use crate::exec::kernels::pointwise::mul_same;
use crate::exec::tensor::Tensor;
use crate::ir::DType;
use std::time::{Duration, Instant};

fn median_of(runs: usize, mut f: impl FnMut() -> Duration) -> f64 {
    let mut t: Vec<f64> = (0..runs).map(|_| f().as_secs_f64()).collect();
    crate::sort::sort_by(&mut t, f64::total_cmp);
    t[t.len() / 2]
}

fn filled(n: usize, shape: Vec<usize>) -> Tensor {
    Tensor::float(
        DType::F32,
        shape,
        (0..n).map(|i| (i % 7) as f64 * 0.1).collect(),
    )
}

/// Two threads exchanging `elems`-element tensors `rounds` times; the time per exchange.
fn exchange_time(elems: usize, rounds: u64) -> f64 {
    let comm = ThreadComm::new(Duration::from_secs(20));
    let t = filled(elems, vec![elems]);
    let start = Instant::now();
    std::thread::scope(|s| {
        for rank in 0..2u32 {
            let (comm, t) = (&comm, t.clone());
            s.spawn(move || {
                for k in 0..rounds {
                    let _ = comm.exchange(rank, &(vec![0, 1], k), t.clone());
                }
            });
        }
    });
    start.elapsed().as_secs_f64() / rounds as f64
}

/// Measures this machine.
pub fn calibrate() -> CpuCalibration {
    let n = 256;
    let (a, b) = (filled(n * n, vec![n, n]), filled(n * n, vec![n, n]));
    let gemm = median_of(5, || {
        let t = Instant::now();
        let _ = matmul(&a, &b, false, false);
        t.elapsed()
    });
    let m = 1 << 21;
    let (x, y) = (filled(m, vec![m]), filled(m, vec![m]));
    let kernel = median_of(5, || {
        let t = Instant::now();
        let _ = mul_same(&x, &y);
        t.elapsed()
    });
    // The same kernel in cache (8192 elements, 100 calls per timing).
    let small = 8192;
    let (xs, ys) = (filled(small, vec![small]), filled(small, vec![small]));
    let kernel_small = median_of(7, || {
        let t = Instant::now();
        for _ in 0..100 {
            std::hint::black_box(mul_same(&xs, &ys));
        }
        t.elapsed()
    }) / 100.0;
    // A GEMM call's fixed cost: a batch of 64 tiny products (what a batched matmul runs
    // per batch), whose FLOPs take almost nothing.
    let (ta, tb) = (
        filled(64 * 64, vec![64, 8, 8]),
        filled(64 * 64, vec![64, 8, 8]),
    );
    let tiny = median_of(7, || {
        let t = Instant::now();
        for _ in 0..20 {
            let _ = std::hint::black_box(matmul(&ta, &tb, false, false));
        }
        t.elapsed()
    }) / (20.0 * 64.0);
    // Memory bandwidth: a plain copy of 4 M floats (read and write).
    let buffer: Vec<f32> = vec![1.0; 1 << 22];
    let copy = median_of(5, || {
        let t = Instant::now();
        let c = buffer.clone();
        std::hint::black_box(&c);
        t.elapsed()
    });
    // Latency from 1-element exchanges; bandwidth from 1M-element (4 MB) ones.
    let alpha = exchange_time(1, 200);
    let big = 1 << 20;
    let beta = (big * 4) as f64 / (exchange_time(big, 10) - alpha).max(1e-9);
    let flops = 2.0 * (n * n * n) as f64 / gemm;
    CpuCalibration {
        devices: 1024,
        flops,
        kernel_rate_small: 3.0 * small as f64 / kernel_small,
        gemm_call_s: (tiny - 2.0 * 512.0 / flops).max(0.0),
        crowding: 1.0,
        mem_bandwidth: 2.0 * 4.0 * buffer.len() as f64 / copy,
        kernel_rate: 3.0 * m as f64 / kernel,
        mem_capacity: CpuCalibration::default().mem_capacity,
        link: Link {
            alpha_s: alpha,
            beta_bytes_per_s: beta,
        },
    }
}
