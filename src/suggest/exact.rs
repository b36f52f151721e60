//! Pricing finalists exactly at the full depth: grouped so ZeRO stage twins share one
//! planning, each group on its own thread natively; and the first batch the finish prices
//! (which `Search::likely_finalists` has the last screening step price ahead).

use super::evaluate::{Planned, Problem};
use super::space::{Family, MeshShape};
use super::Refusal;
use super::{shape_of, Row, Screened};

/// The first batch of finalists the finish prices: the `size` fastest of `fitting`
/// (ascending by screened step time), and the likely runner-up (the best screened plan of
/// another shape than the leader) if none of them is, so it is priced with them, in
/// parallel, not after.
pub(super) fn first_batch(fitting: &[Screened], size: usize) -> Vec<Screened> {
    let to = size.min(fitting.len());
    let mut batch = fitting[..to].to_vec();
    if let Some(first) = fitting.first() {
        let leader = shape_of(&first.candidate);
        let differs = |s: &Screened| shape_of(&s.candidate) != leader;
        if !batch.iter().any(differs) {
            batch.extend(fitting[to..].iter().find(|s| differs(s)).cloned());
        }
    }
    batch
}

/// By family, and the families by ZeRO stage's twins (one planning, re-partitioned per
/// stage: `Planned::rezero`), lowest stage first.
pub(super) fn groups<'a>(finalists: &[&'a Screened]) -> Vec<Vec<(Family, Vec<&'a Screened>)>> {
    let mut groups: Vec<Vec<(Family, Vec<&Screened>)>> = Vec::new();
    let base = |f: &Family| Family {
        zero: 0,
        ..f.clone()
    };
    for &s in finalists {
        let key = base(&s.family);
        let at = groups
            .iter()
            .position(|g| g.first().is_some_and(|(f, _)| base(f) == key));
        let at = at.unwrap_or_else(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        let group = &mut groups[at];
        match group.iter_mut().find(|(f, _)| *f == s.family) {
            Some((_, v)) => v.push(s),
            None => group.push((s.family.clone(), vec![s])),
        }
    }
    for g in &mut groups {
        crate::sort::sort_by_key(g, |(f, _)| f.zero);
    }
    groups
}

/// Every group priced (natively each on its own thread); `alone`: the only work running.
pub(super) fn price_groups(
    problem: &Problem,
    groups: Vec<Vec<(Family, Vec<&Screened>)>>,
    alone: bool,
) -> Vec<Priced> {
    let price = move |group: Vec<(Family, Vec<&Screened>)>| price_group(problem, &group, alone);
    #[cfg(not(target_arch = "wasm32"))]
    {
        std::thread::scope(|scope| {
            let handles: Vec<_> = groups
                .into_iter()
                .map(|g| scope.spawn(move || price(g)))
                .collect();
            // A panic is a planner bug: re-raised, not a finalist lost.
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                .collect()
        })
    }
    #[cfg(target_arch = "wasm32")]
    {
        groups.into_iter().flat_map(price).collect()
    }
}

/// The rows priced of `priced`, in order (the refused left out).
pub(super) fn rows(priced: Vec<Priced>) -> Vec<Row> {
    priced
        .into_iter()
        .filter_map(Result::ok)
        .flatten()
        .filter_map(Result::ok)
        .collect()
}

/// A family's finalists priced: each member's row or why not, or why the family could not
/// be planned with how many members that refuses.
pub(super) type Priced = Result<Vec<Result<Row, Refusal>>, (Refusal, usize)>;

/// The finalists of families that differ only in ZeRO stage (lowest first) priced exactly
/// at full depth: one planning, re-partitioned for each later stage (`Planned::rezero`,
/// equal to planning afresh), shared by each family's orders and schedules (the groups are
/// priced in parallel natively). A family's error counts the members it refuses.
pub(super) fn price_group(
    problem: &Problem,
    group: &[(Family, Vec<&Screened>)],
    alone: bool,
) -> Vec<Priced> {
    let orders: Vec<MeshShape> = group
        .iter()
        .flat_map(|(_, m)| m.iter().map(|s| s.candidate.mesh.clone()))
        .collect();
    let layers = problem.config.layers;
    let mut shared: Option<Planned> = None;
    group
        .iter()
        .map(|(family, members)| {
            let reused = shared
                .take()
                .and_then(|mut p| p.rezero(family.zero).ok().map(|()| p));
            let planned = match reused {
                Some(p) => Ok(p),
                // Alone on the machine when it is the only group priced (often: the
                // runner-up).
                None if alone => Planned::alone(problem, family, layers, &orders),
                None => Planned::new(problem, family, layers, &orders),
            };
            let mut planned = planned.map_err(|e| (e, members.len()))?;
            let rows = members
                .iter()
                .map(|s| {
                    planned
                        .estimate(problem, &s.candidate.mesh, s.candidate.schedule)
                        .map(|e| {
                            let t = planned.terms(&e);
                            Row {
                                fits: t.peak_bytes <= problem.budget_bytes,
                                candidate: Some(s.candidate.clone()),
                                terms: t,
                            }
                        })
                })
                .collect();
            shared = Some(planned);
            Ok(rows)
        })
        .collect()
}
