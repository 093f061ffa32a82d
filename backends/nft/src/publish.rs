//! The backend as one producer of a [`kpng_aggregator::Aggregator`].

use std::sync::{Arc, Mutex};

use kpng_aggregator::Aggregator;
use kpng_aggregator::nft::Nft;
use kpng_model::view::ViewOp;
use kpng_sink::{IncrementalSink, SinkError};

use crate::NftBackend;

/// Runs the nftables backend through an aggregator: each sync publishes
/// the backend's tables as producer `name` instead of running nft, and
/// (unless told not to) flushes the aggregator, so the proxy's change and
/// whatever other producers published go in one transaction.
///
/// The aggregator diffs the publication against what it applied: a change
/// reaches the kernel as the changed objects only. A backend full sync
/// (the first, after a failure, or for more pick chains) publishes a new
/// table epoch, which the aggregator applies as a whole-table replace.
pub struct Publisher {
    backend: NftBackend,
    name: String,
    aggregator: Arc<Mutex<Aggregator<Nft>>>,
    epoch: u64,
    flush: bool,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("name", &self.name)
            .field("epoch", &self.epoch)
            .field("backend", &self.backend)
            .finish()
    }
}

impl Publisher {
    /// Publishes `backend`'s tables as producer `name` of `aggregator`.
    /// The backend only renders: it never runs nft itself.
    pub fn new(backend: NftBackend, name: &str, aggregator: Arc<Mutex<Aggregator<Nft>>>) -> Self {
        Self {
            backend: backend.dry_run(),
            name: name.to_owned(),
            aggregator,
            epoch: 0,
            flush: true,
        }
    }

    /// Leaves flushing to someone else (e.g. [`kpng_aggregator::run`]).
    pub fn without_flush(mut self) -> Self {
        self.flush = false;
        self
    }

    /// The backend.
    pub fn backend(&self) -> &NftBackend {
        &self.backend
    }

    fn publish(&mut self) -> Result<(), String> {
        if self.backend.last_sync().full {
            self.epoch += 1;
        }
        let fragment = self.backend.fragment(self.epoch);
        let mut aggregator = self
            .aggregator
            .lock()
            .map_err(|_| "the aggregator's lock is poisoned".to_owned())?;
        if let Some(why) = aggregator.refusal(&self.name) {
            // An earlier publication was refused after we returned.
            let why = why.to_owned();
            self.backend.force_full();
            return Err(why);
        }
        aggregator
            .publish(&self.name, fragment)
            .map_err(|e| e.to_string())?;
        if self.flush {
            let report = aggregator.flush();
            if let Some((_, why)) = report.refused.iter().find(|(p, _)| *p == self.name) {
                return Err(why.clone());
            }
        }
        Ok(())
    }
}

impl IncrementalSink for Publisher {
    fn reset(&mut self) {
        self.backend.reset();
    }
    kpng_sink::callbacks_as_ops!(apply_op);
    fn apply(&mut self, op: &ViewOp) -> Result<(), SinkError> {
        self.backend.apply(op)
    }
    fn sync(&mut self, revision: u64) -> Result<(), SinkError> {
        self.backend.sync(revision)?;
        self.publish().map_err(|why| {
            self.backend.force_full();
            SinkError::backend("nft", crate::Error::Aggregator { message: why })
        })
    }
}

impl Publisher {
    fn apply_op(&mut self, op: &ViewOp) {
        // Buffered like any op; errors surface at sync.
        let _ = self.backend.apply(op);
    }
}
