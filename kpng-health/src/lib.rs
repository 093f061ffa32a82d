//! Health checks of a kpng-rs proxy, as kube-proxy serves them.
//!
//! - [`HealthCheckServer`] is a [`kpng_sink::FullStateSink`]: for every
//!   `type: LoadBalancer` Service with `externalTrafficPolicy: Local` and a
//!   `healthCheckNodePort` in the node view, it serves HTTP on that port:
//!   `200` when this node has a local endpoint and the proxy is healthy,
//!   `503` otherwise, with the JSON body load balancers and operators read:
//!   `{"service":{"namespace","name"},"localEndpoints":N,"serviceProxyHealthy":bool}`.
//!   Listeners follow the view: opened, updated in place, and closed.
//! - [`ProxyHealth`] tracks the data plane's syncs and whether this node
//!   is going away; [`Healthy`] wraps a backend to feed it, and
//!   [`serve_healthz`] answers `/livez`, `503` once a change has waited
//!   longer than the timeout, and `/healthz`, `503` then too and while the
//!   node is being deleted or carries the `ToBeDeletedByClusterAutoscaler`
//!   taint (KEP-3836), so load balancers stop sending new connections.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use kpng_health::ProxyHealth;
//!
//! let health = ProxyHealth::new(Duration::from_secs(60));
//! assert!(!health.healthy(), "not before the first sync");
//! health.queued();
//! health.synced();
//! assert!(health.healthy());
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kpng_model::ServiceName;
use kpng_model::v1::{ServiceType, TrafficPolicy};
use kpng_model::view::{NodeView, ViewOp};
use kpng_sink::{FullStateSink, IncrementalSink, SinkError};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

mod http;
pub mod metrics;

use http::Reply;

/// Errors of the health servers.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A listener could not be opened.
    #[error("cannot listen on {address}: {source}")]
    Listen {
        /// The address.
        address: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

#[derive(Debug)]
struct SyncState {
    timeout: Duration,
    last_sync: Option<(Instant, SystemTime)>,
    pending_since: Option<Instant>,
    /// This node is going away (KEP-3836).
    node_terminating: bool,
}

/// Whether the proxy keeps its data plane in sync: healthy after the first
/// sync, as long as no change has waited longer than the timeout (kube-proxy
/// uses twice its sync period). Cloning shares it.
#[derive(Clone, Debug)]
pub struct ProxyHealth(Arc<Mutex<SyncState>>);

impl ProxyHealth {
    /// Unhealthy until the first sync.
    pub fn new(timeout: Duration) -> Self {
        Self(Arc::new(Mutex::new(SyncState {
            timeout,
            last_sync: None,
            pending_since: None,
            node_terminating: false,
        })))
    }

    /// Whether this node is going away: being deleted, or tainted
    /// `ToBeDeletedByClusterAutoscaler` (KEP-3836). [`Healthy`] sets it
    /// from the view's node object.
    pub fn set_node_terminating(&self, terminating: bool) {
        if let Ok(mut s) = self.0.lock() {
            s.node_terminating = terminating;
        }
    }

    /// A change is waiting to be applied (the first since the last sync
    /// starts the clock).
    pub fn queued(&self) {
        if let Ok(mut s) = self.0.lock() {
            s.pending_since.get_or_insert_with(Instant::now);
        }
    }

    /// Everything queued was applied.
    pub fn synced(&self) {
        if let Ok(mut s) = self.0.lock() {
            s.last_sync = Some((Instant::now(), SystemTime::now()));
            s.pending_since = None;
        }
    }

    /// Whether the proxy keeps its data plane in sync (`/livez`).
    pub fn live(&self) -> bool {
        self.0.lock().is_ok_and(|s| {
            s.last_sync.is_some() && s.pending_since.is_none_or(|t| t.elapsed() < s.timeout)
        })
    }

    /// Whether load balancers should send new connections here
    /// (`/healthz`, and `serviceProxyHealthy` of the health-check node
    /// ports): [`live`](Self::live), and this node is not going away.
    pub fn healthy(&self) -> bool {
        self.live() && self.0.lock().is_ok_and(|s| !s.node_terminating)
    }

    /// The `/healthz` body: the last sync and now, in seconds since the
    /// epoch, and the verdict.
    fn body(&self) -> serde_json::Value {
        let seconds = |t: SystemTime| t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let last = self
            .0
            .lock()
            .ok()
            .and_then(|s| s.last_sync)
            .map(|(_, t)| seconds(t));
        let eligible = self.0.lock().is_ok_and(|s| !s.node_terminating);
        serde_json::json!({
            "lastUpdated": last,
            "currentTime": seconds(SystemTime::now()),
            "healthy": self.healthy(),
            "nodeEligible": eligible,
        })
    }
}

/// Wraps a backend: ops mark a change queued, a successful sync marks the
/// proxy synced (a failing one leaves the change waiting).
#[derive(Debug)]
pub struct Healthy<S> {
    inner: S,
    health: ProxyHealth,
}

impl<S> Healthy<S> {
    /// Tracks `inner`'s syncs in `health`.
    pub fn new(inner: S, health: ProxyHealth) -> Self {
        Self { inner, health }
    }
}

impl<S: IncrementalSink> IncrementalSink for Healthy<S> {
    fn reset(&mut self) {
        self.health.queued();
        self.inner.reset();
    }
    kpng_sink::callbacks_as_ops!(forward);
    fn apply(&mut self, op: &ViewOp) -> Result<(), SinkError> {
        self.health.queued();
        match op {
            ViewOp::SetNode(node) => self.health.set_node_terminating(node.terminating),
            ViewOp::DeleteNode => self.health.set_node_terminating(false),
            _ => {}
        }
        self.inner.apply(op)
    }
    fn sync(&mut self, revision: u64) -> Result<(), SinkError> {
        self.inner.sync(revision)?;
        self.health.synced();
        Ok(())
    }
    fn view(&self) -> Option<&kpng_model::view::NodeView> {
        self.inner.view()
    }
    fn share_view(&mut self, view: &kpng_model::view::NodeView) {
        self.inner.share_view(view);
    }
}

impl<S: IncrementalSink> Healthy<S> {
    fn forward(&mut self, op: &ViewOp) {
        // Buffered by the inner sink; errors surface at sync.
        let _ = self.apply(op);
    }
}

/// What one healthCheckNodePort reports.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PortState {
    service: ServiceName,
    local_endpoints: usize,
}

struct Listener {
    state: Arc<Mutex<PortState>>,
    tasks: Vec<JoinHandle<()>>,
}

/// Serves the healthCheckNodePorts of this node's view. See the crate
/// docs. Must be created and synced within a tokio runtime.
pub struct HealthCheckServer {
    bind: Bind,
    /// The addresses the listeners are on.
    addresses: Vec<IpAddr>,
    health: ProxyHealth,
    listeners: BTreeMap<u16, Listener>,
}

/// Where the health-check ports listen.
#[derive(Clone, Debug)]
enum Bind {
    /// These addresses.
    Addresses(Vec<IpAddr>),
    /// This node's interface addresses in these prefixes, looked up again
    /// at each sync (`--nodeport-addresses 192.168.0.0/24`).
    Prefixes(Vec<(IpAddr, u8)>),
}

impl Bind {
    fn resolve(&self) -> Vec<IpAddr> {
        match self {
            Bind::Addresses(addresses) => addresses.clone(),
            Bind::Prefixes(prefixes) => {
                let mut found: Vec<IpAddr> = interface_addresses()
                    .into_iter()
                    .filter(|ip| !ip.is_loopback())
                    .filter(|ip| {
                        prefixes
                            .iter()
                            .any(|p| kpng_model::addr::cidr_contains(*p, *ip))
                    })
                    .collect();
                found.sort();
                found.dedup();
                found
            }
        }
    }
}

/// The addresses of this network namespace's interfaces.
fn interface_addresses() -> Vec<IpAddr> {
    let Ok(list) = nix::ifaddrs::getifaddrs() else {
        tracing::warn!("cannot list the interfaces' addresses");
        return Vec::new();
    };
    list.filter_map(|i| i.address)
        .filter_map(|a| {
            a.as_sockaddr_in()
                .map(|v4| IpAddr::V4(v4.ip()))
                .or_else(|| a.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip())))
        })
        .collect()
}

impl std::fmt::Debug for HealthCheckServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HealthCheckServer")
            .field("addresses", &self.addresses)
            .field("ports", &self.listeners.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl HealthCheckServer {
    /// Listens on `addresses` (kube-proxy: every node address, `0.0.0.0`);
    /// `health` is reported as `serviceProxyHealthy`.
    pub fn new(addresses: Vec<IpAddr>, health: ProxyHealth) -> Self {
        Self {
            bind: Bind::Addresses(addresses.clone()),
            addresses,
            health,
            listeners: BTreeMap::new(),
        }
    }

    /// Listens on this node's interface addresses within `prefixes`
    /// (kube-proxy's `--nodeport-addresses` as CIDRs; loopback never),
    /// looked up again at each sync: an address that comes or goes moves
    /// the listeners with it.
    pub fn on_prefixes(prefixes: Vec<(IpAddr, u8)>, health: ProxyHealth) -> Self {
        Self {
            bind: Bind::Prefixes(prefixes),
            addresses: Vec::new(),
            health,
            listeners: BTreeMap::new(),
        }
    }

    /// The addresses listened on (as of the last sync).
    pub fn addresses(&self) -> &[IpAddr] {
        &self.addresses
    }

    /// The ports served now.
    pub fn ports(&self) -> BTreeSet<u16> {
        self.listeners.keys().copied().collect()
    }

    fn open(&self, port: u16, state: &Arc<Mutex<PortState>>) -> Result<Vec<JoinHandle<()>>, Error> {
        let mut tasks = Vec::new();
        for ip in &self.addresses {
            let address = SocketAddr::new(*ip, port);
            let std = std::net::TcpListener::bind(address)
                .and_then(|l| l.set_nonblocking(true).map(|()| l))
                .map_err(|source| Error::Listen { address, source })?;
            let listener =
                TcpListener::from_std(std).map_err(|source| Error::Listen { address, source })?;
            let (state, health) = (state.clone(), self.health.clone());
            // kube-proxy answers on any path.
            tasks.push(tokio::spawn(http::serve(
                listener,
                move |_path| match state.lock() {
                    Ok(s) => service_reply(&s, health.healthy()),
                    Err(_) => Reply::json(503, &serde_json::json!({})),
                },
            )));
        }
        Ok(tasks)
    }
}

fn service_reply(state: &PortState, proxy_healthy: bool) -> Reply {
    let ok = state.local_endpoints > 0 && proxy_healthy;
    let body = serde_json::json!({
        "service": {
            "namespace": state.service.namespace(),
            "name": state.service.name(),
        },
        "localEndpoints": state.local_endpoints,
        "serviceProxyHealthy": proxy_healthy,
    });
    Reply::json(if ok { 200 } else { 503 }, &body)
}

/// The health-check ports a view asks for, with their state.
fn wanted(view: &NodeView) -> BTreeMap<u16, PortState> {
    let mut ports = BTreeMap::new();
    for (name, svc) in &view.services {
        let s = &svc.service;
        let eligible = s.r#type == ServiceType::LoadBalancer as i32
            && s.external_traffic_policy == TrafficPolicy::Local as i32;
        let Ok(port) = u16::try_from(s.health_check_node_port) else {
            continue;
        };
        if !eligible || port == 0 {
            continue;
        }
        // Each local ready endpoint once, whatever its families
        // (terminating ones do not count, as in kube-proxy).
        let local: BTreeSet<std::net::IpAddr> = svc
            .endpoints
            .iter()
            .filter(|e| e.is_local() && e.endpoint().ready())
            .map(|e| e.endpoint().address())
            .collect();
        ports.insert(
            port,
            PortState {
                service: name.clone(),
                local_endpoints: local.len(),
            },
        );
    }
    ports
}

impl FullStateSink for HealthCheckServer {
    /// Opens listeners for new health-check ports, updates the counts of
    /// the others in place, and closes those no longer wanted. A port that
    /// cannot be opened fails the sync (and is retried with the next).
    fn sync(&mut self, view: &NodeView) -> Result<(), SinkError> {
        let addresses = self.bind.resolve();
        if addresses != self.addresses {
            // Listeners move with the addresses: all are opened again.
            for (_, listener) in std::mem::take(&mut self.listeners) {
                for task in listener.tasks {
                    task.abort();
                }
            }
            tracing::info!(?addresses, "health check addresses");
            self.addresses = addresses;
        }
        let wanted = wanted(view);
        let gone: Vec<u16> = self
            .listeners
            .keys()
            .filter(|p| !wanted.contains_key(p))
            .copied()
            .collect();
        for port in gone {
            if let Some(listener) = self.listeners.remove(&port) {
                for task in listener.tasks {
                    task.abort();
                }
                tracing::info!(port, "health check port closed");
            }
        }
        let mut failure = None;
        for (port, state) in wanted {
            match self.listeners.get(&port) {
                Some(listener) => {
                    if let Ok(mut current) = listener.state.lock() {
                        *current = state;
                    }
                }
                None => {
                    let shared = Arc::new(Mutex::new(state));
                    match self.open(port, &shared) {
                        Ok(tasks) => {
                            tracing::info!(port, "health check port open");
                            self.listeners.insert(
                                port,
                                Listener {
                                    state: shared,
                                    tasks,
                                },
                            );
                        }
                        Err(e) => {
                            failure.get_or_insert(e);
                        }
                    }
                }
            }
        }
        match failure {
            Some(e) => Err(SinkError::backend("health checks", e)),
            None => Ok(()),
        }
    }
}

impl Drop for HealthCheckServer {
    fn drop(&mut self) {
        for listener in self.listeners.values() {
            for task in &listener.tasks {
                task.abort();
            }
        }
    }
}

/// Serves `/healthz` and `/livez` on `listener` until the task is dropped:
/// `200` while `health` is healthy, `503` otherwise; `404` elsewhere.
pub async fn serve_healthz(listener: TcpListener, health: ProxyHealth) {
    http::serve(listener, move |path| match path {
        "/healthz" => {
            let status = if health.healthy() { 200 } else { 503 };
            Reply::json(status, &health.body())
        }
        "/livez" => {
            let status = if health.live() { 200 } else { 503 };
            Reply::json(status, &health.body())
        }
        _ => Reply::not_found(),
    })
    .await;
}
