//! The search's answer as text (a table) and as one JSON document.

use super::space::{Axis, Candidate};
use super::{Row, Suggestion};
use crate::models::Model;
use crate::plan::Recompute;
use serde_json::{json, Value};

pub use crate::cost::diff::{human_bytes, human_seconds};

/// The schedule column: `8 × 1f1b`, or `4 micro` without a pipeline, or `-`.
fn schedule(c: &Candidate) -> String {
    match (c.mesh.size(Axis::Pp) > 1, c.micro_batches) {
        (true, m) => format!("{m}×{}", c.schedule.name()),
        (false, 1) => "-".into(),
        (false, m) => format!("{m} micro"),
    }
}

/// The fields of a candidate in words, in table order.
fn fields(model: Model, c: &Candidate) -> Vec<(&'static str, String)> {
    let mut out = vec![("mesh", c.mesh.spec()), ("strategy", c.strategy(model))];
    out.push(("zero", format!("ZeRO {}", c.zero)));
    if c.mesh.size(Axis::Pp) > 1 {
        out.push((
            "schedule",
            format!("{} micro-batches {}", c.micro_batches, c.schedule.name()),
        ));
    } else if c.micro_batches > 1 {
        out.push(("schedule", format!("{} micro-batches", c.micro_batches)));
    }
    if c.recompute != Recompute::Off {
        out.push(("recompute", format!("recompute {}", c.recompute.name())));
    }
    out
}

/// A candidate in words: `mesh 4x8:dp,mp, blocks megatron, ZeRO 1`.
pub fn describe(model: Model, c: &Candidate) -> String {
    let f = fields(model, c);
    let mut parts: Vec<String> = vec![format!("mesh {}", c.mesh.spec())];
    parts.extend(f.into_iter().skip(1).map(|(_, v)| v));
    parts.join(", ")
}

/// Two candidates named by what differs between them (the mesh always).
pub fn describe_difference(model: Model, a: &Candidate, b: &Candidate) -> (String, String) {
    let (fa, fb) = (fields(model, a), fields(model, b));
    let pick = |f: &[(&'static str, String)], g: &[(&'static str, String)]| -> String {
        let mut parts = Vec::new();
        for (k, v) in f {
            let other = g.iter().find(|(k2, _)| k2 == k).map(|(_, v)| v);
            if *k == "mesh" {
                parts.push(format!("mesh {v}"));
            } else if other != Some(v) {
                parts.push(v.clone());
            }
        }
        // A field the other has and this one lacks (no recomputation, say).
        for (k, _) in g {
            if !f.iter().any(|(k2, _)| k2 == k) {
                parts.push(match *k {
                    "recompute" => "no recomputation".into(),
                    "schedule" => "1 micro-batch".into(),
                    other => format!("no {other}"),
                });
            }
        }
        parts.join(", ")
    };
    (pick(&fa, &fb), pick(&fb, &fa))
}

fn comm_cell(r: &Row) -> String {
    human_seconds(r.terms.comm_total())
}

/// The table, the reason and the winner's plan summary, as the CLI prints them.
pub fn text(s: &Suggestion, model: Model, topology: &str, budget: f64) -> String {
    let mut out = format!(
        "suggest on {topology} ({} devices), memory budget {} per device: {} families planned \
         ({} escalated for memory, {} cut by the bound, {} refused; {} ZeRO 2-3 skipped \
         as a lower stage fits), {} candidates screened ({} over budget), {} priced exactly\n\n",
        s.plan.mesh().map_or(1, |m| m.size()),
        human_bytes(budget),
        s.stats.families,
        s.stats.escalations,
        s.stats.bounded,
        s.stats.refused,
        s.stats.dominated,
        s.stats.screened,
        s.stats.over_budget,
        s.stats.exact
    );
    out.push_str(&format!(
        "{:>2}  {:<16} {:<40} {:<6} {:<12} {:<10} {:>10} {:>10} {:>10} {:>10} {:>11}\n",
        "#",
        "mesh",
        "strategy",
        "zero",
        "schedule",
        "recompute",
        "compute",
        "comm",
        "bubble",
        "peak mem",
        "step"
    ));
    let row = |i: String,
               r: &Row,
               mesh: String,
               strategy: String,
               zero: String,
               sched: String,
               rc: String| {
        format!(
            "{i:>2}  {mesh:<16} {strategy:<40} {zero:<6} {sched:<12} {rc:<10} {:>10} {:>10} {:>10} {:>10} {:>11}\n",
            human_seconds(r.terms.compute_s),
            comm_cell(r),
            human_seconds(r.terms.bubble_s),
            human_bytes(r.terms.peak_bytes),
            human_seconds(r.terms.step_s)
        )
    };
    for (i, r) in s.table.iter().enumerate() {
        if let Some(c) = &r.candidate {
            out.push_str(&row(
                (i + 1).to_string(),
                r,
                c.mesh.spec(),
                c.strategy(model),
                c.zero.to_string(),
                schedule(c),
                c.recompute.name().to_string(),
            ));
        }
    }
    if let Some(m) = &s.mine {
        let fits = if m.fits { "" } else { " (over budget)" };
        out.push_str(&row(
            "*".into(),
            m,
            "your plan".into(),
            format!("as written{fits}"),
            "".into(),
            "".into(),
            "".into(),
        ));
    }
    out.push_str(&format!("\nwhy: {}\n", s.reason));
    out
}

/// A row as JSON.
pub fn row_json(model: Model, r: &Row) -> Value {
    let comm: serde_json::Map<String, Value> = r
        .terms
        .comm_s
        .iter()
        .map(|(p, s)| (p.name().to_string(), json!(s)))
        .collect();
    let mut v = json!({
        "compute_s": r.terms.compute_s,
        "comm_s": r.terms.comm_total(),
        "comm_by_purpose_s": comm,
        "bubble_s": r.terms.bubble_s,
        "peak_memory_bytes": r.terms.peak_bytes,
        "step_time_s": r.terms.step_s,
        "fits": r.fits,
    });
    if let Some(c) = &r.candidate {
        v["mesh"] = json!(c.mesh.spec());
        v["strategy"] = json!(c.strategy(model));
        v["vocab_parallel"] = json!(c.vocab_parallel);
        v["megatron_sums"] = json!(c.megatron_sums);
        v["zero"] = json!(c.zero);
        v["micro_batches"] = json!(c.micro_batches);
        v["schedule"] = json!(c.schedule.name());
        v["recompute"] = json!(c.recompute.name());
    }
    v
}

/// The answer as one JSON document (the shells add `schema_version`).
pub fn json(s: &Suggestion, model: Model, topology: &str, budget: f64) -> Value {
    json!({
        "plan": s.plan.to_string(),
        "step_time_s": s.winner.terms.step_s,
        "topology": topology,
        "devices": s.plan.mesh().map_or(1, |m| m.size()),
        "memory_budget_bytes": budget,
        "winner": row_json(model, &s.winner),
        "candidates": s.table.iter().map(|r| row_json(model, r)).collect::<Vec<_>>(),
        "mine": s.mine.as_ref().map(|r| row_json(model, r)),
        "reason": s.reason,
        "searched": {
            "families": s.stats.families,
            "candidates": s.stats.screened,
            "escalations": s.stats.escalations,
            "over_budget": s.stats.over_budget,
            "refused": s.stats.refused,
            "first_refusal": s.stats.first_refusal,
            "priced_exactly": s.stats.exact,
            "bounded": s.stats.bounded,
            "replanned_afresh": s.stats.replanned_afresh,
            "priced_ahead": s.stats.priced_ahead,
            "zero_dominated": s.stats.dominated,
        },
        "solver": "exhaustive enumeration of a pruned space with the cost model; depth extrapolated while screening, the finalists priced exactly",
    })
}
