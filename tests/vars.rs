//! A program's variable table (`ir/vars.rs`): rank programs share the partition's copy of
//! the serial variables, so appending to one program must leave the table, and every other
//! program sharing it, unchanged; and the table must read, compare and serialize as the
//! plain list it replaces.

use shardlab::ir::{DType, Program, TensorType, Var, VarKind};
use std::sync::Arc;

fn var(name: &str, shape: &[usize]) -> Var {
    Var {
        name: name.into(),
        ty: TensorType::new(DType::F32, shape.to_vec()),
        kind: VarKind::Activation,
        persistable: false,
    }
}

fn shared() -> Arc<Vec<Var>> {
    Arc::new(vec![var("x", &[4, 2]), var("w", &[2, 2])])
}

#[test]
fn programs_sharing_a_table_append_their_own_variables_apart() {
    let table = shared();
    let mut a = Program::sharing_vars(Arc::clone(&table));
    let b = Program::sharing_vars(Arc::clone(&table));
    let t = a.add_var(var("x@RESHARD@1", &[2, 2])).unwrap();
    assert_eq!(t.index(), 2);
    assert_eq!(a.vars().len(), 3);
    assert_eq!(a.var(t).name.as_ref(), "x@RESHARD@1");
    assert_eq!(a.var_id("w").map(|v| v.index()), Some(1));
    // The table and the other program still hold the two shared variables only.
    assert_eq!(table.len(), 2);
    assert_eq!(b.vars().len(), 2);
    assert_eq!(b.vars().to_vec(), *table);
    assert!(!a.same_dataflow(&b));
    // Programs sharing the table with different own variables differ.
    let mut c = Program::sharing_vars(Arc::clone(&table));
    c.add_var(var("w@RESHARD@1", &[2, 2])).unwrap();
    assert!(!a.same_dataflow(&c));
    assert_ne!(a, c);
    // A duplicate of a shared name is refused as in any program.
    assert!(a.add_var(var("x", &[1])).is_err());
}

#[test]
fn a_shared_table_reads_and_compares_as_the_list_it_replaces() {
    let table = shared();
    let mut split = Program::sharing_vars(Arc::clone(&table));
    split.add_var(var("y", &[4, 2])).unwrap();
    let mut whole = table.as_ref().clone();
    whole.push(var("y", &[4, 2]));
    let plain = Program::with_vars(whole.clone());
    assert_eq!(split, plain);
    assert!(split.same_dataflow(&plain));
    assert_eq!(split.vars().iter().cloned().collect::<Vec<_>>(), whole);
    assert_eq!(split.vars()[2], whole[2]);
    assert_eq!(split.vars().get(3), None);
    assert_eq!(
        serde_json::to_string(split.vars()).unwrap(),
        serde_json::to_string(&whole).unwrap()
    );
}

#[test]
fn retyping_a_sharing_program_leaves_the_table_alone() {
    let table = shared();
    let mut p = Program::sharing_vars(Arc::clone(&table));
    p.set_types(vec![
        TensorType::new(DType::F32, vec![8, 2]),
        TensorType::new(DType::F32, vec![2, 2]),
    ]);
    assert_eq!(p.vars()[0].ty.shape.as_slice(), &[8, 2]);
    assert_eq!(table[0].ty.shape.as_slice(), &[4, 2]);
}
