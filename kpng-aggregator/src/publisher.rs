//! Running a backend as one producer of an [`Aggregator`].

use std::sync::{Arc, Mutex};

use kpng_model::view::ViewOp;
use kpng_sink::{IncrementalSink, SinkError};

use crate::{Aggregator, Subsystem};

/// A backend that can publish what it wants instead of applying it.
///
/// In publishing mode a backend renders as usual (incrementally, with its
/// own full rounds) but never touches the kernel; the [`Publisher`] hands
/// its desired state to an aggregator after each sync.
pub trait Producer: IncrementalSink {
    /// The subsystem it publishes to.
    type Subsystem: Subsystem;
    /// Switches to publishing mode.
    fn publishing(self) -> Self;
    /// The whole desired state after the last sync.
    fn fragment(
        &mut self,
    ) -> imbl::OrdMap<<Self::Subsystem as Subsystem>::Key, <Self::Subsystem as Subsystem>::Value>;
    /// Makes the next sync a full one (its publication refused).
    fn force_full(&mut self);
}

/// Runs a backend through an aggregator: each sync publishes the backend's
/// state as producer `name`, and (unless told not to) flushes, so the
/// backend's change and whatever other producers published go in one
/// transaction. The aggregator diffs the publication against what it
/// applied: only changed objects reach the kernel.
pub struct Publisher<B: Producer> {
    backend: B,
    name: String,
    aggregator: Arc<Mutex<Aggregator<B::Subsystem>>>,
    flush: bool,
}

impl<B: Producer + std::fmt::Debug> std::fmt::Debug for Publisher<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("name", &self.name)
            .field("backend", &self.backend)
            .finish()
    }
}

/// Why a publication did not land.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Refused(String);

impl<B: Producer> Publisher<B> {
    /// Publishes `backend`'s state as producer `name` of `aggregator`.
    pub fn new(backend: B, name: &str, aggregator: Arc<Mutex<Aggregator<B::Subsystem>>>) -> Self {
        Self {
            backend: backend.publishing(),
            name: name.to_owned(),
            aggregator,
            flush: true,
        }
    }

    /// Leaves flushing to someone else (e.g. [`crate::run`]).
    pub fn without_flush(mut self) -> Self {
        self.flush = false;
        self
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    fn publish(&mut self) -> Result<(), String> {
        let fragment = self.backend.fragment();
        let mut aggregator = self
            .aggregator
            .lock()
            .map_err(|_| "the aggregator's lock is poisoned".to_owned())?;
        if let Some(why) = aggregator.refusal(&self.name) {
            // An earlier publication was refused after we returned.
            return Err(why.to_owned());
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

/// The backend's last round. No script: what reaches the kernel is the
/// aggregator's transaction, merged with other producers'.
impl<B: Producer + kpng_sink::RoundReport> kpng_sink::RoundReport for Publisher<B> {
    fn last_round(&self) -> kpng_sink::RoundSummary {
        self.backend().last_round()
    }
}

impl<B: Producer> IncrementalSink for Publisher<B> {
    fn reset(&mut self) {
        self.backend.reset();
    }
    fn apply(&mut self, op: &ViewOp) -> Result<(), SinkError> {
        self.backend.apply(op)
    }
    fn sync(&mut self, revision: u64) -> Result<(), SinkError> {
        self.backend.sync(revision)?;
        self.publish().map_err(|why| {
            self.backend.force_full();
            SinkError::backend(format!("aggregator producer {}", self.name), Refused(why))
        })
    }
    fn view(&self) -> Option<&kpng_model::view::NodeView> {
        self.backend.view()
    }
    fn share_view(&mut self, view: &kpng_model::view::NodeView) {
        self.backend.share_view(view);
    }
}
