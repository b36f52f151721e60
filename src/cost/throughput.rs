//! Throughput as published runs report it: TFLOP/s per device and tokens per second per
//! device, counted with a named formula, and whether the plan fits in the device's memory.
//!
//! The formulas (docs/cost.md):
//! - `model_6n`: 6 × parameters × tokens, plus attention's score and value matmuls,
//!   12 · layers · hidden · seq per token (forward and backward, causal masking not halved:
//!   how the Llama 3 paper and torchtitan count). A Mixture of Experts counts its active
//!   parameters (the experts a token is routed to).
//! - `megatron_ptdp`: 96 · B · s · l · h² · (1 + s/6h + V/16lh) per step (Narayanan et al.
//!   2021, eq. 3): a dense GPT's FLOPs with full recomputation counted, as Megatron reports.
//! - `program`: the serial program's forward and backward ops as the planner built them (a
//!   plan file, whose model's sizes are not known).
//!
//! MFU is the formula's FLOPs over the step time × the devices × their dense peak.

/// What the device gives a step: its dense peak FLOP/s and its memory, bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DeviceLimits {
    pub peak_flops: f64,
    pub memory: f64,
}

/// How model FLOPs are counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlopsFormula {
    Model6N,
    MegatronPtdp,
    Program,
}

impl FlopsFormula {
    /// The name on the command line and in the JSON.
    pub fn name(self) -> &'static str {
        match self {
            FlopsFormula::Model6N => "model_6n",
            FlopsFormula::MegatronPtdp => "megatron_ptdp",
            FlopsFormula::Program => "program",
        }
    }

    /// By name.
    pub fn parse(s: &str) -> Option<FlopsFormula> {
        [
            FlopsFormula::Model6N,
            FlopsFormula::MegatronPtdp,
            FlopsFormula::Program,
        ]
        .into_iter()
        .find(|f| f.name() == s)
    }
}

/// A transformer's sizes, as the formulas need them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModelShape {
    /// Parameters a token goes through (all of a dense model's; a Mixture of Experts' with
    /// its routed experts only).
    pub active_params: f64,
    pub layers: f64,
    pub hidden: f64,
    pub seq: f64,
    pub vocab: f64,
    /// Sequences per optimizer step.
    pub global_batch: f64,
}

impl ModelShape {
    /// Tokens per step.
    pub fn tokens(&self) -> f64 {
        self.global_batch * self.seq
    }

    /// FLOPs per step by `formula` (`None` for [`FlopsFormula::Program`], which counts the
    /// program instead).
    pub fn flops(&self, formula: FlopsFormula) -> Option<f64> {
        let (l, h, s, v) = (self.layers, self.hidden, self.seq, self.vocab);
        match formula {
            FlopsFormula::Model6N => {
                Some((6.0 * self.active_params + 12.0 * l * h * s) * self.tokens())
            }
            FlopsFormula::MegatronPtdp => Some(
                96.0 * self.global_batch
                    * s
                    * l
                    * h
                    * h
                    * (1.0 + s / (6.0 * h) + v / (16.0 * l * h)),
            ),
            FlopsFormula::Program => None,
        }
    }
}

/// A priced step's throughput.
#[derive(Clone, Debug, PartialEq)]
pub struct Throughput {
    pub formula: FlopsFormula,
    pub flops_per_step: f64,
    pub step_s: f64,
    pub devices: usize,
    pub tflops_per_device: f64,
    /// `None` when the tokens per step are not known (a plan file).
    pub tokens_per_s_per_device: Option<f64>,
    pub mfu: f64,
    /// The largest peak memory of any rank, against the device's capacity (`memory`).
    pub peak_bytes: f64,
    pub memory: f64,
    pub fits: bool,
}

/// The throughput of a step of `step_s` seconds on `devices` devices, its FLOPs counted by
/// `formula` from `shape` (or given by the program, `program_flops`).
pub fn throughput(
    formula: FlopsFormula,
    shape: Option<&ModelShape>,
    program_flops: f64,
    step_s: f64,
    devices: usize,
    limits: DeviceLimits,
    peak_bytes: f64,
) -> Throughput {
    let flops = shape
        .and_then(|s| s.flops(formula))
        .unwrap_or(program_flops);
    let per_device = |x: f64| {
        if step_s > 0.0 {
            x / step_s / devices.max(1) as f64
        } else {
            0.0
        }
    };
    Throughput {
        formula: if shape.is_some() {
            formula
        } else {
            FlopsFormula::Program
        },
        flops_per_step: flops,
        step_s,
        devices,
        tflops_per_device: per_device(flops) / 1e12,
        tokens_per_s_per_device: shape.map(|s| per_device(s.tokens())),
        mfu: per_device(flops) / limits.peak_flops,
        peak_bytes,
        memory: limits.memory,
        fits: peak_bytes <= limits.memory,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Megatron's 1T model (Narayanan et al. 2021, Table 1's last row): 502 PFLOP/s over
    /// 3,072 GPUs at 163 TFLOP/s each; its per-step FLOPs by eq. 3 and the reported rate
    /// give the step time, and back.
    #[test]
    fn megatron_formula_matches_the_paper() {
        let shape = ModelShape {
            active_params: 1.008e12,
            layers: 128.0,
            hidden: 25600.0,
            seq: 2048.0,
            vocab: 51200.0,
            global_batch: 3072.0,
        };
        let f = shape.flops(FlopsFormula::MegatronPtdp).unwrap();
        // 96·3072·2048·128·25600²·(1 + 2048/153600 + 51200/52428800)
        let expected = 96.0 * 3072.0 * 2048.0 * 128.0 * 25600f64.powi(2) * 1.014_309_9;
        assert!((f / expected - 1.0).abs() < 1e-6, "{f} vs {expected}");
        // 6N is below it: no recomputation counted.
        assert!(shape.flops(FlopsFormula::Model6N).unwrap() < f);
        assert_eq!(FlopsFormula::parse("model_6n"), Some(FlopsFormula::Model6N));
        assert_eq!(FlopsFormula::parse("6n"), None);
    }
}
