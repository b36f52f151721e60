//! `shardlab bench --what import`: the ONNX import of the fixtures in `tests/models/` (run
//! from the repository), median time and time per node, beside parsing the imported plan's
//! text in the same process (the baseline: both are linear in the program, so their ratio
//! is what to compare across machines and commits).

use super::bench::median;
use crate::import::{import_onnx, ImportOptions};

/// The fixtures: file, and the sizes of their symbolic dims.
const FIXTURES: &[(&str, &[(&str, usize)])] = &[
    ("tests/models/mlp_block.onnx", &[("DynamicDimension.0", 8)]),
    ("tests/models/llama_model_2l.onnx", &[]),
];

pub fn bench_import(repeat: usize) -> Result<String, String> {
    let mut out = String::from(
        "ONNX import of tests/models/ (median of runs), beside parsing the imported plan text\n",
    );
    for (file, dims) in FIXTURES {
        let bytes = std::fs::read(file)
            .map_err(|e| format!("{file}: {e} (run `bench --what import` from the repository)"))?;
        let opts = ImportOptions {
            dims: dims.iter().map(|(k, n)| (k.to_string(), *n)).collect(),
        };
        let imported = import_onnx(&bytes, &opts).map_err(|e| format!("{file}: {e}"))?;
        let nodes: usize = imported.census.iter().map(|(_, n)| n).sum();
        let text = imported.program.to_string();
        let t = median(repeat, || {
            import_onnx(&bytes, &opts)
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
    Ok(out)
}
