//! A rank program's layouts table (`partition/layouts.rs`): the serial entries are shared by
//! every rank of a partition, so a write must copy the entry into the rank's own and leave
//! the shared table, and every other rank's view of it, unchanged.

use shardlab::dist::layout::Layout;
use shardlab::dist::{MeshId, TensorDistAttr};
use shardlab::passes::partition::layouts::Layouts;
use std::sync::Arc;

fn split(mapping: &[i64]) -> TensorDistAttr {
    TensorDistAttr::new(MeshId::JOB, Layout::from_dims_mapping(mapping).unwrap())
}

fn shared() -> Arc<Vec<TensorDistAttr>> {
    Arc::new(vec![split(&[0, -1]), split(&[-1, 1]), split(&[-1])])
}

#[test]
fn reads_go_through_to_the_shared_table() {
    let table = shared();
    let l = Layouts::new(Arc::clone(&table), 4);
    assert_eq!(l.len(), 3);
    assert_eq!(l.to_vec(), *table);
    assert_eq!(l[1], table[1]);
    assert_eq!(l.get(3), None);
}

#[test]
fn a_write_copies_the_entry_and_leaves_the_other_ranks_alone() {
    let table = shared();
    let mut mine = Layouts::new(Arc::clone(&table), 4);
    let other = Layouts::new(Arc::clone(&table), 4);
    mine[0] = split(&[-1, -1]);
    mine[1].annotated[0] = true;
    assert_eq!(mine[0], split(&[-1, -1]));
    assert!(mine[1].annotated[0]);
    // The shared table and the other rank still see the completed layouts.
    assert_eq!(table[0], split(&[0, -1]));
    assert!(!table[1].annotated[0]);
    assert_eq!(other.to_vec(), *table);
    assert_ne!(mine, other);
    // A second write to the same variable changes its own entry, not a new copy.
    mine[0] = split(&[1, -1]);
    assert_eq!(mine[0], split(&[1, -1]));
    assert_eq!(mine.len(), 3);
}

#[test]
fn temporaries_are_appended_after_the_serial_variables() {
    let mut l = Layouts::new(shared(), 0);
    l.push(split(&[0]));
    l.push(split(&[-1, -1, 1]));
    assert_eq!(l.len(), 5);
    assert_eq!(l[3], split(&[0]));
    assert_eq!(l[4], split(&[-1, -1, 1]));
    l[3] = split(&[-1]);
    assert_eq!(l[3], split(&[-1]));
    assert_eq!(l.iter().count(), 5);
}

#[test]
fn equal_layouts_are_equal_however_they_are_stored() {
    let table = shared();
    let mut copied = Layouts::new(Arc::clone(&table), 0);
    // Written with the value it had: stored in its own entries now, equal all the same.
    copied[2] = table[2].clone();
    let own: Layouts = table.as_ref().clone().into();
    assert_eq!(copied, own);
    assert_eq!(Layouts::new(table, 0), own);
}
