//! Fuzzing every input surface with grammar-aware generators (proptest, stable Rust): plan
//! texts, mesh and shard specs, playground links and imported ONNX files. Each input must give a value or an
//! error, never a panic; plans that parse and verify are also planned (under a memory
//! estimate), and links that load are written back and loaded again.
//!
//! CI runs `PROPTEST_CASES` of each target (200 in `scripts/test.sh`); `scripts/fuzz.sh`
//! runs a million or more with random seeds in the test profile, which keeps overflow checks.
//! The command-line flags are fuzzed in `tests/cli.rs` (a process per input).
#![cfg(not(target_arch = "wasm32"))]

use proptest::prelude::*;
use shardlab::plan::{parse_mesh_spec, parse_plan, parse_shard_spec, verify_plan};
use shardlab::session::Session;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(200)
}

/// Names: short, reused (so statements refer to each other), odd and very long.
fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec!["x", "w", "y", "b", "l", "h", "x.grad", "w@GRAD", "dp", "mp"])
            .prop_map(str::to_string),
        1 => "[a-z_][a-z0-9_.@]{0,12}",
        1 => (1usize..3000).prop_map(|n| "n".repeat(n)),
    ]
}

/// Numbers: small, boundary and overflowing.
fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => (0u64..20).prop_map(|n| n.to_string()),
        1 => prop::sample::select(vec![
            "4294967296", "18446744073709551615", "18446744073709551616",
            "9223372036854775807", "-1", "-9223372036854775808", "1e308", "nan", "0",
            "6148914691236517206",
        ]).prop_map(str::to_string),
    ]
}

fn list(
    item: BoxedStrategy<String>,
    open: &'static str,
    close: &'static str,
) -> BoxedStrategy<String> {
    prop::collection::vec(item, 0..4)
        .prop_map(move |v| format!("{open}{}{close}", v.join(", ")))
        .boxed()
}

fn dim() -> BoxedStrategy<String> {
    prop_oneof![
        3 => prop::sample::select(vec!["-", "?", "dp", "mp", "pp"]).prop_map(str::to_string),
        1 => list(name().boxed(), "(", ")"),
        1 => name(),
    ]
    .boxed()
}

fn statement() -> impl Strategy<Value = String> {
    let dtype = prop::sample::select(vec!["f32", "f64", "i64", "bf16", ""]);
    let kind = prop::sample::select(vec![
        "input",
        "label",
        "parameter",
        "activation",
        "gradient",
        "optimizer_state",
        "parameter persistable",
        "junk",
    ]);
    let op = prop::sample::select(vec![
        "matmul_v2",
        "elementwise_add",
        "relu",
        "gelu",
        "softmax",
        "reshape2",
        "transpose2",
        "mean",
        "reduce_sum",
        "layer_norm",
        "split",
        "concat",
        "sum",
        "all_reduce",
        "adam",
        "softmax_with_cross_entropy",
        "lookup_table_v2",
        "slice",
        "scale",
        "fill_constant",
        "flatten_pad",
        "unpad_reshape",
        "reduce_scatter",
        "nop",
    ]);
    let slot = prop::sample::select(vec![
        "X", "Y", "Out", "W", "Ids", "Logits", "Label", "Input", "Z",
    ]);
    let attr = (
        prop::sample::select(vec![
            "trans_x", "axis", "shape", "scale", "keep_dim", "bogus", "perm", "dim",
        ]),
        prop_oneof![
            number(),
            Just("true".to_string()),
            list(number().boxed(), "[", "]"),
            Just("\"s\"".to_string())
        ],
    )
        .prop_map(|(k, v)| format!("{k}={v}"));
    prop_oneof![
        2 => (list(number().boxed(), "[", "]"), list(name().boxed(), "(", ")"), prop::option::of(list(number().boxed(), "[", "]")))
            .prop_map(|(s, n, ids)| format!("mesh {s} {n}{}", ids.map(|i| format!(" ids {i}")).unwrap_or_default())),
        4 => (name(), dtype, list(number().boxed(), "[", "]"), kind)
            .prop_map(|(n, d, s, k)| format!("var {n}: {d}{s} {k}")),
        4 => (op, prop::collection::vec((slot.clone(), name()), 0..3), prop::collection::vec((slot, name()), 0..2), prop::collection::vec(attr, 0..3),
              prop::option::of(prop::sample::select(vec!["role=loss", "role=backward", "scope=\"/x\""])))
            .prop_map(|(op, ins, outs, attrs, tail)| {
                let slots = |v: Vec<(&str, String)>| v.iter().map(|(s, n)| format!("{s}={n}")).collect::<Vec<_>>().join(", ");
                format!("op {op}({}) -> ({}) {{{}}} {}", slots(ins), slots(outs), attrs.join(", "), tail.unwrap_or(""))
            }),
        3 => (name(), list(dim(), "[", "]"), prop::option::of(prop::sample::select(vec!["partial(dp=SUM)", "partial(mp=MAX, dp=SUM)", "partial(q=AVG)", "partial()"])))
            .prop_map(|(n, d, p)| format!("shard {n} {d} {}", p.unwrap_or(""))),
        2 => prop::collection::vec(option(), 0..5).prop_map(|o| format!("options {}", o.join(" "))),
        2 => (number(), prop_oneof![
                (number(), number()).prop_map(|(a, b)| format!("ops {a} to {b}")),
                name().prop_map(|n| format!("var {n}")),
                "[ -~]{0,12}",
            ]).prop_map(|(k, t)| format!("stage {k} {t}")),
        1 => "[ -~]{0,40}",
    ]
}

/// One item of an `options` statement, valid or not.
fn option() -> impl Strategy<Value = String> {
    let key = prop::sample::select(vec![
        "optimizer",
        "amp",
        "clip_norm",
        "megatron_sums",
        "no_grad_scale",
        "zero",
        "warp",
        "schedule",
        "micro_batches",
        "chunks",
    ]);
    let value = prop::option::of(prop_oneof![
        number(),
        prop::sample::select(vec![
            "adam",
            "sgd",
            "adamw",
            "momentum",
            "lamb",
            "1e-3",
            "nan",
            "1f1b",
            "vpp",
            "zbh1",
            "zbh1_paper",
            "fthenb",
            "65537"
        ])
        .prop_map(String::from),
    ]);
    (key, value).prop_map(|(k, v)| match v {
        Some(v) => format!("{k}={v}"),
        None => k.to_string(),
    })
}

/// A valid plan from the presets, mutated line by line: lines dropped, repeated, swapped in
/// from the grammar, or with a character changed.
fn mutated_plan() -> impl Strategy<Value = String> {
    let bases = vec![
        include_str!("golden/mlp.txt"),
        include_str!("golden/mlp_mse.txt"),
        include_str!("golden/gpt_2.txt"),
    ];
    let mesh = prop::sample::select(vec![
        ("mesh [4] (dp)\n", vec!["dp"]),
        ("mesh [2, 4] (dp, mp)\n", vec!["dp", "mp"]),
        ("mesh [2, 2, 2] (dp, mp, pp)\n", vec!["dp", "mp", "pp"]),
        ("mesh [2, 2] (pp, dp)\n", vec!["dp"]),
        ("mesh [4] (pp)\n", vec![]),
        ("mesh [3] (dp)\n", vec!["dp"]),
        ("mesh [2, 2] (dp, mp) ids [3, 1, 2, 0]\n", vec!["dp", "mp"]),
        ("", vec![]),
    ]);
    (
        prop::sample::select(bases),
        mesh,
        prop::collection::vec(
            (
                any::<prop::sample::Index>(),
                0u8..4,
                statement(),
                any::<char>(),
            ),
            0..2,
        ),
        prop::collection::vec(statement(), 0..2),
        // Annotations of the base's own variables, with plausible axes.
        prop::collection::vec(
            (
                any::<prop::sample::Index>(),
                prop::collection::vec(0usize..6, 4),
            ),
            0..5,
        ),
        prop::sample::select(vec![
            "",
            "options zero=1\n",
            "options optimizer=adam amp clip_norm=0.5 zero=3\n",
            "options optimizer=momentum megatron_sums zero=2\n",
            "options recompute=full zero=3\n",
            "options recompute=selective bucket_mb=0.001\n",
            "options schedule=1f1b micro_batches=4\n",
            "options schedule=vpp micro_batches=4 chunks=2\n",
            "options schedule=zbh1_paper micro_batches=2\n",
        ]),
    )
        .prop_map(|(base, (mesh, axes), edits, extra, annotations, options)| {
            let mut lines: Vec<String> = base
                .lines()
                .filter(|l| !l.starts_with("mesh "))
                .map(str::to_string)
                .collect();
            let vars: Vec<(String, usize)> = lines
                .iter()
                .filter_map(|l| {
                    let rest = l.strip_prefix("var ")?;
                    let (name, ty) = rest.split_once(": ")?;
                    let dims = ty.split_once('[')?.1.split_once(']')?.0;
                    let rank = if dims.trim().is_empty() {
                        0
                    } else {
                        dims.split(',').count()
                    };
                    Some((name.to_string(), rank))
                })
                .collect();
            for (at, choices) in annotations {
                if let Some((name, rank)) = vars.get(at.index(vars.len().max(1))) {
                    // 0 replicated, 1 free, 2.. a mesh axis (co-shards when two dims pick
                    // the same one are caught by the verifier).
                    let dims: Vec<String> = choices
                        .iter()
                        .take(*rank)
                        .map(|&c| match (c, axes.len()) {
                            (0, _) | (_, 0) => "-".to_string(),
                            (1, _) => "?".to_string(),
                            (5, n) if n > 1 => format!("({}, {})", axes[0], axes[1]),
                            (c, n) => axes[(c - 2) % n].to_string(),
                        })
                        .collect();
                    lines.push(format!("shard {name} [{}]", dims.join(", ")));
                }
            }
            for (at, kind, stmt, c) in edits {
                if lines.is_empty() {
                    break;
                }
                let i = at.index(lines.len());
                match kind {
                    0 => {
                        lines.remove(i);
                    }
                    1 => {
                        let l = lines[i].clone();
                        lines.insert(i, l);
                    }
                    2 => lines[i] = stmt,
                    _ => {
                        let mut chars: Vec<char> = lines[i].chars().collect();
                        if !chars.is_empty() {
                            let j = at.index(chars.len());
                            chars[j] = c;
                        }
                        lines[i] = chars.into_iter().collect();
                    }
                }
            }
            lines.extend(extra);
            format!("{mesh}{options}{}\n", lines.join("\n"))
        })
}

/// Parses, verifies and, when the plan is valid and small, plans `text`; must not panic.
fn exercise_plan(text: &str) {
    let Ok((plan, _)) = parse_plan(text) else {
        return;
    };
    if !verify_plan(&plan).is_empty() || plan.mesh().is_none() {
        return;
    }
    if plan.estimated_planning_bytes(shardlab::plan::RanksPlanned::All) > 64.0 * 1024.0 * 1024.0 {
        return;
    }
    let opts = shardlab::passes::driver::PassOptions::from_plan(&plan.options);
    let _ = shardlab::passes::driver::run_passes(&plan, &opts);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn plan_texts_from_the_grammar(lines in prop::collection::vec(statement(), 0..12)) {
        exercise_plan(&lines.join("\n"));
    }

    #[test]
    fn mutated_preset_plans(text in mutated_plan()) {
        exercise_plan(&text);
    }

    #[test]
    fn mesh_and_shard_specs(
        mesh in prop_oneof!["[0-9x]{0,12}:[a-z,]{0,10}", "[ -~]{0,24}",
            (number(), number()).prop_map(|(a, b)| format!("{a}x{b}:dp,mp"))],
        shard in prop_oneof!["[a-z_.0-9]{0,10}=[a-z,+?-]{0,16}", "[ -~]{0,24}"],
    ) {
        if let Ok(mesh) = parse_mesh_spec(&mesh) {
            let program = shardlab::models::Model::Mlp
                .build(&shardlab::models::Model::Mlp.default_config())
                .unwrap();
            let _ = parse_shard_spec(&shard, &program, &std::sync::Arc::new(mesh));
        }
    }

    /// ONNX files: the fixture with bytes changed, cut short or spliced, and random bytes.
    /// An import that succeeds must give a program that verifies and prints as text that
    /// parses again.
    #[test]
    fn onnx_files(
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..8),
        cut in any::<prop::sample::Index>(),
        random in prop::collection::vec(any::<u8>(), 0..64),
        which in 0..3u8,
    ) {
        let fixture: &[u8] = include_bytes!("models/mlp_block.onnx");
        let bytes = match which {
            0 => {
                let mut b = fixture.to_vec();
                for (i, x) in &edits {
                    let k = i.index(b.len());
                    b[k] = *x;
                }
                b
            }
            1 => fixture[..cut.index(fixture.len())].to_vec(),
            _ => random,
        };
        let opts = shardlab::import::ImportOptions {
            dims: vec![("DynamicDimension.0".into(), 2)],
        };
        if let Ok(imported) = shardlab::import::import_onnx(&bytes, &opts) {
            let text = imported.program.to_string();
            prop_assert!(shardlab::ir::verify_program(&imported.program).is_empty());
            prop_assert!(shardlab::ir::parse_program(&text).is_ok(), "{text}");
        }
    }

    /// Paddle programs (PIR text): the Llama fixture with characters replaced by the
    /// grammar's own (`%`, `(`, `"`, digits, ...), cut short, or with lines swapped or
    /// dropped, and random text. Either a clear error or a program that verifies and prints
    /// as text that parses again; never a panic.
    #[test]
    fn pir_programs(
        edits in prop::collection::vec((any::<prop::sample::Index>(), prop::sample::select(b"%(){}[]<>,:=\"x-019\n ".to_vec())), 0..6),
        swaps in prop::collection::vec((any::<prop::sample::Index>(), any::<prop::sample::Index>()), 0..3),
        cut in any::<prop::sample::Index>(),
        random in "[{}()%\"a-z0-9:,<>\\[\\] \n.=-]{0,200}",
        which in 0..4u8,
        moe in any::<bool>(),
    ) {
        // The Llama program, or the MoE one (its routing fusion sees the damage too).
        let fixture = if moe {
            include_str!("models/qwen2_moe_2l.pir")
        } else {
            include_str!("models/llama_causal_2l.pir")
        };
        let text = match which {
            0 => {
                let mut b = fixture.as_bytes().to_vec();
                for (i, x) in &edits {
                    let k = i.index(b.len());
                    b[k] = *x;
                }
                String::from_utf8_lossy(&b).into_owned()
            }
            1 => {
                let mut lines: Vec<&str> = fixture.lines().collect();
                for (a, b) in &swaps {
                    let (a, b) = (a.index(lines.len()), b.index(lines.len()));
                    lines.swap(a, b);
                }
                if let Some((drop, _)) = swaps.first() {
                    lines.remove(drop.index(lines.len()));
                }
                lines.join("\n")
            }
            2 => fixture[..fixture.floor_char_boundary(cut.index(fixture.len()))].to_string(),
            _ => random,
        };
        let opts = shardlab::import::ImportOptions::default();
        match shardlab::import::import_pir(&text, &opts) {
            Ok(imported) => {
                let printed = imported.program.to_string();
                prop_assert!(shardlab::ir::verify_program(&imported.program).is_empty());
                prop_assert!(shardlab::ir::parse_program(&printed).is_ok(), "{printed}");
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    #[test]
    fn playground_links(
        fields in prop::collection::vec(
            (
                prop::sample::select(vec!["s", "mesh", "shard", "text", "stage", "t", "var", "rank", "n", "ms", "zz"]),
                prop_oneof![
                    prop::sample::select(vec!["dp_mlp", "gpt_dp_mp", "8:dp", "2x4:dp,mp", "x%3Ddp%2C-", "1", "0",
                        "partition", "99999999999999999999", "%", "%zz", "%E2%82", "+"]).prop_map(str::to_string),
                    "[ -~]{0,20}",
                ],
            ),
            0..6,
        ),
    ) {
        let hash: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
        if let Ok(s) = Session::from_hash(&hash.join("&")) {
            let written = s.to_hash();
            let back = Session::from_hash(&written);
            prop_assert!(back.is_ok(), "the page wrote a link that does not load: {written}: {:?}", back.err());
        }
    }
}
