//! Immutable snapshots and the cloneable reader.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use imbl::Vector;
use imbl::ordmap::DiffItem;
use kpng_model::ServiceInfo;
use kpng_model::v1::{IpSet, Node, ServiceCidr};
use kpng_model::{EndpointInfo, Key, Kind, ServiceName, Value};
use tokio::sync::watch;

use crate::map::MapOp;
use crate::state::{Entry, State, entry_keys};
use crate::stats::{SharedStats, Stats};
use crate::{Error, Result};

/// Which kinds have finished their initial list.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ListedKinds(u8);

impl ListedKinds {
    fn bit(kind: Kind) -> u8 {
        match kind {
            Kind::Node => 1,
            Kind::Service => 2,
            Kind::Endpoint => 4,
            Kind::ServiceCidr => 8,
        }
    }

    /// Whether `kind` finished its initial list.
    pub fn contains(self, kind: Kind) -> bool {
        self.0 & Self::bit(kind) != 0
    }

    /// Whether every kind in `kinds` finished its initial list.
    pub fn contains_all(self, kinds: &[Kind]) -> bool {
        kinds.iter().all(|k| self.contains(*k))
    }

    pub(crate) fn insert(&mut self, kind: Kind) -> bool {
        let before = self.0;
        self.0 |= Self::bit(kind);
        before != self.0
    }
}

impl fmt::Debug for ListedKinds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set()
            .entries(Kind::ALL.iter().filter(|k| self.contains(**k)))
            .finish()
    }
}

/// The keys one revision changed. Entry `i` of a snapshot's log holds the
/// keys of revision `revision - log.len() + 1 + i`.
pub(crate) type ChangeLog = Vector<Arc<[Key]>>;

/// An immutable view of the store at one revision.
///
/// Cloning is O(1); a snapshot never changes, whatever the writer does later.
#[derive(Clone)]
pub struct Snapshot {
    pub(crate) store_id: u64,
    pub(crate) revision: u64,
    pub(crate) state: State,
    pub(crate) listed: ListedKinds,
    pub(crate) log: ChangeLog,
}

impl Snapshot {
    /// The revision: 0 for an empty store, then +1 per transaction that
    /// changed something.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Every entry: nodes in name order, then per Service (in the store's
    /// fixed order, the same on every run) the Service and its endpoints in
    /// address order. O(1) per entry.
    pub fn iter(&self) -> impl Iterator<Item = (Key, Value)> + '_ {
        self.state.iter()
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.state.len
    }

    /// Whether the store holds nothing.
    pub fn is_empty(&self) -> bool {
        self.state.len == 0
    }

    /// The value under a key (a cheap `Arc` clone).
    pub fn get(&self, key: &Key) -> Option<Value> {
        self.state.get(key)
    }

    /// Whether `key` holds a value equal to `value`. Services and nodes
    /// compare content digests (the stored value is not read); endpoints
    /// compare their inline parts, then their shared parts by pointer.
    pub fn holds(&self, key: &Key, value: &Value) -> bool {
        self.state.holds(key, value)
    }

    /// Which kinds have finished their initial list.
    pub fn listed(&self) -> ListedKinds {
        self.listed
    }

    /// Whether `kind` finished its initial list.
    pub fn is_listed(&self, kind: Kind) -> bool {
        self.listed.contains(kind)
    }

    /// A Service by name.
    pub fn service(&self, name: &ServiceName) -> Option<&Arc<ServiceInfo>> {
        Some(&self.state.services.get(name)?.service.as_ref()?.value)
    }

    /// A node by name.
    pub fn node(&self, name: &str) -> Option<&Arc<Node>> {
        Some(&self.state.nodes.get(name)?.value)
    }

    /// Every node, in name order.
    pub fn nodes(&self) -> impl Iterator<Item = &Arc<Node>> {
        self.state.nodes.values().map(|n| &n.value)
    }

    /// Every ServiceCIDR, in name order.
    pub fn service_cidrs(&self) -> impl Iterator<Item = &Arc<ServiceCidr>> {
        self.state.service_cidrs.values().map(|c| &c.value)
    }

    /// The cluster's Service CIDRs: every ServiceCIDR's ranges, merged
    /// (sorted, without repeats). O(ServiceCIDRs), a handful.
    pub fn merged_service_cidrs(&self) -> IpSet {
        let prefixes = self
            .service_cidrs()
            .filter_map(|c| c.cidrs.as_ref())
            .flat_map(|set| set.v4.iter().chain(&set.v6))
            .filter_map(|text| kpng_model::addr::canonical_cidr("cidrs", text).ok())
            .collect();
        IpSet::from_cidrs(prefixes)
    }

    /// Every Service, in the store's fixed order (the same on every run,
    /// not alphabetical).
    pub fn services(&self) -> impl Iterator<Item = (&ServiceName, &Arc<ServiceInfo>)> {
        self.state
            .services
            .iter()
            .filter_map(|(name, e)| Some((name, &e.service.as_ref()?.value)))
    }

    /// The names of every Service that has a Service object or endpoints
    /// (endpoints may arrive before their Service).
    pub fn service_names(&self) -> impl Iterator<Item = &ServiceName> {
        self.state.services.keys()
    }

    /// The endpoints of one Service, in order of their primary address
    /// (IPv4 first): a slice of the stored list, O(1).
    pub fn endpoints(&self, service: &ServiceName) -> &[EndpointInfo] {
        self.state
            .services
            .get(service)
            .map_or(&[], |e| e.endpoints.as_slice())
    }

    /// The endpoints of one Service as the store holds them, shared: O(1).
    /// A writer that replaces them with a list equal but for a few
    /// endpoints can start from this one.
    pub fn endpoint_list(&self, service: &ServiceName) -> Arc<Vec<EndpointInfo>> {
        self.state
            .services
            .get(service)
            .map(|e| e.endpoints.clone())
            .unwrap_or_default()
    }

    /// The keys changed between `older` and this snapshot, when the change
    /// log still covers that span: every key written with a different value
    /// in some revision after `older`. `None` when `older` comes from another
    /// store, is newer than this snapshot, or has left the bounded log;
    /// callers then compare the maps structurally.
    pub fn changed_since(&self, older: &Snapshot) -> Option<BTreeSet<Key>> {
        if older.store_id != self.store_id || older.revision > self.revision {
            return None;
        }
        let span = usize::try_from(self.revision - older.revision).ok()?;
        if span > self.log.len() {
            return None;
        }
        let mut keys = BTreeSet::new();
        for entry in self.log.skip(self.log.len() - span).iter() {
            keys.extend(entry.iter().cloned());
        }
        Some(keys)
    }

    /// The keys whose value may differ between `other` and this snapshot:
    /// from the change log when it covers the span (see
    /// [`changed_since`](Self::changed_since)), otherwise from a walk of
    /// both states that skips what they share and compares the rest. Every
    /// key that differs is included; a key from the log may turn out equal
    /// (written and then written back), so callers compare values.
    pub fn keys_to_compare(&self, other: &Snapshot) -> BTreeSet<Key> {
        if let Some(keys) = self.changed_since(other) {
            return keys;
        }
        let (a, b) = (&other.state, &self.state);
        let mut keys = BTreeSet::new();
        for item in a.nodes.diff(&b.nodes) {
            let name = match item {
                DiffItem::Add(k, _) | DiffItem::Remove(k, _) => k,
                DiffItem::Update { new: (k, _), .. } => k,
            };
            keys.insert(Key::Node(name.clone()));
        }
        for item in a.service_cidrs.diff(&b.service_cidrs) {
            let name = match item {
                DiffItem::Add(k, _) | DiffItem::Remove(k, _) => k,
                DiffItem::Update { new: (k, _), .. } => k,
            };
            keys.insert(Key::ServiceCidr(name.clone()));
        }
        let empty = Entry::default();
        for (name, new) in b.services.iter() {
            let old = a.services.get(name).unwrap_or(&empty);
            entry_keys(name, old, new, &mut keys);
        }
        for (name, old) in a.services.iter() {
            if !b.services.contains_key(name) {
                entry_keys(name, old, &empty, &mut keys);
            }
        }
        keys
    }

    /// The minimal ops, in key order, that turn this snapshot into `to`:
    /// the one diff of two store states (a [`RevMap`](crate::RevMap)'s
    /// revisions diff the same way, with the same ops:
    /// [`MapSnapshot::diff`](crate::MapSnapshot::diff)).
    ///
    /// Minimal: one op per key whose value differs, none for keys written
    /// with an equal value. When `to`'s change log covers the span from
    /// this snapshot (same store, this one not older than the log) the
    /// cost is O(changed keys); otherwise both states are walked, skipping
    /// what they share (see [`keys_to_compare`](Self::keys_to_compare)).
    /// [`Txn::apply`](crate::Txn::apply) replays the ops into a store (a
    /// replica, an API client following a global watch).
    ///
    /// ```
    /// use kpng_model::v1::Service;
    /// use kpng_model::{EndpointInfo, ServiceName};
    /// use kpng_store::{MapOp, Store};
    ///
    /// let mut store = Store::new();
    /// let web = ServiceName::new("default", "web");
    /// let endpoint = |node: &str| EndpointInfo::builder([10, 1, 0, 7].into()).node(node, "").build();
    /// let mut txn = store.begin();
    /// txn.set_service(kpng_model::ServiceInfo::new(Service::new("default", "web"))?);
    /// txn.set_endpoint(web.clone(), endpoint("node-b"));
    /// txn.commit();
    /// let before = store.snapshot();
    ///
    /// // The endpoint moves to another node: one store change, one op.
    /// let mut txn = store.begin();
    /// txn.set_endpoint(web.clone(), endpoint("node-a"));
    /// txn.commit();
    /// let after = store.snapshot();
    /// let ops = before.diff(&after);
    /// assert_eq!(ops.len(), 1);
    /// assert!(matches!(&ops[0], MapOp::Set(..)));
    /// assert!(after.diff(&after).is_empty());
    ///
    /// // A replica holding `before` applies the ops and holds `after`.
    /// let mut replica = Store::new();
    /// let mut txn = replica.begin();
    /// for (key, value) in before.iter() {
    ///     txn.set(key, value)?;
    /// }
    /// txn.apply(&ops)?;
    /// txn.commit();
    /// assert_eq!(replica.snapshot().iter().collect::<Vec<_>>(), after.iter().collect::<Vec<_>>());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn diff(&self, to: &Snapshot) -> Vec<MapOp<Key, Value>> {
        to.keys_to_compare(self)
            .into_iter()
            .filter_map(|key| match (self.get(&key), to.get(&key)) {
                (old, Some(new)) if old.as_ref() != Some(&new) => Some(MapOp::Set(key, new)),
                (Some(_), None) => Some(MapOp::Delete(key)),
                _ => None,
            })
            .collect()
    }
}

impl fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Snapshot")
            .field("revision", &self.revision)
            .field("entries", &self.state.len)
            .field("listed", &self.listed)
            .finish()
    }
}

/// A cloneable reader of a [`Store`](crate::Store).
#[derive(Clone)]
pub struct Reader {
    pub(crate) rx: watch::Receiver<Snapshot>,
    pub(crate) stats: Arc<SharedStats>,
}

impl Reader {
    /// Takes the trigger times of the revisions up to `revision` (see
    /// [`Txn::note_trigger`](crate::Txn::note_trigger)): one per revision
    /// that noted one, each taken once. A proxy that has applied
    /// `revision` observes its network programming latency from them.
    pub fn take_triggers(&self, revision: u64) -> Vec<std::time::SystemTime> {
        let Ok(mut triggers) = self.stats.triggers.lock() else {
            return Vec::new();
        };
        let later = triggers.split_off(&revision.saturating_add(1));
        std::mem::replace(&mut *triggers, later)
            .into_values()
            .collect()
    }

    /// The latest snapshot. O(1).
    pub fn snapshot(&self) -> Snapshot {
        self.rx.borrow().clone()
    }

    /// The writer's counters.
    pub fn stats(&self) -> Stats {
        self.stats.load()
    }

    /// Waits until the store has a revision newer than `revision`, and
    /// returns that snapshot. Intermediate revisions may be skipped: a slow
    /// reader sees only the latest, and diffs across the gap.
    ///
    /// # Errors
    /// [`Error::Closed`] when the writer is dropped first.
    pub async fn newer_than(&mut self, revision: u64) -> Result<Snapshot> {
        self.wait(|s| s.revision > revision).await
    }

    /// Waits until every kind in `kinds` has finished its initial list, and
    /// returns that snapshot.
    ///
    /// # Errors
    /// [`Error::Closed`] when the writer is dropped first.
    pub async fn listed(&mut self, kinds: &[Kind]) -> Result<Snapshot> {
        self.wait(|s| s.listed.contains_all(kinds)).await
    }

    /// Waits until `ready` holds for the latest snapshot.
    ///
    /// # Errors
    /// [`Error::Closed`] when the writer is dropped first.
    pub async fn wait(&mut self, mut ready: impl FnMut(&Snapshot) -> bool) -> Result<Snapshot> {
        let snapshot = self
            .rx
            .wait_for(|s| ready(s))
            .await
            .map_err(|_| Error::Closed)?;
        Ok(snapshot.clone())
    }
}

impl fmt::Debug for Reader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reader")
            .field("latest", &*self.rx.borrow())
            .finish()
    }
}
