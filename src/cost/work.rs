//! What one op does on one rank: floating-point operations and bytes moved to and from
//! memory, from the local shapes of its rank program. The roofline turns them into time.
//!
//! The counts, per element of the tensor named. A forward or grad op's are declared with the
//! op (`ir::ops`, its `flops`); this table gives their sources:
//!
//! | op | FLOPs | source |
//! |---|---|---|
//! | matmul_v2 | 2·m·n·k (batch included) | a multiply and an add per term (Kaplan et al. 2020, §2.1; the scaling book, "rooflines") |
//! | matmul_v2_grad | 4·m·n·k | two matmuls: dX = dOut·Yᵀ, dY = Xᵀ·dOut |
//! | elementwise add/sub/mul/div/max, relu, square, cast-free copies | 1 per output | one operation |
//! | scale | 2 per output | multiply, add the bias |
//! | gelu | 5 per output | 0.5·x·(1 + erf(x/√2)): divide, erf, add, two multiplies |
//! | silu | 4 per output | x / (1 + exp(−x)): negate-exp, add, divide |
//! | sigmoid | 3 per output | 1 / (1 + exp(−x)): negate-exp, add, divide |
//! | dropout | 2 per output | compare with the mask, multiply |
//! | softmax | 5 per element | max, subtract, exp, sum, divide |
//! | fused_softmax_mask_upper_triangle | 6 per element | the mask's select, then softmax |
//! | layer_norm | 8 per element | mean (add), variance (subtract, square, add), normalise (subtract, multiply), affine (multiply, add) |
//! | reduce_sum/mean, mean | 1 per input element | one add each |
//! | softmax_with_cross_entropy | 5 per logit + 2 per row | softmax, then log and pick |
//! | grads of add/sub | 1 per output gradient element | copy or negate (and sum over broadcast dims) |
//! | grads of mul | 2 per output gradient element | dOut·Y and dOut·X |
//! | grads of div | 5 per output gradient element | dOut/Y and −dOut·X/Y² |
//! | grads of relu, square, scale, dropout, max-like | 1-2 per element | the derivative's factor |
//! | grads of gelu / silu / sigmoid | 10 / 8 / 3 per element | the derivative's formula |
//! | softmax_grad | 4 per element | dot(dOut, Out) per row, subtract, multiply |
//! | layer_norm_grad | 15 per element | the usual two-row-sum formula |
//! | lookup_table_v2_grad | 1 per output gradient element | a scatter-add |
//! | softmax_with_cross_entropy_grad | 2 per logit | softmax − onehot, times dLoss |
//! | sum (accumulation) | n − 1 per element | adds |
//! | sgd / momentum / adam / adamw | 2 / 4 / 12 / 14 per parameter | the update formulas as written in `exec/kernels/optim.rs` |
//! | check_finite_and_unscale | 2 per element | test, multiply |
//! | data movement (reshape, transpose, split, concat, slice, assign, fill) | 0 | |
//! | collectives | 0 | priced by the communication model |
//!
//! Transcendental functions count as one operation. Every op but the matmuls is
//! memory-bound on every device preset, so the exact count of an elementwise op changes
//! nothing: its time is its bytes over the memory bandwidth.
//!
//! Bytes are every input read once and every output written once, at the element size of
//! the compute dtype (integer ids and labels at 8 bytes). An in-place update (an optimizer,
//! a collective's buffer) reads and writes its variable. An embedding reads only the rows
//! it gathers, not the table.

use crate::ir::{
    AmpOp, CollectiveOp, DType, Formula, ForwardOp, MathOp, Numel, Op, OpType, OptimizerOp,
    Program, RankLocalOp, VarId,
};

/// FLOPs and bytes of memory traffic.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Work {
    pub flops: f64,
    pub bytes: f64,
}

impl std::ops::Add for Work {
    type Output = Work;
    fn add(self, o: Work) -> Work {
        Work {
            flops: self.flops + o.flops,
            bytes: self.bytes + o.bytes,
        }
    }
}

/// The element size the cost model prices a float at (the compute dtype's, independent of
/// the executor's f32/f64).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ElementBytes(pub f64);

/// The work of `op` in `program` (a rank program: local shapes).
pub fn op_work(program: &Program, op: &Op, elem: ElementBytes) -> Work {
    let c = Counts { program, op, elem };
    let bytes = c.io_bytes();
    let flops = match op.ty {
        OpType::Forward(f) => declared(&c, f.def().flops.forward),
        OpType::Grad(f) => declared(&c, f.def().flops.grad),
        OpType::FillConstant => 0.0,
        OpType::Math(m) => math_flops(&c, m),
        OpType::Optimizer(o) => optimizer_flops(&c, o),
        OpType::Amp(AmpOp::CheckFiniteAndUnscale) => 2.0 * c.in_numel("X"),
        OpType::Amp(AmpOp::UpdateLossScaling) => 0.0,
        OpType::Collective(
            CollectiveOp::AllReduce
            | CollectiveOp::AllGather
            | CollectiveOp::ReduceScatter
            | CollectiveOp::AllToAll
            | CollectiveOp::Send
            | CollectiveOp::Recv
            | CollectiveOp::Ppermute,
        ) => return Work::default(),
        OpType::RankLocal(RankLocalOp::RingAttnBlock) => 4.0 * c.attention_terms(),
        OpType::RankLocal(RankLocalOp::RingAttnBlockGrad) => 10.0 * c.attention_terms(),
        OpType::RankLocal(
            RankLocalOp::Slice
            | RankLocalOp::Pad
            | RankLocalOp::FlattenPad
            | RankLocalOp::UnpadReshape
            | RankLocalOp::CoalesceTensor
            | RankLocalOp::UncoalesceTensor,
        ) => 0.0,
        OpType::RankLocal(RankLocalOp::CEmbedding) => c.out_numel("Out"),
        OpType::RankLocal(RankLocalOp::CEmbeddingGrad) => c.in_numel("Out@GRAD"),
        OpType::RankLocal(RankLocalOp::CSoftmaxWithCrossEntropy) => {
            5.0 * c.in_numel("Logits") + 2.0 * c.out_numel("Loss")
        }
        OpType::RankLocal(RankLocalOp::CSoftmaxWithCrossEntropyGrad) => 2.0 * c.in_numel("Softmax"),
    };
    Work { flops, bytes }
}

/// An op with its program: element counts of its slots.
struct Counts<'a> {
    program: &'a Program,
    op: &'a Op,
    elem: ElementBytes,
}

impl Counts<'_> {
    fn numel(&self, v: VarId) -> f64 {
        self.program.var(v).ty.numel() as f64
    }

    fn bytes(&self, v: VarId) -> f64 {
        let t = &self.program.var(v).ty;
        let size = match t.dtype {
            DType::I64 => 8.0,
            DType::F32 | DType::F64 => self.elem.0,
        };
        t.numel() as f64 * size
    }

    fn in_numel(&self, slot: &str) -> f64 {
        self.op.input(slot).iter().map(|&v| self.numel(v)).sum()
    }

    fn out_numel(&self, slot: &str) -> f64 {
        self.op.output(slot).iter().map(|&v| self.numel(v)).sum()
    }

    /// Every input read once and every output written once; an embedding reads only the
    /// rows it gathers (as many elements as it writes).
    fn io_bytes(&self) -> f64 {
        let gathers = matches!(
            self.op.ty,
            OpType::Forward(ForwardOp::LookupTableV2) | OpType::RankLocal(RankLocalOp::CEmbedding)
        );
        let reads: f64 = self
            .op
            .inputs
            .iter()
            .enumerate()
            .flat_map(|(k, s)| s.iter().map(move |&v| (k, v)))
            .map(|(k, v)| {
                let is_table = gathers
                    && self
                        .op
                        .ty
                        .input_slots()
                        .get(k)
                        .is_some_and(|s| s.name == "W");
                if is_table {
                    self.op.output("Out").iter().map(|&o| self.bytes(o)).sum()
                } else {
                    self.bytes(v)
                }
            })
            .sum();
        let writes: f64 = self.op.all_outputs().map(|v| self.bytes(v)).sum();
        reads + writes
    }

    /// m·n·k of a matmul: the output's elements times the contracted length.
    fn matmul_terms(&self) -> f64 {
        let x = self.op.input("X").first().map(|&v| &self.program.var(v).ty);
        let k = x.map_or(0, |t| {
            let trans = self.op.attr_bool("trans_x", false);
            let r = t.rank();
            match (r, trans) {
                (0, _) => 1,
                (1, _) => t.shape[0],
                (_, false) => t.shape[r - 1],
                (_, true) => t.shape[r - 2],
            }
        });
        let out = if self.op.ty == OpType::MatmulV2 {
            self.out_numel("Out")
        } else {
            self.in_numel("Out@GRAD")
        };
        out * k as f64
    }

    /// b·h·d times the (query, key) pairs the mask keeps, of attention or one block of ring
    /// attention (its offsets into the stored sequence in `q_offset` and `kv_offset`).
    pub(super) fn attention_terms(&self) -> f64 {
        let shape = |slot: &str| {
            self.op
                .input(slot)
                .first()
                .map(|&v| self.program.var(v).ty.shape.to_vec())
                .unwrap_or_default()
        };
        let (q, k) = (shape("Q"), shape("K"));
        let (&[b, sq, h, d], &[_, sk, _, _]) = (&q[..], &k[..]) else {
            return 0.0;
        };
        let pairs = if self.op.attr_bool("causal", true) {
            use crate::ir::ops::attention::{causal_pairs, original_ranges};
            let at = |name: &str| self.op.attr_int(name, 0).max(0) as usize;
            let seq = (self.op.attr_int("seq", sq as i64).max(0) as usize).max(sq);
            let z = at("zigzag");
            causal_pairs(
                &original_ranges(at("q_offset"), sq, seq, z),
                &original_ranges(at("kv_offset"), sk, seq, z),
            ) as f64
        } else {
            (sq * sk) as f64
        };
        (b * h * d) as f64 * pairs
    }

    /// S·k·H of a `moe_combine`: the output's elements times the choices per token.
    fn combine_terms(&self) -> f64 {
        let k = self
            .op
            .input("Weights")
            .first()
            .and_then(|&v| self.program.var(v).ty.shape.get(1).copied())
            .unwrap_or(0);
        let out = if self.op.ty == OpType::MoeCombine {
            self.out_numel("Out")
        } else {
            self.in_numel("Out@GRAD")
        };
        out * k as f64
    }
}

/// A declared work formula (`ir::ops`) evaluated on the op's sizes.
fn declared(c: &Counts, work: Formula) -> f64 {
    work.iter()
        .map(|&(k, n)| {
            k * match n {
                Numel::In(slot) => c.in_numel(slot),
                Numel::Out(slot) => c.out_numel(slot),
                Numel::MatmulTerms => c.matmul_terms(),
                Numel::CombineTerms => c.combine_terms(),
                Numel::AttentionTerms => c.attention_terms(),
            }
        })
        .sum()
}

fn math_flops(c: &Counts, m: MathOp) -> f64 {
    match m {
        MathOp::Sum => {
            let n = c.op.input("X").len() as f64;
            (n - 1.0).max(0.0) * c.out_numel("Out")
        }
        MathOp::Sqrt | MathOp::ElementwiseMax => c.out_numel("Out"),
        MathOp::SquaredL2Norm => 2.0 * c.in_numel("X"),
    }
}

fn optimizer_flops(c: &Counts, o: OptimizerOp) -> f64 {
    let p = c.in_numel("Param");
    match o {
        OptimizerOp::Sgd => 2.0 * p,
        OptimizerOp::Momentum => {
            if c.op.attr_bool("use_nesterov", false) {
                6.0 * p
            } else {
                4.0 * p
            }
        }
        OptimizerOp::Adam => 12.0 * p,
        OptimizerOp::AdamW => 14.0 * p,
    }
}
