//! A rank's memory over its step, from exact liveness over its program.
//!
//! Parameters, optimizer state, inputs, labels and persistable variables live for the whole
//! step if any op touches them (an untouched variable takes no memory), except a
//! persistable gradient, which lives from the op that makes it to the end. Every other
//! variable (activations, gradients, temporaries) lives from the op that first writes it to
//! the last op that reads or writes it, both included: the backward pass's reads of forward
//! activations keep them alive until then, except where a grad op takes a forward input
//! only for its shape (an add's X and Y, a reshape's X: Paddle's no-need-buffer vars). The bytes live while op `i` runs are the sum over
//! the variables whose interval contains `i`.
//!
//! Bytes per element follow the compute dtype, except under mixed precision (AMP on), where
//! they follow the convention of the ZeRO paper (Rajbhandari et al. 2020, §3.1) and
//! Megatron-LM: a parameter is held in the compute dtype and as an fp32 master copy (its
//! bytes plus 4), its gradient in the compute dtype, and the optimizer state in fp32 (4
//! bytes per element), so Adam's parameters, gradients and moments take (2 + 2 + 12)·Ψ at
//! bf16. The executor has no 16-bit dtype: these bytes are modelled, not measured.

use super::work::ElementBytes;
use crate::ir::{DType, Program, VarId, VarKind};
use crate::passes::partition::zero::ZeroLayout;

/// What a variable holds, for the breakdown of a rank's memory.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum Category {
    Parameter,
    Gradient,
    OptimizerState,
    Activation,
    Input,
}

impl Category {
    /// Every category, in order (`Category as usize` indexes it).
    const ALL: [Category; 5] = [
        Category::Parameter,
        Category::Gradient,
        Category::OptimizerState,
        Category::Activation,
        Category::Input,
    ];

    fn of(kind: VarKind) -> Category {
        match kind {
            VarKind::Parameter => Category::Parameter,
            VarKind::Gradient => Category::Gradient,
            VarKind::OptimizerState => Category::OptimizerState,
            VarKind::Activation => Category::Activation,
            VarKind::Input | VarKind::Label => Category::Input,
        }
    }

    /// A lower-case name for tables.
    pub fn name(self) -> &'static str {
        match self {
            Category::Parameter => "parameters",
            Category::Gradient => "gradients",
            Category::OptimizerState => "optimizer state",
            Category::Activation => "activations",
            Category::Input => "inputs",
        }
    }
}

/// A variable's live range: the ops (by index) during which it occupies memory (`u32`: a
/// range per variable per rank is built for every planning the auto-planner prices).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Live {
    pub first: u32,
    pub last: u32,
}

impl Live {
    /// Whether the variable occupies memory while op `op` runs.
    pub fn contains(&self, op: usize) -> bool {
        (self.first as usize..=self.last as usize).contains(&op)
    }
}

/// One rank's memory over the step.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Memory {
    /// Bytes live while each op runs.
    pub at_op: Vec<f64>,
    /// The largest of `at_op` (0 for a program without ops) and the first op where it is
    /// reached.
    pub peak: f64,
    pub peak_op: usize,
    /// The bytes live at the peak, by category (in `Category` order, categories with no
    /// variable live at the peak left out). Exact whatever the order of summation: every
    /// variable's bytes are a whole number far below 2^53.
    pub breakdown: Vec<(Category, f64)>,
}

impl Memory {
    /// The bytes live at the peak, by category (in `Category` order, empty ones left out).
    pub fn peak_breakdown(&self) -> Vec<(Category, f64)> {
        self.breakdown.clone()
    }
}

/// The bytes of `v` at the cost model's element size (integers at 8 bytes).
pub fn var_bytes(program: &Program, v: VarId, elem: ElementBytes) -> f64 {
    let t = &program.var(v).ty;
    let size = match t.dtype {
        DType::I64 => 8.0,
        DType::F32 | DType::F64 => elem.0,
    };
    t.numel() as f64 * size
}

/// How the memory model sizes a variable.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sizing<'z> {
    /// Bytes of a float in the compute dtype.
    pub elem: ElementBytes,
    /// Mixed precision (AMP): fp32 master weights and fp32 optimizer state (module doc).
    pub mixed_precision: bool,
    /// The ZeRO shards of the rank programs, if any: under mixed precision the fp32 master
    /// copy of a sharded parameter is its shard (see [`Sizing::bytes`]).
    pub zero: Option<&'z ZeroLayout>,
}

impl Sizing<'_> {
    /// The bytes `v` takes in memory.
    ///
    /// Under ZeRO with mixed precision the fp32 master weights are sharded with the
    /// optimizer state: a parameter's shard holds its master copy (4 bytes per element,
    /// plus its 16-bit shard under stage 3, where the shard is the only copy kept), and
    /// the whole parameter of stages 1 and 2 is 16-bit only. Under stage 1 the full
    /// gradients are kept, and a rank's gradient shard is its partition of them, as in
    /// DeepSpeed's stage 1 (the optimizer reads a view of the flat gradient buffer): it takes
    /// no bytes of its own. That gives the ZeRO paper's 4Ψ + 12Ψ/N (stage 1), 2Ψ + 14Ψ/N
    /// (stage 2) and 16Ψ/N (stage 3) for the model states (`tests/zero.rs`).
    pub fn bytes(&self, program: &Program, v: VarId) -> f64 {
        let var = program.var(v);
        if self
            .zero
            .is_some_and(|z| z.stage == 1 && z.is_grad_shard(v))
        {
            return 0.0;
        }
        let base = var_bytes(program, v, self.elem);
        if !self.mixed_precision || var.ty.dtype == DType::I64 {
            return base;
        }
        let n = var.ty.numel() as f64;
        let zero = self.zero.filter(|z| z.is_active());
        match var.kind {
            VarKind::Parameter => match zero {
                Some(z) if z.is_param_shard(v) && z.stage >= 3 => base + 4.0 * n,
                Some(z) if z.is_param_shard(v) => 4.0 * n,
                Some(z) if z.is_sharded_param(v) => base,
                Some(_) | None => base + 4.0 * n,
            },
            VarKind::OptimizerState => 4.0 * n,
            VarKind::Gradient | VarKind::Activation | VarKind::Input | VarKind::Label => base,
        }
    }
}

/// Every variable's live range in `program` (see the module doc): `None` for a variable
/// never touched by an op.
pub fn live_ranges(program: &Program) -> Vec<Option<Live>> {
    let n_ops = program.ops().len();
    let mut live: Vec<Option<Live>> = vec![None; program.vars().len()];
    for (i, op) in program.ops().iter().enumerate() {
        let i = i as u32;
        let read = op
            .inputs
            .iter()
            .enumerate()
            .filter(|(k, _)| !is_shape_only(op, *k))
            .flat_map(|(_, slot)| slot.iter().copied());
        for v in read.chain(op.all_outputs()) {
            if let Some(slot) = live.get_mut(v.index()) {
                *slot = Some(match *slot {
                    Some(l) => Live {
                        first: l.first.min(i),
                        last: l.last.max(i),
                    },
                    None => Live { first: i, last: i },
                });
            }
        }
    }
    // A variable held all step takes its memory from the first op to the last if any op
    // touches it (under ZeRO a rank keeps the shards of the optimizer state, and the whole
    // state variables go unused). A persistable gradient (ZeRO stage 1's full gradients,
    // kept after their reduce-scatter) is kept from the op that makes it to the end of the
    // step: backward makes it, so it takes no memory before, as a stage 0 gradient does
    // not (holding it from the first op put every gradient on top of the activations'
    // peak at the start of backward, and made stage 1 dearer than stage 0).
    let last = n_ops.saturating_sub(1) as u32;
    for (slot, v) in live.iter_mut().zip(program.vars()) {
        let Some(l) = slot else { continue };
        match v.kind {
            VarKind::Parameter | VarKind::OptimizerState | VarKind::Input | VarKind::Label => {
                *l = Live { first: 0, last }
            }
            VarKind::Gradient if v.persistable => {
                *l = Live {
                    first: l.first,
                    last,
                }
            }
            VarKind::Activation if v.persistable => *l = Live { first: 0, last },
            VarKind::Gradient | VarKind::Activation => {}
        }
    }
    live
}

/// Whether input slot `k` of `op` is a forward input its grad takes only for its shape
/// (`OpDef::shape_only`): reading it does not keep a forward activation alive. A grad op's
/// slots begin with its forward op's inputs, in order (`ir::schema`). Checked per slot with
/// no allocation: liveness runs for every plan the auto-planner prices.
fn is_shape_only(op: &crate::ir::Op, k: usize) -> bool {
    let crate::ir::OpType::Grad(f) = op.ty else {
        return false;
    };
    let def = f.def();
    def.inputs
        .get(k)
        .is_some_and(|s| def.shape_only.contains(&s.name))
}

/// The memory of `program` (a rank program) over its step.
pub fn memory(program: &Program, sizing: Sizing) -> Memory {
    let n_ops = program.ops().len();
    let live = live_ranges(program);
    // A difference array: + at the first op, − after the last.
    let mut delta = vec![0.0f64; n_ops + 1];
    for (i, l) in live.iter().enumerate() {
        if let Some(l) = l {
            let b = sizing.bytes(program, VarId(i as u32));
            delta[l.first as usize] += b;
            delta[l.last as usize + 1] -= b;
        }
    }
    let mut at_op = Vec::with_capacity(n_ops);
    let mut running = 0.0;
    for d in &delta[..n_ops] {
        running += d;
        at_op.push(running);
    }
    let (peak_op, peak) =
        at_op.iter().enumerate().fold(
            (0, 0.0f64),
            |(bi, bv), (i, &v)| if v > bv { (i, v) } else { (bi, bv) },
        );
    let mut by_category: [Option<f64>; 5] = [None; 5];
    for (i, l) in live.iter().enumerate() {
        if l.is_some_and(|l| l.contains(peak_op)) {
            let v = VarId(i as u32);
            let c = Category::of(program.var(v).kind);
            *by_category[c as usize].get_or_insert(0.0) += sizing.bytes(program, v);
        }
    }
    let breakdown = Category::ALL
        .into_iter()
        .zip(by_category)
        .filter_map(|(c, b)| Some((c, b?)))
        .collect();
    Memory {
        at_op,
        peak,
        peak_op,
        breakdown,
    }
}
