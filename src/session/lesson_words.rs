//! The lessons' words: each lesson's text and its "try this", by number. Only the engine's
//! module and the command line carry them; the page shows a lesson's state at once and its
//! words when the engine sends them (`Task::Lesson`), keeping the page's module under its
//! size budget.

/// Lesson `number`'s text and "try this" (`None` past the last lesson).
pub fn lesson_words(number: usize) -> Option<(&'static str, &'static str)> {
    WORDS.get(number.checked_sub(1)?).copied()
}

/// (text, try this), in lesson order.
const WORDS: [(&str, &str); 13] = [
    ("A process mesh arranges devices on named axes. A group is the devices that differ only along some axes: on a 2×4 mesh (dp, mp), device 5's data-parallel group is [1, 5] and its tensor-parallel group is [4, 5, 6, 7]. Every collective runs inside one such group.",
        "Click a device: its groups are outlined in their purpose's colour (green data parallel, red tensor parallel). Drag the grid to 4×2 and watch the groups change."),
    ("Split the batch over dp and every rank computes the gradient of its own slice. An all-reduce sums the gradients over the dp group and a scale by 1/N turns the sum into the mean, so every rank takes the serial step.",
        "Read the markers under each gradient on the Backward tab. Then turn on break-it mode, drop one scale, and run: that gradient is 4× too large on every rank."),
    ("Split the weight's columns (n) over mp: each rank multiplies the whole input by its columns and holds its columns of the output. No communication is needed in the forward pass.",
        "Look at A · B = C: the output's tiles follow the weight's. Set linear_0.w_0 dim 1 to replicated and see the split vanish."),
    ("Split the weight's rows, the contracted k, over mp: each rank multiplies its slice of k and holds one addend of the result, a partial SUM. An all-reduce over mp adds the addends into the whole value.",
        "The tiles of linear_1.tmp_0 are stacked Σ addends. Read why it is partial, and which op sums it."),
    ("Column-parallel then row-parallel: the first matmul's output stays split on its columns, the activation works on the split, and the second matmul contracts over it. One all-reduce per MLP in the forward pass, one in the backward.",
        "Open the rank lens's tensor-parallel group: one all-reduce. Click it to jump to it in rank 0's program."),
    ("Put dp on one axis and mp on the other: the batch is split over rows, the model over columns. Gradients are synchronised over dp groups (columns of the picture), activations over mp groups (rows).",
        "Select rank 5, then open the rank lens: data-parallel ops run over [1, 5], tensor-parallel ones over [4, 5, 6, 7]."),
    ("q, k and v are column parallel, so each rank holds some heads; the output projection is row parallel. Paddle all-reduces each column-parallel input gradient; Megatron sums q, k and v's input gradients locally first, so a block needs 2 forward and 2 backward all-reduces.",
        "This lesson has Megatron's sums on: count the tensor-parallel markers on the Backward tab, then turn the sums off in the cost panel and count again."),
    ("Split the embedding table's rows (the vocabulary) over mp: each rank looks up the ids it owns and writes zeros for the others, so the lookup is a partial sum completed by an all-reduce. The cross-entropy is computed on vocabulary shards with max and sum all-reduces.",
        "Select the embedding output and read why it is partial."),
    ("When annotations disagree, completion keeps one wish and refuses the other; the partition pass then inserts a reshard that converts the tensor to the layout its consumer wants.",
        "Step the timeline (→) until the conflict badge appears; hover it to read the refused wish. Then find the reshard on the Per-rank tab."),
    ("Tensor parallelism leaves the layer norms and the residual stream replicated over mp. Sequence parallelism splits them on the sequence instead: an all-gather rebuilds the whole sequence before each column-parallel matmul, and the row-parallel partial sums are reduce-scattered straight onto the sequence split. The forward all-reduces become an all-gather plus a reduce-scatter each, the same bytes, and the activations between them are 1/mp the size.",
        "Open the rank lens's reshard group: all-gathers of the gathered layer-norm outputs and reduce-scatters of the row-parallel outputs, no forward all-reduce. Run it: the step matches serial."),
    ("ZeRO shards what data parallelism replicates: stage 1 the optimizer state, stage 2 also the gradients (reduce-scatter instead of all-reduce), stage 3 also the parameters (all-gathered before use).",
        "Switch ZeRO 0 → 1 → 2 → 3 in the cost panel and watch the memory bars and the collectives change."),
    ("A pp axis cuts the program into stages; micro-batches flow through them. While the pipeline fills and drains, stages idle: the bubble, (p − 1) / (m + p − 1) of the step for GPipe and 1F1B.",
        "Change the micro-batches from 4 to 8 and watch the bubble shrink; switch GPipe to 1F1B and compare the memory."),
    ("The cost panel prices each rank's compute and communication on a real topology, and its memory: parameters, gradients, optimizer state and activations. Pin a plan, change it, and compare.",
        "Pin this plan, switch the topology to h100x8x4, and change the mesh to 8×1: the diff shows what the change costs."),
];
