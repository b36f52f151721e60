//! The search's second pass: price the finalists exactly at the full depth, rank them
//! (ties go to the plainest plan), pick the runner-up the reason compares with, and price
//! in the dominated ZeRO stages that may still belong in the table.

use super::evaluate::{candidate_plan, Point};
use super::space::{self, Candidate, Family};
use super::terms::terms;
use super::{
    exact, reason, report, Row, Screened, Search, SuggestError, Suggestion, SPARE_FINALISTS,
};

impl Search {
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
        let pipeline = crate::passes::driver::run_passes(
            &plan,
            &crate::passes::driver::PassOptions::from_plan(&plan.options),
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
    pub(super) fn likely_finalists(&self) -> Vec<Screened> {
        let fitting = self.fitting_sorted();
        exact::first_batch(&fitting, self.top + SPARE_FINALISTS)
            .into_iter()
            .filter(|s| s.exact.is_none())
            .collect()
    }

    pub(super) fn finish(&mut self) -> Result<Suggestion, SuggestError> {
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
            return Err(SuggestError::NoCandidate);
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
