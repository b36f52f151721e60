//! `shardlab import` of ONNX: the fixture of `tests/models/` (a transformer block's MLP
//! from Paddle's own layers, exported by paddle2onnx; `scripts/models/make_fixtures.py`
//! wrote it and the framework's own figures beside it) imports with its parameter count,
//! operator census and shapes as Paddle reports them, its exact GELU fused from five
//! nodes, plans with Megatron's annotations found by pattern, and runs distributed equal to
//! serial; hostile files are clear errors, never panics.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use prost::Message;
use shardlab::import::onnx_proto::{
    data_type, AttributeProto, Dimension, GraphProto, ModelProto, NodeProto, TensorProto,
    TensorShapeProto, TypeProto, TypeProtoTensor, ValueInfoProto,
};
use shardlab::import::{import_onnx, ImportError, ImportOptions};
use shardlab::ir::{OpType, VarKind};
use shardlab::passes::driver::{run_passes, PassOptions};
use shardlab::plan::parallel::Parallel;

const MLP: &[u8] = include_bytes!("models/mlp_block.onnx");

fn reported() -> serde_json::Value {
    serde_json::from_str(include_str!("models/mlp_block.json")).unwrap()
}

fn batch(n: usize) -> ImportOptions {
    ImportOptions {
        dims: vec![("DynamicDimension.0".into(), n)],
    }
}

#[test]
fn the_paddle_mlp_imports_as_paddle_reports_it() {
    let imported = import_onnx(MLP, &batch(8)).unwrap();
    let p = &imported.program;
    let params: u64 = p
        .vars()
        .iter()
        .filter(|v| v.kind == VarKind::Parameter)
        .map(|v| v.ty.numel())
        .sum();
    let framework = reported();
    assert_eq!(params, framework["framework_parameters"].as_u64().unwrap());
    // The census is the graph's operators as the exporter wrote them.
    for (op, n) in &imported.census {
        assert_eq!(
            framework["onnx_ops"][op].as_u64(),
            Some(*n as u64),
            "{op} × {n}"
        );
    }
    let ops: Vec<&str> = p.ops().iter().map(|o| o.ty.name()).collect();
    assert_eq!(
        ops,
        [
            "layer_norm",
            "matmul_v2",
            "elementwise_add",
            "gelu",
            "matmul_v2",
            "elementwise_add",
            "mean"
        ]
    );
    let gelu = p.ops().iter().find(|o| o.ty == OpType::Gelu).unwrap();
    assert!(!gelu.attr_bool("approximate", true), "erf's GELU is exact");
    assert!(imported
        .notes
        .iter()
        .any(|n| n.contains("fused into one gelu")));
    // The input and output shapes are Paddle's, the symbolic batch given.
    let x = p.var(p.var_id("x").unwrap());
    assert_eq!(x.ty.shape.as_slice(), &[8, 16, 64]);
    let out = p.ops()[5].output("Out")[0];
    assert_eq!(p.var(out).ty.shape.as_slice(), &[8, 16, 64]);
}

#[test]
fn the_imported_mlp_plans_megatron_style_and_runs_equal_to_serial() {
    let program = import_onnx(MLP, &batch(8)).unwrap().program;
    for spec in ["dp=2", "tp=2", "dp=2,tp=2"] {
        let strategy = Parallel::parse(spec).unwrap();
        let shards = strategy.shard_specs(&program);
        let plan = common::plan_with(program.clone(), &strategy.mesh_spec(), &shards);
        let passes = run_passes(&plan, &PassOptions::from_plan(&plan.options)).unwrap();
        if spec.contains("tp") {
            // The first linear column-parallel, the second row-parallel: one forward
            // all-reduce, after the second matmul.
            assert!(
                shards.contains(&"linear_0.w_0=-,tp".to_string()),
                "{shards:?}"
            );
            assert!(
                shards.contains(&"linear_1.w_0=tp,-".to_string()),
                "{shards:?}"
            );
            let forward_all_reduces = passes.partitioned.ranks[0]
                .program
                .ops()
                .iter()
                .filter(|o| o.ty == OpType::AllReduce && o.role == shardlab::ir::OpRole::Forward)
                .count();
            assert_eq!(forward_all_reduces, 1, "{spec}");
        }
        common::verifies_against_serial(&passes, 2).unwrap_or_else(|e| panic!("{spec}: {e}"));
    }
}

// --- hostile and unsupported files -------------------------------------------------

fn value(name: &str, dims: &[i64]) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type: Some(data_type::FLOAT),
                shape: Some(TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|&d| Dimension {
                            dim_value: Some(d),
                            dim_param: None,
                        })
                        .collect(),
                }),
            }),
        }),
    }
}

fn node(name: &str, ty: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        name: Some(name.into()),
        op_type: Some(ty.into()),
        domain: None,
        attribute: Vec::<AttributeProto>::new(),
    }
}

fn weight(name: &str, dims: &[i64]) -> TensorProto {
    TensorProto {
        dims: dims.to_vec(),
        data_type: Some(data_type::FLOAT),
        name: Some(name.into()),
        ..Default::default()
    }
}

fn model(nodes: Vec<NodeProto>, init: Vec<TensorProto>, x: &[i64]) -> Vec<u8> {
    let out = nodes
        .last()
        .map(|n| n.output[0].clone())
        .unwrap_or_default();
    ModelProto {
        ir_version: Some(8),
        graph: Some(GraphProto {
            node: nodes,
            initializer: init,
            input: vec![value("x", x)],
            output: vec![value(&out, &[])],
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

fn err(bytes: &[u8]) -> String {
    import_onnx(bytes, &ImportOptions::default())
        .err()
        .unwrap_or_else(|| panic!("imported"))
        .to_string()
}

#[test]
fn unsupported_operators_are_listed_with_counts_and_nodes() {
    let nodes = vec![
        node("conv1", "Conv", &["x", "w"], &["a"]),
        node("conv2", "Conv", &["a", "w"], &["b"]),
        node("pool", "MaxPool", &["b"], &["c"]),
        node("mm", "MatMul", &["c", "w2"], &["d"]),
    ];
    let e = err(&model(
        nodes,
        vec![weight("w", &[4, 4]), weight("w2", &[4, 4])],
        &[2, 4],
    ));
    assert_eq!(
        e,
        "3 nodes of 2 operator types ShardLab does not import:\n  Conv × 2: conv1, conv2\n  MaxPool × 1: pool"
    );
}

#[test]
fn hostile_files_are_clear_errors() {
    let good = model(
        vec![node("mm", "MatMul", &["x", "w"], &["y"])],
        vec![weight("w", &[4, 3])],
        &[2, 4],
    );
    assert!(import_onnx(&good, &ImportOptions::default()).is_ok());
    // Truncated, garbage, empty.
    assert!(
        err(&MLP[..MLP.len() / 2]).starts_with("not an ONNX model: the protobuf does not decode")
    );
    assert!(err(&[0xff; 64]).starts_with("not an ONNX model"));
    assert_eq!(err(&[]), "the ONNX model has no graph");
    // A value read before any node defines it (a cycle or a dangling name).
    let dangling = model(
        vec![node("mm", "MatMul", &["x", "nowhere"], &["y"])],
        vec![],
        &[2, 4],
    );
    assert_eq!(
        err(&dangling),
        "node `mm` reads `nowhere`, which no input, initializer or earlier node defines (a model lists its nodes in topological order)"
    );
    let cycle = model(
        vec![
            node("a", "Relu", &["b"], &["a_out"]),
            node("b", "Relu", &["a_out"], &["b"]),
        ],
        vec![],
        &[2, 4],
    );
    assert!(
        err(&cycle).starts_with("node `a` reads `b`"),
        "{}",
        err(&cycle)
    );
    // Defined twice.
    let twice = model(
        vec![
            node("r1", "Relu", &["x"], &["y"]),
            node("r2", "Relu", &["x"], &["y"]),
        ],
        vec![],
        &[2, 4],
    );
    assert_eq!(
        err(&twice),
        "`y` is defined twice (the second time by node `r2`)"
    );
    // A dim of 2^62, and a zero.
    assert_eq!(
        err(&model(
            vec![node("r", "Relu", &["x"], &["y"])],
            vec![],
            &[1 << 62, 4]
        )),
        "`x` has dim 0 = 4611686018427387904: a dim is a size from 1 to 2^53"
    );
    let huge_weight = model(
        vec![node("mm", "MatMul", &["x", "w"], &["y"])],
        vec![weight("w", &[4, 0])],
        &[2, 4],
    );
    assert!(
        err(&huge_weight).contains("dim 1 = 0"),
        "{}",
        err(&huge_weight)
    );
    // Shapes that do not fit are refused at the node, by ShardLab's own inference.
    let mismatch = model(
        vec![node("mm", "MatMul", &["x", "w"], &["y"])],
        vec![weight("w", &[5, 3])],
        &[2, 4],
    );
    assert!(
        err(&mismatch).starts_with("node `mm` (MatMul): "),
        "{}",
        err(&mismatch)
    );
}

#[test]
fn a_symbolic_dim_needs_its_size() {
    let e = err(MLP);
    assert_eq!(
        e,
        "input `x` dim 0 is symbolic (`DynamicDimension.0`): give it a size with --dim DynamicDimension.0=N"
    );
    let p = import_onnx(MLP, &batch(3)).unwrap().program;
    assert_eq!(p.var(p.var_id("x").unwrap()).ty.shape[0], 3);
}

#[test]
fn names_become_plan_text_names_and_the_text_reparses() {
    let nodes = vec![
        node(
            "/model/mm",
            "MatMul",
            &["x", "onnx::MatMul_7"],
            &["/model/mm_output_0"],
        ),
        node(
            "/model/act",
            "Relu",
            &["/model/mm_output_0"],
            &["/model/relu:0"],
        ),
    ];
    let bytes = model(nodes, vec![weight("onnx::MatMul_7", &[4, 3])], &[2, 4]);
    let imported = import_onnx(&bytes, &ImportOptions::default()).unwrap();
    let text = imported.program.to_string();
    assert!(text.contains("onnx__MatMul_7"), "{text}");
    let back = shardlab::ir::parse_program(&text).unwrap();
    assert_eq!(back.to_string(), text);
}

#[test]
fn mutated_fixture_bytes_never_panic() {
    // Flip bytes across the fixture: every result is a program or an error.
    let mut bytes = MLP.to_vec();
    for i in (0..bytes.len()).step_by(97) {
        let keep = bytes[i];
        bytes[i] ^= 0x5a;
        let _ = import_onnx(&bytes, &batch(2));
        bytes[i] = keep;
    }
    let e: ImportError = import_onnx(&MLP[..10], &batch(2)).err().unwrap();
    assert!(matches!(e, ImportError::Decode(_)), "{e}");
}

/// PaddleFormers' Llama decoder (2 blocks, exported by paddle2onnx) imports with the
/// parameter count Paddle reports: RMSNorm, SiLU, rotary embeddings' rotate-half and
/// grouped-query attention's repeated heads fused from their primitives, the rotary tables
/// and the causal mask fed as inputs (not trained), the empty KV cache dropped; it then
/// plans dp × Megatron by pattern (two forward all-reduces per block) and runs distributed
/// equal to serial.
#[test]
fn the_paddleformers_llama_imports_plans_and_runs() {
    let bytes = include_bytes!("models/llama_model_2l.onnx");
    let framework: serde_json::Value =
        serde_json::from_str(include_str!("models/llama_model_2l.json")).unwrap();
    let imported = import_onnx(bytes, &ImportOptions::default()).unwrap();
    let p = &imported.program;
    let params: u64 = p
        .vars()
        .iter()
        .filter(|v| v.kind == VarKind::Parameter)
        .map(|v| v.ty.numel())
        .sum();
    assert_eq!(params, framework["framework_parameters"].as_u64().unwrap());
    for (op, n) in &imported.census {
        assert_eq!(framework["onnx_ops"][op].as_u64(), Some(*n as u64), "{op}");
    }
    let count = |ty: OpType| p.ops().iter().filter(|o| o.ty == ty).count();
    // Per block two RMSNorms, one SiLU, q's and k's rotate-half, k's and v's repeated
    // heads; the final norm.
    assert_eq!(count(OpType::RmsNorm), 5);
    assert_eq!(count(OpType::Silu), 2);
    assert_eq!(count(OpType::Split), 4);
    assert_eq!(count(OpType::RepeatInterleave), 4);
    assert_eq!(count(OpType::MatmulV2), 18);
    let tables = p
        .vars()
        .iter()
        .filter(|v| v.kind == VarKind::Input && v.ty.rank() == 4)
        .count();
    assert_eq!(tables, 5, "cos and sin per block, and the mask");
    for spec in ["dp=2", "tp=2", "dp=2,tp=2"] {
        let (passes, forward_all_reduces) = common::passes_under(p, spec);
        if spec.contains("tp") {
            assert_eq!(
                forward_all_reduces,
                2 * 2 + 1,
                "{spec}: o and down per block, the embedding"
            );
        }
        common::verifies_against_serial(&passes, 2).unwrap_or_else(|e| panic!("{spec}: {e}"));
    }
}
