//! The crate's one stable sort. Every `sort_by` or `sort_by_key` call instantiates the
//! standard library's stable sort (driftsort, its quicksort and small-sorts) for its element
//! type and closure: 46 call sites made ~130 KB of the playground's wasm code. These helpers
//! sort a permutation of indices under one comparator type (`&mut dyn FnMut`), so that sort
//! is instantiated once, and move the elements into place with a small generic loop.
//! Stable, like the sorts they replace. `tests/architecture.rs` keeps the standard stable
//! sorts out of the library (`sort_unstable` on plain integers stays: one instance per
//! integer type).

use std::cmp::Ordering;

/// Sorts `v` stably by `cmp`.
pub fn sort_by<T>(v: &mut [T], mut cmp: impl FnMut(&T, &T) -> Ordering) {
    let order = stable_order(v.len(), &mut |a, b| cmp(&v[a], &v[b]));
    permute(v, &order);
}

/// Sorts `v` stably by the key `f` gives each element.
pub fn sort_by_key<T, K: Ord>(v: &mut [T], mut f: impl FnMut(&T) -> K) {
    sort_by(v, |a, b| f(a).cmp(&f(b)));
}

/// Sorts `v` stably in its natural order.
pub fn sort<T: Ord>(v: &mut [T]) {
    sort_by(v, |a, b| a.cmp(b));
}

/// The indices `0..n` in the order `cmp` sorts them, ties in index order.
fn stable_order(n: usize, cmp: &mut dyn FnMut(usize, usize) -> Ordering) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| cmp(a, b));
    order
}

/// Rearranges `v` so that `v[k]` becomes the old `v[order[k]]` (`order` a permutation of
/// `0..v.len()`), one cycle at a time.
fn permute<T>(v: &mut [T], order: &[usize]) {
    let mut placed = vec![false; v.len()];
    for start in 0..v.len() {
        if placed[start] {
            continue;
        }
        let mut at = start;
        loop {
            placed[at] = true;
            let Some(&from) = order.get(at) else {
                return;
            };
            if from == start || from >= v.len() {
                break;
            }
            v.swap(at, from);
            at = from;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorts_stably_like_the_standard_sort() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for n in 0..200 {
            let v: Vec<(u8, usize)> = (0..n)
                .map(|i| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    ((seed % 7) as u8, i)
                })
                .collect();
            let mut ours = v.clone();
            sort_by_key(&mut ours, |p| p.0);
            let mut std = v.clone();
            std.sort_by_key(|p| p.0);
            assert_eq!(ours, std, "n = {n}");
            let mut natural = v.clone();
            sort(&mut natural);
            let mut expected = v;
            expected.sort();
            assert_eq!(natural, expected);
        }
    }
}
