//! Stepping every rank of a run to the end of its step: on OS threads natively (blocking
//! exchanges), or in turn on one thread (the browser), where a round in which nobody moves
//! is a deadlock reported with where each rank waits. One loop for plain rank programs and
//! for ranks running pipeline jobs.

#[cfg(not(target_arch = "wasm32"))]
use super::comm::Communicator;
use super::comm::CoopComm;
use super::interp::{ExecError, Rank, Status};

/// What the loops drive.
pub trait Stepper: Send {
    /// Runs until done or waiting on another rank.
    fn step(&mut self, comm: &dyn super::comm::Communicator) -> Result<Status, ExecError>;
    /// How far it has come (unchanged over a round: it did not move).
    fn progress(&self) -> [usize; 3];
    /// Where it waits, for a deadlock report.
    fn waiting(&self, comm: &CoopComm) -> String;
    /// The rank it runs.
    fn rank_id(&self) -> u32;
}

/// Where a rank's pending exchange waits, as ` waiting for [ranks]`.
pub fn waiting_for(rank: &Rank, comm: &CoopComm) -> String {
    rank.pending_key()
        .map(|k| format!(" waiting for {:?}", super::comm::missing(comm, k)))
        .unwrap_or_default()
}

impl Stepper for Rank<'_> {
    fn step(&mut self, comm: &dyn super::comm::Communicator) -> Result<Status, ExecError> {
        Rank::step(self, comm)
    }

    fn progress(&self) -> [usize; 3] {
        let (pc, exchanges) = Rank::progress(self);
        [pc, exchanges, 0]
    }

    fn rank_id(&self) -> u32 {
        self.rank
    }

    fn waiting(&self, comm: &CoopComm) -> String {
        let index = self.op_index(self.pc);
        let ty = self
            .program
            .ops()
            .get(index)
            .map(|o| o.ty.to_string())
            .unwrap_or_default();
        format!(
            "rank {} at op{index} ({ty}){}",
            self.rank,
            waiting_for(self, comm)
        )
    }
}

/// Steps every rank on its own thread.
#[cfg(not(target_arch = "wasm32"))]
pub fn step_threads<S: Stepper>(
    ranks: &mut [S],
    comm: &(dyn Communicator + Sync),
) -> Result<(), ExecError> {
    let results: Vec<Result<Status, ExecError>> = std::thread::scope(|s| {
        let handles: Vec<_> = ranks
            .iter_mut()
            .map(|r| {
                s.spawn(move || {
                    let status = r.step(comm);
                    if status.is_err() {
                        // The others would wait for this rank until their timeout.
                        comm.abort();
                    }
                    status
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    // Report the first real failure (a timeout or an abort elsewhere is its consequence).
    let mut errors: Vec<ExecError> = results.into_iter().filter_map(Result::err).collect();
    crate::sort::sort_by_key(&mut errors, |e| {
        let text = e.to_string();
        text.contains("timed out") || text.contains("another rank failed")
    });
    match errors.into_iter().next() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Steps ranks in turn until all are done; a round in which nobody moves is a deadlock.
pub fn step_coop<S: Stepper>(ranks: &mut [S], comm: &CoopComm) -> Result<(), ExecError> {
    let mut done = vec![false; ranks.len()];
    loop {
        let mut moved = false;
        for (i, r) in ranks.iter_mut().enumerate() {
            if done[i] {
                continue;
            }
            let before = r.progress();
            match r.step(comm)? {
                Status::Done => {
                    done[i] = true;
                    moved = true;
                }
                Status::Blocked => moved |= r.progress() != before,
            }
        }
        if done.iter().all(|&d| d) {
            return Ok(());
        }
        if !moved {
            let stuck: Vec<String> = ranks
                .iter()
                .zip(&done)
                .filter(|(_, d)| !**d)
                .map(|(r, _)| r.waiting(comm))
                .collect();
            // A rank that finished while others wait on it skipped a collective they run
            // (or they added one): it is the one to name.
            let finished: Vec<u32> = ranks
                .iter()
                .zip(&done)
                .filter(|(_, d)| **d)
                .map(|(r, _)| r.rank_id())
                .collect();
            let why = if finished.is_empty() {
                String::new()
            } else {
                format!(
                    "; rank{} {finished:?} finished the step without meeting these \
                     collectives: {} skipped a collective the others run (or they added one)",
                    if finished.len() > 1 { "s" } else { "" },
                    if finished.len() > 1 { "they" } else { "it" }
                )
            };
            return Err(ExecError::Setup(format!(
                "deadlock: {}{why}",
                stuck.join("; ")
            )));
        }
    }
}
