//! Shape and dtype inference for every op type, and the verifier's reports.
#![cfg(not(target_arch = "wasm32"))]

use shardlab::ir::infer::infer_op;
use shardlab::ir::{parse_program, verify_program, Attr, DType, Op, OpType, TensorType};

/// Infers `op` over inputs written like `f32[2,3]` and returns the output types as text,
/// or `error: message`.
fn infer(ty: OpType, inputs: &[&[&str]], attrs: &[(&str, Attr)]) -> String {
    let mut op = Op::new(ty);
    op.attrs = attrs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let types: Vec<Vec<TensorType>> = inputs
        .iter()
        .map(|slot| slot.iter().map(|s| tensor_type(s)).collect())
        .collect();
    let refs: Vec<Vec<&TensorType>> = types.iter().map(|slot| slot.iter().collect()).collect();
    match infer_op(&op, &refs) {
        Ok(outs) => outs
            .iter()
            .flatten()
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join(" "),
        Err(e) => format!("error: {e}"),
    }
}

fn tensor_type(spec: &str) -> TensorType {
    let (dtype, dims) = spec.split_once('[').unwrap();
    let shape: Vec<usize> = dims
        .trim_end_matches(']')
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    TensorType::new(DType::from_name(dtype).unwrap(), shape)
}

fn b(v: bool) -> Attr {
    Attr::Bool(v)
}
fn i(v: i64) -> Attr {
    Attr::Int(v)
}
fn ints(v: &[i64]) -> Attr {
    Attr::Ints(v.to_vec())
}

#[test]
fn matmul_shapes() {
    let t = OpType::MatmulV2;
    assert_eq!(
        infer(t, &[&["f32[16,64]"], &["f32[64,256]"]], &[]),
        "f32[16, 256]"
    );
    assert_eq!(
        infer(
            t,
            &[&["f32[64,16]"], &["f32[256,64]"]],
            &[("trans_x", b(true)), ("trans_y", b(true))]
        ),
        "f32[16, 256]"
    );
    assert_eq!(
        infer(t, &[&["f32[4,2,8,16]"], &["f32[4,2,16,8]"]], &[]),
        "f32[4, 2, 8, 8]"
    );
    assert_eq!(
        infer(t, &[&["f32[8,64,32]"], &["f32[1,32,48]"]], &[]),
        "f32[8, 64, 48]"
    );
    assert_eq!(
        infer(t, &[&["f32[3,1,8,16]"], &["f32[5,16,4]"]], &[]),
        "f32[3, 5, 8, 4]"
    );
    assert_eq!(infer(t, &[&["f32[16]"], &["f32[16,4]"]], &[]), "f32[4]");
    assert_eq!(infer(t, &[&["f32[2,16]"], &["f32[16]"]], &[]), "f32[2]");
    assert_eq!(
        infer(t, &[&["f32[16,64]"], &["f32[32,10]"]], &[]),
        "error: contraction dims differ: X is f32[16, 64] (k = 64), Y is f32[32, 10] (k = 32) with trans_x=false, trans_y=false"
    );
    assert_eq!(
        infer(t, &[&["f32[2,4,8]"], &["f32[3,8,4]"]], &[]),
        "error: batch dims of X (f32[2, 4, 8]) and Y (f32[3, 8, 4]) do not broadcast"
    );
    assert_eq!(
        infer(t, &[&["f32[2,4]"], &["f64[4,2]"]], &[]),
        "error: X is f32[2, 4] but Y is f64[4, 2]: dtypes differ"
    );
}

#[test]
fn elementwise_broadcasting() {
    for t in [
        OpType::ElementwiseAdd,
        OpType::ElementwiseSub,
        OpType::ElementwiseMul,
        OpType::ElementwiseDiv,
    ] {
        assert_eq!(
            infer(t, &[&["f32[16,256]"], &["f32[256]"]], &[]),
            "f32[16, 256]"
        );
        assert_eq!(
            infer(t, &[&["f32[4,1,8]"], &["f32[3,1]"]], &[]),
            "f32[4, 3, 8]"
        );
        assert_eq!(
            infer(t, &[&["f32[4,3,8]"], &["f32[3]"]], &[("axis", i(1))]),
            "f32[4, 3, 8]"
        );
        assert!(infer(t, &[&["f32[4,3]"], &["f32[4]"]], &[]).contains("do not broadcast"));
    }
}

#[test]
fn unary_and_misc_ops() {
    for t in [
        OpType::Relu,
        OpType::Gelu,
        OpType::Silu,
        OpType::Square,
        OpType::Scale,
        OpType::Assign,
    ] {
        assert_eq!(infer(t, &[&["f64[2,3]"]], &[]), "f64[2, 3]", "{t}");
    }
    assert_eq!(
        infer(OpType::Relu, &[&["i64[2]"]], &[]),
        "error: X must be f32 or f64, got i64[2]"
    );
    assert_eq!(
        infer(
            OpType::Cast,
            &[&["f32[2,3]"]],
            &[("out_dtype", Attr::Str("f64".into()))]
        ),
        "f64[2, 3]"
    );
    assert_eq!(
        infer(
            OpType::Cast,
            &[&["f32[2]"]],
            &[("out_dtype", Attr::Str("bf16".into()))]
        ),
        "error: out_dtype `bf16` is not one of f32, f64, i64"
    );
    assert_eq!(
        infer(
            OpType::Dropout,
            &[&["f32[2,3]"]],
            &[("dropout_prob", Attr::Float(0.1))]
        ),
        "f32[2, 3] f32[2, 3]"
    );
    assert_eq!(
        infer(
            OpType::Dropout,
            &[&["f32[2]"]],
            &[("dropout_prob", Attr::Float(1.0))]
        ),
        "error: dropout_prob 1 must be in [0, 1)"
    );
    assert_eq!(
        infer(OpType::Softmax, &[&["f32[2,3]"]], &[("axis", i(-1))]),
        "f32[2, 3]"
    );
    assert_eq!(
        infer(OpType::Softmax, &[&["f32[2,3]"]], &[("axis", i(2))]),
        "error: axis 2 is out of range for rank 2"
    );
    assert_eq!(
        infer(
            OpType::FusedSoftmaxMaskUpperTriangle,
            &[&["f32[2,4,8,8]"]],
            &[]
        ),
        "f32[2, 4, 8, 8]"
    );
    assert!(infer(
        OpType::FusedSoftmaxMaskUpperTriangle,
        &[&["f32[2,4,8,4]"]],
        &[]
    )
    .contains("two equal dims"));
    assert_eq!(infer(OpType::Mean, &[&["f32[2,3]"]], &[]), "f32[]");
    assert_eq!(
        infer(
            OpType::FillConstant,
            &[],
            &[
                ("shape", ints(&[2, 3])),
                ("dtype", Attr::Str("i64".into())),
                ("value", Attr::Float(1.0))
            ]
        ),
        "i64[2, 3]"
    );
}

#[test]
fn layer_norm_and_embedding() {
    let ln = OpType::LayerNorm;
    assert_eq!(
        infer(
            ln,
            &[&["f32[4,16,64]"], &["f32[64]"], &["f32[64]"]],
            &[("begin_norm_axis", i(2))]
        ),
        "f32[4, 16, 64] f32[4, 16] f32[4, 16]"
    );
    assert_eq!(
        infer(
            ln,
            &[&["f32[4,16,64]"], &["f32[1024]"], &[]],
            &[("begin_norm_axis", i(1))]
        ),
        "f32[4, 16, 64] f32[4] f32[4]"
    );
    assert_eq!(
        infer(
            ln,
            &[&["f32[4,16,64]"], &["f32[16]"], &[]],
            &[("begin_norm_axis", i(2))]
        ),
        "error: Scale must be f32[64] (the normalised size of X f32[4, 16, 64]), got f32[16]"
    );
    assert_eq!(
        infer(
            ln,
            &[&["f32[4,64]"], &[], &[]],
            &[("begin_norm_axis", i(2))]
        ),
        "error: begin_norm_axis 2 must be in [1, 2) for X f32[4, 64]"
    );
    let emb = OpType::LookupTableV2;
    assert_eq!(
        infer(emb, &[&["f32[100,8]"], &["i64[4,16]"]], &[]),
        "f32[4, 16, 8]"
    );
    assert_eq!(
        infer(emb, &[&["f32[100,8]"], &["f32[4]"]], &[]),
        "error: Ids must be i64, got f32[4]"
    );
    assert_eq!(
        infer(
            emb,
            &[&["f32[100,8]"], &["i64[4]"]],
            &[("padding_idx", i(100))]
        ),
        "error: padding_idx 100 is outside the vocabulary [0, 100)"
    );
}

#[test]
fn reshape_transpose_split_concat() {
    let r = OpType::Reshape2;
    assert_eq!(
        infer(
            r,
            &[&["f32[8,128,768]"]],
            &[("shape", ints(&[0, 0, 12, 64]))]
        ),
        "f32[8, 128, 12, 64]"
    );
    assert_eq!(
        infer(r, &[&["f32[8,16,32]"]], &[("shape", ints(&[-1, 32]))]),
        "f32[128, 32]"
    );
    assert_eq!(
        infer(r, &[&["f32[8,16]"]], &[("shape", ints(&[-1, -1]))]),
        "error: shape [-1, -1] has more than one -1"
    );
    assert_eq!(
        infer(r, &[&["f32[8,16]"]], &[("shape", ints(&[3, -1]))]),
        "error: cannot infer -1 in [3, -1]: 128 elements of X f32[8, 16]"
    );
    assert_eq!(
        infer(r, &[&["f32[8,16]"]], &[("shape", ints(&[8, 0, 0]))]),
        "error: shape[2] is 0 (copy) but X f32[8, 16] has no dim 2"
    );
    assert_eq!(
        infer(r, &[&["f32[8,16]"]], &[]),
        "error: attribute shape is required"
    );
    let t = OpType::Transpose2;
    assert_eq!(
        infer(t, &[&["f32[2,3,4]"]], &[("axis", ints(&[2, 0, 1]))]),
        "f32[4, 2, 3]"
    );
    assert_eq!(
        infer(t, &[&["f32[2,3,4]"]], &[("axis", ints(&[0, 0, 1]))]),
        "error: axis [0, 0, 1] repeats 0"
    );
    let s = OpType::Split;
    assert_eq!(
        infer(s, &[&["f32[4,12]"]], &[("num", i(3)), ("axis", i(1))]),
        "f32[4, 4] f32[4, 4] f32[4, 4]"
    );
    assert_eq!(
        infer(
            s,
            &[&["f32[4,12]"]],
            &[("sections", ints(&[2, -1, 3])), ("axis", i(1))]
        ),
        "f32[4, 2] f32[4, 7] f32[4, 3]"
    );
    assert_eq!(
        infer(s, &[&["f32[4,12]"]], &[("num", i(5)), ("axis", i(1))]),
        "error: num 5 does not divide dim 1 (12) of X f32[4, 12]"
    );
    let c = OpType::Concat;
    assert_eq!(
        infer(c, &[&["f32[4,2]", "f32[4,3]"]], &[("axis", i(1))]),
        "f32[4, 5]"
    );
    assert_eq!(
        infer(c, &[&["f32[4,2]", "f32[5,3]"]], &[("axis", i(1))]),
        "error: X[1] (f32[5, 3]) does not match X[0] (f32[4, 2]) outside the concat axis 1"
    );
}

#[test]
fn reductions_and_cross_entropy() {
    for t in [OpType::ReduceSum, OpType::ReduceMean] {
        assert_eq!(
            infer(t, &[&["f32[4,6,8]"]], &[("dim", ints(&[1, -1]))]),
            "f32[4]"
        );
        assert_eq!(
            infer(
                t,
                &[&["f32[4,6,8]"]],
                &[("dim", ints(&[1])), ("keep_dim", b(true))]
            ),
            "f32[4, 1, 8]"
        );
        assert_eq!(
            infer(t, &[&["f32[4,6,8]"]], &[("reduce_all", b(true))]),
            "f32[]"
        );
        assert!(infer(t, &[&["f32[4,6]"]], &[("dim", ints(&[0, -2]))]).contains("repeats an axis"));
    }
    let ce = OpType::SoftmaxWithCrossEntropy;
    assert_eq!(
        infer(ce, &[&["f32[16,10]"], &["i64[16,1]"]], &[]),
        "f32[16, 10] f32[16, 1]"
    );
    assert_eq!(
        infer(
            ce,
            &[&["f32[16,10]"], &["f32[16,10]"]],
            &[("soft_label", b(true))]
        ),
        "f32[16, 10] f32[16, 1]"
    );
    assert_eq!(
        infer(ce, &[&["f32[16,10]"], &["i64[16]"]], &[]),
        "error: a hard Label must be i64[16, 1] (Logits f32[16, 10] with axis 1 of size 1), got i64[16]"
    );
}

#[test]
fn verifier_reports_every_problem() {
    let text = "\
var x: f32[4, 8] input
var w: f32[8, 2] parameter persistable
var y: f32[4, 3] activation
var z: f32[4, 2] activation
var u: f32[4, 2] activation
op relu(X=u) -> (Out=z)
op matmul_v2(X=x, Y=w) -> (Out=y) {trans_x=1, bogus=true}
op relu(X=x) -> (Out=u)
op softmax(X=x) -> (Out=u)
op split(X=x) -> (Out=[z]) {axis=0}
op reshape2(X=x) -> (Out=x)
";
    let program = parse_program(text).unwrap();
    let got: Vec<String> = verify_program(&program)
        .iter()
        .map(|e| e.to_string())
        .collect();
    assert_eq!(
        got,
        [
            "op0: relu: input `u` is used before any op defines it",
            "op1: matmul_v2: unknown attribute `bogus` (accepted: [trans_x, trans_y])",
            "op1: matmul_v2: attribute `trans_x` must be a bool, got 1",
            "op1: matmul_v2: output Out `y` is declared f32[4, 3] but the op produces f32[4, 2]",
            "op2: relu: output Out `u` is declared f32[4, 2] but the op produces f32[4, 8]",
            "op3: softmax: writes `u`, already written by op2",
            "op3: softmax: output Out `u` is declared f32[4, 2] but the op produces f32[4, 8]",
            "op4: split: writes `z`, already written by op0",
            "op4: split: exactly one of num (> 0) and sections (non-empty) must be given",
            "op5: reshape2: attribute `shape` is required",
            "op5: reshape2: writes `x`, but input variables are set from outside the program, not by ops",
        ]
    );
}

#[test]
fn verifier_checks_slot_arity() {
    let text = "var x: f32[4] input\nvar y: f32[4] activation\nop relu() -> (Out=y)\nop elementwise_add(X=[x, x], Y=x) -> ()";
    let program = parse_program(text).unwrap();
    let got: Vec<String> = verify_program(&program)
        .iter()
        .map(|e| e.to_string())
        .collect();
    assert_eq!(
        got,
        [
            "op0: relu: input X must hold exactly one variable, has 0",
            "op1: elementwise_add: input X must hold exactly one variable, has 2",
            "op1: elementwise_add: output Out must hold exactly one variable, has 0",
        ]
    );
}

#[test]
fn decoder_ops() {
    let rms = OpType::RmsNorm;
    assert_eq!(
        infer(
            rms,
            &[&["f32[4,16,64]"], &["f32[64]"]],
            &[("begin_norm_axis", i(2))]
        ),
        "f32[4, 16, 64] f32[4, 16]"
    );
    assert_eq!(
        infer(
            rms,
            &[&["f32[4,16,64]"], &["f64[64]"]],
            &[("begin_norm_axis", i(2))]
        ),
        "error: Scale must be f32[64] (the normalised size of X f32[4, 16, 64]), got f64[64]"
    );
    assert_eq!(
        infer(rms, &[&["i64[4,64]"], &["f32[64]"]], &[]),
        "error: X must be f32 or f64, got i64[4, 64]"
    );
    let rope = OpType::FusedRotaryPositionEmbedding;
    let table = "f32[1,16,1,8]";
    assert_eq!(
        infer(rope, &[&["f32[2,16,4,8]"], &[table], &[table]], &[]),
        "f32[2, 16, 4, 8]"
    );
    assert_eq!(
        infer(rope, &[&["f32[2,16,4,7]"], &[table], &[table]], &[]),
        "error: head_dim 7 of X f32[2, 16, 4, 7] must be even (elements rotate in pairs)"
    );
    assert_eq!(
        infer(rope, &[&["f32[2,16,32]"], &[table], &[table]], &[]),
        "error: X must be [batch, seq, heads, head_dim], got f32[2, 16, 32]"
    );
    assert_eq!(
        infer(rope, &[&["f32[2,16,4,8]"], &["f32[16,8]"], &[table]], &[]),
        "error: Sin must be f32[1, 16, 1, 8] (one row per position of X f32[2, 16, 4, 8]), \
         got f32[16, 8]"
    );
    let rep = OpType::RepeatInterleave;
    assert_eq!(
        infer(
            rep,
            &[&["f32[2,16,2,8]"]],
            &[("repeats", i(4)), ("axis", i(2))]
        ),
        "f32[2, 16, 8, 8]"
    );
    assert_eq!(
        infer(
            rep,
            &[&["f32[2,16,2,8]"]],
            &[("repeats", i(0)), ("axis", i(2))]
        ),
        "error: repeats 0 must be at least 1"
    );
    assert_eq!(
        infer(
            rep,
            &[&["f32[2,16,2,8]"]],
            &[("repeats", i(2)), ("axis", i(4))]
        ),
        "error: axis 4 is out of range for rank 4"
    );
}

/// A failure is typed: a caller reads the slot, the attribute and the types from its fields,
/// and a builder's error carries it with the op.
#[test]
fn inference_errors_are_typed() {
    use shardlab::ir::infer::InferErrorKind;
    let mut op = Op::new(OpType::MatmulV2);
    op.attrs = [("trans_y".to_string(), b(true))].into_iter().collect();
    let (x, y) = (tensor_type("f32[16,64]"), tensor_type("f32[10,32]"));
    let e = infer_op(&op, &[vec![&x], vec![&y]]).unwrap_err();
    assert_eq!(
        e.kind(),
        &InferErrorKind::Contraction {
            x: x.clone(),
            y: y.clone(),
            kx: 64,
            ky: 32,
            trans_x: false,
            trans_y: true
        }
    );
    let e = infer_op(&Op::new(OpType::Transpose2), &[vec![&x]]).unwrap_err();
    assert_eq!(e.kind(), &InferErrorKind::MissingAttr("axis"));

    let mut builder = shardlab::ir::Builder::new();
    let a = builder.input("a", DType::F32, &[16, 64]).unwrap();
    let w = builder.input("w", DType::F32, &[10, 32]).unwrap();
    let err = builder
        .op1(OpType::MatmulV2, &[&[a], &[w]], &[], "out")
        .unwrap_err();
    match err {
        shardlab::ir::ProgramError::Infer { op, error } => {
            assert_eq!(op, "out (matmul_v2)");
            assert!(matches!(error.kind(), InferErrorKind::Contraction { .. }));
        }
        other => panic!("expected an inference error, got {other:?}"),
    }
}
