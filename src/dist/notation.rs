//! One sharding, six notations: Paddle `dims_mapping`, JAX `PartitionSpec`, PyTorch
//! DTensor placements, OneFlow SBP, the scaling book's `A[I_X, J_Y]` and JAX's typed form
//! `f32[8@X, 4@Y]`. The playground lets users pick the one they know.

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
    /// The scaling book's named dims (`I`, `J`, ... per tensor dim) subscripted by the mesh
    /// axes splitting them: `[I_dp, J]`, co-sharded `I_{dp,mp}`, unreduced `{U_mp}`.
    ScalingBook,
    /// JAX's typed form (`jax.typeof` under explicit sharding): the global size of each dim
    /// `@` its mesh axes: `f32[64@dp, 256]`, co-sharded `8@(dp,mp)`, unreduced `{U:mp}`.
    JaxTyped,
}

impl Notation {
    /// All notations.
    pub const ALL: [Notation; 6] = [
        Notation::Paddle,
        Notation::Jax,
        Notation::DTensor,
        Notation::Sbp,
        Notation::ScalingBook,
        Notation::JaxTyped,
    ];

    /// A short identifier (`paddle`, `jax`, `dtensor`, `sbp`).
    pub fn id(self) -> &'static str {
        match self {
            Notation::Paddle => "paddle",
            Notation::Jax => "jax",
            Notation::DTensor => "dtensor",
            Notation::Sbp => "sbp",
            Notation::ScalingBook => "book",
            Notation::JaxTyped => "typed",
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
            Notation::ScalingBook => "Scaling book A[I_X, J_Y]",
            Notation::JaxTyped => "JAX typed f32[8@X]",
        }
    }
}

/// The tensor a sharding is written for: the typed notations print its sizes and dtype.
#[derive(Clone, Copy, Debug)]
pub struct Typed<'a> {
    pub shape: &'a [usize],
    /// The dtype's short name (`f32`).
    pub dtype: &'a str,
}

/// Writes `attr` (on `mesh`, the mesh its id names, of tensor `ty`) in `notation`.
pub fn render(
    attr: &TensorDistAttr,
    mesh: &ProcessMesh,
    notation: Notation,
    ty: Typed<'_>,
) -> String {
    match notation {
        Notation::Paddle => paddle(attr),
        Notation::Jax => jax(attr, mesh),
        Notation::DTensor => per_axis(attr, mesh, "[", "]", dtensor_placement),
        Notation::Sbp => per_axis(attr, mesh, "(", ")", sbp_placement),
        Notation::ScalingBook => scaling_book(attr, mesh),
        Notation::JaxTyped => jax_typed(attr, mesh, ty),
    }
}

/// The scaling book's dim letters: I, J, K, L, then M, N, ...
fn dim_letter(d: usize) -> String {
    const LETTERS: &[u8] = b"IJKLMNOPQRSTUVWXYZ";
    LETTERS
        .get(d)
        .map_or_else(|| format!("D{d}"), |&c| (c as char).to_string())
}

/// `{U_mp}` / `{U:mp}` for the unreduced (partial) axes, with non-sum reduce types named.
fn unreduced(attr: &TensorDistAttr, mesh: &ProcessMesh, lead: &str, sep: &str) -> String {
    if !attr.is_partial() {
        return String::new();
    }
    let axes = join(attr.partial.iter().map(|(a, r)| match r {
        ReduceType::Sum => format!("U{sep}{}", mesh.axis_name(a)),
        ReduceType::Avg | ReduceType::Max | ReduceType::Min | ReduceType::Prod => {
            format!(
                "U{sep}{}:{}",
                mesh.axis_name(a),
                r.name().to_ascii_lowercase()
            )
        }
    }));
    format!("{lead}{{{axes}}}")
}

fn scaling_book(attr: &TensorDistAttr, mesh: &ProcessMesh) -> String {
    let dims = attr.dims.iter().enumerate().map(|(d, axes)| {
        let names: Vec<&str> = axes.iter().map(|&a| mesh.axis_name(a)).collect();
        match names.as_slice() {
            [] => dim_letter(d),
            [one] => format!("{}_{one}", dim_letter(d)),
            many => format!("{}_{{{}}}", dim_letter(d), many.join(",")),
        }
    });
    format!("[{}]{}", join(dims), unreduced(attr, mesh, " ", "_"))
}

fn jax_typed(attr: &TensorDistAttr, mesh: &ProcessMesh, ty: Typed<'_>) -> String {
    let dims = attr.dims.iter().enumerate().map(|(d, axes)| {
        let size = ty
            .shape
            .get(d)
            .map_or_else(|| "?".to_string(), |s| s.to_string());
        let names: Vec<&str> = axes.iter().map(|&a| mesh.axis_name(a)).collect();
        match names.as_slice() {
            [] => size,
            [one] => format!("{size}@{one}"),
            many => format!("{size}@({})", many.join(",")),
        }
    });
    format!(
        "{}[{}]{}",
        ty.dtype,
        join(dims),
        unreduced(attr, mesh, "", ":")
    )
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
                format!("{}:{}", name(a), r.name().to_ascii_lowercase())
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
        Err(r) => format!("Partial({})", r.name().to_ascii_lowercase()),
    }
}

fn sbp_placement(role: Result<Option<usize>, ReduceType>) -> String {
    match role {
        Ok(Some(d)) => format!("S({d})"),
        Ok(None) => "B".to_string(),
        Err(ReduceType::Sum) => "P".to_string(),
        Err(r) => format!("P({})", r.name().to_ascii_lowercase()),
    }
}

fn join(items: impl Iterator<Item = String>) -> String {
    items.collect::<Vec<_>>().join(", ")
}
