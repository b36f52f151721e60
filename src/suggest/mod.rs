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

pub mod bound;
pub mod evaluate;
mod exact;
mod finish;
pub mod identify;
pub mod links;
pub mod reason;
pub mod report;
pub mod request;
mod screen;
pub mod space;
pub mod terms;
mod workers;

use evaluate::{Planned, Point, Problem, Terms};
use space::{Axis, Candidate, Family};
#[cfg(not(target_arch = "wasm32"))]
use workers::on_workers_with_ahead;
use workers::workers;

pub use evaluate::candidate_plan;
pub(crate) use finish::{shape_of, Shape};

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
    #[error(transparent)]
    Plan(#[from] Refusal),
    #[error("the winner has no candidate")]
    NoCandidate,
}

/// Why one plan of the search could not be built, planned or priced (a candidate is then
/// counted as refused, with the first reason in the stats).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Refusal {
    #[error(transparent)]
    Model(#[from] crate::models::ModelError),
    #[error(transparent)]
    Spec(#[from] crate::plan::SpecError),
    #[error(transparent)]
    Passes(#[from] crate::passes::driver::PassError),
    #[error(transparent)]
    Rebatch(#[from] crate::passes::pipeline::rebatch::RebatchError),
    #[error(transparent)]
    Estimate(#[from] crate::cost::estimate::EstimateError),
    #[error(transparent)]
    Stages(#[from] crate::passes::pipeline::stages::StageError),
    #[error(transparent)]
    Schedule(#[from] crate::cost::pipeline::PipelineTimeError),
    #[error(transparent)]
    Simulate(#[from] crate::cost::simulate::SimulateError),
    #[error("nothing priced")]
    NothingPriced,
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
    /// Plannings of another micro-batch count that `passes::pipeline::rebatch` could not reuse
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

    fn refuse(&mut self, why: Refusal, count: usize) {
        self.stats.refused += count;
        if self.stats.first_refusal.is_none() {
            self.stats.first_refusal = Some(why.to_string());
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
