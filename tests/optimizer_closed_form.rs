//! Optimizers against closed forms computed here, not by the crate: with the loss
//! `mean(x ⊙ w)` the gradient of `w` is `x / n` at every step, so T steps of each optimizer
//! have a closed form. Run serially and on two ranks with `w` split, in f64, for 3 steps.
//!
//! Paddle's defaults: β1 = 0.9, β2 = 0.999, ε = 1e-8 (Paddle scales ε by √(1 − β2^t), which
//! makes the step exactly lr · m̂ / (√v̂ + ε)), μ = 0.9, AdamW coefficient 0.01.
#![cfg(not(target_arch = "wasm32"))]

use shardlab::exec::run::{run_distributed, run_serial, RunOptions};
use shardlab::exec::tensor::Tensor;
use shardlab::ir::DType;
use shardlab::passes::driver::{run_passes, PassOptions};
use shardlab::passes::optimizer::{Optimizer, OptimizerOptions};
use shardlab::plan::parse_plan;

const X: [f64; 4] = [0.5, -2.0, 1e-9, 3.0];
const W: [f64; 4] = [1.0, 0.25, -0.5, 2.0];
const LR: f64 = 0.1;
const STEPS: usize = 3;

fn expected(optimizer: &str) -> Vec<f64> {
    let n = X.len() as f64;
    X.iter()
        .zip(W)
        .map(|(&x, w0)| {
            let g = x / n;
            let mut w = w0;
            let (mut m, mut v, mut vel) = (0.0, 0.0, 0.0);
            for t in 1..=STEPS as i32 {
                match optimizer {
                    "sgd" => w -= LR * g,
                    "momentum" => {
                        vel = 0.9 * vel + g;
                        w -= LR * vel;
                    }
                    _ => {
                        if optimizer == "adamw" {
                            w -= LR * 0.01 * w;
                        }
                        m = 0.9 * m + 0.1 * g;
                        v = 0.999 * v + 0.001 * g * g;
                        let m_hat = m / (1.0 - 0.9f64.powi(t));
                        let v_hat = v / (1.0 - 0.999f64.powi(t));
                        w -= LR * m_hat / (v_hat.sqrt() + 1e-8);
                    }
                }
            }
            w
        })
        .collect()
}

#[test]
fn optimizers_match_their_closed_forms() {
    let text = "mesh [2] (dp)\nvar x: f64[4] input\nvar w: f64[4] parameter persistable\n\
                var y: f64[4] activation\nvar l: f64[] activation\n\
                op elementwise_mul(X=x, Y=w) -> (Out=y) {axis=-1}\n\
                op mean(X=y) -> (Out=l) role=loss\nshard w [dp]\n";
    let (plan, _) = parse_plan(text).unwrap();
    for optimizer in ["sgd", "momentum", "adam", "adamw"] {
        let opts = PassOptions {
            optimizer: OptimizerOptions {
                optimizer: Optimizer::from_name(optimizer).unwrap(),
                amp: false,
                clip_norm: None,
            },
            ..Default::default()
        };
        let p = run_passes(&plan, &opts).unwrap();
        let mut run = RunOptions {
            steps: STEPS,
            ..Default::default()
        };
        run.init.lr = LR;
        run.feeds
            .insert("x".into(), Tensor::float(DType::F64, vec![4], X.to_vec()));
        run.feeds
            .insert("w".into(), Tensor::float(DType::F64, vec![4], W.to_vec()));
        let want = expected(optimizer);
        for (how, log) in [
            ("serial", run_serial(&p, &run).unwrap()),
            ("two ranks", run_distributed(&p, &run, false).unwrap()),
        ] {
            let w = &log.params[0];
            assert_eq!(w.name, "w");
            for copy in &w.copies {
                for (i, (got, want)) in copy.to_f64().iter().zip(&want).enumerate() {
                    assert!(
                        (got - want).abs() <= 1e-12 * want.abs().max(1.0),
                        "{optimizer} {how} w[{i}]: {got} vs closed form {want}"
                    );
                }
            }
        }
    }
}
