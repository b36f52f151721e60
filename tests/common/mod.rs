//! Helpers shared by the test suites.
#![allow(dead_code)]

use proptest::prelude::*;
use serde_json::Value;
use shardlab::dist::{ProcessMesh, TensorDistAttr};
use shardlab::models::scenarios::megatron_shards;
use shardlab::models::{Model, ModelConfig};
use shardlab::plan::{parse_mesh_spec, parse_shard_spec, Annotation, Plan};
use std::sync::Arc;

/// Paddle's MLP oracle data.
pub fn paddle_mlp_oracle() -> Value {
    serde_json::from_str(include_str!("../oracle/paddle/complete_mlp.json")).unwrap()
}

/// The plan of one oracle config: Paddle's MLP, the config's mesh and its annotations
/// (`None` for a var = not annotated; `None` inside a list = a pinned replicated dim).
pub fn paddle_config_plan(config: &Value) -> Plan {
    let ann = &config["annotation"];
    let shape: Vec<usize> = serde_json::from_value(ann["mesh_shape"].clone()).unwrap();
    let names: Vec<String> = serde_json::from_value(ann["dim_names"].clone()).unwrap();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let mesh = Arc::new(ProcessMesh::with_names(&shape, &refs).unwrap());
    let program = Model::Mlp.build(&Model::Mlp.default_config()).unwrap();
    let mut annotations = Vec::new();
    for (name, dims) in ann.as_object().unwrap() {
        let (Some(list), Some(var)) = (dims.as_array(), program.var_id(name)) else {
            continue;
        };
        let mut attr = TensorDistAttr::replicated(shardlab::dist::MeshId::JOB, list.len());
        for (d, axis) in list.iter().enumerate() {
            attr.annotated[d] = true;
            if let Some(a) = axis.as_str() {
                attr.dims[d] = shardlab::dist::DimAxes::one(mesh.axis_by_name(a).unwrap());
            }
        }
        annotations.push(Annotation { var, attr });
    }
    Plan {
        meshes: shardlab::dist::MeshTable::single(mesh),
        program,
        annotations,
        options: Default::default(),
        stages: Vec::new(),
    }
}

/// A preset with `layers`, a mesh spec and shard specs.
pub fn preset_plan(model: Model, layers: usize, mesh: &str, shards: &[String]) -> Plan {
    let cfg = ModelConfig {
        layers: layers.max(1),
        ..model.default_config()
    };
    plan_with(model.build(&cfg).unwrap(), mesh, shards)
}

/// `program` on the mesh `mesh` (e.g. `2x4:dp,mp`) with `shards` (e.g. `x=dp,-`).
/// `program` planned under a strategy by sizes (`dp=2,tp=2`) and taken through every pass;
/// with the count of forward all-reduces on rank 0 (tensor parallelism's, a reshard's).
#[allow(dead_code)]
pub fn passes_under(
    program: &shardlab::ir::Program,
    spec: &str,
) -> (shardlab::passes::driver::Passes, usize) {
    use shardlab::ir::{OpRole, OpType};
    let strategy = shardlab::plan::parallel::Parallel::parse(spec).unwrap();
    let shards = strategy.shard_specs(program);
    let plan = plan_with(program.clone(), &strategy.mesh_spec(), &shards);
    let opts = shardlab::passes::driver::PassOptions::from_plan(&plan.options);
    let passes = shardlab::passes::driver::run_passes(&plan, &opts).unwrap();
    let forward_all_reduces = passes.partitioned.ranks[0]
        .program
        .ops()
        .iter()
        .filter(|o| o.ty == OpType::AllReduce && o.role == OpRole::Forward)
        .count();
    (passes, forward_all_reduces)
}

pub fn plan_with<S: AsRef<str>>(program: shardlab::ir::Program, mesh: &str, shards: &[S]) -> Plan {
    let mesh = Arc::new(parse_mesh_spec(mesh).unwrap());
    let annotations = shards
        .iter()
        .map(|s| parse_shard_spec(s.as_ref(), &program, &mesh).unwrap())
        .collect();
    Plan {
        meshes: shardlab::dist::MeshTable::single(mesh),
        program,
        annotations,
        options: Default::default(),
        stages: Vec::new(),
    }
}

/// The three standard configs of a preset: (name, mesh, shards).
pub fn standard_configs(
    model: Model,
    layers: usize,
) -> Vec<(&'static str, &'static str, Vec<String>)> {
    let dp = match model {
        Model::Mlp => "x=dp,-",
        Model::MlpMse => "batch.x=dp,-",
        Model::EmbeddingLm | Model::GptLm | Model::Llama => "ids=dp,-",
        Model::Gpt => "x=dp,-,-",
    }
    .to_string();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let mp = match model {
        Model::Mlp => s(&["linear_0.w_0=-,mp", "linear_0.b_0=mp", "linear_1.w_0=mp,-"]),
        Model::MlpMse => s(&["params.W1=-,mp", "params.W2=mp,-"]),
        Model::Gpt | Model::EmbeddingLm | Model::GptLm => megatron_shards(layers, "mp"),
        Model::Llama => shardlab::models::scenarios::llama_megatron_shards(layers, "mp"),
    };
    let mut both = vec![dp.clone()];
    both.extend(mp.clone());
    vec![
        ("dp", "4:dp", vec![dp]),
        ("mp", "4:mp", mp),
        ("dp_mp", "2x4:dp,mp", both),
    ]
}

/// A random plan in f32 (see `random_plan_of`).
pub fn random_plan() -> impl Strategy<Value = Plan> {
    random_plan_of(prop::sample::select(vec![shardlab::ir::DType::F32]))
}

/// A random plan: a small preset (every one, llama's rotary embeddings and grouped-query
/// heads included), a random 1-, 2- or 3-D mesh, and random (valid) annotations, in one of
/// `dtypes`.
pub fn random_plan_of(
    dtypes: impl Strategy<Value = shardlab::ir::DType>,
) -> impl Strategy<Value = Plan> {
    let meshes = prop::sample::select(vec!["2:a", "4:a", "2x2:a,b", "2x4:a,b", "2x2x2:a,b,c"]);
    let models = prop::sample::select(vec![
        Model::Mlp,
        Model::MlpMse,
        Model::Gpt,
        Model::EmbeddingLm,
        Model::Llama,
    ]);
    let picks = prop::collection::vec(
        (
            any::<prop::sample::Index>(),
            prop::collection::vec(0usize..5, 4),
        ),
        1..6,
    );
    (meshes, models, picks, dtypes).prop_map(|(mesh, model, picks, dtype)| {
        let cfg = ModelConfig {
            layers: 1,
            dtype,
            ..model.default_config()
        };
        let program = model.build(&cfg).unwrap();
        let mesh = Arc::new(parse_mesh_spec(mesh).unwrap());
        let mut annotations: Vec<Annotation> = Vec::new();
        for (var, choices) in picks {
            let v = shardlab::ir::VarId(var.index(program.vars().len()) as u32);
            if annotations.iter().any(|a| a.var == v) {
                continue;
            }
            let var_ref = program.var(v);
            let mut attr =
                TensorDistAttr::replicated(shardlab::dist::MeshId::JOB, var_ref.ty.rank());
            for (d, &choice) in choices.iter().enumerate().take(var_ref.ty.rank()) {
                // 0: free; 1: pinned replicated; 2..: a mesh axis, if free and dividing.
                match choice {
                    0 => {}
                    1 => attr.annotated[d] = true,
                    c => {
                        let axis = shardlab::dist::MeshAxis::new((c - 2) % mesh.ndim()).unwrap();
                        let mut trial = attr.clone();
                        trial.dims[d] = shardlab::dist::DimAxes::one(axis);
                        trial.annotated[d] = true;
                        if trial
                            .validate(&var_ref.name, &var_ref.ty.shape, &mesh)
                            .is_ok()
                        {
                            attr = trial;
                        }
                    }
                }
            }
            annotations.push(Annotation { var: v, attr });
        }
        Plan {
            meshes: shardlab::dist::MeshTable::single(mesh),
            program,
            annotations,
            options: Default::default(),
            stages: Vec::new(),
        }
    })
}

/// Pipeline options with `optimizer` (by name), AMP and an optional clip norm.
pub fn with_optimizer(
    optimizer: &str,
    amp: bool,
    clip_norm: Option<f64>,
) -> shardlab::passes::driver::PassOptions {
    shardlab::passes::driver::PassOptions {
        optimizer: shardlab::passes::optimizer::OptimizerOptions {
            optimizer: shardlab::passes::optimizer::Optimizer::from_name(optimizer).unwrap(),
            amp,
            clip_norm,
        },
        ..Default::default()
    }
}

/// Runs `p` for `steps` steps serially and on every rank and compares them: `Err` names
/// the failing tensors (or a check count that is not a loss per step plus a gradient and a
/// parameter per parameter).
pub fn verifies_against_serial(
    p: &shardlab::passes::driver::Passes,
    steps: usize,
) -> Result<(), String> {
    use shardlab::exec::run::{run_distributed, run_serial, RunOptions};
    let run = RunOptions {
        steps,
        ..Default::default()
    };
    let serial = run_serial(p, &run).map_err(|e| e.to_string())?;
    let dist = run_distributed(p, &run, false).map_err(|e| e.to_string())?;
    let checks = shardlab::exec::verify::verify(&serial, &dist);
    if checks.len() != steps + 2 * p.backward.param_grads.len() {
        return Err(format!("{} checks", checks.len()));
    }
    let failed: Vec<String> = checks
        .iter()
        .filter(|c| !c.pass)
        .map(|c| c.tensor.clone())
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed.join(", "))
    }
}

/// Each Linear layer `paddle.flops` reported (a fixture record's `framework_layers`, keyed
/// by weight): its matmul in `p` has twice the layer's multiply-adds as FLOPs, and the
/// layer's input and output shapes. Returns each layer's input shape.
#[allow(dead_code)]
pub fn linear_layers_as_paddle(
    p: &shardlab::ir::Program,
    layers: &serde_json::Map<String, Value>,
) -> Vec<Vec<u64>> {
    use shardlab::cost::work::{op_work, ElementBytes};
    use shardlab::ir::OpType;
    let mut inputs = Vec::new();
    for (weight, layer) in layers {
        let w = p.var_id(weight).unwrap_or_else(|| panic!("{weight}"));
        let op = p
            .ops()
            .iter()
            .find(|o| o.ty == OpType::MatmulV2 && o.inputs[1].as_slice() == [w])
            .unwrap_or_else(|| panic!("the matmul of {weight}"));
        let flops = op_work(p, op, ElementBytes(4.0)).flops;
        assert_eq!(flops, 2.0 * layer["flops"].as_f64().unwrap(), "{weight}");
        let shape = |v| -> Vec<u64> { p.var(v).ty.shape.iter().map(|&d| d as u64).collect() };
        let want = |k: &str| -> Vec<u64> {
            let dims = layer[k].as_array().unwrap();
            dims.iter().map(|d| d.as_u64().unwrap()).collect()
        };
        assert_eq!(shape(op.inputs[0][0]), want("input"), "{weight}");
        assert_eq!(shape(op.outputs[0][0]), want("output"), "{weight}");
        inputs.push(want("input"));
    }
    inputs
}

/// A Mixtral-style decoder small enough for XLA and two processes: 1 layer, 4 experts,
/// top-2, a batch of 8 sequences of 4 (the export suites' expert-parallel plan).
#[allow(dead_code)]
pub fn tiny_mixtral(dtype: shardlab::ir::DType) -> shardlab::models::ModelConfig {
    use shardlab::models::{Model, ModelConfig};
    ModelConfig {
        batch: 8,
        seq: 4,
        hidden: 32,
        ffn: 16,
        experts: 4,
        top_k: 2,
        layers: 1,
        vocab: 32,
        dtype,
        ..Model::Llama.default_config()
    }
}

/// Deletes, in turn, each inserted op of `s` (in break-it mode) whose label starts with
/// `kind`, runs the broken plan, and panics if a deletion goes unnoticed; returns how many
/// were deleted.
#[allow(dead_code)]
pub fn every_deletion_caught(s: &shardlab::session::Session, kind: &str) -> usize {
    use shardlab::session::{Action, Breakage};
    let ops: Vec<usize> = s
        .inserted_ops()
        .into_iter()
        .filter(|o| o.label.starts_with(kind))
        .map(|o| o.op)
        .collect();
    for &op in &ops {
        let broken = shardlab::engine::finish(
            s.clone()
                .reduce(Action::Break(Breakage::Delete { op }))
                .reduce(Action::RunBroken),
        );
        let r = broken.break_report.as_ref().expect("a report");
        assert!(
            !r.diverged.is_empty() || r.failure.is_some(),
            "deleting op {op} ({kind}) went unnoticed"
        );
    }
    ops.len()
}
