//! `shardlab check`: parse and verify a plan file, and run everything a later command
//! runs; print every problem at its line and column.

use super::{budget, emit, read_plan, report_plan_error, Origin};
use crate::plan::PlanError;
use crate::plan::{verify_plan, Plan, RanksPlanned, SourceMap};
use std::process::ExitCode;

pub(crate) fn check(file: &str) -> Result<ExitCode, String> {
    let (plan, map) = match read_plan(file)? {
        Ok(parsed) => parsed,
        Err(_) => return Ok(ExitCode::from(1)),
    };
    if report_issues(file, &plan, &map) {
        return Ok(ExitCode::from(1));
    }
    let Some(_) = plan.mesh() else {
        emit(&format!(
            "{file}: ok: {} (a program: `plan` needs a mesh, in the file or --mesh)\n",
            summary(&plan)
        ));
        return Ok(ExitCode::SUCCESS);
    };
    // Everything a later command checks, with the plan's own options (recomputation,
    // micro-batches, the schedule, ZeRO, ...): `plan --stage all`'s completion, backward,
    // optimizer and partitioning, each verified, and `cost`'s simulation of every rank and
    // of the pipeline's schedule (on the nominal CPU: the schedule's order and every
    // collective's matching do not depend on the device).
    let needed = plan.estimated_planning_bytes(RanksPlanned::All);
    budget::check("checking", needed, budget::default_budget())?;
    let opts = crate::passes::driver::PassOptions::from_plan(&plan.options);
    let priced = crate::passes::driver::run_passes(&plan, &opts)
        .map_err(|e| PlanError::from_located(&e, Some("planning fails")))
        .and_then(|p| {
            let ranks = p.partitioned.ranks.len();
            let topo = crate::cost::device::Topology::cpu(crate::cost::device::CpuCalibration {
                devices: ranks.max(1),
                ..Default::default()
            });
            let cost = crate::cost::estimate::CostOptions {
                mixed_precision: plan.options.amp,
                overlap_grad_sync: false,
            };
            crate::cost::estimate::estimate(&p, &topo, topo.default_dtype, cost)
                .map(|_| ())
                .map_err(|e| PlanError::from_located(&e, Some("pricing fails")))
        });
    if let Err(error) = priced {
        let origin = Origin {
            file: file.to_string(),
            map,
        };
        report_plan_error(Some(&origin), &plan, &error);
        return Ok(ExitCode::from(1));
    }
    emit(&format!("{file}: ok: {}\n", summary(&plan)));
    Ok(ExitCode::SUCCESS)
}

/// Prints every verifier problem of a parsed plan as FILE:LINE:COL; whether there were any.
pub(crate) fn report_issues(file: &str, plan: &Plan, map: &SourceMap) -> bool {
    let issues = verify_plan(plan);
    for issue in &issues {
        let (line, col) = map.locate(plan, &issue.subject);
        eprintln!("{file}:{line}:{col}: {}", issue.message);
    }
    if !issues.is_empty() {
        eprintln!("{file}: {} error(s)", issues.len());
    }
    !issues.is_empty()
}

/// `14 variables (4 parameters), 7 ops, mesh [4] (dp), 2 annotations`.
pub fn summary(plan: &Plan) -> String {
    let vars = plan.program.vars();
    let params = vars
        .iter()
        .filter(|v| v.kind == crate::ir::VarKind::Parameter)
        .count();
    let mesh = plan
        .mesh()
        .map_or("no mesh".to_string(), |m| format!("mesh {m}"));
    format!(
        "{} variables ({params} parameters), {} ops, {mesh}, {} annotations",
        vars.len(),
        plan.program.ops().len(),
        plan.annotations.len()
    )
}
