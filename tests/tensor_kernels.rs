//! The executor's typed, in-place and copy-on-write tensor paths compute exactly what the
//! f64 reference path computes (read every value as f64, apply, round once to the tensor's
//! precision), and an update in place never reaches a clone.
#![cfg(not(target_arch = "wasm32"))]

use shardlab::dist::ReduceType;
use shardlab::exec::interp::reduce_all;
use shardlab::exec::kernels::pointwise::{unary_grad, Unary};
use shardlab::exec::run::{run_distributed, run_serial, RunOptions};
use shardlab::exec::tensor::Tensor;
use shardlab::ir::DType;
use shardlab::passes::driver::{run_passes, PassOptions};

/// Values that round differently in f32 and f64, of both signs, more than one reduction
/// block (1,024) long.
fn values(n: usize, seed: f64) -> Vec<f64> {
    (0..n)
        .map(|i| ((i as f64 * 0.618_033_988_75 + seed).sin() * 3.0) / 7.0)
        .collect()
}

/// The reference: every value through f64, rounded once.
fn reference(t: &Tensor, f: impl Fn(f64) -> f64) -> Tensor {
    Tensor::float(
        t.dtype(),
        t.shape.clone(),
        t.to_f64().into_iter().map(f).collect(),
    )
}

#[test]
fn typed_maps_equal_the_f64_reference_in_both_precisions() {
    let f = |v: f64| 0.5 * v + 1.0 / 3.0;
    for dtype in [DType::F32, DType::F64] {
        let x = Tensor::float(dtype, vec![3, 700], values(2100, 0.1));
        let y = Tensor::float(dtype, vec![3, 700], values(2100, 0.7));
        assert_eq!(x.map(f), reference(&x, f), "{dtype:?} map");
        let mut z = x.clone();
        z.map_in_place(f);
        assert_eq!(z, reference(&x, f), "{dtype:?} map_in_place");
        let zipped = x
            .zip_map(&y, |a, b| a * b - 0.25)
            .expect("same dtype and size");
        let yv = y.to_f64();
        let want = Tensor::float(
            dtype,
            x.shape.clone(),
            x.to_f64()
                .iter()
                .zip(&yv)
                .map(|(a, b)| a * b - 0.25)
                .collect(),
        );
        assert_eq!(zipped, want, "{dtype:?} zip_map");
        let mut u = x.clone();
        assert!(u.zip_update(&y, |a, b| a * b - 0.25));
        assert_eq!(u, want, "{dtype:?} zip_update");
    }
}

#[test]
fn typed_zips_refuse_mixed_dtypes_and_sizes() {
    let a = Tensor::float(DType::F32, vec![4], values(4, 0.0));
    let b = Tensor::float(DType::F64, vec![4], values(4, 0.0));
    let c = Tensor::float(DType::F32, vec![5], values(5, 0.0));
    assert!(a.zip_map(&b, |x, y| x + y).is_none());
    assert!(a.zip_map(&c, |x, y| x + y).is_none());
    let mut d = a.clone();
    assert!(!d.zip_update(&c, |x, y| x + y));
    assert_eq!(d, a, "a refused update changes nothing");
}

#[test]
fn an_update_in_place_never_reaches_a_clone() {
    let original = Tensor::float(DType::F32, vec![2, 3], values(6, 0.3));
    let kept = original.clone();
    let mut mapped = original.clone();
    mapped.map_in_place(|v| v + 1.0);
    let mut zipped = original.clone();
    assert!(zipped.zip_update(&kept, |a, b| a + b));
    let mut indexed = original.clone();
    indexed.update_indexed(|i, v| v * i as f64);
    let mut put = original.clone();
    put.put(0, 99.0);
    assert_eq!(original, kept, "the shared values are untouched");
    assert_ne!(mapped, kept);
    assert_ne!(zipped, kept);
    assert_ne!(indexed, kept);
    assert_eq!(put.at(0), 99.0);
    assert_eq!(original.at(0), kept.at(0));
}

/// How a reduction combines two values.
type Combine = fn(f64, f64) -> f64;

#[test]
fn a_blocked_reduction_equals_the_elementwise_one() {
    // 2,500 elements: two whole blocks and a partial one; three members.
    for dtype in [DType::F32, DType::F64] {
        let all: Vec<Tensor> = (0..3)
            .map(|m| Tensor::float(dtype, vec![50, 50], values(2500, m as f64)))
            .collect();
        let cols: Vec<Vec<f64>> = all.iter().map(Tensor::to_f64).collect();
        let cases: [(ReduceType, Combine); 5] = [
            (ReduceType::Sum, |a, b| a + b),
            (ReduceType::Avg, |a, b| a + b),
            (ReduceType::Max, f64::max),
            (ReduceType::Min, f64::min),
            (ReduceType::Prod, |a, b| a * b),
        ];
        for (reduce, f) in cases {
            let want: Vec<f64> = (0..2500)
                .map(|i| {
                    let v = f(f(cols[0][i], cols[1][i]), cols[2][i]);
                    if reduce == ReduceType::Avg {
                        v / 3.0
                    } else {
                        v
                    }
                })
                .collect();
            assert_eq!(
                reduce_all(&all, reduce),
                Tensor::float(dtype, vec![50, 50], want),
                "{dtype:?} {reduce:?}"
            );
        }
    }
}

#[test]
fn an_activation_gradient_of_another_size_is_an_error() {
    let x = Tensor::float(DType::F32, vec![4], values(4, 0.0));
    let d = Tensor::float(DType::F32, vec![3], values(3, 0.0));
    let err = unary_grad(Unary::Relu, &x, &d).expect_err("sizes differ");
    assert!(
        err.to_string().contains("[4] and its gradient [3]"),
        "{err}"
    );
}

#[test]
fn profiling_a_step_names_the_families_and_the_gradient_sync_apart() {
    let plan = shardlab::cli::step_bench_plan().expect("the bench plan");
    let p = run_passes(&plan, &PassOptions::default()).expect("passes");
    let opts = RunOptions {
        record: false,
        profile: true,
        ..RunOptions::default()
    };
    let serial = run_serial(&p, &opts).expect("serial");
    let ranks = run_distributed(&p, &opts, false).expect("ranks");
    let names = |l: &shardlab::exec::run::Log| -> Vec<String> {
        l.op_times.iter().map(|(n, _)| n.clone()).collect()
    };
    let (s, r) = (names(&serial), names(&ranks));
    assert!(s.contains(&"matmul_v2".to_string()), "{s:?}");
    assert!(!s.iter().any(|n| n.contains("gradient sync")), "{s:?}");
    assert!(
        r.contains(&"all_reduce (gradient sync)".to_string()),
        "{r:?}"
    );
    assert!(r.contains(&"scale (gradient sync)".to_string()), "{r:?}");
    // Longest first, every time positive.
    let secs: Vec<f64> = ranks.op_times.iter().map(|(_, t)| *t).collect();
    assert!(secs.windows(2).all(|w| w[0] >= w[1]), "{secs:?}");
    assert!(secs.iter().all(|t| *t > 0.0), "{secs:?}");
    // Without profiling nothing is timed.
    let plain = run_serial(&p, &RunOptions::default()).expect("serial");
    assert!(plain.op_times.is_empty());
}
