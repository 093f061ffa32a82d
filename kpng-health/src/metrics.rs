//! Prometheus metrics of a kpng-rs proxy, named after kube-proxy's where
//! the meaning is the same (prometheus-client, OpenMetrics text).
//!
//! | metric | meaning |
//! |---|---|
//! | `kubeproxy_sync_proxy_rules_duration_seconds` | histogram of sync durations |
//! | `kubeproxy_sync_full_proxy_rules_duration_seconds`, `kubeproxy_sync_partial_proxy_rules_duration_seconds` | the same, per kind of sync |
//! | `kubeproxy_sync_proxy_rules_last_timestamp_seconds` | the last successful sync |
//! | `kubeproxy_network_programming_duration_seconds` | from an EndpointSlice change's `last-change-trigger-time` to the sync that applied it (with [`Measure::with_store`]; else from a change reaching the proxy) |
//! | `kpng_sync_failures_total` | failed syncs |
//! | `kpng_services`, `kpng_endpoints` | in this node's view |
//! | `kpng_store_writes_total`, `kpng_store_noop_writes_total`, `kpng_revisions_total` | ingest: API events written, those that changed nothing, and revisions made |
//! | `kpng_aggregator_transactions_total` | kernel transactions of an aggregator |
//! | `kpng_sync_held_back` | 1 while a mass deletion is held back (the previous state kept), else 0 |
//! | `kpng_mass_deletions_held_total` | mass deletions held back (each hold once) |
//! | `kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds` | when a change last queued a sync (the first change after a sync) |
//! | `kubeproxy_sync_proxy_rules_service_changes_pending`, `kubeproxy_sync_proxy_rules_endpoint_changes_pending` | Service and endpoint changes reaching the backend and not yet synced |
//! | `kubeproxy_sync_proxy_rules_service_changes_total`, `kubeproxy_sync_proxy_rules_endpoint_changes_total` | every such change |
//! | `kubeproxy_sync_proxy_rules_nftables_sync_failures_total`, `kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total` | failed syncs in nftables mode ([`Metrics::for_mode`]); kpng has no separate cleanup, so the second stays 0 |
//! | `kubeproxy_sync_proxy_rules_iptables_restore_failures_total` | failed syncs (restores) in iptables mode |
//! | `kubeproxy_sync_proxy_rules_no_local_endpoints_total{traffic_policy, ip_family}` | Service ports with a Local policy (`internal`, `external`) and no local endpoint, per family (`IPv4`, `IPv6`) |
//! | `process_cpu_seconds_total`, `process_resident_memory_bytes`, `process_virtual_memory_bytes`, `process_open_fds`, `process_max_fds`, `process_start_time_seconds` | the process collector's, from `/proc/self` at each scrape |
//!
//! [`serve_metrics`] also answers kube-proxy's `/configz` (the effective
//! configuration, [`Metrics::set_configz`]) and `/proxyMode` (the mode, as
//! text).

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use kpng_model::view::{EndpointView, ServiceView};
use kpng_sink::{Hook, Round, Sink, SinkError, SinkExt, With};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

struct Inner {
    registry: Registry,
    sync: Histogram,
    full: Histogram,
    partial: Histogram,
    last_sync: Gauge<f64, AtomicU64>,
    programming: Histogram,
    failures: Counter,
    services: Gauge,
    endpoints: Gauge,
    writes: Counter,
    noop_writes: Counter,
    revisions: Counter,
    transactions: Counter,
    held_back: Gauge,
    holds: Counter,
    /// What was counted of the store's and the aggregator's totals.
    seen: Mutex<(kpng_store::Stats, u64)>,
    /// kube-proxy's other metrics, `/configz` and `/proxyMode`.
    kube: KubeProxy,
}

/// The metrics of one proxy. Cloning shares them.
#[derive(Clone)]
pub struct Metrics(Arc<Inner>);

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

fn seconds() -> Histogram {
    // 1 ms to ~65 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

impl Metrics {
    /// Registers every metric (but the failure counters of a mode: see
    /// [`for_mode`](Self::for_mode)).
    pub fn new() -> Self {
        Self::build(None)
    }

    /// Registers every metric, with kube-proxy's failure counters of
    /// `mode` (`nftables` or `iptables`), as kube-proxy registers those of
    /// its mode only.
    pub fn for_mode(mode: ProxyMode) -> Self {
        Self::build(Some(mode))
    }

    fn build(mode: Option<ProxyMode>) -> Self {
        let mut registry = Registry::default();
        let (sync, full, partial, programming) = (seconds(), seconds(), seconds(), seconds());
        let last_sync = Gauge::<f64, AtomicU64>::default();
        let (failures, writes, noop_writes, revisions, transactions) = Default::default();
        let (services, endpoints) = (Gauge::default(), Gauge::default());
        let (held_back, holds) = (Gauge::default(), Counter::default());
        registry.register(
            "kubeproxy_sync_proxy_rules_duration_seconds",
            "Sync latency of the proxy rules",
            sync.clone(),
        );
        registry.register(
            "kubeproxy_sync_full_proxy_rules_duration_seconds",
            "Latency of full syncs of the proxy rules",
            full.clone(),
        );
        registry.register(
            "kubeproxy_sync_partial_proxy_rules_duration_seconds",
            "Latency of partial syncs of the proxy rules",
            partial.clone(),
        );
        registry.register(
            "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
            "The last time the proxy rules were synced",
            last_sync.clone(),
        );
        registry.register(
            "kubeproxy_network_programming_duration_seconds",
            "From a change reaching the proxy to its rules being applied",
            programming.clone(),
        );
        registry.register(
            "kpng_sync_failures",
            "Failed syncs of the proxy rules",
            Counter::clone(&failures),
        );
        registry.register(
            "kpng_services",
            "Services in this node's view",
            Gauge::clone(&services),
        );
        registry.register(
            "kpng_endpoints",
            "Endpoint addresses in this node's view",
            Gauge::clone(&endpoints),
        );
        registry.register(
            "kpng_store_writes",
            "API events written to the store",
            Counter::clone(&writes),
        );
        registry.register(
            "kpng_store_noop_writes",
            "API events that changed nothing",
            Counter::clone(&noop_writes),
        );
        registry.register(
            "kpng_revisions",
            "Revisions of the store",
            Counter::clone(&revisions),
        );
        registry.register(
            "kpng_aggregator_transactions",
            "Kernel transactions of the aggregator",
            Counter::clone(&transactions),
        );
        registry.register(
            "kpng_sync_held_back",
            "Whether a mass deletion is held back, the previous state kept (1) or not (0)",
            Gauge::clone(&held_back),
        );
        registry.register(
            "kpng_mass_deletions_held",
            "Mass deletions held back",
            Counter::clone(&holds),
        );
        let kube = KubeProxy::register(&mut registry, mode);
        Self(Arc::new(Inner {
            registry,
            sync,
            full,
            partial,
            last_sync,
            programming,
            failures,
            services,
            endpoints,
            writes,
            noop_writes,
            revisions,
            transactions,
            held_back,
            holds,
            seen: Mutex::new((kpng_store::Stats::default(), 0)),
            kube,
        }))
    }

    /// Counts the store's totals so far (call before each scrape).
    pub fn observe_store(&self, stats: kpng_store::Stats) {
        if let Ok(mut seen) = self.0.seen.lock() {
            let before = seen.0;
            self.0
                .writes
                .inc_by(stats.writes.saturating_sub(before.writes));
            self.0
                .noop_writes
                .inc_by(stats.noop_writes.saturating_sub(before.noop_writes));
            self.0
                .revisions
                .inc_by(stats.revisions.saturating_sub(before.revisions));
            seen.0 = stats;
        }
    }

    /// Counts an aggregator's transactions so far.
    pub fn observe_aggregator(&self, transactions: u64) {
        if let Ok(mut seen) = self.0.seen.lock() {
            self.0
                .transactions
                .inc_by(transactions.saturating_sub(seen.1));
            seen.1 = transactions;
        }
    }

    /// Whether a mass deletion is held back now; each hold that starts
    /// is counted once.
    pub fn held_back(&self, held: bool) {
        let was = self.0.held_back.set(i64::from(held)) != 0;
        if held && !was {
            self.0.holds.inc();
        }
    }

    /// Serves `config` (kube-proxy's shape: `{"kubeproxy.config.k8s.io":
    /// {…}}`) on `/configz`.
    pub fn set_configz(&self, config: serde_json::Value) {
        if let Ok(mut c) = self.0.kube.configz.lock() {
            *c = Some(config);
        }
    }

    /// Serves `mode` (`nftables`, `iptables`, `ebpf`) on `/proxyMode`.
    pub fn set_proxy_mode(&self, mode: &str) {
        if let Ok(mut m) = self.0.kube.proxy_mode.lock() {
            *m = Some(mode.to_owned());
        }
    }

    /// The OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.0.registry);
        out
    }
}

/// A [`Hook`] that measures its sink's rounds into [`Metrics`]: it times
/// them (full or partial), counts failures, the changes each round
/// brings (kube-proxy's Service and endpoint change counters), the
/// network programming latency, and keeps the Service and endpoint
/// gauges of the view synced and kube-proxy's count of Local Service
/// ports without a local endpoint. Put it around any sink with
/// [`SinkExt::with`], or
/// [`MeasuredExt::measured`].
///
/// What it counts comes from the rounds: a Service whose definition
/// changed (set or removed) is one Service change, and each endpoint set
/// or removed between a Service's view before and after is one endpoint
/// change (a removed Service's endpoints go with it, uncounted). The
/// full round that retries a failed one counts nothing again: its
/// changes are still pending. The gauges and the Local counts follow
/// what changed; a full round counts them over again.
///
/// ```
/// use kpng_health::metrics::{Measure, Metrics};
/// use kpng_model::view::NodeView;
/// use kpng_sink::{Round, Sink, SinkError, SinkExt};
///
/// struct Backend;
/// impl Sink for Backend {
///     fn sync(&mut self, _: &Round<'_>) -> Result<(), SinkError> {
///         Ok(())
///     }
/// }
///
/// let metrics = Metrics::new();
/// let mut sink = Backend.with(Measure::new(metrics.clone()));
/// sink.sync(&Round::full(&NodeView::default()))?;
/// assert!(metrics.encode().contains("kubeproxy_sync_full_proxy_rules_duration_seconds_count 1"));
/// # Ok::<(), SinkError>(())
/// ```
#[derive(Debug)]
pub struct Measure {
    metrics: Metrics,
    /// When the current round began (set in `before`).
    sync_started: Option<Instant>,
    /// When the first change not yet applied reached the sink.
    round_started: Option<Instant>,
    /// The last round failed: the next full one retries its changes.
    retrying: bool,
    /// The endpoints of the view last synced.
    endpoints: usize,
    /// The Service ports with a Local policy and no local endpoint
    /// ([`no_local_endpoints`]) of the view last synced, summed: each
    /// round takes a changed Service's count before it away, and adds
    /// its count after.
    no_local_total: NoLocal,
    /// The store the synced revisions come from: their trigger times.
    store: Option<kpng_store::Reader>,
}

/// Service ports without a local endpoint, per policy (internal,
/// external) and family (IPv4, IPv6).
type NoLocal = [[i64; 2]; 2];

impl Measure {
    /// Measures into `metrics`.
    pub fn new(metrics: Metrics) -> Self {
        Self {
            metrics,
            sync_started: None,
            round_started: None,
            retrying: false,
            endpoints: 0,
            no_local_total: NoLocal::default(),
            store: None,
        }
    }

    /// Measures network programming latency as kube-proxy does, from the
    /// trigger time each EndpointSlice change carries (kept by the store
    /// for the revision it made, [`kpng_store::Reader::take_triggers`]) to
    /// the round that applied it. Without a store (an agent, a file), from
    /// the first round bringing a change not yet applied.
    #[must_use]
    pub fn with_store(mut self, store: kpng_store::Reader) -> Self {
        self.store = Some(store);
        self
    }

    /// Counts the changes of `round` into kube-proxy's change counters.
    fn count_changes(&self, round: &Round<'_>) {
        let kube = &self.metrics.0.kube;
        let (mut services, mut endpoints) = (0u64, 0u64);
        for change in round.services() {
            let (before, after) = (change.before, change.after);
            if before.map(|v| &v.service) != after.map(|v| &v.service) {
                services += 1;
            }
            if let Some(after) = after {
                let before = before.map_or(&[][..], |v| &v.endpoints[..]);
                endpoints += endpoint_changes(before, &after.endpoints);
            }
        }
        kube.changed(services, endpoints);
    }

    /// Follows the gauges and the Local counts after `round` succeeded.
    fn count_view(&mut self, round: &Round<'_>) {
        let view = round.view();
        if round.is_full() {
            self.endpoints = 0;
            self.no_local_total = NoLocal::default();
        }
        for change in round.services() {
            if let Some(before) = change.before {
                self.endpoints = self.endpoints.saturating_sub(before.endpoints.len());
            }
            if let Some(before) = change.before {
                add(&mut self.no_local_total, &no_local_endpoints(before), -1);
            }
            if let Some(after) = change.after {
                self.endpoints += after.endpoints.len();
                add(&mut self.no_local_total, &no_local_endpoints(after), 1);
            }
        }
        let m = &self.metrics.0;
        m.services
            .set(i64::try_from(view.services.len()).unwrap_or(i64::MAX));
        m.endpoints
            .set(i64::try_from(self.endpoints).unwrap_or(i64::MAX));
        m.kube.set_no_local(&self.no_local_total);
    }
}

/// Adds `counts` times `sign` to `total`.
fn add(total: &mut NoLocal, counts: &NoLocal, sign: i64) {
    for (t, c) in total.iter_mut().zip(counts) {
        for (t, c) in t.iter_mut().zip(c) {
            *t += sign * c;
        }
    }
}

/// The endpoints set (new or changed) or removed from `before` to
/// `after`, both sorted by address.
fn endpoint_changes(before: &[EndpointView], after: &[EndpointView]) -> u64 {
    let (mut i, mut j, mut changes) = (0, 0, 0);
    loop {
        match (before.get(i), after.get(j)) {
            (None, None) => return changes,
            (Some(o), Some(n)) if o.ip() == n.ip() => {
                changes += u64::from(o != n);
                i += 1;
                j += 1;
            }
            (Some(o), Some(n)) if o.ip() < n.ip() => {
                changes += 1;
                i += 1;
            }
            (Some(_), None) => {
                changes += 1;
                i += 1;
            }
            (_, Some(_)) => {
                changes += 1;
                j += 1;
            }
        }
    }
}

impl<S: ?Sized> Hook<S> for Measure {
    fn before(&mut self, round: &Round<'_>) {
        if round.is_full() || !round.is_empty() {
            // The first change since the last sync queues one.
            if self.round_started.is_none() {
                self.metrics.0.kube.queued();
                self.round_started = Some(Instant::now());
            }
            if !(round.is_full() && self.retrying) {
                self.count_changes(round);
            }
        }
        self.sync_started = Some(Instant::now());
    }

    fn after(&mut self, _: &S, round: &Round<'_>, result: &Result<(), SinkError>) {
        let elapsed = self
            .sync_started
            .take()
            .map_or(0.0, |start| start.elapsed().as_secs_f64());
        let m = &self.metrics.0;
        m.sync.observe(elapsed);
        if round.is_full() { &m.full } else { &m.partial }.observe(elapsed);
        if result.is_err() {
            self.retrying = true;
            m.failures.inc();
            m.kube.failed();
            return;
        }
        self.retrying = false;
        m.last_sync.set(now_seconds());
        let started = self.round_started.take();
        match &self.store {
            Some(store) => {
                let applied = SystemTime::now();
                for at in store.take_triggers(round.revision()) {
                    let latency = applied.duration_since(at).unwrap_or_default();
                    m.programming.observe(latency.as_secs_f64());
                }
            }
            None => {
                if let Some(started) = started {
                    m.programming.observe(started.elapsed().as_secs_f64());
                }
            }
        }
        m.kube.synced();
        self.count_view(round);
    }
}

/// Puts a [`Measure`] around any sink: `sink.measured(metrics)` is
/// `sink.with(Measure::new(metrics))`.
pub trait MeasuredExt: Sink + Sized {
    /// Measures this sink's rounds into `metrics`.
    fn measured(self, metrics: Metrics) -> With<Self, Measure> {
        self.with(Measure::new(metrics))
    }
}

impl<S: Sink> MeasuredExt for S {}

/// Serves `GET /metrics` on `listener` until the task is dropped; `store`
/// (when given) is read at each scrape for the ingest counters.
pub async fn serve_metrics(
    listener: TcpListener,
    metrics: Metrics,
    store: Option<kpng_store::Reader>,
) {
    crate::http::serve(listener, move |path| {
        match path {
            "/metrics" => {}
            "/configz" => return metrics.0.kube.configz_reply(),
            "/proxyMode" => return metrics.0.kube.proxy_mode_reply(),
            _ => return crate::http::Reply::not_found(),
        }
        if let Some(store) = &store {
            metrics.observe_store(store.stats());
        }
        crate::http::Reply {
            status: 200,
            content_type: "application/openmetrics-text; version=1.0.0; charset=utf-8",
            body: metrics.encode(),
        }
    })
    .await;
}

/// A kube-proxy mode whose failure counters are registered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyMode {
    /// `kubeproxy_sync_proxy_rules_nftables_sync_failures_total` and
    /// `…_nftables_cleanup_failures_total`.
    Nftables,
    /// `kubeproxy_sync_proxy_rules_iptables_restore_failures_total`.
    Iptables,
}

/// A label set of one pair.
type Label = [(&'static str, &'static str); 1];
/// A label set of two pairs.
type Labels2 = [(&'static str, &'static str); 2];

/// kube-proxy's metrics beyond the sync timings, and what `/configz` and
/// `/proxyMode` answer.
struct KubeProxy {
    last_queued: Gauge<f64, AtomicU64>,
    service_pending: Gauge,
    endpoint_pending: Gauge,
    service_total: Counter,
    endpoint_total: Counter,
    /// The mode's failure counter (none without a mode).
    failures: Option<Family<Label, Counter>>,
    no_local: Family<Labels2, Gauge>,
    configz: Mutex<Option<serde_json::Value>>,
    proxy_mode: Mutex<Option<String>>,
}

impl KubeProxy {
    fn register(registry: &mut Registry, mode: Option<ProxyMode>) -> Self {
        let this = Self {
            last_queued: Gauge::default(),
            service_pending: Gauge::default(),
            endpoint_pending: Gauge::default(),
            service_total: Counter::default(),
            endpoint_total: Counter::default(),
            failures: mode.map(|_| Family::default()),
            no_local: Family::default(),
            configz: Mutex::new(None),
            proxy_mode: Mutex::new(None),
        };
        registry.register(
            "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
            "The last time a sync of proxy rules was queued",
            this.last_queued.clone(),
        );
        registry.register(
            "kubeproxy_sync_proxy_rules_service_changes_pending",
            "Pending proxy rules Service changes",
            this.service_pending.clone(),
        );
        registry.register(
            "kubeproxy_sync_proxy_rules_endpoint_changes_pending",
            "Pending proxy rules Endpoint changes",
            this.endpoint_pending.clone(),
        );
        registry.register(
            "kubeproxy_sync_proxy_rules_service_changes",
            "Cumulative proxy rules Service changes",
            this.service_total.clone(),
        );
        registry.register(
            "kubeproxy_sync_proxy_rules_endpoint_changes",
            "Cumulative proxy rules Endpoint changes",
            this.endpoint_total.clone(),
        );
        registry.register(
            "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
            "Number of services with a Local traffic policy and no endpoints",
            this.no_local.clone(),
        );
        // Each family's counter from the start, at 0.
        let families = |family: &Family<Label, Counter>| {
            for f in ["IPv4", "IPv6"] {
                let _ = family.get_or_create(&[("ip_family", f)]);
            }
        };
        if let Some(failures) = &this.failures {
            families(failures);
        }
        match (mode, &this.failures) {
            (Some(ProxyMode::Nftables), Some(failures)) => {
                let cleanup = Family::<Label, Counter>::default();
                families(&cleanup);
                registry.register(
                    "kubeproxy_sync_proxy_rules_nftables_sync_failures",
                    "Cumulative proxy nftables sync failures",
                    failures.clone(),
                );
                // kpng removes stale objects in the sync's own transaction.
                registry.register(
                    "kubeproxy_sync_proxy_rules_nftables_cleanup_failures",
                    "Cumulative proxy nftables cleanup failures",
                    cleanup,
                );
            }
            (Some(ProxyMode::Iptables), Some(failures)) => registry.register(
                "kubeproxy_sync_proxy_rules_iptables_restore_failures",
                "Cumulative proxy iptables restore failures",
                failures.clone(),
            ),
            _ => {}
        }
        registry.register_collector(Box::new(Process));
        this
    }

    /// Changes reaching the backend: `services` Service changes and
    /// `endpoints` endpoint changes.
    fn changed(&self, services: u64, endpoints: u64) {
        self.service_total.inc_by(services);
        self.service_pending
            .inc_by(i64::try_from(services).unwrap_or(i64::MAX));
        self.endpoint_total.inc_by(endpoints);
        self.endpoint_pending
            .inc_by(i64::try_from(endpoints).unwrap_or(i64::MAX));
    }

    fn queued(&self) {
        self.last_queued.set(now_seconds());
    }

    fn synced(&self) {
        self.service_pending.set(0);
        self.endpoint_pending.set(0);
    }

    fn failed(&self) {
        if let Some(failures) = &self.failures {
            for family in ["IPv4", "IPv6"] {
                failures.get_or_create(&[("ip_family", family)]).inc();
            }
        }
    }

    /// Sets the counts of Service ports with a Local policy and no local
    /// endpoint, per policy and family.
    fn set_no_local(&self, counts: &NoLocal) {
        for (p, policy) in ["internal", "external"].into_iter().enumerate() {
            for (f, family) in ["IPv4", "IPv6"].into_iter().enumerate() {
                self.no_local
                    .get_or_create(&[("traffic_policy", policy), ("ip_family", family)])
                    .set(counts[p][f]);
            }
        }
    }

    fn configz_reply(&self) -> crate::http::Reply {
        match self.configz.lock().ok().and_then(|c| c.clone()) {
            Some(config) => crate::http::Reply::json(200, &config),
            None => crate::http::Reply::not_found(),
        }
    }

    fn proxy_mode_reply(&self) -> crate::http::Reply {
        match self.proxy_mode.lock().ok().and_then(|m| m.clone()) {
            Some(mode) => crate::http::Reply {
                status: 200,
                content_type: "text/plain; charset=utf-8",
                body: mode,
            },
            None => crate::http::Reply::not_found(),
        }
    }
}

/// One Service's ports with a Local policy and no local endpoint, per
/// policy and family, as kube-proxy counts them at each sync. Only a
/// Service with a Local policy is planned.
fn no_local_endpoints(svc: &ServiceView) -> NoLocal {
    use kpng_model::IpFamily;
    use kpng_model::v1::TrafficPolicy;
    let mut counts = NoLocal::default();
    let s = &svc.service;
    if s.internal_traffic_policy() != TrafficPolicy::Local
        && s.external_traffic_policy() != TrafficPolicy::Local
    {
        return counts;
    }
    for (f, family) in [IpFamily::V4, IpFamily::V6].into_iter().enumerate() {
        let plan = svc.plan(family);
        let external =
            plan.externals().next().is_some() || plan.ports.iter().any(|p| p.node_port.is_some());
        let without = plan.ports.iter().filter(|p| p.local.is_empty()).count();
        let without = i64::try_from(without).unwrap_or(i64::MAX);
        if plan.itp_local && !plan.cluster_ips.is_empty() {
            counts[0][f] += without;
        }
        if plan.etp_local && external {
            counts[1][f] += without;
        }
    }
    counts
}

fn now_seconds() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The process collector's metrics, read from `/proc/self` at each scrape
/// (as Prometheus' Go client reads them for kube-proxy).
#[derive(Debug)]
struct Process;

/// What `/proc` says of this process.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct ProcessStats {
    pub(crate) cpu_seconds: f64,
    pub(crate) resident_bytes: i64,
    pub(crate) virtual_bytes: i64,
    pub(crate) open_fds: i64,
    pub(crate) max_fds: i64,
    pub(crate) start_time_seconds: f64,
}

/// The kernel's clock ticks a second in `/proc` (`USER_HZ`, 100 on every
/// Linux architecture kpng builds for).
const USER_HZ: f64 = 100.0;

impl ProcessStats {
    /// Reads `/proc/self`; a field that cannot be read is 0.
    pub(crate) fn read() -> Self {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
        let boot = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let open_fds = std::fs::read_dir("/proc/self/fd").map_or(0, Iterator::count);
        Self::parse(&stat, &status, &limits, &boot, open_fds)
    }

    pub(crate) fn parse(stat: &str, status: &str, limits: &str, boot: &str, fds: usize) -> Self {
        // After the command's `(name)`, which may hold spaces: field 3 on.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
        let field = |n: usize| -> f64 {
            fields
                .get(n - 3)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        let kib = |name: &str| -> i64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|n| n.parse::<i64>().ok())
                .map_or(0, |k| k * 1024)
        };
        let max_fds = limits
            .lines()
            .find_map(|l| l.strip_prefix("Max open files"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|n| n.parse::<i64>().ok())
            .unwrap_or(0);
        let btime = boot
            .lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0);
        Self {
            cpu_seconds: (field(14) + field(15)) / USER_HZ,
            resident_bytes: kib("VmRSS:"),
            virtual_bytes: kib("VmSize:"),
            open_fds: i64::try_from(fds).unwrap_or(i64::MAX),
            max_fds,
            start_time_seconds: btime + field(22) / USER_HZ,
        }
    }
}

impl prometheus_client::collector::Collector for Process {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder<'_>,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::counter::ConstCounter;
        use prometheus_client::metrics::gauge::ConstGauge;
        let p = ProcessStats::read();
        let cpu = ConstCounter::new(p.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            None,
            cpu.metric_type(),
        )?)?;
        for (name, help, value) in [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                p.resident_bytes,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                p.virtual_bytes,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                p.open_fds,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                p.max_fds,
            ),
        ] {
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        let start = ConstGauge::new(p.start_time_seconds);
        start.encode(encoder.encode_descriptor(
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds",
            None,
            start.metric_type(),
        )?)?;
        Ok(())
    }
}
