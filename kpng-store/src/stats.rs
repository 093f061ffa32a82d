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
    /// Per revision, the earliest time a change in it was triggered (an
    /// EndpointSlice's `last-change-trigger-time`), until a reader takes
    /// it; the oldest go beyond [`MAX_TRIGGERS`].
    pub(crate) triggers: std::sync::Mutex<std::collections::BTreeMap<u64, std::time::SystemTime>>,
}

/// How many revisions' trigger times are kept for readers.
pub(crate) const MAX_TRIGGERS: usize = 4096;

impl SharedStats {
    /// Records that `revision` holds a change triggered at `at`.
    pub(crate) fn triggered(&self, revision: u64, at: std::time::SystemTime) {
        if let Ok(mut triggers) = self.triggers.lock() {
            triggers.insert(revision, at);
            while triggers.len() > MAX_TRIGGERS {
                triggers.pop_first();
            }
        }
    }
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
