//! The Mixture-of-Experts routing ops, after PaddlePaddle 3.3.1's `MoEGateDispatchInferSpmd`
//! (`moe_gate_dispatch.cc`): the token dim `s` of X and of the gates keeps its split, and
//! the dispatched tensor's slot dim (groups × capacity) takes it, as Paddle's `esh` does.
//! The experts `e` and the choices `k` are replicated (top-k needs every expert's gate).
//!
//! One difference, deliberate (`deviations.rs`): Paddle lets any split of `s` through, and
//! each rank then routes its own tokens with its own capacity, so a distributed step drops
//! other tokens than the serial one. Here a split of `s` must keep the token groups whole
//! (its shard count divides the group count); a rank then routes whole groups exactly as
//! the serial program does, and the two steps are equal. A split that would cut a group is
//! dropped (the tokens are gathered first).
//!
//! ```text
//! dispatch x[0,-1] gates[0,-1], 4 groups, dp=2  =>  out [-1,0,-1] weights [0,-1] index [-1,0]
//! dispatch x[0,-1] gates[0,-1], 1 group,  dp=2  =>  x [-1,-1], out [-1,-1,-1]
//! ```

use super::einsum::{merge, OnAxisConflict, OnMeshConflict};
use super::{arg, check_rank, DimAxes, DistTensor, Inferred, Layout, Result};

/// The mesh axes of the token dim, cut back until they keep `groups` whole.
fn whole_groups(mesh: &[usize], mut axes: DimAxes, groups: usize) -> DimAxes {
    loop {
        let shards: usize = axes
            .as_slice()
            .iter()
            .map(|a| mesh.get(a.index()).copied().unwrap_or(1))
            .product();
        if shards >= 1 && groups.is_multiple_of(shards) {
            return axes;
        }
        axes.pop();
    }
}

fn dispatch_result(s: DimAxes, h: DimAxes) -> Inferred {
    let w = DimAxes::WHOLE;
    Inferred {
        inputs: smallvec::smallvec![Layout::from_dims([s, h]), Layout::from_dims([s, w])],
        outputs: smallvec::smallvec![
            Layout::from_dims([w, s, h]),
            Layout::from_dims([s, w]),
            Layout::from_dims([w, s]),
        ],
    }
}

fn combine_result(s: DimAxes, h: DimAxes) -> Inferred {
    let w = DimAxes::WHOLE;
    Inferred {
        inputs: smallvec::smallvec![
            Layout::from_dims([w, s, h]),
            Layout::from_dims([s, w]),
            Layout::from_dims([w, s]),
        ],
        outputs: smallvec::smallvec![Layout::from_dims([s, h])],
    }
}

/// Merges the letters of `tensors` (each checked against its rank) into (s, h).
fn tokens_and_width(
    mesh: &[usize],
    tensors: &[(&str, &DistTensor, &'static str)],
    groups: usize,
) -> Result<(DimAxes, DimAxes)> {
    for (_, t, what) in tensors {
        check_rank(t, what)?;
    }
    let pairs: Vec<(&str, &super::Dims)> = tensors.iter().map(|(l, t, _)| (*l, t.dims())).collect();
    let map = merge(
        &pairs,
        OnAxisConflict::Error,
        OnMeshConflict::KeepFirst,
        None,
    )?;
    let s = whole_groups(mesh, map.get('s'), groups);
    let mut h = map.get('h');
    h.retain(|a| !s.as_slice().contains(&a));
    Ok((s, h))
}

/// Forward from X `[s, h]` and the gates `[s, e]`.
pub fn dispatch_forward(mesh: &[usize], inputs: &[DistTensor], groups: usize) -> Result<Inferred> {
    let x = arg(inputs, 0, "moe_dispatch")?;
    let gates = arg(inputs, 1, "moe_dispatch")?;
    let (s, h) = tokens_and_width(
        mesh,
        &[
            ("sh", x, "moe_dispatch X"),
            ("se", gates, "moe_dispatch Gates"),
        ],
        groups,
    )?;
    Ok(dispatch_result(s, h))
}

/// Backward from Out `[e, s, h]`, the weights `[s, k]` and the index `[k, s]`.
pub fn dispatch_backward(
    mesh: &[usize],
    outputs: &[DistTensor],
    groups: usize,
) -> Result<Inferred> {
    let out = arg(outputs, 0, "moe_dispatch")?;
    let weights = arg(outputs, 1, "moe_dispatch")?;
    let index = arg(outputs, 2, "moe_dispatch")?;
    let (s, h) = tokens_and_width(
        mesh,
        &[
            ("esh", out, "moe_dispatch Out"),
            ("sk", weights, "moe_dispatch Weights"),
            ("ks", index, "moe_dispatch Index"),
        ],
        groups,
    )?;
    Ok(dispatch_result(s, h))
}

/// Forward from X `[e, s, h]`, the weights `[s, k]` and the index `[k, s]`.
pub fn combine_forward(mesh: &[usize], inputs: &[DistTensor], groups: usize) -> Result<Inferred> {
    let x = arg(inputs, 0, "moe_combine")?;
    let weights = arg(inputs, 1, "moe_combine")?;
    let index = arg(inputs, 2, "moe_combine")?;
    let (s, h) = tokens_and_width(
        mesh,
        &[
            ("esh", x, "moe_combine X"),
            ("sk", weights, "moe_combine Weights"),
            ("ks", index, "moe_combine Index"),
        ],
        groups,
    )?;
    Ok(combine_result(s, h))
}

/// Backward from Out `[s, h]`.
pub fn combine_backward(mesh: &[usize], outputs: &[DistTensor], groups: usize) -> Result<Inferred> {
    let out = arg(outputs, 0, "moe_combine")?;
    let (s, h) = tokens_and_width(mesh, &[("sh", out, "moe_combine Out")], groups)?;
    Ok(combine_result(s, h))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::MeshAxis;

    fn t(shape: &[usize], mapping: &[i64]) -> DistTensor {
        DistTensor {
            shape: shape.iter().copied().collect(),
            layout: Layout::from_dims_mapping(mapping).unwrap(),
        }
    }

    fn mapping(l: &Layout) -> Vec<i64> {
        l.dims_mapping()
    }

    #[test]
    fn a_token_split_that_keeps_groups_whole_passes_to_the_slots() {
        let ins = [t(&[8, 4], &[0, -1]), t(&[8, 3], &[0, -1])];
        let r = dispatch_forward(&[2], &ins, 4).unwrap();
        assert_eq!(mapping(&r.inputs[0]), vec![0, -1]);
        assert_eq!(mapping(&r.outputs[0]), vec![-1, 0, -1]);
        assert_eq!(mapping(&r.outputs[1]), vec![0, -1]);
        assert_eq!(mapping(&r.outputs[2]), vec![-1, 0]);
    }

    #[test]
    fn a_split_that_would_cut_a_group_is_dropped() {
        let ins = [t(&[8, 4], &[0, -1]), t(&[8, 3], &[0, -1])];
        let r = dispatch_forward(&[2], &ins, 1).unwrap();
        assert_eq!(mapping(&r.inputs[0]), vec![-1, -1]);
        assert_eq!(mapping(&r.outputs[0]), vec![-1, -1, -1]);
        // Three groups do not split two ways either.
        let r = dispatch_forward(&[2], &ins, 3).unwrap();
        assert_eq!(mapping(&r.outputs[1]), vec![-1, -1]);
    }

    #[test]
    fn the_width_keeps_its_split_and_the_experts_are_whole() {
        let ins = [t(&[8, 4], &[-1, 1]), t(&[8, 3], &[0, 1])];
        let r = dispatch_forward(&[2, 2], &ins, 2).unwrap();
        assert_eq!(mapping(&r.inputs[1]), vec![0, -1]);
        assert_eq!(mapping(&r.outputs[0]), vec![-1, 0, 1]);
        let out = [t(&[8, 4], &[0, 1])];
        let r = combine_backward(&[2, 2], &out, 2).unwrap();
        assert_eq!(mapping(&r.inputs[0]), vec![-1, 0, 1]);
        assert_eq!(mapping(&r.inputs[2]), vec![-1, 0]);
        let _ = MeshAxis::new(0);
    }
}
