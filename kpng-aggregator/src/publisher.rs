//! Running a backend as one producer of an [`Aggregator`].

use std::sync::{Arc, Mutex};

use kpng_sink::{Round, Sink, SinkError};

use crate::{Aggregator, Subsystem};

/// A backend that can publish what it wants instead of applying it.
///
/// In publishing mode a backend renders each [`Round`] as usual (the
/// changes of an incremental one, everything anew in a full one) but
/// never touches the kernel; the [`Publisher`] hands its desired state to
/// an aggregator after each round.
pub trait Producer: Sink {
    /// The subsystem it publishes to.
    type Subsystem: Subsystem;
    /// Switches to publishing mode.
    fn publishing(self) -> Self;
    /// The whole desired state after the last round.
    fn fragment(
        &mut self,
    ) -> imbl::OrdMap<<Self::Subsystem as Subsystem>::Key, <Self::Subsystem as Subsystem>::Value>;
}

/// Runs a backend through an aggregator: a [`Sink`] whose rounds the
/// backend renders, then publishes as producer `name`, and (unless told
/// not to) flushes, so the backend's change and whatever other producers
/// published go in one transaction. The aggregator diffs the publication
/// against what it applied: only changed objects reach the kernel. A
/// refused publication fails the round, so the driver's next round is
/// full: the backend renders everything anew.
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
    fn last_sync(&self) -> kpng_sink::SyncStats {
        kpng_sink::RoundReport::last_sync(self.backend())
    }
}

impl<B: Producer> Sink for Publisher<B> {
    /// The backend renders the round, then its state is published (and
    /// flushed). A refused publication fails the round: the next one is
    /// full, and the backend renders everything anew.
    fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
        self.backend.sync(round)?;
        self.publish().map_err(|why| {
            SinkError::backend(format!("aggregator producer {}", self.name), Refused(why))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nft::{Fragment, Nft, TableFamily};
    use kpng_model::view::NodeView;

    /// A producer that publishes one table, named after how many Services
    /// its last round's view held, and records its rounds.
    #[derive(Debug, Default)]
    struct Counter {
        rounds: Vec<(u64, bool)>,
        services: usize,
        publishing: bool,
    }

    impl Sink for Counter {
        fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
            self.rounds.push((round.revision(), round.is_full()));
            self.services = round.view().services.len();
            Ok(())
        }
    }

    impl Producer for Counter {
        type Subsystem = Nft;
        fn publishing(mut self) -> Self {
            self.publishing = true;
            self
        }
        fn fragment(&mut self) -> imbl::OrdMap<crate::nft::Key, crate::nft::Value> {
            let mut fragment = Fragment::new();
            fragment
                .table(TableFamily::Ip, &format!("counter{}", self.services))
                .chain("c", []);
            fragment.into()
        }
    }

    #[test]
    fn the_backend_renders_the_round_then_its_state_is_published_and_refusals_fail_it() {
        let aggregator = Arc::new(Mutex::new(Aggregator::new(Nft::dry_run())));
        let mut publisher = Publisher::new(Counter::default(), "kpng", aggregator.clone());
        assert!(publisher.backend().publishing);
        let view = NodeView {
            revision: 1,
            ..Default::default()
        };
        publisher.sync(&Round::full(&view)).expect("published");
        assert_eq!(publisher.backend().rounds, [(1, true)]);
        let script = aggregator
            .lock()
            .expect("lock")
            .subsystem()
            .last_script()
            .to_owned();
        assert!(script.contains("counter0"), "{script}");

        // Producer "other" would publish table counter0, which "kpng"
        // owns: refused, its round fails after its backend rendered it.
        let mut other = Publisher::new(Counter::default(), "other", aggregator);
        let err = other
            .sync(&Round::between(&view, &view))
            .expect_err("refused");
        assert!(
            err.to_string().starts_with("aggregator producer other"),
            "{err}"
        );
        assert_eq!(other.backend().rounds, [(1, false)]);
    }
}
