//! Parameter updates and AMP's loss scaling.

use super::Rank;
use crate::exec::kernels::optim::{adam, momentum, sgd, AdamParams};
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
        let g = self.slot(op, "Grad")?.to_f64();
        let p_t = self.slot(op, "Param")?;
        let (dtype, shape) = (p_t.dtype(), p_t.shape.clone());
        let mut p = p_t.to_f64();
        let float = |v: Vec<f64>, s: &[usize]| Tensor::float(dtype, s.to_vec(), v);
        match rule {
            Update::Sgd => sgd(&mut p, &g, lr),
            Update::Momentum => {
                let mut v = self.slot(op, "Velocity")?.to_f64();
                momentum(
                    &mut p,
                    &g,
                    &mut v,
                    lr,
                    op.attr_float("mu", 0.9),
                    op.attr_bool("use_nesterov", false),
                );
                self.set(op, "VelocityOut", float(v, &shape));
            }
            Update::Adam | Update::AdamW => {
                let mut m1 = self.slot(op, "Moment1")?.to_f64();
                let mut m2 = self.slot(op, "Moment2")?.to_f64();
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
                adam(&mut p, &g, &mut m1, &mut m2, b1p, b2p, h);
                self.set(op, "Moment1Out", float(m1, &shape));
                self.set(op, "Moment2Out", float(m2, &shape));
                self.set(op, "Beta1PowOut", float(vec![b1p * h.beta1], &[]));
                self.set(op, "Beta2PowOut", float(vec![b2p * h.beta2], &[]));
            }
        }
        self.set(op, "ParamOut", float(p, &shape));
        Ok(())
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
