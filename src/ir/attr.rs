//! Typed operator attributes.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// One attribute value. Floats print with Rust's shortest round-trip form, so the text
/// format reproduces them bit for bit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Attr {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Ints(Vec<i64>),
}

/// The kind of an attribute, for schemas and error messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttrKind {
    Bool,
    Int,
    Float,
    Str,
    Ints,
}

impl AttrKind {
    /// A human name for error messages.
    pub fn name(self) -> &'static str {
        match self {
            AttrKind::Bool => "bool",
            AttrKind::Int => "int",
            AttrKind::Float => "float",
            AttrKind::Str => "string",
            AttrKind::Ints => "int list",
        }
    }
}

impl Attr {
    /// The kind of this value.
    pub fn kind(&self) -> AttrKind {
        match self {
            Attr::Bool(_) => AttrKind::Bool,
            Attr::Int(_) => AttrKind::Int,
            Attr::Float(_) => AttrKind::Float,
            Attr::Str(_) => AttrKind::Str,
            Attr::Ints(_) => AttrKind::Ints,
        }
    }
}

/// Writes `s` as a double-quoted string with `\"`, `\\` and `\n` escaped.
pub fn write_quoted(f: &mut impl fmt::Write, s: &str) -> fmt::Result {
    f.write_char('"')?;
    for c in s.chars() {
        match c {
            '"' => f.write_str("\\\"")?,
            '\\' => f.write_str("\\\\")?,
            '\n' => f.write_str("\\n")?,
            c => f.write_char(c)?,
        }
    }
    f.write_char('"')
}

impl fmt::Display for Attr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Attr::Bool(b) => write!(f, "{b}"),
            Attr::Int(i) => write!(f, "{i}"),
            Attr::Float(x) => write!(f, "{x:?}"),
            Attr::Str(s) => write_quoted(f, s),
            Attr::Ints(v) => {
                f.write_str("[")?;
                for (i, x) in v.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{x}")?;
                }
                f.write_str("]")
            }
        }
    }
}

/// Attributes of one op, ordered by name so printing is canonical. Copy-on-write and shared:
/// the partitioner stamps the same collective attributes (group, ring, reduce type) onto
/// thousands of ops, and a clone is a reference count, not a map.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Attrs(Arc<BTreeMap<String, Attr>>);

impl Attrs {
    /// No attributes.
    pub fn new() -> Attrs {
        Attrs::default()
    }

    /// The attribute called `name`.
    pub fn get(&self, name: &str) -> Option<&Attr> {
        self.0.get(name)
    }

    /// Whether an attribute called `name` is set.
    pub fn contains_key(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }

    /// Sets `name` (copying the map first if it is shared); returns the old value.
    pub fn insert(&mut self, name: String, value: Attr) -> Option<Attr> {
        Arc::make_mut(&mut self.0).insert(name, value)
    }

    /// Removes `name` (copying the map first if it is shared).
    pub fn remove(&mut self, name: &str) -> Option<Attr> {
        if !self.0.contains_key(name) {
            return None;
        }
        Arc::make_mut(&mut self.0).remove(name)
    }

    /// The attributes in name order.
    pub fn iter(&self) -> std::collections::btree_map::Iter<'_, String, Attr> {
        self.0.iter()
    }

    /// How many attributes are set.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no attribute is set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl FromIterator<(String, Attr)> for Attrs {
    fn from_iter<I: IntoIterator<Item = (String, Attr)>>(iter: I) -> Attrs {
        Attrs(Arc::new(iter.into_iter().collect()))
    }
}

impl<'a> IntoIterator for &'a Attrs {
    type Item = (&'a String, &'a Attr);
    type IntoIter = std::collections::btree_map::Iter<'a, String, Attr>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}
