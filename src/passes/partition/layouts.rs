//! Every local variable's layout in a rank program, without a copy per rank.
//!
//! A rank program starts with every serial variable in its completed layout, and changes a
//! few of them (a partial value settled by its all-reduce, a received one) and adds its
//! temporaries. Copying the whole table for each rank was a twentieth of the auto-planner's
//! instructions and a third of its memory at the peak (a pipeline stage's rank holds every
//! serial variable, most of them another stage's). So the serial layouts are one table
//! shared by every rank of a partition, and each rank keeps only what it changed or added,
//! behind a per-variable index.

use crate::dist::TensorDistAttr;
use std::ops::{Index, IndexMut};
use std::sync::Arc;

/// The layouts of a rank program's variables, by variable index. Reads and writes go
/// through [`Index`] and [`IndexMut`]; a write to a shared entry copies it into the rank's
/// own entries first.
#[derive(Clone, Debug)]
pub struct Layouts {
    /// The serial variables' layouts, shared by every rank of the partition.
    shared: Arc<Vec<TensorDistAttr>>,
    /// The layouts this rank changed or added.
    own: Vec<TensorDistAttr>,
    /// Per variable, its entry: in `shared` below `shared.len()`, else in `own`.
    at: Vec<u32>,
}

impl Layouts {
    /// Every variable in its entry of `shared`, with room for `extra` more.
    pub fn new(shared: Arc<Vec<TensorDistAttr>>, extra: usize) -> Layouts {
        let mut at = Vec::with_capacity(shared.len() + extra);
        at.extend(0..shared.len() as u32);
        Layouts {
            shared,
            own: Vec::with_capacity(extra),
            at,
        }
    }

    /// The number of variables.
    pub fn len(&self) -> usize {
        self.at.len()
    }

    pub fn is_empty(&self) -> bool {
        self.at.is_empty()
    }

    /// The layout of variable `v`, if it has one.
    pub fn get(&self, v: usize) -> Option<&TensorDistAttr> {
        let k = *self.at.get(v)? as usize;
        match k.checked_sub(self.shared.len()) {
            None => self.shared.get(k),
            Some(own) => self.own.get(own),
        }
    }

    /// Adds a variable's layout (the next index).
    pub fn push(&mut self, attr: TensorDistAttr) {
        self.at.push((self.shared.len() + self.own.len()) as u32);
        self.own.push(attr);
    }

    /// Every variable's layout, in order.
    pub fn iter(&self) -> impl Iterator<Item = &TensorDistAttr> + '_ {
        (0..self.len()).filter_map(|v| self.get(v))
    }

    /// Every variable's layout, copied.
    pub fn to_vec(&self) -> Vec<TensorDistAttr> {
        self.iter().cloned().collect()
    }
}

/// A table of its own (shared with no other rank).
impl From<Vec<TensorDistAttr>> for Layouts {
    fn from(attrs: Vec<TensorDistAttr>) -> Layouts {
        Layouts::new(Arc::new(attrs), 0)
    }
}

impl Index<usize> for Layouts {
    type Output = TensorDistAttr;

    /// Panics on an index past the last variable, as a slice does.
    fn index(&self, v: usize) -> &TensorDistAttr {
        let k = self.at[v] as usize;
        match k.checked_sub(self.shared.len()) {
            None => &self.shared[k],
            Some(own) => &self.own[own],
        }
    }
}

impl IndexMut<usize> for Layouts {
    /// Copies a shared entry into the rank's own first. Panics past the last variable.
    fn index_mut(&mut self, v: usize) -> &mut TensorDistAttr {
        let shared = self.shared.len();
        let k = self.at[v] as usize;
        let own = match k.checked_sub(shared) {
            Some(own) => own,
            None => {
                self.own.push(self.shared[k].clone());
                self.at[v] = (shared + self.own.len() - 1) as u32;
                self.own.len() - 1
            }
        };
        &mut self.own[own]
    }
}

/// Equal when every variable's layout is, however they are stored.
impl PartialEq for Layouts {
    fn eq(&self, other: &Layouts) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}
