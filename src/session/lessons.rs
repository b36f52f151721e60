//! The guided tour: short lessons, each a state of the playground (built from a scenario by
//! the same actions a user would take), a few sentences, the panel to look at, and a "try
//! this". A lesson is a URL (`?lesson=N`), so a course can link each one.

use super::*;
use crate::plan::ScheduleKind;

/// One lesson.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lesson {
    /// 1-based, as in the URL.
    pub number: usize,
    pub title: &'static str,
    pub text: &'static str,
    /// The panel to look at (its CSS class: `mesh-panel`, `program-panel`, `inspector`,
    /// `rank-lens`, `cost-panel`, `pipeline-panel`, `timeline`, `break-panel`).
    pub focus: &'static str,
    pub try_this: &'static str,
}

/// The lessons, in order.
pub const LESSONS: [Lesson; 13] = [
    Lesson { number: 1, title: "Meshes and their communication groups", focus: "mesh-panel",
        text: "A process mesh arranges devices on named axes. A group is the devices that differ only along some axes: on a 2×4 mesh (dp, mp), device 5's data-parallel group is [1, 5] and its tensor-parallel group is [4, 5, 6, 7]. Every collective runs inside one such group.",
        try_this: "Click a device: its groups are outlined in their purpose's colour (green data parallel, red tensor parallel). Drag the grid to 4×2 and watch the groups change." },
    Lesson { number: 2, title: "Data parallelism: all-reduce + 1/N", focus: "program-panel",
        text: "Split the batch over dp and every rank computes the gradient of its own slice. An all-reduce sums the gradients over the dp group and a scale by 1/N turns the sum into the mean, so every rank takes the serial step.",
        try_this: "Read the markers under each gradient on the Backward tab. Then turn on break-it mode, drop one scale, and run: that gradient is 4× too large on every rank." },
    Lesson { number: 3, title: "Column-parallel matmul", focus: "inspector",
        text: "Split the weight's columns (n) over mp: each rank multiplies the whole input by its columns and holds its columns of the output. No communication is needed in the forward pass.",
        try_this: "Look at A · B = C: the output's tiles follow the weight's. Set linear_0.w_0 dim 1 to replicated and see the split vanish." },
    Lesson { number: 4, title: "Row-parallel matmul and partial sums", focus: "inspector",
        text: "Split the weight's rows, the contracted k, over mp: each rank multiplies its slice of k and holds one addend of the result, a partial SUM. An all-reduce over mp adds the addends into the whole value.",
        try_this: "The tiles of linear_1.tmp_0 are stacked Σ addends. Read why it is partial, and which op sums it." },
    Lesson { number: 5, title: "The Megatron MLP", focus: "rank-lens",
        text: "Column-parallel then row-parallel: the first matmul's output stays split on its columns, the activation works on the split, and the second matmul contracts over it. One all-reduce per MLP in the forward pass, one in the backward.",
        try_this: "Open the rank lens's tensor-parallel group: one all-reduce. Click it to jump to it in rank 0's program." },
    Lesson { number: 6, title: "dp × mp on a 2-D mesh", focus: "mesh-panel",
        text: "Put dp on one axis and mp on the other: the batch is split over rows, the model over columns. Gradients are synchronised over dp groups (columns of the picture), activations over mp groups (rows).",
        try_this: "Select rank 5, then open the rank lens: data-parallel ops run over [1, 5], tensor-parallel ones over [4, 5, 6, 7]." },
    Lesson { number: 7, title: "Attention heads split, and Megatron's sums (2 + 2)", focus: "program-panel",
        text: "q, k and v are column parallel, so each rank holds some heads; the output projection is row parallel. Paddle all-reduces each column-parallel input gradient; Megatron sums q, k and v's input gradients locally first, so a block needs 2 forward and 2 backward all-reduces.",
        try_this: "This lesson has Megatron's sums on: count the tensor-parallel markers on the Backward tab, then turn the sums off in the cost panel and count again." },
    Lesson { number: 8, title: "The vocab-parallel embedding and cross-entropy", focus: "inspector",
        text: "Split the embedding table's rows (the vocabulary) over mp: each rank looks up the ids it owns and writes zeros for the others, so the lookup is a partial sum completed by an all-reduce. The cross-entropy is computed on vocabulary shards with max and sum all-reduces.",
        try_this: "Select the embedding output and read why it is partial." },
    Lesson { number: 9, title: "A reshard conflict", focus: "timeline",
        text: "When annotations disagree, completion keeps one wish and refuses the other; the partition pass then inserts a reshard that converts the tensor to the layout its consumer wants.",
        try_this: "Step the timeline (→) until the conflict badge appears; hover it to read the refused wish. Then find the reshard on the Per-rank tab." },
    Lesson { number: 10, title: "Megatron sequence parallelism", focus: "rank-lens",
        text: "Tensor parallelism leaves the layer norms and the residual stream replicated over mp. Sequence parallelism splits them on the sequence instead: an all-gather rebuilds the whole sequence before each column-parallel matmul, and the row-parallel partial sums are reduce-scattered straight onto the sequence split. The forward all-reduces become an all-gather plus a reduce-scatter each, the same bytes, and the activations between them are 1/mp the size.",
        try_this: "Open the rank lens's reshard group: all-gathers of the gathered layer-norm outputs and reduce-scatters of the row-parallel outputs, no forward all-reduce. Run it: the step matches serial." },
    Lesson { number: 11, title: "ZeRO stages 1–3", focus: "cost-panel",
        text: "ZeRO shards what data parallelism replicates: stage 1 the optimizer state, stage 2 also the gradients (reduce-scatter instead of all-reduce), stage 3 also the parameters (all-gathered before use).",
        try_this: "Switch ZeRO 0 → 1 → 2 → 3 in the cost panel and watch the memory bars and the collectives change." },
    Lesson { number: 12, title: "Pipeline schedules and their bubbles", focus: "pipeline-panel",
        text: "A pp axis cuts the program into stages; micro-batches flow through them. While the pipeline fills and drains, stages idle: the bubble, (p − 1) / (m + p − 1) of the step for GPipe and 1F1B.",
        try_this: "Change the micro-batches from 4 to 8 and watch the bubble shrink; switch GPipe to 1F1B and compare the memory." },
    Lesson { number: 13, title: "What a plan costs, in time and memory", focus: "cost-panel",
        text: "The cost panel prices each rank's compute and communication on a real topology, and its memory: parameters, gradients, optimizer state and activations. Pin a plan, change it, and compare.",
        try_this: "Pin this plan, switch the topology to h100x8x4, and change the mesh to 8×1: the diff shows what the change costs." },
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
