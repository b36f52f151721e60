//! Golden text of every preset, and the presets verify. Rewrite goldens with
//! `UPDATE_EXPECT=1 cargo test --test presets`.
#![cfg(not(target_arch = "wasm32"))]

use expect_test::{expect_file, ExpectFile};
use shardlab::ir::{parse_program, verify_program, OpRole};
use shardlab::models::{Model, ModelConfig};

fn check(model: Model, cfg: &ModelConfig, golden: ExpectFile) {
    let program = model.build(cfg).expect("preset builds");
    assert_eq!(
        verify_program(&program),
        vec![],
        "{} verifies",
        model.name()
    );
    let text = program.to_string();
    golden.assert_eq(&text);
    let reparsed = parse_program(&text).expect("preset text parses");
    assert_eq!(
        reparsed.to_string(),
        text,
        "print -> parse -> print is the identity"
    );
}

#[test]
fn mlp_matches_paddle_oracle_model() {
    check(
        Model::Mlp,
        &Model::Mlp.default_config(),
        expect_file!["golden/mlp.txt"],
    );
}

#[test]
fn mlp_mse_matches_jax_oracle_model() {
    check(
        Model::MlpMse,
        &Model::MlpMse.default_config(),
        expect_file!["golden/mlp_mse.txt"],
    );
}

#[test]
fn gpt_two_layers() {
    check(
        Model::Gpt,
        &Model::Gpt.default_config(),
        expect_file!["golden/gpt_2.txt"],
    );
}

#[test]
fn embedding_lm_one_layer() {
    check(
        Model::EmbeddingLm,
        &Model::EmbeddingLm.default_config(),
        expect_file!["golden/embedding_lm_1.txt"],
    );
}

#[test]
fn mlp_var_shapes_match_paddle_oracle() {
    // ../shared/oracle/paddle/complete_mlp.json lists these vars and shapes.
    let program = Model::Mlp.build(&Model::Mlp.default_config()).unwrap();
    let expected: &[(&str, &[usize])] = &[
        ("x", &[16, 64]),
        ("label", &[16, 1]),
        ("linear_0.w_0", &[64, 256]),
        ("linear_0.b_0", &[256]),
        ("linear_1.w_0", &[256, 10]),
        ("linear_1.b_0", &[10]),
        ("linear_0.tmp_0", &[16, 256]),
        ("linear_0.tmp_1", &[16, 256]),
        ("gelu_0.tmp_0", &[16, 256]),
        ("linear_1.tmp_0", &[16, 10]),
        ("linear_1.tmp_1", &[16, 10]),
        ("softmax_with_cross_entropy_0.tmp_0", &[16, 10]),
        ("softmax_with_cross_entropy_0.tmp_1", &[16, 1]),
        ("mean_0.tmp_0", &[]),
    ];
    let got: Vec<(&str, &[usize])> = program
        .vars()
        .iter()
        .map(|v| (&*v.name, v.ty.shape.as_slice()))
        .collect();
    assert_eq!(got, expected);
    let ops: Vec<&str> = program.ops().iter().map(|o| o.ty.name()).collect();
    assert_eq!(
        ops,
        [
            "matmul_v2",
            "elementwise_add",
            "gelu",
            "matmul_v2",
            "elementwise_add",
            "softmax_with_cross_entropy",
            "reduce_mean"
        ]
    );
}

#[test]
fn gpt_op_count_grows_linearly_with_layers() {
    // 29 forward ops per block, plus the final layer_norm and a 3-op loss.
    for layers in [1, 2, 8, 96] {
        let cfg = ModelConfig {
            layers,
            ..Model::Gpt.default_config()
        };
        let program = Model::Gpt.build(&cfg).unwrap();
        assert_eq!(program.ops().len(), 29 * layers + 4, "{layers} layers");
        assert_eq!(program.ops().last().map(|o| o.role), Some(OpRole::Loss));
        assert!(verify_program(&program).is_empty());
    }
}

#[test]
fn bad_sizes_are_errors_not_panics() {
    let cases = [
        (
            Model::Gpt,
            ModelConfig {
                heads: 3,
                ..Model::Gpt.default_config()
            },
            "hidden 64 must be divisible by heads 3",
        ),
        (
            Model::Mlp,
            ModelConfig {
                batch: 0,
                ..Model::Mlp.default_config()
            },
            "batch must be at least 1",
        ),
        (
            Model::Gpt,
            ModelConfig {
                seq: 1 << 20,
                batch: 1 << 20,
                ..Model::Gpt.default_config()
            },
            "the model is too large",
        ),
    ];
    for (model, cfg, want) in cases {
        let err = model.build(&cfg).unwrap_err().to_string();
        assert!(err.contains(want), "{err:?} should contain {want:?}");
    }
}
