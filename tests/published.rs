//! The published presets build the family's program at the published sizes: the parameter
//! count of the program equals the count its publisher reports, to the parameter.
#![cfg(not(target_arch = "wasm32"))]

use shardlab::ir::VarKind;
use shardlab::models::published::PUBLISHED;
use shardlab::models::{preset_names, Model};

#[test]
fn each_published_preset_has_its_published_parameter_count() {
    for p in &PUBLISHED {
        let (model, cfg) = Model::preset(p.name).unwrap();
        assert_eq!(model, p.model);
        let program = model.build(&cfg).unwrap();
        let params: u64 = program
            .vars()
            .iter()
            .filter(|v| v.kind == VarKind::Parameter)
            .map(|v| v.ty.shape.iter().map(|&d| d as u64).product::<u64>())
            .sum();
        assert_eq!(params, p.params, "{}", p.name);
    }
}

#[test]
fn published_presets_are_named_beside_the_families() {
    let names = preset_names();
    for p in &PUBLISHED {
        assert!(names.contains(&p.name), "{}", p.name);
    }
    // Each cites its source (a comment in its entry: the page does not carry citations).
    let code = include_str!("../src/models/published.rs");
    assert_eq!(code.matches("        // Source: ").count(), PUBLISHED.len());
    let err = Model::preset("llama3-7b").unwrap_err().to_string();
    assert!(
        err.contains("llama3-8b") && err.contains("embedding_lm"),
        "{err}"
    );
}

#[test]
fn the_cli_page_lists_every_published_preset_with_its_count() {
    let page =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/cli.md")).unwrap();
    for p in &PUBLISHED {
        let count = p
            .params
            .to_string()
            .as_bytes()
            .rchunks(3)
            .rev()
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect::<Vec<_>>()
            .join(",");
        let row = format!("| `{}` |", p.name);
        let line = page.lines().find(|l| l.starts_with(&row));
        assert!(
            line.is_some_and(|l| l.contains(&count)),
            "docs/cli.md has no row for {} with {count} parameters",
            p.name
        );
    }
}

#[test]
fn gpt3_counts_round_to_the_papers() {
    // Brown et al. 2020, Table 2.1 gives the counts in billions to one decimal (13B: see the
    // preset's source for why 12.85B).
    for (name, billions) in [("gpt3-1.3b", 1.3), ("gpt3-13b", 12.9), ("gpt3-175b", 174.6)] {
        let p = PUBLISHED.iter().find(|p| p.name == name).unwrap();
        let got = p.params as f64 / 1e9;
        assert!((got - billions).abs() < 0.05, "{name}: {got}B");
    }
    // And the closed form of a GPT with tied head and learned positions:
    // 12·L·h² + 13·L·h + (V + S)·h + 2h.
    for p in PUBLISHED.iter().filter(|p| p.model == Model::GptLm) {
        let (l, h, v, s) = (
            p.layers as u64,
            p.hidden as u64,
            p.vocab as u64,
            p.seq as u64,
        );
        let closed = 12 * l * h * h + 13 * l * h + (v + s) * h + 2 * h;
        assert_eq!(closed, p.params, "{}", p.name);
    }
}
