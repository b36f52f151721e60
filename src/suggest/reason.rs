//! The one line that says why the winner beats the runner-up, derived from their cost terms:
//! the term that saves the most time decides, and the plans are named by what differs.

use super::evaluate::{Problem, Terms};
use super::report::{describe_difference, human_seconds};
use super::space::{Axis, Candidate, MeshShape};
use super::Row;
use crate::cost::device::Topology;
use crate::ir::Purpose;

/// The mesh axis a purpose's collectives run along.
fn axis_of(purpose: Purpose) -> Option<Axis> {
    match purpose {
        Purpose::TensorParallel => Some(Axis::Mp),
        Purpose::DataParallel | Purpose::Sharding => Some(Axis::Dp),
        Purpose::Pipeline | Purpose::TiedParameter => Some(Axis::Pp),
        Purpose::Reshard | Purpose::AmpFlag | Purpose::GlobalNorm | Purpose::ContextParallel => {
            None
        }
    }
}

/// The link a group along `axis` of `mesh` (ranks numbered in its axis order, rank r on
/// device r) runs over, and whether the group stays inside one block of it.
pub fn axis_link(topo: &Topology, mesh: &MeshShape, axis: Axis) -> Option<&'static str> {
    let mut stride = 1;
    for &(a, n) in mesh.axes.iter().rev() {
        if a == axis {
            let group: Vec<u32> = (0..n).map(|k| (k * stride) as u32).collect();
            return topo.link_for(&group).ok().map(|c| c.name);
        }
        stride *= n;
    }
    None
}

/// The collective family a purpose runs, in words.
fn collectives(purpose: Purpose) -> &'static str {
    match purpose {
        Purpose::TensorParallel => "tensor-parallel all-reduces",
        Purpose::DataParallel => "data-parallel gradient all-reduces",
        Purpose::Sharding => "ZeRO reduce-scatters and all-gathers",
        Purpose::Pipeline => "pipeline sends",
        Purpose::Reshard => "reshards",
        Purpose::AmpFlag => "AMP flag all-reduces",
        Purpose::GlobalNorm => "global-norm all-reduces",
        Purpose::TiedParameter => "tied-parameter all-reduces",
        Purpose::ContextParallel => "ring attention's K/V passes",
    }
}

/// The largest communication term of a row, described with its axis degree and link.
fn main_comm(topo: &Topology, row: &Row) -> String {
    let Some(&(purpose, s)) = row.terms.comm_s.iter().max_by(|a, b| a.1.total_cmp(&b.1)) else {
        return "no communication".into();
    };
    let mut out = format!("{} {}", collectives(purpose), human_seconds(s));
    if let (Some(axis), Some(c)) = (axis_of(purpose), &row.candidate) {
        let n = c.mesh.size(axis);
        out.push_str(&format!(" over {}={n}", axis.name()));
        if let Some(link) = axis_link(topo, &c.mesh, axis) {
            out.push_str(&format!(" on {link}"));
        }
    }
    out
}

/// The terms that can decide, with their values for the winner and the other plan.
fn term_pairs(w: &Terms, r: &Terms) -> [(&'static str, f64, f64); 3] {
    [
        ("communication", w.comm_total(), r.comm_total()),
        ("compute", w.compute_s, r.compute_s),
        ("pipeline bubble and waiting", w.bubble_s, r.bubble_s),
    ]
}

fn times(a: f64, b: f64) -> String {
    if a <= 0.0 {
        "none of the".into()
    } else {
        format!("{:.1}× less", b / a)
    }
}

/// Why `w` beats `r`, from their terms.
pub fn compare(problem: &Problem, w: &Row, r: &Row, other: &str) -> String {
    let model = problem.model;
    let (wd, rd) = match (&w.candidate, &r.candidate) {
        (Some(a), Some(b)) => describe_difference(model, a, b),
        (Some(a), None) => (super::report::describe(model, a), other.to_string()),
        (None, Some(b)) => (other.to_string(), super::report::describe(model, b)),
        (None, None) => (other.to_string(), other.to_string()),
    };
    let (tw, tr) = (w.terms.step_s, r.terms.step_s);
    if tr <= tw * (1.0 + 5e-4) {
        return format!(
            "{wd} ties {rd} at {} per step; the plainer plan is listed first (fewer mesh axes, \
             a lower ZeRO stage, fewer micro-batches, no recomputation).",
            human_seconds(tw)
        );
    }
    let pairs = term_pairs(&w.terms, &r.terms);
    let decisive = pairs
        .iter()
        .max_by(|a, b| (a.2 - a.1).total_cmp(&(b.2 - b.1)))
        .copied();
    let mut line = format!(
        "{wd} beats {rd}: {} against {} per step ({:.2}× faster)",
        human_seconds(tw),
        human_seconds(tr),
        tr / tw.max(f64::MIN_POSITIVE)
    );
    if let Some((name, a, b)) = decisive.filter(|(_, a, b)| b > a) {
        line.push_str(&format!(
            ", from {} {name} ({} against {})",
            times(a, b),
            human_seconds(a),
            human_seconds(b)
        ));
        if name == "communication" {
            line.push_str(&format!(
                ": {} against {}",
                main_comm(&problem.topology, w),
                main_comm(&problem.topology, r)
            ));
        }
    }
    let worse = pairs
        .iter()
        .filter(|(_, a, b)| a - b > 0.01 * tw)
        .max_by(|x, y| (x.1 - x.2).total_cmp(&(y.1 - y.2)));
    if let Some((name, a, b)) = worse {
        line.push_str(&format!(", despite {} more {name}", human_seconds(a - b)));
    }
    line.push('.');
    line
}

/// The reason line: the winner against the runner-up, and the user's plan if it lost.
pub fn reason(problem: &Problem, winner: &Row, runner: Option<&Row>, mine: Option<&Row>) -> String {
    let mut out = match runner {
        Some(r) => compare(problem, winner, r, "the runner-up"),
        None => "The only candidate that fits the memory budget.".to_string(),
    };
    if let Some(m) = mine {
        if m.terms.step_s > winner.terms.step_s {
            out.push_str(" Against your plan: ");
            out.push_str(&compare(problem, winner, m, "your plan"));
        } else {
            out.push_str(" Your plan is as fast as the winner.");
        }
    }
    out
}

/// Whether a candidate keeps its tensor-parallel groups inside one block of the
/// topology's innermost link (a node).
pub fn tensor_parallel_inside_node(topo: &Topology, c: &Candidate) -> bool {
    let inner = topo.links.first().map(|l| l.name);
    c.mesh.size(Axis::Mp) == 1 || axis_link(topo, &c.mesh, Axis::Mp) == inner
}
