//! What changes between two plans: the tensors laid out differently, the collectives added
//! and removed per phase, and the bytes, peak memory and step time, each with its delta
//! (`shardlab diff`, and the playground's pinned-plan comparison).

use super::estimate::Estimate;
use crate::passes::complete::shard_text;
use crate::passes::driver::Passes;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt;

/// A tensor whose layout differs (`None`: the plan has no such tensor).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LayoutChange {
    pub tensor: String,
    pub a: Option<String>,
    pub b: Option<String>,
}

/// How many collectives of one kind a phase runs, over all ranks, in each plan.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CollectiveCount {
    pub phase: std::borrow::Cow<'static, str>,
    pub op: std::borrow::Cow<'static, str>,
    pub a: usize,
    pub b: usize,
}

/// A number in both plans.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Pair {
    pub a: f64,
    pub b: f64,
}

impl Pair {
    pub fn delta(&self) -> f64 {
        self.b - self.a
    }

    fn json(&self) -> Value {
        json!({"a": self.a, "b": self.b, "delta": self.delta()})
    }
}

/// Two plans compared.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PlanDiff {
    /// Tensors (of forward, backward and optimizer) by name, in the first plan's order then
    /// the second's.
    pub layouts: Vec<LayoutChange>,
    /// Every (phase, collective) either plan runs, with its counts.
    pub collectives: Vec<CollectiveCount>,
    /// Bytes sent by all ranks (the ledger's ring model).
    pub bytes: Pair,
    pub step_time_s: Pair,
    /// The largest peak over the ranks.
    pub peak_memory: Pair,
    /// Per rank both plans have: its peak memory.
    pub rank_peaks: Vec<(u32, Pair)>,
}

fn layouts(p: &Passes) -> Vec<(String, String)> {
    p.full
        .program
        .vars()
        .iter()
        .zip(&p.full.tensors)
        .map(|(v, attr)| (v.name.to_string(), shard_text(attr, &p.full.mesh)))
        .collect()
}

fn collective_counts(p: &Passes) -> BTreeMap<(&'static str, &'static str), usize> {
    let mut counts = BTreeMap::new();
    for e in &p.ledger {
        *counts.entry((e.phase, e.kind)).or_insert(0) += 1;
    }
    counts
}

/// Compares plan `a` (planned as `pa`, costed as `ea`) with plan `b`.
pub fn diff(pa: &Passes, ea: &Estimate, pb: &Passes, eb: &Estimate) -> PlanDiff {
    let (la, lb) = (layouts(pa), layouts(pb));
    let b_by_name: BTreeMap<&str, &str> =
        lb.iter().map(|(n, l)| (n.as_str(), l.as_str())).collect();
    let a_names: std::collections::HashSet<&str> = la.iter().map(|(n, _)| n.as_str()).collect();
    let mut changes: Vec<LayoutChange> = la
        .iter()
        .filter(|(n, l)| b_by_name.get(n.as_str()) != Some(&l.as_str()))
        .map(|(n, l)| LayoutChange {
            tensor: n.clone(),
            a: Some(l.clone()),
            b: b_by_name.get(n.as_str()).map(|s| s.to_string()),
        })
        .collect();
    changes.extend(
        lb.iter()
            .filter(|(n, _)| !a_names.contains(n.as_str()))
            .map(|(n, l)| LayoutChange {
                tensor: n.clone(),
                a: None,
                b: Some(l.clone()),
            }),
    );
    let (ca, cb) = (collective_counts(pa), collective_counts(pb));
    let mut keys: Vec<_> = ca.keys().chain(cb.keys()).copied().collect();
    crate::sort::sort_by_key(&mut keys, |&(phase, op)| (phase_order(phase), op));
    keys.dedup();
    let collectives = keys
        .into_iter()
        .map(|k| CollectiveCount {
            phase: k.0.into(),
            op: k.1.into(),
            a: ca.get(&k).copied().unwrap_or(0),
            b: cb.get(&k).copied().unwrap_or(0),
        })
        .collect();
    let bytes = |p: &Passes| p.ledger.iter().map(|e| e.bytes_per_rank).sum::<f64>();
    let peak = |e: &Estimate| e.memory.iter().map(|m| m.peak).fold(0.0, f64::max);
    let peaks_b: BTreeMap<u32, f64> = eb
        .step
        .ranks
        .iter()
        .zip(&eb.memory)
        .map(|(r, m)| (r.rank, m.peak))
        .collect();
    let rank_peaks = ea
        .step
        .ranks
        .iter()
        .zip(&ea.memory)
        .filter_map(|(r, m)| {
            let b = *peaks_b.get(&r.rank)?;
            Some((r.rank, Pair { a: m.peak, b }))
        })
        .collect();
    PlanDiff {
        layouts: changes,
        collectives,
        bytes: Pair {
            a: bytes(pa),
            b: bytes(pb),
        },
        step_time_s: Pair {
            a: ea.step_s(),
            b: eb.step_s(),
        },
        peak_memory: Pair {
            a: peak(ea),
            b: peak(eb),
        },
        rank_peaks,
    }
}

fn phase_order(phase: &str) -> usize {
    ["forward", "backward", "optimizer"]
        .iter()
        .position(|&p| p == phase)
        .unwrap_or(3)
}

impl PlanDiff {
    /// Whether the plans differ in any layout or collective count.
    pub fn differs(&self) -> bool {
        !self.layouts.is_empty() || self.collectives.iter().any(|c| c.a != c.b)
    }

    /// The diff as one JSON value (the shells add `schema_version`).
    pub fn json(&self) -> Value {
        json!({
            "differs": self.differs(),
            "layouts": self.layouts.iter().map(|c| json!({"tensor": c.tensor, "a": c.a, "b": c.b})).collect::<Vec<_>>(),
            "collectives": self.collectives.iter().map(|c| json!({
                "phase": c.phase, "op": c.op, "a": c.a, "b": c.b,
                "delta": c.b as i64 - c.a as i64,
            })).collect::<Vec<_>>(),
            "bytes": self.bytes.json(),
            "step_time_s": self.step_time_s.json(),
            "peak_memory_bytes": {
                "max": self.peak_memory.json(),
                "ranks": self.rank_peaks.iter().map(|(r, p)| {
                    let mut v = p.json();
                    v["rank"] = json!(r);
                    v
                }).collect::<Vec<_>>(),
            },
        })
    }
}

/// `12.3MB`, `4.0KB`, `512B`.
pub fn human_bytes(b: f64) -> String {
    let a = b.abs();
    if a >= 1e9 {
        format!("{:.2}GB", b / 1e9)
    } else if a >= 1e6 {
        format!("{:.2}MB", b / 1e6)
    } else if a >= 1e3 {
        format!("{:.1}KB", b / 1e3)
    } else {
        format!("{b:.0}B")
    }
}

/// `1.234ms`, `56.7us`, `2.50s`.
pub fn human_seconds(s: f64) -> String {
    let a = s.abs();
    if a >= 1.0 {
        format!("{s:.2}s")
    } else if a >= 1e-3 {
        format!("{:.3}ms", s * 1e3)
    } else {
        format!("{:.1}us", s * 1e6)
    }
}

fn signed(s: String) -> String {
    if s.starts_with('-') {
        s
    } else {
        format!("+{s}")
    }
}

fn percent(p: &Pair) -> String {
    if p.a == 0.0 {
        String::new()
    } else {
        format!(", {:+.1}%", 100.0 * p.delta() / p.a)
    }
}

impl fmt::Display for PlanDiff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.layouts.is_empty() {
            writeln!(f, "layouts: the same")?;
        } else {
            writeln!(f, "layouts ({} tensors differ):", self.layouts.len())?;
            let w = self
                .layouts
                .iter()
                .map(|c| c.tensor.len())
                .max()
                .unwrap_or(0);
            let side = |s: &Option<String>| s.clone().unwrap_or_else(|| "(absent)".into());
            for c in &self.layouts {
                writeln!(f, "  {:<w$}  {}  ->  {}", c.tensor, side(&c.a), side(&c.b))?;
            }
        }
        writeln!(f, "collectives (all ranks):")?;
        writeln!(
            f,
            "  {:<10} {:<30} {:>7} {:>7} {:>7}",
            "phase", "op", "a", "b", "delta"
        )?;
        for c in &self.collectives {
            let delta = c.b as i64 - c.a as i64;
            writeln!(
                f,
                "  {:<10} {:<30} {:>7} {:>7} {:>+7}",
                c.phase, c.op, c.a, c.b, delta
            )?;
        }
        let row = |f: &mut fmt::Formatter<'_>, name: &str, p: &Pair, h: fn(f64) -> String| {
            writeln!(
                f,
                "{name:<24} {} -> {} ({}{})",
                h(p.a),
                h(p.b),
                signed(h(p.delta())),
                percent(p)
            )
        };
        row(f, "bytes sent (all ranks)", &self.bytes, human_bytes)?;
        row(f, "step time", &self.step_time_s, human_seconds)?;
        row(f, "peak memory (max rank)", &self.peak_memory, human_bytes)?;
        for (r, p) in &self.rank_peaks {
            row(f, &format!("  rank {r}"), p, human_bytes)?;
        }
        Ok(())
    }
}
