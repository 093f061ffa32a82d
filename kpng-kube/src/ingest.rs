//! The ingest state machine: Kubernetes objects in, store transactions out.
//!
//! It keeps no Kubernetes object. Each object is translated at once; the
//! only index kept is what each EndpointSlice contributed (its Service and
//! its endpoints, sharing their allocations with the store), so that a
//! slice that changes or goes away can be merged out again.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use kpng_model::endpoint::Interner;
use kpng_model::{EndpointInfo, Key, Kind, ServiceName};
use kpng_store::{Reader, Store, Txn};

use kube::runtime::watcher::Event;

use crate::file::InputReport;
use crate::objects;
use crate::translate::{self, SliceContribution, TranslateConfig, TranslateError};

/// Settings of [`Ingest`].
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct IngestConfig {
    /// Translation settings (the proxy name).
    pub translate: TranslateConfig,
    /// Load a manifest that holds no Service, EndpointSlice or Node (an
    /// empty cluster). Off: such a manifest is refused
    /// ([`Error::Empty`](crate::Error::Empty)), as an empty or truncated
    /// file would otherwise delete every Service.
    pub allow_empty_input: bool,
    /// Told what each manifest read applied and skipped
    /// ([`IngestConfig::on_input_report`]).
    pub input_report: InputReporter,
}

/// What is told each manifest read's [`InputReport`] (see
/// [`IngestConfig::on_input_report`]); nothing by default.
#[derive(Clone, Default)]
pub struct InputReporter(Option<Arc<ReportFn>>);

/// A function told each [`InputReport`].
type ReportFn = dyn Fn(&InputReport) + Send + Sync;

impl std::fmt::Debug for InputReporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Some(..)" } else { "None" })
    }
}

impl IngestConfig {
    /// Loads manifests with no Service, EndpointSlice or Node when
    /// `allow` holds.
    pub fn allow_empty_input(mut self, allow: bool) -> Self {
        self.allow_empty_input = allow;
        self
    }

    /// Calls `report` after each manifest read that was applied, with what
    /// it applied and skipped ([`InputReport`]): for a readiness detail or
    /// a metric of the objects skipped. Not called for a read refused
    /// whole (the previous state, and its report, stand).
    pub fn on_input_report(
        mut self,
        report: impl Fn(&InputReport) + Send + Sync + 'static,
    ) -> Self {
        self.input_report = InputReporter(Some(Arc::new(report)));
        self
    }

    /// Sets the proxy name (`service.kubernetes.io/service-proxy-name`).
    pub fn with_proxy_name(mut self, name: impl Into<String>) -> Self {
        self.translate.proxy_name = Some(name.into());
        self
    }
}

/// Counters of an [`Ingest`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct IngestStats {
    /// Objects received: applies, deletes and relisted objects.
    pub events: u64,
    /// Events that made a new revision.
    pub revisions: u64,
    /// Objects that failed to translate (logged and skipped).
    pub errors: u64,
}

/// The identity of an EndpointSlice: `namespace/name`, in one allocation.
type SliceKey = Arc<str>;

fn slice_key(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> SliceKey {
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
    .into()
}

fn service_key(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Key {
    Key::Service(ServiceName::new(
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default(),
    ))
}

/// Relist buffers: what a relist has delivered so far, per kind.
#[derive(Default)]
pub(crate) struct Relists {
    services: Option<Vec<(Key, Option<kpng_model::ServiceInfo>)>>,
    slices: Option<HashMap<SliceKey, SliceContribution>>,
    nodes: Option<Vec<kpng_model::v1::Node>>,
    service_cidrs: Option<Vec<kpng_model::v1::ServiceCidr>>,
}

/// Fills a [`Store`] from Kubernetes objects, with kube-proxy's translation
/// rules. A new revision is made only when the ENLS really changes.
///
/// The methods take objects one at a time (as watch events bring them), or
/// as a whole list (`relist_*`), which replaces that kind's contents in one
/// transaction: what vanished is deleted, what did not change makes no
/// revision.
pub struct Ingest {
    store: Store,
    config: IngestConfig,
    index: SliceIndex,
    relists: Relists,
    stats: IngestStats,
    /// Shares node and zone names, port lists and hints across slices.
    interner: Interner,
    /// When this ingest began: earlier trigger times are not measured.
    started: std::time::SystemTime,
}

/// What each EndpointSlice contributed, and the slices of each Service.
#[derive(Default)]
struct SliceIndex {
    slices: HashMap<SliceKey, SliceContribution>,
    /// The slices of each Service (usually one: a Vec, not a set).
    /// A boxed slice, not a Vec: no growth slack, 16 bytes less an entry.
    by_service: HashMap<ServiceName, Box<[SliceKey]>>,
}

impl std::fmt::Debug for Ingest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ingest")
            .field("store", &self.store)
            .field("slices", &self.index.slices.len())
            .field("stats", &self.stats)
            .finish()
    }
}

impl Ingest {
    /// Ingest into `store`.
    pub fn new(store: Store, config: IngestConfig) -> Self {
        Self {
            store,
            config,
            index: SliceIndex::default(),
            relists: Relists::default(),
            stats: IngestStats::default(),
            interner: Interner::new(),
            started: std::time::SystemTime::now(),
        }
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The store, mutably (to mark extra kinds listed, for example).
    pub fn store_mut(&mut self) -> &mut Store {
        &mut self.store
    }

    /// A reader of the store.
    pub fn reader(&self) -> Reader {
        self.store.reader()
    }

    /// The counters so far.
    pub fn stats(&self) -> IngestStats {
        self.stats
    }

    /// Applies one watch event, as kube-runtime's `watcher` yields them
    /// (what a reflector's `apply_watcher_event` does for a cache):
    ///
    /// - `Apply` and `Delete` write the object's translation, or delete
    ///   it, in one transaction: a new revision only when the ENLS changes;
    /// - `Init` starts a relist of the object's kind, `InitApply` buffers
    ///   an object of it, and `InitDone` swaps the kind's contents for
    ///   what was listed in one transaction (what vanished is deleted) and
    ///   marks the kind listed.
    ///
    /// Returns the revision made, if any. An object that does not
    /// translate is counted ([`IngestStats::errors`]), logged and skipped.
    ///
    /// ```
    /// use kpng_kube::{Ingest, IngestConfig, objects::Service};
    /// use kube::runtime::watcher::Event;
    ///
    /// let mut ingest = Ingest::new(kpng_store::Store::new(), IngestConfig::default());
    /// let web: Service = serde_json::from_value(serde_json::json!({
    ///     "metadata": {"namespace": "default", "name": "web"},
    ///     "spec": {"clusterIP": "10.96.0.10", "ports": [{"name": "http", "port": 80}]}
    /// }))?;
    /// assert!(ingest.apply_watcher_event(&Event::Apply(web.clone())).is_some());
    /// assert!(ingest.apply_watcher_event(&Event::Apply(web)).is_none(), "no change, no revision");
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    pub fn apply_watcher_event<K: Watched>(&mut self, event: &Event<K>) -> Option<u64> {
        match event {
            Event::Apply(object) => object.apply(self),
            Event::Delete(object) => object.delete(self),
            Event::Init => {
                K::begin_relist(self);
                None
            }
            Event::InitApply(object) => {
                object.relisted(self);
                None
            }
            Event::InitDone => K::finish_relist(self),
        }
    }

    /// Replaces every object of `list`'s kind with `list`, as a relist
    /// does (`Init`, an `InitApply` each, `InitDone`): one transaction, and
    /// a revision only when something changed.
    pub fn relist<'a, K: Watched + 'a>(
        &mut self,
        list: impl IntoIterator<Item = &'a K>,
    ) -> Option<u64> {
        K::begin_relist(self);
        list.into_iter().for_each(|object| object.relisted(self));
        K::finish_relist(self)
    }

    fn count(&mut self, events: u64, revision: Option<u64>) -> Option<u64> {
        self.stats.events += events;
        if revision.is_some() {
            self.stats.revisions += 1;
        }
        revision
    }

    fn translate_error(&mut self, err: &TranslateError) {
        self.stats.errors += 1;
        tracing::warn!(error = %err, "skipping object that does not translate");
    }

    // ---- Services ----

    fn translate_service(
        &mut self,
        svc: &objects::Service,
    ) -> Result<Option<kpng_model::ServiceInfo>, ()> {
        translate::service(svc, &self.config.translate).map_err(|e| self.translate_error(&e))
    }

    /// A Service was created or changed. Returns the new revision, if any.
    pub(crate) fn apply_service(&mut self, svc: &objects::Service) -> Option<u64> {
        let revision = match self.translate_service(svc) {
            Ok(translated) => {
                let key = service_key(&svc.metadata);
                let mut txn = self.store.begin();
                write_service(&mut txn, key, translated);
                txn.commit().revision
            }
            Err(()) => None,
        };
        self.count(1, revision)
    }

    /// A Service was deleted.
    pub(crate) fn delete_service(&mut self, svc: &objects::Service) -> Option<u64> {
        let mut txn = self.store.begin();
        txn.delete(&service_key(&svc.metadata));
        let revision = txn.commit().revision;
        self.count(1, revision)
    }

    /// The translation settings.
    pub(crate) fn translate_config(&self) -> &TranslateConfig {
        &self.config.translate
    }

    /// Hands `report` to [`IngestConfig::on_input_report`]'s function.
    pub(crate) fn report_input(&self, report: &InputReport) {
        if let Some(report_to) = &self.config.input_report.0 {
            report_to(report);
        }
    }

    /// Whether a manifest with nothing the proxy reads may be loaded.
    pub(crate) fn allows_empty_input(&self) -> bool {
        self.config.allow_empty_input
    }

    /// Drops every relist in progress, applying nothing of it.
    pub(crate) fn abort_relists(&mut self) {
        self.relists = Relists::default();
    }

    /// A relist of Services starts: objects now go to a buffer until
    /// [`finish_service_relist`](Self::finish_service_relist).
    pub(crate) fn begin_service_relist(&mut self) {
        self.relists.services = Some(Vec::new());
    }

    /// One object of the relist in progress (or, outside a relist, an
    /// apply).
    pub(crate) fn relisted_service(&mut self, svc: &objects::Service) {
        if self.relists.services.is_none() {
            self.apply_service(svc);
            return;
        }
        self.stats.events += 1;
        let Ok(translated) = self.translate_service(svc) else {
            return;
        };
        if let Some(buffer) = self.relists.services.as_mut() {
            buffer.push((service_key(&svc.metadata), translated));
        }
    }

    /// The relist is complete: swap the Services' contents in one
    /// transaction and mark Services listed.
    pub(crate) fn finish_service_relist(&mut self) -> Option<u64> {
        let listed = self.relists.services.take().unwrap_or_default();
        let mut txn = self.store.begin();
        swap_services(&mut txn, listed);
        let revision = txn.commit().revision;
        self.store.mark_listed(Kind::Service);
        self.count(0, revision)
    }

    // ---- EndpointSlices ----

    fn translate_slice(
        &mut self,
        slice: &objects::EndpointSlice,
    ) -> Result<Option<SliceContribution>, ()> {
        translate::endpoint_slice(slice, &mut self.interner).map_err(|e| self.translate_error(&e))
    }

    /// An EndpointSlice was created or changed.
    pub(crate) fn apply_slice(&mut self, slice: &objects::EndpointSlice) -> Option<u64> {
        let trigger = self.trigger_time(&slice.metadata);
        let revision = match self.translate_slice(slice) {
            Ok(contribution) => {
                self.replace_slice(slice_key(&slice.metadata), contribution, trigger)
            }
            Err(()) => None,
        };
        self.count(1, revision)
    }

    /// When the change a slice carries was triggered, as its controller
    /// says: kept for the revision it makes, so a proxy can measure
    /// network programming latency as kube-proxy does. Times from before
    /// this ingest started are left out, as kube-proxy leaves them out.
    fn trigger_time(
        &self,
        meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    ) -> Option<std::time::SystemTime> {
        let text = meta
            .annotations
            .as_ref()?
            .get(crate::objects::LAST_CHANGE_TRIGGER_TIME)?;
        let at = std::time::SystemTime::from(text.parse::<k8s_openapi::jiff::Timestamp>().ok()?);
        (at >= self.started).then_some(at)
    }

    /// An EndpointSlice was deleted.
    pub(crate) fn delete_slice(&mut self, slice: &objects::EndpointSlice) -> Option<u64> {
        let revision = self.replace_slice(slice_key(&slice.metadata), None, None);
        self.count(1, revision)
    }

    /// A relist of EndpointSlices starts.
    pub(crate) fn begin_slice_relist(&mut self) {
        self.relists.slices = Some(HashMap::new());
    }

    /// One object of the relist in progress (or, outside a relist, an
    /// apply).
    pub(crate) fn relisted_slice(&mut self, slice: &objects::EndpointSlice) {
        if self.relists.slices.is_none() {
            self.apply_slice(slice);
            return;
        }
        self.stats.events += 1;
        let Ok(Some(contribution)) = self.translate_slice(slice) else {
            return;
        };
        if let Some(buffer) = self.relists.slices.as_mut() {
            buffer.insert(slice_key(&slice.metadata), contribution);
        }
    }

    /// The relist is complete: swap the endpoints in one transaction and
    /// mark endpoints listed.
    pub(crate) fn finish_slice_relist(&mut self) -> Option<u64> {
        let listed = self.relists.slices.take().unwrap_or_default();
        let mut txn = self.store.begin();
        self.index.swap(&mut txn, listed);
        let revision = txn.commit().revision;
        self.store.mark_listed(Kind::Endpoint);
        self.count(0, revision)
    }

    fn replace_slice(
        &mut self,
        key: SliceKey,
        contribution: Option<SliceContribution>,
        trigger: Option<std::time::SystemTime>,
    ) -> Option<u64> {
        let mut txn = self.store.begin();
        if let Some(at) = trigger {
            txn.note_trigger(at);
        }
        self.index.replace(&mut txn, key, contribution);
        txn.commit().revision
    }

    /// Completes every relist in progress in one transaction, so readers
    /// never see one kind relisted and another not yet (a file reload uses
    /// this). Marks the relisted kinds listed.
    pub fn finish_relists(&mut self) -> Option<u64> {
        let services = self.relists.services.take();
        let slices = self.relists.slices.take();
        let nodes = self.relists.nodes.take();
        let service_cidrs = self.relists.service_cidrs.take();
        let mut txn = self.store.begin();
        let mut listed = Vec::new();
        if let Some(nodes) = nodes {
            swap_named::<objects::Node>(&mut txn, nodes);
            listed.push(Kind::Node);
        }
        if let Some(cidrs) = service_cidrs {
            swap_named::<objects::ServiceCidr>(&mut txn, cidrs);
            listed.push(Kind::ServiceCidr);
        }
        if let Some(services) = services {
            swap_services(&mut txn, services);
            listed.push(Kind::Service);
        }
        if let Some(slices) = slices {
            self.index.swap(&mut txn, slices);
            listed.push(Kind::Endpoint);
        }
        let revision = txn.commit().revision;
        for kind in listed {
            self.store.mark_listed(kind);
        }
        self.count(0, revision)
    }

    // ---- Nodes and ServiceCIDRs: cluster objects kept by name ----

    /// A named object was created or changed.
    fn apply_named<T: Named>(&mut self, object: &T) -> Option<u64> {
        let revision = match object.translate() {
            Ok(entry) => {
                let mut txn = self.store.begin();
                T::set(&mut txn, entry);
                txn.commit().revision
            }
            Err(e) => {
                self.translate_error(&e);
                None
            }
        };
        self.count(1, revision)
    }

    /// A named object was deleted.
    fn delete_named<T: Named>(&mut self, object: &T) -> Option<u64> {
        let mut txn = self.store.begin();
        txn.delete(&T::key(object.name()));
        let revision = txn.commit().revision;
        self.count(1, revision)
    }

    /// A relist of a named kind starts.
    pub(crate) fn begin_named_relist<T: Named>(&mut self) {
        *T::buffer(&mut self.relists) = Some(Vec::new());
    }

    /// One object of the relist in progress (or, outside a relist, an
    /// apply).
    pub(crate) fn relisted_named<T: Named>(&mut self, object: &T) {
        if T::buffer(&mut self.relists).is_none() {
            self.apply_named(object);
            return;
        }
        self.stats.events += 1;
        match object.translate() {
            Ok(entry) => {
                if let Some(buffer) = T::buffer(&mut self.relists).as_mut() {
                    buffer.push(entry);
                }
            }
            Err(e) => self.translate_error(&e),
        }
    }

    /// The relist is complete: swap the kind's objects in one transaction
    /// and mark it listed.
    fn finish_named_relist<T: Named>(&mut self) -> Option<u64> {
        let listed = T::buffer(&mut self.relists).take().unwrap_or_default();
        let mut txn = self.store.begin();
        swap_named::<T>(&mut txn, listed);
        let revision = txn.commit().revision;
        self.store.mark_listed(T::KIND);
        self.count(0, revision)
    }
}

impl SliceIndex {
    /// Replaces one slice's contribution (`None`: the slice is gone or
    /// ignored now) and rewrites the Services it touches, in `txn`.
    fn replace(
        &mut self,
        txn: &mut Txn<'_>,
        key: SliceKey,
        contribution: Option<SliceContribution>,
    ) {
        // The common case: a slice updated in place, still of its Service.
        if let Some(new) = contribution.as_ref()
            && let Some(old) = self.slices.get_mut(&key)
            && old.service == new.service
        {
            let service = new.service.clone();
            if let Some(new) = contribution {
                *old = new;
            }
            self.write_service(txn, &service);
            return;
        }
        let mut affected = BTreeSet::new();
        if let Some(old) = self.slices.remove(&key) {
            if let Some(keys) = self.by_service.get_mut(&old.service) {
                *keys = keys.iter().filter(|k| **k != key).cloned().collect();
                if keys.is_empty() {
                    self.by_service.remove(&old.service);
                }
            }
            affected.insert(old.service);
        }
        if let Some(new) = contribution {
            affected.insert(new.service.clone());
            self.link(&new.service, &key);
            self.slices.insert(key, new);
        }
        self.write(txn, affected);
    }

    /// Replaces every slice with `listed` (a relist), in `txn`.
    fn swap(&mut self, txn: &mut Txn<'_>, listed: HashMap<SliceKey, SliceContribution>) {
        let mut affected: BTreeSet<ServiceName> = self.by_service.keys().cloned().collect();
        self.slices = listed;
        self.by_service.clear();
        let links: Vec<(ServiceName, SliceKey)> = self
            .slices
            .iter()
            .map(|(key, c)| (c.service.clone(), key.clone()))
            .collect();
        for (service, key) in links {
            self.link(&service, &key);
            affected.insert(service);
        }
        // A relist buffer grew one insert at a time: give back the slack.
        self.slices.shrink_to_fit();
        self.by_service.shrink_to_fit();
        self.write(txn, affected);
    }

    /// Records that slice `key` belongs to `service`, keeping each Service's
    /// slices sorted by name (the merge order).
    fn link(&mut self, service: &ServiceName, key: &SliceKey) {
        let keys = self.by_service.entry(service.clone()).or_default();
        if let Err(i) = keys.binary_search(key) {
            let mut grown = std::mem::take(keys).into_vec();
            grown.insert(i, key.clone());
            *keys = grown.into_boxed_slice();
        }
    }

    /// Writes the merged endpoints of each Service: those no slice holds
    /// any more go.
    fn write(&self, txn: &mut Txn<'_>, services: BTreeSet<ServiceName>) {
        for service in services {
            self.write_service(txn, &service);
        }
    }

    fn write_service(&self, txn: &mut Txn<'_>, service: &ServiceName) {
        let endpoints = self.merge(service);
        if let Err(error) = txn.replace_endpoints(service, &endpoints) {
            // Not reached: slices are sorted and merged by address.
            tracing::error!(%error, "endpoints not written");
        }
    }

    /// The endpoints of a Service across its slices, sorted by address,
    /// one per address: an address that several slices list is one
    /// endpoint with its copies, in slice-name order
    /// ([`EndpointInfo::fold`]); which copy a node uses is the node view's
    /// choice (the copy on that node), not the ingest's.
    fn merge(&self, service: &ServiceName) -> Arc<Vec<EndpointInfo>> {
        let keys = self.by_service.get(service).map_or(&[][..], |k| &k[..]);
        if let [only] = keys {
            // One slice (the common case): already sorted and folded.
            return match self.slices.get(only) {
                Some(c) => c.endpoints.clone(),
                None => Arc::default(),
            };
        }
        // Every slice's endpoints in slice order; a stable sort by address
        // keeps the copies of one address in that order.
        let mut all: Vec<EndpointInfo> = keys
            .iter()
            .filter_map(|key| self.slices.get(key))
            .flat_map(|c| c.endpoints.iter().cloned())
            .collect();
        all.sort_by_key(EndpointInfo::address);
        Arc::new(translate::fold_copies(all))
    }
}

/// Replaces every Service with `listed`, in `txn`.
fn swap_services(txn: &mut Txn<'_>, listed: Vec<(Key, Option<kpng_model::ServiceInfo>)>) {
    let mut keep = BTreeSet::new();
    for (key, translated) in listed {
        if translated.is_some() {
            keep.insert(key.clone());
        }
        write_service(txn, key, translated);
    }
    txn.retain(Kind::Service, |k| keep.contains(k));
}

/// Replaces every object of `T`'s kind with `listed`, in `txn`: sets
/// each (no revision for what did not change) and deletes the ones not
/// listed.
fn swap_named<T: Named>(txn: &mut Txn<'_>, listed: Vec<T::Entry>) {
    let keep: BTreeSet<Key> = listed.iter().map(T::entry_key).collect();
    for entry in listed {
        T::set(txn, entry);
    }
    txn.retain(T::KIND, |k| keep.contains(k));
}

/// A cluster object the store keeps by name (Nodes, ServiceCIDRs): what
/// differs between them, for the steps they share.
pub(crate) trait Named {
    /// What the store holds.
    type Entry;
    /// Its kind.
    const KIND: Kind;
    /// Its name.
    fn name(&self) -> &str;
    /// What the store holds for it.
    fn translate(&self) -> Result<Self::Entry, TranslateError>;
    /// The key of a name.
    fn key(name: &str) -> Key;
    /// The key of a stored entry.
    fn entry_key(entry: &Self::Entry) -> Key;
    /// Stores an entry.
    fn set(txn: &mut Txn<'_>, entry: Self::Entry);
    /// The relist buffer of the kind.
    fn buffer(relists: &mut Relists) -> &mut Option<Vec<Self::Entry>>;
}

impl Named for objects::Node {
    type Entry = kpng_model::v1::Node;
    const KIND: Kind = Kind::Node;
    fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }
    fn translate(&self) -> Result<Self::Entry, TranslateError> {
        translate::node(self)
    }
    fn key(name: &str) -> Key {
        Key::Node(name.into())
    }
    fn entry_key(entry: &Self::Entry) -> Key {
        Self::key(&entry.name)
    }
    fn set(txn: &mut Txn<'_>, entry: Self::Entry) {
        txn.set_node(entry);
    }
    fn buffer(relists: &mut Relists) -> &mut Option<Vec<Self::Entry>> {
        &mut relists.nodes
    }
}

impl Named for objects::ServiceCidr {
    type Entry = kpng_model::v1::ServiceCidr;
    const KIND: Kind = Kind::ServiceCidr;
    fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }
    fn translate(&self) -> Result<Self::Entry, TranslateError> {
        translate::service_cidr(self)
    }
    fn key(name: &str) -> Key {
        Key::ServiceCidr(name.into())
    }
    fn entry_key(entry: &Self::Entry) -> Key {
        Self::key(&entry.name)
    }
    fn set(txn: &mut Txn<'_>, entry: Self::Entry) {
        txn.set_service_cidr(entry);
    }
    fn buffer(relists: &mut Relists) -> &mut Option<Vec<Self::Entry>> {
        &mut relists.service_cidrs
    }
}

fn write_service(txn: &mut Txn<'_>, key: Key, translated: Option<kpng_model::ServiceInfo>) {
    match translated {
        Some(service) => {
            txn.set_service(service);
        }
        // Headless, ExternalName or another proxy's: it holds no state.
        None => {
            txn.delete(&key);
        }
    }
}

/// A Kubernetes object the ingest reads from watch events: the lean
/// [`objects`] (Services, EndpointSlices, Nodes, ServiceCIDRs). Sealed:
/// the ENLS knows these kinds only.
pub trait Watched: sealed::Sealed {
    #[doc(hidden)]
    fn apply(&self, ingest: &mut Ingest) -> Option<u64>;
    #[doc(hidden)]
    fn delete(&self, ingest: &mut Ingest) -> Option<u64>;
    #[doc(hidden)]
    fn begin_relist(ingest: &mut Ingest);
    #[doc(hidden)]
    fn relisted(&self, ingest: &mut Ingest);
    #[doc(hidden)]
    fn finish_relist(ingest: &mut Ingest) -> Option<u64>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for crate::objects::Service {}
    impl Sealed for crate::objects::EndpointSlice {}
    impl Sealed for crate::objects::Node {}
    impl Sealed for crate::objects::ServiceCidr {}
}

/// Implements [`Watched`] for a kind with its five ingest methods.
macro_rules! watched {
    ($ty:ty, $apply:ident, $delete:ident, $begin:ident, $relisted:ident, $finish:ident) => {
        impl Watched for $ty {
            fn apply(&self, ingest: &mut Ingest) -> Option<u64> {
                ingest.$apply(self)
            }
            fn delete(&self, ingest: &mut Ingest) -> Option<u64> {
                ingest.$delete(self)
            }
            fn begin_relist(ingest: &mut Ingest) {
                ingest.$begin();
            }
            fn relisted(&self, ingest: &mut Ingest) {
                ingest.$relisted(self);
            }
            fn finish_relist(ingest: &mut Ingest) -> Option<u64> {
                ingest.$finish()
            }
        }
    };
}

watched!(
    objects::Service,
    apply_service,
    delete_service,
    begin_service_relist,
    relisted_service,
    finish_service_relist
);
watched!(
    objects::EndpointSlice,
    apply_slice,
    delete_slice,
    begin_slice_relist,
    relisted_slice,
    finish_slice_relist
);
/// Implements [`Watched`] for a kind kept by name ([`Named`]).
macro_rules! watched_by_name {
    ($ty:ty) => {
        impl Watched for $ty {
            fn apply(&self, ingest: &mut Ingest) -> Option<u64> {
                ingest.apply_named(self)
            }
            fn delete(&self, ingest: &mut Ingest) -> Option<u64> {
                ingest.delete_named(self)
            }
            fn begin_relist(ingest: &mut Ingest) {
                ingest.begin_named_relist::<$ty>();
            }
            fn relisted(&self, ingest: &mut Ingest) {
                ingest.relisted_named(self);
            }
            fn finish_relist(ingest: &mut Ingest) -> Option<u64> {
                ingest.finish_named_relist::<$ty>()
            }
        }
    };
}

watched_by_name!(objects::Node);
watched_by_name!(objects::ServiceCidr);
