//! reshape (and flatten, which is a reshape): dims are matched in groups of equal product.
//!
//! ```text
//! [8,128,768][0,-1,1] -> [8,128,12,64]   =>  out [0,-1,1,-1]   (split: shard to the outer piece)
//! [8,128,12,64][0,-1,-1,1] -> [8,128,768] =>  out [0,-1,-1]    (merge: first dim's shard only)
//! [8,16,32][0,1,-1] -> [128,32]           =>  in [[0,1],-1,-1], out [[0,1],-1] (co-shard)
//! ```
//! A group's shard goes to its first output piece when that piece divides by the shard
//! count; a co-shard that does not divide falls back to the first dim's own shard
//! (`[8,16][0,1] -> [4,32]` gives `[0,-1]`); otherwise the group is replicated. When the first merged dim is split, later
//! split dims of the group join it as a co-shard (Paddle 3.3.1) if the first dim divides.

use super::{
    arg, check_rank, DimAxes, Dims, DistTensor, Inferred, Layout, MeshAxis, Result, SpmdError,
};

/// Groups of non-size-1 dims with equal products: (source dims, destination dims).
fn groups(src: &[usize], dst: &[usize]) -> Result<Vec<(Vec<usize>, Vec<usize>)>> {
    let s: Vec<usize> = (0..src.len()).filter(|&i| src[i] != 1).collect();
    let d: Vec<usize> = (0..dst.len()).filter(|&i| dst[i] != 1).collect();
    let mismatch = || SpmdError::ReshapeElements {
        src: src.to_vec(),
        dst: dst.to_vec(),
    };
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::new();
    while i < s.len() && j < d.len() {
        let (mut gs, mut gd) = (vec![s[i]], vec![d[j]]);
        let (mut ps, mut pd) = (src[s[i]], dst[d[j]]);
        i += 1;
        j += 1;
        while ps != pd {
            if ps < pd {
                let &k = s.get(i).ok_or_else(mismatch)?;
                ps *= src[k];
                gs.push(k);
                i += 1;
            } else {
                let &k = d.get(j).ok_or_else(mismatch)?;
                pd *= dst[k];
                gd.push(k);
                j += 1;
            }
        }
        out.push((gs, gd));
    }
    if i != s.len() || j != d.len() {
        return Err(mismatch());
    }
    Ok(out)
}

fn shards(mesh: &[usize], axes: &[MeshAxis]) -> usize {
    axes.iter()
        .map(|&a| mesh.get(a.index()).copied().unwrap_or(1))
        .product()
}

/// Moves a sharding from `src_shape` to `dst_shape`; returns (source wanted, destination).
pub fn transform(
    mesh: &[usize],
    src_shape: &[usize],
    src: &Dims,
    dst_shape: &[usize],
) -> Result<(Dims, Dims)> {
    let mut src_wanted: Dims = smallvec::smallvec![DimAxes::WHOLE; src_shape.len()];
    let mut dst: Dims = smallvec::smallvec![DimAxes::WHOLE; dst_shape.len()];
    for (gs, gd) in groups(src_shape, dst_shape)? {
        let first = gs[0];
        let own = src.get(first).cloned().unwrap_or_default();
        let mut axes = own;
        if !axes.is_empty() {
            for &k in &gs[1..] {
                let more = src.get(k).cloned().unwrap_or_default();
                if more.is_empty() {
                    continue;
                }
                let mut trial = axes;
                for &a in more.iter().filter(|a| !axes.contains(a)) {
                    trial.push(a);
                }
                if src_shape[first].is_multiple_of(shards(mesh, &trial)) {
                    axes = trial;
                }
            }
        }
        // The first output piece takes the longest prefix of the (co-)shard that divides it,
        // down to the first dim's own axes: [8,16][0,1] -> [4,32] keeps [0] on the 4
        // (Paddle 3.3.1), not nothing.
        // A dim that only passes through keeps any split, even an uneven one; a merge or a
        // split moves one only where it divides both sides: an uneven chunk of the merged
        // dim is not the chunks of its first dim (6 rows of 4 on 4 ranks are 2, 2, 2, 0
        // rows, not 6, 6, 6, 6 elements), as DTensor's view rules also refuse.
        let piece = dst_shape[gd[0]];
        let identity = gs.len() == 1 && gd.len() == 1;
        let kept = (own.len().max(1)..=axes.len())
            .rev()
            .map(|n| &axes[..n])
            .find(|prefix| {
                let k = shards(mesh, prefix);
                identity || (piece.is_multiple_of(k) && src_shape[first].is_multiple_of(k))
            });
        if let Some(kept) = kept.filter(|k| !k.is_empty()) {
            let kept = DimAxes::from_axes(kept.iter().copied()).unwrap_or_default();
            src_wanted[first] = kept;
            dst[gd[0]] = kept;
        }
    }
    Ok((src_wanted, dst))
}

/// Forward: from the input to `target`.
pub fn forward(mesh: &[usize], inputs: &[DistTensor], target: &[usize]) -> Result<Inferred> {
    let x = arg(inputs, 0, "reshape")?;
    check_rank(x, "reshape X")?;
    let (wanted, out) = transform(mesh, &x.shape, x.dims(), target)?;
    Ok(Inferred {
        inputs: smallvec::smallvec![Layout::from_dims(wanted)],
        outputs: smallvec::smallvec![Layout::from_dims(out)],
    })
}

/// Backward: from the output back to the input's shape.
pub fn backward(mesh: &[usize], inputs: &[DistTensor], outputs: &[DistTensor]) -> Result<Inferred> {
    let x = arg(inputs, 0, "reshape")?;
    let out = arg(outputs, 0, "reshape")?;
    check_rank(out, "reshape Out")?;
    let (out_wanted, x_dims) = transform(mesh, &out.shape, out.dims(), &x.shape)?;
    Ok(Inferred {
        inputs: smallvec::smallvec![Layout::from_dims(x_dims)],
        outputs: smallvec::smallvec![Layout::from_dims(out_wanted)],
    })
}
