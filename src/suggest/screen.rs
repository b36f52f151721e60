//! Screening: each family planned at one and two blocks per stage, its orders and
//! schedules priced and extrapolated to the full depth, escalated while over the memory
//! budget, and dropped early when a lower bound shows it cannot reach the finalists.

use super::evaluate::{extrapolate, layered, layers_per_stage, Planned, Point, Problem, Terms};
use super::space::{self, Axis, Family};
use super::Refusal;
use super::{Screened, Stats};
use std::collections::HashMap;

/// An order × schedule's point at one depth, with its terms when the depth is the full one.
type AtDepth = (Point, Option<Terms>);

/// Screens families against a fixed threshold (one per thread).
pub(super) struct Screener<'a> {
    pub problem: &'a Problem,
    /// The step time a family must beat to reach the finalists.
    pub threshold: f64,
    /// The leader's plan shape (canonical mesh, vocab parallel) and the step time a family
    /// of another shape must beat to be the runner-up the reason compares with.
    pub other: Option<(super::Shape, f64)>,
    pub stats: Stats,
    /// Recent plannings, by family without ZeRO stage and micro-batch count, and depth: the
    /// search screens those of a family one after another, and they share all but the
    /// partition and the batch's size (`Planned::replan`).
    pub recent: Vec<Recent>,
}

/// A recent planning: the family it is keyed by (`recent_key`), its depth, the planning.
pub(super) type Recent = (Family, usize, Planned);

/// How many plannings a screener keeps: the two depths of the micro-batch counts and
/// recomputation modes one ZeRO stage's escalation tried, which the next stage's
/// bisection mostly tries again.
const RECENT: usize = 16;

impl Screener<'_> {
    fn refuse(&mut self, why: Refusal, count: usize) {
        self.stats.refused += count;
        if self.stats.first_refusal.is_none() {
            self.stats.first_refusal = Some(why.to_string());
        }
    }

    /// Screens a family. If all of it exceeds the memory budget it escalates: the cheapest
    /// recomputation mode, then the fewest micro-batches (without a pipeline), that fit
    /// (memory falls as either rises, so the fewest micro-batches are found by bisection).
    pub(super) fn screen(&mut self, family: Family) -> Vec<Screened> {
        let Some(first) = self.screen_family(&family) else {
            return Vec::new();
        };
        if family.mesh.size(Axis::Pp) > 1 {
            return self.escalate_schedules(&family, first);
        }
        if self.fits(&first) {
            return first;
        }
        let escalated = self.escalate(&family);
        if escalated.is_empty() {
            first
        } else {
            escalated
        }
    }

    /// A pipelined family escalated schedule by schedule: a schedule none of whose orders
    /// fit is tried with the next recomputation mode (the micro-batch count is the
    /// family's), and keeps the points of the first mode that fits.
    fn escalate_schedules(&mut self, f: &Family, first: Vec<Screened>) -> Vec<Screened> {
        let budget = self.problem.budget_bytes;
        let unfit = |points: &[Screened], s: crate::plan::ScheduleKind| {
            !points
                .iter()
                .any(|p| p.candidate.schedule == s && p.point.peak_bytes <= budget)
        };
        let mut waiting: Vec<crate::plan::ScheduleKind> = space::schedules(f, true)
            .into_iter()
            .filter(|&s| unfit(&first, s))
            .collect();
        let (mut last, mut out): (Vec<Screened>, Vec<Screened>) = first
            .into_iter()
            .partition(|p| waiting.contains(&p.candidate.schedule));
        let modes = if space::recomputes(self.problem.model) {
            &space::RECOMPUTE_LADDER[..]
        } else {
            &[]
        };
        let from = modes
            .iter()
            .position(|&r| r == f.recompute)
            .map_or(modes.len(), |i| i + 1);
        for &recompute in &modes[from..] {
            if waiting.is_empty() {
                break;
            }
            self.stats.escalations += 1;
            let Some(points) = self.screen_family(&Family {
                recompute,
                ..f.clone()
            }) else {
                break;
            };
            let fitted: Vec<_> = waiting
                .iter()
                .copied()
                .filter(|&s| !unfit(&points, s))
                .collect();
            waiting.retain(|s| !fitted.contains(s));
            last = points
                .iter()
                .filter(|p| waiting.contains(&p.candidate.schedule))
                .cloned()
                .collect();
            out.extend(
                points
                    .into_iter()
                    .filter(|p| fitted.contains(&p.candidate.schedule)),
            );
        }
        // Schedules that never fit keep their last (most economical) points, over budget.
        out.extend(last);
        out
    }

    fn fits(&self, points: &[Screened]) -> bool {
        points
            .iter()
            .any(|s| s.point.peak_bytes <= self.problem.budget_bytes)
    }

    /// One family screened (`None`: refused or bounded out, counted).
    fn screen_family(&mut self, family: &Family) -> Option<Vec<Screened>> {
        self.stats.families += 1;
        match self.screen_points(family) {
            Ok(p) => p,
            Err(e) => {
                let n = space::axis_orders(family).len();
                self.refuse(e, n);
                None
            }
        }
    }

    /// A family without a pipeline that exceeds the budget, escalated: for each
    /// recomputation mode, the fewest micro-batches that fit (memory falls as either
    /// rises, so by bisection). Neither dominates the other, so each mode's answer is kept;
    /// a mode is only searched below the micro-batches an earlier mode needed (with as many
    /// or more it would be slower). A point cut by the bound cuts the larger counts too.
    fn escalate(&mut self, f: &Family) -> Vec<Screened> {
        let ladder = space::micro_batch_ladder(self.problem.config.batch, f.mesh.size(Axis::Dp), 1);
        let modes: &[crate::plan::Recompute] = if space::recomputes(self.problem.model) {
            &space::RECOMPUTE_LADDER
        } else {
            &[crate::plan::Recompute::Off]
        };
        let mut out = Vec::new();
        let mut limit = ladder.len();
        for &recompute in modes {
            if limit == 0 {
                break;
            }
            let at = |i: usize| Family {
                micro_batches: ladder[i],
                recompute,
                ..f.clone()
            };
            // Bisect for the fewest micro-batches that fit. A probe answers fits (`true`),
            // over budget (`false`) or cut by the bound (`None`: it and larger counts
            // cannot reach the finalists, so they count as "stop looking higher").
            let mut seen: Vec<(usize, Option<bool>)> = Vec::new();
            let mut best: Option<(usize, Vec<Screened>)> = None;
            let mut probe = |this: &mut Self, i: usize| -> Option<bool> {
                if let Some(&(_, r)) = seen.iter().find(|(j, _)| *j == i) {
                    return r;
                }
                let fam = at(i);
                let r = if fam == *f {
                    Some(false)
                } else {
                    this.stats.escalations += 1;
                    this.screen_family(&fam).map(|points| {
                        let fits = this.fits(&points);
                        if fits && best.as_ref().is_none_or(|(b, _)| i < *b) {
                            best = Some((i, points));
                        }
                        fits
                    })
                };
                seen.push((i, r));
                r
            };
            let (mut lo, mut hi) = (0, limit - 1);
            if probe(self, hi) == Some(false) {
                continue;
            }
            while lo < hi {
                let mid = (lo + hi) / 2;
                match probe(self, mid) {
                    Some(false) => lo = mid + 1,
                    Some(true) | None => hi = mid,
                }
            }
            probe(self, hi);
            if let Some((i, points)) = best {
                out.extend(points);
                limit = i;
            }
        }
        out
    }

    /// The planning of `family` at `layers` blocks: a recent one of another ZeRO stage or
    /// micro-batch count re-planned for it (`Planned::replan`), or a new one.
    fn planned(
        &mut self,
        family: &Family,
        layers: usize,
        orders: &[space::MeshShape],
    ) -> Result<Planned, Refusal> {
        let key = recent_key(family);
        let found = self
            .recent
            .iter()
            .position(|(k, l, _)| *k == key && *l == layers);
        if let Some(i) = found {
            let (_, _, mut planned) = self.recent.remove(i);
            if planned.replan(self.problem, family, layers).is_ok() {
                return Ok(planned);
            }
            // Not re-plannable (`passes::pipeline::rebatch` refuses where it could be inexact).
            self.stats.replanned_afresh += 1;
        }
        Planned::new(self.problem, family, layers, orders)
    }

    /// Keeps a planning for the family's next ZeRO stage or micro-batch count.
    fn keep_recent(&mut self, family: &Family, layers: usize, planned: Planned) {
        let key = recent_key(family);
        if self.recent.len() >= RECENT {
            self.recent.remove(0);
        }
        self.recent.push((key, layers, planned));
    }

    /// Every order × schedule of a planning at `d` blocks per stage, with the family's
    /// lower bound from it (infinite when this depth gives none).
    fn price_at_depth(
        &mut self,
        planned: &mut Planned,
        d: usize,
        per_stage: usize,
        orders: &[space::MeshShape],
        schedules: &[crate::plan::ScheduleKind],
    ) -> (HashMap<(usize, usize), AtDepth>, f64) {
        let mut points = HashMap::new();
        let mut bound = f64::INFINITY;
        if d == per_stage {
            // The full depth: exact, and the bound is the step itself.
            for (o, s, e) in planned.exact_points(self.problem, orders, schedules) {
                match e {
                    Ok((point, terms)) => {
                        bound = bound.min(point.step_s);
                        points.insert((o, s), (point, Some(terms)));
                    }
                    Err(e) => self.refuse(e, 1),
                }
            }
        } else {
            for (o, s, e) in planned.points(self.problem, orders, schedules, per_stage) {
                match e {
                    Ok((point, lower)) => {
                        // The bound is taken from one block per stage (what `lower_bound`
                        // reads).
                        if d == 1 {
                            bound = bound.min(lower);
                        }
                        points.insert((o, s), (point, None));
                    }
                    Err(e) => self.refuse(e, 1),
                }
            }
        }
        (points, bound)
    }

    /// Every order and schedule of a family, at the full depth (exact) or extrapolated.
    fn screen_points(&mut self, family: &Family) -> Result<Option<Vec<Screened>>, Refusal> {
        let per_stage = layers_per_stage(self.problem, family);
        let pp = family.mesh.size(Axis::Pp);
        let mut depths = depths(self.problem, family, self.threshold);
        // A recent planning at the full depth is re-planned there at once: that costs less
        // than planning one block afresh to bound it first, and is exact.
        let key = recent_key(family);
        let full = per_stage * pp.max(1);
        if depths.len() > 1 && self.recent.iter().any(|(k, l, _)| *k == key && *l == full) {
            depths = vec![per_stage];
        }
        let mut at_depth: Vec<HashMap<(usize, usize), AtDepth>> = Vec::new();
        let orders = space::axis_orders(family);
        let schedules = space::schedules(family, true);
        for &d in &depths {
            let mut planned = self.planned(family, d * pp, &orders)?;
            let (points, bound) =
                self.price_at_depth(&mut planned, d, per_stage, &orders, &schedules);
            self.keep_recent(family, d * pp, planned);
            at_depth.push(points);
            if bound.is_infinite() {
                continue;
            }
            // Bounded out: no order or schedule of this family (nor its escalations, which
            // are never faster) can reach the finalists.
            let runner_up = self.other.as_ref().is_some_and(|(leader, t)| {
                super::shape_of(
                    &family.candidate(family.mesh.clone(), crate::plan::ScheduleKind::FThenB),
                ) != *leader
                    && bound <= *t
            });
            if bound > self.threshold && !runner_up {
                self.stats.bounded += 1;
                return Ok(None);
            }
        }
        let mut out = Vec::new();
        for (o, order) in orders.iter().enumerate() {
            for (s, &schedule) in schedules.iter().enumerate() {
                let found: Vec<&AtDepth> = at_depth.iter().filter_map(|d| d.get(&(o, s))).collect();
                if found.len() < at_depth.len() {
                    continue; // refused at some depth
                }
                let (point, exact) = match found.as_slice() {
                    // Priced at the full depth: exact.
                    [.., (p, Some(terms))] => (*p, Some(terms.clone())),
                    [(a, None), (b, None)] => (extrapolate(*a, 1, *b, 2, per_stage), None),
                    [(p, None)] => (*p, None),
                    _ => continue,
                };
                self.stats.screened += 1;
                out.push(Screened {
                    family: family.clone(),
                    candidate: family.candidate(order.clone(), schedule),
                    point,
                    exact,
                });
            }
        }
        Ok(Some(out))
    }
}

/// What a family shares a planning with: the families that differ from it only in ZeRO
/// stage and micro-batch count.
pub(super) fn recent_key(family: &Family) -> Family {
    Family {
        zero: 0,
        micro_batches: 0,
        ..family.clone()
    }
}

/// The blocks per stage a family is screened at. One block per stage first: its bound
/// drops most families cheaply. The survivors are priced at two blocks and extrapolated,
/// except with three blocks per stage: then the full depth costs one block more than two,
/// is exact, and spares the finalists a second planning; and before any threshold exists
/// (nothing can be bounded yet) it is priced at once.
pub(super) fn depths(problem: &Problem, family: &Family, threshold: f64) -> Vec<usize> {
    let per_stage = layers_per_stage(problem, family);
    match per_stage {
        _ if !layered(problem.model) => vec![per_stage],
        0..=2 => vec![per_stage],
        3 if threshold.is_infinite() => vec![3],
        3 => vec![1, 3],
        _ => vec![1, 2],
    }
}

/// About how much work screening a unit (a family's ZeRO stages) takes, in blocks planned:
/// its depths times its stages, the ZeRO stages after the first at half (they redo only
/// the partition). Workers take a step's units costliest first, which shortens the step
/// (natively: the browser runs one unit at a time).
#[cfg(not(target_arch = "wasm32"))]
pub(super) fn unit_work(problem: &Problem, unit: &[Family], threshold: f64) -> usize {
    let Some(first) = unit.first() else {
        return 0;
    };
    let blocks: usize =
        depths(problem, first, threshold).iter().sum::<usize>() * first.mesh.size(Axis::Pp).max(1);
    blocks * 2 + blocks * unit.len().saturating_sub(1)
}
