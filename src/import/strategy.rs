//! An imported program made a plan: under a strategy by sizes (`dp=2,tp=2`, as
//! `--parallel` takes it) it gets the mesh and Megatron's annotations found by pattern
//! (`crate::plan::parallel`), and the text starts with what the import did, as comments.
//! The CLI's `import --parallel`, the JavaScript API's `import_model` and the playground's
//! import (in the engine's worker) all make their plans here, so the three agree.

use super::Imported;
use crate::plan::parallel::{Parallel, ParallelError};
use crate::plan::{parse_mesh_spec, parse_shard_spec, Plan, SpecError};
use std::sync::Arc;

/// Why a strategy does not apply to an imported program.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum StrategyError {
    #[error("strategy `{spec}`: {source}")]
    Parallel { spec: String, source: ParallelError },
    #[error("strategy `{spec}`: {source}")]
    Spec { spec: String, source: SpecError },
    #[error(
        "strategy `{spec}`: no input has a batch of at least dp={dp} to split ({inputs}); \
         give a larger batch (the sizes, --dim) or a smaller dp"
    )]
    NoBatch {
        spec: String,
        dp: usize,
        inputs: String,
    },
}

/// Why a list of sizes (`batch=8, seq=16`) does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DimSpecError {
    #[error("sizes `{0}`: expected NAME=N, e.g. batch_size=8")]
    NotAPair(String),
    #[error("sizes `{0}`: the size must be a whole number ≥ 1")]
    BadSize(String),
}

/// Sizes for symbolic dims, `NAME=N` separated by commas (blank: none). The names may hold
/// any character but `,` and `=` (paddle2onnx writes `DynamicDimension.0`).
pub fn parse_dims(spec: &str) -> Result<Vec<(String, usize)>, DimSpecError> {
    spec.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|item| {
            let (name, n) = item
                .split_once('=')
                .filter(|(name, _)| !name.trim().is_empty())
                .ok_or_else(|| DimSpecError::NotAPair(item.into()))?;
            let n = n
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|&n| n >= 1)
                .ok_or_else(|| DimSpecError::BadSize(item.into()))?;
            Ok((name.trim().to_string(), n))
        })
        .collect()
}

/// `imported`'s program as a plan under `spec` (blank: no mesh, the program alone, for
/// the other commands' `--mesh`/`--shard` or `--parallel`).
pub fn plan_under(imported: &Imported, spec: &str) -> Result<Plan, StrategyError> {
    let mut plan = Plan::from_program(imported.program.clone());
    if spec.trim().is_empty() {
        return Ok(plan);
    }
    let p = Parallel::parse(spec).map_err(|source| StrategyError::Parallel {
        spec: spec.into(),
        source,
    })?;
    let with_spec = |source| StrategyError::Spec {
        spec: spec.into(),
        source,
    };
    plan.program = p.prepare(&plan.program);
    p.set_options(&mut plan.options);
    let mesh = Arc::new(parse_mesh_spec(&p.mesh_spec()).map_err(with_spec)?);
    plan.set_mesh(mesh.clone());
    let specs = p.shard_specs(&plan.program);
    // Data parallelism splits an input's first dim: without one that large, every rank
    // would do the same work (and the plan would look data-parallel).
    if p.dp > 1
        && !specs
            .iter()
            .any(|s| s.split(['=', ',']).any(|d| d == p.batch()))
    {
        let inputs: Vec<String> = plan
            .program
            .vars()
            .iter()
            .filter(|v| v.kind == crate::ir::VarKind::Input)
            .map(|v| format!("{} {:?}", v.name, v.ty.shape.as_slice()))
            .take(3)
            .collect();
        return Err(StrategyError::NoBatch {
            spec: spec.into(),
            dp: p.dp,
            inputs: inputs.join(", "),
        });
    }
    plan.annotations = specs
        .iter()
        .map(|s| parse_shard_spec(s, &plan.program, &mesh))
        .collect::<Result<_, _>>()
        .map_err(with_spec)?;
    Ok(plan)
}

impl Imported {
    /// What the import did, as comment lines for the head of a plan file: the census of
    /// the graph's operators, then each note.
    pub fn header(&self, source: &str) -> String {
        let census: Vec<String> = self
            .census
            .iter()
            .map(|(op, n)| format!("{op} × {n}"))
            .collect();
        let mut out = format!(
            "# imported {source}: {} ops from {} nodes ({})\n",
            self.program.ops().len(),
            self.nodes(),
            census.join(", ")
        );
        for note in &self.notes {
            out.push_str(&format!("# {note}\n"));
        }
        out
    }

    /// The graph's node count.
    pub fn nodes(&self) -> usize {
        self.census.iter().map(|(_, n)| n).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_bad_ones_name_the_item() {
        assert_eq!(
            parse_dims(" batch=8, DynamicDimension.0 = 16 ,").unwrap(),
            vec![("batch".into(), 8), ("DynamicDimension.0".into(), 16)]
        );
        assert_eq!(parse_dims("  ").unwrap(), vec![]);
        assert_eq!(
            parse_dims("batch").unwrap_err().to_string(),
            "sizes `batch`: expected NAME=N, e.g. batch_size=8"
        );
        assert_eq!(
            parse_dims("=4").unwrap_err(),
            DimSpecError::NotAPair("=4".into())
        );
        assert_eq!(
            parse_dims("b=0").unwrap_err().to_string(),
            "sizes `b=0`: the size must be a whole number ≥ 1"
        );
        assert_eq!(
            parse_dims("b=-1").unwrap_err(),
            DimSpecError::BadSize("b=-1".into())
        );
    }
}
