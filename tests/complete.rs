//! Completion: golden completed programs for `gpt` under dp, Megatron mp and dp×mp, golden
//! provenance, errors for annotations that cannot hold, the fallback on rule conflicts, and
//! a property test (idempotent, annotations untouched, results valid).
//! Rewrite goldens with `UPDATE_EXPECT=1 cargo test --test complete`.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use expect_test::{expect, expect_file, Expect, ExpectFile};
use proptest::prelude::*;
use shardlab::dist::local_shape;
use shardlab::models::scenarios::{megatron_shards, Scenario};
use shardlab::models::Model;
use shardlab::passes::complete::{completed_text, explain_text, EventKind};
use shardlab::passes::{complete, complete_from};
use shardlab::plan::{parse_plan, Plan};

fn gpt_plan(mesh: &str, shards: &[String]) -> Plan {
    common::plan_with(
        Model::Gpt.build(&Model::Gpt.default_config()).unwrap(),
        mesh,
        shards,
    )
}

fn check_completed(plan: &Plan, golden: ExpectFile) {
    let c = complete(plan).unwrap();
    golden.assert_eq(&completed_text(&plan.program, &c));
}

#[test]
fn gpt_data_parallel() {
    check_completed(
        &gpt_plan("4:dp", &["x=dp,-,-".into()]),
        expect_file!["golden/complete_gpt_dp.txt"],
    );
}

#[test]
fn gpt_megatron_tensor_parallel() {
    check_completed(
        &gpt_plan("4:mp", &megatron_shards(2, "mp")),
        expect_file!["golden/complete_gpt_mp.txt"],
    );
}

#[test]
fn gpt_data_and_tensor_parallel() {
    let mut shards = vec!["x=dp,-,-".to_string()];
    shards.extend(megatron_shards(2, "mp"));
    check_completed(
        &gpt_plan("2x4:dp,mp", &shards),
        expect_file!["golden/complete_gpt_dp_mp.txt"],
    );
}

fn explain(scenario: &str, var: &str, golden: Expect) {
    let plan = Scenario::by_name(scenario).unwrap().plan().unwrap();
    let c = complete(&plan).unwrap();
    let v = plan.program.var_id(var).unwrap();
    golden.assert_eq(&explain_text(&plan.program, &c, v));
}

#[test]
fn provenance_of_a_column_parallel_activation() {
    explain(
        "megatron_mlp",
        "gelu_0.tmp_0",
        expect![[r#"
            gelu_0.tmp_0 f32[16, 256]: [-, mp]
            dim 0 = -: not split: every mesh axis already splits another dim or holds a partial value
            dim 1 = mp:
              1. annotated: linear_0.w_0 dim 1 = mp
              2. sweep 1 forward: op0 (matmul_v2) set linear_0.tmp_0 dim 1 = mp from its inputs
              3. sweep 1 forward: op1 (elementwise_add) set linear_0.tmp_1 dim 1 = mp from its inputs
              4. sweep 1 forward: op2 (gelu) set gelu_0.tmp_0 dim 1 = mp from its inputs
        "#]],
    );
}

#[test]
fn provenance_reaches_the_label_through_the_loss_op() {
    // The label is split on the batch only because the cross-entropy merges it with the logits.
    explain(
        "dp_mlp",
        "label",
        expect![[r#"
            label i64[16, 1]: [dp, -]
            dim 0 = dp:
              1. annotated: x dim 0 = dp
              2. sweep 1 forward: op0 (matmul_v2) set linear_0.tmp_0 dim 0 = dp from its inputs
              3. sweep 1 forward: op1 (elementwise_add) set linear_0.tmp_1 dim 0 = dp from its inputs
              4. sweep 1 forward: op2 (gelu) set gelu_0.tmp_0 dim 0 = dp from its inputs
              5. sweep 1 forward: op3 (matmul_v2) set linear_1.tmp_0 dim 0 = dp from its inputs
              6. sweep 1 forward: op4 (elementwise_add) set linear_1.tmp_1 dim 0 = dp from its inputs
              7. sweep 1 forward: op5 (softmax_with_cross_entropy) set label dim 0 = dp from its inputs
            dim 1 = -: not split: every mesh axis already splits another dim or holds a partial value
        "#]],
    );
}

#[test]
fn conflicts_are_recorded_and_force_a_reshard() {
    let plan = Scenario::by_name("reshard_conflict")
        .unwrap()
        .plan()
        .unwrap();
    let c = complete(&plan).unwrap();
    let (x, w) = (
        plan.program.var_id("x").unwrap(),
        plan.program.var_id("linear_0.w_0").unwrap(),
    );
    // x pins k to mp and the weight pins n to mp. As in Paddle 3.3.1, the output's letter
    // (n) keeps the mesh axis and k loses it: the matmul is column parallel and wants x as
    // [dp, -], which differs from x's pinned [dp, mp]: a reshard of x.
    assert_eq!(c.tensors[w.index()].axis_lists(), vec![vec![], vec![1]]);
    assert_eq!(c.tensors[x.index()].axis_lists(), vec![vec![0], vec![1]]);
    assert_eq!(c.ops[0].inputs[0][0].axis_lists(), vec![vec![0], vec![]]);
    assert_eq!(c.ops[0].inputs[1][0].axis_lists(), vec![vec![], vec![1]]);
    assert_eq!(
        c.ops[0].imp,
        shardlab::dist::DistImpl::MatmulColumn,
        "column parallel: n is split"
    );
    // The output is pinned replicated on n, so the rule's proposal is a conflict.
    let out = plan.program.var_id("linear_0.tmp_0").unwrap();
    let rejected = c
        .trace
        .events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Rejected(_)))
        .count();
    assert!(rejected > 0);
    let text = explain_text(&plan.program, &c, out);
    assert!(text.contains("conflicts:\n  op0 (matmul_v2) proposed dim 1 = mp: rejected, the dim is pinned by an annotation"), "{text}");
}

#[test]
fn a_rule_error_falls_back_to_replicated_inputs() {
    let text = "mesh [2, 4] (dp, mp)\nvar a: f32[8, 8] input\nvar b: f32[8, 8] input\nvar c: f32[8, 8] activation\n\
                op elementwise_add(X=a, Y=b) -> (Out=c)\nshard a [dp, mp]\nshard b [mp, dp]\n";
    let (plan, _) = parse_plan(text).unwrap();
    let c = complete(&plan).unwrap();
    assert_eq!(c.trace.rule_errors.len(), 1);
    assert!(
        matches!(
            c.trace.rule_errors[0].1,
            shardlab::spmd::SpmdError::TwoMeshAxes { .. }
        ),
        "{:?}",
        c.trace.rule_errors
    );
    assert!(c.trace.rule_errors[0]
        .1
        .to_string()
        .contains("is Sharded by two different mesh dimension"));
    assert_eq!(
        c.ops[0].inputs[0][0].axis_lists(),
        vec![Vec::<usize>::new(); 2]
    );
    assert!(completed_text(&plan.program, &c).contains("# rule error at op0 (elementwise_add)"));
}

#[test]
fn annotations_that_cannot_hold_name_the_variable_and_dim() {
    let base = "mesh [2, 4] (dp, mp)\nvar x: f32[6, 8] input\nvar y: f32[6, 8] activation\nop relu(X=x) -> (Out=y)\n";
    let cases = [
        (
            "shard x [dp, dp]",
            "`x`: mesh axis `dp` splits more than one dim (dims 0 and 1)",
        ),
        (
            "shard x [(dp, mp), -]",
            "`x` dim 0 has size 6, fewer than the 8 shards `dp+mp` cut it into",
        ),
        (
            "shard x [-, mp] partial(mp=SUM)",
            "`x`: mesh axis `mp` is both partial and splitting dim 1",
        ),
    ];
    for (shard, want) in cases {
        let (plan, _) = parse_plan(&format!("{base}{shard}\n")).unwrap();
        let err = complete(&plan).unwrap_err().to_string();
        assert!(err.contains(want), "{shard}: {err}");
    }
    let err = parse_plan(&format!("{base}shard x [tp, -]\n")).unwrap_err();
    assert_eq!(
        err[0].to_string(),
        "5:10: unknown mesh axis `tp`; the mesh has (dp, mp)"
    );
    let (plan, _) = parse_plan("var x: f32[4] input\n").unwrap();
    assert_eq!(
        complete(&plan).unwrap_err().to_string(),
        "the plan has no mesh; declare one with `mesh [..] (..)` or --mesh"
    );
}

use common::random_plan;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn completion_is_idempotent_keeps_annotations_and_is_valid(plan in random_plan()) {
        let c = complete(&plan).unwrap();
        for ann in &plan.annotations {
            let t = &c.tensors[ann.var.index()];
            for (d, pinned) in ann.attr.annotated.iter().enumerate() {
                if *pinned {
                    prop_assert_eq!(&t.dims[d], &ann.attr.dims[d]);
                }
            }
        }
        for (v, t) in plan.program.vars().iter().zip(&c.tensors) {
            prop_assert!(t.validate(&v.name, &v.ty.shape, &c.mesh).is_ok(), "{} {:?}", v.name, t.dims);
        }
        for (op, attr) in plan.program.ops().iter().zip(&c.ops) {
            for (vars, attrs) in op.inputs.iter().zip(&attr.inputs) {
                for (v, a) in vars.iter().zip(attrs) {
                    let var = plan.program.var(*v);
                    prop_assert!(local_shape(&var.name, &var.ty.shape, a, &c.mesh).is_ok());
                }
            }
        }
        let again = complete_from(&plan, Some(&c.tensors)).unwrap();
        prop_assert_eq!(&again.tensors, &c.tensors);
        let changes = again.trace.events.iter().filter(|e| matches!(e.kind, EventKind::Set { .. } | EventKind::Partial)).count();
        prop_assert_eq!(changes, 0);
    }
}

/// `o = x @ wᵀ` with `w` `[n, k]` split on its rows is column parallel: no reshard, `o`
/// split on its columns, and the backward rule reads `trans_y` (not `trans_x`) for `w`.
#[test]
fn x_times_w_transposed_is_column_parallel() {
    let (plan, _) = parse_plan(
        "mesh [2] (mp)\nvar x: f32[16, 64] input\nvar w: f32[256, 64] parameter persistable\n\
         var y: f32[16, 256] activation\nvar l: f32[] activation\n\
         op matmul_v2(X=x, Y=w) -> (Out=y) {trans_x=false, trans_y=true}\n\
         op mean(X=y) -> (Out=l) role=loss\nshard w [mp, -]\n",
    )
    .unwrap();
    let c = complete(&plan).unwrap();
    expect![[r#"
        mesh [2] (mp)
        # completed in 2 sweeps: 2 events, 0 conflicts, 0 rule errors

        tensors:
          x  f32[16, 64]       [-, -]
          w  f32[256, 64]      [mp, -]  (annotated)
          y  f32[16, 256]      [-, mp]
          l  f32[]             [] partial(mp=AVG)

        ops:
          op0 matmul_v2 [matmul_v2 #0: column parallel] X=x[-, -] Y=w[mp, -] -> Out=y[-, mp]
          op1 mean [default #0: default] X=y[-, mp] -> Out=l[] partial(mp=AVG)
    "#]]
    .assert_eq(&completed_text(&plan.program, &c));
    let p = shardlab::passes::driver::run_passes(&plan, &Default::default()).unwrap();
    let reshards: Vec<String> = p.partitioned.ranks[0]
        .program
        .ops()
        .iter()
        .filter(|o| o.namescope == "/auto_parallel/reshard")
        .map(|o| o.ty.to_string())
        .collect();
    assert!(reshards.is_empty(), "no reshard is needed: {reshards:?}");
}

/// A grad op's outputs split into input-grad and weight-grad parts (for the zero-bubble
/// schedule): the second linear layer of the MLP gives its activation's gradient as the
/// input part and the weight's and bias's as the weight part.
#[test]
fn grad_outputs_split_into_input_and_weight_parts() {
    use shardlab::passes::backward::append_backward;
    use shardlab::passes::pipeline::grad_parts::{grad_parts, GradPart};
    let program = Model::Mlp.build(&Model::Mlp.default_config()).unwrap();
    let b = append_backward(&program).unwrap();
    let parts_of = |ty: &str, output_var: &str| {
        let (i, _) = b
            .program
            .ops()
            .iter()
            .enumerate()
            .find(|(_, o)| {
                o.ty.to_string() == ty
                    && o.all_inputs()
                        .any(|v| &*b.program.var(v).name == output_var)
            })
            .unwrap();
        grad_parts(&b, shardlab::ir::OpId(i as u32))
            .into_iter()
            .map(|(v, p)| (b.program.var(v).name.to_string(), p))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        parts_of("matmul_v2_grad", "linear_1.tmp_0@GRAD"),
        [
            ("gelu_0.tmp_0@GRAD".to_string(), GradPart::Input),
            ("linear_1.w_0@GRAD".to_string(), GradPart::Weight)
        ]
    );
    assert_eq!(
        parts_of("elementwise_add_grad", "linear_1.tmp_1@GRAD"),
        [
            ("linear_1.tmp_0@GRAD".to_string(), GradPart::Input),
            ("linear_1.b_0@GRAD".to_string(), GradPart::Weight)
        ]
    );
    // A forward op has no parts.
    assert!(grad_parts(&b, shardlab::ir::OpId(0)).is_empty());
}

/// Backward differentiates only ops between a parameter and the loss: an op on the data
/// alone (here a scale of the input) gets no grad op.
#[test]
fn ops_on_data_alone_get_no_grad_op() {
    use shardlab::passes::backward::append_backward;
    let program = shardlab::ir::parse_program(
        "var x: f32[4, 8] input\nvar xs: f32[4, 8] activation\nvar w: f32[8, 8] parameter\nvar h: f32[4, 8] activation\nvar loss: f32[] activation\n\
         op scale(X=x) -> (Out=xs) {scale=2.0}\nop matmul_v2(X=xs, Y=w) -> (Out=h)\nop mean(X=h) -> (Out=loss) role=loss\n",
    )
    .unwrap();
    let b = append_backward(&program).unwrap();
    let grads: Vec<String> = b.program.ops()[b.first_backward_op..]
        .iter()
        .map(|o| o.ty.to_string())
        .collect();
    assert_eq!(grads, ["fill_constant", "mean_grad", "matmul_v2_grad"]);
}
