//! The search space: every plan `suggest` may propose for a preset model on N devices, and
//! the rules that prune it (each a dominance argument under the cost model, checked against
//! brute force by `tests/suggest.rs`).
//!
//! A candidate is
//! - a mesh: N factored into `pp × dp × mp` (axes of size 1 left out), its axes in any order
//!   (the order decides which ranks share a node: the innermost axis's groups are
//!   consecutive ranks);
//! - a strategy per layer class: every transformer block and the MLP Megatron tensor
//!   parallel over `mp` (q, k, v and fc1 column parallel, the output projection and fc2 row
//!   parallel); the embedding and LM head of `embedding_lm` vocab parallel over `mp` or
//!   replicated; the batch split over `dp`;
//! - the ZeRO stage (0 to 3, with `dp` > 1);
//! - micro-batches and, with `pp` > 1, the schedule (GPipe, 1F1B or ZB-H1: GPipe holds
//!   every micro-batch's activations but its all-forwards-first order can finish sooner);
//! - activation recomputation (off, selective, full).
//!
//! Pruned (the space `all` keeps them, for the brute-force check):
//! - an `mp` axis the blocks do not use: blocks are always tensor parallel over `mp`, since
//!   replicated blocks on an `mp` axis repeat the same work on `mp` devices;
//! - Megatron sums off: the sums drop two of a layer's four backward all-reduces and change
//!   nothing else, so they are never slower;
//! - interleaved 1F1B (`vpp`) and the paper's ZB-H1 order: not searched;
//! - without `pp`, micro-batches accumulate in 1F1B's order (F B F B), not GPipe's, which
//!   holds every micro-batch's activations for the same time;
//! - without `pp`, more micro-batches only when fewer exceed the memory budget
//!   (accumulation adds per-micro-batch overhead and saves only activation memory);
//! - recomputation only when the same plan without it exceeds the budget (it adds compute);
//! - ZeRO stages 2 and 3 only when no lower stage from 1 up of the same family fits the
//!   budget unescalated: stage 2 inserts stage 1's ops and differs only in how long the
//!   full gradient lives, so it takes stage 1's time; stage 3 inserts them too, except the
//!   all-gather after the update, which it replaces by two (before the parameters' first
//!   use in forward and in backward), so it moves 1.5x the bytes in the same compute. Both
//!   save only memory (the screen skips them; the space keeps them, and the brute-force
//!   tests check the rule: 5,700 stage-3 rows of six problems were never faster than their
//!   stage-1 or stage-2 twin). A skipped family is priced at the end where its twins'
//!   fastest point is no slower than the table's last row, so the table still lists it
//!   where it ranks (a stage 2 plan ties its stage 1 twin);
//! - `pp` must divide the layer count (balanced stages), `dp × micro-batches` the batch,
//!   and `mp` the heads, the hidden width and (vocab parallel) the vocabulary.

use crate::models::{Model, ModelConfig};
use crate::plan::{Recompute, ScheduleKind};

/// A mesh axis the search names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Axis {
    Pp,
    Dp,
    Mp,
}

impl Axis {
    pub const ALL: [Axis; 3] = [Axis::Pp, Axis::Dp, Axis::Mp];

    pub fn name(self) -> &'static str {
        match self {
            Axis::Pp => "pp",
            Axis::Dp => "dp",
            Axis::Mp => "mp",
        }
    }
}

/// The mesh: its axes of size > 1, outermost first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MeshShape {
    pub axes: Vec<(Axis, usize)>,
}

impl MeshShape {
    /// The size of `axis` (1 when absent).
    pub fn size(&self, axis: Axis) -> usize {
        self.axes
            .iter()
            .find(|(a, _)| *a == axis)
            .map_or(1, |&(_, n)| n)
    }

    /// The number of devices.
    pub fn devices(&self) -> usize {
        self.axes.iter().map(|&(_, n)| n).product()
    }

    /// The one-line mesh spec: `4x8:dp,mp`, or `1:dp` for one device.
    pub fn spec(&self) -> String {
        if self.axes.is_empty() {
            return "1:dp".to_string();
        }
        let sizes: Vec<String> = self.axes.iter().map(|(_, n)| n.to_string()).collect();
        let names: Vec<&str> = self.axes.iter().map(|(a, _)| a.name()).collect();
        format!("{}:{}", sizes.join("x"), names.join(","))
    }

    /// The same axes in the canonical order (pp, dp, mp): the mesh actually planned; other
    /// orders are priced as a relabelling of its ranks ([`MeshShape::devices_of_ranks`]).
    pub fn canonical(&self) -> MeshShape {
        let mut axes = self.axes.clone();
        crate::sort::sort_by_key(&mut axes, |&(a, _)| a);
        MeshShape { axes }
    }

    /// Where each rank of the canonical mesh runs when the axes are in this order: the
    /// rank the same coordinates have in this order (`None`: already canonical).
    pub fn devices_of_ranks(&self) -> Option<Vec<u32>> {
        let canonical = self.canonical();
        if canonical == *self {
            return None;
        }
        let strides = |m: &MeshShape| -> Vec<(Axis, usize, usize)> {
            let mut out = Vec::new();
            let mut stride = 1;
            for &(a, n) in m.axes.iter().rev() {
                out.push((a, n, stride));
                stride *= n;
            }
            out
        };
        let from = strides(&canonical);
        let to = strides(self);
        let map = (0..canonical.devices())
            .map(|r| {
                from.iter()
                    .map(|&(a, n, stride)| {
                        let coord = (r / stride) % n;
                        let (_, _, s) = to
                            .iter()
                            .find(|(b, _, _)| *b == a)
                            .copied()
                            .unwrap_or((a, n, 0));
                        coord * s
                    })
                    .sum::<usize>() as u32
            })
            .collect();
        Some(map)
    }
}

/// One plan of the space.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub mesh: MeshShape,
    /// The embedding and LM head vocab parallel over `mp` (embedding_lm only).
    pub vocab_parallel: bool,
    pub megatron_sums: bool,
    pub zero: u8,
    pub micro_batches: usize,
    pub schedule: ScheduleKind,
    pub recompute: Recompute,
}

impl Candidate {
    /// The annotations, as one-line specs.
    pub fn shards(&self, model: Model, layers: usize) -> Vec<String> {
        let dp = self.mesh.size(Axis::Dp) > 1;
        let mp = self.mesh.size(Axis::Mp) > 1;
        let batch = if dp { "dp" } else { "-" };
        let mut out = Vec::new();
        match model {
            Model::Mlp => {
                out.push(format!("x={batch},-"));
                if mp {
                    out.extend(
                        ["linear_0.w_0=-,mp", "linear_0.b_0=mp", "linear_1.w_0=mp,-"]
                            .map(String::from),
                    );
                }
            }
            Model::MlpMse => {
                out.push(format!("batch.x={batch},-"));
                if mp {
                    out.extend(["params.W1=-,mp", "params.W2=mp,-"].map(String::from));
                }
            }
            Model::Gpt | Model::EmbeddingLm | Model::GptLm => {
                let input = if model == Model::Gpt {
                    format!("x={batch},-,-")
                } else {
                    format!("ids={batch},-")
                };
                out.push(input);
                if mp {
                    out.extend(crate::models::scenarios::megatron_shards(layers, "mp"));
                    if self.vocab_parallel && model == Model::EmbeddingLm {
                        out.push("wte=mp,-".into());
                        out.push("lm_head.w=-,mp".into());
                    }
                    // The head is tied: splitting the table's rows splits the logits.
                    if self.vocab_parallel && model == Model::GptLm {
                        out.push("wte=mp,-".into());
                    }
                }
            }
            Model::Llama => {
                out.push(format!("ids={batch},-"));
                if mp {
                    out.extend(crate::models::scenarios::llama_megatron_shards(
                        layers, "mp",
                    ));
                    if self.vocab_parallel {
                        out.push("wte=mp,-".into());
                        out.push("lm_head.w=-,mp".into());
                    }
                }
            }
        }
        out
    }

    /// The layer classes' strategies in words, for the table.
    pub fn strategy(&self, model: Model) -> String {
        let mp = self.mesh.size(Axis::Mp) > 1;
        let blocks = match (model, mp) {
            (_, false) => "replicated",
            (Model::Mlp | Model::MlpMse, true) => "megatron mlp",
            (Model::Gpt | Model::EmbeddingLm | Model::GptLm | Model::Llama, true) => "megatron",
        };
        match (model, mp) {
            (Model::EmbeddingLm | Model::GptLm | Model::Llama, true) => format!(
                "blocks {blocks}, embed+head {}",
                if self.vocab_parallel {
                    "vocab-par"
                } else {
                    "replicated"
                }
            ),
            (Model::EmbeddingLm | Model::GptLm | Model::Llama, false) => {
                format!("blocks {blocks}, embed+head replicated")
            }
            (Model::Mlp | Model::MlpMse | Model::Gpt, _) => format!("blocks {blocks}"),
        }
    }
}

/// Every ordered factorisation of `n` into (pp, dp, mp) that the model admits.
fn factorisations(model: Model, cfg: &ModelConfig, n: usize) -> Vec<(usize, usize, usize)> {
    let divisors = |k: usize| (1..=k).filter(move |d| k.is_multiple_of(*d));
    let mut out = Vec::new();
    for pp in divisors(n) {
        for mp in divisors(n / pp) {
            let dp = n / pp / mp;
            if admits(model, cfg, pp, dp, mp) {
                out.push((pp, dp, mp));
            }
        }
    }
    out
}

/// Whether the model's sizes divide by the degrees.
fn admits(model: Model, cfg: &ModelConfig, pp: usize, dp: usize, mp: usize) -> bool {
    let layered = matches!(
        model,
        Model::Gpt | Model::EmbeddingLm | Model::GptLm | Model::Llama
    );
    let pp_ok = pp == 1 || (layered && cfg.layers.is_multiple_of(pp));
    let mp_ok = match model {
        Model::Mlp | Model::MlpMse => cfg.hidden.is_multiple_of(mp),
        Model::Gpt | Model::EmbeddingLm | Model::GptLm => {
            cfg.heads.is_multiple_of(mp)
                && cfg.hidden.is_multiple_of(mp)
                && (4 * cfg.hidden).is_multiple_of(mp)
        }
        // Whole key/value heads per rank.
        Model::Llama => {
            cfg.heads.is_multiple_of(mp)
                && cfg.kv_heads.is_multiple_of(mp)
                && cfg.ffn.is_multiple_of(mp)
        }
    };
    pp_ok && mp_ok && cfg.batch.is_multiple_of(dp)
}

/// Every order of the axes of size > 1.
fn orders(pp: usize, dp: usize, mp: usize) -> Vec<MeshShape> {
    let axes: Vec<(Axis, usize)> = [(Axis::Pp, pp), (Axis::Dp, dp), (Axis::Mp, mp)]
        .into_iter()
        .filter(|&(_, n)| n > 1)
        .collect();
    let mut out = Vec::new();
    permute(&axes, &mut Vec::new(), &mut out);
    out
}

fn permute(rest: &[(Axis, usize)], prefix: &mut Vec<(Axis, usize)>, out: &mut Vec<MeshShape>) {
    if rest.is_empty() {
        out.push(MeshShape {
            axes: prefix.clone(),
        });
        return;
    }
    for i in 0..rest.len() {
        let mut left = rest.to_vec();
        let a = left.remove(i);
        prefix.push(a);
        permute(&left, prefix, out);
        prefix.pop();
    }
}

/// One point of the space before the memory-driven choices (micro-batches without a
/// pipeline, recomputation): everything planned the same way except axis order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Family {
    /// In canonical order.
    pub mesh: MeshShape,
    pub vocab_parallel: bool,
    pub megatron_sums: bool,
    pub zero: u8,
    pub micro_batches: usize,
    pub recompute: Recompute,
}

/// The micro-batch counts tried: with a pipeline `pp, 2pp, 4pp, 8pp`; without, the
/// powers of two (`pruned`: only 1 here; the search escalates).
pub fn micro_batch_ladder(batch: usize, dp: usize, pp: usize) -> Vec<usize> {
    let per_replica = batch / dp.max(1);
    let ladder: Vec<usize> = if pp > 1 {
        (0..4).map(|k| pp << k).collect()
    } else {
        (0..12).map(|k| 1usize << k).collect()
    };
    ladder
        .into_iter()
        .filter(|&m| m <= per_replica && per_replica.is_multiple_of(m))
        .collect()
}

/// Whether the model has recomputable transformer layers.
pub fn recomputes(model: Model) -> bool {
    matches!(
        model,
        Model::Gpt | Model::EmbeddingLm | Model::GptLm | Model::Llama
    )
}

/// The recomputation modes, cheapest first.
pub const RECOMPUTE_LADDER: [Recompute; 3] =
    [Recompute::Off, Recompute::Selective, Recompute::Full];

/// The families of the space. `pruned`: the searched space (see the module doc); else every
/// point, for brute force.
pub fn families(model: Model, cfg: &ModelConfig, devices: usize, pruned: bool) -> Vec<Family> {
    let mut out = Vec::new();
    for (pp, dp, mp) in factorisations(model, cfg, devices) {
        let vocab: &[bool] = match (model, mp > 1) {
            (Model::EmbeddingLm | Model::GptLm | Model::Llama, true)
                if cfg.vocab.is_multiple_of(mp) =>
            {
                &[true, false]
            }
            (
                Model::Mlp
                | Model::MlpMse
                | Model::Gpt
                | Model::EmbeddingLm
                | Model::GptLm
                | Model::Llama,
                _,
            ) => &[false],
        };
        let sums: &[bool] = match (mp > 1, pruned) {
            (true, true) => &[true],
            (true, false) => &[true, false],
            (false, _) => &[false],
        };
        let zeros: Vec<u8> = if dp > 1 { (0..=3).collect() } else { vec![0] };
        let ladder = micro_batch_ladder(cfg.batch, dp, pp);
        let micro: Vec<usize> = if pruned && pp == 1 {
            ladder.into_iter().take(1).collect()
        } else {
            ladder
        };
        let recompute: &[Recompute] = match (recomputes(model), pruned) {
            (true, false) => &RECOMPUTE_LADDER,
            (true, true) | (false, _) => &[Recompute::Off],
        };
        let mesh = MeshShape {
            axes: [(Axis::Pp, pp), (Axis::Dp, dp), (Axis::Mp, mp)]
                .into_iter()
                .filter(|&(_, n)| n > 1)
                .collect(),
        };
        for &vocab_parallel in vocab {
            for &megatron_sums in sums {
                for &zero in &zeros {
                    for &micro_batches in &micro {
                        for &recompute in recompute {
                            out.push(Family {
                                mesh: mesh.clone(),
                                vocab_parallel,
                                megatron_sums,
                                zero,
                                micro_batches,
                                recompute,
                            });
                        }
                    }
                }
            }
        }
    }
    out
}

/// The schedules tried for a family: GPipe, 1F1B and ZB-H1 with a pipeline; without one,
/// 1F1B's one-stage order for gradient accumulation (`pruned`) or both orders.
pub fn schedules(family: &Family, pruned: bool) -> Vec<ScheduleKind> {
    if family.mesh.size(Axis::Pp) == 1 {
        // One stage: several micro-batches accumulate one after another (F B F B); GPipe's
        // order would hold every micro-batch's activations at once.
        return match (family.micro_batches > 1, pruned) {
            (false, _) => vec![ScheduleKind::FThenB],
            (true, true) => vec![ScheduleKind::OneFOneB],
            (true, false) => vec![ScheduleKind::OneFOneB, ScheduleKind::FThenB],
        };
    }
    vec![
        ScheduleKind::FThenB,
        ScheduleKind::OneFOneB,
        ScheduleKind::ZbH1,
    ]
}

/// The axis orders of a family's mesh.
pub fn axis_orders(family: &Family) -> Vec<MeshShape> {
    let m = &family.mesh;
    orders(m.size(Axis::Pp), m.size(Axis::Dp), m.size(Axis::Mp))
}

impl Family {
    /// The candidate with these axes and schedule.
    pub fn candidate(&self, mesh: MeshShape, schedule: ScheduleKind) -> Candidate {
        Candidate {
            mesh,
            vocab_parallel: self.vocab_parallel,
            megatron_sums: self.megatron_sums,
            zero: self.zero,
            micro_batches: self.micro_batches,
            schedule,
            recompute: self.recompute,
        }
    }
}

impl Candidate {
    /// The family this candidate belongs to (its axes in canonical order).
    pub fn family(&self) -> Family {
        Family {
            mesh: self.mesh.canonical(),
            vocab_parallel: self.vocab_parallel,
            megatron_sums: self.megatron_sums,
            zero: self.zero,
            micro_batches: self.micro_batches,
            recompute: self.recompute,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reordered_mesh_relabels_ranks_as_its_own_numbering_does() {
        // [dp=2, mp=4] as (mp, dp): the rank with coords (dp 1, mp 2) is 1·4+2 = 6
        // canonically and 2·2+1 = 5 in the candidate's order.
        let m = MeshShape {
            axes: vec![(Axis::Mp, 4), (Axis::Dp, 2)],
        };
        let map = m.devices_of_ranks().unwrap_or_default();
        assert_eq!(map, vec![0, 2, 4, 6, 1, 3, 5, 7]);
        assert_eq!(map[6], 5);
        assert!(m.canonical().devices_of_ranks().is_none());
    }

    #[test]
    fn factorisations_respect_the_model_sizes() {
        let cfg = ModelConfig {
            layers: 6,
            heads: 4,
            batch: 8,
            ..Model::Gpt.default_config()
        };
        let f = factorisations(Model::Gpt, &cfg, 8);
        // pp ∈ {1, 2} (divides 6 layers), mp ∈ {1, 2, 4} (divides 4 heads).
        assert_eq!(
            f,
            vec![
                (1, 8, 1),
                (1, 4, 2),
                (1, 2, 4),
                (2, 4, 1),
                (2, 2, 2),
                (2, 1, 4)
            ]
        );
    }
}
