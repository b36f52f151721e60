//! The playground's import (`Task::Import`): a model file's bytes, dropped on the page or
//! picked in its import box, become a plan's text in the worker, so the page's module
//! carries neither the ONNX decoder nor the strategy's patterns.

use crate::import::{self, parse_dims, plan_under, ImportOptions};
use crate::protocol::{Failure, ImportView};

/// `bytes` (the file `name`) imported with the sizes `dims` and planned under `parallel`.
pub fn import_model(
    name: &str,
    bytes: &[u8],
    dims: &str,
    parallel: &str,
) -> Result<ImportView, Failure> {
    let fail = |message: String| Failure {
        message: format!("{name}: {message}"),
    };
    let dims = parse_dims(dims).map_err(|e| fail(e.to_string()))?;
    let imported =
        import::import_model(bytes, &ImportOptions { dims }).map_err(|e| fail(e.to_string()))?;
    let plan = plan_under(&imported, parallel).map_err(|e| fail(e.to_string()))?;
    let summary = format!(
        "Imported {name}: {} ops from {} nodes ({} patterns fused{}); the plan's \
         comments list what the import did.",
        imported.program.ops().len(),
        imported.nodes(),
        imported.fused,
        match parallel.trim() {
            "" => String::new(),
            p => format!(", planned as {p}"),
        }
    );
    Ok(ImportView {
        text: format!("{}{plan}", imported.header(name)),
        summary,
    })
}
