//! Prometheus metrics of a kpng-rs proxy, named after kube-proxy's where
//! the meaning is the same (prometheus-client, OpenMetrics text).
//!
//! | metric | meaning |
//! |---|---|
//! | `kubeproxy_sync_proxy_rules_duration_seconds` | histogram of sync durations |
//! | `kubeproxy_sync_full_proxy_rules_duration_seconds`, `kubeproxy_sync_partial_proxy_rules_duration_seconds` | the same, per kind of sync |
//! | `kubeproxy_sync_proxy_rules_last_timestamp_seconds` | the last successful sync |
//! | `kubeproxy_network_programming_duration_seconds` | from an EndpointSlice change's `last-change-trigger-time` to the sync that applied it (with [`Measured::with_store`]; else from a change reaching the proxy) |
//! | `kpng_sync_failures_total` | failed syncs |
//! | `kpng_services`, `kpng_endpoints` | in this node's view |
//! | `kpng_store_writes_total`, `kpng_store_noop_writes_total`, `kpng_revisions_total` | ingest: API events written, those that changed nothing, and revisions made |
//! | `kpng_aggregator_transactions_total` | kernel transactions of an aggregator |
//! | `kpng_sync_held_back` | 1 while a mass deletion is held back (the previous state kept), else 0 |
//! | `kpng_mass_deletions_held_total` | mass deletions held back (each hold once) |

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use kpng_model::view::ViewOp;
use kpng_sink::{IncrementalSink, SinkError, ViewTracker};
use prometheus_client::metrics::counter::Counter;
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
    /// Registers every metric.
    pub fn new() -> Self {
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

    /// The OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.0.registry);
        out
    }
}

/// Wraps a backend: times its syncs (full or partial), counts failures,
/// and keeps the Service and endpoint gauges, counted from the backend's
/// own view when it keeps one ([`IncrementalSink::view`]), else from a
/// view of its own.
#[derive(Debug)]
pub struct Measured<S> {
    inner: S,
    metrics: Metrics,
    /// A view of its own, only for a backend that keeps none.
    own: Option<ViewTracker>,
    /// Whether the next sync is a full one (after a reset or a failure).
    full: bool,
    round_started: Option<Instant>,
    /// The store the synced revisions come from: their trigger times.
    store: Option<kpng_store::Reader>,
}

impl<S: IncrementalSink> Measured<S> {
    /// Measures `inner` into `metrics`.
    pub fn new(inner: S, metrics: Metrics) -> Self {
        let own = inner.view().is_none().then(ViewTracker::default);
        Self {
            inner,
            metrics,
            own,
            full: true,
            round_started: None,
            store: None,
        }
    }

    /// Measures network programming latency as kube-proxy does, from the
    /// trigger time each EndpointSlice change carries (kept by the store
    /// for the revision it made, [`kpng_store::Reader::take_triggers`]) to
    /// the sync that applied it. Without a store (an agent, a file), from
    /// the first op of a round reaching the sink.
    #[must_use]
    pub fn with_store(mut self, store: kpng_store::Reader) -> Self {
        self.store = Some(store);
        self
    }
}

impl<S> Measured<S> {
    /// The measured sink.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    fn note(&mut self, op: &ViewOp) {
        if let Some(own) = &mut self.own {
            // Only what changed is read from it; a misfit is the inner
            // sink's to report.
            let _ = own.absorb(op);
        }
        self.round_started.get_or_insert_with(Instant::now);
    }
}

impl<S: IncrementalSink> IncrementalSink for Measured<S> {
    fn reset(&mut self) {
        if let Some(own) = &mut self.own {
            own.reset();
        }
        self.full = true;
        self.round_started.get_or_insert_with(Instant::now);
        self.inner.reset();
    }
    fn apply(&mut self, op: &ViewOp) -> Result<(), SinkError> {
        self.note(op);
        self.inner.apply(op)
    }
    fn sync(&mut self, revision: u64) -> Result<(), SinkError> {
        let full = self.full;
        let start = Instant::now();
        let result = self.inner.sync(revision);
        let elapsed = start.elapsed().as_secs_f64();
        let m = &self.metrics.0;
        m.sync.observe(elapsed);
        if full { &m.full } else { &m.partial }.observe(elapsed);
        match &result {
            Ok(()) => {
                self.full = false;
                if let Some(own) = &mut self.own {
                    let _ = own.take_changes();
                    own.synced(true);
                }
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64());
                m.last_sync.set(now);
                let started = self.round_started.take();
                match &self.store {
                    Some(store) => {
                        let applied = SystemTime::now();
                        for at in store.take_triggers(revision) {
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
                let view = match &self.own {
                    Some(own) => Some(own.view()),
                    None => self.inner.view(),
                };
                if let Some(view) = view {
                    let endpoints: usize = view.services.values().map(|s| s.endpoints.len()).sum();
                    m.services
                        .set(i64::try_from(view.services.len()).unwrap_or(i64::MAX));
                    m.endpoints
                        .set(i64::try_from(endpoints).unwrap_or(i64::MAX));
                }
            }
            Err(_) => {
                self.full = true;
                m.failures.inc();
            }
        }
        result
    }
    fn view(&self) -> Option<&kpng_model::view::NodeView> {
        self.inner.view()
    }
    fn share_view(&mut self, view: &kpng_model::view::NodeView) {
        if let Some(own) = &mut self.own {
            own.share(view);
        }
        self.inner.share_view(view);
    }
}

/// Serves `GET /metrics` on `listener` until the task is dropped; `store`
/// (when given) is read at each scrape for the ingest counters.
pub async fn serve_metrics(
    listener: TcpListener,
    metrics: Metrics,
    store: Option<kpng_store::Reader>,
) {
    crate::http::serve(listener, move |path| {
        if path != "/metrics" {
            return crate::Reply::not_found();
        }
        if let Some(store) = &store {
            metrics.observe_store(store.stats());
        }
        crate::Reply {
            status: 200,
            content_type: "application/openmetrics-text; version=1.0.0; charset=utf-8",
            body: metrics.encode(),
        }
    })
    .await;
}
