//! A program's variable table, in two shared parts.
//!
//! Every rank program of a partition starts with the same variables (the serial ones at
//! their local shapes, then the ZeRO shards) and appends a few temporaries. Copying the
//! common part into each rank program cost an allocation of a thousand-odd variables per
//! rank and an atomic reference-count update per name, both ways, contended between the
//! threads that build ranks at once (a twentieth of the auto-planner's time) and a fifth of
//! its peak heap. So the common part is one `Arc` shared by every rank program, and each
//! program's own variables follow it in a second, also copy-on-write, so cloning a program
//! stays two reference-count updates.

use super::types::Var;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::ops::Index;
use std::sync::Arc;

/// The variables of a program, by id: the shared part's first, then the program's own.
#[derive(Clone, Debug, Default)]
pub struct Vars {
    shared: Arc<Vec<Var>>,
    own: Arc<Vec<Var>>,
}

impl Vars {
    /// `shared` (another program's too), then none of its own.
    pub fn sharing(shared: Arc<Vec<Var>>) -> Vars {
        Vars {
            shared,
            own: Arc::default(),
        }
    }

    /// The number of variables.
    pub fn len(&self) -> usize {
        self.shared.len() + self.own.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Variable `i`, if there is one.
    pub fn get(&self, i: usize) -> Option<&Var> {
        match i.checked_sub(self.shared.len()) {
            None => self.shared.get(i),
            Some(own) => self.own.get(own),
        }
    }

    /// The first variable, if any.
    pub fn first(&self) -> Option<&Var> {
        self.get(0)
    }

    /// Every variable, in id order.
    pub fn iter(&self) -> std::iter::Chain<std::slice::Iter<'_, Var>, std::slice::Iter<'_, Var>> {
        self.shared.iter().chain(self.own.iter())
    }

    /// Every variable, copied.
    pub fn to_vec(&self) -> Vec<Var> {
        self.iter().cloned().collect()
    }

    /// Appends a variable (copying the program's own part first if another program shares
    /// it).
    pub(super) fn push(&mut self, var: Var) {
        Arc::make_mut(&mut self.own).push(var);
    }

    /// Every variable, mutably (each part copied first if shared).
    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Var> {
        Arc::make_mut(&mut self.shared)
            .iter_mut()
            .chain(Arc::make_mut(&mut self.own).iter_mut())
    }

    /// The first `n` variables as a table of their own.
    pub(super) fn prefix(&self, n: usize) -> Vars {
        Vars::from(self.iter().take(n).cloned().collect::<Vec<Var>>())
    }

    /// Whether both hold the same variables: at once when they share their parts.
    pub fn same(&self, other: &Vars) -> bool {
        if Arc::ptr_eq(&self.shared, &other.shared) {
            return Arc::ptr_eq(&self.own, &other.own) || self.own == other.own;
        }
        self == other
    }
}

/// A table of its own.
impl From<Vec<Var>> for Vars {
    fn from(vars: Vec<Var>) -> Vars {
        Vars {
            shared: Arc::default(),
            own: Arc::new(vars),
        }
    }
}

impl Index<usize> for Vars {
    type Output = Var;

    /// Panics past the last variable, as a slice does.
    fn index(&self, i: usize) -> &Var {
        match i.checked_sub(self.shared.len()) {
            None => &self.shared[i],
            Some(own) => &self.own[own],
        }
    }
}

impl<'a> IntoIterator for &'a Vars {
    type Item = &'a Var;
    type IntoIter = std::iter::Chain<std::slice::Iter<'a, Var>, std::slice::Iter<'a, Var>>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// Equal when they hold equal variables in the same order, however split.
impl PartialEq for Vars {
    fn eq(&self, other: &Vars) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

/// As the list of variables.
impl Serialize for Vars {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for Vars {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Vars, D::Error> {
        Vec::<Var>::deserialize(d).map(Vars::from)
    }
}
