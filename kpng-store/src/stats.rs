//! The writer's counters, shared with its readers.

use std::sync::atomic::{AtomicU64, Ordering};

/// The writer's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Sets and deletes written, no-ops included.
    pub writes: u64,
    /// Writes that changed nothing: a set of an equal value, or a delete of
    /// an absent key.
    pub noop_writes: u64,
    /// Committed transactions, with or without changes.
    pub transactions: u64,
    /// Revisions made (transactions that changed something).
    pub revisions: u64,
}

#[derive(Debug, Default)]
pub(crate) struct SharedStats {
    pub(crate) writes: AtomicU64,
    pub(crate) noop_writes: AtomicU64,
    pub(crate) transactions: AtomicU64,
    pub(crate) revisions: AtomicU64,
}

impl SharedStats {
    pub(crate) fn load(&self) -> Stats {
        Stats {
            writes: self.writes.load(Ordering::Relaxed),
            noop_writes: self.noop_writes.load(Ordering::Relaxed),
            transactions: self.transactions.load(Ordering::Relaxed),
            revisions: self.revisions.load(Ordering::Relaxed),
        }
    }
}
