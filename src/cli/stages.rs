//! Printing the pipeline's stages: serial programs with dist attrs, per-rank programs, the
//! ledger; as text or JSON.

use super::options::Stage;
use crate::passes::complete::{attrs_text, completed_text};
use crate::passes::dist_program::DistProgram;
use crate::passes::ledger::summary;
use crate::passes::pipeline::Pipeline;

fn dist_text(title: &str, dp: &DistProgram) -> String {
    format!(
        "== {title}\nmesh {}\n\n{}",
        dp.mesh,
        attrs_text(&dp.program, &dp.mesh, &dp.tensors, &dp.ops)
    )
}

fn ranks_text(p: &Pipeline, rank: Option<u32>) -> String {
    let mut out = String::new();
    for r in p
        .partitioned
        .ranks
        .iter()
        .filter(|r| rank.is_none_or(|x| x == r.rank))
    {
        out.push_str(&format!("== rank {}\n{}\n", r.rank, r.program));
    }
    out.push_str("== communication groups (ring id: ranks)\n");
    for (i, g) in &p.partitioned.groups.rings {
        out.push_str(&format!("  ring {i}: {g:?}\n"));
    }
    out
}

/// The stage(s) asked for, as text.
pub fn pipeline_text(
    p: &Pipeline,
    stage: Option<Stage>,
    rank: Option<u32>,
    ledger: bool,
) -> String {
    let shows = |part: Stage| stage.is_some_and(|s| s.shows(part));
    let mut out = String::new();
    if shows(Stage::Complete) {
        out.push_str("== complete\n");
        out.push_str(&completed_text(&p.plan.program, &p.completed));
        out.push('\n');
    }
    if shows(Stage::Backward) {
        out.push_str(&dist_text("backward", &p.backward_dist()));
        out.push('\n');
    }
    if shows(Stage::Optimizer) {
        out.push_str(&dist_text("optimizer", &p.full));
        out.push('\n');
    }
    if shows(Stage::Partition) {
        out.push_str(&ranks_text(p, rank));
    }
    if ledger {
        for r in p
            .partitioned
            .ranks
            .iter()
            .filter(|r| rank.is_none_or(|x| x == r.rank))
        {
            out.push_str(&summary(&p.ledger, r.rank));
        }
        out.push_str("collectives:\n");
        for e in p.ledger.iter().filter(|e| rank.is_none_or(|x| x == e.rank)) {
            out.push_str(&format!(
                "  rank {} op{} {} {} group {:?} {}: {:.0} bytes ({}; {})\n",
                e.rank,
                e.op_index,
                e.phase,
                e.kind,
                e.group,
                e.tensor,
                e.bytes_per_rank,
                e.purpose.name(),
                e.reason
            ));
        }
    }
    out
}
