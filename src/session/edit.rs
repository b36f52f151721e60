//! Editing the plan: the mesh (shape, axis names), one dim of an annotation, the text.

use super::*;

impl Session {
    /// A new mesh shape. Axes are matched from the last one (the grid's columns are always
    /// the last axis, its rows the one before, a third axis comes in front), so an axis keeps
    /// its name and every annotation on it stays on it: growing `[4] (mp)` to `[2, 4]` gives
    /// `(dp, mp)` with `mp` still 4-way. New axes take the first unused of `dp`, `d0`, `d1`...
    pub(super) fn set_mesh(&mut self, shape: Vec<usize>) {
        let Some(old) = self.mesh().cloned() else {
            return;
        };
        if shape.is_empty() || shape.len() > 3 || shape.iter().any(|&s| s == 0 || s > 8) {
            self.message = Some("a mesh has 1 to 3 axes of size 1 to 8".into());
            return;
        }
        let (n, m) = (shape.len(), old.ndim());
        // Old axis j is new axis `map[j]` (the same distance from the last axis).
        let map: Vec<Option<usize>> = (0..m)
            .map(|j| (m - 1 - j < n).then(|| n - 1 - (m - 1 - j)))
            .collect();
        let mut names: Vec<Option<String>> = vec![None; n];
        for (j, slot) in map.iter().enumerate() {
            if let Some(i) = slot {
                names[i.to_owned()] = old.dim_names().get(j).cloned();
            }
        }
        let fresh = ["dp".to_string()]
            .into_iter()
            .chain((0..).map(|k| format!("d{k}")));
        let mut fresh = fresh.filter(|c| !old.dim_names().contains(c));
        let names: Vec<String> = names
            .into_iter()
            .map(|n| n.or_else(|| fresh.next()).unwrap_or_default())
            .collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        match ProcessMesh::with_names(&shape, &refs) {
            Ok(mesh) => self.remesh(Arc::new(mesh), &map),
            Err(e) => self.message = Some(e.to_string()),
        }
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
        let same: Vec<Option<usize>> = (0..names.len()).map(Some).collect();
        match ProcessMesh::new(old.shape().to_vec(), old.process_ids().to_vec(), names) {
            Ok(m) => self.remesh(Arc::new(m), &same),
            Err(e) => self.message = Some(format!("axis name: {e}")),
        }
    }

    /// Moves every annotation onto `mesh`, old axis `j` becoming axis `map[j]` (gone when
    /// `None`), and drops what no longer fits, with a message naming each.
    fn remesh(&mut self, mesh: Arc<ProcessMesh>, map: &[Option<usize>]) {
        let moved = |a: MeshAxis| {
            map.get(a.index())
                .copied()
                .flatten()
                .and_then(MeshAxis::new)
        };
        let mut dropped = Vec::new();
        let mut kept = Vec::new();
        for ann in &self.plan.annotations {
            let mut attr = ann.attr.clone();
            attr.mesh = MeshId::JOB;
            let var = self.plan.program.var(ann.var);
            let mut lost = false;
            for d in attr.dims.iter_mut() {
                let axes: Vec<MeshAxis> = d.iter().filter_map(|&a| moved(a)).collect();
                lost |= axes.len() != d.as_slice().len();
                *d = DimAxes::from_axes(axes).unwrap_or_default();
            }
            let partial = attr.partial.to_vec();
            lost |= partial.iter().any(|&(a, _)| moved(a).is_none());
            attr.partial = partial
                .into_iter()
                .filter_map(|(a, r)| Some((moved(a)?, r)))
                .collect();
            if lost {
                dropped.push(format!(
                    "`{}`: its split over a removed mesh axis",
                    var.name
                ));
            }
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
                    self.reject_dim(
                        var,
                        dim,
                        format!("mesh axes {axes:?} are not axes of the mesh"),
                    );
                    return;
                };
                attr.dims[dim] = typed;
                attr.annotated[dim] = true;
            }
        }
        if let Err(e) = attr.validate(var, &ty.shape, &mesh) {
            self.reject_dim(var, dim, e.to_string());
            return;
        }
        self.plan.annotations.retain(|a| a.var != v);
        if attr.annotated.iter().any(|&p| p) || attr.is_partial() {
            self.plan.annotations.push(Annotation { var: v, attr });
        }
        self.selected_var = Some(var.to_string());
        self.plan_changed();
    }

    /// A dim choice that cannot be: the menu reverts and the reason shows at the dim.
    fn reject_dim(&mut self, var: &str, dim: usize, why: String) {
        self.dim_error = Some((var.to_string(), dim, why));
        self.rejections = self.rejections.wrapping_add(1);
        self.selected_var = Some(var.to_string());
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
