//! "Why not split?": every replicated dim explains what kept it whole (pinned, a rejected
//! proposal, a producer that merged conflicting inputs, no free or dividing mesh axis, a
//! rule that keeps it whole, or no annotation reaching it). Goldens of `explain_text` for
//! every variable of small plans, and each reason found where it should be. Rewrite the
//! goldens with `UPDATE_EXPECT=1 cargo test --test why_not`.
#![cfg(not(target_arch = "wasm32"))]

use expect_test::expect_file;
use shardlab::models::scenarios::Scenario;
use shardlab::passes::complete::{complete, explain_text, why_not_split, Completed, NotSplit};
use shardlab::plan::{parse_plan, Plan};

fn load(text: &str) -> (Plan, Completed) {
    let plan = parse_plan(text).unwrap().0;
    let c = complete(&plan).unwrap();
    (plan, c)
}

fn why(plan: &Plan, c: &Completed, var: &str, dim: usize) -> NotSplit {
    let v = plan.program.var_id(var).unwrap();
    why_not_split(&plan.program, c, v, dim)
}

fn explain_all(plan: &Plan, c: &Completed) -> String {
    (0..plan.program.vars().len())
        .map(|i| explain_text(&plan.program, c, shardlab::ir::VarId(i as u32)))
        .collect()
}

#[test]
fn every_reason_is_found_where_it_applies() {
    let (p, c) = load(include_str!("plans/why_softmax_matmul.plan"));
    // y = x @ w: x splits the rows over dp; w's columns too, so the matmul drops w's split.
    assert!(matches!(
        why(&p, &c, "y", 1),
        NotSplit::MergedConflict { .. }
    ));
    // softmax over the last axis keeps its output's last dim whole.
    assert!(matches!(
        why(&p, &c, "s", 1),
        NotSplit::RuleKeepsWhole {
            rule: "softmax",
            ..
        }
    ));
    // x's second dim is annotated `-`.
    assert_eq!(why(&p, &c, "x", 1), NotSplit::Pinned { overrode: None });
    // z = relu(s) could be split over mp: nothing asks.
    assert!(matches!(why(&p, &c, "z", 1), NotSplit::Unreached { .. }));

    let (p, c) = load(include_str!("plans/why_merged.plan"));
    assert!(
        matches!(why(&p, &c, "z", 0), NotSplit::MergedConflict { ref inputs, .. } if inputs.len() == 2)
    );
    assert!(
        matches!(why(&p, &c, "z", 1), NotSplit::Unreached { ref candidates } if candidates.len() == 2)
    );

    let (p, c) = load(include_str!("plans/why_uneven.plan"));
    assert!(matches!(
        why(&p, &c, "b", 0),
        NotSplit::TooSmall { size: 1, .. }
    ));
    assert_eq!(why(&p, &c, "c", 1), NotSplit::NoFreeAxis);

    let (p, c) = load(include_str!("plans/why_rejected.plan"));
    assert!(matches!(
        why(&p, &c, "t", 0),
        NotSplit::Rejected {
            conflict: shardlab::passes::complete::Conflict::AxisInUse,
            ..
        }
    ));

    let reshard = Scenario::by_name("reshard_conflict")
        .unwrap()
        .plan()
        .unwrap();
    let c = complete(&reshard).unwrap();
    assert!(matches!(
        why(&reshard, &c, "linear_0.tmp_0", 1),
        NotSplit::Pinned { overrode: Some(_) }
    ));
}

#[test]
fn explanations_match_their_goldens() {
    for (text, golden) in [
        (
            include_str!("plans/why_softmax_matmul.plan"),
            expect_file!["golden/why_softmax_matmul.txt"],
        ),
        (
            include_str!("plans/why_merged.plan"),
            expect_file!["golden/why_merged.txt"],
        ),
        (
            include_str!("plans/why_uneven.plan"),
            expect_file!["golden/why_uneven.txt"],
        ),
        (
            include_str!("plans/why_rejected.plan"),
            expect_file!["golden/why_rejected.txt"],
        ),
    ] {
        let (p, c) = load(text);
        golden.assert_eq(&explain_all(&p, &c));
    }
}
