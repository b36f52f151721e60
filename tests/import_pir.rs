//! `shardlab import` of Paddle programs (PIR text, as Paddle 3 prints them): the fixtures of
//! `tests/models/` (`scripts/models/make_pir_fixtures.py` wrote them from Paddle's and
//! PaddleFormers' own layer code, with the framework's figures beside each in `.pir.json`)
//! import with the framework's parameter count and operator census; PaddleFormers'
//! `LlamaForCausalLM`, head and masked cross-entropy included, plans dp × Megatron and runs
//! distributed equal to serial; Llama 3 8B at its published size imports and plans; hostile
//! text is a clear error naming the line, never a panic.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use shardlab::import::{import_model, import_pir, ImportError, ImportOptions, Imported};
use shardlab::ir::{OpType, VarKind};
use shardlab::plan::parallel::Parallel;

const MLP: &str = include_str!("models/mlp_block.pir");
const LLAMA: &str = include_str!("models/llama_causal_2l.pir");
const LLAMA_8B: &str = include_str!("models/llama3_8b.pir");

fn import(text: &str) -> Imported {
    import_pir(text, &ImportOptions::default()).unwrap_or_else(|e| panic!("{e}"))
}

fn params(imported: &Imported) -> u64 {
    let vars = imported.program.vars();
    let params = vars.iter().filter(|v| v.kind == VarKind::Parameter);
    params.map(|v| v.ty.numel()).sum()
}

/// The fixture's parameter count and census equal what Paddle reported of it.
fn as_the_framework_reports(imported: &Imported, record: &str) {
    let framework: serde_json::Value = serde_json::from_str(record).unwrap();
    assert_eq!(
        params(imported),
        framework["framework_parameters"].as_u64().unwrap()
    );
    let ops = framework["pir_ops"].as_object().unwrap();
    assert_eq!(imported.census.len(), ops.len());
    for (op, n) in &imported.census {
        assert_eq!(ops[op].as_u64(), Some(*n as u64), "{op}");
    }
}

fn count(imported: &Imported, ty: OpType) -> usize {
    imported.program.ops().iter().filter(|o| o.ty == ty).count()
}

#[test]
fn the_paddle_mlp_program_imports_as_paddle_reports_it() {
    let imported = import(MLP);
    as_the_framework_reports(&imported, include_str!("models/mlp_block.pir.json"));
    let names: Vec<&str> = imported.program.ops().iter().map(|o| o.ty.name()).collect();
    assert_eq!(
        names,
        [
            "layer_norm",
            "matmul_v2",
            "elementwise_add",
            "gelu",
            "matmul_v2",
            "elementwise_add",
            "reduce_mean",
            "mean"
        ]
    );
    // Paddle's own names: the parameters' and the input's.
    for name in ["x", "linear_0.w_0", "layer_norm_0.w_0"] {
        assert!(imported.program.var_id(name).is_some(), "{name}");
    }
    assert_eq!(
        imported.notes.last().unwrap(),
        "the loss is `mean_16`, the program's scalar with a gradient that no op reads"
    );
}

/// A program without a loss (inference) trains the mean of its last output, and says so.
#[test]
fn an_inference_program_trains_the_mean_of_its_output() {
    let inference: String = MLP
        .lines()
        .filter(|l| !l.contains("(%15)") && !l.contains("(%16)"))
        .map(|l| format!("{l}\n"))
        .collect();
    let imported = import(&inference);
    assert_eq!(
        imported.notes.last().unwrap(),
        "the loss is the mean of `add_14`, the program's last output (it has no scalar loss)"
    );
    let last = imported.program.ops().last().unwrap();
    assert_eq!(last.ty, OpType::Mean);
}

#[test]
fn the_paddleformers_causal_llama_imports_plans_and_runs() {
    let imported = import(LLAMA);
    as_the_framework_reports(&imported, include_str!("models/llama_causal_2l.pir.json"));
    // Two RMSNorms a block and the final one, SiLU, rotate-half and repeated heads fused as
    // in the ONNX export; the head (tied to the embedding, transposed) and the loss.
    assert_eq!(count(&imported, OpType::RmsNorm), 5);
    assert_eq!(count(&imported, OpType::Silu), 2);
    assert_eq!(count(&imported, OpType::Split), 4);
    assert_eq!(count(&imported, OpType::RepeatInterleave), 4);
    assert_eq!(count(&imported, OpType::MatmulV2), 19);
    assert_eq!(count(&imported, OpType::SoftmaxWithCrossEntropy), 1);
    let p = &imported.program;
    let head = p.ops().iter().rfind(|o| o.ty == OpType::MatmulV2).unwrap();
    assert_eq!(
        &*p.var(head.inputs[1][0]).name,
        "embedding_0.w_0",
        "the tied head"
    );
    assert!(head.attr_bool("trans_y", false));
    // The tables the program computes (cos, sin, the causal mask, the labels and their
    // mask and count) are inputs; the ops computing them are not imported.
    assert!(imported
        .notes
        .iter()
        .any(|n| n.starts_with("line 65: `where_63` [2, 1, 16, 16] is computed from")));
    assert!(imported.notes.iter().any(|n| n
        == "2 ops with a gradient do not reach the loss and are left out (pd_op.sum, pd_op.share_data_)"));
    for spec in ["dp=2", "tp=2", "dp=2,tp=2"] {
        let (passes, forward_all_reduces) = common::passes_under(p, spec);
        if spec.contains("tp") {
            // o and down per block and the vocabulary-parallel embedding; the tied head
            // leaves the logits split over the vocabulary, and the loss is
            // `c_softmax_with_cross_entropy`, which sums inside its kernel. Under dp the
            // masked loss sum is partial over dp: one reshard completes it (4 bytes)
            // before the division by the token count.
            let dp = usize::from(spec.contains("dp"));
            assert_eq!(forward_all_reduces, 2 * 2 + 1 + dp, "{spec}");
            let ops = passes.partitioned.ranks[0].program.ops();
            assert!(
                ops.iter().any(|o| o.ty == OpType::CSoftmaxWithCrossEntropy),
                "{spec}"
            );
        }
        common::verifies_against_serial(&passes, 2).unwrap_or_else(|e| panic!("{spec}: {e}"));
    }
}

#[test]
fn llama3_8b_at_its_published_size_imports_and_plans() {
    let imported = import(LLAMA_8B);
    as_the_framework_reports(&imported, include_str!("models/llama3_8b.pir.json"));
    assert_eq!(
        params(&imported),
        8_030_261_248,
        "Meta's count for Llama 3 8B"
    );
    assert_eq!(count(&imported, OpType::RmsNorm), 65);
    assert_eq!(count(&imported, OpType::MatmulV2), 32 * 7 + 32 * 2 + 1);
    let (passes, _) = common::passes_under(&imported.program, "dp=2,tp=4");
    assert_eq!(passes.partitioned.ranks.len(), 8);
}

/// The shrunk fixture is the real one's twin: the same code at 2 layers instead of 32, so
/// the 8B's ops are the 2-layer program's with its block repeated, and under one strategy
/// every parameter of a kind is split the same way. (`run` executes the twin: the 8B's
/// step would need terabytes.)
#[test]
fn the_shrunk_llama_is_the_real_sizes_twin() {
    let (small, big) = (import(LLAMA), import(LLAMA_8B));
    let names = |i: &Imported| -> Vec<&'static str> {
        i.program.ops().iter().map(|o| o.ty.name()).collect()
    };
    let (s, b) = (names(&small), names(&big));
    let block = (b.len() - s.len()) / 30;
    assert_eq!(b.len(), s.len() + 30 * block);
    let twin = (0..s.len()).any(|start| {
        let mut grown = s[..start].to_vec();
        for _ in 0..32 {
            grown.extend_from_slice(s.get(start..start + block).unwrap_or(&[]));
        }
        grown.extend_from_slice(s.get(start + 2 * block..).unwrap_or(&[]));
        grown == b
    });
    assert!(
        twin,
        "the 8B's ops are the 2-layer program's with its block repeated"
    );
    let layout = |i: &Imported| -> Vec<String> {
        let strategy = Parallel::parse("dp=2,tp=2").unwrap();
        let mut kinds: Vec<String> = strategy
            .shard_specs(&i.program)
            .iter()
            .map(|spec| {
                // `linear_12.w_0=-,tp` → the layout alone, one per kind of weight.
                spec.split_once('=')
                    .map_or(spec.clone(), |(_, l)| l.to_string())
            })
            .collect();
        kinds.sort();
        kinds.dedup();
        kinds
    };
    assert_eq!(layout(&small), layout(&big));
}

#[test]
fn either_format_is_told_by_its_content() {
    let text = import_model(LLAMA.as_bytes(), &ImportOptions::default()).unwrap();
    assert_eq!(text.census.first().unwrap().0, "pd_op.full_int_array");
    let onnx = import_model(
        include_bytes!("models/mlp_block.onnx"),
        &ImportOptions {
            dims: vec![("DynamicDimension.0".into(), 4)],
        },
    )
    .unwrap();
    assert!(onnx.census.iter().any(|(op, _)| op == "LayerNormalization"));
    let e = import_model(b" {\n\xff\xfe", &ImportOptions::default()).unwrap_err();
    assert!(
        e.to_string().starts_with("not a Paddle program: line 2"),
        "{e}"
    );
}

#[test]
fn bad_programs_are_errors_that_name_the_line() {
    let silu_lines: Vec<usize> = LLAMA
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains("\"pd_op.silu\""))
        .map(|(i, _)| i + 1)
        .collect();
    let cases: Vec<(String, String)> = vec![
        (
            LLAMA.replace("\"pd_op.silu\"", "\"pd_op.swiglu_x\""),
            format!(
                "2 nodes of 1 operator types ShardLab does not import:\n  pd_op.swiglu_x × 2: line {}, line {}",
                silu_lines[0], silu_lines[1]
            ),
        ),
        (
            MLP.replace("(%12) = \"pd_op.gelu\" (%11)", "(%12) = \"pd_op.gelu\" (%99)"),
            "node `line 12` reads `%99`, which no input".into(),
        ),
        (
            MLP.replace("(%13) = \"pd_op.matmul\"", "(%12) = \"pd_op.matmul\""),
            "`%12` is defined twice (the second time by node `line 13`)".into(),
        ),
        (
            MLP.replace("shape:[8,16,64]", "shape:[-1,16,64]")
                .replace("-> tensor<8x16x64xf32>\n    (%7", "-> tensor<-1x16x64xf32>\n    (%7"),
            "input `x` dim 0 is symbolic (`x_dim0`): give it a size with --dim x_dim0=N".into(),
        ),
        (MLP[..MLP.len() / 2].to_string(), "not a Paddle program: line 8".into()),
        (
            MLP.replace("-> tensor<8x16x64xf32>\n    (%7", "-> tensor<4611686018427387904x16x64xf32>\n    (%7"),
            "`x` has dim 0 = 4611686018427387904: a dim is a size from 1 to 2^53".into(),
        ),
        (
            LLAMA.replace("\"pd_op.embedding\" (%21, %20)", "\"pd_op.embedding\" (%20)"),
            "node `line 25` (pd_op.embedding): expected at least 2 operands and a result".into(),
        ),
        (
            MLP.replace("tensor<256x64xf32>", "tensor<256x0xf32>"),
            "`linear_1.w_0` has dim 1 = 0".into(),
        ),
    ];
    for (text, want) in cases {
        let e = import_pir(&text, &ImportOptions::default()).unwrap_err();
        assert!(e.to_string().contains(&want), "want {want:?}, got: {e}");
    }
    // A size given for the open batch imports it.
    let open = MLP.replace("shape:[8,16,64]", "shape:[-1,16,64]").replace(
        "-> tensor<8x16x64xf32>\n    (%7",
        "-> tensor<-1x16x64xf32>\n    (%7",
    );
    let opts = ImportOptions {
        dims: vec![("x_dim0".into(), 6)],
    };
    let imported = import_pir(&open, &opts).unwrap();
    let x = imported.program.var_id("x").unwrap();
    assert_eq!(imported.program.var(x).ty.shape.as_slice(), [6, 16, 64]);
    assert!(matches!(
        import_pir("{\n}\n", &ImportOptions::default()),
        Err(ImportError::NoOutput)
    ));
}

/// Per layer, the numbers Paddle itself reports (`paddle.flops`'s table, recorded by the
/// fixture script): each Linear's multiply-adds are half of ShardLab's FLOPs for its
/// matmul, and its input and output shapes are the matmul's. And every activation the
/// import kept has the shape Paddle's program gives it.
#[test]
fn per_layer_flops_and_activation_shapes_are_paddles() {
    use shardlab::import::pir_text::{parse, PirType};
    let imported = import(LLAMA);
    let p = &imported.program;
    let record: serde_json::Value =
        serde_json::from_str(include_str!("models/llama_causal_2l.pir.json")).unwrap();
    let layers = record["framework_layers"].as_object().unwrap();
    assert_eq!(layers.len(), 14, "seven Linear layers a block");
    common::linear_layers_as_paddle(p, layers);
    // Activations: `matmul_90` is `%90` of the program; its type is Paddle's.
    let ops = parse(LLAMA).unwrap();
    let mut checked = 0;
    for op in &ops {
        let short = op.name.rsplit('.').next().unwrap().trim_end_matches('_');
        for (r, ty) in op.results.iter().zip(&op.result_types) {
            let name = format!("{short}_{}", r.trim_start_matches('%'));
            let (Some(v), PirType::Tensor { dims, .. }) = (p.var_id(&name), ty) else {
                continue;
            };
            let ours: Vec<i64> = p.var(v).ty.shape.iter().map(|&d| d as i64).collect();
            assert_eq!(&ours, dims, "{name}");
            checked += 1;
        }
    }
    assert!(checked >= 80, "{checked} activations compared");
}
