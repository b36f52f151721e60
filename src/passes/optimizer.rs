//! The optimizer stage: optional AMP loss-scaling checks, optional global-norm gradient
//! clipping, and one update op per parameter (sgd, momentum, adam or adamw), each with its
//! state variables. Update completion: an optimizer op and its state follow the parameter;
//! the learning rate, the loss scale, `found_inf` and the global norm are replicated.

use super::dist_program::DistProgram;
use super::pipeline::tied::Tie;
use crate::dist::MeshAxis;
use crate::dist::MeshId;
use crate::dist::{OperatorDistAttr, ReduceType, TensorDistAttr};
use crate::ir::{Attr, DType, Op, OpRole, OpType, ProgramError, Slot, TensorType, VarId, VarKind};
use serde::{Deserialize, Serialize};

/// The update rule.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Optimizer {
    Sgd,
    Momentum {
        mu: f64,
    },
    Adam {
        beta1: f64,
        beta2: f64,
        epsilon: f64,
    },
    AdamW {
        beta1: f64,
        beta2: f64,
        epsilon: f64,
        coeff: f64,
    },
}

impl Optimizer {
    /// The optimizer of `kind` with its usual hyper-parameters.
    pub fn of_kind(kind: crate::plan::OptimizerKind) -> Optimizer {
        Optimizer::from_name(kind.name()).unwrap_or(Optimizer::Sgd)
    }

    /// Parses `sgd`, `momentum`, `adam` or `adamw` with their usual defaults.
    pub fn from_name(name: &str) -> Option<Optimizer> {
        Some(match name {
            "sgd" => Optimizer::Sgd,
            "momentum" => Optimizer::Momentum { mu: 0.9 },
            "adam" => Optimizer::Adam {
                beta1: 0.9,
                beta2: 0.999,
                epsilon: 1e-8,
            },
            "adamw" => Optimizer::AdamW {
                beta1: 0.9,
                beta2: 0.999,
                epsilon: 1e-8,
                coeff: 0.01,
            },
            _ => return None,
        })
    }
}

/// What the optimizer stage appends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OptimizerOptions {
    pub optimizer: Optimizer,
    /// AMP dynamic loss scaling (`check_finite_and_unscale`, `update_loss_scaling`).
    pub amp: bool,
    /// Clip gradients to this global norm.
    pub clip_norm: Option<f64>,
}

impl Default for OptimizerOptions {
    fn default() -> Self {
        OptimizerOptions {
            optimizer: Optimizer::Sgd,
            amp: false,
            clip_norm: None,
        }
    }
}

/// An update op's type, input slots, output slots and attributes.
type UpdateOp = (
    OpType,
    Vec<Vec<VarId>>,
    Vec<Vec<VarId>>,
    Vec<(&'static str, Attr)>,
);

struct Builder<'a> {
    dp: &'a mut DistProgram,
}

impl Builder<'_> {
    /// A replicated scalar optimizer state variable.
    fn scalar(&mut self, name: &str, dtype: DType) -> Result<VarId, ProgramError> {
        let id = self.dp.program.declare(
            name,
            TensorType::new(dtype, vec![]),
            VarKind::OptimizerState,
        )?;
        self.dp
            .tensors
            .push(TensorDistAttr::replicated(MeshId::JOB, 0));
        Ok(id)
    }

    /// A state variable shaped and laid out like `like`.
    fn state_like(
        &mut self,
        name: &str,
        like: VarId,
        kind: VarKind,
    ) -> Result<VarId, ProgramError> {
        let ty = self.dp.program.var(like).ty.clone();
        let id = self.dp.program.declare(name, ty, kind)?;
        self.dp
            .tensors
            .push(DistProgram::settled(&self.dp.tensors[like.index()]));
        Ok(id)
    }

    /// Appends update `o` of parameter `p`: the update follows its parameter, so gradient
    /// `g` must arrive laid out like it; its other inputs as they are laid out.
    fn push_update(&mut self, o: Op, p: VarId, g: VarId) {
        let pa = DistProgram::settled(&self.dp.tensors[p.index()]);
        self.push_with(o, |tensors, v| {
            if v == g {
                pa.clone()
            } else {
                tensors[v.index()].clone()
            }
        });
    }

    /// Appends `op`; its slot attrs are the variables' current attrs (outputs of in-place
    /// updates keep their layout); inputs complete (non-partial: gradients are
    /// synchronised by now).
    fn push(&mut self, op: Op) {
        self.push_with(op, |tensors, v| DistProgram::settled(&tensors[v.index()]));
    }

    /// Appends `op` with its inputs' attrs from `input` and its outputs' as the variables
    /// are laid out.
    fn push_with(&mut self, op: Op, input: impl Fn(&[TensorDistAttr], VarId) -> TensorDistAttr) {
        let tensors = &self.dp.tensors;
        let mut attr = OperatorDistAttr::new(MeshId::JOB);
        attr.inputs = op
            .inputs
            .iter()
            .map(|s| s.iter().map(|&v| input(tensors, v)).collect())
            .collect();
        attr.outputs = op
            .outputs
            .iter()
            .map(|s| s.iter().map(|v| tensors[v.index()].clone()).collect())
            .collect();
        self.dp.program.push_op(op);
        self.dp.ops.push(attr);
    }
}

fn op(
    ty: OpType,
    inputs: Vec<Vec<VarId>>,
    outputs: Vec<Vec<VarId>>,
    attrs: &[(&str, Attr)],
    scope: &str,
) -> Op {
    let mut o = Op::new(ty);
    o.inputs = inputs.into_iter().map(Slot::from_vec).collect();
    o.outputs = outputs.into_iter().map(Slot::from_vec).collect();
    o.attrs = attrs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    o.role = OpRole::Optimize;
    if !scope.is_empty() {
        o.namescope = scope.to_string().into();
    }
    o
}

/// Appends the optimizer stage to `dp` for `param_grads` (parameter, gradient pairs).
pub fn append_optimizer(
    dp: &mut DistProgram,
    param_grads: &[(VarId, VarId)],
    ties: &[Tie],
    opts: &OptimizerOptions,
) -> Result<(), ProgramError> {
    let dtype = param_grads
        .first()
        .map_or(DType::F32, |(p, _)| dp.program.var(*p).ty.dtype);
    let mut b = Builder { dp };
    let grads: Vec<VarId> = param_grads.iter().map(|&(_, g)| g).collect();
    let copies = tie_gradients(&mut b, param_grads, ties);
    if opts.amp {
        amp(&mut b, &grads, dtype)?;
    }
    if let Some(clip) = opts.clip_norm {
        clip_by_global_norm(&mut b, &grads, &copies, clip, dtype)?;
    }
    let lr = b.scalar("learning_rate_0", dtype)?;
    for &(p, g) in param_grads {
        let name = b.dp.program.var(p).name.clone();
        let (ty, inputs, outputs, attrs): UpdateOp = match opts.optimizer {
            Optimizer::Sgd => (
                OpType::Sgd,
                vec![vec![p], vec![g], vec![lr]],
                vec![vec![p]],
                vec![],
            ),
            Optimizer::Momentum { mu } => {
                let vel =
                    b.state_like(&format!("{name}_velocity_0"), p, VarKind::OptimizerState)?;
                (
                    OpType::Momentum,
                    vec![vec![p], vec![g], vec![vel], vec![lr]],
                    vec![vec![p], vec![vel]],
                    vec![("mu", Attr::Float(mu))],
                )
            }
            Optimizer::Adam {
                beta1,
                beta2,
                epsilon,
            }
            | Optimizer::AdamW {
                beta1,
                beta2,
                epsilon,
                ..
            } => {
                let m1 = b.state_like(&format!("{name}_moment1_0"), p, VarKind::OptimizerState)?;
                let m2 = b.state_like(&format!("{name}_moment2_0"), p, VarKind::OptimizerState)?;
                let b1 = b.scalar(&format!("{name}_beta1_pow_acc_0"), dtype)?;
                let b2 = b.scalar(&format!("{name}_beta2_pow_acc_0"), dtype)?;
                let mut attrs = vec![
                    ("beta1", Attr::Float(beta1)),
                    ("beta2", Attr::Float(beta2)),
                    ("epsilon", Attr::Float(epsilon)),
                ];
                let ty = if let Optimizer::AdamW { coeff, .. } = opts.optimizer {
                    attrs.push(("coeff", Attr::Float(coeff)));
                    OpType::AdamW
                } else {
                    OpType::Adam
                };
                (
                    ty,
                    vec![
                        vec![p],
                        vec![g],
                        vec![lr],
                        vec![m1],
                        vec![m2],
                        vec![b1],
                        vec![b2],
                    ],
                    vec![vec![p], vec![m1], vec![m2], vec![b1], vec![b2]],
                    attrs,
                )
            }
        };
        b.push_update(op(ty, inputs, outputs, &attrs, ""), p, g);
    }
    Ok(())
}

/// The gradients of tied parameters (`pipeline::tied`) summed over their copies, and the
/// sum given to every copy: `sum` into the parameter's gradient, then an `assign` to each
/// copy's, in the tied-parameter namescope (the partitioner makes the pair one all-reduce
/// over the stages). Returns the copies' gradients.
fn tie_gradients(b: &mut Builder, param_grads: &[(VarId, VarId)], ties: &[Tie]) -> Vec<VarId> {
    let grad_of = |p: VarId| param_grads.iter().find(|&&(q, _)| q == p).map(|&(_, g)| g);
    let scope = crate::ir::Purpose::TiedParameter.namescope();
    let mut copies = Vec::new();
    for tie in ties {
        let Some(g) = grad_of(tie.param) else {
            continue;
        };
        let shares: Vec<VarId> = tie.copies.iter().filter_map(|&c| grad_of(c)).collect();
        if shares.is_empty() {
            continue;
        }
        let all: Vec<VarId> = std::iter::once(g).chain(shares.iter().copied()).collect();
        b.push(op(OpType::Sum, vec![all], vec![vec![g]], &[], scope));
        for &c in &shares {
            b.push(op(OpType::Assign, vec![vec![g]], vec![vec![c]], &[], scope));
        }
        copies.extend(shares);
    }
    copies
}

/// AMP: unscale the gradients, flag non-finite values, update the loss scale.
fn amp(b: &mut Builder, grads: &[VarId], dtype: DType) -> Result<(), ProgramError> {
    // The pipeline created the loss scale when it scaled the loss; reuse it.
    let scale = match b.dp.program.var_id("loss_scaling_0") {
        Some(v) => v,
        None => b.scalar("loss_scaling_0", dtype)?,
    };
    let found = b.scalar("found_infinite_0", DType::F32)?;
    let good = b.scalar("num_good_steps_0", dtype)?;
    let bad = b.scalar("num_bad_steps_0", dtype)?;
    let check = op(
        OpType::CheckFiniteAndUnscale,
        vec![grads.to_vec(), vec![scale]],
        vec![grads.to_vec(), vec![found]],
        &[],
        "",
    );
    b.push(check);
    let update = op(
        OpType::UpdateLossScaling,
        vec![
            grads.to_vec(),
            vec![found],
            vec![scale],
            vec![good],
            vec![bad],
        ],
        vec![grads.to_vec(), vec![scale], vec![good], vec![bad]],
        &[
            ("incr_every_n_steps", Attr::Int(1000)),
            ("decr_every_n_nan_or_inf", Attr::Int(2)),
            ("incr_ratio", Attr::Float(2.0)),
            ("decr_ratio", Attr::Float(0.5)),
        ],
        "",
    );
    b.push(update);
    Ok(())
}

/// Global-norm clipping: `g *= clip / max(sqrt(sum of squared norms), clip)`. A sharded
/// gradient's squared norm is a partial sum over the mesh axes that shard it.
/// `g`'s squared L2 norm, partial over the mesh axes `g` is split on (the partitioner sums
/// the shards: global-norm synchronisation).
fn squared_norm(b: &mut Builder, g: VarId, dtype: DType) -> Result<VarId, ProgramError> {
    let name = format!("{}@SQNORM", b.dp.program.var(g).name);
    let sq =
        b.dp.program
            .declare(&name, TensorType::new(dtype, vec![]), VarKind::Activation)?;
    let mut attr = TensorDistAttr::replicated(MeshId::JOB, 0);
    let mut axes: Vec<MeshAxis> = b.dp.tensors[g.index()]
        .dims
        .iter()
        .flatten()
        .copied()
        .collect();
    axes.sort_unstable();
    for a in axes {
        attr.set_partial(a, ReduceType::Sum);
    }
    b.dp.tensors.push(attr);
    b.push(op(
        OpType::SquaredL2Norm,
        vec![vec![g]],
        vec![vec![sq]],
        &[],
        "",
    ));
    Ok(sq)
}

fn clip_by_global_norm(
    b: &mut Builder,
    grads: &[VarId],
    copies: &[VarId],
    clip: f64,
    dtype: DType,
) -> Result<(), ProgramError> {
    // A tied parameter's gradient counts once: its copies hold the same sum.
    let norms = grads
        .iter()
        .filter(|g| !copies.contains(g))
        .map(|&g| squared_norm(b, g, dtype))
        .collect::<Result<Vec<VarId>, ProgramError>>()?;
    let total = b.dp.program.declare(
        "global_norm_sq_0",
        TensorType::new(dtype, vec![]),
        VarKind::Activation,
    )?;
    b.dp.tensors
        .push(TensorDistAttr::replicated(MeshId::JOB, 0));
    let sum = op(OpType::Sum, vec![norms.clone()], vec![vec![total]], &[], "");
    // The sum wants every squared norm complete (non-partial): sharded grads' norms are
    // all-reduced first (global-norm synchronisation, in the partitioner).
    let scalar = || TensorDistAttr::replicated(MeshId::JOB, 0);
    let mut attr = OperatorDistAttr::new(MeshId::JOB);
    attr.inputs = vec![norms.iter().map(|_| scalar()).collect()];
    attr.outputs = vec![std::iter::once(scalar()).collect()];
    b.dp.program.push_op(sum);
    b.dp.ops.push(attr);
    let norm = b.scalar_activation("global_norm_0", dtype)?;
    b.push(op(
        OpType::Sqrt,
        vec![vec![total]],
        vec![vec![norm]],
        &[],
        "",
    ));
    let clip_var = b.scalar_activation("clip_norm_0", dtype)?;
    let fill = op(
        OpType::FillConstant,
        vec![],
        vec![vec![clip_var]],
        &[
            ("shape", Attr::Ints(vec![])),
            ("value", Attr::Float(clip)),
            ("dtype", Attr::Str(dtype.name().into())),
        ],
        "",
    );
    b.push(fill);
    let denom = b.scalar_activation("clip_denominator_0", dtype)?;
    b.push(op(
        OpType::ElementwiseMax,
        vec![vec![norm], vec![clip_var]],
        vec![vec![denom]],
        &[],
        "",
    ));
    let factor = b.scalar_activation("clip_factor_0", dtype)?;
    b.push(op(
        OpType::ElementwiseDiv,
        vec![vec![clip_var], vec![denom]],
        vec![vec![factor]],
        &[],
        "",
    ));
    for &g in grads {
        b.push(op(
            OpType::ElementwiseMul,
            vec![vec![g], vec![factor]],
            vec![vec![g]],
            &[],
            "",
        ));
    }
    Ok(())
}

impl Builder<'_> {
    fn scalar_activation(&mut self, name: &str, dtype: DType) -> Result<VarId, ProgramError> {
        let id =
            self.dp
                .program
                .declare(name, TensorType::new(dtype, vec![]), VarKind::Activation)?;
        self.dp
            .tensors
            .push(TensorDistAttr::replicated(MeshId::JOB, 0));
        Ok(id)
    }
}
