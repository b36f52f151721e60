//! concat and stack: the inputs are aligned mesh axis by mesh axis (Paddle's
//! `AlignDimsSharding`): a mesh axis on which all inputs agree stays; one on which they
//! differ goes to the cheapest dim that no other mesh axis splits, or nowhere.
//!
//! ```text
//! concat(axis=2) [0,-1,1] + [0,-1,-1]    =>  both [0,1,-1]  (mesh axis 1 moves off the concat axis)
//! concat(axis=1) [0,-1] + [1,-1] + [-1,-1] => all [0,-1]
//! stack(axis=1)  [0,-1] + [1,-1]         =>  inputs [0,1], out [0,-1,1]
//! ```

use super::{DimAxes, Dims, DistTensor, Inferred, Layout, MeshAxis, Result, SpmdError};

/// Which dim of `t` mesh axis `m` splits.
fn placement(t: &DistTensor, m: MeshAxis) -> Option<usize> {
    t.dims().iter().position(|axes| axes.contains(&m))
}

fn local_numel(mesh: &[usize], t: &DistTensor) -> f64 {
    t.shape
        .iter()
        .zip(t.dims())
        .map(|(&s, axes)| {
            let n: usize = axes
                .iter()
                .map(|&a| mesh.get(a.index()).copied().unwrap_or(1))
                .product();
            s.div_ceil(n.max(1)) as f64
        })
        .product()
}

/// Aligns the inputs' shardings over the dims in `align`; returns each input's dims.
fn align(mesh: &[usize], inputs: &[DistTensor], align: &[usize]) -> Result<Vec<Dims>> {
    let Some(reference) = inputs.iter().find(|t| t.shape.iter().all(|&d| d > 0)) else {
        return Ok(inputs
            .iter()
            .map(|t| smallvec::smallvec![DimAxes::WHOLE; t.shape.len()])
            .collect());
    };
    for t in inputs {
        if t.dims().len() != t.shape.len() || t.shape.len() != reference.shape.len() {
            return Err(SpmdError::ConcatRank);
        }
    }
    let mismatch = |m: MeshAxis| {
        inputs
            .iter()
            .any(|t| placement(t, m) != placement(reference, m))
    };
    let mut taken: Vec<(MeshAxis, usize)> = Vec::new(); // (mesh axis, dim)
    for m in MeshAxis::all(mesh.len()) {
        if !mismatch(m) {
            if let Some(d) = placement(reference, m).filter(|d| align.contains(d)) {
                taken.push((m, d));
            }
        }
    }
    for m in MeshAxis::all(mesh.len()).filter(|&m| mismatch(m)) {
        let mut best: Option<(f64, usize)> = None;
        for &d in align {
            if taken.iter().any(|&(_, t)| t == d) {
                continue;
            }
            let mut cost = 0.0;
            for t in inputs {
                if t.shape[d] < mesh[m.index()] {
                    cost = f64::INFINITY;
                    break;
                }
                if !t.dims()[d].is_empty() {
                    continue;
                }
                cost += local_numel(mesh, t) * mesh[m.index()] as f64;
            }
            if cost.is_finite() && best.is_none_or(|(c, _)| cost < c) {
                best = Some((cost, d));
            }
        }
        if let Some((_, d)) = best {
            taken.push((m, d));
        }
    }
    taken.sort_unstable();
    Ok(inputs
        .iter()
        .map(|t| {
            let mut dims: Dims = smallvec::smallvec![DimAxes::WHOLE; t.shape.len()];
            for &(m, d) in &taken {
                dims[d].push(m);
            }
            dims
        })
        .collect())
}

/// concat forward: align every dim but the concat axis.
pub fn concat_forward(mesh: &[usize], inputs: &[DistTensor], axis: usize) -> Result<Inferred> {
    let rank = inputs.first().map_or(0, |t| t.shape.len());
    let dims = align(
        mesh,
        inputs,
        &(0..rank).filter(|&d| d != axis).collect::<Vec<_>>(),
    )?;
    let out = dims.first().cloned().unwrap_or_default();
    Ok(Inferred {
        inputs: dims.into_iter().map(Layout::from_dims).collect(),
        outputs: smallvec::smallvec![Layout::from_dims(out)],
    })
}

/// concat backward: every input takes the output's sharding without the concat axis; the
/// output keeps its own (Paddle 3.3.1 keeps a shard on the concat axis).
pub fn concat_backward(
    inputs: &[DistTensor],
    outputs: &[DistTensor],
    axis: usize,
) -> Result<Inferred> {
    let out = super::arg(outputs, 0, "concat")?;
    let dims: Dims = out
        .dims()
        .iter()
        .enumerate()
        .map(|(d, a)| if d == axis { DimAxes::WHOLE } else { *a })
        .collect();
    Ok(Inferred {
        inputs: inputs
            .iter()
            .map(|_| Layout::from_dims(dims.clone()))
            .collect(),
        outputs: smallvec::smallvec![Layout::from_dims(out.dims().clone())],
    })
}

/// stack forward: align every dim; the output gets a replicated dim at `axis`.
pub fn stack_forward(mesh: &[usize], inputs: &[DistTensor], axis: usize) -> Result<Inferred> {
    let rank = inputs.first().map_or(0, |t| t.shape.len());
    let dims = align(mesh, inputs, &(0..rank).collect::<Vec<_>>())?;
    let mut out = dims.first().cloned().unwrap_or_default();
    if axis > out.len() {
        return Err(SpmdError::StackAxis { axis, rank });
    }
    out.insert(axis, DimAxes::WHOLE);
    Ok(Inferred {
        inputs: dims.into_iter().map(Layout::from_dims).collect(),
        outputs: smallvec::smallvec![Layout::from_dims(out)],
    })
}

/// stack backward: every input takes the output's sharding without the stacked axis.
pub fn stack_backward(
    inputs: &[DistTensor],
    outputs: &[DistTensor],
    axis: usize,
) -> Result<Inferred> {
    let out = super::arg(outputs, 0, "stack")?;
    let dims: Dims = out
        .dims()
        .iter()
        .enumerate()
        .filter(|(d, _)| *d != axis)
        .map(|(_, a)| *a)
        .collect();
    Ok(Inferred {
        inputs: inputs
            .iter()
            .map(|_| Layout::from_dims(dims.clone()))
            .collect(),
        outputs: smallvec::smallvec![Layout::from_dims(out.dims().clone())],
    })
}
