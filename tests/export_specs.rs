//! The gspmd script's `PartitionSpec`s say the plan's layouts, axis order included: a
//! co-sharded dim `[dp, mp]` is `("dp", "mp")`, never `("mp", "dp")` (which splits the dim
//! in another device order: the numbers would not change, since XLA reshards to whatever
//! it is given, but the script would no longer hold the plan and XLA would add
//! collectives). Checked without JAX, on every variable the script's tables name, against
//! the completed layouts; `tests/export_jax.rs` runs the scripts.
#![cfg(not(target_arch = "wasm32"))]

mod common;

use shardlab::export::{export_jax, Constrain, ExportMode, ExportOptions};
use shardlab::models::Model;
use shardlab::passes::driver::{run_passes, PassOptions};

/// `name: (spec...)` lines of the script's STATE and CONSTS tables: (name, the spec text).
fn table_specs(script: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in script.lines() {
        if line.starts_with("STATE = {") || line.starts_with("CONSTS = {") {
            inside = true;
            continue;
        }
        if line.starts_with('}') {
            inside = false;
        }
        if let (true, Some((name, spec))) = (inside, line.trim().split_once(": ")) {
            out.push((
                name.trim_matches('"').to_string(),
                spec.trim_end_matches(',').to_string(),
            ));
        }
    }
    out
}

/// What the spec of a layout must be: per dim, `None`, `"a"` or `("a", "b")` in the
/// layout's axis order.
fn expected(dims: &[Vec<String>]) -> String {
    let entry = |axes: &Vec<String>| match axes.len() {
        0 => "None".to_string(),
        1 => format!("\"{}\"", axes[0]),
        _ => format!(
            "({})",
            axes.iter()
                .map(|a| format!("\"{a}\""))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let entries: Vec<String> = dims.iter().map(entry).collect();
    match entries.len() {
        1 => format!("({},)", entries[0]),
        _ => format!("({})", entries.join(", ")),
    }
}

#[test]
fn co_sharded_dims_keep_their_axis_order_in_the_script() {
    let cases: [(&str, &[&str]); 3] = [
        ("2x4:dp,mp", &["x=dp+mp,-"]),
        ("2x4:dp,mp", &["x=mp+dp,-"]),
        ("2x2x2:a,b,c", &["x=c+a,-", "linear_0.w_0=-,b"]),
    ];
    let mut co_sharded = 0;
    for (mesh, shards) in cases {
        let shards: Vec<String> = shards.iter().map(|s| s.to_string()).collect();
        let plan = common::preset_plan(Model::Mlp, 1, mesh, &shards);
        let p = run_passes(&plan, &PassOptions::default()).unwrap();
        let opts = ExportOptions {
            mode: ExportMode::Gspmd,
            constrain: Constrain::Annotated,
            source: String::new(),
            init: Default::default(),
        };
        let script = export_jax(&p, &opts).unwrap();
        let names = p.full.mesh.dim_names();
        let specs = table_specs(&script);
        assert!(
            !specs.is_empty(),
            "{mesh} {shards:?}: no tables in the script"
        );
        for (name, spec) in specs {
            let Some(v) = p.full.program.var_id(&name) else {
                continue; // a dropout mask's entry
            };
            let dims: Vec<Vec<String>> = p.full.tensors[v.index()]
                .layout
                .axis_lists()
                .iter()
                .map(|axes| axes.iter().map(|&a| names[a].clone()).collect())
                .collect();
            co_sharded += dims.iter().filter(|d| d.len() > 1).count();
            assert_eq!(spec, expected(&dims), "{mesh} {shards:?}: `{name}`");
        }
    }
    assert!(co_sharded >= 3, "only {co_sharded} co-sharded dims checked");
}
