//! The bookkeeping every incremental backend needs.

use std::collections::BTreeSet;

use kpng_model::ServiceName;
use kpng_model::view::{NodeView, ViewOp};

use crate::SinkError;

/// What an incremental backend remembers between rounds: the node view as
/// the ops built it, which Services changed since the last sync, whether
/// this node's object or the Service CIDRs changed, and whether the next
/// round must rewrite everything.
///
/// A backend feeds it every op ([`absorb`](Self::absorb)) and at `sync`
/// renders one [`round`](Self::round): the closure gets what changed and
/// the view, and its outcome decides whether the next round is full. The
/// first round, any round after `reset`, and any round after a failure
/// are full. A backend whose sync does not fit in one closure calls
/// [`take_changes`](Self::take_changes) and then [`synced`](Self::synced);
/// a round never confirmed with `synced(true)` counts as failed, so a
/// forgotten step costs a full round, never a wrong one.
///
/// ```
/// use std::sync::Arc;
/// use kpng_model::v1::Service;
/// use kpng_model::view::ViewOp;
/// use kpng_sink::ViewTracker;
///
/// let mut tracker = ViewTracker::default();
/// let web = Service { namespace: "default".into(), name: "web".into(), ..Default::default() };
/// tracker.absorb(&ViewOp::SetService(Arc::new(web)))?;
/// let rendered = tracker.round(|changes, view| {
///     assert!(changes.full);
///     Ok(changes.services.len() + view.services.len())
/// })?;
/// assert_eq!(rendered, 2);
/// assert!(!tracker.take_changes().full, "the next round is incremental");
/// # Ok::<(), kpng_sink::SinkError>(())
/// ```
#[derive(Debug)]
pub struct ViewTracker {
    view: NodeView,
    dirty: BTreeSet<ServiceName>,
    node_changed: bool,
    service_cidrs_changed: bool,
    full: bool,
    /// A round began (`take_changes`) and was not confirmed (`synced`).
    pending: bool,
}

impl Default for ViewTracker {
    fn default() -> Self {
        Self {
            view: NodeView::default(),
            dirty: BTreeSet::new(),
            node_changed: true,
            service_cidrs_changed: true,
            full: true,
            pending: false,
        }
    }
}

/// What changed since the last sync: see [`ViewTracker::take_changes`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Changes {
    /// Rewrite everything: every Service is listed.
    pub full: bool,
    /// This node's object changed (its addresses, its zone).
    pub node: bool,
    /// The cluster's Service CIDRs changed.
    pub service_cidrs: bool,
    /// The Services to render again (gone ones included: the view no
    /// longer has them).
    pub services: Vec<ServiceName>,
}

impl ViewTracker {
    /// Starts over: an empty view, and a full next round.
    pub fn reset(&mut self) {
        *self = Self::default();
    }

    /// Applies one op to the view and notes what it touched.
    ///
    /// # Errors
    /// [`SinkError::View`] for an op that does not fit the view (out of
    /// order); the next round is then full.
    pub fn absorb(&mut self, op: &ViewOp) -> Result<(), SinkError> {
        match op {
            ViewOp::SetNode(_) | ViewOp::DeleteNode => self.node_changed = true,
            ViewOp::SetServiceCidrs(_) => self.service_cidrs_changed = true,
            ViewOp::SetService(s) => {
                self.dirty.insert(s.service_name());
            }
            ViewOp::DeleteService(n) | ViewOp::SetEndpoint(n, _) | ViewOp::DeleteEndpoint(n, _) => {
                self.dirty.insert(n.clone());
            }
        }
        if let Err(e) = self.view.apply(op) {
            self.full = true;
            return Err(e.into());
        }
        Ok(())
    }

    /// Takes `view`, the view this round's ops lead to, in place of the
    /// one they build (see [`IncrementalSink::share_view`]): an O(1)
    /// clone that shares its Services with the caller's. The ops absorbed
    /// after it still mark what changed, and find their changes made.
    ///
    /// [`IncrementalSink::share_view`]: crate::IncrementalSink::share_view
    pub fn share(&mut self, view: &NodeView) {
        self.view = view.clone();
    }

    /// The view as of the ops absorbed so far.
    pub fn view(&self) -> &NodeView {
        &self.view
    }

    /// Whether the next round rewrites everything.
    pub fn full(&self) -> bool {
        self.full
    }

    /// Makes the next round full.
    pub fn force_full(&mut self) {
        self.full = true;
    }

    /// What to render this round, and forgets it: every Service on a full
    /// round, else the changed ones. Begins the round: confirm it with
    /// [`synced`](Self::synced), or the next one is full.
    pub fn take_changes(&mut self) -> Changes {
        if std::mem::replace(&mut self.pending, true) {
            // The previous round was never confirmed.
            self.full = true;
        }
        let services = if self.full {
            self.view.services.keys().cloned().collect()
        } else {
            std::mem::take(&mut self.dirty).into_iter().collect()
        };
        self.dirty.clear();
        let node = std::mem::replace(&mut self.node_changed, false) || self.full;
        let service_cidrs = std::mem::replace(&mut self.service_cidrs_changed, false) || self.full;
        Changes {
            full: self.full,
            node,
            service_cidrs,
            services,
        }
    }

    /// Records how the round's sync went: a failure makes the next full.
    pub fn synced(&mut self, ok: bool) {
        self.pending = false;
        self.full = !ok;
    }

    /// One round: what changed ([`take_changes`](Self::take_changes)) and
    /// the view go to `render`, and its outcome is recorded
    /// ([`synced`](Self::synced)): nothing to remember.
    ///
    /// # Errors
    /// `render`'s; the next round is then full.
    pub fn round<T>(
        &mut self,
        render: impl FnOnce(&Changes, &NodeView) -> Result<T, SinkError>,
    ) -> Result<T, SinkError> {
        let changes = self.take_changes();
        let result = render(&changes, &self.view);
        self.synced(result.is_ok());
        result
    }
}
