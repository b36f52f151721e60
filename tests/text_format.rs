//! The text format: print -> parse -> print is the identity (property test on generated
//! plans), and parse errors name line, column and what was expected (exact messages).
#![cfg(not(target_arch = "wasm32"))]

use proptest::prelude::*;
use shardlab::dist::{ProcessMesh, ReduceType, TensorDistAttr};
use shardlab::ir::{Attr, DType, Op, OpRole, OpType, Program, TensorType, Var, VarId, VarKind};
use shardlab::plan::{
    parse_plan, verify_plan, Annotation, OptimizerKind, Plan, PlanOptions, Recompute, ScheduleKind,
};
use std::sync::Arc;

fn name() -> impl Strategy<Value = String> {
    "[a-zA-Z_][a-zA-Z0-9_.@]{0,10}"
}

fn attr() -> impl Strategy<Value = Attr> {
    prop_oneof![
        any::<bool>().prop_map(Attr::Bool),
        any::<i64>().prop_map(Attr::Int),
        // NaN is not equal to itself; every other float must survive bit for bit.
        any::<f64>()
            .prop_filter("not NaN", |x| !x.is_nan())
            .prop_map(Attr::Float),
        prop_oneof![
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            Just(1e-5),
            Just(-0.0)
        ]
        .prop_map(Attr::Float),
        "[ -~\n\"\\\\]{0,12}".prop_map(Attr::Str),
        prop::collection::vec(any::<i64>(), 0..5).prop_map(Attr::Ints),
    ]
}

/// A parseable (not necessarily verifiable) plan: random vars, ops with random slots over
/// those vars, random attributes, roles and namescopes, an optional mesh and annotations.
fn plan() -> impl Strategy<Value = Plan> {
    let vars = prop::collection::btree_map(
        name(),
        (
            prop::sample::select(DType::ALL.to_vec()),
            prop::collection::vec(1usize..100, 0..4),
            prop::sample::select(VarKind::ALL.to_vec()),
            any::<bool>(),
        ),
        1..8,
    );
    let ops = prop::collection::vec(
        (
            prop::sample::select(OpType::ALL.to_vec()),
            prop::collection::vec(prop::collection::vec(any::<prop::sample::Index>(), 0..3), 4),
            prop::collection::btree_map("[a-z_]{1,8}", attr(), 0..4),
            prop::sample::select(OpRole::ALL.to_vec()),
            prop_oneof![Just("/".to_string()), "[ -~]{0,10}"],
        ),
        0..6,
    );
    let mesh = prop::option::of((prop::collection::vec(1usize..4, 1..4), any::<bool>()));
    let anns = prop::collection::vec(
        (
            any::<prop::sample::Index>(),
            prop::collection::vec((0u8..4, any::<prop::sample::Index>()), 0..4),
            0usize..6,
        ),
        0..4,
    );
    (vars, ops, mesh, anns).prop_map(|(vars, ops, mesh, anns)| {
        let mut program = Program::new();
        for (name, (dtype, shape, kind, persistable)) in vars {
            program
                .add_var(Var {
                    name: name.into(),
                    ty: TensorType::new(dtype, shape),
                    kind,
                    persistable,
                })
                .unwrap();
        }
        let n = program.vars().len();
        for (ty, slots, attrs, role, scope) in ops {
            let mut op = Op::new(ty);
            let pick = |ix: &Vec<prop::sample::Index>| {
                ix.iter()
                    .map(|i| VarId(i.index(n) as u32))
                    .collect::<Vec<_>>()
            };
            for (i, slot) in op.inputs.iter_mut().enumerate() {
                *slot = pick(&slots[i % 4]).into();
            }
            for (i, slot) in op.outputs.iter_mut().enumerate() {
                *slot = pick(&slots[(i + 2) % 4]).into();
            }
            op.attrs = attrs.into_iter().collect();
            op.role = role;
            op.namescope = scope.into();
            program.push_op(op);
        }
        let mesh = mesh.map(|(shape, reversed_ids)| {
            let size: usize = shape.iter().product();
            let mut ids: Vec<u32> = (0..size as u32).collect();
            if reversed_ids {
                ids.reverse();
            }
            let names = (0..shape.len()).map(|i| format!("ax{i}")).collect();
            Arc::new(ProcessMesh::new(shape, ids, names).unwrap())
        });
        let mut annotations = Vec::new();
        if let Some(m) = &mesh {
            let mut seen = Vec::new();
            for (var, dims, partial) in anns {
                let var = VarId(var.index(n) as u32);
                if seen.contains(&var) {
                    continue;
                }
                seen.push(var);
                let rank = program.var(var).ty.rank();
                let mut attr = TensorDistAttr::replicated(shardlab::dist::MeshId::JOB, rank);
                for (d, (kind, axis)) in attr
                    .layout
                    .dims
                    .iter_mut()
                    .zip(attr.annotated.iter_mut())
                    .zip(&dims)
                {
                    // 0: free, 1: replicated, 2: one axis, 3: co-sharded (axes need not be valid here).
                    let (axes, pinned) = d;
                    match kind {
                        0 => {}
                        1 => *pinned = true,
                        2 => {
                            *axes = shardlab::dist::DimAxes::one(mesh_axis(axis.index(m.ndim())));
                            *pinned = true
                        }
                        _ => {
                            *axes = shardlab::dist::DimAxes::from_axes([
                                mesh_axis(axis.index(m.ndim())),
                                mesh_axis((axis.index(m.ndim()) + 1) % m.ndim()),
                            ])
                            .unwrap();
                            *pinned = true
                        }
                    }
                }
                if partial < m.ndim() {
                    attr.set_partial(mesh_axis(partial), ReduceType::ALL[partial % 5]);
                }
                annotations.push(Annotation { var, attr });
            }
        }
        Plan {
            meshes: mesh
                .map(shardlab::dist::MeshTable::single)
                .unwrap_or_default(),
            program,
            annotations,
            options: Default::default(),
            stages: Vec::new(),
        }
    })
}

/// Any options statement (often the default, which prints nothing).
fn options() -> impl Strategy<Value = PlanOptions> {
    (
        prop::sample::select(OptimizerKind::ALL.to_vec()),
        any::<bool>(),
        prop::option::of(prop_oneof![Just(1.0), 1e-6f64..1e6]),
        any::<bool>(),
        any::<bool>(),
        0u8..4,
        prop::sample::select(vec![Recompute::Off, Recompute::Full, Recompute::Selective]),
        prop::option::of(prop_oneof![Just(25.0), 1e-3f64..1e3]),
        (
            prop::sample::select(ScheduleKind::ALL.to_vec()),
            1usize..64,
            1usize..4,
        ),
    )
        .prop_map(
            |(
                optimizer,
                amp,
                clip_norm,
                megatron_sums,
                no_grad_scale,
                zero,
                recompute,
                bucket_mb,
                (schedule, micro_batches, chunks),
            )| {
                PlanOptions {
                    schedule,
                    micro_batches,
                    chunks,
                    optimizer,
                    amp,
                    clip_norm,
                    megatron_sums,
                    no_grad_scale,
                    zero,
                    recompute,
                    bucket_mb,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn print_parse_print_is_identity(plan in plan(), options in options()) {
        let mut plan = plan;
        plan.options = options;
        let text = plan.to_string();
        let (parsed, _) = parse_plan(&text).map_err(|e| TestCaseError::fail(format!("{e:?}\n{text}")))?;
        prop_assert_eq!(parsed.to_string(), text);
        prop_assert_eq!(parsed, plan);
    }

    #[test]
    fn the_verifier_never_panics_on_junk_programs(plan in plan()) {
        // Generated programs are mostly invalid: wrong arities, types, attributes.
        let issues = verify_plan(&plan);
        prop_assert!(issues.iter().all(|i| !i.message.is_empty()));
    }

    #[test]
    fn the_parser_never_panics_on_arbitrary_text(text in "(mesh|options|zero|amp|var|op|shard|[a-z_.@0-9]{1,6}|[\\[\\](){}=,:?*\"# -]|->|\n){0,40}") {
        if let Ok((plan, _)) = parse_plan(&text) {
            let _ = verify_plan(&plan);
        }
    }
}

fn errors(text: &str) -> Vec<String> {
    match parse_plan(text) {
        Ok(_) => vec![],
        Err(errors) => errors.iter().map(|e| e.to_string()).collect(),
    }
}

#[test]
fn parse_errors_name_line_column_and_what_was_expected() {
    let cases: &[(&str, &[&str])] = &[
        ("var x f32[2] input", &["1:7: expected `:`, found `f32`"]),
        ("var x: f16[2] input", &["1:8: unknown dtype `f16`; expected f32, f64 or i64"]),
        ("var x: f32[2, 0] input", &["1:15: dim size 0 must be positive"]),
        ("var x: f32[2 3] input", &["1:14: expected `,` or `]`, found `3`"]),
        (
            "var x: f32[2] weights",
            &["1:15: unknown variable kind `weights`; expected one of input, label, parameter, activation, gradient, optimizer_state"],
        ),
        ("var x: f32[2] input\nvar x: f32[2] input", &["2:5: variable `x` is declared twice"]),
        ("var x: f32[2] input\nop relu(X=x) -> (Out=y)", &["2:22: unknown variable `y` (declare it with `var`)"]),
        ("op frobnicate() -> ()", &["1:4: unknown op type `frobnicate`"]),
        ("var x: f32[2] input\nop relu(Z=x) -> ()", &["2:9: unknown input slot `Z`; expected one of [X]"]),
        ("var x: f32[2] input\nop relu(X=x, X=x) -> ()", &["2:14: input slot `X` is given twice"]),
        ("var x: f32[2] input\nop relu(X=x) (Out=x)", &["2:14: expected `->`, found `(`"]),
        ("var x: f32[2] input\nop relu(X=x) -> (Out=x) {a=1, a=2}", &["2:31: attribute `a` is given twice"]),
        ("var x: f32[2] input\nop relu(X=x) -> (Out=x) {a=maybe}", &["2:28: expected an attribute value, found `maybe`"]),
        ("var x: f32[2] input\nop relu(X=x) -> (Out=x) role=sideways", &["2:30: unknown role `sideways`; expected forward, backward, optimize or loss"]),
        ("var x: f32[2] input\nop relu(X=x) -> (Out=x) scope=/", &["2:31: unexpected character `/`"]),
        ("op relu() -> () {s=\"open}", &["1:20: unterminated string"]),
        ("var x: f32[2] input extra", &["1:21: expected end of line, found `extra`"]),
        ("mesh [2, 4] (dp)", &["1:6: invalid mesh: the mesh has 2 axes but 1 axis names were given"]),
        ("mesh [2, 2] (a, b) ids [0, 1, 2, 2]", &["1:6: invalid mesh: process id 2 appears twice in the mesh"]),
        ("mesh [2] (dp)\nmesh [2] (dp)", &["2:1: the mesh is declared twice"]),
        ("var x: f32[2] input\nshard x [dp]", &["2:1: `shard` needs a mesh: declare `mesh [..] (..)` first"]),
        ("mesh [2] (dp)\nvar x: f32[2] input\nshard x [tp]", &["3:10: unknown mesh axis `tp`; the mesh has (dp)"]),
        ("mesh [2] (dp)\nshard y [dp]", &["2:7: unknown variable `y` (declare it before annotating it)"]),
        ("mesh [2] (dp)\nvar x: f32[2] input\nshard x [dp] partial(dp=MEDIAN)", &["3:25: unknown reduce type `MEDIAN`; expected SUM, AVG, MAX, MIN or PROD"]),
        ("mesh [2] (dp)\nvar x: f32[2] input\nshard x [!]", &["3:10: unexpected character `!`"]),
        ("frob", &["1:1: expected `mesh`, `options`, `var`, `op`, `shard` or `stage`, found `frob`"]),
        ("options zero=4", &["1:9: zero 4: expected a stage from 0 to 3"]),
        ("options zero", &["1:9: option `zero` needs a value: zero=0|1|2|3"]),
        ("options zero=x", &["1:9: zero `x`: expected a stage from 0 to 3"]),
        ("options zero=-1", &["1:9: zero -1: expected a stage from 0 to 3"]),
        ("options optimizer=(", &["1:19: expected the option's value (a name or a number), found `(`"]),
        ("options amp=1", &["1:9: option `amp` takes no value (found `=1`)"]),
        ("options amp amp", &["1:13: option `amp` is given twice"]),
        ("options clip_norm=0", &["1:9: clip_norm 0: expected a finite number above 0"]),
        ("options optimizer=lamb", &["1:9: unknown optimizer `lamb`: expected sgd, momentum, adam or adamw"]),
        ("options warp=9", &["1:9: unknown option `warp`: expected one of optimizer, amp, clip_norm, megatron_sums, no_grad_scale, zero, recompute, bucket_mb, schedule, micro_batches, chunks"]),
        ("options amp\noptions zero=1", &["2:1: the options are given twice"]),
        ("options recompute=some", &["1:9: recompute `some`: expected off, full or selective"]),
        ("options bucket_mb=0", &["1:9: bucket_mb 0: expected a size in MiB above 0 and at most 1048576"]),
        ("options bucket_mb=lots", &["1:9: bucket_mb `lots`: expected a number of MiB"]),
        ("var x: f32[99999999999999999999] input", &["1:12: invalid integer (out of range?) `99999999999999999999`"]),
    ];
    for (text, want) in cases {
        assert_eq!(errors(text), *want, "input:\n{text}");
    }
}

#[test]
fn every_bad_line_is_reported_not_just_the_first() {
    let text = "var a: f32[2] input\nvar b f32[2] input\nop nope() -> ()\nvar c: f32[2] input\nop relu(X=zz) -> ()";
    assert_eq!(
        errors(text),
        [
            "2:7: expected `:`, found `f32`",
            "3:4: unknown op type `nope`",
            "5:11: unknown variable `zz` (declare it with `var`)",
        ]
    );
}

#[test]
fn comments_blank_lines_and_free_dims_parse() {
    let text = "# a plan\nmesh [2, 4] (dp, mp)   # the mesh\n\nvar x: f32[4, 8] input\nshard x [(dp, mp), ?] partial()\n";
    let (plan, map) = parse_plan(text).unwrap();
    let ann = &plan.annotations[0];
    assert_eq!(ann.attr.axis_lists(), vec![vec![0, 1], vec![]]);
    assert_eq!(ann.attr.annotated.as_slice(), [true, false]);
    assert_eq!(map.annotation_lines, vec![5]);
    assert_eq!(
        plan.to_string(),
        "mesh [2, 4] (dp, mp)\n\nvar x: f32[4, 8] input\n\nshard x [(dp, mp), ?]\n"
    );
}

fn mesh_axis(i: usize) -> shardlab::dist::MeshAxis {
    shardlab::dist::MeshAxis::new(i).unwrap()
}
