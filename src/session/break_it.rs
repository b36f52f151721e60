//! Break it, and watch what breaks: deliberate mistakes in the rank programs (delete an
//! inserted op, drop the 1/N scale, change a reduce type or a group, skip a sync on one
//! rank), then a run that says which tensors diverge from serial, first divergence first,
//! with a per-element difference map and a one-line diagnosis derived from the numbers.

use super::*;
use crate::exec::run::{Log, Record};
use crate::ir::Op;

fn names_of(program: &crate::ir::Program, op: &Op) -> Vec<String> {
    op.all_inputs()
        .chain(op.all_outputs())
        .map(|v| program.var(v).name.to_string())
        .collect()
}

fn same_kind(a: &Op, b: &Op) -> bool {
    a.ty == b.ty && a.namescope == b.namescope
}

pub(super) fn key_of(program: &crate::ir::Program, i: usize) -> Option<BrokenOp> {
    let op = program.ops().get(i)?;
    let names = names_of(program, op);
    let nth = program.ops()[..i]
        .iter()
        .filter(|o| same_kind(o, op) && names_of(program, o) == names)
        .count();
    Some(BrokenOp {
        op: (**op).clone(),
        names,
        nth,
    })
}

pub(super) fn locate(program: &crate::ir::Program, key: &BrokenOp) -> Option<usize> {
    program
        .ops()
        .iter()
        .enumerate()
        .filter(|(_, o)| same_kind(o, &key.op) && names_of(program, o) == key.names)
        .nth(key.nth)
        .map(|(i, _)| i)
}

impl Session {
    /// Describes a breakage for people.
    pub fn describe_break(&self, b: &Breakage) -> String {
        let op_text = |i: usize| {
            self.inserted_ops()
                .into_iter()
                .find(|o| o.op == i)
                .map_or_else(|| format!("op {i}"), |o| format!("op {i} ({})", o.label))
        };
        match b {
            Breakage::Delete { op } => format!("deleted {} on every rank", op_text(*op)),
            Breakage::SkipOnRank { op, rank } => {
                format!("rank {rank} skips {}", op_text(*op))
            }
            Breakage::SetReduce { op, reduce } => {
                format!("{} reduces with {} instead", op_text(*op), reduce.name())
            }
            Breakage::SetGroup { op, group } => format!(
                "{} runs over {}",
                op_text(*op),
                match group {
                    GroupChange::Alone => "each rank alone",
                    GroupChange::WholeMesh => "the whole mesh",
                }
            ),
        }
    }

    pub(super) fn add_break(&mut self, b: Breakage) {
        let op = match &b {
            Breakage::Delete { op }
            | Breakage::SkipOnRank { op, .. }
            | Breakage::SetReduce { op, .. }
            | Breakage::SetGroup { op, .. } => *op,
        };
        if let Breakage::SkipOnRank { rank, .. } = &b {
            if !self.mesh().is_some_and(|m| m.process_ids().contains(rank)) {
                self.message = Some(format!("rank {rank} is not on the mesh"));
                return;
            }
        }
        if !self.inserted_ops().iter().any(|o| o.op == op) {
            self.message = Some(format!(
                "op {op} of rank {}'s program is not an inserted op; only inserted ops can be broken",
                self.selected_rank
            ));
            return;
        }
        let key = self.rank_program().and_then(|r| key_of(&r.program, op));
        if let Some(key) = key {
            self.breaks.retain(|(k, _)| *k != key);
            self.breaks.push((key, b));
        }
        self.run = None;
        self.break_report = None;
    }
}

/// Applies one breakage to one rank's program.
fn apply(program: &mut crate::ir::Program, rank: u32, key: &BrokenOp, b: &Breakage, all: &[u32]) {
    let Some(i) = locate(program, key) else {
        return;
    };
    match b {
        Breakage::Delete { .. } => {
            program.remove_op(i);
        }
        Breakage::SkipOnRank { rank: who, .. } => {
            if *who == rank {
                program.remove_op(i);
            }
        }
        Breakage::SetReduce { reduce, .. } => {
            if let Some(op) = program.op_mut(i) {
                op.attrs.insert(
                    "reduce_type".into(),
                    crate::ir::Attr::Str(reduce.name().into()),
                );
            }
        }
        Breakage::SetGroup { group, .. } => {
            let ranks: Vec<i64> = match group {
                GroupChange::Alone => vec![i64::from(rank)],
                GroupChange::WholeMesh => all.iter().map(|&r| i64::from(r)).collect(),
            };
            if let Some(op) = program.op_mut(i) {
                op.attrs
                    .insert("group".into(), crate::ir::Attr::Ints(ranks));
            }
        }
    }
}

impl Session {
    /// Runs the plan with the breakages applied and reports what diverged.
    pub(crate) fn compute_broken(&mut self) -> Result<BreakReport, SessionError> {
        self.ensure_partitioned(None);
        let Some(p) = self.pipeline.clone() else {
            return Err(SessionError::NothingToRun);
        };
        if too_large(&p) {
            return Err(SessionError::TooLarge);
        }
        // Verified in f64, as Run is (`exec::precision`).
        let p = crate::exec::precision::in_precision(&p, crate::exec::precision::Precision::F64)
            .into_owned();
        let mut broken = p.clone();
        let all: Vec<u32> = p.full.mesh.process_ids().to_vec();
        for r in broken.partitioned.ranks.iter_mut() {
            for (key, b) in &self.breaks {
                apply(&mut r.program, r.rank, key, b, &all);
            }
        }
        let opts = RunOptions {
            steps: 2,
            ..Default::default()
        };
        let breaks = self
            .breaks
            .iter()
            .map(|(_, b)| self.describe_break(b))
            .collect();
        let serial = run_serial(&p, &opts).map_err(|e| SessionError::Serial(e.to_string()))?;
        Ok(match run_distributed(&broken, &opts, false) {
            Ok(d) => diagnose(&serial, &d, breaks),
            Err(e) => BreakReport {
                breaks,
                diverged: Vec::new(),
                compared: 0,
                failure: Some(e.to_string()),
                shrunk: Vec::new(),
            },
        })
    }
}

/// Whether the model is too large to run in the browser: more than 2M elements of
/// parameters and inputs (optimizer states follow the parameters: Adam's mixed-precision
/// states are about three times as many).
pub(super) fn too_large(p: &Passes) -> bool {
    let params: u64 = p
        .full
        .program
        .vars()
        .iter()
        .filter(|v| v.kind.is_source() && v.kind != crate::ir::VarKind::OptimizerState)
        .map(|v| v.ty.numel())
        .sum();
    params > 2_000_000
}

/// The verifier's checks, failing ones explained, in the order they diverge.
fn diagnose(serial: &Log, dist: &Log, breaks: Vec<String>) -> BreakReport {
    let checks = verify(serial, dist);
    let records = |log: &Log| -> Vec<(String, Record)> {
        let steps = log.loss_records.len();
        let loss = log.loss_records.iter().map(|r| (r.name.clone(), r.clone()));
        let grads = log
            .grads
            .iter()
            .map(|r| (format!("{}@GRAD (step 1)", r.name), r.clone()));
        let params = log
            .params
            .iter()
            .map(|r| (format!("{} (after step {steps})", r.name), r.clone()));
        loss.chain(grads).chain(params).collect()
    };
    let (s_recs, d_recs) = (records(serial), records(dist));
    // In the order they happen: step 1's loss, its gradients, then later losses, then the
    // parameters after the last step.
    let (n_loss, n_grad) = (serial.loss_records.len(), serial.grads.len());
    let when = |i: usize| match i {
        0 => 0,
        i if i < n_loss => 1 + n_grad + i,
        i if i < n_loss + n_grad => i,
        i => n_loss + n_grad + i,
    };
    let mut order: Vec<usize> = (0..checks.len()).collect();
    crate::sort::sort_by_key(&mut order, |&i| when(i));
    let diverged = order
        .into_iter()
        .map(|i| &checks[i])
        .filter(|c| !c.pass)
        .map(|c| {
            let s = s_recs.iter().find(|(n, _)| *n == c.tensor).map(|(_, r)| r);
            let d = d_recs.iter().find(|(n, _)| *n == c.tensor).map(|(_, r)| r);
            let (diagnosis, heat) = match (s.and_then(Record::value), d) {
                _ if c.note.is_some() => (c.note.clone().unwrap_or_default(), Vec::new()),
                (Some(s), Some(d)) => (explain(&c.tensor, s, d), heat(s, d)),
                (None, _) | (_, None) => (
                    format!("{} was not recorded by both runs", c.tensor),
                    Vec::new(),
                ),
            };
            Divergence {
                tensor: c.tensor.clone(),
                diagnosis,
                heat,
                max_abs_diff: c.max_abs_diff,
                tolerance: c.tolerance,
            }
        })
        .collect();
    // What diverges after the first divergence is (at least partly) its consequence.
    let mut diverged: Vec<Divergence> = diverged;
    if let Some(first) = diverged.first().map(|d| d.tensor.clone()) {
        for d in diverged.iter_mut().skip(1) {
            d.diagnosis
                .push_str(&format!(" (downstream of the first divergence, {first})"));
        }
    }
    BreakReport {
        breaks,
        diverged,
        compared: checks.len(),
        failure: None,
        shrunk: Vec::new(),
    }
}

/// The least-squares factor `k` with `copy ≈ k · serial`, and how well it fits (the
/// largest residual relative to the largest serial magnitude).
fn scale_factor(serial: &[f64], copy: &[f64]) -> (f64, f64) {
    let ss: f64 = serial.iter().map(|x| x * x).sum();
    if ss == 0.0 {
        return (f64::NAN, f64::INFINITY);
    }
    let k = serial.iter().zip(copy).map(|(a, b)| a * b).sum::<f64>() / ss;
    let top = serial.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    let resid = serial
        .iter()
        .zip(copy)
        .fold(0.0f64, |m, (a, b)| m.max((b - k * a).abs()));
    (k, resid / top.max(f64::MIN_POSITIVE))
}

/// One line from the numbers: every copy `k×` the serial value (a missing scale or sum), the
/// copies disagreeing (a rank that skipped a sync), or a plain difference.
fn explain(name: &str, serial: &crate::exec::tensor::Tensor, dist: &Record) -> String {
    let base = serial.to_f64();
    let tol = |a: &[f64], b: &[f64]| {
        a.iter()
            .zip(b)
            .fold(0.0f64, |m, (x, y)| m.max((x - y).abs()))
    };
    let copies: Vec<Vec<f64>> = dist.copies.iter().map(|c| c.to_f64()).collect();
    let top = base
        .iter()
        .fold(0.0f64, |m, x| m.max(x.abs()))
        .max(f64::MIN_POSITIVE);
    let bad: Vec<usize> = copies
        .iter()
        .enumerate()
        .filter(|(_, c)| c.len() != base.len() || tol(&base, c) > 1e-6 * top)
        .map(|(i, _)| i)
        .collect();
    let what = name.replace("@GRAD (step 1)", "").to_string();
    let what = if name.contains("@GRAD") {
        format!("the gradient of {what}")
    } else {
        what
    };
    if !bad.is_empty() && bad.len() < copies.len() {
        return format!(
            "{what} differs on {} of its {} copies (copies {:?}) and is right on the others: the ranks disagree, so one rank skipped or changed a sync the others ran",
            bad.len(),
            copies.len(),
            bad
        );
    }
    let spread = copies
        .iter()
        .filter(|c| c.len() == base.len())
        .map(|c| tol(&copies[0], c))
        .fold(0.0, f64::max);
    if spread > 1e-6 * top {
        return format!(
            "{what} is wrong on all {} copies, and the copies disagree with each other (by up to {spread:.3e}): each rank kept its own value, as when the all-reduce that makes them one is missing",
            copies.len()
        );
    }
    if spread > 0.0 && copies.iter().all(|c| tol(&base, c) <= 1e-6 * top) {
        return format!(
            "{what} is within rounding of serial, but its {} copies differ from each other (by up to {spread:.3e}): replicas are computed alike and must be identical, so a rank skipped or changed a sync on a value too small to show against serial",
            copies.len()
        );
    }
    let factors: Vec<(f64, f64)> = copies
        .iter()
        .filter(|c| c.len() == base.len())
        .map(|c| scale_factor(&base, c))
        .collect();
    let uniform = factors
        .iter()
        .all(|&(k, fit)| fit < 1e-3 && (k - factors[0].0).abs() < 1e-3 * k.abs().max(1.0));
    match factors.first() {
        Some(&(k, _)) if uniform && k.is_finite() && (k - 1.0).abs() > 1e-3 => {
            let n = k.round();
            let hint = if (k - n).abs() < 1e-3 && n >= 2.0 {
                format!(": {n}× is the size of a group, as when the data-parallel 1/{n} scale is missing")
            } else if k > 0.0
                && (1.0 / k - (1.0 / k).round()).abs() < 1e-3
                && (1.0 / k).round() >= 2.0
            {
                let m = (1.0 / k).round();
                format!(": 1/{m} of the value, as when {m} addends are not summed or a scale is applied twice")
            } else {
                String::new()
            };
            format!("{what} is {k:.4}× the serial value on every copy{hint}")
        }
        Some(_) | None => format!(
            "{what} differs from serial by up to {:.3e}, alike on every copy",
            copies.iter().map(|c| tol(&base, c)).fold(0.0, f64::max)
        ),
    }
}

/// The worst copy's |difference| per element, as rows × cols pooled to at most 32 × 32.
fn heat(serial: &crate::exec::tensor::Tensor, dist: &Record) -> Vec<Vec<f64>> {
    let base = serial.to_f64();
    let cols = serial.shape.last().copied().unwrap_or(1).max(1);
    let rows = (base.len() / cols).max(1);
    let worst = dist
        .copies
        .iter()
        .map(|c| c.to_f64())
        .filter(|c| c.len() == base.len())
        .max_by(|a, b| {
            let d = |c: &[f64]| {
                base.iter()
                    .zip(c)
                    .fold(0.0f64, |m, (x, y)| m.max((x - y).abs()))
            };
            d(a).total_cmp(&d(b))
        });
    let Some(worst) = worst else {
        return Vec::new();
    };
    const MAX: usize = 32;
    let (pr, pc) = (rows.div_ceil(MAX), cols.div_ceil(MAX));
    let mut out = vec![vec![0.0f64; cols.div_ceil(pc)]; rows.div_ceil(pr)];
    for (i, (a, b)) in base.iter().zip(&worst).enumerate() {
        let (r, c) = (i / cols, i % cols);
        let d = if a.is_nan() || b.is_nan() {
            f64::INFINITY
        } else {
            (a - b).abs()
        };
        let cell = &mut out[r / pr][c / pc];
        *cell = cell.max(d);
    }
    out
}
