//! Single ops run by the interpreter on hand-set values, for behaviour the model runs do
//! not reach: AMP's loss-scale growth and shrinking, and the embedding's id range.
#![cfg(not(target_arch = "wasm32"))]

use shardlab::exec::comm::CoopComm;
use shardlab::exec::interp::{Rank, Status};
use shardlab::exec::tensor::Tensor;
use shardlab::ir::{parse_program, DType, Program};

fn scalar(v: f64) -> Option<Tensor> {
    Some(Tensor::float(DType::F32, vec![], vec![v]))
}

/// Runs `program` once from `env` (one value per variable, in declaration order).
fn run(program: &Program, env: Vec<Option<Tensor>>) -> Result<Vec<Option<Tensor>>, String> {
    let mut rank = Rank::new(0, program, env, None);
    match rank.step(&CoopComm::default()) {
        Ok(Status::Done) => Ok(rank.env),
        Ok(Status::Blocked) => Err("blocked".into()),
        Err(e) => Err(e.to_string()),
    }
}

const SCALING: &str = "var g: f32[2] gradient\nvar found: f32[] optimizer_state\nvar scale: f32[] optimizer_state\nvar good: f32[] optimizer_state\nvar bad: f32[] optimizer_state\n\
op update_loss_scaling(X=[g], FoundInfinite=found, PrevLossScaling=scale, InGoodSteps=good, InBadSteps=bad) -> (Out=[g], LossScaling=scale, OutGoodSteps=good, OutBadSteps=bad) {incr_every_n_steps=3, decr_every_n_nan_or_inf=2, incr_ratio=2.0, decr_ratio=0.5} role=optimize\n";

/// (scale, good, bad, g) after one update from `found`, `good`, `bad` with scale 8.
fn scaling(found: f64, good: f64, bad: f64) -> (f64, f64, f64, Vec<f64>) {
    let program = parse_program(SCALING).unwrap();
    let g = Some(Tensor::float(DType::F32, vec![2], vec![1.5, -2.0]));
    let env = run(
        &program,
        vec![g, scalar(found), scalar(8.0), scalar(good), scalar(bad)],
    )
    .unwrap();
    let get = |i: usize| env[i].as_ref().unwrap().clone();
    (
        get(2).scalar(),
        get(3).scalar(),
        get(4).scalar(),
        get(0).to_f64(),
    )
}

/// Paddle's dynamic loss scaling: a clean step counts up and, at `incr_every_n_steps`,
/// doubles the scale; an overflow zeroes the gradients, counts bad steps and, at
/// `decr_every_n_nan_or_inf`, halves the scale (never below 1).
#[test]
fn loss_scaling_grows_after_good_steps_and_shrinks_after_overflows() {
    assert_eq!(scaling(0.0, 0.0, 1.0), (8.0, 1.0, 0.0, vec![1.5, -2.0]));
    assert_eq!(scaling(0.0, 2.0, 0.0), (16.0, 0.0, 0.0, vec![1.5, -2.0]));
    assert_eq!(scaling(1.0, 2.0, 0.0), (8.0, 0.0, 1.0, vec![0.0, 0.0]));
    assert_eq!(scaling(1.0, 0.0, 1.0), (4.0, 0.0, 0.0, vec![0.0, 0.0]));
}

const LOOKUP: &str =
    "var w: f32[4, 2] parameter\nvar ids: i64[3] input\nvar out: f32[3, 2] activation\n\
op lookup_table_v2(W=w, Ids=ids) -> (Out=out)\n";

fn lookup(ids: &[f64]) -> Result<Vec<f64>, String> {
    let program = parse_program(LOOKUP).unwrap();
    let w = Tensor::float(DType::F32, vec![4, 2], (0..8).map(f64::from).collect());
    let ids = Tensor::float(DType::I64, vec![ids.len()], ids.to_vec());
    let env = run(&program, vec![Some(w), Some(ids), None])?;
    Ok(env[2].as_ref().unwrap().to_f64())
}

/// Every id of the table's rows, 0 and the last included, looks its row up; an id outside
/// the rows is an error naming it.
#[test]
fn lookup_takes_ids_zero_to_rows_minus_one() {
    assert_eq!(
        lookup(&[0.0, 3.0, 1.0]).unwrap(),
        [0.0, 1.0, 6.0, 7.0, 2.0, 3.0]
    );
    assert!(lookup(&[4.0, 0.0, 0.0])
        .unwrap_err()
        .contains("token id 4 is outside the 4 rows"));
    assert!(lookup(&[-1.0, 0.0, 0.0])
        .unwrap_err()
        .contains("token id -1 is outside the 4 rows"));
}

/// scale: `scale · x + bias`, or `scale · (x + bias)` with the bias before the scale.
#[test]
fn scale_applies_its_bias_before_or_after() {
    let run_scale = |after: bool| {
        let text = format!(
            "var x: f32[3] input\nvar y: f32[3] activation\nop scale(X=x) -> (Out=y) {{scale=2.0, bias=1.0, bias_after_scale={after}}}\n"
        );
        let program = parse_program(&text).unwrap();
        let x = Tensor::float(DType::F32, vec![3], vec![1.0, -2.0, 0.5]);
        let env = run(&program, vec![Some(x), None]).unwrap();
        env[1].as_ref().unwrap().to_f64()
    };
    assert_eq!(run_scale(true), [3.0, -3.0, 2.0]);
    assert_eq!(run_scale(false), [4.0, -2.0, 3.0]);
}
