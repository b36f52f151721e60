//! Parameter updates and AMP loss scaling.

/// sgd: `p -= lr * g`.
pub fn sgd(p: &mut [f64], g: &[f64], lr: f64) {
    for (p, g) in p.iter_mut().zip(g) {
        *p -= lr * g;
    }
}

/// momentum: `v = mu v + g; p -= lr v` (Nesterov: `p -= lr (g + mu v)`).
pub fn momentum(p: &mut [f64], g: &[f64], v: &mut [f64], lr: f64, mu: f64, nesterov: bool) {
    for ((p, g), v) in p.iter_mut().zip(g).zip(v.iter_mut()) {
        *v = mu * *v + g;
        *p -= if nesterov {
            lr * (g + mu * *v)
        } else {
            lr * *v
        };
    }
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

/// Adam / AdamW as Paddle computes it: the bias correction uses the current powers,
/// which the caller then multiplies by the betas, and epsilon is scaled by √(1 − β2^t)
/// (Paddle's `AdamFunctor`), which makes the step exactly lr · m̂ / (√v̂ + ε).
pub fn adam(
    p: &mut [f64],
    g: &[f64],
    m1: &mut [f64],
    m2: &mut [f64],
    beta1_pow: f64,
    beta2_pow: f64,
    h: AdamParams,
) {
    let lr_t = h.lr * (1.0 - beta2_pow).sqrt() / (1.0 - beta1_pow);
    for i in 0..p.len() {
        if h.coeff != 0.0 {
            p[i] -= h.lr * h.coeff * p[i];
        }
        m1[i] = h.beta1 * m1[i] + (1.0 - h.beta1) * g[i];
        m2[i] = h.beta2 * m2[i] + (1.0 - h.beta2) * g[i] * g[i];
        p[i] -= lr_t * m1[i] / (m2[i].sqrt() + h.epsilon * (1.0 - beta2_pow).abs().sqrt());
    }
}
