//! Replaying the completion trace: the tensors after the first `t` events, and each event
//! as a sentence.

use super::*;

impl Session {
    /// Every forward tensor's dist attr after the first `t` completion events (the
    /// timeline's picture); `t` past the end gives the completed attrs.
    pub fn tensors_at(&self, t: usize) -> Option<Vec<TensorDistAttr>> {
        let p = self.pipeline.as_ref()?;
        self.mesh()?;
        let mut ts: Vec<TensorDistAttr> = self
            .plan
            .program
            .vars()
            .iter()
            .map(|v| TensorDistAttr::replicated(MeshId::JOB, v.ty.rank()))
            .collect();
        for a in &self.plan.annotations {
            if let Some(slot) = ts.get_mut(a.var.index()) {
                *slot = a.attr.clone();
            }
        }
        use crate::passes::complete::EventKind;
        for e in p.completed.trace.events.iter().take(t) {
            let Some(attr) = ts.get_mut(e.var.index()) else {
                continue;
            };
            match (e.kind, e.dim) {
                (EventKind::Set { .. }, Some(d)) => {
                    if let Some(slot) = attr.dims.get_mut(d as usize) {
                        *slot = e.after;
                    }
                }
                (EventKind::Partial, _) => {
                    let done = &p.completed.tensors[e.var.index()].partial;
                    attr.partial = e
                        .after
                        .iter()
                        .map(|&a| (a, done.get(a).unwrap_or(crate::dist::ReduceType::Sum)))
                        .collect();
                }
                _ => {}
            }
        }
        Some(ts)
    }

    /// One line describing completion event `i`.
    pub fn event_text(&self, i: usize) -> Option<String> {
        use crate::passes::complete::EventKind;
        let p = self.pipeline.as_ref()?;
        let e = p.completed.trace.events.get(i)?;
        let mesh = self.mesh()?;
        let names = |axes: Vec<MeshAxis>| {
            if axes.is_empty() {
                "-".to_string()
            } else {
                axes.iter()
                    .map(|&a| mesh.axis_name(a).to_string())
                    .collect::<Vec<_>>()
                    .join("+")
            }
        };
        // The completed program: the session's, with AMP's loss scaling op when AMP is on.
        let program = &p.plan.program;
        let op = program.ops().get(e.op.index())?;
        let rule = crate::spmd::registry::rule_for(op, program)
            .map(|b| b.rule.name())
            .unwrap_or("?");
        let var = &program.vars().get(e.var.index())?.name;
        let dir = match e.direction {
            crate::passes::complete::Direction::Forward => "forward",
            crate::passes::complete::Direction::Reverse => "reverse",
        };
        let what = match (e.kind, e.dim) {
            (EventKind::Set { from_outputs }, Some(d)) => format!(
                "{var} dim {d}: {} → {} (from the op's {})",
                names(e.before.to_vec()),
                names(e.after.to_vec()),
                if from_outputs { "outputs" } else { "inputs" }
            ),
            (EventKind::Partial, _) => format!("{var} partial on {}", names(e.after.to_vec())),
            (EventKind::Rejected(c), d) => format!(
                "{var} dim {}: {} rejected — {}",
                d.unwrap_or(0),
                names(e.after.to_vec()),
                c.describe()
            ),
            (EventKind::Set { .. }, None) => var.to_string(),
        };
        Some(format!(
            "sweep {} {dir} · {} {} [{rule} rule] · {what}",
            e.sweep, e.op, op.ty
        ))
    }
}
