//! Which collectives of a plan use the same links: the group classes of a mesh (members
//! that play the same part) and their link signatures on a topology. Two axis orders whose
//! classes land on the same links cost the same, so the search prices one of them.

use super::space::{Axis, MeshShape};
use crate::cost::device::Topology;

/// A group's link as the simulator prices it: its class and effective bandwidth.
pub(super) type LinkKey = (&'static str, u64);

/// Groups whose members play the same part (see [`group_classes`]).
type GroupClass = Vec<Vec<u32>>;

/// Every group a collective of a plan on `canonical` can use, as classes whose members
/// play the same part: per non-empty set of the mesh's axes, the groups along those axes
/// (ranks equal on the other axes), in order of their first rank; and with a `pp` axis,
/// per pair of stages, the pairs of ranks between them (the pipeline's sends). Ranks are
/// numbered canonically.
fn group_classes(canonical: &MeshShape) -> Vec<GroupClass> {
    let sizes: Vec<usize> = canonical.axes.iter().map(|&(_, n)| n).collect();
    let k = sizes.len();
    let n: usize = sizes.iter().product();
    let coords = |r: usize| -> Vec<usize> {
        let mut c = vec![0; k];
        let mut rest = r;
        for i in (0..k).rev() {
            c[i] = rest % sizes[i];
            rest /= sizes[i];
        }
        c
    };
    let mut out = Vec::new();
    for subset in 1..(1usize << k) {
        let mut groups: Vec<(Vec<usize>, Vec<u32>)> = Vec::new();
        for r in 0..n {
            let c = coords(r);
            let outside: Vec<usize> = (0..k)
                .filter(|i| subset & (1 << i) == 0)
                .map(|i| c[i])
                .collect();
            match groups.iter_mut().find(|(o, _)| *o == outside) {
                Some((_, g)) => g.push(r as u32),
                None => groups.push((outside, vec![r as u32])),
            }
        }
        out.push(groups.into_iter().map(|(_, g)| g).collect());
    }
    if let Some(pp) = canonical.axes.iter().position(|&(a, _)| a == Axis::Pp) {
        let mut pairs: Vec<((usize, usize), GroupClass)> = Vec::new();
        for a in 0..n {
            for b in a + 1..n {
                let (ca, cb) = (coords(a), coords(b));
                if (0..k).all(|i| i == pp || ca[i] == cb[i]) {
                    let stages = (ca[pp], cb[pp]);
                    let pair = vec![a as u32, b as u32];
                    match pairs.iter_mut().find(|(s, _)| *s == stages) {
                        Some((_, p)) => p.push(pair),
                        None => pairs.push((stages, vec![pair])),
                    }
                }
            }
        }
        out.extend(pairs.into_iter().map(|(_, p)| p));
    }
    out
}

fn link_key(topo: &Topology, group: &[u32]) -> LinkKey {
    let name = topo.link_for(group).map_or("", |c| c.name);
    let beta = topo
        .effective_link(group)
        .map_or(0, |l| l.beta_bytes_per_s as u64);
    (name, beta)
}

/// The links of every group of `classes` (a canonical mesh's [`group_classes`]: along
/// every set of its axes, and every pair of ranks along `pp`, the pipeline's sends): two
/// orders with the same signature price every collective alike.
pub(super) fn link_signature(topo: &Topology, classes: &[GroupClass]) -> Vec<LinkKey> {
    classes
        .iter()
        .flatten()
        .map(|g| link_key(topo, g))
        .collect()
}

/// The group classes of the canonical meshes seen, computed once each: a family's orders
/// share one canonical mesh, and its classes are enumerated over every subset of axes.
#[derive(Default)]
pub(super) struct ClassCache(Vec<(MeshShape, Vec<GroupClass>)>);

impl ClassCache {
    pub(super) fn of(&mut self, canonical: &MeshShape) -> &[GroupClass] {
        let at = match self.0.iter().position(|(m, _)| m == canonical) {
            Some(i) => i,
            None => {
                self.0.push((canonical.clone(), group_classes(canonical)));
                self.0.len() - 1
            }
        };
        &self.0[at].1
    }
}

/// Whether every group of a class runs over the same link (the same time for the same
/// bytes). Then, since the search's layouts split every dimension evenly (the planner
/// refuses others) so that a stage's ranks run programs of one dataflow, every rank of a
/// stage has the same timeline as the stage's first, and simulating that one is exact: a
/// collective of a group with one simulated member starts when it arrives, which is when
/// every member would. A test compares it with simulating every rank.
pub fn symmetric_links(topo: &Topology, canonical: &MeshShape) -> bool {
    symmetric_classes(topo, &group_classes(canonical))
}

/// [`symmetric_links`] of the classes of a canonical mesh.
pub(super) fn symmetric_classes(topo: &Topology, classes: &[GroupClass]) -> bool {
    classes.iter().all(|class| {
        let first = class.first().map(|g| link_key(topo, g));
        class.iter().all(|g| Some(link_key(topo, g)) == first)
    })
}
