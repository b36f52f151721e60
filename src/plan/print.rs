//! The canonical text of a plan: mesh line, program, shard lines.

use super::Plan;
use crate::dist::{MeshAxis, ProcessMesh, TensorDistAttr};
use std::fmt::{self, Write};

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let head = self.mesh().is_some() || !self.options.is_default();
        if let Some(mesh) = self.mesh() {
            writeln!(f, "mesh {mesh}")?;
        }
        if !self.options.is_default() {
            writeln!(f, "{}", self.options)?;
        }
        if head && (!self.program.vars().is_empty() || !self.annotations.is_empty()) {
            f.write_char('\n')?;
        }
        write!(f, "{}", self.program)?;
        if !self.annotations.is_empty() && !self.program.vars().is_empty() {
            f.write_char('\n')?;
        }
        for ann in &self.annotations {
            write!(f, "shard {} ", self.program.var(ann.var).name)?;
            match self.meshes.get(ann.attr.mesh) {
                Some(mesh) => write_shard(f, &ann.attr, mesh)?,
                None => f.write_str("[?]")?,
            }
            f.write_char('\n')?;
        }
        for s in &self.stages {
            writeln!(f, "{}", super::StageLine(self, s))?;
        }
        Ok(())
    }
}

/// Writes the `[dp, -, ?] partial(mp=SUM)` part of a shard line.
pub fn write_shard(f: &mut impl Write, attr: &TensorDistAttr, mesh: &ProcessMesh) -> fmt::Result {
    let name = |a: MeshAxis| mesh.axis_name(a).to_string();
    f.write_char('[')?;
    for (i, axes) in attr.dims.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        let pinned = attr.annotated.get(i).copied().unwrap_or(false);
        match axes.as_slice() {
            [] if pinned => f.write_char('-')?,
            [] => f.write_char('?')?,
            [a] => f.write_str(&name(*a))?,
            many => write!(
                f,
                "({})",
                many.iter().map(|&a| name(a)).collect::<Vec<_>>().join(", ")
            )?,
        }
    }
    f.write_char(']')?;
    if attr.is_partial() {
        let parts: Vec<String> = attr
            .partial
            .iter()
            .map(|(a, r)| format!("{}={}", name(a), r))
            .collect();
        write!(f, " partial({})", parts.join(", "))?;
    }
    Ok(())
}
