//! The contract a kpng-rs backend implements: one [`Round`] per sync.
//!
//! This crate is the stable point that data-plane vendors build on. It
//! depends only on `kpng-model` and changes rarely. A backend implements
//! [`Sink`], one method:
//!
//! ```text
//! fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError>
//! ```
//!
//! A [`Round`] is the node view the data plane must match, its revision,
//! and what changed since the previous round that succeeded: whether the
//! node's object and the Service CIDRs changed, and the Services set or
//! removed, each with its view before and after. A *full* round (the
//! first, and the first after a failure) lists every Service and asks the
//! backend to remove whatever else it programmed. The driver that keeps
//! the view (`kpng_view::NodeProjector::sync_into`, or an API agent) owns
//! it; sinks borrow it, so a process holds one view however many sinks it
//! runs.
//!
//! The node view already applies kube-proxy's endpoint selection rules
//! (computed by `kpng-view`): a backend never re-implements readiness,
//! terminating fallback, topology hints or traffic policies.
//!
//! # The contract
//!
//! 1. `sync` makes the data plane match [`Round::view`], ideally in one
//!    atomic transaction. In an incremental round, only the Services of
//!    [`Round::services`] (and the node's object, and the Service CIDRs,
//!    when [`Round::node_changed`] or [`Round::service_cidrs_changed`]
//!    say so) differ from the previous round's view.
//! 2. If `sync` fails, the data plane should keep its previous state. The
//!    next round is full.
//! 3. A backend that needs only the whole view (a file, a health-check
//!    server) reads [`Round::view`] and ignores the rest.
//!
//! # Composition
//!
//! [`SinkExt`] composes sinks as `tracing` composes layers: a [`Hook`]
//! runs around each round of a sink ([`SinkExt::with`]; [`Log`] is one:
//! [`SinkExt::logged`]), [`SinkExt::followed_by`] runs another sink on
//! the same round once the first succeeded, and a `Vec` of sinks fans
//! out.
//!
//! # Example
//!
//! A backend that counts what it would program, driven by hand through
//! two rounds:
//!
//! ```
//! use std::sync::Arc;
//! use kpng_model::v1::Service;
//! use kpng_model::view::{NodeView, ServiceView};
//! use kpng_sink::{Round, Sink, SinkError};
//!
//! #[derive(Default)]
//! struct Counter { services: usize, rounds: usize }
//!
//! impl Sink for Counter {
//!     fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
//!         self.services = round.view().services.len();
//!         self.rounds += 1;
//!         Ok(())
//!     }
//! }
//!
//! let mut sink = Counter::default();
//! let mut view = NodeView::default();
//! sink.sync(&Round::full(&view))?;
//! let web = Arc::new(kpng_model::ServiceInfo::new(Service::new("default", "web")).expect("valid"));
//! let before = view.clone();
//! view.services.insert(web.service_name(), Arc::new(ServiceView::new(web)));
//! sink.sync(&Round::between(&before, &view))?;
//! assert_eq!((sink.services, sink.rounds), (1, 2));
//! # Ok::<(), SinkError>(())
//! ```

/// A boxed error from a backend.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Errors of a sink.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SinkError {
    /// The backend failed to apply a round. The driver retries with a full
    /// round.
    #[error("{sink}: {source}")]
    Backend {
        /// Which sink failed.
        sink: String,
        /// Why.
        #[source]
        source: BoxError,
    },
}

impl SinkError {
    /// Wraps a backend's error, naming the sink.
    pub fn backend(sink: impl Into<String>, source: impl Into<BoxError>) -> Self {
        SinkError::Backend {
            sink: sink.into(),
            source: source.into(),
        }
    }
}

/// A backend: it makes its data plane match each [`Round`]. See the
/// crate docs for the contract.
///
/// ```
/// use kpng_sink::{Round, Sink, SinkError};
///
/// /// Counts the Services each round removed.
/// #[derive(Default)]
/// struct Removed { last: usize }
///
/// impl Sink for Removed {
///     fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
///         self.last = round.removed().count();
///         Ok(())
///     }
/// }
/// ```
pub trait Sink {
    /// Makes the data plane match `round.view()`: the whole of it in a
    /// full round, what [`Round::services`] lists in an incremental one.
    ///
    /// # Errors
    /// Whatever the backend reports, as [`SinkError::Backend`]. The data
    /// plane should then keep its previous state; the next round is full.
    fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError>;
}

/// Forwards to the boxed sink, so `Box<dyn Sink>` is a sink.
impl<S: Sink + ?Sized> Sink for Box<S> {
    fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
        (**self).sync(round)
    }
}

/// Forwards to the borrowed sink.
impl<S: Sink + ?Sized> Sink for &mut S {
    fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
        (**self).sync(round)
    }
}

/// Fans out: every sink receives the round, in order, even after one
/// fails; the first error is returned. The driver then makes the next
/// round full for all of them: correct, if not minimal.
impl<S: Sink> Sink for Vec<S> {
    fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
        let mut first = None;
        for sink in self.iter_mut() {
            if let Err(e) = sink.sync(round) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

#[doc(hidden)]
pub use kpng_model as __model;

mod changes;
pub use changes::Changes;
mod round;
pub use round::{Round, ServiceChange};
mod compose;
pub use compose::{FollowedBy, Hook, SinkExt, With};

#[cfg(feature = "file")]
mod file;
#[cfg(feature = "file")]
pub use file::ViewFile;
mod report;
pub use report::{Log, RoundReport, SyncStats};
mod config;
pub use config::ProxyConfig;
pub mod traffic;
/// Typed CIDRs, as [`ProxyConfig`] takes them.
pub use ipnet::IpNet;
pub use kpng_model::v1::{Balancing, LoadBalancerMode};

#[cfg(test)]
mod tests {
    use super::*;
    use kpng_model::view::NodeView;

    #[derive(Default)]
    struct Log {
        rounds: Vec<(u64, bool)>,
        fail: bool,
    }

    impl Sink for Log {
        fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
            self.rounds.push((round.revision(), round.is_full()));
            if self.fail {
                return Err(SinkError::backend("log", "boom"));
            }
            Ok(())
        }
    }

    #[test]
    fn fanout_syncs_all_and_reports_the_first_error() {
        let mut sinks = vec![
            Log {
                fail: true,
                ..Default::default()
            },
            Log::default(),
        ];
        let view = NodeView {
            revision: 3,
            ..Default::default()
        };
        let err = sinks.sync(&Round::full(&view)).expect_err("first fails");
        assert_eq!(err.to_string(), "log: boom");
        assert_eq!(sinks[1].rounds, [(3, true)]);
    }

    #[test]
    fn boxed_and_borrowed_sinks_forward() {
        let mut log = Log::default();
        let view = NodeView::default();
        {
            let mut boxed: Box<dyn Sink + '_> = Box::new(&mut log);
            boxed.sync(&Round::full(&view)).expect("ok");
            boxed.sync(&Round::between(&view, &view)).expect("ok");
        }
        assert_eq!(log.rounds, [(0, true), (0, false)]);
    }
}

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
