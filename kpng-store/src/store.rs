//! The exclusive writer and its transactions.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use kpng_model::ServiceInfo;
use kpng_model::v1::{Node, ServiceCidr};
use kpng_model::{EndpointInfo, Key, Kind, ServiceName, Value};
use tokio::sync::watch;

use crate::map::MapOp;
use crate::snapshot::{ChangeLog, ListedKinds, Reader, Snapshot};
use crate::state::State;
use crate::stats::{SharedStats, Stats};
use crate::{Error, Result};

/// Settings of a [`Store`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct StoreConfig {
    /// How many recent revisions the change log keeps.
    pub log_revisions: usize,
    /// How many keys, summed over its revisions, the change log keeps. A
    /// revision that alone exceeds it (a large relist) empties the log.
    pub log_keys: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            log_revisions: 1024,
            log_keys: 65_536,
        }
    }
}

static NEXT_STORE_ID: AtomicU64 = AtomicU64::new(1);

/// The exclusive writer of the ENLS store.
///
/// Writes go through a [`Txn`] from [`Store::begin`]; readers come from
/// [`Store::reader`]. Dropping the store closes its readers' waits.
pub struct Store {
    config: StoreConfig,
    id: u64,
    revision: u64,
    state: State,
    listed: ListedKinds,
    log: ChangeLog,
    log_keys: usize,
    tx: watch::Sender<Snapshot>,
    stats: Arc<SharedStats>,
}

impl Default for Store {
    fn default() -> Self {
        Self::new()
    }
}

impl Store {
    /// An empty store at revision 0, with the default settings.
    pub fn new() -> Self {
        Self::with_config(StoreConfig::default())
    }

    /// An empty store at revision 0.
    pub fn with_config(config: StoreConfig) -> Self {
        let id = NEXT_STORE_ID.fetch_add(1, Ordering::Relaxed);
        let snapshot = Snapshot {
            store_id: id,
            revision: 0,
            state: State::default(),
            listed: ListedKinds::default(),
            log: ChangeLog::new(),
        };
        let (tx, _) = watch::channel(snapshot);
        Self {
            config,
            id,
            revision: 0,
            state: State::default(),
            listed: ListedKinds::default(),
            log: ChangeLog::new(),
            log_keys: 0,
            tx,
            stats: Arc::default(),
        }
    }

    /// A new reader. Readers are cheap and cloneable.
    pub fn reader(&self) -> Reader {
        Reader {
            rx: self.tx.subscribe(),
            stats: self.stats.clone(),
        }
    }

    /// The current snapshot. O(1).
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            store_id: self.id,
            revision: self.revision,
            state: self.state.clone(),
            listed: self.listed,
            log: self.log.clone(),
        }
    }

    /// The current revision.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The counters so far.
    pub fn stats(&self) -> Stats {
        self.stats.load()
    }

    /// Starts a transaction. Its writes are visible to readers only after
    /// [`Txn::commit`]; dropping it uncommitted rolls them back.
    pub fn begin(&mut self) -> Txn<'_> {
        let base = self.state.clone();
        Txn {
            store: self,
            base,
            touched: Vec::new(),
            overflowed: false,
            touches: 0,
            trigger: None,
            writes: 0,
            noops: 0,
            committed: false,
        }
    }

    /// Marks `kind` as having finished its initial list, and tells readers.
    /// Setting a flag does not make a revision: the ENLS did not change.
    pub fn mark_listed(&mut self, kind: Kind) {
        if self.listed.insert(kind) {
            tracing::debug!(?kind, revision = self.revision, "kind listed");
            self.publish();
        }
    }

    /// Which kinds finished their initial list.
    pub fn listed(&self) -> ListedKinds {
        self.listed
    }

    fn publish(&self) {
        self.tx.send_replace(self.snapshot());
    }

    fn clear_log(&mut self) {
        self.log.clear();
        self.log_keys = 0;
    }

    fn push_log(&mut self, keys: Vec<Key>) {
        if keys.len() > self.config.log_keys {
            // Too large to keep (a big relist): spans across it fall back to
            // the structural walk. Skip building the entry.
            self.clear_log();
            return;
        }
        let keys: Arc<[Key]> = keys.into();
        self.log_keys += keys.len();
        self.log.push_back(keys);
        while self.log.len() > self.config.log_revisions || self.log_keys > self.config.log_keys {
            match self.log.pop_front() {
                Some(old) => self.log_keys -= old.len(),
                None => break,
            }
        }
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("revision", &self.revision)
            .field("entries", &self.state.len)
            .field("listed", &self.listed)
            .finish()
    }
}

/// The outcome of [`Txn::commit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Commit {
    /// The new revision, or `None` when nothing changed.
    pub revision: Option<u64>,
    /// Keys whose value changed. For a transaction that touched more keys
    /// than the change log keeps ([`StoreConfig::log_keys`]: a relist), the
    /// keys are not kept and this counts its changing writes, of which a
    /// key written twice counts twice.
    pub changed: usize,
    /// Writes that changed nothing.
    pub noop_writes: u64,
}

/// A batch of writes, applied as one revision.
///
/// Each write is checked against the stored value at once: a no-op costs a
/// lookup and a comparison, and touches nothing. A key written twice in one
/// transaction counts as changed only if its final value differs from the
/// value before the transaction.
#[must_use = "a transaction does nothing until committed"]
pub struct Txn<'a> {
    store: &'a mut Store,
    base: State,
    /// The keys each changing write touched, until there are more than
    /// the change log keeps (a relist): then none are kept (at 10k × 10
    /// they would be ~7 MB for a moment), and `commit` compares states.
    touched: Vec<Key>,
    overflowed: bool,
    /// Changing writes (every touch, kept or not).
    touches: usize,
    /// The earliest trigger time noted for this transaction's changes.
    trigger: Option<std::time::SystemTime>,
    writes: u64,
    noops: u64,
    committed: bool,
}

impl Txn<'_> {
    /// Sets `key` to `value`. Returns whether the stored value changed.
    ///
    /// # Errors
    /// [`Error::KindMismatch`] when the value's kind is not the key's, and
    /// [`Error::AddressMismatch`] when an endpoint's primary address is not
    /// its key's.
    pub fn set(&mut self, key: Key, value: Value) -> Result<bool> {
        if key.kind() != value.kind() {
            return Err(Error::KindMismatch {
                value: value.kind(),
                key,
            });
        }
        if let (Key::Endpoint(_, ip), Value::Endpoint(e)) = (&key, &value)
            && *ip != e.address()
        {
            return Err(Error::AddressMismatch {
                address: e.address(),
                key,
            });
        }
        Ok(self.write(key, value))
    }

    /// Sets a Service, keyed by its namespace and name; its addresses
    /// were typed when it was made ([`ServiceInfo::new`]).
    pub fn set_service(&mut self, service: ServiceInfo) -> bool {
        let key = Key::Service(service.service_name());
        self.write(key, Value::Service(Arc::new(service)))
    }

    /// Sets an endpoint of `service`, under its primary address.
    pub fn set_endpoint(&mut self, service: ServiceName, endpoint: EndpointInfo) -> bool {
        self.write(
            Key::Endpoint(service, endpoint.address()),
            Value::Endpoint(endpoint),
        )
    }

    /// Replaces every endpoint of `service` with `endpoints` (sorted by
    /// address, one per address): the same as one [`set`](Self::set) per
    /// endpoint that changed and one [`delete`](Self::delete) per endpoint
    /// that went, with one lookup of the Service for all. The store then
    /// shares the list with the caller. Returns how many changed.
    ///
    /// # Errors
    /// [`Error::Unsorted`] when the list is not sorted by address or holds
    /// an address twice; nothing is written then.
    pub fn replace_endpoints(
        &mut self,
        service: &ServiceName,
        endpoints: &Arc<Vec<EndpointInfo>>,
    ) -> Result<usize> {
        if let Some(pair) = endpoints
            .windows(2)
            .find(|w| w[0].address() >= w[1].address())
        {
            return Err(Error::Unsorted {
                service: service.clone(),
                address: pair[1].address(),
            });
        }
        let changed = self.store.state.replace_endpoints(service, endpoints);
        let count = changed.len();
        self.writes += count.max(1) as u64;
        self.noops += u64::from(count == 0);
        for ip in changed {
            self.touch(Key::Endpoint(service.clone(), ip));
        }
        Ok(count)
    }

    /// Sets a node, keyed by its name.
    pub fn set_node(&mut self, node: Node) -> bool {
        let key = Key::Node(node.name.as_str().into());
        self.write(key, Value::Node(Arc::new(node)))
    }

    /// Sets a ServiceCIDR, keyed by its name.
    pub fn set_service_cidr(&mut self, cidr: ServiceCidr) -> bool {
        let key = Key::ServiceCidr(cidr.name.as_str().into());
        self.write(key, Value::ServiceCidr(Arc::new(cidr)))
    }

    fn write(&mut self, key: Key, value: Value) -> bool {
        self.writes += 1;
        let touched = key.clone();
        if self.store.state.write(key, value) {
            self.touch(touched);
            true
        } else {
            self.noops += 1;
            false
        }
    }

    /// Deletes `key`. Returns whether it was present.
    pub fn delete(&mut self, key: &Key) -> bool {
        self.writes += 1;
        if self.store.state.remove(key) {
            self.touch(key.clone());
            true
        } else {
            self.noops += 1;
            false
        }
    }

    /// Applies ops, in order ([`Snapshot::diff`]'s): how a replica (an API
    /// client following a global watch) mirrors another store.
    ///
    /// # Errors
    /// [`Error::KindMismatch`] when a set pairs a key with a value of
    /// another kind; the ops before it stay applied in the transaction.
    pub fn apply<'o>(
        &mut self,
        ops: impl IntoIterator<Item = &'o MapOp<Key, Value>>,
    ) -> Result<()> {
        for op in ops {
            match op {
                MapOp::Set(k, v) => {
                    self.set(k.clone(), v.clone())?;
                }
                MapOp::Delete(k) => {
                    self.delete(k);
                }
            }
        }
        Ok(())
    }

    /// Deletes every entry of `kind` whose key `keep` rejects, and returns
    /// how many went. A source uses this after a relist, to drop what
    /// vanished while it was away. O(entries of that kind).
    pub fn retain(&mut self, kind: Kind, mut keep: impl FnMut(&Key) -> bool) -> usize {
        let doomed: Vec<Key> = self.store.state.keys(kind).filter(|k| !keep(k)).collect();
        for key in &doomed {
            self.delete(key);
        }
        doomed.len()
    }

    /// Notes that a write changed the value `key` held.
    fn touch(&mut self, key: Key) {
        self.touches += 1;
        if self.overflowed {
            return;
        }
        if self.touched.len() >= self.store.config.log_keys {
            // The log could not keep this revision's keys anyway.
            self.overflowed = true;
            self.touched = Vec::new();
            return;
        }
        self.touched.push(key);
    }

    /// Notes when the change this transaction writes was triggered (an
    /// EndpointSlice's `endpoints.kubernetes.io/last-change-trigger-time`).
    /// If it makes a revision, readers find the earliest such time of it
    /// with [`Reader::take_triggers`](crate::Reader::take_triggers): the
    /// start of kube-proxy's network programming latency.
    pub fn note_trigger(&mut self, at: std::time::SystemTime) {
        self.trigger = Some(self.trigger.map_or(at, |t| t.min(at)));
    }

    /// The value `key` holds in this transaction so far.
    pub fn get(&self, key: &Key) -> Option<Value> {
        self.store.state.get(key)
    }

    /// Commits: if any value changed, makes a new revision, records the
    /// changed keys in the change log and publishes the snapshot.
    pub fn commit(mut self) -> Commit {
        self.committed = true;
        // What changed: the keys, for the change log; or, for a
        // transaction that touched more than the log keeps, whether
        // anything did, found by comparing the state with the one before
        // (O(entries), as the relist that made it was). Readers spanning
        // such a revision walk the structures instead of the log.
        let (changed, keys) = if self.overflowed {
            let base = std::mem::take(&mut self.base);
            let same = base.same(&self.store.state);
            (if same { 0 } else { self.touches }, None)
        } else {
            let keys = self.changed_keys();
            (keys.len(), Some(keys))
        };
        let stats = &self.store.stats;
        stats.writes.fetch_add(self.writes, Ordering::Relaxed);
        stats.noop_writes.fetch_add(self.noops, Ordering::Relaxed);
        stats.transactions.fetch_add(1, Ordering::Relaxed);
        let revision = (changed > 0).then(|| {
            let store = &mut *self.store;
            store.stats.revisions.fetch_add(1, Ordering::Relaxed);
            store.revision += 1;
            match keys {
                Some(keys) => store.push_log(keys),
                None => store.clear_log(),
            }
            if let Some(at) = self.trigger {
                store.stats.triggered(store.revision, at);
            }
            store.publish();
            tracing::trace!(revision = store.revision, changed, "committed");
            store.revision
        });
        Commit {
            revision,
            changed,
            noop_writes: self.noops,
        }
    }

    /// The keys whose value differs from before the transaction, each
    /// once. Each touch changed the value it found, so a key touched once
    /// differs; only a key touched several times may have been set back,
    /// so only those are compared.
    fn changed_keys(&mut self) -> Vec<Key> {
        let mut touched = std::mem::take(&mut self.touched);
        touched.sort_unstable();
        let (mut kept, mut i) = (0, 0);
        while i < touched.len() {
            let mut j = i + 1;
            while j < touched.len() && touched[j] == touched[i] {
                j += 1;
            }
            let key = &touched[i];
            if j - i == 1 || !self.base.same_at(&self.store.state, key) {
                touched.swap(kept, i);
                kept += 1;
            }
            i = j;
        }
        touched.truncate(kept);
        touched
    }
}

impl Drop for Txn<'_> {
    fn drop(&mut self) {
        if !self.committed {
            self.store.state = std::mem::take(&mut self.base);
        }
    }
}
