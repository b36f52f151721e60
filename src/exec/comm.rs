//! Communicators. Every collective is built on one primitive, `exchange`: each member of
//! a group contributes a tensor and receives every member's contribution, in group order;
//! the reduction, gather, scatter or transpose is then computed locally. Natively the
//! ranks are OS threads that block (with a timeout) until the group is complete; in the
//! browser they are stepped cooperatively and an incomplete exchange says "pending".

use super::tensor::Tensor;
use std::collections::HashMap;
#[cfg(not(target_arch = "wasm32"))]
use std::sync::{Condvar, Mutex};
#[cfg(not(target_arch = "wasm32"))]
use std::time::Duration;

/// Identifies one exchange: the group and how many exchanges this group had before (for a
/// pipeline send/recv: [`P2P_TAG`] with the micro-batch, direction and count).
pub type ExchangeKey = (Vec<u32>, u64);

/// Marks a send/recv key, so it never meets a collective's.
pub const P2P_TAG: u64 = 1 << 63;

/// Every member's contribution to an exchange, in group order: one copy, shared by every
/// member (a copy per member made an exchange over N ranks cost N² tensors: 1,024 ranks of
/// data parallelism peaked at 5.9 GB), with the reductions computed from it, once for the
/// group (each member reducing all N contributions itself was N² work, three quarters of a
/// 512-rank run's time).
pub type Contributions = std::sync::Arc<Shared>;

/// What an exchange's members share: the contributions and their reductions so far.
pub struct Shared {
    tensors: Vec<Tensor>,
    /// Each reduction so far, with how many times it was handed out.
    reduced: std::sync::Mutex<Vec<(crate::dist::ReduceType, Tensor, usize)>>,
}

impl Shared {
    /// Contributions in group order, nothing reduced yet.
    pub fn new(tensors: Vec<Tensor>) -> Contributions {
        std::sync::Arc::new(Shared {
            tensors,
            reduced: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// The contributions combined elementwise with `reduce`, computed by the first member
    /// that asks and shared with the others; the last member takes the shared copy itself.
    /// (A member that asks again, replaying an op, recomputes it: the same values.)
    pub fn reduced(&self, reduce: crate::dist::ReduceType) -> Tensor {
        let members = self.tensors.len();
        let Ok(mut done) = self.reduced.lock() else {
            return super::interp::reduce_all(&self.tensors, reduce);
        };
        let Some(i) = done.iter().position(|(r, _, _)| *r == reduce) else {
            let t = super::interp::reduce_all(&self.tensors, reduce);
            if members > 1 {
                done.push((reduce, t.clone(), 1));
            }
            return t;
        };
        done[i].2 += 1;
        if done[i].2 >= members {
            return done.swap_remove(i).1;
        }
        done[i].1.clone()
    }
}

impl std::ops::Deref for Shared {
    type Target = [Tensor];
    fn deref(&self) -> &[Tensor] {
        &self.tensors
    }
}

/// What an exchange returned.
pub enum Exchange {
    /// Every member's contribution, in group order.
    Ready(Contributions),
    /// Not every member has arrived yet (cooperative mode only).
    Pending,
}

/// Why an exchange failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CommError {
    /// Some members never arrived: a deadlock, or a rank that failed before the exchange.
    #[error("timed out after {after:?} waiting for ranks {missing:?}")]
    Timeout {
        after: std::time::Duration,
        missing: Vec<u32>,
    },
    /// A rank panicked while it held the mailbox.
    #[error("the mailbox is poisoned: a rank panicked while holding it")]
    Poisoned,
    /// Another rank failed, so this exchange can never complete.
    #[error("another rank failed")]
    Aborted,
}

/// A way for ranks to exchange tensors.
pub trait Communicator: Sync {
    /// Contributes `t` (once; repeated calls for the same key only poll) and returns the
    /// group's contributions when complete. Errors name the missing ranks on timeout.
    fn exchange(&self, rank: u32, key: &ExchangeKey, t: Tensor) -> Result<Exchange, CommError>;

    /// A pipeline send: leaves `t` for the receiver of `key` and returns at once (buffered,
    /// like `isend`: a schedule's sends never wait for their recvs, so 1F1B's crossing sends
    /// cannot deadlock).
    fn post(&self, key: &ExchangeKey, t: Tensor) -> Result<(), CommError>;

    /// A pipeline recv: the tensor posted under `key`, waiting for it (threads) or pending
    /// (cooperative). `key.0` is `[src, dst]`.
    fn collect(&self, key: &ExchangeKey) -> Result<Exchange, CommError>;

    /// A rank failed: the exchanges still waiting, and every later one, give up at once
    /// instead of waiting for it until their timeout. Stepping in turn needs nothing (a
    /// failure there stops every rank).
    fn abort(&self) {}
}

#[derive(Default)]
struct Slot {
    contributions: HashMap<u32, Tensor>,
    /// The contributions in group order, made once when the last member arrives.
    all: Option<Contributions>,
    taken: usize,
}

/// The shared bookkeeping of both communicators.
#[derive(Default)]
pub struct Mailbox {
    slots: HashMap<ExchangeKey, Slot>,
    /// Posted sends not yet received.
    posted: HashMap<ExchangeKey, Tensor>,
}

impl Mailbox {
    fn post(&mut self, key: &ExchangeKey, t: Tensor) {
        self.posted.entry(key.clone()).or_insert(t);
    }

    fn collect(&mut self, key: &ExchangeKey) -> Option<Tensor> {
        self.posted.remove(key)
    }

    fn offer(&mut self, rank: u32, key: &ExchangeKey, t: Tensor) {
        self.slots
            .entry(key.clone())
            .or_default()
            .contributions
            .entry(rank)
            .or_insert(t);
    }

    fn missing(&self, key: &ExchangeKey) -> Vec<u32> {
        if key.1 & P2P_TAG != 0 {
            return match self.posted.contains_key(key) {
                true => Vec::new(),
                false => key.0.first().copied().into_iter().collect(),
            };
        }
        let slot = self.slots.get(key);
        if slot.is_some_and(|s| s.all.is_some()) {
            return Vec::new();
        }
        let have = slot.map(|s| &s.contributions);
        key.0
            .iter()
            .copied()
            .filter(|r| !have.is_some_and(|h| h.contains_key(r)))
            .collect()
    }

    fn take(&mut self, key: &ExchangeKey) -> Option<Contributions> {
        let slot = self.slots.get_mut(key)?;
        if slot.all.is_none() {
            if slot.contributions.len() < key.0.len() {
                return None;
            }
            let all: Vec<Tensor> = key
                .0
                .iter()
                .filter_map(|r| slot.contributions.remove(r))
                .collect();
            slot.all = Some(Shared::new(all));
        }
        let all = slot.all.clone()?;
        slot.taken += 1;
        if slot.taken == key.0.len() {
            self.slots.remove(key);
        }
        Some(all)
    }
}

/// Threads that block until their group is complete.
#[cfg(not(target_arch = "wasm32"))]
pub struct ThreadComm {
    mailbox: Mutex<Mailbox>,
    arrived: Condvar,
    timeout: Duration,
    aborted: std::sync::atomic::AtomicBool,
}

#[cfg(not(target_arch = "wasm32"))]
impl ThreadComm {
    /// A communicator whose exchanges give up after `timeout`.
    pub fn new(timeout: Duration) -> ThreadComm {
        ThreadComm {
            mailbox: Mutex::new(Mailbox::default()),
            arrived: Condvar::new(),
            timeout,
            aborted: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Waits (up to the timeout) until `ready` takes what `key` waits for from the mailbox
    /// `mb`; a timeout names the ranks still missing.
    fn wait_for(
        &self,
        mut mb: std::sync::MutexGuard<'_, Mailbox>,
        key: &ExchangeKey,
        mut ready: impl FnMut(&mut Mailbox) -> Option<Contributions>,
    ) -> Result<Exchange, CommError> {
        let deadline = std::time::Instant::now() + self.timeout;
        loop {
            if self.aborted.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(CommError::Aborted);
            }
            if let Some(all) = ready(&mut mb) {
                self.arrived.notify_all();
                return Ok(Exchange::Ready(all));
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                return Err(CommError::Timeout {
                    after: self.timeout,
                    missing: mb.missing(key),
                });
            }
            mb = self
                .arrived
                .wait_timeout(mb, deadline - now)
                .map_err(|_| CommError::Poisoned)?
                .0;
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl Communicator for ThreadComm {
    fn exchange(&self, rank: u32, key: &ExchangeKey, t: Tensor) -> Result<Exchange, CommError> {
        let mut mb = self.mailbox.lock().map_err(|_| CommError::Poisoned)?;
        mb.offer(rank, key, t);
        self.arrived.notify_all();
        self.wait_for(mb, key, |m| m.take(key))
    }

    fn post(&self, key: &ExchangeKey, t: Tensor) -> Result<(), CommError> {
        let mut mb = self.mailbox.lock().map_err(|_| CommError::Poisoned)?;
        mb.post(key, t);
        self.arrived.notify_all();
        Ok(())
    }

    fn collect(&self, key: &ExchangeKey) -> Result<Exchange, CommError> {
        let mb = self.mailbox.lock().map_err(|_| CommError::Poisoned)?;
        self.wait_for(mb, key, |m| m.collect(key).map(|t| Shared::new(vec![t])))
    }

    fn abort(&self) {
        self.aborted
            .store(true, std::sync::atomic::Ordering::SeqCst);
        // Under the lock, so no waiter checks the flag and then sleeps past the wake-up.
        let _held = self.mailbox.lock();
        self.arrived.notify_all();
    }
}

/// Ranks stepped in turn on one thread (the browser): an incomplete exchange is pending.
#[derive(Default)]
pub struct CoopComm {
    mailbox: std::sync::Mutex<Mailbox>,
}

impl Communicator for CoopComm {
    fn exchange(&self, rank: u32, key: &ExchangeKey, t: Tensor) -> Result<Exchange, CommError> {
        let mut mb = self.mailbox.lock().map_err(|_| CommError::Poisoned)?;
        mb.offer(rank, key, t);
        Ok(match mb.take(key) {
            Some(all) => Exchange::Ready(all),
            None => Exchange::Pending,
        })
    }

    fn post(&self, key: &ExchangeKey, t: Tensor) -> Result<(), CommError> {
        let mut mb = self.mailbox.lock().map_err(|_| CommError::Poisoned)?;
        mb.post(key, t);
        Ok(())
    }

    fn collect(&self, key: &ExchangeKey) -> Result<Exchange, CommError> {
        let mut mb = self.mailbox.lock().map_err(|_| CommError::Poisoned)?;
        Ok(match mb.collect(key) {
            Some(t) => Exchange::Ready(Shared::new(vec![t])),
            None => Exchange::Pending,
        })
    }
}

/// Which members are still missing from an exchange (for deadlock reports).
pub fn missing(comm: &CoopComm, key: &ExchangeKey) -> Vec<u32> {
    comm.mailbox
        .lock()
        .map(|m| m.missing(key))
        .unwrap_or_default()
}
