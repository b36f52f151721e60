//! SPMD rules: for each op family, how the shardings of the inputs determine the shardings
//! of the outputs (`infer_forward`) and how the outputs' shardings pull back onto the inputs
//! (`infer_backward`), with partial status and co-sharding as in PaddlePaddle 3.3.1.
//!
//! One file per family; [`Rule`] lists them all and [`registry::rule_for`] maps every op
//! type of the IR to its rule. Rules see tensors as flat lists (Paddle's argument order),
//! so the oracle cases and the completer call the same code.

mod attention;
pub mod cases;
mod concat;
mod cross_entropy;
pub mod deviations;
pub mod einsum;
pub mod elementwise;
mod embedding;
mod error;
pub mod layer_norm;
pub mod matmul;
mod moe;
mod reduction;
pub mod registry;
mod reshape;
mod rotary;
mod shape_ops;
mod softmax;
mod split;
mod transpose;

use crate::dist::ReduceType;

pub use crate::dist::{DimAxes, Dims, Layout, MeshAxis, Partial};

/// A tensor as a rule sees it: its global shape and its current sharding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DistTensor {
    pub shape: crate::ir::Shape,
    pub layout: Layout,
}

impl DistTensor {
    /// The tensor's dims.
    pub fn dims(&self) -> &Dims {
        &self.layout.dims
    }
}

/// One layout per slot variable, inline: rules run for every op of every completion sweep.
pub type Layouts = smallvec::SmallVec<[Layout; 3]>;

/// What a rule infers: the sharding each input should have and each output gets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Inferred {
    pub inputs: Layouts,
    pub outputs: Layouts,
}

pub use error::SpmdError;

/// Result alias for rules.
pub type Result<T> = std::result::Result<T, SpmdError>;

/// One SPMD rule with its parameters (attributes already resolved against shapes).
#[derive(Clone, Debug, PartialEq)]
pub enum Rule {
    /// `x @ y`; inputs `[x, y]`, output `[out]`.
    Matmul { trans_x: bool, trans_y: bool },
    /// Broadcasting binary op; inputs `[x, y]`. `keep_x_partial`: multiply keeps x's partial.
    Elementwise { keep_x_partial: bool },
    /// Same sharding in and out; `outputs` outputs (dropout has Out and Mask).
    Unary { outputs: usize },
    /// Reduce `axes` of the input (sorted, normalised) with `reduce`.
    Reduce {
        axes: Vec<usize>,
        keep_dim: bool,
        reduce: ReduceType,
    },
    /// Mean of all elements: a scalar, AVG-partial over every sharded mesh axis.
    MeanAll,
    /// Softmax over `axes` (each forced replicated); the causal softmax uses the last two.
    Softmax { axes: Vec<usize> },
    /// Inputs `[x, scale?, bias?]`, outputs `[y, mean, variance]`.
    LayerNorm {
        begin_norm_axis: usize,
        has_scale: bool,
        has_bias: bool,
    },
    /// Inputs `[x, scale]`, outputs `[y, inv_var]`.
    RmsNorm { begin_norm_axis: usize },
    /// Inputs `[ids, table]`, output `[out]`.
    Embedding { padding_idx: i64 },
    /// Reshape to `target` (already resolved: no 0 or -1).
    Reshape { target: Vec<usize> },
    /// `out[i] = x[perm[i]]`.
    Transpose { perm: Vec<usize> },
    /// Split along `axis` into `outputs` pieces.
    Split { axis: usize, outputs: usize },
    /// Concatenate along `axis`.
    Concat { axis: usize },
    /// Slice `axes`; `decrease` dims are dropped from the output.
    Slice {
        axes: Vec<usize>,
        decrease: Vec<usize>,
    },
    /// The rotary embedding: inputs `[x, sin, cos]`, output `[out]`.
    Rotary,
    /// `flash_attn`: inputs `[q, k, v]`, outputs `[out, lse]`, the sequence as `mode` says.
    Attention { mode: attention::CpMode },
    /// `repeat_interleave` along `axis`: the same layout in and out (a rank's block of the
    /// repeated dim becomes its block of the output).
    Repeat { axis: usize },
    /// A Mixture-of-Experts dispatch or combine (`moe::DISPATCH`, `moe::COMBINE`: its
    /// tensors in letters), routing groups of `group_size` tokens.
    Moe {
        letters: moe::Letters,
        group_size: usize,
    },
    /// Inputs `[logits, label]`, outputs `[softmax, loss]`.
    CrossEntropy { axis: usize, soft_label: bool },
    /// No inputs; outputs start replicated (fill_constant).
    Source,
}

impl Rule {
    /// The rule's name, for traces.
    pub fn name(&self) -> &'static str {
        match self {
            Rule::Matmul { .. } => "matmul",
            Rule::Elementwise { .. } => "elementwise",
            Rule::Unary { .. } => "unary",
            Rule::Reduce { .. } => "reduction",
            Rule::MeanAll => "mean_all",
            Rule::Softmax { .. } => "softmax",
            Rule::LayerNorm { .. } => "layer_norm",
            Rule::RmsNorm { .. } => "rms_norm",
            Rule::Embedding { .. } => "embedding",
            Rule::Reshape { .. } => "reshape",
            Rule::Transpose { .. } => "transpose",
            Rule::Split { .. } => "split",
            Rule::Concat { .. } => "concat",
            Rule::Slice { .. } => "slice",
            Rule::CrossEntropy { .. } => "cross_entropy",
            Rule::Rotary => "rotary",
            Rule::Attention { .. } => "flash_attention",
            Rule::Repeat { .. } => "repeat_interleave",
            Rule::Moe { .. } => "moe",
            Rule::Source => "source",
        }
    }

    /// Infers outputs (and the inputs the op wants) from the inputs.
    pub fn infer_forward(&self, mesh: &[usize], inputs: &[DistTensor]) -> Result<Inferred> {
        match self {
            Rule::Matmul { trans_x, trans_y } => matmul::forward(mesh, inputs, *trans_x, *trans_y),
            Rule::Elementwise { keep_x_partial } => {
                elementwise::binary_forward(inputs, *keep_x_partial)
            }
            Rule::Unary { outputs } => elementwise::unary_forward(inputs, *outputs),
            Rule::Reduce {
                axes,
                keep_dim,
                reduce,
            } => reduction::forward(inputs, axes, *keep_dim, *reduce),
            Rule::MeanAll => reduction::mean_all_forward(inputs),
            Rule::Softmax { axes } => softmax::forward(inputs, axes),
            Rule::LayerNorm {
                begin_norm_axis,
                has_scale,
                has_bias,
            } => layer_norm::forward(
                inputs,
                *begin_norm_axis,
                layer_norm::NormShape::layer_norm(*has_scale, *has_bias),
            ),
            Rule::RmsNorm { begin_norm_axis } => {
                layer_norm::forward(inputs, *begin_norm_axis, RMS_NORM)
            }
            Rule::Embedding { padding_idx } => embedding::forward(inputs, *padding_idx),
            Rule::Reshape { target } => reshape::forward(mesh, inputs, target),
            Rule::Transpose { perm } => transpose::forward(inputs, perm),
            Rule::Split { axis, outputs } => split::forward(inputs, *axis, *outputs),
            Rule::Concat { axis } => concat::concat_forward(mesh, inputs, *axis),
            Rule::Slice { axes, decrease } => shape_ops::slice_forward(inputs, axes, decrease),
            Rule::CrossEntropy { axis, soft_label } => {
                cross_entropy::forward(inputs, *axis, *soft_label)
            }
            Rule::Rotary => rotary::forward(inputs),
            Rule::Attention { mode } => attention::forward(inputs, *mode),
            Rule::Repeat { .. } => elementwise::unary_forward(inputs, 1),
            Rule::Moe {
                letters,
                group_size,
            } => moe::infer(mesh, *letters, letters.0, inputs, *group_size),
            Rule::Source => Ok(Inferred::default()),
        }
    }

    /// Infers the inputs (and the outputs) from the outputs' shardings. `inputs` supply
    /// shapes; most rules ignore their shardings, as Paddle's reverse rules do.
    pub fn infer_backward(
        &self,
        mesh: &[usize],
        inputs: &[DistTensor],
        outputs: &[DistTensor],
    ) -> Result<Inferred> {
        match self {
            Rule::Matmul { trans_x, trans_y } => {
                matmul::backward(inputs, outputs, *trans_x, *trans_y)
            }
            Rule::Elementwise { .. } => elementwise::binary_backward(inputs, outputs),
            Rule::Unary { .. } => elementwise::unary_backward(inputs, outputs),
            Rule::Reduce { axes, keep_dim, .. } => {
                reduction::backward(inputs, outputs, axes, *keep_dim)
            }
            Rule::MeanAll => reduction::mean_all_backward(inputs, outputs),
            Rule::Softmax { axes } => softmax::backward(inputs, outputs, axes),
            Rule::LayerNorm {
                begin_norm_axis,
                has_scale,
                has_bias,
            } => layer_norm::backward(
                inputs,
                outputs,
                *begin_norm_axis,
                layer_norm::NormShape::layer_norm(*has_scale, *has_bias),
            ),
            Rule::RmsNorm { begin_norm_axis } => {
                layer_norm::backward(inputs, outputs, *begin_norm_axis, RMS_NORM)
            }
            Rule::Embedding { .. } => embedding::backward(inputs, outputs),
            Rule::Reshape { .. } => reshape::backward(mesh, inputs, outputs),
            Rule::Transpose { perm } => transpose::backward(inputs, outputs, perm),
            Rule::Split { axis, .. } => split::backward(inputs, outputs, *axis),
            Rule::Concat { axis } => concat::concat_backward(inputs, outputs, *axis),
            Rule::Slice { axes, decrease } => {
                shape_ops::slice_backward(inputs, outputs, axes, decrease)
            }
            Rule::CrossEntropy { axis, soft_label } => {
                cross_entropy::backward(inputs, outputs, *axis, *soft_label)
            }
            Rule::Rotary => rotary::backward(outputs),
            Rule::Attention { mode } => attention::backward(outputs, *mode),
            Rule::Repeat { .. } => elementwise::unary_backward(inputs, outputs),
            Rule::Moe {
                letters,
                group_size,
            } => moe::infer(mesh, *letters, letters.1, outputs, *group_size),
            Rule::Source => Ok(Inferred {
                inputs: Layouts::new(),
                outputs: outputs
                    .iter()
                    .map(|o| Layout::from_dims(o.dims().clone()))
                    .collect(),
            }),
        }
    }
}

/// rms_norm's inputs `[x, scale]` and outputs `[y, inv_var]`.
const RMS_NORM: layer_norm::NormShape = layer_norm::NormShape {
    params: 1,
    stats: 1,
};

/// `dims` with the dims at `axes` replicated (softmax axes, sliced axes).
fn replicate(dims: &Dims, axes: &[usize]) -> Dims {
    dims.iter()
        .enumerate()
        .map(|(d, a)| {
            if axes.contains(&d) {
                DimAxes::WHOLE
            } else {
                *a
            }
        })
        .collect()
}

/// The i-th tensor or an error naming the rule's expectation.
fn arg<'a>(tensors: &'a [DistTensor], i: usize, rule: &'static str) -> Result<&'a DistTensor> {
    tensors.get(i).ok_or_else(|| SpmdError::Arity {
        rule,
        want: i + 1,
        got: tensors.len(),
    })
}

/// Checks that a tensor's dims list matches its rank.
fn check_rank(t: &DistTensor, what: &'static str) -> Result<()> {
    if t.layout.dims.len() == t.shape.len() {
        Ok(())
    } else {
        Err(SpmdError::RankMismatch {
            what,
            rank: t.shape.len(),
            dims: t.layout.dims.len(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor(shape: &[usize], dims: &[i64]) -> DistTensor {
        DistTensor {
            shape: shape.into(),
            layout: Layout::from_dims_mapping(dims).unwrap(),
        }
    }

    /// mean_all's reverse inference: the scalar output says nothing about the input, so
    /// every input dim is proposed whole (over the input's own rank).
    #[test]
    fn mean_all_backward_proposes_a_whole_input_of_its_rank() {
        let x = tensor(&[8, 16, 4], &[0, -1, 1]);
        let out = tensor(&[], &[]);
        let inferred = Rule::MeanAll.infer_backward(&[2, 4], &[x], &[out]).unwrap();
        assert_eq!(inferred.inputs.to_vec(), vec![Layout::replicated(3)]);
    }

    /// A reshape between shapes of different element counts is an error naming both (the
    /// group walk stops at the shorter shape instead of reading past it).
    #[test]
    fn reshape_of_a_different_element_count_is_an_error() {
        for (from, to) in [
            (vec![4], vec![4, 3]),
            (vec![4, 3], vec![4]),
            (vec![6], vec![4]),
        ] {
            let x = tensor(&from, &vec![-1; from.len()]);
            let e = Rule::Reshape { target: to.clone() }
                .infer_forward(&[2], &[x])
                .unwrap_err();
            assert_eq!(
                e,
                SpmdError::ReshapeElements {
                    src: from.clone(),
                    dst: to.clone()
                },
                "{from:?} -> {to:?}"
            );
        }
    }
}
