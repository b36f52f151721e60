//! Megatron sequence parallelism by pattern (`--parallel ...,sp`), on top of the tensor
//! parallelism of [`super::parallel`].
//!
//! Tensor parallelism leaves every rank of the `tp` group holding the same copy of the
//! tensors between a row-parallel matmul and the next column-parallel one: the residual
//! stream, the norms, the embedding's output. Sequence parallelism splits them on the
//! sequence over `tp` instead (Korthikanti et al., 2022). Where the stream meets a
//! column-parallel matmul it must be whole again, so each such input is read through a
//! gather point, an `assign` to `{x}.gathered` that is annotated whole: the planner inserts
//! an all-gather there, and where a row-parallel matmul's partial sum lands on the split
//! stream it reduce-scatters instead of all-reducing (Paddle's models call `dist.reshard` at
//! the same points; the `gpt_sequence_parallel` scenario builds them by hand).
//!
//! An embedding lookup's output (a partial sum over the vocabulary's shards) is read through
//! a scatter point, `{emb}.scattered`, split on the sequence: a reduce-scatter, as
//! Megatron's embedding ends with one. (Annotating the lookup's own output instead makes
//! the planner gather the whole table.)
//!
//! The annotations: a norm's input and output, a residual add's output and a row-parallel
//! matmul's output are split `[dp, tp, -]`; a gather point is `[dp, -, -]`. Completion
//! carries the rest, the scatter point included (its reader, a norm or the add of the
//! position embedding, is split).

use crate::ir::{Op, OpRole, OpType, Program, Var, VarId, VarKind};

/// Whether `op` is a forward matmul with a 2-D parameter (a linear layer).
fn linear(program: &Program, op: &Op) -> bool {
    op.ty == OpType::MatmulV2
        && matches!(op.role, OpRole::Forward | OpRole::Loss)
        && op.input("Y").first().is_some_and(|&y| {
            let v = program.var(y);
            v.kind == VarKind::Parameter && v.ty.rank() == 2
        })
}

/// `program` with a gather point before each column-parallel linear layer whose input is
/// a `[batch, seq, hidden]` activation (`split` says which variables tensor parallelism
/// splits; a linear layer reading an unsplit input is column-parallel). Every variable
/// keeps its id; the gather points are new variables after them, one per gathered tensor.
pub fn with_gather_points(program: &Program, split: &[bool]) -> Program {
    let mut out = Program::with_vars(program.vars().to_vec());
    let mut gathered: Vec<(VarId, VarId)> = Vec::new();
    // A lookup's output read through its scatter point from then on.
    let mut scattered: Vec<(VarId, VarId)> = Vec::new();
    for op in program.ops() {
        let mut read = Op::clone(op);
        for slot in read.inputs.iter_mut() {
            for v in slot.iter_mut() {
                if let Some(&(_, s)) = scattered.iter().find(|(from, _)| from == v) {
                    *v = s;
                }
            }
        }
        let x = read.input("X").first().copied();
        let column = x.filter(|&x| {
            linear(program, op)
                && !split.get(x.index()).copied().unwrap_or(false)
                && out.var(x).ty.rank() == 3
        });
        if let Some(x) = column {
            let g = match gathered.iter().find(|(from, _)| *from == x) {
                Some(&(_, g)) => g,
                None => {
                    let g = point(&mut out, x, "gathered", op);
                    gathered.push((x, g));
                    g
                }
            };
            if let Some(slot) = read.inputs.first_mut() {
                *slot = smallvec::smallvec![g];
            }
        }
        let lookup = (op.ty == OpType::LookupTableV2)
            .then(|| op.output("Out").first().copied())
            .flatten()
            .filter(|&o| program.var(o).ty.rank() == 3);
        out.push_op(read);
        if let Some(o) = lookup {
            let s = point(&mut out, o, "scattered", op);
            scattered.push((o, s));
        }
    }
    out
}

/// A new `{x}.{what}` variable of `x`'s type, written by an `assign` from `x` appended to
/// `out` in `like`'s role and namescope.
fn point(out: &mut Program, x: VarId, what: &str, like: &Op) -> VarId {
    let v = out.var(x).clone();
    let p = out.add_var_unchecked(Var {
        name: format!("{}.{what}", v.name).into(),
        ty: v.ty,
        kind: VarKind::Activation,
        persistable: false,
    });
    let mut assign = Op::new(OpType::Assign);
    assign.inputs = crate::slots![[x]];
    assign.outputs = crate::slots![[p]];
    assign.role = like.role;
    assign.namescope = like.namescope.clone();
    out.push_op(assign);
    p
}

/// The sequence-parallel annotations of `program` (built by [`with_gather_points`]), as
/// `(variable, dims)`; `dp` names the batch's axis (`-` without data parallelism). With
/// context parallelism (`cp`) the sequence is split over `cp` first: sequence parallelism
/// splits each context-parallel rank's chunk over `tp` (`cp+tp`, Megatron's order), and a
/// gathered input is whole over `tp` only, still split over `cp`.
pub fn annotations<'a>(
    program: &Program,
    split: &[bool],
    dp: &'a str,
    cp: bool,
) -> Vec<(usize, Vec<&'a str>)> {
    let (seq, gathered) = if cp { ("cp+tp", "cp") } else { ("tp", "-") };
    let seq_split = |v: VarId| (v.index(), vec![dp, seq, "-"]);
    let is_split = |v: VarId| split.get(v.index()).copied().unwrap_or(false);
    let rank3 = |v: VarId| program.var(v).ty.rank() == 3;
    let mut out = Vec::new();
    for op in program.ops() {
        if !matches!(op.role, OpRole::Forward | OpRole::Loss) {
            continue;
        }
        let x = op.input("X").first().copied();
        let outs: Vec<VarId> = op
            .output("Out")
            .iter()
            .chain(op.output("Y"))
            .copied()
            .collect();
        let ty = op.ty;
        if ty == OpType::LayerNorm || ty == OpType::RmsNorm {
            if let Some(x) = x.filter(|&x| rank3(x) && !is_split(x)) {
                out.push(seq_split(x));
                out.extend(op.output("Y").iter().map(|&y| seq_split(y)));
            }
        } else if ty == OpType::Assign {
            for &o in op.output("Out").iter().filter(|&&o| rank3(o)) {
                if program.var(o).name.ends_with(".gathered") {
                    out.push((o.index(), vec![dp, gathered, "-"]));
                }
            }
        } else if (ty == OpType::MatmulV2 && linear(program, op) && x.is_some_and(is_split))
            || (ty == OpType::ElementwiseAdd && !op.all_inputs().any(is_split))
        {
            out.extend(outs.iter().filter(|&&o| rank3(o)).map(|&o| seq_split(o)));
        }
    }
    out
}
