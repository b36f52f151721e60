//! The guided tour: short lessons, each a state of the playground (built from a scenario by
//! the same actions a user would take), a few sentences, the panel to look at, and a "try
//! this". A lesson is a URL (`?lesson=N`), so a course can link each one. The words are in
//! [`super::lesson_words`], which only the engine's module carries: the page asks the
//! engine for them (the page's module stays under its size budget).

use super::*;
use crate::plan::ScheduleKind;

/// One lesson.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lesson {
    /// 1-based, as in the URL.
    pub number: usize,
    pub title: &'static str,
    /// The panel to look at (its CSS class: `mesh-panel`, `program-panel`, `inspector`,
    /// `rank-lens`, `cost-panel`, `pipeline-panel`, `timeline`, `break-panel`).
    pub focus: &'static str,
}

/// The lessons, in order.
pub const LESSONS: [Lesson; 13] = [
    Lesson {
        number: 1,
        title: "Meshes and their communication groups",
        focus: "mesh-panel",
    },
    Lesson {
        number: 2,
        title: "Data parallelism: all-reduce + 1/N",
        focus: "program-panel",
    },
    Lesson {
        number: 3,
        title: "Column-parallel matmul",
        focus: "inspector",
    },
    Lesson {
        number: 4,
        title: "Row-parallel matmul and partial sums",
        focus: "inspector",
    },
    Lesson {
        number: 5,
        title: "The Megatron MLP",
        focus: "rank-lens",
    },
    Lesson {
        number: 6,
        title: "dp × mp on a 2-D mesh",
        focus: "mesh-panel",
    },
    Lesson {
        number: 7,
        title: "Attention heads split, and Megatron's sums (2 + 2)",
        focus: "program-panel",
    },
    Lesson {
        number: 8,
        title: "The vocab-parallel embedding and cross-entropy",
        focus: "inspector",
    },
    Lesson {
        number: 9,
        title: "A reshard conflict",
        focus: "timeline",
    },
    Lesson {
        number: 10,
        title: "Megatron sequence parallelism",
        focus: "rank-lens",
    },
    Lesson {
        number: 11,
        title: "ZeRO stages 1–3",
        focus: "cost-panel",
    },
    Lesson {
        number: 12,
        title: "Pipeline schedules and their bubbles",
        focus: "pipeline-panel",
    },
    Lesson {
        number: 13,
        title: "What a plan costs, in time and memory",
        focus: "cost-panel",
    },
];

impl Lesson {
    /// Looks a lesson up by its number.
    pub fn by_number(n: usize) -> Option<&'static Lesson> {
        LESSONS.iter().find(|l| l.number == n)
    }

    /// The playground's state for this lesson.
    pub fn session(&self) -> Result<Session, SessionError> {
        let from = |name: &str| Session::from_scenario(name);
        let s = match self.number {
            1 => from("gpt_dp_mp")?.reduce(Action::SelectRank(5)),
            2 => from("dp_mlp")?.reduce(Action::SetStage(Stage::Backward)),
            3 => from("megatron_mlp")?.reduce(Action::SelectVar(Some("linear_0.tmp_0".into()))),
            4 => from("megatron_mlp")?.reduce(Action::SelectVar(Some("linear_1.tmp_0".into()))),
            5 => from("megatron_mlp")?.reduce(Action::SetStage(Stage::Partition)),
            6 => from("gpt_dp_mp")?.reduce(Action::SelectRank(5)),
            7 => from("gpt_dp_mp")?
                .reduce(Action::SetMegatronSums(true))
                .reduce(Action::SetStage(Stage::Backward)),
            8 => from("vocab_embedding")?.reduce(Action::SelectVar(Some("emb".into()))),
            9 => from("reshard_conflict")?.reduce(Action::Seek(0)),
            10 => from("gpt_sequence_parallel")?.reduce(Action::SetStage(Stage::Partition)),
            11 => from("gpt_dp_mp")?.reduce(Action::SetZero(1)),
            12 => pipelined()?,
            13 => from("gpt_dp_mp")?,
            _ => return Err(SessionError::NoLesson(self.number)),
        };
        let mut s = s;
        s.request(crate::protocol::Task::Lesson(self.number));
        match (&s.plan_error, &s.message) {
            (Some(e), _) | (None, Some(e)) => Err(SessionError::Lesson {
                number: self.number,
                message: e.clone(),
            }),
            (None, None) => Ok(s),
        }
    }
}

/// Lesson 12: a 2-layer GPT on 2 pipeline stages × dp 2 × mp 2, 4 micro-batches, 1F1B.
fn pipelined() -> Result<Session, SessionError> {
    let sc = Scenario::by_name("gpt_dp_mp")
        .ok_or_else(|| SessionError::UnknownPreset("gpt_dp_mp".into()))?;
    let config = crate::models::ModelConfig {
        layers: 2,
        ..sc.config()
    };
    let mut plan = sc.plan_with(&config)?;
    let mesh = Arc::new(crate::plan::parse_mesh_spec("2x2x2:pp,dp,mp")?);
    plan.set_mesh(mesh.clone());
    plan.annotations.clear();
    let mut shards = vec!["x=dp,-,-".to_string()];
    shards.extend(crate::models::scenarios::megatron_shards(2, "mp"));
    for spec in &shards {
        plan.annotations
            .push(parse_shard_spec(spec, &plan.program, &mesh)?);
    }
    plan.options.micro_batches = 4;
    plan.options.schedule = ScheduleKind::OneFOneB;
    Ok(Session::from_plan("custom", plan))
}
