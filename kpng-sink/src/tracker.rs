//! The bookkeeping every incremental backend needs.

use std::collections::BTreeSet;

use kpng_model::ServiceName;
use kpng_model::view::{NodeView, ViewOp};

use crate::SinkError;

/// What an incremental backend remembers between rounds: the node view as
/// the ops built it, which Services changed since the last sync, whether
/// this node's object changed, whether the next sync must rewrite
/// everything, and the first op that did not fit the view.
///
/// A backend feeds it every op ([`absorb`](Self::absorb)), and at `sync`
/// asks what to render ([`take_changes`](Self::take_changes)), then says
/// how the sync went ([`synced`](Self::synced)): the first round, any
/// round after `reset`, and any round after a failure are full.
///
/// ```
/// use std::sync::Arc;
/// use kpng_model::v1::Service;
/// use kpng_model::view::ViewOp;
/// use kpng_sink::ViewTracker;
///
/// let mut tracker = ViewTracker::default();
/// let web = Service { namespace: "default".into(), name: "web".into(), ..Default::default() };
/// tracker.absorb(&ViewOp::SetService(Arc::new(web)));
/// tracker.check()?;
/// let changes = tracker.take_changes();
/// assert!(changes.full && changes.services.len() == 1);
/// tracker.synced(true);
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
    misfit: Option<kpng_model::Error>,
}

impl Default for ViewTracker {
    fn default() -> Self {
        Self {
            view: NodeView::default(),
            dirty: BTreeSet::new(),
            node_changed: true,
            service_cidrs_changed: true,
            full: true,
            misfit: None,
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

    /// Applies one op to the view and notes what it touched. An op that
    /// does not fit is kept for [`check`](Self::check) (callbacks cannot
    /// fail).
    pub fn absorb(&mut self, op: &ViewOp) {
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
            self.misfit.get_or_insert(e);
        }
    }

    /// Takes `view`, the view this round's ops lead to, in place of the
    /// one they build (see [`IncrementalSink::share_view`]): an O(1)
    /// clone that shares its Services with the caller's. The ops absorbed
    /// after it still mark what changed, and find their changes made.
    /// Ignored once an op of the round did not fit (the round fails).
    ///
    /// [`IncrementalSink::share_view`]: crate::IncrementalSink::share_view
    pub fn share(&mut self, view: &NodeView) {
        if self.misfit.is_none() {
            self.view = view.clone();
        }
    }

    /// The view as of the ops absorbed so far.
    pub fn view(&self) -> &NodeView {
        &self.view
    }

    /// Fails with the first op of the round that did not fit the view;
    /// the next round is then full.
    ///
    /// # Errors
    /// [`SinkError::View`].
    pub fn check(&mut self) -> Result<(), SinkError> {
        match self.misfit.take() {
            Some(e) => {
                self.full = true;
                Err(e.into())
            }
            None => Ok(()),
        }
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
    /// round, else the changed ones.
    pub fn take_changes(&mut self) -> Changes {
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
        self.full = !ok;
    }
}
