//! Printing the pipeline's stages: serial programs with dist attrs, per-rank programs, the
//! ledger; as text or JSON.

use super::options::Stage;
use crate::passes::complete::{attrs_text, completed_text};
use crate::passes::dist_program::DistProgram;
use crate::passes::driver::Passes;
use crate::passes::ledger::summary;
use std::io::{self, Write};

fn dist_text(title: &str, dp: &DistProgram) -> String {
    format!(
        "== {title}\nmesh {}\n\n{}",
        dp.mesh,
        attrs_text(&dp.program, &dp.mesh, &dp.tensors, &dp.ops)
    )
}

/// Writes each rank's program as it goes (a mesh of any size is printed without holding
/// every rank's text), then the groups.
fn write_ranks(w: &mut impl Write, p: &Passes, rank: Option<u32>) -> io::Result<()> {
    for r in p
        .partitioned
        .ranks
        .iter()
        .filter(|r| rank.is_none_or(|x| x == r.rank))
    {
        writeln!(w, "== rank {}\n{}", r.rank, r.program)?;
    }
    writeln!(w, "== communication groups (ring id: ranks)")?;
    for (i, g) in &p.partitioned.groups.rings {
        writeln!(w, "  ring {i}: {g:?}")?;
    }
    write_schedule(w, p)
}

/// The jobs each pipeline stage runs in one step, in order (what `--schedule` decides).
fn write_schedule(w: &mut impl Write, p: &Passes) -> io::Result<()> {
    if !p.is_pipelined() {
        return Ok(());
    }
    let schedule = p.schedule();
    let (stages, micro_batches) = (p.stages.stages, p.micro_batches());
    writeln!(
        w,
        "== schedule {}: {micro_batches} micro-batches (the jobs each stage runs, in order)",
        schedule.name()
    )?;
    for stage in 0..stages {
        let jobs =
            crate::passes::pipeline::schedule::job_list(schedule, stages, stage, micro_batches)
                .map_err(|e| io::Error::other(e.to_string()))?;
        let jobs: Vec<String> = jobs.iter().map(ToString::to_string).collect();
        writeln!(w, "  stage {stage}: {}", jobs.join(" "))?;
    }
    Ok(())
}

/// Writes the stage(s) asked for, as text.
pub fn write_pipeline_text(
    w: &mut impl Write,
    p: &Passes,
    stage: Option<Stage>,
    rank: Option<u32>,
    ledger: bool,
) -> io::Result<()> {
    let shows = |part: Stage| stage.is_some_and(|s| s.shows(part));
    if shows(Stage::Complete) {
        writeln!(
            w,
            "== complete\n{}",
            completed_text(&p.plan.program, &p.completed)
        )?;
    }
    if shows(Stage::Backward) {
        writeln!(w, "{}", dist_text("backward", &p.backward_dist()))?;
    }
    if shows(Stage::Optimizer) {
        writeln!(w, "{}", dist_text("optimizer", &p.full))?;
    }
    if shows(Stage::Partition) {
        write_ranks(w, p, rank)?;
    }
    if ledger {
        for r in p
            .partitioned
            .ranks
            .iter()
            .filter(|r| rank.is_none_or(|x| x == r.rank))
        {
            w.write_all(summary(&p.ledger, r.rank).as_bytes())?;
        }
        writeln!(w, "collectives:")?;
        for e in p.ledger.iter().filter(|e| rank.is_none_or(|x| x == e.rank)) {
            writeln!(
                w,
                "  rank {} op{} {} {} group {:?} {}: {:.0} bytes ({}; {})",
                e.rank,
                e.op_index,
                e.phase,
                e.kind,
                e.group,
                e.tensor,
                e.bytes_per_rank,
                e.purpose.name(),
                e.reason
            )?;
        }
    }
    Ok(())
}
