//! Exercises graded by the planner: questions drawn from the plan on screen (a tensor's local
//! shape on a rank, the collective a tensor needs, its group, the bytes it sends), checked
//! against the real plan and explained after. Nothing is hard-coded: the answers are read
//! from the partitioned rank program and the ledger's ring model.

use super::*;

/// What kind of answer a question wants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnswerKind {
    /// Numbers in order (`[64, 64]`).
    Shape,
    /// An op name (`all_reduce`).
    Collective,
    /// A set of ranks (`0, 4`).
    Group,
    /// A byte count (within 1%).
    Bytes,
}

/// One question.
#[derive(Clone, Debug, PartialEq)]
pub struct Exercise {
    /// Stable within a plan: `shape:linear_0.w_0`, `kind:12`, `group:12`, `bytes:12`.
    pub id: String,
    pub prompt: String,
    pub kind: AnswerKind,
    /// The right answer, as the page shows it after grading.
    pub answer: String,
    /// Why, in a sentence.
    pub explain: String,
}

/// A graded answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grade {
    pub correct: bool,
    pub feedback: String,
}

fn numbers(s: &str) -> Vec<f64> {
    s.split(|c: char| !(c.is_ascii_digit() || c == '.' || c == 'e' || c == 'E' || c == '-'))
        .filter_map(|t| t.parse::<f64>().ok())
        .collect()
}

impl Exercise {
    /// Grades `answer`: shapes and groups by their numbers (groups as sets), collectives by
    /// name (`allreduce`, `c_allreduce_sum` and `all-reduce` all name `all_reduce`), bytes
    /// within 1% (units `KB`/`KiB` are not guessed: give bytes).
    pub fn grade(&self, answer: &str) -> Grade {
        let correct = match self.kind {
            AnswerKind::Shape => numbers(answer) == numbers(&self.answer),
            AnswerKind::Group => {
                let mut a = numbers(answer);
                let mut b = numbers(&self.answer);
                crate::sort::sort_by(&mut a, f64::total_cmp);
                crate::sort::sort_by(&mut b, f64::total_cmp);
                a == b
            }
            AnswerKind::Collective => {
                let norm = |s: &str| {
                    s.to_ascii_lowercase()
                        .replace(['-', ' ', '_'], "")
                        .trim_start_matches('c')
                        .trim_end_matches("sum")
                        .to_string()
                };
                !answer.trim().is_empty() && norm(answer) == norm(&self.answer)
            }
            AnswerKind::Bytes => match (numbers(answer).first(), numbers(&self.answer).first()) {
                (Some(a), Some(b)) => (a - b).abs() <= 0.01 * b.abs().max(1.0),
                _ => false,
            },
        };
        let feedback = if correct {
            format!("Right: {}. {}", self.answer, self.explain)
        } else {
            format!("Not quite: the plan says {}. {}", self.answer, self.explain)
        };
        Grade { correct, feedback }
    }
}

impl Session {
    /// Questions about the plan on screen, for the selected rank: the local shape of up to
    /// two annotated tensors, then the kind, group and bytes of its first tensor-parallel
    /// (else first) collective.
    pub fn exercises(&self) -> Vec<Exercise> {
        let Some(p) = self.pipeline.as_ref() else {
            return Vec::new();
        };
        let Some(rank) = self.rank_program() else {
            return Vec::new();
        };
        let r = rank.rank;
        let mut out = self.shape_questions(p, rank);
        let ops = self.inserted_ops();
        let pick = ops
            .iter()
            .find(|o| o.group.is_some() && o.purpose == crate::ir::Purpose::TensorParallel)
            .or_else(|| ops.iter().find(|o| o.group.is_some()));
        if let Some(o) = pick {
            let op = &rank.program.ops()[o.op];
            let x = op
                .all_inputs()
                .next()
                .map(|v| rank.program.var(v).name.to_string())
                .unwrap_or_default();
            let group = o.group.clone().unwrap_or_default();
            let bytes = crate::passes::ledger::bytes_per_rank(&rank.program, op);
            let n = group.len();
            out.push(Exercise {
                id: format!("kind:{}", o.op),
                prompt: format!(
                    "Rank {r} must communicate {x} ({}). Which collective?",
                    o.purpose.name()
                ),
                kind: AnswerKind::Collective,
                answer: op.ty.name().to_string(),
                explain: format!(
                    "The partition pass inserted {} at op {} of rank {r}'s program.",
                    op.ty, o.op
                ),
            });
            out.push(Exercise {
                id: format!("group:{}", o.op),
                prompt: format!("Which ranks take part in that {} of {x}?", op.ty),
                kind: AnswerKind::Group,
                answer: format!("{group:?}"),
                explain: format!("The group is rank {r} and the ranks that differ from it only along the mesh axes the tensor is {} over.", if op.ty == crate::ir::OpType::AllReduce { "partial" } else { "split" }),
            });
            out.push(Exercise {
                id: format!("bytes:{}", o.op),
                prompt: format!("How many bytes does rank {r} send in it (ring algorithm)?"),
                kind: AnswerKind::Bytes,
                answer: format!("{bytes:.0}"),
                explain: format!("In a ring over {n} ranks, an all-reduce sends 2(N−1)/N of the tensor, an all-gather or reduce-scatter (N−1)/N of the whole."),
            });
        }
        out
    }

    /// The local shape of up to two annotated tensors on the selected rank.
    fn shape_questions(
        &self,
        p: &Passes,
        rank: &crate::passes::partition::RankProgram,
    ) -> Vec<Exercise> {
        let r = rank.rank;
        let mut out = Vec::new();
        for ann in self.plan.annotations.iter().take(2) {
            let name = &self.plan.program.var(ann.var).name;
            let Some(local) = rank.program.var_id(name) else {
                continue;
            };
            let global = &self.plan.program.var(ann.var).ty.shape;
            let shape = &rank.program.var(local).ty.shape;
            out.push(Exercise {
                id: format!("shape:{name}"),
                prompt: format!(
                    "What is the local shape of {name} (global {global:?}) on rank {r}?"
                ),
                kind: AnswerKind::Shape,
                answer: format!("{shape:?}"),
                explain: format!(
                    "Each dim is divided by the sizes of the mesh axes splitting it: {}.",
                    crate::passes::complete::shard_text(
                        &p.full.tensors[ann.var.index()],
                        &p.full.mesh
                    )
                ),
            });
        }
        out
    }
}
