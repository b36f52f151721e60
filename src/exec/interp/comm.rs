//! Ops that exchange values with other ranks: the collectives, and the vocab-parallel
//! cross-entropy with its three all-reduces. Each exchange may leave the op waiting
//! (`Progress::Blocked`); the rank retries the op and resumes after the exchanges it
//! completed.

use super::{Progress, Rank};
use crate::dist::ReduceType;
use crate::exec::comm::Communicator;
use crate::exec::kernels::layout::{concat, slice_axis};
use crate::exec::kernels::vocab_ce;
use crate::exec::op_error::OpError;
use crate::exec::tensor::Tensor;
use crate::ir::infer::axis;
use crate::ir::Op;

/// Which collective an op is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Collective {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
}

impl Rank<'_> {
    pub(super) fn collective(
        &mut self,
        op: &Op,
        comm: &dyn Communicator,
        kind: Collective,
    ) -> Result<Progress, OpError> {
        let t = self.slot(op, "X")?.clone();
        let Some((all, me)) = self.exchange(op, t, comm)? else {
            return Ok(Progress::Blocked);
        };
        let out = collective_result(op, kind, &all, me)?;
        self.set(op, "Out", out);
        Ok(Progress::Next)
    }

    /// `ppermute`: each tensor of X exchanged over the group, Out the one of the member
    /// `shift` places back on the ring.
    pub(super) fn ppermute(
        &mut self,
        op: &Op,
        comm: &dyn Communicator,
    ) -> Result<Progress, OpError> {
        let xs = op.input("X");
        let mut outs = Vec::with_capacity(xs.len());
        for &x in xs {
            let t = self.get(x)?.clone();
            let Some((all, me)) = self.exchange(op, t, comm)? else {
                return Ok(Progress::Blocked);
            };
            let n = all.len() as i64;
            let from = (me as i64 - op.attr_int("shift", 1)).rem_euclid(n.max(1)) as usize;
            outs.push(all.get(from).cloned().ok_or(OpError::MemberNotInGroup)?);
        }
        for (&v, t) in op.output("Out").iter().zip(outs) {
            self.set_var(v, t);
        }
        Ok(Progress::Next)
    }

    /// `c_softmax_with_cross_entropy`: all_reduce MAX of the row max, SUM of the target
    /// logit, SUM of the exp-sums (`kernels::vocab_ce`).
    pub(super) fn vocab_ce(
        &mut self,
        op: &Op,
        comm: &dyn Communicator,
    ) -> Result<Progress, OpError> {
        let logits = self.slot(op, "Logits")?.clone();
        let label = self.slot(op, "Label")?.clone();
        let start = op.attr_int("start_index", 0);
        // Where the classes split unevenly (10 on 4 ranks is 3, 3, 3, 1; co-sharded, 3, 2,
        // 3, 2) a rank cannot tell their count from its own columns: a label past its
        // columns is another rank's, and one past every rank's is the serial program's
        // error (the serial step runs first). Negative labels are refused here.
        let classes = usize::MAX;
        let Some((all, _)) = self.exchange(op, vocab_ce::row_max(&logits), comm)? else {
            return Ok(Progress::Blocked);
        };
        let max = all.reduced(ReduceType::Max);
        let target = vocab_ce::target_logit(&logits, &label, &max, start, classes)?;
        let Some((all, _)) = self.exchange(op, target, comm)? else {
            return Ok(Progress::Blocked);
        };
        let target = all.reduced(ReduceType::Sum);
        let (exps, sums) = vocab_ce::exp_sums(&logits, &max);
        let Some((all, _)) = self.exchange(op, sums, comm)? else {
            return Ok(Progress::Blocked);
        };
        let sum = all.reduced(ReduceType::Sum);
        let (sm, loss) = vocab_ce::finish(&logits, &exps, &sum, &target);
        self.set(op, "Softmax", sm);
        self.set(op, "Loss", loss);
        Ok(Progress::Next)
    }
}

/// Combines `all` contributions elementwise with `reduce`, in f64, rounded once to the
/// first contribution's precision. It works through a block at a time on the stack, so a
/// reduction allocates only its result (a whole f64 accumulator made the data-parallel
/// gradient all-reduce a sixth of a rank's step, in page faults).
pub fn reduce_all(all: &[Tensor], reduce: ReduceType) -> Tensor {
    const BLOCK: usize = 1024;
    let Some(first) = all.first() else {
        return Tensor::zeros(crate::ir::DType::F32, vec![0]);
    };
    // Contributions of unequal sizes are refused before this (`collective_result`); reduce
    // what they share rather than read past one.
    let n = all.iter().map(Tensor::numel).min().unwrap_or(0);
    let mut data = crate::exec::tensor::Data::with_capacity(first.dtype(), n);
    let mut block = [0.0f64; BLOCK];
    for start in (0..n).step_by(BLOCK) {
        let acc = &mut block[..BLOCK.min(n - start)];
        first.fold_into(start, acc, |_, b| b);
        for t in &all[1..] {
            match reduce {
                ReduceType::Sum | ReduceType::Avg => t.fold_into(start, acc, |a, b| a + b),
                ReduceType::Max => t.fold_into(start, acc, f64::max),
                ReduceType::Min => t.fold_into(start, acc, f64::min),
                ReduceType::Prod => t.fold_into(start, acc, |a, b| a * b),
            }
        }
        if reduce == ReduceType::Avg {
            let members = all.len() as f64;
            acc.iter_mut().for_each(|a| *a /= members);
        }
        data.extend_f64(acc);
    }
    let shape = if n == first.numel() {
        first.shape.clone()
    } else {
        vec![n]
    };
    Tensor { shape, data }
}

/// A collective's result on member `me` from every member's contribution.
fn collective_result(
    op: &Op,
    kind: Collective,
    all: &crate::exec::comm::Shared,
    me: usize,
) -> Result<Tensor, OpError> {
    let reduce = || {
        ReduceType::from_name(op.attr_str("reduce_type").unwrap_or("SUM"))
            .ok_or(OpError::BadAttr("reduce_type"))
    };
    let n = all.len();
    let mine = all.get(me).ok_or(OpError::MemberNotInGroup)?;
    let rank_of = mine.shape.len();
    // Members must contribute alike (a rank that skipped or changed an op may not).
    let same = |t: &Tensor| match kind {
        Collective::AllGather => t.shape.len() == rank_of,
        Collective::AllReduce | Collective::ReduceScatter | Collective::AllToAll => {
            t.shape == mine.shape
        }
    };
    if let Some(bad) = all.iter().find(|t| !same(t)) {
        return Err(OpError::Contributions {
            mine: mine.shape.clone(),
            other: bad.shape.clone(),
        });
    }
    Ok(match kind {
        Collective::AllReduce => all.reduced(reduce()?),
        Collective::AllGather => {
            let a = axis(op.attr_int("axis", 0), rank_of, "axis").map_err(OpError::Attr)?;
            concat(&all.iter().collect::<Vec<_>>(), a)?
        }
        Collective::ReduceScatter => {
            let a = axis(op.attr_int("axis", 0), rank_of, "axis").map_err(OpError::Attr)?;
            let whole = all.reduced(reduce()?);
            let piece = whole.shape[a] / n;
            slice_axis(&whole, a, me * piece, (me + 1) * piece)
        }
        Collective::AllToAll => {
            let s =
                axis(op.attr_int("split_axis", 0), rank_of, "split_axis").map_err(OpError::Attr)?;
            let c = axis(op.attr_int("concat_axis", 0), rank_of, "concat_axis")
                .map_err(OpError::Attr)?;
            let piece = all[me].shape[s] / n;
            let mine: Vec<Tensor> = all
                .iter()
                .map(|t| slice_axis(t, s, me * piece, (me + 1) * piece))
                .collect();
            concat(&mine.iter().collect::<Vec<_>>(), c)?
        }
    })
}

/// Why the members of `group` did not contribute alike, if they did not. Members run a
/// group's collectives in program order, so a rank that skipped (or added) one meets its
/// next collective where the others meet this one: its contribution is the odd one out,
/// and every later collective of the group is mismatched too. The odd rank is the one whose
/// shape differs from what the others agree on.
pub(super) fn out_of_step(group: &[u32], all: &[Tensor]) -> Option<OpError> {
    let first = all.first()?;
    if all.iter().all(|t| t.shape == first.shape) {
        return None;
    }
    let agreeing = |t: &Tensor| all.iter().filter(|u| u.shape == t.shape).count();
    let (common, _) = all
        .iter()
        .enumerate()
        .max_by_key(|(i, t)| (agreeing(t), std::cmp::Reverse(*i)))?;
    let shape = &all[common].shape;
    let odd: Vec<u32> = group
        .iter()
        .zip(all)
        .filter(|(_, t)| t.shape != *shape)
        .map(|(&r, _)| r)
        .collect();
    let first_odd = *odd.first()?;
    let odd_shape = &all.get(group.iter().position(|r| *r == first_odd)?)?.shape;
    let common_rank = *group.get(common)?;
    let who = if agreeing(&all[common]) * 2 > all.len() {
        format!(
            "rank{} {} skipped or added a collective of this group",
            if odd.len() > 1 { "s" } else { "" },
            odd.iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )
    } else {
        "a member skipped or added a collective of this group".to_string()
    };
    Some(OpError::OutOfStep {
        group: group.to_vec(),
        odd: first_odd,
        odd_shape: odd_shape.clone(),
        common: common_rank,
        shape: shape.clone(),
        who,
    })
}
