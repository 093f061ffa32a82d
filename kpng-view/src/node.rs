//! The node view: projection, diff and the incremental projector.

use std::collections::BTreeSet;
use std::sync::Arc;

use imbl::ordmap::DiffItem;
use kpng_model::v1::IpSet;
use kpng_model::view::{NodeView, ServiceView, ViewOp};
use kpng_model::{Key, ServiceName};
use kpng_sink::{Changes, Round, Sink, SinkError};
use kpng_store::Snapshot;

use crate::select::{NodeContext, project_service};

/// The Services whose entries `keys` name.
pub(crate) fn services_of(keys: &BTreeSet<Key>) -> BTreeSet<ServiceName> {
    keys.iter().filter_map(Key::service).cloned().collect()
}

/// Computes the whole node view of `node_name` at `snapshot`. O(store).
pub fn node_view(snapshot: &Snapshot, node_name: &str) -> NodeView {
    let mut projector = NodeProjector::new(node_name);
    projector.update(snapshot);
    projector.view
}

/// The ops that turn node view `a` into node view `b`, in [`ViewOp`] order.
///
/// Services whose view is shared between `a` and `b` are skipped without
/// being compared, so diffing two views computed by one projector costs
/// O(changed Services).
pub fn diff_views(a: &NodeView, b: &NodeView) -> Vec<ViewOp> {
    let mut ops = Vec::new();
    node_ops(a, b.node.as_ref(), &mut ops);
    service_cidr_ops(a, &b.service_cidrs, &mut ops);
    for item in a.services.diff(&b.services) {
        match item {
            DiffItem::Add(_, new) => service_ops(None, Some(new), &mut ops),
            DiffItem::Update { old, new } => service_ops(Some(old.1), Some(new.1), &mut ops),
            DiffItem::Remove(name, _) => ops.push(ViewOp::DeleteService(name.clone())),
        }
    }
    ops
}

fn node_ops(a: &NodeView, node: Option<&Arc<kpng_model::v1::Node>>, ops: &mut Vec<ViewOp>) {
    match (a.node.as_ref(), node) {
        (old, Some(new)) if old != Some(new) => ops.push(ViewOp::SetNode(new.clone())),
        (Some(_), None) => ops.push(ViewOp::DeleteNode),
        _ => {}
    }
}

/// Appends the op that gives view `a` the Service CIDRs `cidrs`, unless
/// it has them.
pub(crate) fn service_cidr_ops(a: &NodeView, cidrs: &Arc<IpSet>, ops: &mut Vec<ViewOp>) {
    if !Arc::ptr_eq(&a.service_cidrs, cidrs) && a.service_cidrs != *cidrs {
        ops.push(ViewOp::SetServiceCidrs(cidrs.clone()));
    }
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

/// Appends the ops that turn one Service's view `old` into `new`.
fn service_ops(
    old: Option<&Arc<ServiceView>>,
    new: Option<&Arc<ServiceView>>,
    ops: &mut Vec<ViewOp>,
) {
    let (old, new) = match (old, new) {
        (None, None) => return,
        (Some(old), None) => {
            ops.push(ViewOp::DeleteService(old.name()));
            return;
        }
        (old, Some(new)) => (old, new),
    };
    if old.is_some_and(|o| Arc::ptr_eq(o, new)) {
        return;
    }
    let name = new.name();
    let old_endpoints = old.map_or(&[][..], |o| &o.endpoints[..]);
    if old.is_none_or(|o| o.service != new.service) {
        ops.push(ViewOp::SetService(new.service.clone()));
    }
    // Both lists are sorted by address: merge them.
    let mut sets = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < old_endpoints.len() || j < new.endpoints.len() {
        match (old_endpoints.get(i), new.endpoints.get(j)) {
            (Some(o), Some(n)) if o.ip() == n.ip() => {
                if o != n {
                    sets.push(ViewOp::SetEndpoint(name.clone(), n.clone()));
                }
                i += 1;
                j += 1;
            }
            (Some(o), n) if n.is_none_or(|n| o.ip() < n.ip()) => {
                ops.push(ViewOp::DeleteEndpoint(name.clone(), o.ip()));
                i += 1;
            }
            (_, Some(n)) => {
                sets.push(ViewOp::SetEndpoint(name.clone(), n.clone()));
                j += 1;
            }
            (Some(_), None) | (None, None) => break,
        }
    }
    ops.extend(sets);
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

/// What [`NodeProjector::sync_into`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SyncReport {
    /// The revision synced.
    pub revision: u64,
    /// Services the round set or removed (every Service of the view in
    /// a full round).
    pub services: usize,
    /// Whether this was a full round.
    pub full: bool,
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
    /// view to the new one (what an API server sends on the wire). The
    /// first call returns the whole view as sets.
    pub fn update(&mut self, snapshot: &Snapshot) -> Vec<ViewOp> {
        let mut ops = Vec::new();
        self.advance(snapshot, Some(&mut ops), false);
        ops
    }

    /// Brings the view to `snapshot`, appending the ops to `ops` when
    /// given; returns what changed, its Services left out when `full`
    /// (a full round lists the whole view: at 10k Services the list
    /// would be 10k names made for nothing).
    fn advance(
        &mut self,
        snapshot: &Snapshot,
        mut ops: Option<&mut Vec<ViewOp>>,
        full: bool,
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
        if let Some(ops) = ops.as_deref_mut() {
            node_ops(&self.view, node.as_ref(), ops);
            service_cidr_ops(&self.view, &service_cidrs, ops);
        }
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
            if let Some(ops) = ops.as_deref_mut() {
                service_ops(old, new.as_ref(), ops);
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
    /// leads there.
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
    ) -> Result<Option<SyncReport>, SinkError> {
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
    ) -> Result<Option<SyncReport>, SinkError> {
        self.sync_round(Given::Owned(snapshot), sink)
    }

    fn sync_round<S: Sink + ?Sized>(
        &mut self,
        snapshot: Given<'_>,
        sink: &mut S,
    ) -> Result<Option<SyncReport>, SinkError> {
        let full = self.needs_full;
        // An O(1) copy: the two views share every unchanged Service. A
        // full round needs none, and then the map, owned uniquely, is
        // updated in place.
        let previous = (!full).then(|| self.view.clone());
        let changes = self.advance(snapshot.get(), None, full);
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
        let services = round.service_count();
        self.needs_full = true;
        sink.sync(&round)?;
        self.needs_full = false;
        tracing::debug!(revision = self.view.revision, services, full, "synced sink");
        Ok(Some(SyncReport {
            revision: self.view.revision,
            services,
            full,
        }))
    }

    /// Forces the next [`sync_into`](Self::sync_into) to make a full round.
    pub fn force_full(&mut self) {
        self.needs_full = true;
    }
}
