//! Meshes, communication groups (Paddle `_get_comm_group` semantics), local shapes, dist
//! attr validation and the four notations.
#![cfg(not(target_arch = "wasm32"))]

use shardlab::dist::{
    local_shape, render, MeshError, MeshId, Notation, ProcessMesh, ReduceType, TensorDistAttr,
};
use std::sync::Arc;

fn mesh(shape: &[usize], names: &[&str]) -> Arc<ProcessMesh> {
    Arc::new(ProcessMesh::with_names(shape, names).unwrap())
}

#[test]
fn paddle_comm_groups_on_2x4() {
    let m = mesh(&[2, 4], &["dp", "mp"]);
    assert_eq!(
        m.group_of(5, &ax(&[0])),
        Some(vec![1, 5]),
        "dp group of rank 5"
    );
    assert_eq!(
        m.group_of(5, &ax(&[1])),
        Some(vec![4, 5, 6, 7]),
        "mp group of rank 5"
    );
    assert_eq!(
        m.group_of(0, &ax(&[0, 1])),
        Some((0..8).collect()),
        "world group"
    );
    assert_eq!(m.group_of(3, &[]), Some(vec![3]), "no axes: just the rank");
    assert_eq!(m.group_of(8, &ax(&[0])), None, "rank 8 is not on the mesh");
    assert_eq!(
        m.all_groups(&ax(&[0])),
        vec![vec![0, 4], vec![1, 5], vec![2, 6], vec![3, 7]]
    );
    assert_eq!(
        m.all_groups(&ax(&[1])),
        vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]
    );
    assert_eq!(m.coords_of(6), Some(vec![1, 2]));
    assert_eq!(m.process_at(&[1, 2]), Some(6));
}

#[test]
fn paddle_comm_groups_on_2x2x2x2() {
    let m = mesh(&[2, 2, 2, 2], &["a", "b", "c", "d"]);
    assert_eq!(m.group_of(0, &ax(&[0])), Some(vec![0, 8]));
    assert_eq!(m.group_of(0, &ax(&[3])), Some(vec![0, 1]));
    assert_eq!(m.group_of(5, &ax(&[1])), Some(vec![1, 5]));
    assert_eq!(m.group_of(5, &ax(&[1, 3])), Some(vec![0, 1, 4, 5]));
}

#[test]
fn groups_use_the_mesh_process_ids() {
    let m = ProcessMesh::new(
        vec![2, 2],
        vec![10, 11, 12, 13],
        vec!["x".into(), "y".into()],
    )
    .unwrap();
    assert_eq!(m.group_of(12, &ax(&[0])), Some(vec![10, 12]));
    assert_eq!(m.group_of(12, &ax(&[1])), Some(vec![12, 13]));
    assert_eq!(m.to_string(), "[2, 2] (x, y) ids [10, 11, 12, 13]");
    // Groups follow mesh order, not id order: the ids here are not increasing.
    let m = ProcessMesh::new(vec![2, 2], vec![3, 1, 2, 0], vec!["x".into(), "y".into()]).unwrap();
    assert_eq!(m.group_of(1, &ax(&[0])), Some(vec![1, 0]));
    assert_eq!(m.group_of(0, &ax(&[1])), Some(vec![2, 0]));
    assert_eq!(m.group_of(3, &ax(&[0, 1])), Some(vec![3, 1, 2, 0]));
    assert_eq!(mesh(&[4], &["dp"]).to_string(), "[4] (dp)");
}

#[test]
fn invalid_meshes_are_errors() {
    let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        ProcessMesh::new(vec![], vec![], vec![]),
        Err(MeshError::NoAxes)
    );
    assert_eq!(
        ProcessMesh::new(vec![2, 0], vec![], names(&["a", "b"])),
        Err(MeshError::ZeroSize { axis: 1 })
    );
    let e = ProcessMesh::new(vec![2, 2], vec![0, 1, 2], names(&["a", "b"])).unwrap_err();
    assert_eq!(
        e.to_string(),
        "mesh shape [2, 2] holds 4 processes but 3 process ids were given"
    );
    let e = ProcessMesh::new(vec![2], vec![1, 1], names(&["a"])).unwrap_err();
    assert_eq!(e.to_string(), "process id 1 appears twice in the mesh");
    let e = ProcessMesh::new(vec![2, 2], vec![0, 1, 2, 3], names(&["a", "a"])).unwrap_err();
    assert_eq!(e.to_string(), "mesh axis name `a` is used twice");
    let e = ProcessMesh::new(vec![2], vec![0, 1], names(&["9x"])).unwrap_err();
    assert!(e.to_string().contains("not a valid name"));
    let e = ProcessMesh::with_names(&[1 << 40, 1 << 40], &["a", "b"]).unwrap_err();
    assert!(matches!(e, MeshError::TooLarge { .. }), "{e}");
}

#[test]
fn local_shapes_divide_by_the_splitting_axes() {
    let m = mesh(&[2, 4], &["dp", "mp"]);
    let a = TensorDistAttr::from_dims_mapping(MeshId::JOB, &[0, -1]).unwrap();
    assert_eq!(
        local_shape("x", &[16, 64], &a, &m).map(|s| s.to_vec()),
        Ok(vec![8, 64])
    );
    let a = TensorDistAttr::from_dims_mapping(MeshId::JOB, &[-1, 1]).unwrap();
    assert_eq!(
        local_shape("w", &[64, 256], &a, &m).map(|s| s.to_vec()),
        Ok(vec![64, 64])
    );
    let mut co = TensorDistAttr::replicated(MeshId::JOB, 2);
    co.dims[0] = shardlab::dist::DimAxes::from_axes(ax(&[0, 1])).unwrap();
    assert_eq!(
        local_shape("x", &[16, 64], &co, &m).map(|s| s.to_vec()),
        Ok(vec![2, 64])
    );
    assert_eq!(co.shards_of_dim(0, &m), 8);
    let a = TensorDistAttr::from_dims_mapping(MeshId::JOB, &[-1, 1]).unwrap();
    // Uneven: the first rank's block, the largest (10 on 4 is 3, 3, 3, 1); the last's.
    assert_eq!(
        local_shape("linear_1.w_0", &[256, 10], &a, &m).map(|s| s.to_vec()),
        Ok(vec![256, 3])
    );
    assert_eq!(
        shardlab::dist::local_shape_at("linear_1.w_0", &[256, 10], &a, &m, &[0, 3])
            .map(|s| s.to_vec()),
        Ok(vec![256, 1])
    );
    assert_eq!(
        local_shape("linear_1.w_0", &[256, 3], &a, &m)
            .unwrap_err()
            .to_string(),
        "`linear_1.w_0` dim 1 has size 3, fewer than the 4 shards `mp` cut it into: some rank \
         would hold nothing of it"
    );
    assert_eq!(
        local_shape("s", &[], &TensorDistAttr::replicated(MeshId::JOB, 0), &m).map(|s| s.to_vec()),
        Ok(vec![])
    );
}

#[test]
fn dist_attr_validation_names_variable_and_dim() {
    let m = mesh(&[2, 4], &["dp", "mp"]);
    let check = |mapping: &[i64], shape: &[usize]| {
        TensorDistAttr::from_dims_mapping(MeshId::JOB, mapping)
            .and_then(|a| a.validate("t", shape, &m))
            .map_err(|e| e.to_string())
    };
    assert_eq!(check(&[0, 1], &[4, 8]), Ok(()));
    assert_eq!(
        check(&[0, 0], &[4, 8]),
        Err("`t`: mesh axis `dp` splits more than one dim (dims 0 and 1)".into())
    );
    assert_eq!(
        check(&[2, -1], &[4, 8]),
        Err("`t` dim 0: mesh axis 2 does not exist on a mesh with 2 axes".into())
    );
    assert_eq!(
        check(&[0], &[4, 8]),
        Err("`t` has rank 2 but its dims mapping has 1 entries".into())
    );
    assert_eq!(check(&[1, -1], &[6, 8]), Ok(()));
    assert_eq!(
        check(&[1, -1], &[3, 8]),
        Err(
            "`t` dim 0 has size 3, fewer than the 4 shards `mp` cut it into: some rank would \
             hold nothing of it"
                .into()
        )
    );
    let mut p = TensorDistAttr::from_dims_mapping(MeshId::JOB, &[0, -1]).unwrap();
    p.set_partial(ax(&[0])[0], ReduceType::Sum);
    assert_eq!(
        p.validate("t", &[4, 8], &m).unwrap_err().to_string(),
        "`t`: mesh axis `dp` is both partial and splitting dim 0"
    );
}

#[test]
fn four_notations() {
    let m = mesh(&[2, 4], &["dp", "mp"]);
    let ty = shardlab::dist::Typed {
        shape: &[8, 16],
        dtype: "f32",
    };
    let all = |a: &TensorDistAttr| Notation::ALL.map(|n| render(a, &m, n, ty));
    let a = TensorDistAttr::from_dims_mapping(MeshId::JOB, &[0, -1]).unwrap();
    assert_eq!(
        all(&a),
        [
            "[0, -1]",
            "P('dp', None)",
            "[Shard(0), Replicate()]",
            "(S(0), B)",
            "[I_dp, J]",
            "f32[8@dp, 16]"
        ]
    );
    let a = TensorDistAttr::from_dims_mapping(MeshId::JOB, &[-1, 1]).unwrap();
    assert_eq!(
        all(&a),
        [
            "[-1, 1]",
            "P(None, 'mp')",
            "[Replicate(), Shard(1)]",
            "(B, S(1))",
            "[I, J_mp]",
            "f32[8, 16@mp]"
        ]
    );
    let mut p = TensorDistAttr::from_dims_mapping(MeshId::JOB, &[0, -1]).unwrap();
    p.set_partial(ax(&[1])[0], ReduceType::Sum);
    assert_eq!(
        all(&p),
        [
            "[0, -1] partial{1: SUM}",
            "P('dp', None, unreduced={'mp'})",
            "[Shard(0), Partial(sum)]",
            "(S(0), P)",
            "[I_dp, J] {U_mp}",
            "f32[8@dp, 16]{U:mp}"
        ]
    );
    let mut co = TensorDistAttr::replicated(MeshId::JOB, 2);
    co.dims[1] = shardlab::dist::DimAxes::from_axes(ax(&[0, 1])).unwrap();
    assert_eq!(
        all(&co),
        [
            "[-1, [0, 1]]",
            "P(None, ('dp', 'mp'))",
            "[Shard(1), Shard(1)]",
            "(S(1), S(1))",
            "[I, J_{dp,mp}]",
            "f32[8, 16@(dp,mp)]"
        ]
    );
    let mut mx = TensorDistAttr::replicated(MeshId::JOB, 1);
    mx.set_partial(ax(&[0])[0], ReduceType::Max);
    assert_eq!(
        all(&mx),
        [
            "[-1] partial{0: MAX}",
            "P(None, unreduced={'dp':max})",
            "[Partial(max), Replicate()]",
            "(P(max), B)",
            "[I] {U_dp:max}",
            "f32[8]{U:dp:max}"
        ]
    );
    assert_eq!(Notation::from_id("dtensor"), Some(Notation::DTensor));
    for n in Notation::ALL {
        assert_eq!(
            Notation::from_id(n.id()),
            Some(n),
            "{n:?} round-trips its id"
        );
    }
}

/// Two layouts are equal only when dims, partial status, annotations and mesh all are.
#[test]
fn layouts_compare_every_field() {
    use shardlab::dist::{ReduceType, TensorDistAttr};
    let base = TensorDistAttr::replicated(MeshId::JOB, 2);
    assert_eq!(base, TensorDistAttr::replicated(MeshId::JOB, 2));
    let mut dims = base.clone();
    dims.dims[0] = shardlab::dist::DimAxes::from_axes(ax(&[0])).unwrap();
    let mut partial = base.clone();
    partial.set_partial(ax(&[1])[0], ReduceType::Sum);
    let mut annotated = base.clone();
    annotated.annotated[1] = true;
    let other_mesh = TensorDistAttr::replicated(MeshId(1), 2);
    for (what, other) in [
        ("dims", dims),
        ("partial", partial),
        ("annotated", annotated),
        ("mesh", other_mesh),
    ] {
        assert_ne!(base, other, "{what} differs");
    }
    assert_eq!(ReduceType::from_name("MAX"), Some(ReduceType::Max));
    assert_eq!(ReduceType::Avg.name(), "AVG");
    assert_eq!(ReduceType::Min.to_string(), "MIN");
}

/// Mesh axes by index.
fn ax(axes: &[usize]) -> Vec<shardlab::dist::MeshAxis> {
    axes.iter()
        .map(|&a| shardlab::dist::MeshAxis::new(a).unwrap())
        .collect()
}
