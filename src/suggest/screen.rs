//! Screening: each family planned at one and two blocks per stage, its orders and
//! schedules priced and extrapolated to the full depth, escalated while over the memory
//! budget, and dropped early when a lower bound shows it cannot reach the finalists.

use super::evaluate::{self, extrapolate, layered, layers_per_stage, Planned, Point, Problem};
use super::space::{self, Axis, Family};
use super::{Screened, Stats};
use std::collections::HashMap;

/// Screens families against a fixed threshold (one per thread).
pub(super) struct Screener<'a> {
    pub problem: &'a Problem,
    /// The step time a family must beat to reach the finalists.
    pub threshold: f64,
    pub stats: Stats,
}

impl Screener<'_> {
    fn refuse(&mut self, why: String, count: usize) {
        self.stats.refused += count;
        if self.stats.first_refusal.is_none() {
            self.stats.first_refusal = Some(why);
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
        self.escalate(&family).unwrap_or(first)
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

    /// The cheapest escalation of `f` that fits, if any.
    fn escalate(&mut self, f: &Family) -> Option<Vec<Screened>> {
        let ladder = if f.mesh.size(Axis::Pp) == 1 {
            space::micro_batch_ladder(self.problem.config.batch, f.mesh.size(Axis::Dp), 1)
        } else {
            vec![f.micro_batches]
        };
        let modes: &[crate::plan::Recompute] = if space::recomputes(self.problem.model) {
            &space::RECOMPUTE_LADDER
        } else {
            &[crate::plan::Recompute::Off]
        };
        let most = *ladder.last()?;
        for &recompute in modes {
            let at = |m: usize| Family {
                micro_batches: m,
                recompute,
                ..f.clone()
            };
            if at(most) == *f {
                continue;
            }
            self.stats.escalations += 1;
            let top = self.screen_family(&at(most))?;
            if !self.fits(&top) {
                continue;
            }
            // Bisect the ladder for the fewest micro-batches that fit.
            let (mut lo, mut hi, mut best) = (0, ladder.len() - 1, top);
            while lo < hi {
                let mid = (lo + hi) / 2;
                let fam = at(ladder[mid]);
                if fam == *f {
                    lo = mid + 1;
                    continue;
                }
                self.stats.escalations += 1;
                match self.screen_family(&fam) {
                    Some(points) if self.fits(&points) => {
                        best = points;
                        hi = mid;
                    }
                    Some(_) | None => lo = mid + 1,
                }
            }
            return Some(best);
        }
        None
    }

    /// Every order and schedule of a family, at the full depth (exact) or extrapolated.
    fn screen_points(&mut self, family: &Family) -> Result<Option<Vec<Screened>>, String> {
        let per_stage = layers_per_stage(&self.problem, family);
        let pp = family.mesh.size(Axis::Pp);
        let depths: Vec<usize> = if layered(self.problem.model) && per_stage > 2 {
            vec![1, 2]
        } else {
            vec![per_stage]
        };
        let mut at_depth: Vec<HashMap<(usize, usize), Point>> = Vec::new();
        let orders = space::axis_orders(family);
        let schedules = space::schedules(family, true);
        for &d in &depths {
            let mut planned = Planned::new(&self.problem, family, d * pp)?;
            let mut points = HashMap::new();
            let mut bound = f64::INFINITY;
            for (o, s, e) in planned.estimates(&self.problem, &orders, &schedules) {
                match e {
                    Ok(e) => {
                        let point = Point {
                            step_s: e.step_s(),
                            peak_bytes: evaluate::peak_bytes(&e),
                        };
                        bound = bound.min(if d == per_stage {
                            point.step_s
                        } else {
                            evaluate::lower_bound(&planned.pipeline, &e, per_stage)
                        });
                        points.insert((o, s), point);
                    }
                    Err(e) => self.refuse(e, 1),
                }
            }
            at_depth.push(points);
            // Bounded out: no order or schedule of this family (nor its escalations, which
            // are never faster) can reach the finalists.
            if bound > self.threshold {
                self.stats.bounded += 1;
                return Ok(None);
            }
        }
        let mut out = Vec::new();
        for (o, order) in orders.iter().enumerate() {
            for (s, &schedule) in schedules.iter().enumerate() {
                let point = match (at_depth.first(), at_depth.get(1)) {
                    (Some(a), Some(b)) => match (a.get(&(o, s)), b.get(&(o, s))) {
                        (Some(&a), Some(&b)) => extrapolate(a, 1, b, 2, per_stage),
                        _ => continue,
                    },
                    (Some(a), None) => match a.get(&(o, s)) {
                        Some(&a) => a,
                        None => continue,
                    },
                    (None, _) => continue,
                };
                self.stats.screened += 1;
                out.push(Screened {
                    family: family.clone(),
                    candidate: family.candidate(order.clone(), schedule),
                    point,
                });
            }
        }
        Ok(Some(out))
    }
}
