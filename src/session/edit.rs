//! Editing the plan: the mesh (shape, axis names), one dim of an annotation, the text.

use super::*;

impl Session {
    pub(super) fn set_mesh(&mut self, shape: Vec<usize>) {
        let Some(old) = self.mesh().cloned() else {
            return;
        };
        if shape.is_empty() || shape.len() > 3 || shape.iter().any(|&s| s == 0 || s > 8) {
            self.message = Some("a mesh has 1 to 3 axes of size 1 to 8".into());
            return;
        }
        let names: Vec<String> = (0..shape.len())
            .map(|i| {
                old.dim_names()
                    .get(i)
                    .cloned()
                    .unwrap_or_else(|| format!("d{i}"))
            })
            .collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let mesh = match ProcessMesh::with_names(&shape, &refs) {
            Ok(m) => Arc::new(m),
            Err(e) => {
                self.message = Some(e.to_string());
                return;
            }
        };
        self.remesh(mesh);
    }

    pub(super) fn rename_axis(&mut self, axis: usize, name: &str) {
        let Some(old) = self.mesh().cloned() else {
            return;
        };
        let mut names = old.dim_names().to_vec();
        if axis >= names.len() {
            return;
        }
        names[axis] = name.trim().to_string();
        match ProcessMesh::new(old.shape().to_vec(), old.process_ids().to_vec(), names) {
            Ok(m) => self.remesh(Arc::new(m)),
            Err(e) => self.message = Some(format!("axis name: {e}")),
        }
    }

    /// Moves every annotation onto `mesh`, dropping what no longer fits (with a message).
    fn remesh(&mut self, mesh: Arc<ProcessMesh>) {
        let mut dropped = Vec::new();
        let mut kept = Vec::new();
        for ann in &self.plan.annotations {
            let mut attr = ann.attr.clone();
            attr.mesh = MeshId::JOB;
            attr.dims
                .iter_mut()
                .for_each(|d| d.retain(|a| a.index() < mesh.ndim()));
            attr.partial.retain(|a, _| a.index() < mesh.ndim());
            let var = self.plan.program.var(ann.var);
            match attr.validate(&var.name, &var.ty.shape, &mesh) {
                Ok(()) => kept.push(Annotation { var: ann.var, attr }),
                Err(e) => dropped.push(e.to_string()),
            }
        }
        let stages = |m: &ProcessMesh| crate::dist::Stages::of(m, 1).stages;
        if self.mesh().is_none_or(|old| stages(old) != stages(&mesh)) {
            // Another number of pipeline stages: the boundaries are split again.
            self.plan.stages.clear();
        }
        self.plan.set_mesh(mesh);
        self.plan.annotations = kept;
        if !dropped.is_empty() {
            self.message = Some(format!(
                "dropped annotations that no longer fit: {}",
                dropped.join("; ")
            ));
        }
        self.plan_changed();
    }

    pub(super) fn set_dim(&mut self, var: &str, dim: usize, choice: DimChoice) {
        let (Some(v), Some(mesh)) = (self.plan.program.var_id(var), self.mesh().cloned()) else {
            self.message = Some(format!("unknown variable `{var}`"));
            return;
        };
        let ty = self.plan.program.var(v).ty.clone();
        if dim >= ty.rank() {
            self.message = Some(format!("`{var}` has no dim {dim}"));
            return;
        }
        let mut attr = self
            .plan
            .annotation(v)
            .cloned()
            .unwrap_or_else(|| TensorDistAttr::replicated(MeshId::JOB, ty.rank()));
        match choice {
            DimChoice::Free => {
                attr.dims[dim].clear();
                attr.annotated[dim] = false;
            }
            DimChoice::Replicated => {
                attr.dims[dim].clear();
                attr.annotated[dim] = true;
            }
            DimChoice::Axes(axes) => {
                let typed = axes
                    .iter()
                    .map(|&a| MeshAxis::new(a).filter(|a| a.index() < mesh.ndim()))
                    .collect::<Option<Vec<_>>>()
                    .and_then(DimAxes::from_axes);
                let Some(typed) = typed else {
                    self.message = Some(format!(
                        "`{var}` dim {dim}: mesh axes {axes:?} are not axes of the mesh"
                    ));
                    return;
                };
                attr.dims[dim] = typed;
                attr.annotated[dim] = true;
            }
        }
        if let Err(e) = attr.validate(var, &ty.shape, &mesh) {
            self.message = Some(e.to_string());
            return;
        }
        self.plan.annotations.retain(|a| a.var != v);
        if attr.annotated.iter().any(|&p| p) || attr.is_partial() {
            self.plan.annotations.push(Annotation { var: v, attr });
        }
        self.selected_var = Some(var.to_string());
        self.plan_changed();
    }

    pub(super) fn edit_text(&mut self, text: String) {
        self.text = text;
        match parse_plan(&self.text) {
            Err(errors) => {
                self.text_errors = errors
                    .into_iter()
                    .map(|e| (e.line, e.col, e.message))
                    .collect()
            }
            Ok((plan, map)) => {
                let issues = crate::plan::verify_plan(&plan);
                if !issues.is_empty() || plan.mesh().is_none() {
                    self.text_errors = issues
                        .iter()
                        .map(|i| {
                            let (line, col) = map.locate(&plan, &i.subject);
                            (line, col, i.message.clone())
                        })
                        .collect();
                    if plan.mesh().is_none() {
                        self.text_errors.push((
                            1,
                            1,
                            "the plan needs a mesh: `mesh [2, 4] (dp, mp)`".into(),
                        ));
                    }
                    return;
                }
                self.text_errors.clear();
                let text = std::mem::take(&mut self.text);
                self.plan = plan;
                self.scenario = "custom".into();
                self.timeline = usize::MAX;
                self.replan();
                self.text = text;
            }
        }
    }
}
