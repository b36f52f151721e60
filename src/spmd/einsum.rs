//! The einsum-notation helper most rules are written with.
//!
//! Each tensor dim gets a letter; dims that share a letter must be split the same way.
//! `merge` walks the tensors in order and builds letter -> mesh axes:
//!
//! ```text
//! matmul  mk,kn->mn   x[0,-1] y[-1,-1]  =>  m:[0] k:[] n:[]   out [0,-1]
//! add     abc,bc->abc x[0,-1,-1] y[1,-1] => a:[0] b:[1] c:[]  out [0,1,-1]
//! ```
//!
//! The letter `1` marks a broadcast size-1 dim: it takes part in nothing and is replicated.

use super::{DimAxes, Dims, MeshAxis, Result, SpmdError};

/// Letter -> mesh axes, in the order letters were first seen.
#[derive(Clone, Debug, Default)]
pub struct AxisMap {
    /// Inline: a rule sees a handful of letters, and rules run for every op of every sweep.
    entries: smallvec::SmallVec<[(char, DimAxes); 8]>,
}

impl AxisMap {
    /// The mesh axes of `letter` (empty if unknown or broadcast).
    pub fn get(&self, letter: char) -> DimAxes {
        self.entries
            .iter()
            .find(|(l, _)| *l == letter)
            .map_or(DimAxes::WHOLE, |(_, v)| *v)
    }

    fn entry(&mut self, letter: char) -> Option<&mut DimAxes> {
        self.entries
            .iter_mut()
            .find(|(l, _)| *l == letter)
            .map(|(_, v)| v)
    }

    /// Sets the mesh axes of `letter`.
    pub fn set(&mut self, letter: char, axes: DimAxes) {
        match self.entry(letter) {
            Some(v) => *v = axes,
            None => self.entries.push((letter, axes)),
        }
    }

    /// Every (letter, axes) pair.
    pub fn iter(&self) -> impl Iterator<Item = (char, DimAxes)> + '_ {
        self.entries.iter().map(|(l, v)| (*l, *v))
    }

    /// The dims of a tensor written with `letters`.
    pub fn dims(&self, letters: &str) -> Dims {
        letters
            .chars()
            .map(|l| {
                if l == '1' {
                    DimAxes::WHOLE
                } else {
                    self.get(l)
                }
            })
            .collect()
    }

    /// Mesh axes of letters that are not in `kept` (a contraction or reduction), sorted.
    pub fn contracted_axes(&self, kept: &str) -> Vec<MeshAxis> {
        let mut axes: Vec<MeshAxis> = self
            .entries
            .iter()
            .filter(|(l, _)| !kept.contains(*l))
            .flat_map(|(_, v)| v.iter().copied())
            .collect();
        axes.sort_unstable();
        axes.dedup();
        axes
    }
}

/// How two different shardings of one letter combine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnAxisConflict {
    /// Raise, as Paddle's elementwise, cross-entropy and embedding rules do.
    Error,
    /// Co-shard: append the new mesh axes that no other letter uses and that keep the dim
    /// divisible (Paddle 3.3.1 matmul). `sizes` gives each letter's dim size.
    CoShard,
}

/// What to do when one mesh axis ends up on several letters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnMeshConflict {
    /// The letter that took the mesh axis first keeps it; later letters lose it.
    KeepFirst,
    /// The letter earliest in this priority string keeps it (letters not in it rank after
    /// all that are, in the order they took the axis). Paddle 3.3.1's matmul keeps output
    /// letters (batch, m, n) over the contracted k.
    KeepByPriority(&'static str),
    /// Raise (Paddle's embedding rule).
    Error,
}

/// Letter sizes and mesh sizes, needed to decide whether co-sharding divides.
pub struct Sizes<'a> {
    pub letters: Vec<(char, usize)>,
    pub mesh: &'a [usize],
}

impl Sizes<'_> {
    fn divides(&self, letter: char, axes: &[MeshAxis]) -> bool {
        let size = self
            .letters
            .iter()
            .find(|(l, _)| *l == letter)
            .map_or(1, |(_, s)| *s);
        let shards: usize = axes
            .iter()
            .map(|a| self.mesh.get(a.index()).copied().unwrap_or(1))
            .product();
        shards > 0 && size % shards == 0
    }
}

/// Letter sizes gathered from `(letters, shape)` pairs (the largest, so broadcasts count).
pub fn letter_sizes(pairs: &[(&str, &[usize])]) -> Vec<(char, usize)> {
    let mut sizes: Vec<(char, usize)> = Vec::new();
    for (letters, shape) in pairs {
        for (l, &s) in letters.chars().zip(shape.iter()) {
            match sizes.iter_mut().find(|(m, _)| *m == l) {
                Some(e) => e.1 = e.1.max(s),
                None => sizes.push((l, s)),
            }
        }
    }
    sizes
}

/// Merges the shardings of several tensors written in letters (Paddle's
/// `ShardingMergeForTensors`), resolving conflicts as asked.
pub fn merge(
    tensors: &[(&str, &Dims)],
    on_axis: OnAxisConflict,
    on_mesh: OnMeshConflict,
    sizes: Option<&Sizes>,
) -> Result<AxisMap> {
    let mut map = AxisMap::default();
    // For each mesh axis, the letters that took it, in the order they took it.
    let mut takers: smallvec::SmallVec<[(MeshAxis, smallvec::SmallVec<[char; 4]>); 4]> =
        smallvec::SmallVec::new();
    for (letters, dims) in tensors {
        for (letter, axes) in letters.chars().zip(dims.iter()) {
            if letter == '1' {
                continue;
            }
            let merged = match map.entry(letter).copied() {
                None => *axes,
                Some(current) => merge_axis(letter, &current, axes, on_axis, &map, sizes)?,
            };
            for &a in &merged {
                match takers.iter_mut().find(|(m, _)| *m == a) {
                    Some((_, ls)) if !ls.contains(&letter) => ls.push(letter),
                    Some(_) => {}
                    None => takers.push((a, smallvec::smallvec![letter])),
                }
            }
            map.set(letter, merged);
        }
    }
    for (mesh_axis, letters) in &takers {
        if letters.len() < 2 {
            continue;
        }
        match on_mesh {
            OnMeshConflict::KeepFirst | OnMeshConflict::KeepByPriority(_) => {
                let rank = |l: char| match on_mesh {
                    OnMeshConflict::KeepByPriority(order) => order.find(l).unwrap_or(usize::MAX),
                    OnMeshConflict::KeepFirst | OnMeshConflict::Error => 0,
                };
                // min_by_key returns the first of equal keys: encounter order breaks ties.
                let keeper = letters.iter().copied().min_by_key(|&l| rank(l));
                for &l in letters.iter().filter(|&&l| Some(l) != keeper) {
                    if let Some(v) = map.entry(l) {
                        v.retain(|a| a != *mesh_axis);
                    }
                }
            }
            OnMeshConflict::Error => {
                return Err(SpmdError::SharedMeshAxis {
                    letters: letters.to_vec(),
                    mesh_axis: *mesh_axis,
                });
            }
        }
    }
    Ok(map)
}

fn merge_axis(
    letter: char,
    current: &DimAxes,
    new: &DimAxes,
    on_axis: OnAxisConflict,
    map: &AxisMap,
    sizes: Option<&Sizes>,
) -> Result<DimAxes> {
    if new.is_empty() || current == new {
        return Ok(*current);
    }
    if current.is_empty() {
        return Ok(*new);
    }
    match on_axis {
        OnAxisConflict::Error => Err(SpmdError::TwoMeshAxes {
            letter,
            new: new.to_vec(),
            current: current.to_vec(),
        }),
        OnAxisConflict::CoShard => {
            let mut merged = *current;
            for &a in new.iter() {
                let used_elsewhere = map.iter().any(|(l, axes)| l != letter && axes.contains(&a));
                if merged.contains(&a) || used_elsewhere {
                    continue;
                }
                let mut trial = merged;
                if trial.push(a) && sizes.is_none_or(|s| s.divides(letter, &trial)) {
                    merged = trial;
                }
            }
            // Paddle 3.3.1 orders a co-shard by mesh axis size, largest first (ties keep
            // the order the axes were met): on [2, 4], x batch 0 and y batch 1 give [1, 0].
            if let Some(s) = sizes {
                let mut axes: Vec<MeshAxis> = merged.to_vec();
                crate::sort::sort_by_key(&mut axes, |a| {
                    std::cmp::Reverse(s.mesh.get(a.index()).copied().unwrap_or(1))
                });
                merged = DimAxes::from_axes(axes).unwrap_or(merged);
            }
            Ok(merged)
        }
    }
}

/// The first `n` letters of the alphabet Paddle uses for tensor dims.
pub fn letters(n: usize) -> &'static str {
    const ALPHABET: &str = "abcdefghijlopqrstuvwxyz";
    &ALPHABET[..n.min(ALPHABET.len())]
}

/// Keeps each mesh axis on the last dim that claims it, as converting a dims mapping to
/// placements and back does in Paddle 3.3.1 (relu `[0, 0]` gives `[-1, 0]`).
pub fn normalize_through_placements(dims: &Dims) -> Dims {
    let mut out: Dims = smallvec::smallvec![DimAxes::WHOLE; dims.len()];
    let mut seen: Vec<MeshAxis> = Vec::new();
    for (d, axes) in dims.iter().enumerate().rev() {
        for &a in axes.iter() {
            if !seen.contains(&a) {
                seen.push(a);
                out[d].push(a);
            }
        }
    }
    out
}
