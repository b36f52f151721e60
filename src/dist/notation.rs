//! One sharding, four notations: Paddle `dims_mapping`, JAX `PartitionSpec`, PyTorch
//! DTensor placements and OneFlow SBP. The playground lets users pick the one they know.

use super::attr::{ReduceType, TensorDistAttr};
use super::layout::MeshAxis;
use super::mesh::ProcessMesh;
use serde::{Deserialize, Serialize};

/// A way of writing a sharding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Notation {
    /// `[0, -1]`, co-sharded `[[0, 1], -1]`, partial `partial{1: SUM}`.
    Paddle,
    /// `P('dp', None)`, co-sharded `P(('dp', 'mp'), None)`, partial as `unreduced={'mp'}`.
    Jax,
    /// One placement per mesh axis: `[Shard(0), Replicate()]`, partial `Partial(sum)`.
    DTensor,
    /// One SBP per mesh axis: `(S(0), B)`, partial sum `P`.
    Sbp,
}

impl Notation {
    /// All notations.
    pub const ALL: [Notation; 4] = [
        Notation::Paddle,
        Notation::Jax,
        Notation::DTensor,
        Notation::Sbp,
    ];

    /// A short identifier (`paddle`, `jax`, `dtensor`, `sbp`).
    pub fn id(self) -> &'static str {
        match self {
            Notation::Paddle => "paddle",
            Notation::Jax => "jax",
            Notation::DTensor => "dtensor",
            Notation::Sbp => "sbp",
        }
    }

    /// Parses an identifier from [`Notation::id`].
    pub fn from_id(id: &str) -> Option<Notation> {
        Notation::ALL.into_iter().find(|n| n.id() == id)
    }

    /// A label for menus.
    pub fn label(self) -> &'static str {
        match self {
            Notation::Paddle => "Paddle dims_mapping",
            Notation::Jax => "JAX PartitionSpec",
            Notation::DTensor => "DTensor placements",
            Notation::Sbp => "OneFlow SBP",
        }
    }
}

/// Writes `attr` (on `mesh`, the mesh its id names) in `notation`.
pub fn render(attr: &TensorDistAttr, mesh: &ProcessMesh, notation: Notation) -> String {
    match notation {
        Notation::Paddle => paddle(attr),
        Notation::Jax => jax(attr, mesh),
        Notation::DTensor => per_axis(attr, mesh, "[", "]", dtensor_placement),
        Notation::Sbp => per_axis(attr, mesh, "(", ")", sbp_placement),
    }
}

fn paddle(attr: &TensorDistAttr) -> String {
    let dims: Vec<String> = attr
        .dims
        .iter()
        .map(|axes| match axes.as_slice() {
            [] => "-1".to_string(),
            [a] => a.to_string(),
            many => format!("[{}]", join(many.iter().map(|a| a.to_string()))),
        })
        .collect();
    let mut s = format!("[{}]", dims.join(", "));
    if attr.is_partial() {
        let p = join(attr.partial.iter().map(|(a, r)| format!("{a}: {r}")));
        s.push_str(&format!(" partial{{{p}}}"));
    }
    s
}

fn jax(attr: &TensorDistAttr, mesh: &ProcessMesh) -> String {
    let name = |a: MeshAxis| format!("'{}'", mesh.axis_name(a));
    let mut parts: Vec<String> = attr
        .dims
        .iter()
        .map(|axes| match axes.as_slice() {
            [] => "None".to_string(),
            [a] => name(*a),
            many => format!("({})", join(many.iter().map(|&a| name(a)))),
        })
        .collect();
    if attr.is_partial() {
        let axes = join(attr.partial.iter().map(|(a, r)| match r {
            ReduceType::Sum => name(a),
            ReduceType::Avg | ReduceType::Max | ReduceType::Min | ReduceType::Prod => {
                format!("{}:{}", name(a), r.name().to_lowercase())
            }
        }));
        parts.push(format!("unreduced={{{axes}}}"));
    }
    format!("P({})", parts.join(", "))
}

/// For mesh axis `axis`: the tensor dim it splits, or its partial reduce type.
fn axis_role(attr: &TensorDistAttr, axis: MeshAxis) -> Result<Option<usize>, ReduceType> {
    if let Some(r) = attr.partial.get(axis) {
        return Err(r);
    }
    Ok(attr.dim_of(axis))
}

fn per_axis(
    attr: &TensorDistAttr,
    mesh: &ProcessMesh,
    open: &str,
    close: &str,
    placement: fn(Result<Option<usize>, ReduceType>) -> String,
) -> String {
    let items = mesh.axes().map(|a| placement(axis_role(attr, a)));
    format!("{open}{}{close}", join(items))
}

fn dtensor_placement(role: Result<Option<usize>, ReduceType>) -> String {
    match role {
        Ok(Some(d)) => format!("Shard({d})"),
        Ok(None) => "Replicate()".to_string(),
        Err(r) => format!("Partial({})", r.name().to_lowercase()),
    }
}

fn sbp_placement(role: Result<Option<usize>, ReduceType>) -> String {
    match role {
        Ok(Some(d)) => format!("S({d})"),
        Ok(None) => "B".to_string(),
        Err(ReduceType::Sum) => "P".to_string(),
        Err(r) => format!("P({})", r.name().to_lowercase()),
    }
}

fn join(items: impl Iterator<Item = String>) -> String {
    items.collect::<Vec<_>>().join(", ")
}
