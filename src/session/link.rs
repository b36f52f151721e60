//! The URL hash: the whole state as a link, and back; the percent codec.

use super::*;

impl Session {
    /// The state as a URL hash (without `#`).
    pub fn to_hash(&self) -> String {
        let mut parts = Vec::new();
        match Scenario::by_name(&self.scenario).filter(|_| self.scenario != "custom") {
            Some(_) => {
                parts.push(format!("s={}", self.scenario));
                if let Some(n) = self.layers {
                    parts.push(format!("layers={n}"));
                }
                if let Some(m) = self.mesh() {
                    parts.push(format!("mesh={}", encode(&mesh_spec(m))));
                }
                let shards = self.plan.shard_specs().join(";");
                parts.push(format!("shard={}", encode(&shards)));
            }
            None => parts.push(format!("text={}", encode(&self.text))),
        }
        parts.push(format!("stage={}", self.stage.id()));
        if self.timeline < self.events() {
            parts.push(format!("t={}", self.timeline));
        }
        if let Some(v) = &self.selected_var {
            parts.push(format!("var={}", encode(v)));
        }
        parts.push(format!("rank={}", self.selected_rank));
        parts.push(format!("n={}", self.notation.id()));
        if self.megatron_sums {
            parts.push("ms=1".into());
        }
        // A scenario link carries the ZeRO stage where it is not the scenario's own (a text
        // link has it in its options).
        if self.scenario != "custom" && self.plan.options.zero != self.scenario_options().zero {
            parts.push(format!("zero={}", self.plan.options.zero));
        }
        if self.topology != TOPOLOGIES[0] {
            parts.push(format!("topo={}", encode(&self.topology)));
        }
        if self.scenario != "custom" {
            parts.extend(self.pipeline_link());
        }
        if self.gantt_ideal {
            parts.push("ideal=1".into());
        }
        parts.join("&")
    }

    /// The planning options a link carries: Megatron sums, the ZeRO stage, the topology.
    fn with_link_options(
        mut self,
        fields: &std::collections::HashMap<String, String>,
    ) -> Result<Session, LinkError> {
        match fields.get("ms").map(String::as_str) {
            None | Some("0") => {}
            Some("1") => self = self.reduce(Action::SetMegatronSums(true)),
            Some(other) => {
                return Err(LinkError::Field {
                    key: "ms",
                    expected: "0 or 1",
                    value: clip(other),
                })
            }
        }
        if let Some(z) = fields.get("zero") {
            let stage = z.parse::<i64>().map_err(|_| LinkError::Field {
                key: "zero",
                expected: "0 to 3",
                value: clip(z),
            })?;
            let stage = crate::plan::PlanOptions::check_zero(stage).map_err(LinkError::Option)?;
            self = self.reduce(Action::SetZero(stage));
        }
        if let Some(t) = fields.get("topo") {
            if !TOPOLOGIES.contains(&t.as_str()) {
                return Err(LinkError::Unknown {
                    what: "topology",
                    value: clip(t),
                });
            }
            self.topology = t.clone();
        }
        self = self.with_pipeline_link(fields)?;
        Ok(self)
    }

    /// The options the session's scenario opens with (a published model trains with
    /// Adam, mixed precision, ZeRO-1 and micro-batches; the toys with the defaults).
    fn scenario_options(&self) -> crate::plan::PlanOptions {
        Scenario::by_name(&self.scenario)
            .and_then(|s| s.published.map(|p| p.options()))
            .unwrap_or_default()
    }

    /// A scenario link's pipeline fields: schedule, micro-batches, chunks, stage starts.
    fn pipeline_link(&self) -> Vec<String> {
        let o = &self.plan.options;
        let mut parts = Vec::new();
        if o.schedule != crate::plan::ScheduleKind::default() {
            parts.push(format!("sched={}", o.schedule.name()));
        }
        if o.micro_batches != self.scenario_options().micro_batches {
            parts.push(format!("mb={}", o.micro_batches));
        }
        if o.chunks != 1 {
            parts.push(format!("v={}", o.chunks));
        }
        if !self.plan.stages.is_empty() {
            let starts: Vec<String> = self.stage_starts().iter().map(|s| s.to_string()).collect();
            parts.push(format!("pps={}", starts.join(",")));
        }
        parts
    }

    fn with_pipeline_link(
        mut self,
        fields: &std::collections::HashMap<String, String>,
    ) -> Result<Session, LinkError> {
        let count = |key: &'static str, v: &str| {
            v.parse::<i64>().map_err(|_| LinkError::Field {
                key,
                expected: "a count",
                value: clip(v),
            })
        };
        if let Some(v) = fields.get("sched") {
            let k = crate::plan::ScheduleKind::from_name(v).ok_or_else(|| LinkError::Unknown {
                what: "schedule",
                value: clip(v),
            })?;
            self.plan.options.schedule = k;
        }
        if let Some(v) = fields.get("mb") {
            self.plan.options.micro_batches =
                crate::plan::PlanOptions::check_count("mb", count("mb", v)?)
                    .map_err(LinkError::Option)?;
        }
        if let Some(v) = fields.get("v") {
            self.plan.options.chunks = crate::plan::PlanOptions::check_count("v", count("v", v)?)
                .map_err(LinkError::Option)?;
        }
        if fields.contains_key("sched") || fields.contains_key("mb") || fields.contains_key("v") {
            self.plan_changed();
        }
        if let Some(v) = fields.get("pps") {
            let starts: Vec<usize> = v
                .split(',')
                .map(|x| x.parse::<usize>())
                .collect::<Result<_, _>>()
                .map_err(|_| LinkError::Field {
                    key: "pps",
                    expected: "op numbers",
                    value: clip(v),
                })?;
            self.set_stage_starts(starts)
                .map_err(|e| LinkError::StageStarts(Box::new(e)))?;
        }
        if fields.get("ideal").map(String::as_str) == Some("1") {
            self.gantt_ideal = true;
        }
        Ok(self)
    }

    /// A scenario link's session: the scenario (with its `layers`), then the link's
    /// `parallel`, `mesh` and `shard` fields, planned once.
    fn scenario_from_link(
        fields: &std::collections::HashMap<String, String>,
    ) -> Result<Session, LinkError> {
        let name = fields
            .get("s")
            .map(String::as_str)
            .unwrap_or(DEFAULT_SCENARIO);
        // Planned once, below, after the link's mesh and annotations.
        let mut s = match fields.get("layers") {
            None => Session::scenario_unplanned(name, None)?,
            Some(n) => {
                let n = n.parse::<usize>().map_err(|_| LinkError::Field {
                    key: "layers",
                    expected: "a count",
                    value: clip(n),
                })?;
                Session::scenario_unplanned(name, Some(n))
                    .map_err(|e| LinkError::Layers(Box::new(e)))?
            }
        };
        if let Some(spec) = fields.get("parallel") {
            if fields.contains_key("mesh") {
                return Err(LinkError::ParallelAndMesh);
            }
            s.apply_parallel(spec)?;
        }
        if let Some(mesh) = fields.get("mesh") {
            let m = crate::plan::parse_mesh_spec(mesh).map_err(LinkError::Mesh)?;
            if m.size() > MAX_LINK_MESH {
                return Err(LinkError::MeshTooLarge);
            }
            // The scenario's annotations were written for its own mesh: carry each one
            // over by axis name where the new mesh has those axes and they divide the
            // dims, and drop the rest (a link's own `shard` field replaces them below).
            let specs = s.plan.shard_specs();
            let m = Arc::new(m);
            s.plan.set_mesh(m.clone());
            s.plan.annotations = specs
                .iter()
                .filter_map(|spec| parse_shard_spec(spec, &s.plan.program, &m).ok())
                .collect();
        }
        if let Some(shards) = fields.get("shard") {
            let mesh = s.mesh().cloned().ok_or(LinkError::NoMeshForShards)?;
            s.plan.annotations.clear();
            for spec in shards.split(';').filter(|x| !x.is_empty()) {
                let ann = parse_shard_spec(spec, &s.plan.program, &mesh)
                    .map_err(LinkError::Annotation)?;
                s.plan.annotations.push(ann);
            }
        }
        s.plan_changed();
        Ok(s)
    }

    /// Restores a state from a URL hash; a hostile or corrupt hash is an error message.
    pub fn from_hash(hash: &str) -> Result<Session, LinkError> {
        let hash = hash.trim_start_matches('#');
        if hash.len() > MAX_HASH {
            return Err(LinkError::TooLong);
        }
        let mut fields = std::collections::HashMap::new();
        for part in hash.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| LinkError::Malformed(clip(part)))?;
            fields.insert(
                k.to_string(),
                decode(v).ok_or_else(|| LinkError::Encoding(k.to_string()))?,
            );
        }
        let mut s = if let Some(text) = fields.get("text") {
            let (plan, _) = parse_plan(text).map_err(|e| {
                LinkError::PlanParse(e.first().map(|e| e.to_string()).unwrap_or_default())
            })?;
            if plan.mesh().is_none() {
                return Err(LinkError::NoMesh);
            }
            if !crate::plan::verify_plan(&plan).is_empty() {
                return Err(LinkError::DoesNotVerify);
            }
            let mut s = Session::from_plan("custom", plan);
            s.text = text.clone();
            s
        } else {
            Session::scenario_from_link(&fields)?
        };
        s = s.with_link_options(&fields)?;
        if let Some(stage) = fields.get("stage") {
            s.stage = Stage::from_id(stage).ok_or_else(|| LinkError::Unknown {
                what: "stage",
                value: clip(stage),
            })?;
        }
        if let Some(t) = fields.get("t") {
            s.timeline = t
                .parse::<usize>()
                .map_err(|_| LinkError::Timeline)?
                .min(s.events());
        }
        if let Some(v) = fields.get("var") {
            s = s.reduce(Action::SelectVar(Some(v.clone())));
        }
        if let Some(r) = fields.get("rank") {
            let r = r.parse::<u32>().map_err(|_| LinkError::Rank)?;
            s = s.reduce(Action::SelectRank(r));
        }
        if let Some(n) = fields.get("n") {
            s.notation = Notation::from_id(n).ok_or_else(|| LinkError::Unknown {
                what: "notation",
                value: clip(n),
            })?;
        }
        Ok(s)
    }
}

impl Session {
    /// A link's `parallel` field: the mesh and annotations of a strategy by sizes
    /// (`dp=2,tp=4,pp=2`, as `--parallel` takes it), found by pattern on the program.
    fn apply_parallel(&mut self, spec: &str) -> Result<(), LinkError> {
        let p = crate::plan::parallel::Parallel::parse(spec).map_err(LinkError::Parallel)?;
        if p.sp {
            return Err(LinkError::NotInLinks("sp"));
        }
        if p.cp > 1 {
            return Err(LinkError::NotInLinks("cp"));
        }
        let m = crate::plan::parse_mesh_spec(&p.mesh_spec()).map_err(LinkError::Mesh)?;
        if m.size() > MAX_LINK_MESH {
            return Err(LinkError::MeshTooLarge);
        }
        let m = Arc::new(m);
        self.plan.set_mesh(m.clone());
        self.plan.annotations = p
            .tensor_specs(&self.plan.program)
            .iter()
            .map(|spec| parse_shard_spec(spec, &self.plan.program, &m))
            .collect::<Result<_, _>>()
            .map_err(LinkError::Annotation)?;
        Ok(())
    }
}

/// The most devices a link's mesh may have.
const MAX_LINK_MESH: usize = 512;

/// The longest hash a link may have: Chromium's limit on a URL (2 MB). An imported
/// real-size model's plan is one (Llama 3 8B's text is about 0.35 MB encoded); the plan
/// parser is linear, so this bounds the work a hostile link can ask for.
const MAX_HASH: usize = 2 * 1024 * 1024;

/// The names of the presets the playground offers.
/// The toy scenarios first, then the published models at their real sizes.
pub fn preset_names() -> Vec<(&'static str, &'static str)> {
    scenarios()
        .into_iter()
        .chain(crate::models::published_plans::published_scenarios())
        .map(|s| (s.name, s.title))
        .collect()
}

fn clip(s: &str) -> String {
    s.chars().take(40).collect()
}

/// Percent-encodes a link value: every byte but ASCII letters and digits and a few readable
/// ones (`-` `_` `.` `~` `,` `:` `@`), so `+`, `&`, `#`, `=`, `;` and spaces are always
/// escaped (what `percent-encoding`'s `NON_ALPHANUMERIC` less those gives; written here
/// because the crate's encoder carries a 768-byte table of `%XX` strings into the page).
pub fn encode(s: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~,:@".contains(&b) {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(HEX[usize::from(b >> 4)] as char);
            out.push(HEX[usize::from(b & 15)] as char);
        }
    }
    out
}

/// Decodes a percent-encoded link value (`+` is a plus, as in a URL fragment); `None` for a
/// `%` not followed by two hex digits, or bytes that are not UTF-8.
pub fn decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hex = |k: usize| (*bytes.get(i + k)? as char).to_digit(16);
            out.push((hex(1)? * 16 + hex(2)?) as u8);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    /// The crate's set (`NON_ALPHANUMERIC` less `-_.~,:@`), which `encode` replaces.
    const CRATE: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~')
        .remove(b',')
        .remove(b':')
        .remove(b'@');

    #[test]
    fn a_malformed_escape_or_bytes_that_are_not_utf8_decode_to_none() {
        for bad in ["%", "%4", "%G0", "a%zz", "%FF", "%C3"] {
            assert_eq!(super::decode(bad), None, "{bad}");
        }
        assert_eq!(super::decode("%C3%A9+a").as_deref(), Some("é+a"));
    }

    #[test]
    fn encode_escapes_what_the_crate_escapes_and_decodes_back() {
        let every_ascii: String = (0u8..128).map(char::from).collect();
        for s in [every_ascii.as_str(), "dp=2,tp=4; x+y #é ∑ 😀", ""] {
            let crate_form = percent_encoding::utf8_percent_encode(s, CRATE).to_string();
            assert_eq!(super::encode(s), crate_form);
            assert_eq!(super::decode(&super::encode(s)).as_deref(), Some(s));
            let crate_decoded = percent_encoding::percent_decode_str(&crate_form).decode_utf8();
            assert_eq!(
                super::decode(&crate_form),
                crate_decoded.ok().map(|c| c.into_owned())
            );
        }
    }
}
