//! Completion of Paddle's MLP agrees with Paddle 3.3.1's static Completer
//! (`oracle/paddle/complete_mlp.json`) in every config: every variable's dims_mapping,
//! every op's implementation, and the partial outputs Paddle records on ops.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use serde_json::Value;
use shardlab::passes::{complete, Completed};

fn oracle() -> Value {
    serde_json::from_str(include_str!("oracle/paddle/complete_mlp.json")).unwrap()
}

fn check_config(name: &str) -> Completed {
    let oracle = oracle();
    let config = &oracle["configs"][name];
    let plan = common::paddle_config_plan(config);
    let c = complete(&plan).unwrap();
    let program = &plan.program;
    for v in config["forward_completion"]["vars"].as_array().unwrap() {
        let var = program.var_id(v["name"].as_str().unwrap()).unwrap();
        let want: Vec<i64> = serde_json::from_value(v["dims_mapping"].clone()).unwrap();
        assert_eq!(
            c.tensors[var.index()].dims_mapping(),
            want,
            "{name}: {}",
            v["name"]
        );
    }
    for (i, op) in config["forward_completion"]["ops"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
    {
        assert_eq!(op["type"].as_str(), Some(program.ops()[i].ty.name()));
        let paddle = shardlab::dist::DistImpl::from_paddle_id(
            op["impl_type"].as_str().unwrap(),
            op["impl_idx"].as_u64().unwrap() as usize,
        );
        assert_eq!(Some(c.ops[i].imp), paddle, "{name}: op{i} implementation");
        for (slot, vars) in op["inputs"].as_object().unwrap() {
            let slot_idx = program.ops()[i]
                .ty
                .input_slots()
                .iter()
                .position(|s| s.name == slot)
                .unwrap();
            for (_, want) in vars.as_object().unwrap() {
                let want: Vec<i64> = serde_json::from_value(want.clone()).unwrap();
                assert_eq!(
                    c.ops[i].inputs[slot_idx][0].dims_mapping(),
                    want,
                    "{name}: op{i} input {slot}"
                );
            }
        }
        if let Some(partials) = op.get("output_partial_dims") {
            for (var, axes) in partials.as_object().unwrap() {
                let v = program.var_id(var).unwrap();
                let want: Vec<usize> = serde_json::from_value(axes.clone()).unwrap();
                assert_eq!(
                    axis_indices(&c.tensors[v.index()].partial_axes()),
                    want,
                    "{name}: partial of {var}"
                );
            }
        }
    }
    c
}

/// Deviation: Paddle's Completer records no partial status on the loss of `reduce_mean`;
/// we mark it AVG-partial over the mesh axes splitting the batch, which is what each rank
/// holds (its local mean). The data-parallel gradient scaling follows from it.
fn assert_loss_is_avg_partial_on(c: &Completed, plan_axes: &[usize]) {
    let loss = c.tensors.last().unwrap();
    assert_eq!(axis_indices(&loss.partial_axes()), plan_axes);
}

fn axis_indices(axes: &[shardlab::dist::MeshAxis]) -> Vec<usize> {
    axes.iter().map(|a| a.index()).collect()
}

#[test]
fn dp_matches_paddle() {
    let c = check_config("dp");
    assert_loss_is_avg_partial_on(&c, &[0]);
}

#[test]
fn megatron_mp_matches_paddle() {
    let c = check_config("mp");
    assert_loss_is_avg_partial_on(&c, &[]);
}

#[test]
fn dp_mp_matches_paddle() {
    let c = check_config("dp_mp");
    assert_loss_is_avg_partial_on(&c, &[0]);
}

#[test]
fn input_only_annotation_on_2d_mesh_matches_paddle() {
    let c = check_config("dp_on_2d_mesh_input_only");
    assert_loss_is_avg_partial_on(&c, &[0]);
}
