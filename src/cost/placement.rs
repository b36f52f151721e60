//! Where a mesh's ranks run: `--order tp-cp-dp-pp` names the mesh axes innermost first, as
//! Megatron-Core's `order` does, and rank r runs on the device its coordinates have when the
//! axes are laid out in that order. The default is the mesh's own order (its last axis
//! innermost), which for a strategy by sizes is Megatron's: tp inside a node, then cp, dp
//! and pp.

use crate::dist::ProcessMesh;

/// Why an order is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OrderError {
    #[error("`{0}` is not an axis of the mesh (its axes: {1})")]
    NotAnAxis(String, String),
    #[error("`{0}` is named twice")]
    Twice(String),
    #[error("the order leaves out the mesh axis `{0}`; name every axis, innermost first")]
    Missing(String),
}

/// The device of each rank of `mesh`, indexed by rank id, when its axes are laid out
/// innermost first as `order` names them (`-` or `,` between names).
pub fn devices_in_order(mesh: &ProcessMesh, order: &str) -> Result<Vec<u32>, OrderError> {
    let names = mesh.dim_names();
    let mut axes: Vec<usize> = Vec::new();
    for name in order
        .split(['-', ','])
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        let a = names
            .iter()
            .position(|n| n == name)
            .ok_or_else(|| OrderError::NotAnAxis(name.to_string(), names.join(", ")))?;
        if axes.contains(&a) {
            return Err(OrderError::Twice(name.to_string()));
        }
        axes.push(a);
    }
    if let Some(missing) = (0..names.len()).find(|a| !axes.contains(a)) {
        return Err(OrderError::Missing(names[missing].clone()));
    }
    let shape = mesh.shape();
    let mut stride = vec![0usize; shape.len()];
    let mut s = 1;
    for &a in &axes {
        stride[a] = s;
        s *= shape[a];
    }
    let ids = mesh.process_ids();
    let mut devices: Vec<u32> = (0..=ids.iter().copied().max().unwrap_or(0)).collect();
    for &r in ids {
        let coords = mesh.coords_of(r).unwrap_or_default();
        devices[r as usize] = coords
            .iter()
            .zip(&stride)
            .map(|(c, s)| c * s)
            .sum::<usize>() as u32;
    }
    Ok(devices)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_innermost_first() {
        let mesh = ProcessMesh::new(
            vec![2, 4],
            (0..8).collect(),
            vec!["dp".to_string(), "tp".to_string()],
        )
        .unwrap();
        // The mesh's own order: tp innermost.
        assert_eq!(
            devices_in_order(&mesh, "tp-dp").unwrap(),
            (0..8).collect::<Vec<_>>()
        );
        // dp innermost: rank (dp, tp) runs on device tp·2 + dp.
        assert_eq!(
            devices_in_order(&mesh, "dp,tp").unwrap(),
            vec![0, 2, 4, 6, 1, 3, 5, 7]
        );
        let err = |o: &str| devices_in_order(&mesh, o).unwrap_err().to_string();
        assert_eq!(
            err("tp"),
            "the order leaves out the mesh axis `dp`; name every axis, innermost first"
        );
        assert_eq!(
            err("tp-pp-dp"),
            "`pp` is not an axis of the mesh (its axes: dp, tp)"
        );
        assert_eq!(err("tp-tp-dp"), "`tp` is named twice");
    }
}
