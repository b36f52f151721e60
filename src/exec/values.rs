//! Real values around a collective, for the playground's collective view: what every rank
//! holds just before and just after one op of its program, in the first step.

use super::comm::CoopComm;
use super::interp::{ExecError, Rank};
use super::run::{initial_values, placements, rank_envs, RunOptions};
use super::tensor::Tensor;
use crate::passes::driver::Passes;

/// What every rank holds just before and just after op `ops[k]` of its program, in the
/// first step from the initial values: for each `(rank, op)` the op's first input before it
/// runs and its first output after. For showing one collective with real values; plans
/// with pipeline stages are refused (their ranks do not share one op order).
pub fn values_around(
    p: &Passes,
    ops: &[(u32, usize)],
    opts: &RunOptions,
) -> Result<Vec<(u32, Tensor, Tensor)>, ExecError> {
    if p.is_pipelined() {
        return Err(ExecError::Setup(
            "in a plan with pipeline stages or micro-batches, values are shown for the sends and recvs between stages only".into(),
        ));
    }
    if !p.is_fully_partitioned() {
        return Err(ExecError::Setup("every rank must be partitioned".into()));
    }
    let globals = initial_values(p, opts)?;
    let envs = rank_envs(p, &globals)?;
    let places = placements(p);
    // Each rank's program cut before (then after) its op; ranks not listed keep their own
    // op index of the first listed rank (they share the template).
    let default_op = ops.first().map_or(0, |&(_, i)| i);
    let op_of = |rank: u32| {
        ops.iter()
            .find(|(r, _)| *r == rank)
            .map_or(default_op, |&(_, i)| i)
    };
    let run_to = |extra: usize| -> Result<Vec<Vec<Option<Tensor>>>, ExecError> {
        let cut: Vec<crate::ir::Program> = p
            .partitioned
            .ranks
            .iter()
            .map(|r| {
                r.program
                    .prefix(r.program.vars().len(), op_of(r.rank) + extra)
            })
            .collect();
        let mut ranks: Vec<Rank> = p
            .partitioned
            .ranks
            .iter()
            .zip(&cut)
            .zip(envs.iter().cloned())
            .zip(&places)
            .map(|(((r, prog), env), pl)| Rank::new(r.rank, prog, env, Some(pl)))
            .collect();
        super::step::step_coop(&mut ranks, &CoopComm::default())?;
        Ok(ranks.into_iter().map(|r| r.env).collect())
    };
    let (before, after) = (run_to(0)?, run_to(1)?);
    let mut out = Vec::new();
    for &(rank, i) in ops {
        let Some(k) = p.partitioned.ranks.iter().position(|r| r.rank == rank) else {
            continue;
        };
        let op = p.partitioned.ranks[k]
            .program
            .ops()
            .get(i)
            .ok_or_else(|| ExecError::Setup(format!("rank {rank} has no op {i}")))?;
        let (Some(x), Some(y)) = (op.all_inputs().next(), op.all_outputs().next()) else {
            continue;
        };
        let get =
            |env: &[Option<Tensor>], v: crate::ir::VarId| env.get(v.index()).cloned().flatten();
        if let (Some(a), Some(b)) = (get(&before[k], x), get(&after[k], y)) {
            out.push((rank, a, b));
        }
    }
    Ok(out)
}
