//! Typed operator attributes.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

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

/// Attributes of one op, ordered by name so printing is canonical.
pub type Attrs = BTreeMap<String, Attr>;
