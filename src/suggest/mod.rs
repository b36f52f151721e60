//! A glass-box auto-planner: search the plans of a preset model on N devices, price each
//! with the cost model, and show the table of the best with the reason the winner won.
//!
//! The solver is an exhaustive enumeration of a pruned space (`space.rs`, where each
//! pruning rule is argued) in two passes:
//! 1. **Screen** every candidate. A family of candidates (one mesh, strategy, ZeRO stage,
//!    micro-batch count and recomputation) is planned once, at one and two blocks per
//!    pipeline stage, and each of its axis orders and schedules is priced at both depths;
//!    the full depth's step time and peak memory are extrapolated along the line through
//!    them (identical blocks add identical time and memory). With one or two blocks per
//!    stage the family is planned at the full depth instead, and with three at one block
//!    (for the bound) and then at the full depth (`screen.rs`): exact, and no dearer. A
//!    family over the memory budget escalates (more micro-batches, then recomputation)
//!    before it is dropped.
//! 2. **Price exactly** the fastest screened candidates at the full depth, as
//!    `shardlab cost` would (those screened at the full depth already are), and rank
//!    them; the winner is the fastest that fits.
//!
//! Why not an ILP: with the layer classes' strategies fixed per mesh (every block the same,
//! no layout conflicts between classes, so no reshard edges to weigh) the choices left are
//! few and discrete, and the cost model (a simulated step, a pipeline laid out in time) is
//! not linear. Enumerating with the real model is exact where an ILP would need a linear
//! surrogate of it; `tests/suggest.rs` checks the pruned search against brute force over
//! the unpruned space on small cases.

pub mod evaluate;
mod exact;
pub mod identify;
pub mod reason;
pub mod report;
pub mod request;
mod screen;
pub mod space;
mod workers;

use evaluate::{terms, Planned, Point, Problem, Terms};
use space::{Axis, Candidate, Family};
#[cfg(not(target_arch = "wasm32"))]
use workers::on_workers_with_ahead;
use workers::workers;

pub use evaluate::candidate_plan;

/// Why a search could not run or found nothing.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SuggestError {
    #[error("no way to lay {model} out on {devices} devices: {why}")]
    NoCandidates {
        model: &'static str,
        devices: usize,
        why: String,
    },
    #[error(
        "no plan fits in {budget} per device: the smallest peak found is {smallest} ({plan}); \
         raise --memory or add devices"
    )]
    OverBudget {
        budget: String,
        smallest: String,
        plan: String,
    },
    #[error("{0}")]
    Plan(String),
}

/// One row of the table: a candidate (or the user's plan) priced at full depth.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// `None`: the user's own plan.
    pub candidate: Option<Candidate>,
    pub terms: Terms,
    pub fits: bool,
}

/// Counts that say how much was searched.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Families screened (each planned once or twice).
    pub families: usize,
    /// Candidates priced while screening.
    pub screened: usize,
    /// Families that exceeded the budget and were re-tried with more micro-batches or
    /// recomputation.
    pub escalations: usize,
    /// Screened candidates over the memory budget.
    pub over_budget: usize,
    /// Candidates the planner or cost model refused (with the first reason).
    pub refused: usize,
    pub first_refusal: Option<String>,
    /// Candidates priced exactly at full depth.
    pub exact: usize,
    /// Families dropped by the bound: their step time's lower bound exceeds what the
    /// finalists need.
    pub bounded: usize,
    /// ZeRO stage 2 and 3 families not screened because a lower stage from 1 up fits
    /// (stage 2 takes stage 1's time, stage 3 more; both only save memory; `space.rs`).
    pub dominated: usize,
    /// Plannings of another micro-batch count that `passes::rebatch` could not reuse
    /// (planned afresh instead).
    pub replanned_afresh: usize,
    /// Of those priced exactly, how many were priced ahead, beside the last screening
    /// step's units (natively, on two or more cores), rather than after it.
    pub priced_ahead: usize,
}

/// The search's answer.
#[derive(Clone, Debug)]
pub struct Suggestion {
    pub winner: Row,
    /// The winner's plan at full size.
    pub plan: crate::plan::Plan,
    /// The fastest candidates that fit, fastest first (the winner first), at most `top`.
    pub table: Vec<Row>,
    /// The best priced plan that differs from the winner in mesh shape or strategy (the
    /// one the reason compares with), else the next fastest.
    pub runner_up: Option<Row>,
    /// The user's plan, priced the same way, if given.
    pub mine: Option<Row>,
    /// Why the winner beats the runner-up (or the user's plan), from the cost terms.
    pub reason: String,
    pub stats: Stats,
}

/// A screened candidate: its extrapolated point, or its exact point and terms when the
/// screen planned it at the full depth.
#[derive(Clone, Debug)]
struct Screened {
    family: Family,
    candidate: Candidate,
    point: Point,
    /// The terms at the full depth, as the exact pass would price them (`None`:
    /// extrapolated).
    exact: Option<Terms>,
}

/// A search in progress, advanced a step at a time (the browser runs it in chunks).
pub struct Search {
    problem: Problem,
    top: usize,
    /// Work units: families that differ only in ZeRO stage, screened together (they share
    /// a planning up to the partition), in order of their first member.
    units: Vec<Vec<Family>>,
    /// The units not screened yet, in order.
    left: Vec<usize>,
    /// Recent plannings by lineage (a unit's families without ZeRO stage and micro-batch
    /// count): the lineage's next unit, another micro-batch count, re-plans them
    /// (`Planned::replan`). A step screens at most one unit of a lineage, so each unit
    /// sees the plannings of the same earlier units whatever the threads do.
    recent: Vec<(Family, Vec<screen::Recent>)>,
    screened: Vec<Screened>,
    /// The screened step times that fit, ascending (for the bound).
    fitting: Vec<f64>,
    stats: Stats,
    /// ZeRO 2 and 3 families the screen skipped because a lower stage fits: never faster
    /// than that twin, but they may still belong in the table (`with_dominated`).
    dominated: Vec<Family>,
    mine: Option<crate::plan::Plan>,
    /// Finalists priced exactly in the last screening step, before the finish asks: the
    /// same rows the finish would price (a row depends only on its candidate).
    ahead: Vec<Row>,
}

/// What screening a unit gives: its points, its counts, the families it skipped as
/// dominated, and its recent plannings for the lineage's next unit.
type UnitScreened = (Vec<Screened>, Stats, Vec<Family>, Vec<screen::Recent>);

/// A unit to screen, with its lineage's recent plannings.
type UnitJob = (Vec<Family>, Vec<screen::Recent>);

/// How many recent plannings a lineage keeps between its units (the depths its units are
/// planned at, and a few escalations'): each holds a whole planning.
const LINEAGE_RECENT: usize = 6;

/// Units per worker in a step natively (the threshold is refreshed between steps; more
/// units per step balance the workers' loads better).
const UNITS_PER_WORKER: usize = 3;

/// The finalists priced exactly beyond the table's `top` (the screen's extrapolation can
/// misorder near-ties).
const SPARE_FINALISTS: usize = 4;

impl Stats {
    fn add(&mut self, o: &Stats) {
        self.families += o.families;
        self.screened += o.screened;
        self.escalations += o.escalations;
        self.over_budget += o.over_budget;
        self.refused += o.refused;
        self.exact += o.exact;
        self.bounded += o.bounded;
        self.dominated += o.dominated;
        self.replanned_afresh += o.replanned_afresh;
        self.priced_ahead += o.priced_ahead;
        if self.first_refusal.is_none() {
            self.first_refusal.clone_from(&o.first_refusal);
        }
    }
}

impl Search {
    /// A search of the pruned space; `mine` is the user's plan to price beside it.
    pub fn new(
        problem: Problem,
        top: usize,
        mine: Option<crate::plan::Plan>,
    ) -> Result<Search, SuggestError> {
        // Each search builds its own models (a benchmark's repeats start cold).
        let problem = Problem {
            models: Default::default(),
            ..problem
        };
        let devices = problem.devices;
        // The user's plan is compared only on as many devices as the search uses.
        let mine = mine.filter(|p| p.mesh().map_or(1, |m| m.size()) == devices);
        let mut families = space::families(problem.model, &problem.config, devices, true);
        // Plain plans first: they are often good, and a good threshold early bounds more.
        crate::sort::sort_by_key(&mut families, |f| {
            (
                f.mesh.axes.len(),
                f.mesh.size(Axis::Pp),
                f.zero,
                f.micro_batches,
            )
        });
        // A unit is the families that differ only in ZeRO stage (in order: the higher ones
        // may be dominated by the lower); its lineage's units differ in micro-batch count.
        let mut units: Vec<Vec<Family>> = Vec::new();
        for f in families {
            let key = Family {
                zero: 0,
                ..f.clone()
            };
            match units.iter_mut().find(|u| {
                u.first().is_some_and(|g| {
                    Family {
                        zero: 0,
                        ..g.clone()
                    } == key
                })
            }) {
                Some(u) => u.push(f),
                None => units.push(vec![f]),
            }
        }
        if units.is_empty() {
            return Err(SuggestError::NoCandidates {
                model: problem.model.name(),
                devices,
                why: format!(
                    "no factorisation of {devices} into pp × dp × mp divides the model's sizes \
                     (batch {}, heads {}, hidden {}, layers {})",
                    problem.config.batch,
                    problem.config.heads,
                    problem.config.hidden,
                    problem.config.layers
                ),
            });
        }
        Ok(Search {
            problem,
            top: top.max(1),
            left: (0..units.len()).collect(),
            units,
            recent: Vec::new(),
            screened: Vec::new(),
            fitting: Vec::new(),
            stats: Stats::default(),
            dominated: Vec::new(),
            mine,
            ahead: Vec::new(),
        })
    }

    /// Work units done and in all (one per family; the exact pass is the last unit).
    pub fn progress(&self) -> (usize, usize) {
        (self.units.len() - self.left.len(), self.units.len() + 1)
    }

    /// Screens the next units; after the last, prices the finalists and answers.
    pub fn step(&mut self) -> Option<Result<Suggestion, SuggestError>> {
        if self.left.is_empty() {
            return Some(self.finish());
        }
        let lineage = |u: &[Family]| u.first().map(screen::recent_key);
        // The next units in order, one per lineage.
        let want = UNITS_PER_WORKER * workers();
        let mut picked: Vec<usize> = Vec::new();
        let mut lineages = Vec::new();
        for &i in &self.left {
            let l = lineage(&self.units[i]);
            if picked.len() < want && !lineages.contains(&l) {
                picked.push(i);
                lineages.push(l);
            }
        }
        self.left.retain(|i| !picked.contains(i));
        // The last step prices the likely finalists ahead, on the workers its units leave
        // idle (`exact.rs`); the finish prices only those it did not guess.
        let ahead = match self.left.is_empty() && workers() > 1 {
            true => self.likely_finalists(),
            false => Vec::new(),
        };
        let jobs: Vec<UnitJob> = lineages
            .iter()
            .zip(&picked)
            .map(|(l, &i)| {
                let at = self.recent.iter().position(|(k, _)| Some(k) == l.as_ref());
                let recent = at.map(|at| self.recent.swap_remove(at).1);
                (self.units[i].clone(), recent.unwrap_or_default())
            })
            .collect();
        let (screened, priced) = self.screen_chunk(jobs, &ahead);
        self.ahead.extend(exact::rows(priced));
        for ((points, stats, dominated, mut recent), l) in screened.into_iter().zip(lineages) {
            self.stats.add(&stats);
            self.keep(points);
            self.dominated.extend(dominated);
            let more = self.left.iter().any(|&j| lineage(&self.units[j]) == l);
            if let (true, Some(l)) = (more, l) {
                let drop = recent.len().saturating_sub(LINEAGE_RECENT);
                recent.drain(..drop);
                self.recent.push((l, recent));
            }
        }
        None
    }

    /// Screens units against the current threshold, one per worker thread natively, and
    /// prices the finalists `ahead` exactly beside them (natively only).
    fn screen_chunk(
        &self,
        chunk: Vec<UnitJob>,
        ahead: &[Screened],
    ) -> (Vec<UnitScreened>, Vec<exact::Priced>) {
        let (problem, threshold) = (&self.problem, self.threshold());
        let other = self.runner_up_threshold();
        let other = &other;
        let (fitting, finalists) = (&self.fitting, self.top + SPARE_FINALISTS);
        let one = move |(unit, recent): UnitJob| {
            let mut s = screen::Screener {
                problem,
                threshold,
                other: other.clone(),
                stats: Stats::default(),
                recent,
            };
            // A unit's later members are bounded by its earlier ones' points too.
            let mut fitting = fitting.clone();
            let mut points = Vec::new();
            let mut dominated = Vec::new();
            // Whether a ZeRO stage from 1 up fits without escalation: the higher stages are
            // then dominated (`space.rs`). A unit's families differ only in ZeRO stage.
            let mut sharded_fits = false;
            // Whether such a stage was cut by the bound: the higher ones, never faster, are
            // cut too.
            let mut sharded_bounded = false;
            for f in unit {
                if f.zero >= 2 && sharded_bounded {
                    s.stats.bounded += 1;
                    continue;
                }
                if f.zero >= 2 && sharded_fits {
                    s.stats.dominated += 1;
                    dominated.push(f);
                    continue;
                }
                let bounded = s.stats.bounded;
                let found = s.screen(f.clone());
                if f.zero >= 1 {
                    sharded_bounded = found.is_empty() && s.stats.bounded > bounded;
                    sharded_fits = !found.is_empty()
                        && found.iter().all(|p| {
                            p.point.peak_bytes <= problem.budget_bytes
                                && p.candidate.micro_batches == f.micro_batches
                                && p.candidate.recompute == f.recompute
                        });
                }
                for p in found
                    .iter()
                    .filter(|p| p.point.peak_bytes <= problem.budget_bytes)
                {
                    let at = fitting.partition_point(|&t| t <= p.point.step_s);
                    fitting.insert(at, p.point.step_s);
                }
                if let Some(&t) = fitting.get(finalists.saturating_sub(1)) {
                    s.threshold = s.threshold.min(t);
                }
                points.extend(found);
            }
            (points, s.stats, dominated, s.recent)
        };
        #[cfg(not(target_arch = "wasm32"))]
        if chunk.len() + ahead.len() > 1 {
            return on_workers_with_ahead(problem, threshold, chunk, ahead, &one);
        }
        // One worker (the browser) prices nothing ahead (`step`); were it asked to, the
        // finish would price what is left.
        #[cfg(target_arch = "wasm32")]
        let _ = ahead;
        (chunk.into_iter().map(one).collect(), Vec::new())
    }

    /// Runs the search to the end, reporting progress after each unit.
    pub fn run(
        mut self,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<Suggestion, SuggestError> {
        loop {
            if let Some(done) = self.step() {
                return done;
            }
            let (d, t) = self.progress();
            progress(d, t);
        }
    }

    fn refuse(&mut self, why: String, count: usize) {
        self.stats.refused += count;
        if self.stats.first_refusal.is_none() {
            self.stats.first_refusal = Some(why);
        }
    }

    fn keep(&mut self, points: Vec<Screened>) {
        for s in points {
            if s.point.peak_bytes > self.problem.budget_bytes {
                self.stats.over_budget += 1;
            } else {
                let at = self.fitting.partition_point(|&t| t <= s.point.step_s);
                self.fitting.insert(at, s.point.step_s);
            }
            self.screened.push(s);
        }
    }

    /// The step time a family must beat to reach the finalists: the slowest of the fastest
    /// `top + SPARE_FINALISTS` screened candidates that fit (infinite until there are
    /// that many).
    /// The leader's shape and the fastest fitting screened step of another shape.
    fn runner_up_threshold(&self) -> Option<(Shape, f64)> {
        let budget = self.problem.budget_bytes;
        let fits = self
            .screened
            .iter()
            .filter(|s| s.point.peak_bytes <= budget);
        let leader = fits
            .clone()
            .min_by(|a, b| a.point.step_s.total_cmp(&b.point.step_s))?;
        let shape = shape_of(&leader.candidate);
        let other = fits
            .filter(|s| shape_of(&s.candidate) != shape)
            .map(|s| s.point.step_s)
            .fold(f64::INFINITY, f64::min);
        Some((shape, other))
    }

    fn threshold(&self) -> f64 {
        let k = self.top + SPARE_FINALISTS;
        if self.fitting.len() < k {
            return f64::INFINITY;
        }
        self.fitting[k - 1]
    }

    /// Prices `finalists` exactly at the full depth, one planning per family (none for
    /// those the screen already priced at the full depth).
    fn price_exactly(&mut self, finalists: &[Screened]) -> Vec<Row> {
        let budget = self.problem.budget_bytes;
        let mut rows: Vec<Row> = finalists
            .iter()
            .filter_map(|s| {
                s.exact.as_ref().map(|t| Row {
                    candidate: Some(s.candidate.clone()),
                    fits: t.peak_bytes <= budget,
                    terms: t.clone(),
                })
            })
            .collect();
        self.stats.exact += rows.len();
        // Those priced ahead, in the last screening step (`exact::likely_finalists`).
        let mut left: Vec<&Screened> = Vec::new();
        for s in finalists.iter().filter(|s| s.exact.is_none()) {
            let ahead = self
                .ahead
                .iter()
                .find(|r| r.candidate.as_ref() == Some(&s.candidate));
            match ahead {
                // The finalist's own candidate with the terms priced for it (as the
                // screen's exact terms are used above).
                Some(row) => {
                    self.stats.exact += 1;
                    self.stats.priced_ahead += 1;
                    rows.push(Row {
                        candidate: Some(s.candidate.clone()),
                        terms: row.terms.clone(),
                        fits: row.terms.peak_bytes <= budget,
                    });
                }
                None => left.push(s),
            }
        }
        let groups = exact::groups(&left);
        let alone = groups.len() == 1;
        let priced = exact::price_groups(&self.problem, groups, alone);
        for family in priced {
            match family {
                Ok(members) => {
                    for r in members {
                        match r {
                            Ok(row) => {
                                self.stats.exact += 1;
                                rows.push(row);
                            }
                            Err(e) => self.refuse(e, 1),
                        }
                    }
                }
                Err((e, n)) => self.refuse(e, n),
            }
        }
        rows
    }

    /// The user's plan priced as a row.
    fn price_mine(&mut self) -> Option<Row> {
        let plan = self.mine.clone()?;
        let pipeline = crate::passes::pipeline::run_pipeline(
            &plan,
            &crate::passes::pipeline::PipelineOptions::from_plan(&plan.options),
        )
        .ok()?;
        let opts = crate::cost::estimate::CostOptions {
            mixed_precision: plan.options.amp,
            overlap_grad_sync: false,
        };
        let e = crate::cost::estimate::estimate(
            &pipeline,
            &self.problem.topology,
            self.problem.dtype,
            opts,
        )
        .ok()?;
        let t = terms(&pipeline, &e);
        Some(Row {
            candidate: None,
            fits: t.peak_bytes <= self.problem.budget_bytes,
            terms: t,
        })
    }

    /// The screened candidates that fit, fastest first.
    fn fitting_sorted(&self) -> Vec<Screened> {
        let budget = self.problem.budget_bytes;
        let mut fitting: Vec<Screened> = self
            .screened
            .iter()
            .filter(|s| s.point.peak_bytes <= budget)
            .cloned()
            .collect();
        crate::sort::sort_by(&mut fitting, |a, b| {
            a.point.step_s.total_cmp(&b.point.step_s)
        });
        fitting
    }

    /// The finalists the finish would price first if the screen ended now, less those the
    /// screen priced at the full depth: the last step's units rarely displace them.
    fn likely_finalists(&self) -> Vec<Screened> {
        let fitting = self.fitting_sorted();
        exact::first_batch(&fitting, self.top + SPARE_FINALISTS)
            .into_iter()
            .filter(|s| s.exact.is_none())
            .collect()
    }

    fn finish(&mut self) -> Result<Suggestion, SuggestError> {
        let fitting = self.fitting_sorted();
        let rows = self.price_finalists(&fitting);
        let rows = self.with_runner_up(rank_rows(rows), &fitting);
        let rows = self.with_dominated(rows);
        let mine = self.price_mine();
        let table: Vec<Row> = rows
            .iter()
            .filter(|r| r.fits)
            .take(self.top.max(2))
            .cloned()
            .collect();
        let Some(winner) = table.first().cloned() else {
            return Err(self.over_budget());
        };
        let runner = runner_up(&winner, rows.iter().filter(|r| r.fits));
        let table: Vec<Row> = table.into_iter().take(self.top).collect();
        let Some(candidate) = winner.candidate.clone() else {
            return Err(SuggestError::Plan("the winner has no candidate".into()));
        };
        let plan = candidate_plan(&self.problem, &candidate, self.problem.config.layers)
            .map_err(SuggestError::Plan)?;
        // The user's plan may lie outside the searched space and be faster: then it wins,
        // and the reason says by how much it beats the best searched plan.
        if let (Some(m), Some(p)) = (&mine, &self.mine) {
            if m.fits && m.terms.step_s < winner.terms.step_s {
                let reason = format!(
                    "Your plan is faster than every plan searched (it lies outside the searched \
                     space): {}",
                    reason::compare(&self.problem, m, &winner, "it")
                );
                return Ok(Suggestion {
                    winner: m.clone(),
                    plan: p.clone(),
                    table,
                    runner_up: Some(winner),
                    mine,
                    reason,
                    stats: self.stats.clone(),
                });
            }
        }
        let reason = reason::reason(&self.problem, &winner, runner.as_ref(), mine.as_ref());
        Ok(Suggestion {
            winner,
            plan,
            table,
            runner_up: runner,
            mine,
            reason,
            stats: self.stats.clone(),
        })
    }

    /// Prices batches of `fitting` (fastest first) exactly until `top` fit (or none are
    /// left).
    fn price_finalists(&mut self, fitting: &[Screened]) -> Vec<Row> {
        let mut rows: Vec<Row> = Vec::new();
        let batch = self.top + SPARE_FINALISTS;
        let mut from = 0;
        while from < fitting.len() && rows.iter().filter(|r| r.fits).count() < self.top.max(2) {
            let to = (from + batch).min(fitting.len());
            let finalists = match from {
                0 => exact::first_batch(fitting, batch),
                _ => fitting[from..to].to_vec(),
            };
            let priced = self.price_exactly(&finalists);
            rows.extend(priced);
            from = to;
        }
        rows
    }

    /// `rows` with a runner-up of another shape priced if none is: the reason compares the
    /// winner with a different plan, the best screened one whose mesh shape or strategy
    /// differs.
    fn with_runner_up(&mut self, mut rows: Vec<Row>, fitting: &[Screened]) -> Vec<Row> {
        if let Some(w) = rows
            .iter()
            .find(|r| r.fits)
            .and_then(|r| r.candidate.clone())
        {
            let differs = |c: &Candidate| {
                c.mesh.canonical() != w.mesh.canonical() || c.vocab_parallel != w.vocab_parallel
            };
            let priced = rows
                .iter()
                .any(|r| r.fits && r.candidate.as_ref().is_some_and(differs));
            if !priced {
                if let Some(next) = fitting.iter().find(|s| differs(&s.candidate)).cloned() {
                    let extra = self.price_exactly(std::slice::from_ref(&next));
                    rows.extend(extra);
                    rows = rank_rows(rows);
                }
            }
        }
        rows
    }

    /// `rows` with the dominated families the table may hold priced in: a ZeRO 2 or 3
    /// family the screen skipped is never faster than its lower twins (stage 1 up, same
    /// everything else; `space.rs`), so it is priced only where their fastest point (exact
    /// if priced, else screened) is no slower than the table's last row. A stage 2 plan
    /// takes its stage 1 twin's time, so when that twin is in the table, so is it.
    fn with_dominated(&mut self, rows: Vec<Row>) -> Vec<Row> {
        let last = rows
            .iter()
            .filter(|r| r.fits)
            .nth(self.top.saturating_sub(1))
            .map_or(f64::INFINITY, |r| r.terms.step_s);
        let twins = |f: &Family, c: &Candidate| {
            c.zero >= 1
                && c.zero < f.zero
                && Family {
                    zero: f.zero,
                    ..c.family()
                } == *f
        };
        let mut members = Vec::new();
        for f in std::mem::take(&mut self.dominated) {
            let exact = rows
                .iter()
                .filter(|r| r.candidate.as_ref().is_some_and(|c| twins(&f, c)))
                .map(|r| r.terms.step_s);
            let screened = self
                .screened
                .iter()
                .filter(|s| twins(&f, &s.candidate))
                .map(|s| s.point.step_s);
            let bound = exact.chain(screened).fold(f64::INFINITY, f64::min);
            if bound < last || tied(bound, last) {
                for order in space::axis_orders(&f) {
                    for schedule in space::schedules(&f, true) {
                        members.push(Screened {
                            candidate: f.candidate(order.clone(), schedule),
                            family: f.clone(),
                            point: Point {
                                step_s: bound,
                                peak_bytes: 0.0,
                            },
                            exact: None,
                        });
                    }
                }
            }
        }
        if members.is_empty() {
            return rows;
        }
        let mut rows = rows;
        rows.extend(self.price_exactly(&members));
        rank_rows(rows)
    }

    fn over_budget(&self) -> SuggestError {
        let human = report::human_bytes;
        let smallest = self
            .screened
            .iter()
            .min_by(|a, b| a.point.peak_bytes.total_cmp(&b.point.peak_bytes));
        match smallest {
            Some(s) => SuggestError::OverBudget {
                budget: human(self.problem.budget_bytes),
                smallest: human(s.point.peak_bytes),
                plan: report::describe(self.problem.model, &s.candidate),
            },
            None => SuggestError::NoCandidates {
                model: self.problem.model.name(),
                devices: self.problem.devices,
                why: self
                    .stats
                    .first_refusal
                    .clone()
                    .unwrap_or_else(|| "every candidate was refused".into()),
            },
        }
    }
}

/// Searches the pruned space to the end.
pub fn suggest(
    problem: Problem,
    top: usize,
    mine: Option<crate::plan::Plan>,
    progress: impl FnMut(usize, usize),
) -> Result<Suggestion, SuggestError> {
    Search::new(problem, top, mine)?.run(progress)
}

/// Every point of the unpruned space priced exactly at full depth (no screening, no
/// escalation): the reference the search is checked against on small cases.
pub fn brute_force(problem: &Problem) -> Vec<Row> {
    let devices = problem.devices;
    let mut rows = Vec::new();
    for family in space::families(problem.model, &problem.config, devices, false) {
        let Ok(mut planned) = Planned::every_rank(problem, &family, problem.config.layers) else {
            continue;
        };
        for order in space::axis_orders(&family) {
            for schedule in space::schedules(&family, false) {
                if let Ok(e) = planned.estimate(problem, &order, schedule) {
                    let t = planned.terms(&e);
                    rows.push(Row {
                        fits: t.peak_bytes <= problem.budget_bytes,
                        candidate: Some(family.candidate(order.clone(), schedule)),
                        terms: t,
                    });
                }
            }
        }
    }
    crate::sort::sort_by(&mut rows, |a, b| a.terms.step_s.total_cmp(&b.terms.step_s));
    rows
}

/// Two step times equal up to rounding.
fn tied(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

/// How plain a candidate is, plainest first: fewer mesh axes, lower ZeRO stage, fewer
/// micro-batches, no recomputation, 1F1B before ZB-H1, the canonical axis order.
fn plainness(c: &Option<Candidate>) -> (usize, u8, usize, usize, bool, bool) {
    match c {
        None => (usize::MAX, 0, 0, 0, true, true),
        Some(c) => (
            c.mesh.axes.len(),
            c.zero,
            c.micro_batches,
            space::RECOMPUTE_LADDER
                .iter()
                .position(|&r| r == c.recompute)
                .unwrap_or(0),
            c.schedule == crate::plan::ScheduleKind::ZbH1,
            c.mesh.canonical() != c.mesh,
        ),
    }
}

/// Rows fastest first, ties broken towards the plainer plan, and rows that differ from a
/// faster-or-equal one only in axis order or schedule at the same time dropped.
fn rank_rows(mut rows: Vec<Row>) -> Vec<Row> {
    crate::sort::sort_by(&mut rows, |a, b| {
        if tied(a.terms.step_s, b.terms.step_s) {
            plainness(&a.candidate).cmp(&plainness(&b.candidate))
        } else {
            a.terms.step_s.total_cmp(&b.terms.step_s)
        }
    });
    let mut kept: Vec<Row> = Vec::new();
    for r in rows {
        let same = kept.iter().any(|k| match (&k.candidate, &r.candidate) {
            (Some(a), Some(b)) => {
                tied(k.terms.step_s, r.terms.step_s)
                    && a.mesh.canonical() == b.mesh.canonical()
                    && Candidate {
                        mesh: b.mesh.clone(),
                        schedule: b.schedule,
                        ..a.clone()
                    } == *b
            }
            _ => false,
        });
        if !same {
            kept.push(r);
        }
    }
    kept
}

/// What makes two plans different plans for the reason: the mesh's shape (its axes and
/// sizes, in any order) and whether the embedding and head are vocab parallel.
pub(crate) type Shape = (space::MeshShape, bool);

pub(crate) fn shape_of(c: &Candidate) -> Shape {
    (c.mesh.canonical(), c.vocab_parallel)
}

/// The best row that differs from the winner in its mesh's shape or its layer strategy
/// (so the reason is about a different plan, not a ZeRO stage at the same time), else the
/// next row.
fn runner_up<'a>(winner: &Row, mut rows: impl Iterator<Item = &'a Row> + Clone) -> Option<Row> {
    let w = winner.candidate.as_ref()?;
    let differs = |r: &&Row| {
        r.candidate.as_ref().is_some_and(|c| {
            c.mesh.canonical() != w.mesh.canonical() || c.vocab_parallel != w.vocab_parallel
        })
    };
    rows.clone().find(differs).or_else(|| rows.nth(1)).cloned()
}
