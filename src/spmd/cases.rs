//! Runs SPMD rule cases written in the schema of PaddlePaddle's rule tests
//! (`../shared/oracle/paddle/spmd_cases.json`): Paddle's op names and attribute names in,
//! Paddle's result format out. Used by `shardlab spmd --cases` and the oracle tests.

use super::{DimAxes, Dims, DistTensor, Inferred, Layout, MeshAxis, Rule};
use crate::dist::ReduceType;
use crate::ir::infer::axis as norm_axis;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// One case.
#[derive(Clone, Debug, Deserialize)]
pub struct Case {
    pub id: i64,
    pub op: String,
    pub direction: String,
    pub mesh_shape: Vec<usize>,
    #[serde(default)]
    pub attrs: Map<String, Value>,
    pub inputs: Vec<CaseTensor>,
    #[serde(default)]
    pub outputs: Vec<CaseTensor>,
}

/// A tensor of a case: shape, Paddle dims_mapping and partial mesh dims (SUM).
#[derive(Clone, Debug, Deserialize)]
pub struct CaseTensor {
    pub shape: Vec<usize>,
    pub dims_mapping: Vec<i64>,
    #[serde(default)]
    pub partial_dims: Vec<usize>,
}

/// What a case inferred, in Paddle's result format.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CaseResult {
    pub id: i64,
    pub inputs: Vec<Vec<i64>>,
    pub inputs_partial_dims: Vec<Vec<usize>>,
    pub outputs: Vec<CaseOutput>,
    pub co_shard: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inputs_multi_dims_mapping: Option<Vec<Vec<Vec<usize>>>>,
    pub error: Option<String>,
}

/// One output of a case.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CaseOutput {
    pub dims_mapping: Vec<i64>,
    pub partial_dims: Vec<usize>,
    pub partial_reduce: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub multi_dims_mapping: Option<Vec<Vec<usize>>>,
}

/// Paddle's dims_mapping of a possibly co-sharded dims list: a co-sharded dim falls back to
/// its largest mesh axis by size, the first of equal sizes (Paddle 3.3.1 logs "fallback to
/// sharding by mesh dim"): `[0, 1]` on `[2, 4]` shows 1, `[0, 2]` on `[2, 2, 2]` shows 0.
pub fn paddle_dims_mapping(dims: &[DimAxes], mesh: &[usize]) -> Vec<i64> {
    let size = |a: MeshAxis| mesh.get(a.index()).copied().unwrap_or(1);
    dims.iter()
        .map(|axes| {
            axes.iter()
                .copied()
                .reduce(|best, a| if size(a) > size(best) { a } else { best })
                .map_or(-1, |a| a.index() as i64)
        })
        .collect()
}

/// Runs one case; a rule error becomes `error`.
/// Why a case could not be run: its own data is malformed, or the rule refused it (which
/// the oracle compares with Paddle's raising).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CaseError {
    #[error("dims_mapping entry {entry} is not -1 or a mesh dim of a mesh with {dims} dims")]
    Mapping { entry: i64, dims: usize },
    #[error("partial dim {partial} is not a mesh dim of a mesh with {dims} dims")]
    Partial { partial: usize, dims: usize },
    #[error("unknown direction `{0}` (forward or backward)")]
    Direction(String),
    #[error("no SPMD rule for op `{0}`")]
    UnknownOp(String),
    #[error("unsupported reduce_type {0}")]
    ReduceType(i64),
    #[error("flatten: start_axis {start} is after stop_axis {stop}")]
    Flatten { start: usize, stop: usize },
    #[error("flatten: dims {start} to {stop} hold more elements than one dim can")]
    FlattenTooLarge { start: usize, stop: usize },
    #[error("unsqueeze: axis {0} is out of range or repeated")]
    Unsqueeze(i64),
    #[error("{attr} {value} must not be negative")]
    Negative { attr: &'static str, value: i64 },
    #[error("{0} has {1} tensors; the rule takes {2}")]
    Arity(&'static str, usize, usize),
    /// An attribute the IR's inference refuses (an axis out of range, ...).
    #[error("{0}")]
    Attr(#[from] crate::ir::infer::InferError),
    #[error("{0}")]
    Rule(#[from] super::SpmdError),
}

pub fn run_case(case: &Case) -> CaseResult {
    match infer_case(case) {
        Ok(inferred) => to_result(case.id, &inferred, &case.mesh_shape),
        Err(e) => CaseResult {
            id: case.id,
            error: Some(e.to_string()),
            ..CaseResult::default()
        },
    }
}

fn to_result(id: i64, inf: &Inferred, mesh: &[usize]) -> CaseResult {
    let co_shard = inf
        .inputs
        .iter()
        .chain(&inf.outputs)
        .any(|s| s.dims.iter().any(|d| d.len() > 1));
    let partial_dims = |s: &Layout| s.partial.axes().map(MeshAxis::index).collect::<Vec<_>>();
    CaseResult {
        id,
        inputs: inf
            .inputs
            .iter()
            .map(|s| paddle_dims_mapping(&s.dims, mesh))
            .collect(),
        inputs_partial_dims: inf.inputs.iter().map(partial_dims).collect(),
        outputs: inf
            .outputs
            .iter()
            .map(|s| CaseOutput {
                dims_mapping: paddle_dims_mapping(&s.dims, mesh),
                partial_dims: partial_dims(s),
                partial_reduce: s
                    .partial
                    .iter()
                    .map(|(a, r)| (a.to_string(), r.name().to_string()))
                    .collect(),
                multi_dims_mapping: co_shard.then(|| s.axis_lists()),
            })
            .collect(),
        co_shard,
        inputs_multi_dims_mapping: co_shard
            .then(|| inf.inputs.iter().map(Layout::axis_lists).collect()),
        error: None,
    }
}

fn tensor(t: &CaseTensor, mesh: &[usize]) -> Result<DistTensor, CaseError> {
    let mut dims = Dims::with_capacity(t.dims_mapping.len());
    let axis = |m: i64| {
        usize::try_from(m)
            .ok()
            .filter(|&m| m < mesh.len())
            .and_then(MeshAxis::new)
    };
    for &m in &t.dims_mapping {
        match (m, axis(m)) {
            (-1, _) => dims.push(DimAxes::WHOLE),
            (_, Some(a)) => dims.push(DimAxes::one(a)),
            (m, None) => {
                return Err(CaseError::Mapping {
                    entry: m,
                    dims: mesh.len(),
                })
            }
        }
    }
    if let Some(&p) = t
        .partial_dims
        .iter()
        .find(|&&p| p >= mesh.len() || MeshAxis::new(p).is_none())
    {
        return Err(CaseError::Partial {
            partial: p,
            dims: mesh.len(),
        });
    }
    Ok(DistTensor {
        shape: t.shape.as_slice().into(),
        layout: Layout {
            dims,
            partial: t
                .partial_dims
                .iter()
                .filter_map(|&a| MeshAxis::new(a))
                .map(|a| (a, ReduceType::Sum))
                .collect(),
        },
    })
}

fn infer_case(case: &Case) -> Result<Inferred, CaseError> {
    let mesh = &case.mesh_shape;
    let inputs = case
        .inputs
        .iter()
        .map(|t| tensor(t, mesh))
        .collect::<Result<Vec<_>, _>>()?;
    let outputs = case
        .outputs
        .iter()
        .map(|t| tensor(t, mesh))
        .collect::<Result<Vec<_>, _>>()?;
    let x_shape = case
        .inputs
        .first()
        .map(|t| t.shape.clone())
        .unwrap_or_default();
    let rule = oracle_rule(case, &x_shape)?;
    // gelu's backward entry in Paddle 3.3.1 is its grad rule, GeluGradInferSpmd(x, out_grad):
    // the tensors are read positionally as [x, out_grad], and every one of them (x, out_grad
    // and x_grad) takes out_grad's mapping; x's own mapping does not count.
    if case.op == "gelu" && case.direction == "backward" {
        let args: Vec<&DistTensor> = inputs.iter().chain(&outputs).collect();
        let out_grad = args
            .last()
            .ok_or(CaseError::Arity("gelu grad", 0, 2))?
            .layout
            .dims
            .clone();
        return Ok(Inferred {
            inputs: smallvec::smallvec![Layout::from_dims(out_grad.clone()); args.len()],
            outputs: smallvec::smallvec![Layout::from_dims(out_grad)],
        });
    }
    // mean_all's backward entry in Paddle 3.3.1 is its grad rule too, MeanAllGradInferSpmd(x,
    // out_grad) = ReductionGradInferSpmd(x, out_grad, reduce_all): x and x_grad take the
    // scalar out_grad's (empty) mapping with every reduced axis inserted as -1, so both are
    // replicated whatever x was; out_grad loses its partial status.
    if case.op == "mean_all" && case.direction == "backward" {
        let args: Vec<&DistTensor> = inputs.iter().chain(&outputs).collect();
        let [x, out_grad] = args[..] else {
            return Err(CaseError::Arity("mean_all grad", args.len(), 2));
        };
        let x = Layout::replicated(x.shape.len());
        return Ok(Inferred {
            inputs: smallvec::smallvec![x.clone(), Layout::from_dims(out_grad.layout.dims.clone())],
            outputs: smallvec::smallvec![x],
        });
    }
    if case.op == "fused_rotary_position_embedding" {
        return rotary_case(case, mesh, &inputs, &outputs);
    }
    let result = match case.direction.as_str() {
        "forward" => rule.forward(mesh, &inputs),
        "backward" => rule.backward(mesh, &inputs, &outputs),
        other => return Err(CaseError::Direction(other.to_string())),
    };
    result.map_err(CaseError::from)
}

/// Paddle's rotary rule takes `[q, k, v, sin, cos, position_ids]` and gives `[q, k, v]`;
/// ShardLab's op rotates one tensor, so the cases leave k, v and position_ids empty (a
/// `[0]` shape) and Paddle answers `[]` for them.
fn rotary_case(
    case: &Case,
    mesh: &[usize],
    inputs: &[DistTensor],
    outputs: &[DistTensor],
) -> Result<Inferred, CaseError> {
    let pick = |ts: &[DistTensor], at: &[usize]| -> Result<Vec<DistTensor>, CaseError> {
        at.iter()
            .map(|&i| {
                ts.get(i)
                    .cloned()
                    .ok_or(CaseError::Arity("rotary case", ts.len(), i + 1))
            })
            .collect()
    };
    let ours = if case.direction == "forward" {
        Rule::Rotary.infer_forward(mesh, &pick(inputs, &[0, 3, 4])?)
    } else {
        Rule::Rotary.infer_backward(mesh, &pick(inputs, &[0, 3, 4])?, &pick(outputs, &[0])?)
    }
    .map_err(CaseError::from)?;
    let empty = || Layout::replicated(0);
    let [x, sin, cos] = &ours.inputs[..] else {
        return Err(CaseError::Arity("rotary rule", ours.inputs.len(), 3));
    };
    Ok(Inferred {
        inputs: smallvec::smallvec![
            x.clone(),
            empty(),
            empty(),
            sin.clone(),
            cos.clone(),
            empty()
        ],
        outputs: smallvec::smallvec![
            ours.outputs.first().cloned().unwrap_or_else(empty),
            empty(),
            empty()
        ],
    })
}

struct Attrs<'a>(&'a Map<String, Value>);

impl Attrs<'_> {
    fn bool(&self, name: &str, default: bool) -> bool {
        self.0.get(name).and_then(Value::as_bool).unwrap_or(default)
    }
    fn int(&self, name: &str, default: i64) -> i64 {
        self.0.get(name).and_then(Value::as_i64).unwrap_or(default)
    }
    fn ints(&self, name: &str) -> Vec<i64> {
        match self.0.get(name) {
            Some(Value::Array(v)) => v.iter().filter_map(Value::as_i64).collect(),
            Some(v) => v.as_i64().into_iter().collect(),
            None => Vec::new(),
        }
    }
}

fn axes(list: &[i64], rank: usize) -> Result<Vec<usize>, crate::ir::infer::InferError> {
    let mut out = list
        .iter()
        .map(|&a| norm_axis(a, rank, "axis"))
        .collect::<Result<Vec<_>, _>>()?;
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

fn reduce_type(code: i64) -> Result<ReduceType, CaseError> {
    Ok(match code {
        0 => ReduceType::Sum,
        1 => ReduceType::Max,
        2 => ReduceType::Min,
        3 => ReduceType::Prod,
        4 => ReduceType::Avg,
        other => return Err(CaseError::ReduceType(other)),
    })
}

/// The rules of the oracle's ops the IR has none of (stack, squeeze, unsqueeze, tile):
/// here, not in [`Rule`], so the playground's page module, which plans only the IR's ops,
/// does not carry their code.
enum CaseRule {
    Ir(Rule),
    /// Stack along a new `axis`.
    Stack {
        axis: usize,
    },
    /// Remove the size-1 dims `axes` (normalised against the input).
    Squeeze {
        axes: Vec<usize>,
    },
    /// Insert size-1 dims at `positions` of the output (sorted).
    Unsqueeze {
        positions: Vec<usize>,
    },
    /// Tile by `repeat` (may be longer than the input rank).
    Tile {
        repeat: Vec<usize>,
    },
}

impl CaseRule {
    fn forward(&self, mesh: &[usize], inputs: &[DistTensor]) -> super::Result<Inferred> {
        use super::{concat, shape_ops};
        match self {
            CaseRule::Ir(rule) => rule.infer_forward(mesh, inputs),
            CaseRule::Stack { axis } => concat::stack_forward(mesh, inputs, *axis),
            CaseRule::Squeeze { axes } => shape_ops::squeeze_forward(inputs, axes),
            CaseRule::Unsqueeze { positions } => shape_ops::unsqueeze_forward(inputs, positions),
            CaseRule::Tile { repeat } => shape_ops::tile_forward(inputs, repeat),
        }
    }

    fn backward(
        &self,
        mesh: &[usize],
        inputs: &[DistTensor],
        outputs: &[DistTensor],
    ) -> super::Result<Inferred> {
        use super::{concat, shape_ops};
        match self {
            CaseRule::Ir(rule) => rule.infer_backward(mesh, inputs, outputs),
            CaseRule::Stack { axis } => concat::stack_backward(inputs, outputs, *axis),
            CaseRule::Squeeze { axes } => shape_ops::squeeze_backward(inputs, outputs, axes),
            CaseRule::Unsqueeze { positions } => {
                shape_ops::unsqueeze_backward(inputs, outputs, positions)
            }
            CaseRule::Tile { repeat } => shape_ops::tile_backward(inputs, outputs, repeat),
        }
    }
}

/// The rule of an oracle case: the IR's ([`case_rule`]) or one of [`CaseRule`]'s own.
fn oracle_rule(case: &Case, x_shape: &[usize]) -> Result<CaseRule, CaseError> {
    let a = Attrs(&case.attrs);
    let rank = x_shape.len();
    Ok(match case.op.as_str() {
        "stack" => CaseRule::Stack {
            axis: norm_axis(a.int("axis", 0), rank + 1, "axis")?,
        },
        "squeeze" => {
            let list = a.ints("axis");
            let axes = if list.is_empty() {
                (0..rank).collect()
            } else {
                axes(&list, rank)?
            };
            CaseRule::Squeeze {
                axes: axes.into_iter().filter(|&d| x_shape[d] == 1).collect(),
            }
        }
        // Paddle 3.3.1's rule reads each axis as a position of the output (a negative one
        // counted from the input's rank + 1), not as an insertion into a growing tensor.
        "unsqueeze" => {
            let list = a.ints("axis");
            let out_rank = rank + list.len();
            let mut positions: Vec<usize> = Vec::new();
            for &p in &list {
                let pos = if p < 0 { p + rank as i64 + 1 } else { p };
                match usize::try_from(pos) {
                    Ok(q) if q < out_rank && !positions.contains(&q) => positions.push(q),
                    _ => return Err(CaseError::Unsqueeze(p)),
                }
            }
            positions.sort_unstable();
            CaseRule::Unsqueeze { positions }
        }
        "tile" => CaseRule::Tile {
            repeat: a
                .ints("repeat_times")
                .iter()
                .map(|&r| non_negative(r, "repeat_times"))
                .collect::<Result<Vec<_>, _>>()?,
        },
        _ => CaseRule::Ir(case_rule(case, x_shape)?),
    })
}

/// flatten as the reshape it is: dims `start..=stop` merged.
fn flatten_rule(a: &Attrs, x_shape: &[usize]) -> Result<Rule, CaseError> {
    let rank = x_shape.len();
    let start = norm_axis(a.int("start_axis", 1), rank, "start_axis")?;
    let stop = norm_axis(a.int("stop_axis", -1), rank, "stop_axis")?;
    if start > stop {
        return Err(CaseError::Flatten { start, stop });
    }
    let mut target = x_shape[..start].to_vec();
    let merged = x_shape[start..=stop]
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or(CaseError::FlattenTooLarge { start, stop })?;
    target.push(merged);
    target.extend(&x_shape[stop + 1..]);
    Ok(Rule::Reshape { target })
}

/// Maps Paddle's op name and attributes to our rule.
/// An attribute that must not be negative, as a size or an axis.
fn non_negative(value: i64, attr: &'static str) -> Result<usize, CaseError> {
    usize::try_from(value).map_err(|_| CaseError::Negative { attr, value })
}

fn case_rule(case: &Case, x_shape: &[usize]) -> Result<Rule, CaseError> {
    let a = Attrs(&case.attrs);
    let rank = x_shape.len();
    let reduce = |r: ReduceType| -> Result<Rule, CaseError> {
        let list = a.ints("axis");
        let axes = if list.is_empty() {
            (0..rank).collect()
        } else {
            axes(&list, rank)?
        };
        Ok(Rule::Reduce {
            axes,
            keep_dim: a.bool("keep_dim", false),
            reduce: r,
        })
    };
    Ok(match case.op.as_str() {
        "matmul" => Rule::Matmul {
            trans_x: a.bool("trans_x", false),
            trans_y: a.bool("trans_y", false),
        },
        "add" | "subtract" | "divide" => Rule::Elementwise {
            keep_x_partial: false,
        },
        "multiply" => Rule::Elementwise {
            keep_x_partial: true,
        },
        "relu" | "gelu" | "scale" | "cast" | "dropout" | "silu" | "square" | "assign" => {
            Rule::Unary { outputs: 1 }
        }
        "sum" => reduce(ReduceType::Sum)?,
        "mean" | "max_reduce" | "reduce_base" => reduce(reduce_type(a.int("reduce_type", 0))?)?,
        "max" => reduce(ReduceType::Max)?,
        "mean_all" => Rule::MeanAll,
        "softmax" | "log_softmax" => Rule::Softmax {
            axes: vec![norm_axis(a.int("axis", -1), rank, "axis")?],
        },
        "layer_norm" => Rule::LayerNorm {
            begin_norm_axis: non_negative(a.int("begin_norm_axis", 1), "begin_norm_axis")?,
            has_scale: case.inputs.len() > 1,
            has_bias: case.inputs.len() > 2,
        },
        "rms_norm" => Rule::RmsNorm {
            begin_norm_axis: non_negative(a.int("begin_norm_axis", 1), "begin_norm_axis")?,
        },
        "embedding" | "lookup_table_v2" => Rule::Embedding {
            padding_idx: a.int("padding_idx", -1),
        },
        "reshape" => {
            let x = crate::ir::TensorType::new(crate::ir::DType::F32, x_shape.to_vec());
            Rule::Reshape {
                target: crate::ir::infer::reshape_target(&x, &a.ints("shape"))?,
            }
        }
        "flatten" => flatten_rule(&a, x_shape)?,
        "transpose" => Rule::Transpose {
            perm: a
                .ints("perm")
                .iter()
                .map(|&p| norm_axis(p, rank, "perm"))
                .collect::<Result<Vec<_>, _>>()?,
        },
        "softmax_with_cross_entropy" | "cross_entropy_with_softmax" => Rule::CrossEntropy {
            axis: norm_axis(a.int("axis", -1), rank, "axis")?,
            soft_label: a.bool("soft_label", false),
        },
        "split" | "split_with_num" => {
            let outputs = if case.op == "split" {
                a.ints("sections").len()
            } else {
                a.int("num", 1).max(1) as usize
            };
            Rule::Split {
                axis: norm_axis(a.int("axis", 0), rank, "axis")?,
                outputs,
            }
        }
        "concat" => Rule::Concat {
            axis: norm_axis(a.int("axis", 0), rank, "axis")?,
        },
        "slice" => Rule::Slice {
            axes: axes(&a.ints("axes"), rank)?,
            decrease: axes(&a.ints("decrease_axis"), rank)?,
        },
        "fused_rotary_position_embedding" => Rule::Rotary,
        other => return Err(CaseError::UnknownOp(other.to_string())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unsqueeze(axes: &str) -> CaseResult {
        let text = format!(
            r#"{{"id": 1, "op": "unsqueeze", "direction": "forward", "mesh_shape": [2],
                "attrs": {{"axis": {axes}}}, "attr_order": ["axis"],
                "inputs": [{{"shape": [8, 16], "dims_mapping": [0, -1], "partial_dims": []}}]}}"#
        );
        run_case(&serde_json::from_str(&text).unwrap())
    }

    /// unsqueeze's axes are positions of the output: one past the output's rank, or a
    /// position named twice, is an error, not a silently wrong layout.
    #[test]
    fn unsqueeze_positions_must_fit_the_output_once() {
        assert_eq!(unsqueeze("[0, 3]").error, None);
        for bad in ["[4]", "[0, 0]", "[-4]"] {
            let e = unsqueeze(bad).error.unwrap_or_default();
            assert!(e.contains("out of range or repeated"), "{bad}: {e}");
        }
    }
}
