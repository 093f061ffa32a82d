//! The traits a kpng-rs backend implements.
//!
//! This crate is the stable point that data-plane vendors build on. It
//! depends only on `kpng-model` and changes rarely. A backend implements one
//! of two styles:
//!
//! - [`FullStateSink`]: the backend receives the whole [`NodeView`] at each
//!   sync, and makes the data plane match it. Simplest to write; right for a
//!   backend whose own apply step diffs (or is cheap).
//! - [`IncrementalSink`]: the backend receives the changes of each round
//!   as [`ViewOp`]s ([`apply`](IncrementalSink::apply)), then a
//!   [`sync`](IncrementalSink::sync) that ends the round. Right for a
//!   backend that rewrites only what changed.
//!
//! Adapters connect them: [`FullState`] drives a full-state sink from
//! incremental ops, and a `Vec` of incremental sinks fans out to each.
//!
//! The node view that both styles see already applies kube-proxy's endpoint
//! selection rules (computed by `kpng-diff`): a backend never re-implements
//! readiness, terminating fallback, topology hints or traffic policies.
//!
//! # The contract
//!
//! A driver (such as `kpng_diff::NodeProjector::sync_into`) calls an
//! incremental sink in *rounds*. Each round is a sequence of
//! [`apply`](IncrementalSink::apply) calls followed by exactly one
//! `sync(revision)`:
//!
//! 1. The first round of a sink's life, and the first round after any
//!    `sync` that returned an error, starts with [`reset`](IncrementalSink::reset)
//!    and then sends the complete view as sets. The sink must make its data
//!    plane match exactly that state at the next `sync`, removing anything
//!    it programmed before that the new state does not hold (a full resync).
//! 2. Other rounds send only what changed since the previous successful
//!    round.
//! 3. `sync` is where the sink applies the round, ideally atomically. If it
//!    fails, the data plane should keep its previous state; the driver will
//!    retry with a full round.
//!
//! Within a round, ops come in the order of [`ViewOp`]: node first, then per
//! Service either a deletion, or the Service's definition (when it changed)
//! followed by its endpoint deletions and sets. `DeleteService` implies the
//! deletion of all that Service's endpoints.
//!
//! # Example
//!
//! A full-state backend that counts what it would program, driven through
//! the [`FullState`] adapter:
//!
//! ```
//! use std::sync::Arc;
//! use kpng_model::v1::Service;
//! use kpng_model::view::{NodeView, ViewOp};
//! use kpng_sink::{FullState, FullStateSink, IncrementalSink, SinkError};
//!
//! #[derive(Default)]
//! struct Counter { services: usize }
//!
//! impl FullStateSink for Counter {
//!     fn sync(&mut self, view: &NodeView) -> Result<(), SinkError> {
//!         self.services = view.services.len();
//!         Ok(())
//!     }
//! }
//!
//! let mut sink = FullState::new(Counter::default());
//! sink.reset();
//! let web = Service { namespace: "default".into(), name: "web".into(), ..Default::default() };
//! sink.apply(&ViewOp::SetService(Arc::new(web)))?;
//! sink.sync(1)?;
//! assert_eq!(sink.inner().services, 1);
//! # Ok::<(), SinkError>(())
//! ```

use kpng_model::view::{NodeView, ViewOp};

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
    /// An op did not fit the view it was applied to (out of order).
    #[error(transparent)]
    View(#[from] kpng_model::Error),
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

/// A backend that receives the whole node view at each sync.
pub trait FullStateSink {
    /// Makes the data plane match `view` exactly. Called once per round with
    /// the view at the round's revision. On error the data plane should keep
    /// its previous state; the call is retried later with a newer view.
    ///
    /// # Errors
    /// Whatever the backend reports, as [`SinkError::Backend`].
    fn sync(&mut self, view: &NodeView) -> Result<(), SinkError>;
}

impl<S: FullStateSink + ?Sized> FullStateSink for Box<S> {
    fn sync(&mut self, view: &NodeView) -> Result<(), SinkError> {
        (**self).sync(view)
    }
}

/// Several full-state sinks behind one [`FullState`]: one copy of the
/// view for all of them. Each syncs in order, even after one fails; the
/// first error is returned.
impl<S: FullStateSink> FullStateSink for Vec<S> {
    fn sync(&mut self, view: &NodeView) -> Result<(), SinkError> {
        let mut first = Ok(());
        for sink in self.iter_mut() {
            let result = sink.sync(view);
            if first.is_ok() {
                first = result;
            }
        }
        first
    }
}

/// A backend that receives changes: the ops of a round, then a sync
/// marker. See the crate docs for the contract of a round.
///
/// ```
/// use kpng_model::view::ViewOp;
/// use kpng_sink::{IncrementalSink, SinkError};
///
/// /// Counts the Services a round set or deleted.
/// #[derive(Default)]
/// struct Touched { round: usize, last: usize }
///
/// impl IncrementalSink for Touched {
///     fn apply(&mut self, op: &ViewOp) -> Result<(), SinkError> {
///         if let ViewOp::SetService(_) | ViewOp::DeleteService(_) = op {
///             self.round += 1;
///         }
///         Ok(())
///     }
///     fn sync(&mut self, _revision: u64) -> Result<(), SinkError> {
///         self.last = std::mem::take(&mut self.round);
///         Ok(())
///     }
/// }
/// ```
pub trait IncrementalSink {
    /// Forget everything: the round that follows carries the complete state.
    /// Called before the first round and after a failed `sync`. Default:
    /// nothing.
    fn reset(&mut self) {}

    /// One change of the round, in [`ViewOp`] order. A sink buffers it and
    /// applies the round in [`sync`](IncrementalSink::sync).
    ///
    /// # Errors
    /// A sink that keeps a view may refuse an op that does not fit it
    /// ([`SinkError::View`]: out of order); the driver then resets it.
    fn apply(&mut self, op: &ViewOp) -> Result<(), SinkError>;

    /// Ends the round for `revision`: apply everything since the previous
    /// sync (or since `reset`), ideally as one atomic transaction.
    ///
    /// # Errors
    /// Whatever the backend reports. The driver then resets the sink and
    /// retries with a full round.
    fn sync(&mut self, revision: u64) -> Result<(), SinkError>;

    /// The node view as of the ops received, when the sink keeps one
    /// (backends built on [`ViewTracker`], [`FullState`]). Wrappers
    /// forward it, and [`Follow`] hands it to full-state sinks, so a
    /// process holds one view, not one per sink. Default: `None`.
    fn view(&self) -> Option<&NodeView> {
        None
    }

    /// The view this round's ops lead to, from a driver that keeps one
    /// (`kpng_diff::NodeProjector::sync_into` calls it after `reset` and
    /// before the round's ops). A sink that keeps a view of its own may
    /// take this one: an O(1) clone that shares every Service with the
    /// driver's, so the ops that follow find their changes made and copy
    /// nothing, and a process holds one view instead of two (~9 MB each at
    /// 10k Services × 10 endpoints). The ops still say what changed.
    /// Wrappers forward it. Default: nothing.
    fn share_view(&mut self, _view: &NodeView) {}
}

#[doc(hidden)]
pub use kpng_model as __model;

mod tracker;
pub use tracker::{Changes, ViewTracker};

#[cfg(feature = "file")]
mod file;
#[cfg(feature = "file")]
pub use file::ViewFile;
mod report;
pub use report::{Logged, RoundReport, RoundSummary};
mod config;
pub use config::ProxyConfig;
/// Typed CIDRs, as [`ProxyConfig`] takes them.
pub use ipnet::IpNet;

/// Drives a [`FullStateSink`] from incremental ops: it keeps the node view,
/// applies each op to it, and hands the whole view to the inner sink at each
/// sync. The view is a persistent map, so keeping it costs no copy.
#[derive(Debug, Default)]
pub struct FullState<S> {
    view: NodeView,
    inner: S,
}

impl<S> FullState<S> {
    /// Wraps a full-state sink.
    pub fn new(inner: S) -> Self {
        Self {
            view: NodeView::default(),
            inner,
        }
    }

    /// The wrapped sink.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The wrapped sink, mutably.
    pub fn inner_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The view as of the ops applied so far.
    pub fn view(&self) -> &NodeView {
        &self.view
    }
}

impl<S: FullStateSink> IncrementalSink for FullState<S> {
    fn reset(&mut self) {
        self.view = NodeView::default();
    }
    fn apply(&mut self, op: &ViewOp) -> Result<(), SinkError> {
        Ok(self.view.apply(op)?)
    }

    /// Hands the whole view to the inner sink.
    fn sync(&mut self, revision: u64) -> Result<(), SinkError> {
        self.view.revision = revision;
        self.inner.sync(&self.view)
    }

    fn view(&self) -> Option<&NodeView> {
        Some(&self.view)
    }

    fn share_view(&mut self, view: &NodeView) {
        self.view = view.clone();
    }
}

/// An incremental sink followed by full-state sinks that read *its* view:
/// after `inner` syncs, `followers` sync with the view it keeps
/// ([`IncrementalSink::view`]), so they need no copy of their own (at 10k
/// Services × 10 endpoints a view is ~10 MB). When `inner` keeps no view,
/// `Follow` keeps one for the followers.
///
/// `sync` returns `inner`'s error without syncing the followers, or the
/// followers' error after `inner` synced (the driver then resets both,
/// so the next round is full for both).
#[derive(Debug)]
pub struct Follow<S, F> {
    inner: S,
    followers: F,
    own: Option<NodeView>,
}

impl<S: IncrementalSink, F: FullStateSink> Follow<S, F> {
    /// `followers` (a [`FullStateSink`], or a `Vec` of them) follow
    /// `inner`'s view.
    pub fn new(inner: S, followers: F) -> Self {
        let own = inner.view().is_none().then(NodeView::default);
        Self {
            inner,
            followers,
            own,
        }
    }

    /// The followed sink.
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

impl<S: IncrementalSink, F: FullStateSink> IncrementalSink for Follow<S, F> {
    fn reset(&mut self) {
        if let Some(own) = &mut self.own {
            *own = NodeView::default();
        }
        self.inner.reset();
    }
    fn apply(&mut self, op: &ViewOp) -> Result<(), SinkError> {
        if let Some(own) = &mut self.own {
            own.apply(op)?;
        }
        self.inner.apply(op)
    }
    fn sync(&mut self, revision: u64) -> Result<(), SinkError> {
        self.inner.sync(revision)?;
        let view = match (&self.own, self.inner.view()) {
            (Some(own), _) => own,
            (None, Some(view)) => view,
            (None, None) => {
                return Err(SinkError::backend(
                    "follow",
                    "the followed sink stopped keeping a view",
                ));
            }
        };
        self.followers.sync(view)
    }
    fn view(&self) -> Option<&NodeView> {
        self.own.as_ref().or_else(|| self.inner.view())
    }
    fn share_view(&mut self, view: &NodeView) {
        if let Some(own) = &mut self.own {
            *own = view.clone();
        }
        self.inner.share_view(view);
    }
}

/// Implements every method of [`IncrementalSink`] by forwarding to the sink
/// the expression `$inner` names, so none is lost in a default.
macro_rules! forward_incremental_sink {
    ($self:ident => $inner:expr) => {
        fn reset(&mut $self) {
            $inner.reset()
        }
        fn sync(&mut $self, revision: u64) -> Result<(), SinkError> {
            $inner.sync(revision)
        }
        fn apply(&mut $self, op: &ViewOp) -> Result<(), SinkError> {
            $inner.apply(op)
        }
        fn view(&$self) -> Option<&NodeView> {
            $inner.view()
        }
        fn share_view(&mut $self, view: &NodeView) {
            $inner.share_view(view)
        }
    };
}

/// Forwards to the boxed sink, so `Box<dyn IncrementalSink>` is a sink.
impl<S: IncrementalSink + ?Sized> IncrementalSink for Box<S> {
    forward_incremental_sink!(self => (**self));
}

/// Forwards to the borrowed sink.
impl<S: IncrementalSink + ?Sized> IncrementalSink for &mut S {
    forward_incremental_sink!(self => (**self));
}

/// Fans out: every op goes to every sink, in order.
///
/// `sync` syncs every sink, even after one fails, and returns the first
/// error. The driver then resets all of them, so a sink that succeeded
/// receives a full round too: correct, if not minimal.
impl<S: IncrementalSink> IncrementalSink for Vec<S> {
    fn reset(&mut self) {
        self.iter_mut().for_each(IncrementalSink::reset);
    }
    fn apply(&mut self, op: &ViewOp) -> Result<(), SinkError> {
        self.iter_mut().try_for_each(|s| s.apply(op))
    }
    fn sync(&mut self, revision: u64) -> Result<(), SinkError> {
        let mut first = None;
        for sink in self.iter_mut() {
            if let Err(e) = sink.sync(revision) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
    /// The first sink's view that there is.
    fn view(&self) -> Option<&NodeView> {
        self.iter().find_map(IncrementalSink::view)
    }
    fn share_view(&mut self, view: &NodeView) {
        self.iter_mut().for_each(|s| s.share_view(view));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kpng_model::ServiceName;
    use kpng_model::v1::Service;
    use std::sync::Arc;

    #[derive(Default)]
    struct Log {
        calls: Vec<String>,
        fail: bool,
    }

    impl IncrementalSink for Log {
        fn reset(&mut self) {
            self.calls.push("reset".into());
        }
        fn apply(&mut self, op: &ViewOp) -> Result<(), SinkError> {
            match op {
                ViewOp::SetService(service) => self.calls.push(format!("set {}", service.name)),
                ViewOp::DeleteService(name) => self.calls.push(format!("delete {name}")),
                _ => {}
            }
            Ok(())
        }
        fn sync(&mut self, revision: u64) -> Result<(), SinkError> {
            self.calls.push(format!("sync {revision}"));
            if self.fail {
                return Err(SinkError::backend("log", "boom"));
            }
            Ok(())
        }
    }

    fn svc(name: &str) -> Arc<Service> {
        Arc::new(Service {
            namespace: "ns".into(),
            name: name.into(),
            ..Default::default()
        })
    }

    /// Counts the Services of the view it is handed.
    #[derive(Default)]
    struct Counter {
        seen: Vec<usize>,
    }

    impl FullStateSink for Counter {
        fn sync(&mut self, view: &NodeView) -> Result<(), SinkError> {
            self.seen.push(view.services.len());
            Ok(())
        }
    }

    /// A backend that keeps a view.
    #[derive(Default)]
    struct Tracked {
        tracker: ViewTracker,
    }

    impl IncrementalSink for Tracked {
        fn reset(&mut self) {
            self.tracker.reset();
        }
        fn apply(&mut self, op: &ViewOp) -> Result<(), SinkError> {
            self.tracker.absorb(op)
        }
        fn sync(&mut self, _: u64) -> Result<(), SinkError> {
            self.tracker.round(|_, _| Ok(()))
        }
        fn view(&self) -> Option<&NodeView> {
            Some(self.tracker.view())
        }
        fn share_view(&mut self, view: &NodeView) {
            self.tracker.share(view);
        }
    }

    #[test]
    fn followers_read_the_followed_view_or_one_of_their_own() {
        // The backend keeps a view: Follow keeps none.
        let mut follow = Follow::new(Tracked::default(), Counter::default());
        assert!(follow.own.is_none());
        follow.reset();
        follow.apply(&ViewOp::SetService(svc("a"))).expect("ok");
        follow.apply(&ViewOp::SetService(svc("b"))).expect("ok");
        follow.sync(1).expect("ok");
        assert_eq!(follow.followers.seen, [2]);
        assert_eq!(follow.view().map(|v| v.services.len()), Some(2));
        // A backend with no view: Follow keeps one for the followers.
        let mut follow = Follow::new(Log::default(), vec![Counter::default()]);
        assert!(follow.own.is_some());
        follow.apply(&ViewOp::SetService(svc("a"))).expect("ok");
        follow.sync(1).expect("ok");
        follow
            .apply(&ViewOp::DeleteService(svc("a").service_name()))
            .expect("ok");
        follow.sync(2).expect("ok");
        assert_eq!(follow.followers[0].seen, [1, 0]);
        // The followed sink fails: the followers are not synced.
        follow.inner.fail = true;
        assert!(follow.sync(3).is_err());
        assert_eq!(follow.followers[0].seen, [1, 0]);
    }

    #[test]
    fn a_sink_handles_the_ops_it_cares_for() {
        let mut log = Log::default();
        log.apply(&ViewOp::SetService(svc("a"))).expect("ok");
        log.apply(&ViewOp::DeleteService(ServiceName::new("ns", "a")))
            .expect("ok");
        // Ops the sink does not care for pass.
        log.apply(&ViewOp::DeleteNode).expect("ok");
        assert_eq!(log.calls, ["set a", "delete ns/a"]);
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
        sinks.apply(&ViewOp::SetService(svc("a"))).expect("ok");
        let err = sinks.sync(3).expect_err("first fails");
        assert_eq!(err.to_string(), "log: boom");
        assert_eq!(sinks[1].calls, ["set a", "sync 3"]);
    }

    #[test]
    fn full_state_adapter_rejects_out_of_order_ops() {
        struct Nop;
        impl FullStateSink for Nop {
            fn sync(&mut self, _: &NodeView) -> Result<(), SinkError> {
                Ok(())
            }
        }
        let mut sink = FullState::new(Nop);
        let err = sink
            .apply(&ViewOp::DeleteEndpoint(
                ServiceName::new("ns", "a"),
                "10.0.0.1".parse().expect("ip"),
            ))
            .expect_err("no such service");
        assert!(matches!(err, SinkError::View(_)));
        assert_eq!(err.to_string(), "node view has no service ns/a");
        sink.reset();
        sink.apply(&ViewOp::SetService(svc("a"))).expect("fits");
        sink.sync(2).expect("clean round");
        assert_eq!(sink.view().services.len(), 1);
    }

    #[test]
    fn boxed_and_borrowed_sinks_forward() {
        let mut log = Log::default();
        {
            let mut boxed: Box<dyn IncrementalSink + '_> = Box::new(&mut log);
            boxed.reset();
            boxed.apply(&ViewOp::SetService(svc("b"))).expect("ok");
            boxed.apply(&ViewOp::SetService(svc("c"))).expect("ok");
            boxed.sync(1).expect("ok");
        }
        assert_eq!(log.calls, ["reset", "set b", "set c", "sync 1"]);
    }
}

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
