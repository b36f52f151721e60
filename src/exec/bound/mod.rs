//! Error bounds carried through the serial run: the tolerance of verification, derived from
//! the computation instead of fixed constants.
//!
//! For every variable the serial run computes, `E(v)` bounds (to first order, in the max
//! norm) how far its stored value can be from the exact real-arithmetic value of the same
//! program on the same inputs. Sources (inputs, labels, initial parameters) are exact:
//! `E = 0`. Each op adds the rounding of its own arithmetic, bounded by the magnitude of the
//! *terms* it combines (`u · |x|·|y|` for a product, not `u · |x·y|`), and passes on its
//! inputs' errors through its gain (the largest absolute column sum of a matrix, the
//! Lipschitz constant of an activation, `1/σ` of a layer norm, ...). The gains and term
//! magnitudes are measured on the serial run's own values, so:
//!
//! - an analytically zero gradient (the key bias of attention: softmax ignores a constant
//!   added to every key) gets the bound of the rounding noise it is made of, not zero;
//! - a tiny tensor gets a tiny bound, not a fixed floor larger than itself;
//! - Adam's update `m̂ / (√v̂ + ε)` of a gradient at noise level is bounded by how far that
//!   ratio can move when the gradient moves by its bound (up to the whole step size).
//!
//! The distributed run computes the same real values with its own rounding (partial sums
//! stored before they are all-reduced, contractions split into blocks), whose bound has
//! the same form. So `|dist − serial| ≤ E_serial + E_dist`, and verification allows
//! [`TOLERANCE_FACTOR`] `× E` (see `verify.rs`).

mod attention;
mod decoder;
mod loss;
mod moe;
mod norm;
mod optim;
mod products;

use super::tensor::Tensor;
use crate::ir::op_type::{AmpOp, ForwardOp, MathOp, OptimizerOp, RankLocalOp};
use crate::ir::{DType, Op, OpType, VarId};

/// Unit roundoff of a dtype: half the distance from 1 to the next float.
pub fn unit_roundoff(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => f64::from(f32::EPSILON) / 2.0,
        DType::F64 | DType::I64 => f64::EPSILON / 2.0,
    }
}

/// What a bound computation reads: values before the op (for variables an op updates in
/// place), values after it, and the bounds of its inputs.
pub struct View<'a> {
    pub env: &'a [Option<Tensor>],
    pub before: &'a [(VarId, Tensor)],
    pub err: &'a [f64],
    /// Per-element bounds where an op gave them (Adam's parameters).
    pub elems: &'a [Option<Vec<f64>>],
}

impl View<'_> {
    fn value(&self, v: VarId) -> Option<&Tensor> {
        self.before
            .iter()
            .find(|(b, _)| *b == v)
            .map(|(_, t)| t)
            .or_else(|| self.env.get(v.index()).and_then(Option::as_ref))
    }
    fn after(&self, v: VarId) -> Option<&Tensor> {
        self.env.get(v.index()).and_then(Option::as_ref)
    }
    fn e(&self, v: VarId) -> f64 {
        self.err.get(v.index()).copied().unwrap_or(0.0)
    }
}

/// Largest absolute value (0 for an empty or missing tensor).
fn max_abs(t: Option<&Tensor>) -> f64 {
    t.map_or(0.0, |t| t.to_f64().iter().fold(0.0, |m, v| m.max(v.abs())))
}

/// Smallest absolute value (∞ for an empty or missing tensor).
fn min_abs(t: Option<&Tensor>) -> f64 {
    t.map_or(f64::INFINITY, |t| {
        t.to_f64().iter().fold(f64::INFINITY, |m, v| m.min(v.abs()))
    })
}

fn abs(t: &Tensor) -> Tensor {
    Tensor::float(
        DType::F64,
        t.shape.clone(),
        t.to_f64().iter().map(|v| v.abs()).collect(),
    )
}

fn square(t: &Tensor) -> Tensor {
    Tensor::float(
        DType::F64,
        t.shape.clone(),
        t.to_f64().iter().map(|v| v * v).collect(),
    )
}

fn ones(t: &Tensor) -> Tensor {
    Tensor::float(DType::F64, t.shape.clone(), vec![1.0; t.numel()])
}

/// The bound of an op's outputs, by output variable. Adam's updated parameter also gets a
/// bound per element in `per_element` (a step of a gradient at noise level may move by up to
/// the step size, while its neighbours are tightly bounded).
pub fn propagate(
    op: &Op,
    view: &View,
    per_element: &mut Option<(VarId, Vec<f64>)>,
) -> Vec<(VarId, f64)> {
    let a = At::new(op, view);
    match op.ty {
        OpType::Forward(f) => forward(&a, f),
        OpType::Grad(f) => grad(&a, f),
        OpType::FillConstant => a.one("Out", 0.0),
        OpType::Math(m) => math(&a, m),
        OpType::Optimizer(o) => optim::optimizer(&a, o, per_element),
        OpType::Amp(o) => optim::amp(&a, o),
        // Collectives and send/recv never run in the serial program; if they do (a
        // one-member group), they add the rounding of a sum of their input.
        OpType::Collective(_) => a.stored("Out", a.e("X")),
        // The rank-local ops only run in rank programs, which carry no bounds; they bound
        // like the ops they stand for (a slice moves data exactly).
        OpType::RankLocal(RankLocalOp::Slice) => a.one("Out", a.e("Input")),
        OpType::RankLocal(
            RankLocalOp::FlattenPad | RankLocalOp::UnpadReshape | RankLocalOp::Pad,
        ) => a.one("Out", a.e("X")),
        // A bucket moves values exactly: the buffer is as far off as its worst part.
        OpType::RankLocal(RankLocalOp::CoalesceTensor) => {
            let worst = op
                .input("Input")
                .iter()
                .map(|&v| view.e(v))
                .fold(0.0, f64::max);
            a.one("FusedOutput", worst)
        }
        OpType::RankLocal(RankLocalOp::UncoalesceTensor) => {
            let e = a.e("FusedOutput");
            op.output("Output").iter().map(|&v| (v, e)).collect()
        }
        OpType::RankLocal(RankLocalOp::RingAttnBlock) => attention::forward(&a),
        OpType::RankLocal(RankLocalOp::RingAttnBlockGrad) => attention::grad(&a),
        OpType::RankLocal(RankLocalOp::CEmbedding) => forward(&a, ForwardOp::LookupTableV2),
        OpType::RankLocal(RankLocalOp::CEmbeddingGrad) => grad(&a, ForwardOp::LookupTableV2),
        OpType::RankLocal(RankLocalOp::CSoftmaxWithCrossEntropy) => {
            forward(&a, ForwardOp::SoftmaxWithCrossEntropy)
        }
        OpType::RankLocal(RankLocalOp::CSoftmaxWithCrossEntropyGrad) => {
            grad(&a, ForwardOp::SoftmaxWithCrossEntropy)
        }
    }
}

/// An op with the values around it: the accessors every bound is written with.
struct At<'a> {
    op: &'a Op,
    view: &'a View<'a>,
    /// The unit roundoff of the op's output precision.
    u: f64,
}

impl<'a> At<'a> {
    fn new(op: &'a Op, view: &'a View<'a>) -> At<'a> {
        let first_out = op.outputs.iter().flat_map(|s| s.iter()).next().copied();
        let dtype = first_out
            .and_then(|v| view.after(v))
            .map_or(DType::F32, Tensor::dtype);
        At {
            op,
            view,
            u: unit_roundoff(dtype),
        }
    }

    fn inp(&self, slot: &str) -> Option<VarId> {
        self.op.input(slot).first().copied()
    }

    /// The value of an input slot's first variable.
    fn val(&self, slot: &str) -> Option<&'a Tensor> {
        self.inp(slot).and_then(|v| self.view.value(v))
    }

    /// The error bound of an input slot's first variable.
    fn e(&self, slot: &str) -> f64 {
        self.inp(slot).map_or(0.0, |v| self.view.e(v))
    }

    /// The largest magnitude of an input slot's first variable.
    fn m(&self, slot: &str) -> f64 {
        max_abs(self.val(slot))
    }

    fn out(&self, slot: &str) -> Option<VarId> {
        self.op.output(slot).first().copied()
    }

    /// The largest magnitude of an output slot's first variable, as computed.
    fn m_out(&self, slot: &str) -> f64 {
        max_abs(self.out(slot).and_then(|v| self.view.after(v)))
    }

    /// `bound` for an output slot's first variable.
    fn one(&self, slot: &str, bound: f64) -> Vec<(VarId, f64)> {
        self.out(slot).map(|v| vec![(v, bound)]).unwrap_or_default()
    }

    /// `bound` plus the rounding of storing the output (every stored output is rounded once
    /// more).
    fn stored(&self, slot: &str, bound: f64) -> Vec<(VarId, f64)> {
        self.one(slot, bound + self.u * self.m_out(slot))
    }

    /// f'(x)·dy of a smooth f: the slope of f' and its curvature bound how errors in x and
    /// dy move it.
    fn smooth_grad(&self, slope: f64, curvature: f64) -> Vec<(VarId, f64)> {
        self.stored(
            "X@GRAD",
            slope * self.e("Out@GRAD")
                + curvature * self.m("Out@GRAD") * self.e("X")
                + 8.0 * self.u * slope.max(1.0) * self.m("Out@GRAD"),
        )
    }

    /// The learning rate's magnitude.
    fn lr(&self) -> f64 {
        max_abs(self.val("LearningRate"))
    }
}

/// The bound of a forward op's outputs.
fn forward(a: &At, f: ForwardOp) -> Vec<(VarId, f64)> {
    let (op, view, u) = (a.op, a.view, a.u);
    match f {
        ForwardOp::MatmulV2 => products::matmul(a),
        ForwardOp::ElementwiseAdd | ForwardOp::ElementwiseSub => {
            a.stored("Out", a.e("X") + a.e("Y") + u * (a.m("X") + a.m("Y")))
        }
        ForwardOp::ElementwiseMul => a.stored(
            "Out",
            a.e("X") * a.m("Y")
                + a.m("X") * a.e("Y")
                + a.e("X") * a.e("Y")
                + u * a.m("X") * a.m("Y"),
        ),
        ForwardOp::ElementwiseDiv => {
            let lo = min_abs(a.val("Y")) - a.e("Y");
            if lo <= 0.0 {
                return unbounded(op);
            }
            a.stored("Out", (a.e("X") + a.m_out("Out") * a.e("Y")) / lo)
        }
        ForwardOp::Relu => a.one("Out", a.e("X")),
        ForwardOp::Gelu => a.stored("Out", GELU_SLOPE * a.e("X") + 4.0 * u * a.m("X")),
        ForwardOp::Silu => a.stored("Out", SILU_SLOPE * a.e("X") + 4.0 * u * a.m("X")),
        // σ has slope at most ¼ and values in (0, 1).
        ForwardOp::Sigmoid => a.stored("Out", 0.25 * a.e("X") + 4.0 * u),
        ForwardOp::Square => a.stored("Out", 2.0 * a.m("X") * a.e("X") + a.e("X") * a.e("X")),
        ForwardOp::Scale => {
            let s = op.attr_float("scale", 1.0).abs();
            let b = op.attr_float("bias", 0.0).abs();
            a.stored("Out", s * a.e("X") + u * (s * a.m("X") + s * b + b))
        }
        ForwardOp::Cast => a.stored("Out", a.e("X")),
        // Data movement: exact.
        ForwardOp::Assign | ForwardOp::Reshape2 | ForwardOp::Transpose2 => a.one("Out", a.e("X")),
        ForwardOp::Split => all_outputs(op, "Out", a.e("X")),
        ForwardOp::Concat => a.one("Out", max_err(op, "X", view)),
        ForwardOp::Dropout => {
            let keep = 1.0 - op.attr_float("dropout_prob", 0.5);
            let gain = if keep > 0.0 { 1.0 / keep } else { 0.0 };
            let mut v = a.stored("Out", gain * a.e("X") + u * gain * a.m("X"));
            v.extend(a.one("Mask", 0.0));
            v
        }
        ForwardOp::LookupTableV2 => a.one("Out", a.e("W")),
        ForwardOp::Softmax | ForwardOp::FusedSoftmaxMaskUpperTriangle => {
            let n = axis_len(a.val("X"), op.attr_int("axis", -1)) as f64;
            // |Δp_i| ≤ p_i (|Δx_i| + Σ_j p_j |Δx_j|) ≤ 2 max p · E(x); rounding of exp, the
            // row sum and the division is (n + 4) u relative to p.
            let mp = a.m_out("Out");
            a.stored("Out", (2.0 * mp * a.e("X") + (n + 4.0) * u * mp).min(1.0))
        }
        ForwardOp::LayerNorm => norm::layer_norm(op, view, u),
        ForwardOp::RmsNorm => norm::rms_norm(a),
        ForwardOp::FusedRotaryPositionEmbedding => decoder::rope(a, "X", "Out"),
        ForwardOp::RepeatInterleave => a.one("Out", a.e("X")),
        ForwardOp::ReduceSum | ForwardOp::ReduceMean | ForwardOp::Mean => {
            let (x, o) = (a.val("X"), a.out("Out").and_then(|v| view.after(v)));
            let n = match (x, o) {
                (Some(x), Some(o)) => x.numel() as f64 / o.numel().max(1) as f64,
                _ => 1.0,
            };
            let bound = if op.ty == OpType::ReduceSum {
                n.sqrt() * a.e("X") + n.sqrt() * u * n * a.m("X")
            } else {
                a.e("X") / n.sqrt() + n.sqrt() * u * a.m("X")
            };
            a.stored("Out", bound)
        }
        // The vocab-parallel ops only run in rank programs, which carry no bounds; they bound
        // like the ops they stand for.
        ForwardOp::SoftmaxWithCrossEntropy => loss::softmax_ce(op, view, u),
        ForwardOp::MoeDispatch => moe::dispatch(a),
        ForwardOp::MoeCombine => moe::combine(a),
        ForwardOp::FlashAttn => attention::forward(a),
    }
}

/// The bound of a grad op's outputs.
fn grad(a: &At, f: ForwardOp) -> Vec<(VarId, f64)> {
    let (op, view, u) = (a.op, a.view, a.u);
    match f {
        ForwardOp::MatmulV2 => products::matmul_grad(a),
        ForwardOp::Scale => a.stored(
            "X@GRAD",
            op.attr_float("scale", 1.0).abs() * (a.e("Out@GRAD") + u * a.m("Out@GRAD")),
        ),
        ForwardOp::Cast => a.stored("X@GRAD", a.e("Out@GRAD")),
        ForwardOp::Assign | ForwardOp::Reshape2 | ForwardOp::Transpose2 => {
            a.one("X@GRAD", a.e("Out@GRAD"))
        }
        ForwardOp::Split => a.one("X@GRAD", max_err(op, "Out@GRAD", view)),
        ForwardOp::Concat => all_outputs(op, "X@GRAD", a.e("Out@GRAD")),
        ForwardOp::Dropout => a.stored("X@GRAD", a.m("Mask") * a.e("Out@GRAD")),
        ForwardOp::LookupTableV2 => {
            // Each row of W@GRAD sums the gradients of every position holding its id.
            let count = most_repeated(a.val("Ids")) as f64;
            a.stored(
                "W@GRAD",
                count.sqrt() * a.e("Out@GRAD") + count.sqrt() * u * count * a.m("Out@GRAD"),
            )
        }
        ForwardOp::Softmax | ForwardOp::FusedSoftmaxMaskUpperTriangle => {
            let n = axis_len(a.val("Out"), op.attr_int("axis", -1)) as f64;
            let (ey, ed, my, md) = (a.e("Out"), a.e("Out@GRAD"), a.m("Out"), a.m("Out@GRAD"));
            // The softmax's bound is relative to p (E(p) = ρ max p), so Σ_j d_j Δp_j moves
            // by at most ρ max|d| (Σ p = 1). dx_i = p_i (d_i − Σ_j d_j p_j) then moves by at
            // most 3 ρ p_i max|d| + 2 p_i E(d).
            a.stored(
                "X@GRAD",
                3.0 * ey * md + 2.0 * my * ed + (n + 3.0) * u * 2.0 * my * md,
            )
        }
        ForwardOp::LayerNorm => norm::layer_norm_grad(op, view, u),
        ForwardOp::RmsNorm => norm::rms_norm_grad(a),
        ForwardOp::FusedRotaryPositionEmbedding => decoder::rope(a, "Out@GRAD", "X@GRAD"),
        ForwardOp::RepeatInterleave => decoder::repeat_grad(a),
        ForwardOp::ReduceSum | ForwardOp::ReduceMean | ForwardOp::Mean => {
            a.stored("X@GRAD", a.e("Out@GRAD"))
        }
        ForwardOp::SoftmaxWithCrossEntropy => loss::softmax_ce_grad(a),
        ForwardOp::MoeDispatch => moe::dispatch_grad(a),
        ForwardOp::MoeCombine => moe::combine_grad(a),
        ForwardOp::FlashAttn => attention::grad(a),
        ForwardOp::ElementwiseAdd | ForwardOp::ElementwiseSub => {
            let d = a.e("Out@GRAD");
            let md = a.m("Out@GRAD");
            let mut v = Vec::new();
            for (slot, operand) in [("X@GRAD", "X"), ("Y@GRAD", "Y")] {
                let r = broadcast_ratio(a.val("Out@GRAD"), a.val(operand));
                v.extend(a.stored(slot, r.sqrt() * d + r.sqrt() * u * r * md));
            }
            v
        }
        ForwardOp::ElementwiseMul => products::mul_grad(a),
        ForwardOp::ElementwiseDiv => products::div_grad(a),
        ForwardOp::Relu => {
            // A mask bit can flip where x is within its bound of 0.
            let flips = a.val("X").is_some_and(|x| {
                let ex = a.e("X");
                ex > 0.0 && x.to_f64().iter().any(|a| a.abs() <= ex)
            });
            a.one(
                "X@GRAD",
                a.e("Out@GRAD") + if flips { a.m("Out@GRAD") } else { 0.0 },
            )
        }
        // f'(x)·dy: the slope of f' and its curvature bound how errors in x and dy move it.
        ForwardOp::Gelu => a.smooth_grad(GELU_SLOPE, GELU_CURVATURE),
        ForwardOp::Silu => a.smooth_grad(SILU_SLOPE, SILU_CURVATURE),
        // σ' ≤ ¼ and |σ''| ≤ 1/(6√3) ≈ 0.0962.
        ForwardOp::Sigmoid => a.smooth_grad(0.25, 0.1),
        ForwardOp::Square => a.smooth_grad(2.0 * a.m("X"), 2.0),
    }
}

/// The bound of the planner's arithmetic (accumulation, clipping).
fn math(a: &At, o: MathOp) -> Vec<(VarId, f64)> {
    let (op, view, u) = (a.op, a.view, a.u);
    match o {
        // max is 1-Lipschitz and exact.
        MathOp::ElementwiseMax => a.one("Out", a.e("X").max(a.e("Y"))),
        MathOp::Sqrt => {
            let (ex, lo) = (a.e("X"), min_abs(a.val("X")));
            // √ is ½-Hölder near 0 and has slope 1/(2√x) away from it.
            let slope = if lo > ex {
                ex / (lo - ex).sqrt() / 2.0
            } else {
                f64::INFINITY
            };
            a.stored("Out", ex.sqrt().min(slope))
        }
        MathOp::Sum => {
            let xs = op.input("X");
            let n = xs.len() as f64;
            let (errs, mags): (f64, f64) = xs.iter().fold((0.0, 0.0), |(a, b), &v| {
                (a + view.e(v), b + max_abs(view.value(v)))
            });
            a.stored("Out", errs + n * u * mags)
        }
        MathOp::SquaredL2Norm => {
            let x = a.val("X");
            let (l1, l2, n) = x.map_or((0.0, 0.0, 0.0), |t| {
                let v = t.to_f64();
                let l1: f64 = v.iter().map(|a| a.abs()).sum();
                let l2: f64 = v.iter().map(|a| a * a).sum();
                (l1, l2, v.len() as f64)
            });
            let ex = a.e("X");
            a.stored("Out", 2.0 * l1 * ex + n * ex * ex + n * u * l2)
        }
    }
}

/// Slope of gelu (max of |Φ(x) + x φ(x)|, about 1.129) with a margin.
const GELU_SLOPE: f64 = 1.13;
/// Max |gelu''| = 2 φ(0) ≈ 0.798.
const GELU_CURVATURE: f64 = 0.8;
/// Max slope of silu, about 1.0998.
const SILU_SLOPE: f64 = 1.1;
/// Max |silu''| = ½.
const SILU_CURVATURE: f64 = 0.5;

fn unbounded(op: &Op) -> Vec<(VarId, f64)> {
    op.outputs
        .iter()
        .flat_map(|s| s.iter())
        .map(|&v| (v, f64::INFINITY))
        .collect()
}

fn all_outputs(op: &Op, slot: &str, bound: f64) -> Vec<(VarId, f64)> {
    op.output(slot).iter().map(|&v| (v, bound)).collect()
}

fn max_err(op: &Op, slot: &str, view: &View) -> f64 {
    op.input(slot)
        .iter()
        .map(|&v| view.e(v))
        .fold(0.0, f64::max)
}

/// How many elements of the gradient sum into one element of the operand (broadcasting).
fn broadcast_ratio(grad: Option<&Tensor>, operand: Option<&Tensor>) -> f64 {
    match (grad, operand) {
        (Some(g), Some(o)) => (g.numel() as f64 / o.numel().max(1) as f64).max(1.0),
        _ => 1.0,
    }
}

fn axis_len(t: Option<&Tensor>, axis: i64) -> usize {
    let Some(t) = t else { return 1 };
    let r = t.shape.len() as i64;
    let a = if axis < 0 { axis + r } else { axis };
    usize::try_from(a)
        .ok()
        .and_then(|a| t.shape.get(a).copied())
        .unwrap_or(1)
}

fn most_repeated(ids: Option<&Tensor>) -> usize {
    let Some(ids) = ids else { return 1 };
    let mut v = ids.to_i64();
    v.sort_unstable();
    let mut best = 0;
    let mut run = 0;
    for i in 0..v.len() {
        run = if i > 0 && v[i] == v[i - 1] {
            run + 1
        } else {
            1
        };
        best = best.max(run);
    }
    best.max(1)
}
