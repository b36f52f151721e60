//! Running a pipelined step: every rank runs its stage's job list (`passes::pipeline::schedule`) in
//! order, each job one chunk's forward or backward ops on one micro-batch's variables, with
//! real sends and recvs between stages; gradients are summed over the micro-batches and the
//! optimizer job runs once, after the last. Threads natively, cooperative stepping in the
//! browser, as for any distributed run.

use super::comm::Communicator;
use super::interp::{ExecError, Rank, Status};
use super::tensor::Tensor;
use crate::ir::VarId;
use crate::passes::pipeline::jobs::RankJobs;
use crate::passes::pipeline::schedule::{Job, JobKind};

/// One rank running its jobs.
pub struct PipeRank<'a> {
    pub rank: Rank<'a>,
    jobs: &'a RankJobs,
    list: Vec<Job>,
    at: usize,
    running: bool,
    /// Per micro-batch, the values of `jobs.per_micro_batch` while another micro-batch runs.
    stash: Vec<Vec<Option<Tensor>>>,
    /// Per micro-batch, its data inputs (restored at each step's start).
    inputs: Vec<Vec<(usize, Tensor)>>,
    /// Per accumulated gradient, the sum so far.
    acc: Vec<Option<Tensor>>,
    /// The reported loss variable and each micro-batch's loss.
    loss: VarId,
    losses: Vec<Tensor>,
}

impl<'a> PipeRank<'a> {
    /// `rank` (whose program is `jobs.program`) with its stage's job list and each
    /// micro-batch's inputs: (index into `jobs.per_micro_batch`, value).
    pub fn new(
        rank: Rank<'a>,
        jobs: &'a RankJobs,
        list: Vec<Job>,
        inputs: Vec<Vec<(usize, Tensor)>>,
        loss: VarId,
    ) -> PipeRank<'a> {
        let mut r = PipeRank {
            rank,
            jobs,
            list,
            at: 0,
            running: false,
            stash: Vec::new(),
            inputs,
            acc: vec![None; jobs.accumulated.len()],
            loss,
            losses: Vec::new(),
        };
        r.rewind();
        r
    }

    /// Restarts the step: fresh micro-batch variables holding only their inputs.
    pub fn rewind(&mut self) {
        self.at = 0;
        self.running = false;
        self.stash = self
            .inputs
            .iter()
            .map(|ins| {
                let mut s = vec![None; self.jobs.per_micro_batch.len()];
                for (k, t) in ins {
                    if let Some(slot) = s.get_mut(*k) {
                        *slot = Some(t.clone());
                    }
                }
                s
            })
            .collect();
        self.acc = vec![None; self.jobs.accumulated.len()];
        self.losses.clear();
        for &v in &self.jobs.per_micro_batch {
            if let Some(slot) = self.rank.env.get_mut(v.index()) {
                *slot = None;
            }
        }
    }

    /// How far the rank has come (for deadlock detection).
    pub fn progress(&self) -> [usize; 3] {
        let (pc, ex) = self.rank.progress();
        [self.at, pc, ex]
    }

    /// Micro-batch `m`'s value of `v` once its jobs are done (the step's values of the
    /// micro-batch variables are stashed between jobs): `None` if `v` is not a micro-batch
    /// variable or was not written.
    pub fn stashed(&self, m: usize, v: VarId) -> Option<&Tensor> {
        let k = self.position(v)?;
        self.stash.get(m)?.get(k)?.as_ref()
    }

    /// The job it is at, for reports.
    pub fn current(&self) -> Option<&Job> {
        self.list.get(self.at)
    }

    /// Runs jobs until the step ends or a recv or collective waits.
    pub fn step(&mut self, comm: &dyn Communicator) -> Result<Status, ExecError> {
        while let Some(&job) = self.list.get(self.at) {
            if !self.running {
                if !self.start(&job)? {
                    self.at += 1;
                    continue;
                }
                self.running = true;
            }
            if self.rank.step(comm)? == Status::Blocked {
                return Ok(Status::Blocked);
            }
            self.finish(&job)?;
            self.running = false;
            self.at += 1;
        }
        Ok(Status::Done)
    }

    /// The ops of `job`; `None` for the recv/send jobs (our recvs and sends are ops of the
    /// forward and backward jobs).
    fn ops(&self, job: &Job) -> Option<crate::passes::pipeline::jobs::OpList> {
        let c = job.chunk.unwrap_or(0);
        let pick = |lists: &[crate::passes::pipeline::jobs::OpList]| lists.get(c).cloned();
        match job.kind {
            JobKind::Forward => pick(&self.jobs.forward),
            JobKind::Backward => pick(&self.jobs.backward),
            JobKind::BackwardB => pick(&self.jobs.backward_b),
            JobKind::BackwardW => pick(&self.jobs.backward_w),
            JobKind::Optimizer => Some(self.jobs.optimizer.clone()),
            JobKind::RecvForward | JobKind::SendBackward => None,
        }
    }

    /// Sets up `job`; false when it has nothing to run.
    fn start(&mut self, job: &Job) -> Result<bool, ExecError> {
        let Some(ops) = self.ops(job) else {
            return Ok(false);
        };
        self.rank.order = Some(ops);
        self.rank.pc = 0;
        self.rank.micro_batch = job.micro_batch as u64;
        if job.kind == JobKind::Optimizer {
            let mean = self.mean_loss()?;
            for (k, &v) in self.jobs.accumulated.iter().enumerate() {
                if let Some(slot) = self.rank.env.get_mut(v.index()) {
                    *slot = self.acc.get_mut(k).and_then(Option::take);
                }
            }
            if let (Some(mean), Some(slot)) = (mean, self.rank.env.get_mut(self.loss.index())) {
                *slot = Some(mean);
            }
        } else {
            self.swap(job.micro_batch)?;
        }
        Ok(true)
    }

    fn finish(&mut self, job: &Job) -> Result<(), ExecError> {
        if job.kind == JobKind::Optimizer {
            return Ok(());
        }
        self.swap(job.micro_batch)?;
        let m = job.micro_batch;
        if job.kind == JobKind::Forward {
            if let Some(k) = self.position(self.loss) {
                if let Some(t) = self.stash[m][k].clone() {
                    self.losses.push(t);
                }
            }
            return Ok(());
        }
        for (a, &v) in self.jobs.accumulated.iter().enumerate() {
            let Some(k) = self.position(v) else {
                continue;
            };
            if let Some(g) = self.stash[m][k].take() {
                self.acc[a] = Some(match self.acc[a].take() {
                    None => g,
                    Some(sum) => add(&sum, &g)?,
                });
            }
        }
        Ok(())
    }

    /// Exchanges the rank's micro-batch variables with micro-batch `m`'s stash.
    fn swap(&mut self, m: usize) -> Result<(), ExecError> {
        let stash = self
            .stash
            .get_mut(m)
            .ok_or_else(|| ExecError::Setup(format!("no micro-batch {m}")))?;
        for (k, &v) in self.jobs.per_micro_batch.iter().enumerate() {
            if let (Some(a), Some(b)) = (self.rank.env.get_mut(v.index()), stash.get_mut(k)) {
                std::mem::swap(a, b);
            }
        }
        Ok(())
    }

    fn position(&self, v: VarId) -> Option<usize> {
        self.jobs.per_micro_batch.binary_search(&v).ok()
    }

    /// The mean of the micro-batches' losses (on the last stage; `None` elsewhere).
    fn mean_loss(&self) -> Result<Option<Tensor>, ExecError> {
        let Some(first) = self.losses.first() else {
            return Ok(None);
        };
        let mut sum = vec![0.0; first.numel()];
        for l in &self.losses {
            for (s, x) in sum.iter_mut().zip(l.to_f64()) {
                *s += x;
            }
        }
        let n = self.losses.len() as f64;
        Ok(Some(Tensor::float(
            first.dtype(),
            first.shape.clone(),
            sum.into_iter().map(|s| s / n).collect(),
        )))
    }
}

/// `a + b`, element by element, in their precision.
pub fn add(a: &Tensor, b: &Tensor) -> Result<Tensor, ExecError> {
    if a.shape != b.shape {
        return Err(ExecError::Setup(format!(
            "accumulating gradients of shapes {:?} and {:?}",
            a.shape, b.shape
        )));
    }
    Ok(Tensor::float(
        a.dtype(),
        a.shape.clone(),
        a.to_f64()
            .iter()
            .zip(b.to_f64())
            .map(|(x, y)| x + y)
            .collect(),
    ))
}

impl super::step::Stepper for PipeRank<'_> {
    fn step(&mut self, comm: &dyn Communicator) -> Result<Status, ExecError> {
        PipeRank::step(self, comm)
    }

    fn progress(&self) -> [usize; 3] {
        PipeRank::progress(self)
    }

    fn rank_id(&self) -> u32 {
        self.rank.rank
    }

    fn waiting(&self, comm: &super::comm::CoopComm) -> String {
        let job = self.current().map(|j| j.to_string()).unwrap_or_default();
        format!(
            "rank {} in {job}{}",
            self.rank.rank,
            super::step::waiting_for(&self.rank, comm)
        )
    }
}
