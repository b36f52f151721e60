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
        OpType::Optimizer(o) => optimizer(&a, o, per_element),
        OpType::Amp(o) => amp(&a, o),
        // Collectives and send/recv never run in the serial program; if they do (a
        // one-member group), they add the rounding of a sum of their input.
        OpType::Collective(_) => a.stored("Out", a.e("X")),
        // The rank-local ops only run in rank programs, which carry no bounds; they bound
        // like the ops they stand for (a slice moves data exactly).
        OpType::RankLocal(RankLocalOp::Slice) => a.one("Out", a.e("Input")),
        OpType::RankLocal(RankLocalOp::FlattenPad | RankLocalOp::UnpadReshape) => {
            a.one("Out", a.e("X"))
        }
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
        ForwardOp::MatmulV2 => matmul(a),
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
        ForwardOp::LayerNorm => layer_norm(op, view, u),
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
        ForwardOp::SoftmaxWithCrossEntropy => softmax_ce(op, view, u),
    }
}

/// The bound of a grad op's outputs.
fn grad(a: &At, f: ForwardOp) -> Vec<(VarId, f64)> {
    let (op, view, u) = (a.op, a.view, a.u);
    match f {
        ForwardOp::MatmulV2 => matmul_grad(a),
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
        ForwardOp::LayerNorm => layer_norm_grad(op, view, u),
        ForwardOp::ReduceSum | ForwardOp::ReduceMean | ForwardOp::Mean => {
            a.stored("X@GRAD", a.e("Out@GRAD"))
        }
        ForwardOp::SoftmaxWithCrossEntropy => softmax_ce_grad(a),
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
        ForwardOp::ElementwiseMul => mul_grad(a),
        ForwardOp::ElementwiseDiv => div_grad(a),
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

/// The bound of an optimizer update.
fn optimizer(
    a: &At,
    o: OptimizerOp,
    per_element: &mut Option<(VarId, Vec<f64>)>,
) -> Vec<(VarId, f64)> {
    let (op, view, u) = (a.op, a.view, a.u);
    match o {
        OptimizerOp::Sgd => a.stored(
            "ParamOut",
            a.e("Param") + a.lr() * a.e("Grad") + u * (a.m("Param") + a.lr() * a.m("Grad")),
        ),
        OptimizerOp::Momentum => {
            let mu = op.attr_float("mu", 0.9).abs();
            let ev = mu * a.e("Velocity") + a.e("Grad");
            let mv = a.m_out("VelocityOut");
            let step = if op.attr_bool("use_nesterov", false) {
                a.e("Grad") + mu * ev
            } else {
                ev
            };
            let mut v = a.stored("VelocityOut", ev + u * (mu * a.m("Velocity") + a.m("Grad")));
            v.extend(a.stored(
                "ParamOut",
                a.e("Param") + a.lr() * step + u * (a.m("Param") + a.lr() * (a.m("Grad") + mv)),
            ));
            v
        }
        OptimizerOp::Adam | OptimizerOp::AdamW => adam(op, view, u, per_element),
    }
}

/// The bound of AMP's ops.
fn amp(a: &At, o: AmpOp) -> Vec<(VarId, f64)> {
    let (op, view, u) = (a.op, a.view, a.u);
    match o {
        AmpOp::CheckFiniteAndUnscale => {
            let inv = 1.0 / max_abs(a.val("Scale")).max(f64::MIN_POSITIVE);
            let mut v: Vec<(VarId, f64)> = op
                .input("X")
                .iter()
                .zip(op.output("Out"))
                .map(|(&x, &o)| (o, inv * view.e(x) + u * max_abs(view.after(o))))
                .collect();
            v.extend(a.one("FoundInfinite", 0.0));
            v
        }
        AmpOp::UpdateLossScaling => {
            // An overflowing step zeroes every gradient exactly (their bounds, inf or NaN
            // after the overflow, no longer apply).
            let overflowed = max_abs(a.val("FoundInfinite")) != 0.0;
            let mut v: Vec<(VarId, f64)> = op
                .input("X")
                .iter()
                .zip(op.output("Out"))
                .map(|(&x, &o)| (o, if overflowed { 0.0 } else { view.e(x) }))
                .collect();
            for slot in ["LossScaling", "OutGoodSteps", "OutBadSteps"] {
                v.extend(a.one(slot, 0.0));
            }
            v
        }
    }
}

/// matmul: each output sums k products; errors of the k terms add like independent variables.
fn matmul(a: &At) -> Vec<(VarId, f64)> {
    let (op, u) = (a.op, a.u);
    let (tx, ty) = (
        op.attr_bool("trans_x", false),
        op.attr_bool("trans_y", false),
    );
    let (Some(x), Some(y)) = (a.val("X"), a.val("Y")) else {
        return unbounded(op);
    };
    let mm = |a: &Tensor, b: &Tensor| {
        super::kernels::matmul::matmul(a, b, tx, ty).map_or(f64::INFINITY, |t| max_abs(Some(&t)))
    };
    let k = contraction(x, tx, true);
    // Errors of the k terms add like independent variables: the gain of X's error is
    // the largest column norm of Y (√Σ y²), and the other way round.
    let terms = mm(&abs(x), &abs(y));
    let bound = a.e("X") * mm(&ones(x), &square(y)).sqrt()
        + mm(&square(x), &ones(y)).sqrt() * a.e("Y")
        + k.sqrt() * a.e("X") * a.e("Y")
        + (k.sqrt() + 1.0) * u * terms;
    a.stored("Out", bound)
}

/// matmul_grad: dX = dOut·Yᵀ sums over n (and broadcast batches), dY = Xᵀ·dOut over m.
fn matmul_grad(a: &At) -> Vec<(VarId, f64)> {
    let (op, u) = (a.op, a.u);
    let (tx, ty) = (
        op.attr_bool("trans_x", false),
        op.attr_bool("trans_y", false),
    );
    let (Some(x), Some(y), Some(d)) = (a.val("X"), a.val("Y"), a.val("Out@GRAD")) else {
        return unbounded(op);
    };
    let g = |a: &Tensor, b: &Tensor, c: &Tensor| {
        super::kernels::matmul::matmul_grad(a, b, c, tx, ty)
            .map_or((f64::INFINITY, f64::INFINITY), |(p, q)| {
                (max_abs(Some(&p)), max_abs(Some(&q)))
            })
    };
    let (rx, ry) = g(&abs(x), &abs(y), &abs(d));
    let (from_d_x, from_d_y) = g(&square(x), &square(y), &ones(d));
    let (from_y, from_x) = g(&ones(x), &ones(y), &square(d));
    let (from_d_x, from_d_y, from_y, from_x) = (
        from_d_x.sqrt(),
        from_d_y.sqrt(),
        from_y.sqrt(),
        from_x.sqrt(),
    );
    // Contraction lengths: dX sums over n (and broadcast batches), dY over m.
    let n = d.numel().max(1) as f64 / x.numel().max(1) as f64 * contraction(x, tx, true);
    let mx = d.numel().max(1) as f64 / y.numel().max(1) as f64 * contraction(y, ty, false);
    let (ed, ex, ey) = (a.e("Out@GRAD"), a.e("X"), a.e("Y"));
    let mut v = a.stored(
        "X@GRAD",
        ed * from_d_x + from_y * ey + n.sqrt() * ed * ey + (n.sqrt() + 1.0) * u * rx,
    );
    v.extend(a.stored(
        "Y@GRAD",
        from_d_y * ed + from_x * ex + mx.sqrt() * ed * ex + (mx.sqrt() + 1.0) * u * ry,
    ));
    v
}

/// softmax_with_cross_entropy_grad: d (p Σlabel − label).
fn softmax_ce_grad(a: &At) -> Vec<(VarId, f64)> {
    let (op, u) = (a.op, a.u);
    let soft = op.attr_bool("soft_label", false);
    let axis = op.attr_int("axis", -1);
    let label_l1 = if soft {
        row_abs_sum(a.val("Label"), axis)
    } else {
        1.0
    };
    let (es, el, ed) = (a.e("Softmax"), a.e("Label"), a.e("Loss@GRAD"));
    let (ms, ml, md) = (
        a.m("Softmax"),
        if soft { a.m("Label") } else { 1.0 },
        a.m("Loss@GRAD"),
    );
    let n = axis_len(a.val("Softmax"), axis) as f64;
    // d (p Σlabel − label): the label total is summed in f64 (n terms).
    let inner = ms * label_l1 + ml;
    a.stored(
        "Logits@GRAD",
        ed * inner + md * (es * label_l1 + el * (n * ms + 1.0)) + (n + 2.0) * u * md * inner,
    )
}

/// elementwise_mul_grad: each operand's gradient is dOut times the other operand, summed over its broadcast dims.
fn mul_grad(a: &At) -> Vec<(VarId, f64)> {
    let u = a.u;
    let (ed, md) = (a.e("Out@GRAD"), a.m("Out@GRAD"));
    let mut v = Vec::new();
    for (slot, me, other) in [("X@GRAD", "X", "Y"), ("Y@GRAD", "Y", "X")] {
        let r = broadcast_ratio(a.val("Out@GRAD"), a.val(me));
        let (eo, mo) = (a.e(other), a.m(other));
        v.extend(a.stored(
            slot,
            r.sqrt() * (ed * mo + md * eo + ed * eo) + r.sqrt() * u * 2.0 * r * md * mo,
        ));
    }
    v
}

/// elementwise_div_grad: unbounded when Y's interval reaches 0.
fn div_grad(a: &At) -> Vec<(VarId, f64)> {
    let (op, u) = (a.op, a.u);
    let lo = min_abs(a.val("Y")) - a.e("Y");
    if lo <= 0.0 {
        return unbounded(op);
    }
    let (ed, md, ex, mx, ey) = (
        a.e("Out@GRAD"),
        a.m("Out@GRAD"),
        a.e("X"),
        a.m("X"),
        a.e("Y"),
    );
    let rx = broadcast_ratio(a.val("Out@GRAD"), a.val("X"));
    let ry = broadcast_ratio(a.val("Out@GRAD"), a.val("Y"));
    let mut v = a.stored(
        "X@GRAD",
        rx * (ed / lo + md * ey / (lo * lo)) + rx * u * 2.0 * rx * md / lo,
    );
    v.extend(a.stored(
        "Y@GRAD",
        ry * (ed * mx / (lo * lo) + md * ex / (lo * lo) + 2.0 * md * mx * ey / lo.powi(3))
            + ry * u * 3.0 * ry * md * mx / (lo * lo),
    ));
    v
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

/// The contraction length of a matmul operand.
fn contraction(t: &Tensor, trans: bool, is_x: bool) -> f64 {
    let r = t.shape.len();
    let k = match r {
        0 => 1,
        1 => t.shape[0],
        _ => {
            let last = (is_x && !trans) || (!is_x && trans);
            if last {
                t.shape[r - 1]
            } else {
                t.shape[r - 2]
            }
        }
    };
    k.max(1) as f64
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

/// The largest Σ|x| along `axis` (the L1 norm of a soft-label row).
fn row_abs_sum(t: Option<&Tensor>, axis: i64) -> f64 {
    let Some(t) = t else { return 0.0 };
    let n = axis_len(Some(t), axis);
    let r = t.shape.len() as i64;
    let a = usize::try_from(if axis < 0 { axis + r } else { axis }).unwrap_or(0);
    let inner: usize = t.shape.iter().skip(a + 1).product();
    let v = t.to_f64();
    let outer = v.len() / (n * inner).max(1);
    let mut best: f64 = 0.0;
    for o in 0..outer {
        for i in 0..inner {
            let s: f64 = (0..n).map(|j| v[o * n * inner + j * inner + i].abs()).sum();
            best = best.max(s);
        }
    }
    best
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

/// Normalised rows x̂ = (x − μ) / σ: (max |x̂|, min σ, row length).
fn normalised(x: &Tensor, var: Option<&Tensor>, begin: usize, eps: f64) -> (f64, f64, f64) {
    let cols: usize = x.shape.iter().skip(begin).product();
    let v = x.to_f64();
    let rows = v.len() / cols.max(1);
    let vars = var.map(Tensor::to_f64).unwrap_or_default();
    let (mut mx, mut min_sigma) = (0.0f64, f64::INFINITY);
    for r in 0..rows {
        let row = &v[r * cols..(r + 1) * cols];
        let mean = row.iter().sum::<f64>() / cols as f64;
        let var = vars.get(r).copied().unwrap_or_else(|| {
            row.iter().map(|a| (a - mean) * (a - mean)).sum::<f64>() / cols as f64
        });
        let sigma = (var + eps).sqrt();
        min_sigma = min_sigma.min(sigma);
        for a in row {
            mx = mx.max((a - mean).abs() / sigma);
        }
    }
    (mx, min_sigma, cols as f64)
}

fn layer_norm(op: &Op, view: &View, u: f64) -> Vec<(VarId, f64)> {
    let get = |s: &str| op.input(s).first().copied();
    let Some(x) = get("X").and_then(|v| view.value(v)) else {
        return unbounded(op);
    };
    let e = |s: &str| get(s).map_or(0.0, |v| view.e(v));
    let m = |s: &str| get(s).map_or(1.0, |v| max_abs(view.value(v)));
    let begin = op.attr_int("begin_norm_axis", 1).max(0) as usize;
    let eps = op.attr_float("epsilon", 1e-5);
    let (mxh, sigma, n) = normalised(x, None, begin, eps);
    let ex = e("X");
    // Δx̂ ≤ (|Δx| + |Δμ| + |x̂| |Δσ|) / σ with |Δμ|, |Δσ| ≤ E(x); rounding of the row
    // mean and variance (n terms each) relative to max|x|.
    let exh = (ex * (2.0 + mxh) + 2.0 * n * u * max_abs(Some(x))) / sigma;
    let (scale, bias) = (
        if get("Scale").is_some() {
            m("Scale")
        } else {
            1.0
        },
        if get("Bias").is_some() {
            m("Bias")
        } else {
            0.0
        },
    );
    let y = exh * scale + mxh * e("Scale") + e("Bias") + 3.0 * u * (mxh * scale + bias);
    let ym = max_abs(op.output("Y").first().and_then(|&v| view.after(v)));
    let mut v: Vec<(VarId, f64)> = op.output("Y").iter().map(|&o| (o, y + u * ym)).collect();
    let mx = max_abs(Some(x));
    v.extend(op.output("Mean").iter().map(|&o| (o, ex + n * u * mx)));
    v.extend(
        op.output("Variance")
            .iter()
            .map(|&o| (o, 2.0 * mx * ex + ex * ex + 2.0 * n * u * mx * mx)),
    );
    v
}

fn layer_norm_grad(op: &Op, view: &View, u: f64) -> Vec<(VarId, f64)> {
    let get = |s: &str| op.input(s).first().copied();
    let (Some(x), Some(dy)) = (
        get("X").and_then(|v| view.value(v)),
        get("Y@GRAD").and_then(|v| view.value(v)),
    ) else {
        return unbounded(op);
    };
    let e = |s: &str| get(s).map_or(0.0, |v| view.e(v));
    let begin = op.attr_int("begin_norm_axis", 1).max(0) as usize;
    let eps = op.attr_float("epsilon", 1e-5);
    let var = get("Variance").and_then(|v| view.value(v));
    let (mxh, sigma, n) = normalised(x, var, begin, eps);
    let rows = x.numel() as f64 / n.max(1.0);
    let (ex, edy) = (e("X"), e("Y@GRAD"));
    let mdy = max_abs(Some(dy));
    let (ms, es) = match get("Scale") {
        Some(v) => (max_abs(view.value(v)), view.e(v)),
        None => (1.0, 0.0),
    };
    let exh = (ex * (2.0 + mxh) + 2.0 * n * u * max_abs(Some(x))) / sigma;
    // dx = (1/σ)(dx̂ − mean(dx̂) − x̂ mean(dx̂ x̂)), dx̂ = dy γ. By Cauchy–Schwarz
    // |mean(dx̂ x̂)| ≤ max|dx̂| √mean(x̂²) ≤ max|dx̂|, so |dx| ≤ max|dx̂| (2 + max|x̂|) / σ.
    let (mdxh, edxh) = (mdy * ms, edy * ms + mdy * es);
    let gain = 2.0 + mxh;
    let dx = (edxh * gain + mdxh * exh * (1.0 + mxh)) / sigma
        + mdxh * gain * ex / (sigma * sigma)
        + (n + 4.0) * u * mdxh * gain / sigma;
    let mut v = Vec::new();
    let stored = |slot: &str, b: f64| {
        op.output(slot)
            .iter()
            .map(|&o| (o, b + u * max_abs(view.after(o))))
            .collect::<Vec<_>>()
    };
    v.extend(stored("X@GRAD", dx));
    v.extend(stored(
        "Scale@GRAD",
        rows.sqrt() * (edy * mxh + mdy * exh) + rows.sqrt() * u * rows * mdy * mxh,
    ));
    v.extend(stored(
        "Bias@GRAD",
        rows.sqrt() * edy + rows.sqrt() * u * rows * mdy,
    ));
    v
}

fn softmax_ce(op: &Op, view: &View, u: f64) -> Vec<(VarId, f64)> {
    let get = |s: &str| op.input(s).first().copied();
    let Some(logits) = get("Logits").and_then(|v| view.value(v)) else {
        return unbounded(op);
    };
    let e = |s: &str| get(s).map_or(0.0, |v| view.e(v));
    let a = op.attr_int("axis", -1);
    let n = axis_len(Some(logits), a) as f64;
    let soft = op.attr_bool("soft_label", false);
    let sm_out = op.output("Softmax").first().copied();
    let sm = sm_out.and_then(|v| view.after(v));
    let mp = max_abs(sm);
    let el = e("Logits");
    let ml = max_abs(Some(logits));
    let mut v: Vec<(VarId, f64)> = sm_out
        .map(|o| (o, (2.0 * mp * el + (n + 4.0) * u * mp).min(1.0) + u * mp))
        .into_iter()
        .collect();
    // −log p_c = logsumexp(x) − x_c moves by at most 2 E(x); with soft labels the row
    // total of |label| multiplies it, and a label error meets max |log p|.
    let min_p = sm.map_or(1.0, |t| {
        t.to_f64()
            .iter()
            .fold(1.0f64, |m, &p| m.min(p.max(f64::MIN_POSITIVE)))
    });
    let max_log = -min_p.ln();
    let (label_l1, label_e) = if soft {
        (
            row_abs_sum(get("Label").and_then(|v| view.value(v)), a),
            e("Label"),
        )
    } else {
        (1.0, 0.0)
    };
    let loss_out = op.output("Loss").first().copied();
    let ml_out = max_abs(loss_out.and_then(|v| view.after(v)));
    let bound = label_l1 * (2.0 * el + (n + 4.0) * u * (ml + max_log + 1.0))
        + label_e * n * max_log
        + u * ml_out;
    v.extend(loss_out.map(|o| (o, bound)));
    v
}

fn adam(
    op: &Op,
    view: &View,
    u: f64,
    per_element: &mut Option<(VarId, Vec<f64>)>,
) -> Vec<(VarId, f64)> {
    let get = |s: &str| op.input(s).first().copied();
    let val = |s: &str| get(s).and_then(|v| view.value(v));
    let e = |s: &str| get(s).map_or(0.0, |v| view.e(v));
    let (Some(g), Some(m1), Some(m2), Some(p)) =
        (val("Grad"), val("Moment1"), val("Moment2"), val("Param"))
    else {
        return unbounded(op);
    };
    let lr = max_abs(val("LearningRate"));
    let beta1 = op.attr_float("beta1", 0.9);
    let beta2 = op.attr_float("beta2", 0.999);
    let eps = op.attr_float("epsilon", 1e-8);
    let coeff = if op.ty == OpType::AdamW {
        op.attr_float("coeff", 0.01)
    } else {
        0.0
    };
    let b1p = max_abs(val("Beta1Pow"));
    let b2p = max_abs(val("Beta2Pow"));
    let (eg, em1, em2, ep) = (e("Grad"), e("Moment1"), e("Moment2"), e("Param"));
    let (gv, m1v, m2v) = (g.to_f64(), m1.to_f64(), m2.to_f64());
    let mg = max_abs(Some(g));
    let e_m1 = beta1 * em1 + (1.0 - beta1) * eg + 2.0 * u * (beta1 * max_abs(Some(m1)) + mg);
    let e_m2 = beta2 * em2
        + (1.0 - beta2) * (2.0 * mg * eg + eg * eg)
        + 3.0 * u * (beta2 * max_abs(Some(m2)) + mg * mg);
    // The step lr_t · m / (√v + ε) of each element moves by at most
    // (Δm + |r| Δs) / max(s − Δs, ε), s = √v + ε, Δs the bound of √v.
    let lr_t = lr * (1.0 - b2p).abs().sqrt() / (1.0 - b1p).abs().max(f64::MIN_POSITIVE);
    // Paddle scales epsilon by √(1 − β2^t) (see kernels/optim.rs).
    let eps_t = (eps * (1.0 - b2p).abs().sqrt()).max(f64::MIN_POSITIVE);
    // Whatever the gradients, |m| / √v ≤ (1−β1) / √((1−β2)(1−β1²/β2)) (Cauchy–Schwarz over
    // the moving averages, both started at 0), so a step moves by at most |r| + that.
    let cap = if beta1 * beta1 < beta2 && beta2 < 1.0 {
        (1.0 - beta1) / ((1.0 - beta2) * (1.0 - beta1 * beta1 / beta2)).sqrt()
    } else {
        f64::INFINITY
    };
    let ep_elems = get("Param")
        .and_then(|v| view.elems.get(v.index()))
        .and_then(Option::as_ref);
    let pv = p.to_f64();
    let mut elems = Vec::with_capacity(gv.len());
    let mut worst: f64 = 0.0;
    let mut largest: f64 = 0.0;
    for i in 0..gv.len().min(m1v.len()).min(m2v.len()) {
        let m = beta1 * m1v[i] + (1.0 - beta1) * gv[i];
        let v = beta2 * m2v[i] + (1.0 - beta2) * gv[i] * gv[i];
        let root = v.max(0.0).sqrt();
        let ds = e_m2.sqrt().min(if root > 0.0 {
            e_m2 / (2.0 * root)
        } else {
            f64::INFINITY
        });
        let s = root + eps_t;
        let r = m.abs() / s;
        largest = largest.max(r);
        let first_order = (e_m1 + r * ds) / (s - ds).max(eps_t);
        let step = first_order.min(r + cap) + 4.0 * u * r;
        worst = worst.max(step);
        let before = ep_elems.and_then(|e| e.get(i).copied()).unwrap_or(ep);
        let p_new = pv[i] * (1.0 - lr * coeff) - lr_t * m / s;
        elems.push(
            before * (1.0 - lr * coeff).abs()
                + lr_t * step
                + u * (pv[i].abs() * (1.0 + lr * coeff) + lr_t * r + p_new.abs()),
        );
    }
    let ep_out = ep * (1.0 - lr * coeff).abs()
        + lr_t * worst
        + u * (max_abs(Some(p)) * (1.0 + lr * coeff) + lr_t * largest);
    let after = |s: &str| {
        op.output(s)
            .first()
            .map(|&o| u * max_abs(view.after(o)))
            .unwrap_or(0.0)
    };
    let mut v = Vec::new();
    let mut put = |slot: &str, b: f64| {
        if let Some(&o) = op.output(slot).first() {
            v.push((o, b));
        }
    };
    if let Some(&o) = op.output("ParamOut").first() {
        *per_element = Some((o, elems));
    }
    put("ParamOut", ep_out + after("ParamOut"));
    put("Moment1Out", e_m1 + after("Moment1Out"));
    put("Moment2Out", e_m2 + after("Moment2Out"));
    put("Beta1PowOut", 0.0);
    put("Beta2PowOut", 0.0);
    v
}
