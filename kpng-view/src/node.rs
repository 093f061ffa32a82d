//! The node view: projection, diff and the incremental projector.

use std::collections::BTreeSet;
use std::sync::Arc;

use kpng_model::v1::IpSet;
use kpng_model::view::{NodeView, ViewOp};
use kpng_model::{Key, ServiceName};
use kpng_sink::{Changes, Round, Sink, SinkError, SyncStats};
use kpng_store::Snapshot;

use crate::select::{NodeContext, project_service};

/// The Services whose entries `keys` name.
pub(crate) fn services_of(keys: &BTreeSet<Key>) -> BTreeSet<ServiceName> {
    keys.iter().filter_map(Key::service).cloned().collect()
}

/// Computes the whole node view of `node_name` at `snapshot`. O(store).
pub fn node_view(snapshot: &Snapshot, node_name: &str) -> NodeView {
    let mut projector = NodeProjector::new(node_name);
    projector.advance(snapshot, true, None);
    projector.view
}

/// The Service CIDRs at `snapshot`, given the view's: the view's own
/// `Arc` when they are equal, so views keep sharing it. `keys`, the keys
/// changed since the view's revision (`None`: unknown), spares the merge
/// when no ServiceCIDR changed.
pub(crate) fn service_cidrs_at(
    snapshot: &Snapshot,
    keys: Option<&BTreeSet<Key>>,
    held: &Arc<IpSet>,
) -> Arc<IpSet> {
    if keys.is_some_and(|keys| !keys.iter().any(|k| matches!(k, Key::ServiceCidr(_)))) {
        return held.clone();
    }
    let merged = snapshot.merged_service_cidrs();
    if **held == merged {
        held.clone()
    } else {
        Arc::new(merged)
    }
}

/// Which Services a revision may have changed for this node.
enum Affected {
    All,
    Some(BTreeSet<ServiceName>),
}

/// Keeps one node's view up to date, revision after revision, and yields
/// what changed.
///
/// It uses the store's change log to recompute only the Services whose
/// entries changed, so an update costs O(changed Services × their
/// endpoints), whatever the store's size. A change to this node's object
/// (its zone drives topology hints) recomputes every Service, as kube-proxy
/// does a full sync on a node-label change. A change to an endpoint that
/// does not alter this node's view yields no op.
#[derive(Clone, Debug)]
pub struct NodeProjector {
    node_name: Arc<str>,
    view: NodeView,
    last: Option<Snapshot>,
    needs_full: bool,
}

/// A snapshot lent to a round, or given up to it.
enum Given<'a> {
    Borrowed(&'a Snapshot),
    Owned(Snapshot),
}

impl Given<'_> {
    fn get(&self) -> &Snapshot {
        match self {
            Given::Borrowed(s) => s,
            Given::Owned(s) => s,
        }
    }
}

impl NodeProjector {
    /// A projector for the node named `node_name`, with an empty view.
    pub fn new(node_name: impl Into<Arc<str>>) -> Self {
        Self {
            node_name: node_name.into(),
            view: NodeView::default(),
            last: None,
            needs_full: true,
        }
    }

    /// The node this projector is for.
    pub fn node_name(&self) -> &str {
        &self.node_name
    }

    /// The current view.
    pub fn view(&self) -> &NodeView {
        &self.view
    }

    /// Brings the view to `snapshot` and returns the ops from the previous
    /// view to the new one (what an API server sends on the wire), derived
    /// from what changed ([`Changes::ops`]). The first call returns the
    /// whole view as sets.
    pub fn update(&mut self, snapshot: &Snapshot) -> Vec<ViewOp> {
        // What `Changes::ops` reads of the two views: the changed
        // Services' views before and after, and the node and Service CIDRs
        // after. Kept alone, not as a clone of the whole view (the map,
        // owned uniquely, is then still updated in place), and looked up
        // in maps of the changed Services only.
        let empty = || NodeView {
            revision: 0,
            node: None,
            service_cidrs: self.view.service_cidrs.clone(),
            services: imbl::OrdMap::new(),
        };
        let mut touched = (empty(), empty());
        let changes = self.advance(snapshot, false, Some(&mut touched));
        let (before, mut after) = touched;
        after.node = self.view.node.clone();
        after.service_cidrs = self.view.service_cidrs.clone();
        changes.ops(&before, &after)
    }

    /// Brings the view to `snapshot`; returns what changed, its Services
    /// left out when `full` (a full round lists the whole view: at 10k
    /// Services the list would be 10k names made for nothing). The views
    /// the changed Services had and have go to `touched`, when given.
    fn advance(
        &mut self,
        snapshot: &Snapshot,
        full: bool,
        mut touched: Option<&mut (NodeView, NodeView)>,
    ) -> Changes {
        let keys = self
            .last
            .as_ref()
            .and_then(|last| snapshot.changed_since(last));
        let affected = match &keys {
            Some(keys) if !keys.contains(&Key::Node(self.node_name.clone())) => {
                Affected::Some(services_of(keys))
            }
            _ => Affected::All,
        };

        let node = snapshot.node(&self.node_name).cloned();
        let service_cidrs = service_cidrs_at(snapshot, keys.as_ref(), &self.view.service_cidrs);
        let mut changes = Changes::default();
        changes.node = self.view.node != node;
        changes.service_cidrs = !Arc::ptr_eq(&self.view.service_cidrs, &service_cidrs);
        let zone = node.as_ref().map_or("", |n| n.zone.as_str());
        let context = NodeContext {
            name: &self.node_name,
            zone,
        };

        let names: BTreeSet<ServiceName> = match affected {
            Affected::Some(names) => names,
            Affected::All => self
                .view
                .services
                .keys()
                .chain(snapshot.service_names())
                .cloned()
                .collect(),
        };
        // Owned uniquely, the map is updated in place, not path-copied.
        let mut services = std::mem::take(&mut self.view.services);
        for name in names {
            let new = project_service(snapshot, &name, context).map(Arc::new);
            let old = services.get(&name);
            if old.map(|o| &**o) == new.as_deref() {
                continue;
            }
            if let Some((before, after)) = touched.as_deref_mut() {
                if let Some(old) = old {
                    before.services.insert(name.clone(), old.clone());
                }
                if let Some(new) = &new {
                    after.services.insert(name.clone(), new.clone());
                }
            }
            match new {
                Some(new) => services.insert(name.clone(), new),
                None => services.remove(&name),
            };
            if !full {
                changes.services.push(name);
            }
        }
        self.view = NodeView {
            revision: snapshot.revision(),
            node,
            service_cidrs,
            services,
        };
        self.last = Some(snapshot.clone());
        changes
    }

    /// Brings the view to `snapshot` and hands `sink` the round that
    /// leads there; returns what it handed over ([`SyncStats::of`]).
    ///
    /// The first round, and the first round after a failed sync, is full.
    /// Other rounds carry only the changes since the last successful
    /// round. Nothing is sent (and `Ok(None)` returned) when the view did
    /// not change since then.
    ///
    /// # Errors
    /// The sink's error. The next call then makes a full round.
    pub fn sync_into<S: Sink + ?Sized>(
        &mut self,
        snapshot: &Snapshot,
        sink: &mut S,
    ) -> Result<Option<SyncStats>, SinkError> {
        self.sync_round(Given::Borrowed(snapshot), sink)
    }

    /// [`sync_into`](Self::sync_into) for the last round of a one-shot
    /// run: the projector keeps no snapshot, and drops `snapshot` once the
    /// view is brought to it, before the sink's sync. If the caller holds
    /// no other snapshot or reader of the store, the store's memory is
    /// given back before the sink builds its batch (at a million
    /// endpoints, ~100 MiB less at the process's peak). A later round
    /// projects every Service again.
    ///
    /// # Errors
    /// The sink's error, as [`sync_into`](Self::sync_into).
    pub fn sync_last<S: Sink + ?Sized>(
        &mut self,
        snapshot: Snapshot,
        sink: &mut S,
    ) -> Result<Option<SyncStats>, SinkError> {
        self.sync_round(Given::Owned(snapshot), sink)
    }

    fn sync_round<S: Sink + ?Sized>(
        &mut self,
        snapshot: Given<'_>,
        sink: &mut S,
    ) -> Result<Option<SyncStats>, SinkError> {
        let full = self.needs_full;
        // An O(1) copy: the two views share every unchanged Service. A
        // full round needs none, and then the map, owned uniquely, is
        // updated in place.
        let previous = (!full).then(|| self.view.clone());
        let changes = self.advance(snapshot.get(), full, None);
        if let Given::Owned(snapshot) = snapshot {
            // Freed here, before the sink's sync (at a million endpoints,
            // ~0.1 s; on a thread of its own, a loaded machine left it
            // unfreed at the sync's peak).
            self.last = None;
            drop(snapshot);
        }
        let round = match &previous {
            None => Round::full(&self.view),
            Some(_) if changes.is_empty() => return Ok(None),
            Some(previous) => Round::incremental(previous, &self.view, changes),
        };
        let stats = SyncStats::of(&round);
        self.needs_full = true;
        sink.sync(&round)?;
        self.needs_full = false;
        tracing::debug!(
            revision = stats.revision,
            services = stats.services,
            full,
            "synced sink"
        );
        Ok(Some(stats))
    }

    /// Forces the next [`sync_into`](Self::sync_into) to make a full round.
    /// The projector is the one that decides when a round is full (the
    /// first, and the first after a failed sync): a backend keeps no flag
    /// of its own, so this is how to make it program everything again.
    pub fn force_full(&mut self) {
        self.needs_full = true;
    }
}
