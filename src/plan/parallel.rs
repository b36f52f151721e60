//! A strategy by sizes, as Megatron's arguments give it: `dp=8,tp=8,pp=2` becomes a mesh
//! and the standard annotations, written out as ordinary `--mesh` and `--shard` specs.
//!
//! The annotations are found by pattern, so any program gets them, not only our presets:
//! walking the forward in order, a matmul with a 2-D parameter whose input is whole is
//! column-parallel (its weight's output dim split over `tp`, its output split), and one
//! whose input is split is row-parallel (its weight's input dim split; the row-parallel
//! all-reduce makes the output whole). A bias added to a split output is split with it; an
//! embedding table is vocab-parallel (rows over `tp`). Everything else carries a split from
//! its inputs to its outputs: attention's reshapes, transposes and score matmuls, the
//! activations between the two matmuls of an MLP. So q, k, v, the MLP's first matmuls
//! (gate and up) and the LM head are column-parallel; the attention output and the MLP's
//! last matmul are row-parallel; a tied head reuses the table's rows. The loss is
//! vocab-parallel whenever the head is. The batch, the first input's dim 0, is split over
//! `dp`; `pp` stages are split evenly by layers (a plan without `stage` statements).
//!
//! A Mixture-of-Experts layer is not split by tensor parallelism: the router's matmul (the
//! one whose output, through unary ops, is a `moe_dispatch`'s gates), every matmul between
//! a dispatch and its combine, and a matmul to a single output (Qwen2-MoE's shared-expert
//! gate, a scalar per token) are left unsplit. Expert parallelism (`ep=N`) splits the
//! experts instead: each expert weight (a 3-D parameter `[experts, in, out]` of a batched
//! matmul between a dispatch and its combine) is split on its first dim over `ep`, and the
//! planner moves the dispatched tokens to their experts' ranks by an all-to-all and back
//! by another (docs/moe.md). `ep` folds onto the data-parallel ranks, as Megatron's "MoE
//! parallel folding" lays the expert groups on the devices attention uses for data
//! parallelism: the `dp` ranks become `dp/ep × ep` (mesh axes `dp` and `ep`), the batch is
//! split over both, and the experts over `ep` alone.

pub use super::parallel_spec::ParallelError;
use crate::ir::{OpRole, OpType, Program, VarKind};

/// Degrees of a strategy: data, tensor and pipeline parallel, and whether tensor
/// parallelism is Megatron's sequence-parallel kind (`sp`, no degree: it splits the
/// sequence over the `tp` group; [`super::sequence_parallel`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parallel {
    pub dp: usize,
    pub tp: usize,
    pub pp: usize,
    pub sp: bool,
    /// Expert parallelism's degree, a divisor of `dp` (1: the experts are whole).
    pub ep: usize,
    /// Context parallelism's degree: the sequence of every op split over `cp`.
    pub cp: usize,
    /// How attention is split over `cp` (`cp_mode=`; the planner's choice when absent).
    pub cp_mode: CpMode,
    /// Attention fused into one `flash_attn` even without `cp` (`flash`): the scores are
    /// never written out, as FlashAttention runs them (Megatron's `--use-flash-attn`). This
    /// and `vpp` are the command line's: the playground's module, on a size budget, has
    /// neither.
    #[cfg(feature = "context-parallel")]
    pub flash: bool,
    /// Model chunks per pipeline stage (`vpp=V`: the interleaved schedule with V chunks; 1:
    /// not interleaved).
    #[cfg(feature = "context-parallel")]
    pub vpp: usize,
}

/// How attention meets a split sequence: `ring` (Megatron-Core's ring attention, with the
/// zig-zag order that balances the causal mask), `ring_contiguous` (the same without
/// zig-zag: the last rank does about twice the work), `ulysses` (DeepSpeed-Ulysses: an
/// all-to-all from sequence to heads and back), or `auto`: Ulysses when the heads divide
/// over tp × cp (it moves `4·N·h/P` elements per link against the ring's `O(N)`), else ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpMode {
    Auto,
    Ring,
    RingContiguous,
    Ulysses,
}

impl CpMode {
    /// The spec's name.
    pub fn name(self) -> &'static str {
        match self {
            CpMode::Auto => "auto",
            CpMode::Ring => "ring",
            CpMode::RingContiguous => "ring_contiguous",
            CpMode::Ulysses => "ulysses",
        }
    }

    /// By its spec name.
    pub(super) fn parse(s: &str) -> Option<CpMode> {
        Some(match s {
            "auto" => CpMode::Auto,
            "ring" => CpMode::Ring,
            "ring_contiguous" | "ring-contiguous" => CpMode::RingContiguous,
            "ulysses" => CpMode::Ulysses,
            _ => return None,
        })
    }
}

impl Parallel {
    /// Every degree 1.
    pub const SERIAL: Parallel = Parallel {
        dp: 1,
        tp: 1,
        pp: 1,
        sp: false,
        ep: 1,
        cp: 1,
        cp_mode: CpMode::Auto,
        #[cfg(feature = "context-parallel")]
        flash: false,
        #[cfg(feature = "context-parallel")]
        vpp: 1,
    };

    /// The mesh spec, Megatron's order (pipeline outermost, tensor innermost), axes of
    /// degree 1 left out (`1:dp` when every degree is 1). With `ep`, the data-parallel
    /// ranks are `dp/ep × ep`: `dp=4,ep=2` is `2x2:dp,ep`, `dp=4,ep=4` is `4:ep`.
    pub fn mesh_spec(&self) -> String {
        let axes: Vec<(usize, &str)> = [
            (self.pp, "pp"),
            (self.dp / self.ep, "dp"),
            (self.ep, "ep"),
            (self.cp, "cp"),
            (self.tp, "tp"),
        ]
        .into_iter()
        .filter(|(d, _)| *d > 1)
        .collect();
        if axes.is_empty() {
            return "1:dp".into();
        }
        let sizes: Vec<String> = axes.iter().map(|(d, _)| d.to_string()).collect();
        let names: Vec<&str> = axes.iter().map(|(_, n)| *n).collect();
        format!("{}:{}", sizes.join("x"), names.join(","))
    }

    /// The program the strategy annotates: `program` itself, or with `sp` the same with
    /// a gather point before each column-parallel layer
    /// ([`super::sequence_parallel::with_gather_points`]), and with `ep` its experts
    /// stacked where they are written one chain each ([`super::stack_experts`]).
    /// Idempotent.
    pub fn prepare(&self, program: &Program) -> Program {
        // Experts written one chain each are stacked for `ep` to split them.
        let stacked;
        let program = if self.ep > 1 {
            stacked = super::stack_experts::stack_experts(program);
            &stacked
        } else {
            program
        };
        // Context parallelism attends through `flash_attn`.
        let fused;
        #[cfg(feature = "context-parallel")]
        let flash = self.flash;
        #[cfg(not(feature = "context-parallel"))]
        let flash = false;
        let program = if self.cp > 1 || flash {
            fused = self.fused(program);
            &fused
        } else {
            program
        };
        if !self.sp || program.vars().iter().any(|v| v.name.ends_with(".gathered")) {
            return program.clone();
        }
        super::sequence_parallel::with_gather_points(program, &tensor_split(program))
    }

    /// The mode context parallelism runs attention in: the given one, or with `auto`
    /// Ulysses when every attention's heads (query and key) divide over tp × cp, else
    /// ring attention with the zig-zag order.
    pub fn resolved_cp_mode(&self, program: &Program) -> CpMode {
        if self.cp_mode != CpMode::Auto {
            return self.cp_mode;
        }
        if !program.ops().iter().any(|o| o.ty == OpType::FlashAttn) {
            return self.resolved_cp_mode(&self.fused(program));
        }
        let ways = self.tp * self.cp;
        let divides = |shape: &[usize]| shape.get(2).is_some_and(|h| h % ways == 0);
        let heads_divide = attention_operands(program).all(|(q, k)| divides(&q) && divides(&k));
        if heads_divide {
            CpMode::Ulysses
        } else {
            CpMode::Ring
        }
    }

    /// What context parallelism runs attention as, and why, for people (`None` without
    /// `cp`): `program` as [`Parallel::prepare`] gives it.
    pub fn cp_choice(&self, program: &Program) -> Option<String> {
        if self.cp == 1 {
            return None;
        }
        let mode = self.resolved_cp_mode(program);
        let ways = self.tp * self.cp;
        let heads = attention_operands(program).next().map(|(q, k)| {
            (
                q.get(2).copied().unwrap_or(0),
                k.get(2).copied().unwrap_or(0),
            )
        });
        let (q, k) = heads.unwrap_or((0, 0));
        let why = if self.cp_mode != CpMode::Auto {
            "as asked".to_string()
        } else if mode == CpMode::Ulysses {
            format!("{q} query and {k} key heads divide over tp × cp = {ways}")
        } else {
            format!("{q} query or {k} key heads do not divide over tp × cp = {ways}")
        };
        let what = match mode {
            CpMode::Ulysses => "Ulysses (all-to-all from sequence to heads and back)",
            CpMode::RingContiguous => "ring attention, contiguous order",
            CpMode::Ring | CpMode::Auto => "ring attention, zig-zag order",
        };
        Some(format!("context parallelism cp={}: {what}; {why}", self.cp))
    }

    /// `program` with its attention fused (`flash_attn`) and given this strategy's mode,
    /// which is chosen on the fused program (its key heads are the ungrouped ones).
    fn fused(&self, program: &Program) -> Program {
        use super::fuse_attention::{fuse_attention, AttentionMode};
        let first = AttentionMode {
            cp_mode: "ring",
            zigzag: 0,
        };
        let once = fuse_attention(program, first);
        let mode = self.attention_mode(&once);
        fuse_attention(&once, mode)
    }

    /// `flash_attn`'s attributes under this strategy (the zig-zag order needs the
    /// sequence to divide into 2 × cp chunks; otherwise the ring keeps the natural order).
    fn attention_mode(&self, program: &Program) -> super::fuse_attention::AttentionMode {
        let mode = self.resolved_cp_mode(program);
        let chunks = 2 * self.cp;
        let seq_divides =
            attention_operands(program).all(|(q, _)| q.get(1).is_some_and(|s| s % chunks == 0));
        let zigzag = if mode == CpMode::Ring && seq_divides {
            chunks
        } else {
            0
        };
        super::fuse_attention::AttentionMode {
            cp_mode: if mode == CpMode::Ulysses {
                "ulysses"
            } else {
                "ring"
            },
            zigzag,
        }
    }

    /// The training options the strategy implies: with `sp`, Megatron's backward sums a
    /// gathered input's gradient contributions (q, k and v's; gate and up's) while they are
    /// partial, so the sum is reduce-scattered once, as Megatron's fused layers do.
    pub fn set_options(&self, options: &mut super::PlanOptions) {
        options.megatron_sums |= self.sp;
        #[cfg(feature = "context-parallel")]
        if self.vpp > 1 {
            options.schedule = super::options::ScheduleKind::Vpp;
            options.chunks = self.vpp;
        }
    }

    /// The annotations of `program` (as [`Parallel::prepare`] gives it) under this
    /// strategy, as shard specs (`wte=tp,-`).
    pub fn shard_specs(&self, program: &Program) -> Vec<String> {
        // Sequence parallelism first: its split of an input (`x`) includes the batch's.
        let first = if self.sp && self.tp > 1 {
            super::sequence_parallel::annotations(
                program,
                &tensor_split(program),
                self.batch(),
                self.cp > 1,
            )
        } else {
            Vec::new()
        };
        self.annotate(program, first)
    }

    /// [`Parallel::shard_specs`] without sequence parallelism's annotations, for callers
    /// that refuse `sp` (the playground's link), so the page's module does not carry them.
    pub fn tensor_specs(&self, program: &Program) -> Vec<String> {
        self.annotate(program, Vec::new())
    }

    /// `first`'s annotations, then the batch's and tensor parallelism's (a variable's first
    /// annotation wins).
    fn annotate(&self, program: &Program, first: Vec<(usize, Vec<&str>)>) -> Vec<String> {
        let mut specs: Vec<(usize, String)> = Vec::new();
        let mut put = |var: usize, dims: Vec<&str>| {
            if !specs.iter().any(|(v, _)| *v == var) {
                let name = &program.vars()[var].name;
                specs.push((var, format!("{name}={}", dims.join(","))));
            }
        };
        for (v, dims) in first {
            put(v, dims);
        }
        if self.dp > 1 || self.cp > 1 {
            // The batch's first input: dim 0 split over dp (and ep), dim 1, the sequence, over cp.
            let batch = program.vars().iter().position(|v| {
                let s = &v.ty.shape;
                v.kind == VarKind::Input
                    && s.first().is_some_and(|&n| n >= self.dp)
                    && (self.cp == 1 || s.get(1).is_some_and(|&n| n >= self.cp))
            });
            if let Some(v) = batch {
                let rank = program.vars()[v].ty.shape.len();
                let mut dims = vec!["-"; rank];
                dims[0] = self.batch();
                if self.cp > 1 && rank >= 2 {
                    dims[1] = "cp";
                }
                put(v, dims);
            }
        }
        // (Only the builds that plan `flash_attn`: links do not carry `cp`.)
        if cfg!(feature = "context-parallel") && self.cp > 1 {
            // Attention's output back on the sequence split: under Ulysses the planner
            // moves it from the heads by an all-to-all (left alone, the heads' split would
            // flow into the output projection and make it a reduce-scatter of the whole
            // activation, `P` times the bytes).
            let heads = if self.tp > 1 { "tp" } else { "-" };
            for op in program.ops().iter().filter(|o| o.ty == OpType::FlashAttn) {
                if let Some(&out) = op.output("Out").first() {
                    put(out.index(), vec![self.batch(), "cp", heads, "-"]);
                }
            }
        }
        if self.ep > 1 {
            for w in expert_weights(program) {
                put(w, vec!["ep", "-", "-"]);
            }
        }
        if self.tp > 1 {
            tensor_parallel(program, &mut put);
        }
        specs.into_iter().map(|(_, s)| s).collect()
    }

    /// The mesh axes of the batch's dim: `dp`, `ep`, both (`dp+ep`) or none (`-`).
    pub fn batch(&self) -> &'static str {
        match (self.dp / self.ep > 1, self.ep > 1) {
            (true, true) => "dp+ep",
            (true, false) => "dp",
            (false, true) => "ep",
            (false, false) => "-",
        }
    }
}

/// The query and key shapes of every `flash_attn` (`[batch, seq, heads, head_dim]`).
fn attention_operands(program: &Program) -> impl Iterator<Item = (Vec<usize>, Vec<usize>)> + '_ {
    program
        .ops()
        .iter()
        .filter(|op| op.ty == OpType::FlashAttn)
        .filter_map(|op| {
            let shape = |slot: &str| {
                op.input(slot)
                    .first()
                    .map(|&v| program.var(v).ty.shape.to_vec())
            };
            Some((shape("Q")?, shape("K")?))
        })
}

/// The experts' weights: 3-D parameters read by a matmul (a dense layer's weight is 2-D;
/// a stacked `[experts, in, out]` one is read between a `moe_dispatch` and its combine).
fn expert_weights(program: &Program) -> Vec<usize> {
    let mut out = Vec::new();
    for op in program.ops().iter().filter(|o| o.ty == OpType::MatmulV2) {
        for &y in op.input("Y") {
            let v = program.var(y);
            if v.kind == VarKind::Parameter && v.ty.rank() == 3 && !out.contains(&y.index()) {
                out.push(y.index());
            }
        }
    }
    out
}

/// Which variables tensor parallelism splits (see the module's doc).
fn tensor_split(program: &Program) -> Vec<bool> {
    tensor_parallel(program, &mut |_, _| {})
}

/// Megatron's tensor-parallel annotations, by pattern (see the module's doc); returns which
/// variables it splits.
fn tensor_parallel(program: &Program, put: &mut dyn FnMut(usize, Vec<&str>)) -> Vec<bool> {
    let mut split = vec![false; program.vars().len()];
    let param = |v: crate::ir::VarId, rank: usize| {
        let var = program.var(v);
        (var.kind == VarKind::Parameter && var.ty.shape.len() == rank).then_some(v.index())
    };
    let whole = moe_whole(program);
    for (i, op) in program.ops().iter().enumerate() {
        if !matches!(op.role, OpRole::Forward | OpRole::Loss) {
            continue;
        }
        let x = op.inputs.first().and_then(|s| s.first()).copied();
        let x_split = x.is_some_and(|x| split[x.index()]);
        let mut out_split = op.all_inputs().any(|v| split[v.index()]);
        // A matmul to one output (a scalar gate per token) has nothing to split.
        let one_out = |w: usize| {
            let shape = &program.var(crate::ir::VarId(w as u32)).ty.shape;
            shape.get(1) == Some(&1) && !op.attr_bool("trans_y", false)
        };
        if op.ty == OpType::MatmulV2 {
            let w = op.input("Y").first().and_then(|&y| param(y, 2));
            if let Some(w) = w.filter(|&w| x_split || !(whole[i] || one_out(w))) {
                let column = !x_split;
                // trans_y stores the weight [out, in] (a tied LM head's table).
                let out_dim_first = op.attr_bool("trans_y", false);
                let tp_first = column == out_dim_first;
                put(
                    w,
                    if tp_first {
                        vec!["tp", "-"]
                    } else {
                        vec!["-", "tp"]
                    },
                );
                out_split = column;
            }
        } else if op.ty == OpType::LookupTableV2 {
            if let Some(w) = op.input("W").first().and_then(|&t| param(t, 2)) {
                put(w, vec!["tp", "-"]);
            }
            out_split = false;
        } else if op.ty == OpType::ElementwiseAdd && x_split {
            if let Some(b) = op.input("Y").first().and_then(|&y| param(y, 1)) {
                put(b, vec!["tp"]);
            }
        }
        for out in op.all_outputs() {
            split[out.index()] = out_split;
        }
    }
    split
}

/// The matmuls of Mixture-of-Experts layers, kept whole: the router's (whose output
/// reaches a `moe_dispatch`'s gates through one-input ops: softmax, cast, scale) and the
/// experts' (between a dispatch and its combine).
fn moe_whole(program: &Program) -> Vec<bool> {
    let ops = program.ops();
    let mut out = vec![false; ops.len()];
    let mut marked = vec![false; program.vars().len()];
    for (i, op) in ops.iter().enumerate().rev() {
        let to_gates = op.all_outputs().any(|v| marked[v.index()]);
        out[i] = to_gates && op.ty == OpType::MatmulV2;
        let next = if op.ty == OpType::MoeDispatch {
            op.input("Gates").first()
        } else if to_gates && !out[i] && op.inputs.len() == 1 {
            op.inputs[0].first()
        } else {
            None
        };
        if let Some(v) = next {
            marked[v.index()] = true;
        }
    }
    marked.fill(false);
    for (i, op) in ops.iter().enumerate() {
        let inside = op.ty == OpType::MoeDispatch
            || (op.ty != OpType::MoeCombine && op.all_inputs().any(|v| marked[v.index()]));
        for v in op.all_outputs() {
            marked[v.index()] = inside;
        }
        out[i] |= inside && op.ty == OpType::MatmulV2;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_into_megatron_meshes() {
        let p = Parallel::parse("tp=8, dp=32,pp=16").unwrap();
        assert_eq!(
            p,
            Parallel {
                dp: 32,
                tp: 8,
                pp: 16,
                ..Parallel::SERIAL
            }
        );
        assert_eq!(p.mesh_spec(), "16x32x8:pp,dp,tp");
        assert_eq!(Parallel::parse("dp=8").unwrap().mesh_spec(), "8:dp");
        assert_eq!(Parallel::parse("dp=1").unwrap().mesh_spec(), "1:dp");
        let err = |s: &str| Parallel::parse(s).unwrap_err().to_string();
        assert_eq!(err("dp=8,dp=2"), "`dp` is given twice");
        assert_eq!(
            err("xp=2"),
            "unknown parallelism `xp`; --parallel takes dp, tp, pp, ep, cp, vpp, sp, flash and cp_mode"
        );
        #[cfg(feature = "context-parallel")]
        {
            assert_eq!(
                err("vpp=2"),
                "vpp=V interleaves V model chunks per pipeline stage, so it needs pp > 1"
            );
            assert_eq!(err("pp=2,flash,flash"), "`flash` is given twice");
            let v = Parallel::parse("pp=4,vpp=3,flash").unwrap();
            assert!(v.flash && v.vpp == 3);
            let mut o = crate::plan::PlanOptions::default();
            v.set_options(&mut o);
            assert_eq!((o.schedule, o.chunks), (crate::plan::ScheduleKind::Vpp, 3));
        }
        assert_eq!(
            Parallel::parse("dp=2,cp=4,tp=2,pp=2").unwrap().mesh_spec(),
            "2x2x4x2:pp,dp,cp,tp"
        );
        assert_eq!(
            Parallel::parse("cp=4,cp_mode=ring").unwrap().cp_mode,
            CpMode::Ring
        );
        assert_eq!(err("cp_mode=ring"), "cp_mode needs cp > 1");
        assert_eq!(
            err("cp=2,cp_mode=star"),
            "cp_mode `star` is not one of ring, ring_contiguous, ulysses, auto"
        );
        let ep = |s: &str| Parallel::parse(s).unwrap().mesh_spec();
        assert_eq!(ep("dp=4,ep=2,tp=2"), "2x2x2:dp,ep,tp");
        assert_eq!(ep("dp=4,ep=4"), "4:ep");
        assert_eq!(Parallel::parse("dp=8,ep=4").unwrap().batch(), "dp+ep");
        assert_eq!(
            err("dp=2,ep=4"),
            "ep=4 must divide dp=2: the experts are laid on the data-parallel ranks"
        );
        assert_eq!(err("tp"), "`tp` is not NAME=DEGREE (e.g. dp=8,tp=8,pp=2)");
        assert_eq!(
            err("tp=0"),
            "`tp=0`: a degree is a whole number from 1 to 16384"
        );
        assert_eq!(
            err("dp=256,tp=8,pp=16"),
            "dp × cp × tp × pp = 32768 devices, more than a mesh holds (16384)"
        );
    }
}
