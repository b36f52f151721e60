//! Attention's core written out as ops (`softmax(mask(q·kᵀ/√d))·v` between transposes to
//! and from `[batch, heads, seq, head_dim]`, as our presets and imported programs write
//! it) fused into one `flash_attn` over `[batch, seq, heads, head_dim]` operands. Context
//! parallelism needs the fused op: a split sequence can only be attended by an op that sees
//! every key of its queries (ring attention's blocks, or Ulysses' heads).
//!
//! The pattern, from the masked softmax out: its input is a `scale` by `1/√head_dim` of a
//! `matmul(qᵗ, kᵗ, trans_y)`; its output is read only by `matmul(·, vᵗ)`, whose output is
//! read only by a transpose back; `qᵗ`, `kᵗ`, `vᵗ` are `[0, 2, 1, 3]` transposes read only
//! there, and a `repeat_interleave` of the key and value heads before them (grouped-query
//! attention) is absorbed too. Every intermediate is read once, so nothing else loses a
//! value. Variables keep
//! their ids (the fused ones stay declared, unused); the log-sum-exp is a new variable.

use crate::ir::{Attr, Op, OpType, Program, Var, VarId, VarKind};

/// How `flash_attn` treats a split sequence, and the stored order of the sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionMode {
    /// `ring` or `ulysses` (`cp_mode`).
    pub cp_mode: &'static str,
    /// `zigzag` chunks (0: natural order).
    pub zigzag: usize,
}

/// One matched core: the op indices to drop, the operands and the output.
struct Core {
    drop: Vec<usize>,
    q: VarId,
    k: VarId,
    v: VarId,
    out: VarId,
    prefix: String,
}

const SWAP: [i64; 4] = [0, 2, 1, 3];

/// `program` with every attention core fused and every `flash_attn` given `mode`.
/// Idempotent: a fused program only has its attributes set again.
pub fn fuse_attention(program: &Program, mode: AttentionMode) -> Program {
    let cores = find_cores(program);
    let mut drop = vec![None; program.ops().len()];
    for (c, core) in cores.iter().enumerate() {
        for &i in &core.drop {
            drop[i] = Some(c);
        }
    }
    let mut out = Program::with_vars(program.vars().to_vec());
    for (i, op) in program.ops().iter().enumerate() {
        match drop[i] {
            // The core's last op (the transpose back) is where the fused op goes.
            Some(c) if Some(&i) == cores[c].drop.last() => {
                let core = &cores[c];
                let lse = out.add_var_unchecked(Var {
                    name: format!("{}.lse", core.prefix).into(),
                    ty: crate::ir::TensorType::new(
                        program.var(core.q).ty.dtype,
                        lse_shape(&program.var(core.q).ty.shape),
                    ),
                    kind: VarKind::Activation,
                    persistable: false,
                });
                let mut f = Op::new(OpType::FlashAttn);
                f.inputs = crate::slots![[core.q], [core.k], [core.v]];
                f.outputs = crate::slots![[core.out], [lse]];
                f.role = op.role;
                f.namescope = op.namescope.clone();
                f.attrs.insert("causal".into(), Attr::Bool(true));
                out.push_op(with_mode(f, mode));
            }
            Some(_) => {}
            None if op.ty == OpType::FlashAttn => {
                out.push_op(with_mode(Op::clone(op), mode));
            }
            None => {
                out.push_shared(op.clone());
            }
        }
    }
    out
}

fn with_mode(mut f: Op, mode: AttentionMode) -> Op {
    f.attrs
        .insert("cp_mode".into(), Attr::Str(mode.cp_mode.into()));
    f.attrs
        .insert("zigzag".into(), Attr::Int(mode.zigzag as i64));
    f
}

/// `[b, s, h, d]` → `[b, h, s]`.
fn lse_shape(q: &[usize]) -> Vec<usize> {
    match q {
        [b, s, h, _] => vec![*b, *h, *s],
        _ => q.to_vec(),
    }
}

/// Every matched core, in program order.
fn find_cores(program: &Program) -> Vec<Core> {
    let ops = program.ops();
    let n = program.vars().len();
    let mut writer = vec![usize::MAX; n];
    let mut readers = vec![0usize; n];
    let mut reader = vec![usize::MAX; n];
    for (i, op) in ops.iter().enumerate() {
        for v in op.all_outputs() {
            writer[v.index()] = i;
        }
        for v in op.all_inputs() {
            readers[v.index()] += 1;
            reader[v.index()] = i;
        }
    }
    let g = Graph {
        program,
        writer: &writer,
        readers: &readers,
        reader: &reader,
    };
    ops.iter()
        .enumerate()
        .filter(|(_, op)| op.ty == OpType::FusedSoftmaxMaskUpperTriangle)
        .filter_map(|(i, _)| g.core_at(i))
        .collect()
}

/// Who writes and reads each variable.
struct Graph<'a> {
    program: &'a Program,
    writer: &'a [usize],
    readers: &'a [usize],
    reader: &'a [usize],
}

impl Graph<'_> {
    fn op(&self, i: usize) -> Option<&Op> {
        self.program.ops().get(i).map(|o| &**o)
    }

    /// The op writing `v` if it is of type `ty` and `v` is read only once.
    fn single(&self, v: VarId, ty: OpType) -> Option<(usize, &Op)> {
        let i = *self.writer.get(v.index())?;
        let op = self.op(i)?;
        (op.ty == ty && self.readers[v.index()] == 1).then_some((i, op))
    }

    /// The only reader of `v`, if of type `ty`.
    fn next(&self, v: VarId, ty: OpType) -> Option<(usize, &Op)> {
        if self.readers[v.index()] != 1 {
            return None;
        }
        let i = self.reader[v.index()];
        let op = self.op(i)?;
        (op.ty == ty).then_some((i, op))
    }

    /// A `[0, 2, 1, 3]` transpose writing `v` (read once): its index and input.
    fn swap_into(&self, v: VarId) -> Option<(usize, VarId)> {
        let (i, t) = self.single(v, OpType::Transpose2)?;
        (t.attr_ints("axis") == Some(&SWAP[..])).then_some((i, *t.input("X").first()?))
    }

    /// Grouped-query attention's shared key/value heads: `x` written by a
    /// `repeat_interleave` over the heads (read once) is its input, which `flash_attn`
    /// reads directly (ring attention then passes the fewer heads around the ring).
    fn ungrouped(&self, x: VarId) -> (Option<usize>, VarId) {
        let repeat = self
            .single(x, OpType::RepeatInterleave)
            .filter(|(_, r)| r.attr_int("axis", 0) == 2);
        match repeat.and_then(|(i, r)| Some((i, *r.input("X").first()?))) {
            Some((i, input)) => (Some(i), input),
            None => (None, x),
        }
    }

    fn core_at(&self, m: usize) -> Option<Core> {
        let mask = self.op(m)?;
        let probs = *mask.output("Out").first()?;
        let (s, scale) = self.single(*mask.input("X").first()?, OpType::Scale)?;
        let (a, scores) = self.single(*scale.input("X").first()?, OpType::MatmulV2)?;
        if !scores.attr_bool("trans_y", false) || scores.attr_bool("trans_x", false) {
            return None;
        }
        let (tq, q) = self.swap_into(*scores.input("X").first()?)?;
        let (tk, k) = self.swap_into(*scores.input("Y").first()?)?;
        let (rk, k) = self.ungrouped(k);
        let (b, ctx) = self.next(probs, OpType::MatmulV2)?;
        if ctx.input("X").first() != Some(&probs)
            || ctx.attr_bool("trans_x", false)
            || ctx.attr_bool("trans_y", false)
        {
            return None;
        }
        let (tv, v) = self.swap_into(*ctx.input("Y").first()?)?;
        let (rv, v) = self.ungrouped(v);
        let (t_out, back) = self.next(*ctx.output("Out").first()?, OpType::Transpose2)?;
        if back.attr_ints("axis") != Some(&SWAP[..]) {
            return None;
        }
        let d = *self.program.var(q).ty.shape.get(3)? as f64;
        let want = 1.0 / d.sqrt();
        let got = scale.attr_float("scale", 1.0);
        if (got - want).abs() > 1e-6 * want || scale.attr_float("bias", 0.0) != 0.0 {
            return None;
        }
        let name = &self.program.var(probs).name;
        let mut drop = vec![tq, tk, tv, a, s, m, b, t_out];
        drop.extend(rk.into_iter().chain(rv));
        drop.sort_unstable();
        Some(Core {
            drop,
            q,
            k,
            v,
            out: *back.output("Out").first()?,
            prefix: name.strip_suffix(".probs").unwrap_or(name).to_string(),
        })
    }
}
