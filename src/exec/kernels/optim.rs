//! Parameter update rules, one element at a time: the caller reads each value in f64,
//! updates it, and stores it back in its tensor's precision, in place (a rank's optimizer
//! step allocates nothing).

/// sgd: `p -= lr * g`.
pub fn sgd(p: f64, g: f64, lr: f64) -> f64 {
    p - lr * g
}

/// momentum: `v = mu v + g; p -= lr v` (Nesterov: `p -= lr (g + mu v)`). Returns (p, v).
pub fn momentum(p: f64, g: f64, v: f64, lr: f64, mu: f64, nesterov: bool) -> (f64, f64) {
    let v = mu * v + g;
    let p = p - if nesterov { lr * (g + mu * v) } else { lr * v };
    (p, v)
}

/// Adam hyper-parameters; `coeff` is AdamW's decoupled weight decay (0 for Adam).
#[derive(Clone, Copy, Debug)]
pub struct AdamParams {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub epsilon: f64,
    pub coeff: f64,
}

/// One Adam step's constants, from the powers of the betas before this step.
#[derive(Clone, Copy, Debug)]
pub struct AdamStep {
    h: AdamParams,
    lr_t: f64,
    eps_t: f64,
}

impl AdamStep {
    /// Adam / AdamW as Paddle computes it: the bias correction uses the current powers,
    /// which the caller then multiplies by the betas, and epsilon is scaled by
    /// √(1 − β2^t) (Paddle's `AdamFunctor`), which makes the step exactly
    /// lr · m̂ / (√v̂ + ε).
    pub fn new(h: AdamParams, beta1_pow: f64, beta2_pow: f64) -> AdamStep {
        AdamStep {
            h,
            lr_t: h.lr * (1.0 - beta2_pow).sqrt() / (1.0 - beta1_pow),
            eps_t: h.epsilon * (1.0 - beta2_pow).abs().sqrt(),
        }
    }

    /// The updated (p, m1, m2) of one element; p's update reads the moments before they
    /// are rounded to their storage.
    pub fn apply(&self, p: f64, g: f64, m1: f64, m2: f64) -> (f64, f64, f64) {
        let h = self.h;
        let p = if h.coeff != 0.0 {
            p - h.lr * h.coeff * p
        } else {
            p
        };
        let m1 = h.beta1 * m1 + (1.0 - h.beta1) * g;
        let m2 = h.beta2 * m2 + (1.0 - h.beta2) * g * g;
        (p - self.lr_t * m1 / (m2.sqrt() + self.eps_t), m1, m2)
    }
}
