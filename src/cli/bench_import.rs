//! `shardlab bench --what import`: the import of the fixtures in `tests/models/` (ONNX and
//! Paddle programs; run from the repository), median time and time per node, beside parsing
//! the imported plan's text in the same process (the baseline: both are linear in the
//! program, so their ratio is what to compare across machines and commits); and Llama 3
//! 8B and Qwen1.5-MoE-A2.7B at their published sizes imported and planned end to end (the
//! issue's 1 s target).

use super::bench::median;
use crate::import::{import_model, plan_under, ImportOptions};

/// The fixtures: file, and the sizes of their symbolic dims.
const FIXTURES: &[(&str, &[(&str, usize)])] = &[
    ("tests/models/mlp_block.onnx", &[("DynamicDimension.0", 8)]),
    ("tests/models/llama_model_2l.onnx", &[]),
    ("tests/models/mlp_block.pir", &[]),
    ("tests/models/llama_causal_2l.pir", &[]),
    ("tests/models/llama3_8b.pir", &[]),
    ("tests/models/qwen2_moe_2l.pir", &[]),
    ("tests/models/qwen1.5_moe_a2.7b.pir", &[]),
];

/// The real-size graphs planned end to end, and the strategy.
const REAL_SIZE: &[(&str, &str)] = &[
    ("tests/models/llama3_8b.pir", "dp=8,tp=8"),
    ("tests/models/qwen1.5_moe_a2.7b.pir", "dp=8,tp=8"),
];

pub fn bench_import(repeat: usize) -> Result<String, String> {
    let mut out = String::from(
        "import of tests/models/ (median of runs), beside parsing the imported plan text\n",
    );
    for (file, dims) in FIXTURES {
        let bytes = std::fs::read(file)
            .map_err(|e| format!("{file}: {e} (run `bench --what import` from the repository)"))?;
        let opts = ImportOptions {
            dims: dims.iter().map(|(k, n)| (k.to_string(), *n)).collect(),
        };
        let imported = import_model(&bytes, &opts).map_err(|e| format!("{file}: {e}"))?;
        let nodes: usize = imported.census.iter().map(|(_, n)| n).sum();
        let text = imported.program.to_string();
        let t = median(repeat, || {
            import_model(&bytes, &opts)
                .map(|_| ())
                .map_err(|e| e.to_string())
        })?;
        let parse = median(repeat, || {
            crate::ir::parse_program(&text)
                .map(|_| ())
                .map_err(|e| format!("{e:?}"))
        })?;
        out.push_str(&format!(
            "  {file}: {nodes} nodes, {} ops: import {:.3} ms ({:.2} µs per node); parse {:.3} ms; ratio {:.2}\n",
            imported.program.ops().len(),
            t.as_secs_f64() * 1e3,
            t.as_secs_f64() * 1e6 / nodes.max(1) as f64,
            parse.as_secs_f64() * 1e3,
            t.as_secs_f64() / parse.as_secs_f64().max(1e-12)
        ));
    }
    for &(file, spec) in REAL_SIZE {
        out.push_str(&real_size(file, spec, repeat)?);
    }
    Ok(out)
}

/// A published model's program read, imported, planned under `spec` and taken through
/// every pass (completion, backward, optimizer, partition).
fn real_size(file: &str, spec: &str, repeat: usize) -> Result<String, String> {
    let plan_it = || -> Result<usize, String> {
        let bytes = std::fs::read(file).map_err(|e| format!("{file}: {e}"))?;
        let imported =
            import_model(&bytes, &ImportOptions::default()).map_err(|e| e.to_string())?;
        let plan = plan_under(&imported, spec).map_err(|e| e.to_string())?;
        let opts = crate::passes::driver::PassOptions::from_plan(&plan.options);
        let passes = crate::passes::driver::run_passes(&plan, &opts).map_err(|e| e.to_string())?;
        Ok(passes.partitioned.ranks.len())
    };
    let ranks = plan_it()?;
    let t = median(repeat, || plan_it().map(|_| ()))?;
    Ok(format!(
        "  {file} read, imported and planned under {spec} ({ranks} ranks, every pass): {:.1} ms\n",
        t.as_secs_f64() * 1e3
    ))
}
