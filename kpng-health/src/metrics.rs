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
//! | `kpng_input_objects_skipped` | objects of the watched manifest skipped at its last read that was applied (each one the API server would refuse, or that does not decode), else 0 ([`Metrics::input_objects_skipped`]) |
//! | `kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds` | when a change last queued a sync (the first change after a sync) |
//! | `kubeproxy_sync_proxy_rules_service_changes_pending`, `kubeproxy_sync_proxy_rules_endpoint_changes_pending` | Service and endpoint changes reaching the backend and not yet synced |
//! | `kubeproxy_sync_proxy_rules_service_changes_total`, `kubeproxy_sync_proxy_rules_endpoint_changes_total` | every such change |
//! | `kubeproxy_sync_proxy_rules_nftables_sync_failures_total`, `kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total` | failed syncs in nftables mode ([`Metrics::for_mode`]); kpng has no separate cleanup, so the second stays 0 |
//! | `kubeproxy_sync_proxy_rules_iptables_restore_failures_total` | failed syncs (restores) in iptables mode |
//! | `kubeproxy_sync_proxy_rules_no_local_endpoints_total{traffic_policy, ip_family}` | Service ports with a Local policy (`internal`, `external`) and no local endpoint, per family (`IPv4`, `IPv6`) |
//! | `kpng_bpf_map_entries{map}`, `kpng_bpf_map_max_entries{map}` | the eBPF backend: entries its state asks of each map that holds the cluster (at most), and the map's size ([`Metrics::observe_map_fill`]) |
//! | `kpng_service_connections_total{namespace, service, port, protocol}`, `kpng_endpoint_connections_total{…, endpoint}` | new connections (UDP: flows) per Service port and per endpoint, read from the backends' counters at each scrape ([`Metrics::count_connections`]) |
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

mod kube;
mod measure;
mod process;
mod traffic;
use kube::KubeProxy;
pub use measure::{Measure, MeasuredExt};
use process::Process;
use traffic::{Traffic, TrafficCollector};

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
    skipped: Gauge,
    /// The eBPF backend's maps: entries asked of each, and its size.
    map_entries: Family<[(&'static str, String); 1], Gauge>,
    map_max_entries: Family<[(&'static str, String); 1], Gauge>,
    /// What was counted of the store's and the aggregator's totals.
    seen: Mutex<(kpng_store::Stats, u64)>,
    /// kube-proxy's other metrics, `/configz` and `/proxyMode`.
    kube: KubeProxy,
    /// Metrics of other crates, as OpenMetrics text (see
    /// [`Metrics::add_text`]).
    texts: Mutex<Vec<TextSource>>,
    /// The backends' connection counters.
    traffic: Arc<Traffic>,
}

/// A function giving metrics as OpenMetrics text.
type TextSource = Box<dyn Fn() -> String + Send + Sync>;

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
        let skipped = Gauge::default();
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
        registry.register(
            "kpng_input_objects_skipped",
            "Objects of the input file skipped at its last read applied (refused by the API server's validation, or not decoded)",
            Gauge::clone(&skipped),
        );
        let (map_entries, map_max_entries) = (Family::default(), Family::default());
        registry.register(
            "kpng_bpf_map_entries",
            "Entries the eBPF backend asks of each BPF map that holds the cluster (at most)",
            Family::clone(&map_entries),
        );
        registry.register(
            "kpng_bpf_map_max_entries",
            "The size of each BPF map that holds the cluster",
            Family::clone(&map_max_entries),
        );
        let kube = KubeProxy::register(&mut registry, mode);
        let traffic = Arc::new(Traffic::default());
        registry.register_collector(Box::new(TrafficCollector(Arc::clone(&traffic))));
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
            skipped,
            map_entries,
            map_max_entries,
            seen: Mutex::new((kpng_store::Stats::default(), 0)),
            kube,
            texts: Mutex::new(Vec::new()),
            traffic,
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

    /// How many objects of the watched input (a manifest file) its last
    /// read that was applied skipped (`kpng_input_objects_skipped`): each
    /// one the API server would refuse, or that does not decode.
    pub fn input_objects_skipped(&self, count: usize) {
        self.0.skipped.set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// Whether a mass deletion is held back now; each hold that starts
    /// is counted once.
    pub fn held_back(&self, held: bool) {
        let was = self.0.held_back.set(i64::from(held)) != 0;
        if held && !was {
            self.0.holds.inc();
        }
    }

    /// How full BPF map `map` is: `entries` of `max_entries` (the eBPF
    /// backend's maps, after each sync).
    ///
    /// ```
    /// use kpng_health::metrics::Metrics;
    ///
    /// let metrics = Metrics::new();
    /// metrics.observe_map_fill("kpng_services", 1500, 4096);
    /// assert!(metrics.encode().contains("kpng_bpf_map_max_entries{map=\"kpng_services\"} 4096"));
    /// ```
    pub fn observe_map_fill(&self, map: &str, entries: u64, max_entries: u64) {
        let label = [("map", map.to_owned())];
        let gauge = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        self.0.map_entries.get_or_create(&label).set(gauge(entries));
        self.0
            .map_max_entries
            .get_or_create(&label)
            .set(gauge(max_entries));
    }

    /// Reads `source`, a backend's connection counters, at each scrape:
    /// `kpng_service_connections_total{namespace, service, port,
    /// protocol}` and `kpng_endpoint_connections_total{…, endpoint}`,
    /// named by the node view of the last successful sync (the
    /// [`Measure`] hook keeps it). Rows of destinations no Service port
    /// of the view holds are left out.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use kpng_health::metrics::{Measure, Metrics};
    /// use kpng_model::v1::{Protocol, Service, ServicePort};
    /// use kpng_model::view::{NodeView, ServiceView};
    /// use kpng_sink::traffic::{ConnectionCount, ConnectionCounters, Destination};
    /// use kpng_sink::{Hook, Round, SinkError};
    ///
    /// struct Fixed;
    /// impl ConnectionCounters for Fixed {
    ///     fn read(&self) -> Result<Vec<ConnectionCount>, SinkError> {
    ///         Ok(vec![ConnectionCount {
    ///             protocol: Protocol::Tcp,
    ///             destination: Destination::Address("10.96.0.10:80".parse().unwrap()),
    ///             endpoint: "10.244.1.5:8080".parse().unwrap(),
    ///             connections: 3,
    ///         }])
    ///     }
    /// }
    /// let metrics = Metrics::new();
    /// metrics.count_connections(Fixed);
    /// let svc = Arc::new(kpng_model::ServiceInfo::new(
    ///     Service::new("default", "web")
    ///         .with_cluster_ips(["10.96.0.10".parse()?])
    ///         .with_port(ServicePort::new("http", Protocol::Tcp, 80)),
    /// ).expect("valid"));
    /// let mut view = NodeView::default();
    /// view.services.insert(svc.service_name(), Arc::new(ServiceView::new(svc)));
    /// let mut measure = Measure::new(metrics.clone());
    /// let round = Round::full(&view);
    /// Hook::<()>::before(&mut measure, &round);
    /// Hook::<()>::after(&mut measure, &(), &round, &Ok(()));
    /// let text = metrics.encode();
    /// assert!(text.contains(
    ///     "kpng_service_connections_total{namespace=\"default\",service=\"web\",port=\"http\",protocol=\"TCP\"} 3"
    /// ), "{text}");
    /// assert!(text.contains("endpoint=\"10.244.1.5:8080\"} 3"), "{text}");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn count_connections(&self, source: impl kpng_sink::traffic::ConnectionCounters + 'static) {
        self.0.traffic.add(Box::new(source));
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

    /// Serves, at each scrape, the metrics `source` gives as OpenMetrics
    /// text (`# HELP`, `# TYPE` and samples, no `# EOF`): metrics another
    /// crate keeps, as the API server's fleet view.
    pub fn add_text(&self, source: impl Fn() -> String + Send + Sync + 'static) {
        if let Ok(mut texts) = self.0.texts.lock() {
            texts.push(Box::new(source));
        }
    }

    /// The OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.0.registry);
        if let Ok(texts) = self.0.texts.lock()
            && !texts.is_empty()
        {
            let eof = out.rfind("# EOF").unwrap_or(out.len());
            let mut extra = String::new();
            for text in texts.iter() {
                extra.push_str(&text());
            }
            out.insert_str(eof, &extra);
        }
        out
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

fn now_seconds() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
