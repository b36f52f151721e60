//! Parameter updates and AMP's loss scaling.

use super::Rank;
use crate::exec::kernels::optim::{momentum, sgd, AdamParams, AdamStep};
use crate::exec::op_error::OpError;
use crate::exec::tensor::Tensor;
use crate::ir::{DType, Op, VarId};

type Res = Result<(), crate::exec::op_error::OpError>;

/// Which update rule an optimizer op runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Update {
    Sgd,
    Momentum,
    Adam,
    /// Adam with decoupled weight decay (`coeff`).
    AdamW,
}

impl Rank<'_> {
    pub(super) fn update(&mut self, op: &Op, rule: Update) -> Res {
        let lr = self.slot(op, "LearningRate")?.scalar();
        let mut p = self.owned(op, "Param", "ParamOut")?;
        let n = p.numel();
        match rule {
            Update::Sgd => {
                let g = self.grad(op, &p)?;
                if !p.zip_update(g, |v, g| sgd(v, g, lr)) {
                    let g = g.to_f64();
                    p.update_indexed(|i, v| sgd(v, g[i], lr));
                }
            }
            Update::Momentum => {
                let (mu, nesterov) = (
                    op.attr_float("mu", 0.9),
                    op.attr_bool("use_nesterov", false),
                );
                let mut vel = self.state(op, "Velocity", n)?;
                let g = self.grad(op, &p)?.to_f64();
                p.update_indexed(|i, v| {
                    let (v, u) = momentum(v, g[i], vel.at(i), lr, mu, nesterov);
                    vel.put(i, u);
                    v
                });
                self.set(op, "VelocityOut", vel);
            }
            Update::Adam | Update::AdamW => {
                let (b1p, b2p) = (
                    self.slot(op, "Beta1Pow")?.scalar(),
                    self.slot(op, "Beta2Pow")?.scalar(),
                );
                let h = AdamParams {
                    lr,
                    beta1: op.attr_float("beta1", 0.9),
                    beta2: op.attr_float("beta2", 0.999),
                    epsilon: op.attr_float("epsilon", 1e-8),
                    coeff: if rule == Update::AdamW {
                        op.attr_float("coeff", 0.01)
                    } else {
                        0.0
                    },
                };
                let step = AdamStep::new(h, b1p, b2p);
                let mut m1 = self.state(op, "Moment1", n)?;
                let mut m2 = self.state(op, "Moment2", n)?;
                let g = self.grad(op, &p)?.to_f64();
                p.update_indexed(|i, v| {
                    let (v, a, b) = step.apply(v, g[i], m1.at(i), m2.at(i));
                    m1.put(i, a);
                    m2.put(i, b);
                    v
                });
                let dtype = p.dtype();
                self.set(op, "Moment1Out", m1);
                self.set(op, "Moment2Out", m2);
                let power = |v: f64| Tensor::float(dtype, vec![], vec![v]);
                self.set(op, "Beta1PowOut", power(b1p * h.beta1));
                self.set(op, "Beta2PowOut", power(b2p * h.beta2));
            }
        }
        self.set(op, "ParamOut", p);
        Ok(())
    }

    /// An optimizer's gradient, of its parameter's size.
    fn grad(&self, op: &Op, p: &Tensor) -> Result<&Tensor, OpError> {
        let g = self.slot(op, "Grad")?;
        if g.numel() != p.numel() {
            return Err(OpError::GradShape {
                what: "optimizer",
                x: p.shape.clone(),
                grad: g.shape.clone(),
            });
        }
        Ok(g)
    }

    /// An optimizer state of `n` elements (a moment, a velocity), to update in place.
    fn state(&mut self, op: &Op, slot: &'static str, n: usize) -> Result<Tensor, OpError> {
        let t = self.owned(op, slot, &format!("{slot}Out"))?;
        if t.numel() != n {
            return Err(OpError::GradShape {
                what: slot,
                x: vec![n],
                grad: t.shape.clone(),
            });
        }
        Ok(t)
    }

    /// Unscales every X by 1/Scale and says whether any value is not finite.
    pub(super) fn check_finite_and_unscale(&mut self, op: &Op) -> Res {
        let inv = 1.0 / self.slot(op, "Scale")?.scalar();
        let mut found = false;
        let xs: Vec<VarId> = op.input("X").to_vec();
        for (&v, &o) in xs.iter().zip(op.output("Out")) {
            let t = self.get(v)?;
            let vals = t.to_f64();
            found |= vals.iter().any(|a| !a.is_finite());
            let out = Tensor::float(
                t.dtype(),
                t.shape.clone(),
                vals.iter().map(|a| a * inv).collect(),
            );
            self.set_var(o, out);
        }
        let flag = Tensor::float(DType::F32, vec![], vec![f64::from(found)]);
        self.set(op, "FoundInfinite", flag);
        Ok(())
    }

    /// Paddle's dynamic loss scaling: shrink after repeated overflows (and zero this step's
    /// gradients), grow after a run of good steps.
    pub(super) fn update_loss_scaling(&mut self, op: &Op) -> Res {
        let found = self.slot(op, "FoundInfinite")?.scalar() != 0.0;
        let scale_t = self.slot(op, "PrevLossScaling")?.clone();
        let (mut scale, mut good, mut bad) = (
            scale_t.scalar(),
            self.slot(op, "InGoodSteps")?.scalar(),
            self.slot(op, "InBadSteps")?.scalar(),
        );
        if found {
            good = 0.0;
            bad += 1.0;
            if bad >= op.attr_int("decr_every_n_nan_or_inf", 2) as f64 {
                scale = (scale * op.attr_float("decr_ratio", 0.5)).max(1.0);
                bad = 0.0;
            }
        } else {
            bad = 0.0;
            good += 1.0;
            if good >= op.attr_int("incr_every_n_steps", 1000) as f64 {
                scale *= op.attr_float("incr_ratio", 2.0);
                good = 0.0;
            }
        }
        if found {
            // Zero the gradients so the update is a no-op this step.
            let xs: Vec<VarId> = op.input("X").to_vec();
            for (&v, &o) in xs.iter().zip(op.output("Out")) {
                let t = self.get(v)?;
                let z = Tensor::zeros(t.dtype(), t.shape.clone());
                self.set_var(o, z);
            }
        }
        let dtype = scale_t.dtype();
        self.set(op, "LossScaling", Tensor::float(dtype, vec![], vec![scale]));
        self.set(op, "OutGoodSteps", Tensor::float(dtype, vec![], vec![good]));
        self.set(op, "OutBadSteps", Tensor::float(dtype, vec![], vec![bad]));
        Ok(())
    }
}
