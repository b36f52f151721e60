//! The search's worker threads: how many, and a step's jobs (units to screen, finalists
//! to price ahead) shared among them natively.

#[cfg(not(target_arch = "wasm32"))]
use super::{evaluate::Problem, exact, screen, space::Family, Screened, UnitJob, UnitScreened};

/// How many families are screened at once: one per core natively, one in the browser
/// (which runs the search in chunks between frames).
pub(super) fn workers() -> usize {
    #[cfg(not(target_arch = "wasm32"))]
    {
        crate::cores::cores()
    }
    #[cfg(target_arch = "wasm32")]
    {
        1
    }
}

/// `one` of every item, on all workers, each taking the next item in `order` (indices into
/// `items`) when it is free; the results in item order.
#[cfg(not(target_arch = "wasm32"))]
fn on_workers<I: Send, T: Send>(
    items: Vec<I>,
    order: &[usize],
    one: &(dyn Fn(I) -> T + Sync),
) -> Vec<T> {
    let items: Vec<std::sync::Mutex<Option<I>>> = items
        .into_iter()
        .map(|i| std::sync::Mutex::new(Some(i)))
        .collect();
    let units = &items;
    let next = std::sync::atomic::AtomicUsize::new(0);
    let next = &next;
    let mut done: Vec<(usize, T)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers())
            .map(|_| {
                scope.spawn(move || {
                    let mut mine = Vec::new();
                    loop {
                        let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        // Each index is in `order` once: its item is taken once.
                        let Some((i, unit)) = order.get(k).and_then(|&i| {
                            let slot = units.get(i)?;
                            let item = slot.lock().unwrap_or_else(|e| e.into_inner()).take()?;
                            Some((i, item))
                        }) else {
                            return mine;
                        };
                        mine.push((i, one(unit)));
                    }
                })
            })
            .collect();
        // A worker that panicked is a planner bug: re-raise it rather than lose its units.
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    crate::sort::sort_by_key(&mut done, |(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}

/// What a worker does in a step: screen a unit, or price a group of finalists ahead.
#[cfg(not(target_arch = "wasm32"))]
enum Work<'a> {
    Unit(UnitJob),
    Price(Vec<(Family, Vec<&'a Screened>)>),
}

/// What a worker's [`Work`] gives.
#[cfg(not(target_arch = "wasm32"))]
enum Done {
    Unit(UnitScreened),
    Price(Vec<exact::Priced>),
}

/// A step's units screened with `one` and the finalists `ahead` priced, on all workers.
/// Each worker takes the next job when it is free, the pricings first (a planning at the
/// full depth: the longest), then the units costliest first (units differ in cost by tens:
/// a pipeline is planned at many more blocks; longest first shortens the step). The order
/// changes no result: a unit sees only the step's threshold and its own points, and a
/// priced row depends only on its candidate. Results in unit order.
#[cfg(not(target_arch = "wasm32"))]
pub(super) fn on_workers_with_ahead(
    problem: &Problem,
    threshold: f64,
    chunk: Vec<UnitJob>,
    ahead: &[Screened],
    one: &(dyn Fn(UnitJob) -> UnitScreened + Sync),
) -> (Vec<UnitScreened>, Vec<exact::Priced>) {
    let refs: Vec<&Screened> = ahead.iter().collect();
    let mut items: Vec<Work> = exact::groups(&refs).into_iter().map(Work::Price).collect();
    let pricings = items.len();
    let work: Vec<usize> = chunk
        .iter()
        .map(|u| screen::unit_work(problem, &u.0, threshold))
        .collect();
    items.extend(chunk.into_iter().map(Work::Unit));
    let mut order: Vec<usize> = (0..items.len()).collect();
    crate::sort::sort_by_key(&mut order, |&i| match i.checked_sub(pricings) {
        None => (0, std::cmp::Reverse(0)),
        Some(u) => (1, std::cmp::Reverse(work[u])),
    });
    let done = on_workers(items, &order, &|w| match w {
        Work::Unit(u) => Done::Unit(one(u)),
        Work::Price(g) => Done::Price(exact::price_group(problem, &g, false)),
    });
    let (mut units, mut priced) = (Vec::new(), Vec::new());
    for d in done {
        match d {
            Done::Unit(u) => units.push(u),
            Done::Price(p) => priced.extend(p),
        }
    }
    (units, priced)
}
