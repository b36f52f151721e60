//! The Mixture-of-Experts routing ops, after PaddlePaddle 3.3.1's `MoEGateDispatchInferSpmd`
//! (`moe_gate_dispatch.cc`): the token dim `s` of X and of the gates keeps its split, and
//! the dispatched tensor's slot dim (groups × capacity) takes it, as Paddle's `esh` does.
//! The experts `e` and the choices `k` are replicated (top-k needs every expert's gate);
//! the width `h` passes through.
//!
//! One difference, deliberate (`docs/paddle.md`): Paddle lets any split of `s` through, and
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
use super::{check_rank, DimAxes, DistTensor, Inferred, Layout, Result};

/// An op's tensors in letters: (inputs, outputs).
pub type Letters = (&'static [&'static str], &'static [&'static str]);

/// `moe_dispatch`: X, the gates → Out, the weights, the index.
pub const DISPATCH: Letters = (&["sh", "se"], &["esh", "sk", "ks"]);
/// `moe_combine`: the experts' output, the weights, the index → Out.
pub const COMBINE: Letters = (&["esh", "sk", "ks"], &["sh"]);

/// The layouts of every input and output, from `tensors` written in `letters` (an op's
/// inputs going forward, its outputs going backward), routing groups of `group_size` tokens.
pub fn infer(
    mesh: &[usize],
    op: Letters,
    letters: &[&str],
    tensors: &[DistTensor],
    group_size: usize,
) -> Result<Inferred> {
    // The dispatched tensor (`esh`) gives only its width to the merge (its `e` and `s` are
    // `1`): the routing needs every expert whatever split the experts' output arrives with
    // (expert parallelism's), and its slots' split follows the tokens' (a token split must
    // win, so the experts' output goes back to its tokens by an all-to-all rather than by
    // gathering every token on every rank).
    let mut pairs = Vec::with_capacity(tensors.len());
    let mut tokens = 0;
    for (l, t) in letters.iter().zip(tensors) {
        check_rank(t, "moe")?;
        pairs.push((if *l == "esh" { "11h" } else { l }, t.dims()));
        // The token count from a tensor with a token dim (`esh`'s middle dim is the slots).
        if let (Some(i), false) = (l.find('s'), l.starts_with('e')) {
            tokens = t.shape.get(i).copied().unwrap_or(0);
        }
    }
    let groups = tokens / group_size.max(1);
    let mut map = merge(
        &pairs,
        OnAxisConflict::Error,
        OnMeshConflict::KeepFirst,
        None,
    )?;
    // The token split, cut back until it keeps the groups whole.
    let shards = |s: &DimAxes| -> usize {
        let sizes = s.as_slice().iter().map(|a| mesh.get(a.index()).copied());
        sizes.map(|n| n.unwrap_or(1)).product::<usize>().max(1)
    };
    let mut s = map.get('s');
    while !groups.is_multiple_of(shards(&s)) {
        s.pop();
    }
    map.set('s', s);
    map.set('e', DimAxes::WHOLE);
    map.set('k', DimAxes::WHOLE);
    let layouts = |ls: &[&str]| ls.iter().map(|l| Layout::from_dims(map.dims(l))).collect();
    Ok(Inferred {
        inputs: layouts(op.0),
        outputs: layouts(op.1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(shape: &[usize], mapping: &[i64]) -> DistTensor {
        DistTensor {
            shape: shape.iter().copied().collect(),
            layout: Layout::from_dims_mapping(mapping).unwrap(),
        }
    }

    fn mapping(l: &Layout) -> Vec<i64> {
        l.dims_mapping()
    }

    /// Eight tokens in `groups` groups.
    fn forward(mesh: &[usize], ins: &[DistTensor], groups: usize) -> Inferred {
        infer(mesh, DISPATCH, DISPATCH.0, ins, 8 / groups).unwrap()
    }

    #[test]
    fn a_token_split_that_keeps_groups_whole_passes_to_the_slots() {
        let ins = [t(&[8, 4], &[0, -1]), t(&[8, 3], &[0, -1])];
        let r = forward(&[2], &ins, 4);
        assert_eq!(mapping(&r.inputs[0]), vec![0, -1]);
        assert_eq!(mapping(&r.outputs[0]), vec![-1, 0, -1]);
        assert_eq!(mapping(&r.outputs[1]), vec![0, -1]);
        assert_eq!(mapping(&r.outputs[2]), vec![-1, 0]);
    }

    #[test]
    fn a_split_that_would_cut_a_group_is_dropped() {
        let ins = [t(&[8, 4], &[0, -1]), t(&[8, 3], &[0, -1])];
        let r = forward(&[2], &ins, 1);
        assert_eq!(mapping(&r.inputs[0]), vec![-1, -1]);
        assert_eq!(mapping(&r.outputs[0]), vec![-1, -1, -1]);
        // Three groups do not split two ways either.
        let six = [t(&[6, 4], &[0, -1]), t(&[6, 3], &[0, -1])];
        let r = infer(&[2], DISPATCH, DISPATCH.0, &six, 2).unwrap();
        assert_eq!(mapping(&r.outputs[1]), vec![-1, -1]);
    }

    #[test]
    fn the_width_keeps_its_split_and_the_experts_are_whole() {
        let ins = [t(&[8, 4], &[-1, 1]), t(&[8, 3], &[0, 1])];
        let r = forward(&[2, 2], &ins, 2);
        assert_eq!(mapping(&r.inputs[1]), vec![0, -1]);
        assert_eq!(mapping(&r.outputs[0]), vec![-1, 0, 1]);
        let out = [t(&[8, 4], &[0, 1])];
        let r = infer(&[2, 2], COMBINE, COMBINE.1, &out, 4).unwrap();
        assert_eq!(mapping(&r.inputs[0]), vec![-1, 0, 1]);
        assert_eq!(mapping(&r.inputs[2]), vec![-1, 0]);
    }
}
