//! Node views of many nodes at once, sharing what the nodes have in common.
//!
//! Most of one node's view is the same for every node: a Service none of
//! whose endpoints runs on the node, and whose node hints do not name it,
//! projects for that node exactly as for a node of the same zone that has
//! nothing of its own. [`SharedViews`] keeps that view once per zone (the
//! *base*, updated once per revision in O(changed Services)) and builds a
//! node's view as a clone of its zone's base (O(1), a persistent map) with
//! the node's own Services inserted. Two nodes' views then share every
//! Service whose view is equal for both, and what a node costs is what is
//! its own.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use imbl::OrdMap;
use kpng_model::v1::IpSet;
use kpng_model::view::{NodeView, ServiceView, ViewDigest, ViewOp};
use kpng_model::{Key, ServiceName};
use kpng_sink::Changes;
use kpng_store::Snapshot;

use crate::node::{service_cidrs_at, services_of};
use crate::select::{NodeContext, project_service};

type Services = OrdMap<ServiceName, Arc<ServiceView>>;

/// The shared part of node views: per zone, the view of a node that has
/// no endpoint and is named by no node hint, and the index of which
/// Services name which nodes. Cloning shares it; every method takes a
/// short lock.
///
/// # Example
///
/// ```
/// use kpng_view::{SharedViews, node_view};
/// use kpng_model::v1::Service;
/// use kpng_model::{EndpointInfo, ServiceName};
/// use kpng_store::Store;
///
/// let mut store = Store::new();
/// let web = ServiceName::new("default", "web");
/// let mut txn = store.begin();
/// txn.set_service(kpng_model::ServiceInfo::new(Service::new("default", "web")).expect("valid"));
/// let endpoint = EndpointInfo::builder("10.1.0.7".parse()?).node("node-a", "zone-1");
/// txn.set_endpoint(web.clone(), endpoint.build());
/// txn.commit();
///
/// let shared = SharedViews::new();
/// let a = shared.project("node-a", &store.snapshot());
/// let b = shared.project("node-b", &store.snapshot());
/// // Each equals a projection made for that node alone ...
/// assert_eq!(a.view(), &node_view(&store.snapshot(), "node-a"));
/// assert_eq!(b.view(), &node_view(&store.snapshot(), "node-b"));
/// // ... node-a's own Service is its own, node-b's comes from the base.
/// assert_eq!(a.own_services(), 1);
/// assert_eq!(b.own_services(), 0);
/// assert!(a.is_own(&web) && !b.is_own(&web));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct SharedViews {
    hub: Arc<Mutex<Hub>>,
}

#[derive(Debug, Default)]
struct Hub {
    snapshot: Option<Snapshot>,
    /// Per zone (`""`: none), the base view and its digest.
    zones: HashMap<Arc<str>, Base>,
    /// Per Service, the nodes it names: its endpoints' nodes, and the
    /// nodes its node hints name.
    names: HashMap<ServiceName, Vec<Arc<str>>>,
    /// Per node, the Services that name it.
    by_node: HashMap<Arc<str>, BTreeSet<ServiceName>>,
    /// The cluster's Service CIDRs at `snapshot`: one `Arc` every node's
    /// view shares.
    service_cidrs: Arc<IpSet>,
}

#[derive(Clone, Debug, Default)]
struct Base {
    services: Services,
    digest: ViewDigest,
}

/// Figures about a [`SharedViews`], for metrics and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SharedStats {
    /// The revision the bases are at.
    pub revision: u64,
    /// Zones with a base view (the empty zone included).
    pub zones: usize,
    /// Nodes named by at least one Service.
    pub named_nodes: usize,
}

/// One node's view, built on a [`SharedViews`]: its zone's base with the
/// node's own Services put in. Cloning is O(own Services).
#[derive(Clone, Debug)]
pub struct SharedNodeView {
    node: Arc<str>,
    view: NodeView,
    digest: ViewDigest,
    snapshot: Option<Snapshot>,
    zone: Arc<str>,
    /// The Services whose view differs from the base's, with their
    /// difference to the base's digest term.
    own: BTreeMap<ServiceName, ViewDigest>,
}

impl SharedNodeView {
    /// An empty view of `node` (nothing projected yet): the starting
    /// point of a watcher that holds nothing.
    pub fn empty(node: impl Into<Arc<str>>) -> Self {
        let view = NodeView::default();
        Self {
            node: node.into(),
            digest: ViewDigest::of(&view),
            view,
            snapshot: None,
            zone: "".into(),
            own: BTreeMap::new(),
        }
    }

    /// The node.
    pub fn node_name(&self) -> &str {
        &self.node
    }

    /// The view, as a plain [`NodeView`].
    pub fn view(&self) -> &NodeView {
        &self.view
    }

    /// The view's digest ([`ViewDigest::of`] the view, kept up to date in
    /// O(changed Services)).
    pub fn digest(&self) -> ViewDigest {
        self.digest
    }

    /// How many Services of this view are the node's own (differ from its
    /// zone's base).
    pub fn own_services(&self) -> usize {
        self.own.len()
    }

    /// Whether Service `name`'s view in this view is the node's own
    /// (differs from its zone's base); `false` for a Service the view
    /// shares with other nodes of its zone, or does not hold.
    pub fn is_own(&self, name: &ServiceName) -> bool {
        self.own.contains_key(name)
    }
}

impl SharedViews {
    /// An empty set of bases; they follow the snapshots they are given.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Hub> {
        // A panic while holding the lock leaves the hub consistent enough:
        // every update replaces whole entries.
        self.hub.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Figures about the shared part.
    pub fn stats(&self) -> SharedStats {
        let hub = self.lock();
        SharedStats {
            revision: hub.snapshot.as_ref().map_or(0, Snapshot::revision),
            zones: hub.zones.len(),
            named_nodes: hub.by_node.len(),
        }
    }

    /// `node`'s view at `snapshot`, or at the newer revision the bases
    /// already hold (see [`NodeView::revision`]). O(the node's own
    /// Services); the first view of a zone builds its base, O(store).
    pub fn project(&self, node: &str, snapshot: &Snapshot) -> SharedNodeView {
        self.build(node.into(), snapshot, None)
    }

    /// Brings `view` to `snapshot` (or to the newer revision the bases
    /// hold) and returns the ops from the old view to the new one, in
    /// [`ViewOp`] order. O(the node's own Services + changed Services).
    pub fn update(&self, view: &mut SharedNodeView, snapshot: &Snapshot) -> Vec<ViewOp> {
        let new = self.build(view.node.clone(), snapshot, Some(view));
        let ops = Changes::between(&view.view, &new.view).ops(&view.view, &new.view);
        *view = new;
        ops
    }

    fn build(
        &self,
        node: Arc<str>,
        snapshot: &Snapshot,
        prev: Option<&SharedNodeView>,
    ) -> SharedNodeView {
        let (snapshot, node_object, zone, base, own_names, service_cidrs) = {
            let mut hub = self.lock();
            hub.advance(snapshot);
            let Some(snapshot) = hub.snapshot.clone() else {
                return SharedNodeView::empty(node);
            };
            let node_object = snapshot.node(&node).cloned();
            let zone: Arc<str> = node_object.as_ref().map_or("", |n| n.zone.as_str()).into();
            let base = hub.base(&zone, &snapshot).clone();
            let own_names: Vec<ServiceName> = hub
                .by_node
                .get(&node)
                .map(|s| s.iter().cloned().collect())
                .unwrap_or_default();
            let service_cidrs = hub.service_cidrs.clone();
            (snapshot, node_object, zone, base, own_names, service_cidrs)
        };

        // Services unchanged since `prev` keep their view: only those that
        // changed are projected again.
        let keys = prev.and_then(|p| snapshot.changed_since(p.snapshot.as_ref()?));
        let changed: Option<BTreeSet<ServiceName>> = keys
            .filter(|_| prev.is_some_and(|p| p.zone == zone && p.view.node == node_object))
            .map(|keys| services_of(&keys));
        let context = NodeContext {
            name: &node,
            zone: &zone,
        };
        let mut services = base.services;
        let mut digest = base.digest;
        let mut own = BTreeMap::new();
        for name in own_names {
            let unchanged = changed.as_ref().is_some_and(|c| !c.contains(&name));
            if let (true, Some(prev)) = (unchanged, prev) {
                if let Some(term) = prev.own.get(&name) {
                    match prev.view.services.get(&name) {
                        Some(view) => services.insert(name.clone(), view.clone()),
                        None => services.remove(&name),
                    };
                    digest = digest + *term;
                    own.insert(name, *term);
                }
                continue;
            }
            let new = project_service(&snapshot, &name, context);
            let base_view = services.get(&name);
            if new.as_ref() == base_view.map(|b| &**b) {
                continue;
            }
            let mut term = ViewDigest::default();
            if let Some(b) = base_view {
                term = term - ViewDigest::service_term(&name, b);
            }
            match new {
                Some(new) => {
                    term = term + ViewDigest::service_term(&name, &new);
                    services.insert(name.clone(), Arc::new(new));
                }
                None => {
                    services.remove(&name);
                }
            }
            digest = digest + term;
            own.insert(name, term);
        }
        digest = digest
            + ViewDigest::node_term(node_object.as_deref())
            + ViewDigest::service_cidrs_term(&service_cidrs);
        SharedNodeView {
            node,
            view: NodeView {
                revision: snapshot.revision(),
                node: node_object,
                service_cidrs,
                services,
            },
            digest,
            snapshot: Some(snapshot),
            zone,
            own,
        }
    }
}

/// The nodes a Service's endpoints name: where they (and their copies)
/// run, and the nodes their node hints name.
fn named_nodes<'a>(snapshot: &'a Snapshot, name: &ServiceName) -> Vec<&'a str> {
    let mut nodes: Vec<&str> = Vec::new();
    let endpoints = snapshot.endpoints(name).iter();
    for endpoint in endpoints.flat_map(|e| std::iter::once(e).chain(e.copies())) {
        let hints = endpoint.hint_nodes().iter().map(|n| &**n);
        let named = std::iter::once(endpoint.node_name()).chain(hints);
        for node in named.filter(|n| !n.is_empty()) {
            if !nodes.contains(&node) {
                nodes.push(node);
            }
        }
    }
    nodes
}

impl Hub {
    /// Brings the index and every base to `snapshot`, when it is newer.
    fn advance(&mut self, snapshot: &Snapshot) {
        let keys = match &self.snapshot {
            Some(old) if old.revision() >= snapshot.revision() => return,
            // From the change log, or a walk that skips what both share.
            Some(old) => Some(snapshot.keys_to_compare(old)),
            None => None,
        };
        let names: Vec<ServiceName> = match &keys {
            Some(keys) => services_of(keys).into_iter().collect(),
            None => snapshot.service_names().cloned().collect(),
        };
        self.service_cidrs = service_cidrs_at(snapshot, keys.as_ref(), &self.service_cidrs);
        for name in &names {
            self.reindex(snapshot, name);
        }
        // The zone-less base first: the others share its Service views
        // wherever they are equal.
        let mut zones: Vec<Arc<str>> = self.zones.keys().cloned().collect();
        zones.sort_by_key(|z| !z.is_empty());
        let mut plain: HashMap<ServiceName, Option<Arc<ServiceView>>> = HashMap::new();
        for zone in zones {
            let Some(base) = self.zones.get_mut(&zone) else {
                continue;
            };
            for name in &names {
                let shared = plain.get(name).cloned();
                let view = base_view(snapshot, name, &zone, shared.flatten());
                base.set(name, view.clone());
                if zone.is_empty() {
                    plain.insert(name.clone(), view);
                }
            }
        }
        self.snapshot = Some(snapshot.clone());
    }

    fn reindex(&mut self, snapshot: &Snapshot, name: &ServiceName) {
        for node in self.names.remove(name).unwrap_or_default() {
            if let Some(set) = self.by_node.get_mut(&node) {
                set.remove(name);
                if set.is_empty() {
                    self.by_node.remove(&node);
                }
            }
        }
        let mut nodes = Vec::new();
        for node in named_nodes(snapshot, name) {
            // One allocation per node name, shared by the index.
            let node = match self.by_node.get_key_value(node) {
                Some((interned, _)) => interned.clone(),
                None => Arc::from(node),
            };
            self.by_node
                .entry(node.clone())
                .or_default()
                .insert(name.clone());
            nodes.push(node);
        }
        if !nodes.is_empty() {
            self.names.insert(name.clone(), nodes);
        }
    }

    /// The base of `zone` at the hub's snapshot, built on first use.
    fn base(&mut self, zone: &Arc<str>, snapshot: &Snapshot) -> &Base {
        if !self.zones.contains_key("") {
            let base = Base::build(snapshot, "", None);
            self.zones.insert("".into(), base);
        }
        if !self.zones.contains_key(zone) {
            let plain = self.zones.get("").cloned();
            let base = Base::build(snapshot, zone, plain.as_ref());
            self.zones.insert(zone.clone(), base);
        }
        &self.zones[zone]
    }
}

/// A Service's view in a zone's base; `shared` (the zone-less base's view)
/// is used instead of a copy when equal.
fn base_view(
    snapshot: &Snapshot,
    name: &ServiceName,
    zone: &str,
    shared: Option<Arc<ServiceView>>,
) -> Option<Arc<ServiceView>> {
    let context = NodeContext { name: "", zone };
    let view = project_service(snapshot, name, context)?;
    match shared {
        Some(shared) if *shared == view => Some(shared),
        _ => Some(Arc::new(view)),
    }
}

impl Base {
    fn build(snapshot: &Snapshot, zone: &str, plain: Option<&Base>) -> Self {
        let mut base = Base {
            services: OrdMap::new(),
            digest: ViewDigest::default(),
        };
        for name in snapshot.service_names() {
            let shared = plain.and_then(|p| p.services.get(name).cloned());
            base.set(name, base_view(snapshot, name, zone, shared));
        }
        base
    }

    fn set(&mut self, name: &ServiceName, view: Option<Arc<ServiceView>>) {
        let old = match view {
            Some(view) => {
                self.digest = self.digest + ViewDigest::service_term(name, &view);
                self.services.insert(name.clone(), view)
            }
            None => self.services.remove(name),
        };
        if let Some(old) = old {
            self.digest = self.digest - ViewDigest::service_term(name, &old);
        }
    }
}

/// Node `node`'s own view changes from `old` (a snapshot the watcher's
/// view was projected at) to `new`, without the view at `old`: only the
/// Services changed in between are projected there. `None` when the
/// change log does not cover the span, `old` comes from another store, or
/// the node's object changed (its zone may have): then the caller diffs
/// whole views.
pub fn view_changes(old: &Snapshot, new: &SharedNodeView) -> Option<Vec<ViewOp>> {
    let snapshot = new.snapshot.as_ref()?;
    let keys = snapshot.changed_since(old)?;
    if keys.contains(&Key::Node(new.node.clone())) {
        return None;
    }
    let zone = old.node(&new.node).map_or("", |n| n.zone.as_str());
    let context = NodeContext {
        name: &new.node,
        zone,
    };
    let names: BTreeSet<&ServiceName> = keys.iter().filter_map(Key::service).collect();
    let mut before = NodeView {
        revision: old.revision(),
        node: new.view.node.clone(),
        service_cidrs: new.view.service_cidrs.clone(),
        services: OrdMap::new(),
    };
    let mut after = before.clone();
    if keys.iter().any(|k| matches!(k, Key::ServiceCidr(_))) {
        before.service_cidrs = Arc::new(old.merged_service_cidrs());
    }
    for name in names {
        if let Some(view) = project_service(old, name, context) {
            before.services.insert(name.clone(), Arc::new(view));
        }
        if let Some(view) = new.view.services.get(name) {
            after.services.insert(name.clone(), view.clone());
        }
    }
    Some(Changes::between(&before, &after).ops(&before, &after))
}
