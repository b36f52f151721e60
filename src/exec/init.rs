//! Deterministic seeded values for everything a step reads before writing: inputs, labels,
//! parameters and optimizer state. The same name always gets the same values.

use super::kernels::pointwise::uniform;
use super::tensor::Tensor;
use crate::ir::{DType, Program, Var, VarKind};

/// Hyper-parameters of the optimizer state.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct InitOptions {
    pub seed: u64,
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub loss_scale: f64,
}

impl Default for InitOptions {
    fn default() -> Self {
        InitOptions {
            seed: 0,
            lr: 0.1,
            beta1: 0.9,
            beta2: 0.999,
            loss_scale: 1024.0,
        }
    }
}

fn name_seed(seed: u64, name: &str) -> u64 {
    name.bytes().fold(seed ^ 0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The upper bound (exclusive) of integer values for `var` in `program`: the class count
/// for hard labels, the vocabulary for ids.
fn int_range(program: &Program, var: &Var) -> i64 {
    let id = program.var_id(&var.name);
    for op in program.ops() {
        let uses = |slot: &str| id.is_some_and(|v| op.input(slot).contains(&v));
        if uses("Label") {
            if let Some(&logits) = op.input("Logits").first() {
                let shape = &program.var(logits).ty.shape;
                let a = op.attr_int("axis", -1);
                let a = if a < 0 { shape.len() as i64 + a } else { a };
                return shape.get(a.max(0) as usize).copied().unwrap_or(2) as i64;
            }
        }
        if uses("Ids") {
            if let Some(&w) = op.input("W").first() {
                return program.var(w).ty.shape.first().copied().unwrap_or(2) as i64;
            }
        }
    }
    2
}

/// How a source variable's initial value is drawn: `value(i)` for flat index `i`, with
/// `u(i)` the seeded uniform number of the variable's name (`uniform(seed, i)`). Exported
/// scripts reproduce the values from this recipe (`export`), so it is the one definition.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum InitRecipe {
    /// `floor(u(i) · hi)`, at most `hi − 1` (ids and hard labels).
    Ints { seed: u64, hi: i64 },
    /// `bound · (2 u(i) − 1)` (float inputs with bound 1; parameters with 1/√fan_in).
    Uniform { seed: u64, bound: f64 },
    /// One value everywhere (optimizer state: learning rate, β powers, loss scale, zeros).
    Const(f64),
}

/// The recipe of a source variable's initial value (None for other kinds).
pub fn init_recipe(program: &Program, var: &Var, opts: &InitOptions) -> Option<InitRecipe> {
    // A tied parameter's copy on a later pipeline stage starts as its parameter does.
    let name = crate::passes::pipeline::tied::tied_base(&var.name).unwrap_or(&var.name);
    let seed = name_seed(opts.seed, name);
    let fan_in = if var.ty.rank() >= 2 {
        var.ty.shape[var.ty.rank() - 2]
    } else {
        var.ty.shape.first().copied().unwrap_or(1)
    };
    match var.kind {
        VarKind::Input | VarKind::Label if var.ty.dtype == DType::I64 => Some(InitRecipe::Ints {
            seed,
            hi: int_range(program, var).max(1),
        }),
        VarKind::Input | VarKind::Label => Some(InitRecipe::Uniform { seed, bound: 1.0 }),
        VarKind::Parameter => Some(InitRecipe::Uniform {
            seed,
            bound: 1.0 / (fan_in.max(1) as f64).sqrt(),
        }),
        VarKind::OptimizerState => {
            let name = &*var.name;
            Some(InitRecipe::Const(if name.starts_with("learning_rate") {
                opts.lr
            } else if name.contains("beta1_pow") {
                opts.beta1
            } else if name.contains("beta2_pow") {
                opts.beta2
            } else if name.starts_with("loss_scaling") {
                opts.loss_scale
            } else {
                0.0
            }))
        }
        VarKind::Activation | VarKind::Gradient => None,
    }
}

/// The initial global value of a source variable (None for other kinds).
pub fn initial_value(program: &Program, var: &Var, opts: &InitOptions) -> Option<Tensor> {
    // A tensor this target cannot index is never given a value (the browser executes the
    // shrunk twin; natively every plannable tensor fits).
    let n = usize::try_from(var.ty.numel()).ok()?;
    let shape = var.ty.shape.to_vec();
    let dtype = var.ty.dtype;
    Some(match init_recipe(program, var, opts)? {
        InitRecipe::Ints { seed, hi } => Tensor::from_fn(dtype, shape, |i| {
            (uniform(seed, i as u64) * hi as f64)
                .floor()
                .min(hi as f64 - 1.0)
        }),
        InitRecipe::Uniform { seed, bound } => Tensor::from_fn(dtype, shape, |i| {
            bound * (2.0 * uniform(seed, i as u64) - 1.0)
        }),
        InitRecipe::Const(c) => Tensor::float(dtype, shape, vec![c; n]),
    })
}
