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
//!   taint (KEP-3836), so load balancers stop sending new connections,
//!   and while a named readiness [`Conditions`] entry is set (kpng sets
//!   `node` while no Node object has this node's name),
//!   and while the input is held back ([`ProxyHealth::set_held_back`]: a
//!   mass deletion refused by kpng-drive's guard), the reason in the body.
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

use kpng_model::v1::{ServiceType, TrafficPolicy};
use kpng_model::view::{NodeView, ViewOp};
use kpng_model::{IpNet, ServiceName};
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
    /// A thread panicked while it held the listeners' lock.
    #[error("the health check listeners' lock is poisoned")]
    Poisoned,
}

#[derive(Debug)]
struct SyncState {
    timeout: Duration,
    last_sync: Option<(Instant, SystemTime)>,
    pending_since: Option<Instant>,
    /// This node is going away (KEP-3836).
    node_terminating: bool,
    /// Named reasons not to be ready.
    conditions: Conditions,
    /// Why the input is held back (a mass deletion), if it is.
    held_back: Option<String>,
}

/// Named reasons the proxy is not ready, each with why: while any is set,
/// `/healthz` (and `serviceProxyHealthy`) answers `503` and its body
/// lists them under `"conditions"`. `/livez` ignores them. Cloning shares
/// them; set and clear them from anywhere.
///
/// ```
/// use std::time::Duration;
/// use kpng_health::{Conditions, ProxyHealth};
///
/// let conditions = Conditions::default();
/// let health = ProxyHealth::new(Duration::from_secs(60)).with_conditions(conditions.clone());
/// health.synced();
/// conditions.set("node", "no Node named node-c");
/// assert!(!health.healthy() && health.live());
/// conditions.clear("node");
/// assert!(health.healthy());
/// ```
#[derive(Clone, Debug, Default)]
pub struct Conditions(Arc<Mutex<BTreeMap<String, String>>>);

impl Conditions {
    /// Sets (or replaces) condition `name`, failing with `reason`.
    pub fn set(&self, name: &str, reason: impl Into<String>) {
        if let Ok(mut c) = self.0.lock() {
            c.insert(name.to_owned(), reason.into());
        }
    }

    /// Clears condition `name`, if set.
    pub fn clear(&self, name: &str) {
        if let Ok(mut c) = self.0.lock() {
            c.remove(name);
        }
    }

    /// The conditions set now, by name, with their reasons.
    pub fn failing(&self) -> BTreeMap<String, String> {
        self.0.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// Whether none is set.
    pub fn is_clear(&self) -> bool {
        self.0.lock().is_ok_and(|c| c.is_empty())
    }
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
            conditions: Conditions::default(),
            held_back: None,
        })))
    }

    /// Not healthy while any of `conditions` is set (see [`Conditions`]).
    #[must_use]
    pub fn with_conditions(self, conditions: Conditions) -> Self {
        if let Ok(mut s) = self.0.lock() {
            s.conditions = conditions;
        }
        self
    }

    /// The readiness conditions.
    pub fn conditions(&self) -> Conditions {
        self.0
            .lock()
            .map(|s| s.conditions.clone())
            .unwrap_or_default()
    }

    /// Whether the input is held back, and why (a mass deletion the guard
    /// refused): `/healthz` answers `503` with the reason meanwhile, as
    /// the data plane no longer follows the cluster. `/livez` is not
    /// affected: restarting would not help.
    pub fn set_held_back(&self, reason: Option<String>) {
        if let Ok(mut s) = self.0.lock() {
            s.held_back = reason;
        }
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
    /// ports): [`live`](Self::live), this node is not going away, and
    /// no readiness [`Conditions`] entry is set.
    pub fn healthy(&self) -> bool {
        self.live()
            && self.0.lock().is_ok_and(|s| {
                !s.node_terminating && s.conditions.is_clear() && s.held_back.is_none()
            })
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
        let held_back = self.0.lock().ok().and_then(|s| s.held_back.clone());
        let mut body = serde_json::json!({
            "lastUpdated": last,
            "currentTime": seconds(SystemTime::now()),
            "healthy": self.healthy(),
            "nodeEligible": eligible,
            "conditions": self.conditions().failing(),
        });
        if let (Some(reason), Some(map)) = (held_back, body.as_object_mut()) {
            map.insert("heldBack".into(), reason.into());
        }
        body
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

/// What one healthCheckNodePort reports.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PortState {
    service: ServiceName,
    local_endpoints: usize,
}

struct Listener {
    port: u16,
    state: Arc<Mutex<PortState>>,
    /// A task per address, each serving its own socket.
    tasks: BTreeMap<IpAddr, JoinHandle<()>>,
}

impl Listener {
    fn close(&self) {
        self.tasks.values().for_each(JoinHandle::abort);
    }

    /// Listens on exactly `addresses`: closes the sockets on others and
    /// opens the missing ones (those already open stay, so a port never
    /// goes away on an address that keeps it). The first address that
    /// cannot be opened is the error; the others are still opened.
    fn cover(&mut self, addresses: &[IpAddr], health: &ProxyHealth) -> Result<(), Error> {
        self.tasks.retain(|ip, task| {
            let keep = addresses.contains(ip);
            if !keep {
                task.abort();
            }
            keep
        });
        let mut failure = None;
        for ip in addresses {
            if self.tasks.contains_key(ip) {
                continue;
            }
            match open(SocketAddr::new(*ip, self.port), &self.state, health) {
                Ok(task) => {
                    self.tasks.insert(*ip, task);
                }
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        failure.map_or(Ok(()), Err)
    }
}

/// The addresses the listeners are on, and the open ports: shared by
/// syncs and by the task that follows the node's address changes.
#[derive(Default)]
struct Ports {
    addresses: Vec<IpAddr>,
    listeners: BTreeMap<u16, Listener>,
}

impl Ports {
    /// Moves every listener to `addresses`, and opens what an earlier
    /// attempt could not. The first socket that cannot be opened is the
    /// error; the next sync or address change tries it again.
    fn rebind(&mut self, addresses: Vec<IpAddr>, health: &ProxyHealth) -> Result<(), Error> {
        if addresses != self.addresses {
            tracing::info!(?addresses, "health check addresses");
            self.addresses = addresses;
        }
        let mut failure = None;
        for listener in self.listeners.values_mut() {
            if let Err(e) = listener.cover(&self.addresses, health) {
                failure.get_or_insert(e);
            }
        }
        failure.map_or(Ok(()), Err)
    }
}

/// Serves the healthCheckNodePorts of this node's view. See the crate
/// docs. Must be created and synced within a tokio runtime.
pub struct HealthCheckServer {
    bind: Arc<Bind>,
    health: ProxyHealth,
    ports: Arc<Mutex<Ports>>,
    /// The task that moves the listeners when the node's addresses change.
    follower: Option<JoinHandle<()>>,
}

/// Where the health-check ports listen.
#[derive(Clone, Debug)]
enum Bind {
    /// These addresses.
    Addresses(Vec<IpAddr>),
    /// This node's interface addresses in these prefixes
    /// (`--nodeport-addresses 192.168.0.0/24`), followed as they change.
    Prefixes(Vec<IpNet>),
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

/// Interface address changes in this network namespace: an rtnetlink
/// socket in the IPv4 and IPv6 address groups, read without parsing (any
/// message means "look again").
struct AddressEvents(tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>);

impl AddressEvents {
    #[allow(unsafe_code)]
    fn open() -> std::io::Result<Self> {
        use nix::sys::socket::{
            self, AddressFamily, NetlinkAddr, SockFlag, SockProtocol, SockType,
        };
        use std::os::fd::AsRawFd;
        const RTMGRP_IPV4_IFADDR: u32 = 0x10;
        const RTMGRP_IPV6_IFADDR: u32 = 0x100;
        let fd = socket::socket(
            AddressFamily::Netlink,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
            SockProtocol::NetlinkRoute,
        )?;
        let groups = NetlinkAddr::new(0, RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR);
        socket::bind(fd.as_raw_fd(), &groups)?;
        let interest = tokio::io::Interest::READABLE;
        // SAFETY: an `OwnedFd` is an open descriptor that stays open, and
        // the same, until it is dropped, and the `AsyncFd` owns it.
        let fd = unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, interest) };
        Ok(Self(fd.map_err(|e| e.into_parts().1)?))
    }

    /// Waits until an address was added or removed; reads every message
    /// pending, so a burst of changes wakes once.
    async fn changed(&self) -> std::io::Result<()> {
        use nix::errno::Errno;
        use nix::sys::socket::{MsgFlags, recv};
        use std::os::fd::AsRawFd;
        let mut buf = [0u8; 8192];
        loop {
            let mut ready = self.0.readable().await?;
            let mut any = false;
            loop {
                match recv(self.0.get_ref().as_raw_fd(), &mut buf, MsgFlags::empty()) {
                    Ok(_) => any = true,
                    // Messages were lost: something changed.
                    Err(Errno::ENOBUFS) => any = true,
                    Err(Errno::EAGAIN) => {
                        ready.clear_ready();
                        break;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            if any {
                return Ok(());
            }
        }
    }
}

/// Moves the listeners whenever the node's addresses change.
async fn follow(
    events: AddressEvents,
    bind: Arc<Bind>,
    ports: Arc<Mutex<Ports>>,
    health: ProxyHealth,
) {
    loop {
        if let Err(error) = events.changed().await {
            tracing::warn!(%error, "no longer following address changes; at each sync only");
            return;
        }
        let addresses = bind.resolve();
        let Ok(mut ports) = ports.lock() else {
            return;
        };
        if let Err(error) = ports.rebind(addresses, &health) {
            tracing::warn!(%error, "a health check port did not move; the next sync retries");
        }
    }
}

impl std::fmt::Debug for HealthCheckServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HealthCheckServer")
            .field("addresses", &self.addresses())
            .field("ports", &self.ports())
            .finish()
    }
}

impl HealthCheckServer {
    /// Listens on `addresses` (kube-proxy: every node address, `0.0.0.0`);
    /// `health` is reported as `serviceProxyHealthy`.
    pub fn new(addresses: Vec<IpAddr>, health: ProxyHealth) -> Self {
        let ports = Ports {
            addresses: addresses.clone(),
            ..Ports::default()
        };
        Self {
            bind: Arc::new(Bind::Addresses(addresses)),
            health,
            ports: Arc::new(Mutex::new(ports)),
            follower: None,
        }
    }

    /// Listens on this node's interface addresses within `prefixes`
    /// (kube-proxy's `--nodeport-addresses` as CIDRs; loopback never).
    /// The listeners follow the addresses: an address added or removed
    /// (rtnetlink tells) moves them at once, and each sync looks again.
    pub fn on_prefixes(prefixes: Vec<IpNet>, health: ProxyHealth) -> Self {
        let bind = Arc::new(Bind::Prefixes(prefixes));
        let ports = Arc::new(Mutex::new(Ports::default()));
        let follower = match AddressEvents::open() {
            Ok(events) => Some(tokio::spawn(follow(
                events,
                bind.clone(),
                ports.clone(),
                health.clone(),
            ))),
            Err(error) => {
                tracing::warn!(%error, "cannot follow address changes; looked up at each sync");
                None
            }
        };
        Self {
            bind,
            health,
            ports,
            follower,
        }
    }

    /// The addresses listened on now.
    pub fn addresses(&self) -> Vec<IpAddr> {
        self.ports
            .lock()
            .map(|p| p.addresses.clone())
            .unwrap_or_default()
    }

    /// The ports served now.
    pub fn ports(&self) -> BTreeSet<u16> {
        self.ports
            .lock()
            .map(|p| p.listeners.keys().copied().collect())
            .unwrap_or_default()
    }
}

/// Opens `address`, served by a task answering from `state`.
fn open(
    address: SocketAddr,
    state: &Arc<Mutex<PortState>>,
    health: &ProxyHealth,
) -> Result<JoinHandle<()>, Error> {
    let listener = std::net::TcpListener::bind(address)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .and_then(TcpListener::from_std)
        .map_err(|source| Error::Listen { address, source })?;
    let (state, health) = (state.clone(), health.clone());
    // kube-proxy answers on any path.
    Ok(tokio::spawn(http::serve(
        listener,
        move |_path| match state.lock() {
            Ok(s) => service_reply(&s, health.healthy()),
            Err(_) => Reply::json(503, &serde_json::json!({})),
        },
    )))
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
        let eligible = s.r#type() == ServiceType::LoadBalancer
            && s.external_traffic_policy() == TrafficPolicy::Local;
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
        let failed = |e| SinkError::backend("health checks", e);
        let addresses = self.bind.resolve();
        let Ok(mut ports) = self.ports.lock() else {
            return Err(failed(Error::Poisoned));
        };
        let mut failure = ports.rebind(addresses, &self.health).err();
        let wanted = wanted(view);
        ports.listeners.retain(|port, listener| {
            let keep = wanted.contains_key(port);
            if !keep {
                listener.close();
                tracing::info!(port, "health check port closed");
            }
            keep
        });
        for (port, state) in wanted {
            if let Some(listener) = ports.listeners.get(&port) {
                if let Ok(mut current) = listener.state.lock() {
                    *current = state;
                }
                continue;
            }
            let mut listener = Listener {
                port,
                state: Arc::new(Mutex::new(state)),
                tasks: BTreeMap::new(),
            };
            let opened = listener.cover(&ports.addresses, &self.health);
            match opened {
                Ok(()) => tracing::info!(port, "health check port open"),
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
            ports.listeners.insert(port, listener);
        }
        failure.map_or(Ok(()), |e| Err(failed(e)))
    }
}

impl Drop for HealthCheckServer {
    fn drop(&mut self) {
        if let Some(follower) = &self.follower {
            follower.abort();
        }
        if let Ok(ports) = self.ports.lock() {
            ports.listeners.values().for_each(Listener::close);
        }
    }
}

/// What kube-proxy runs beside its data plane, put around a backend:
/// `/healthz` and `/livez` telling how the backend's rounds go, the
/// health-check node ports of the node view, and other full-state sinks
/// (conntrack cleanup, say). Those follow the backend's own view after
/// each round it applied ([`kpng_sink::Follow`]): no copy of their own.
///
/// ```no_run
/// # async fn f(backend: impl kpng_sink::IncrementalSink + Send + 'static) -> std::io::Result<()> {
/// use std::time::Duration;
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:10256").await?;
/// let sink = kpng_health::Companions::new()
///     .healthz(listener, Duration::from_secs(60))
///     .health_check_prefixes(vec!["192.168.0.0/24".parse().unwrap()])
///     .around(backend);
/// # Ok(()) }
/// ```
#[derive(Default)]
pub struct Companions {
    healthz: Option<(TcpListener, ProxyHealth)>,
    prefixes: Option<Vec<IpNet>>,
    followers: Vec<Box<dyn FullStateSink + Send>>,
    conditions: Conditions,
}

impl std::fmt::Debug for Companions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Companions")
            .field("healthz", &self.healthz.as_ref().map(|(_, h)| h))
            .field("prefixes", &self.prefixes)
            .field("followers", &self.followers.len())
            .finish()
    }
}

impl Companions {
    /// None yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A full-state sink that follows the backend's view after each round.
    #[must_use]
    pub fn follower(mut self, sink: impl FullStateSink + Send + 'static) -> Self {
        self.followers.push(Box::new(sink));
        self
    }

    /// Serves `/healthz` and `/livez` on `listener` (unhealthy once a
    /// change waited longer than `timeout`), and the health-check node
    /// ports.
    #[must_use]
    pub fn healthz(mut self, listener: TcpListener, timeout: Duration) -> Self {
        self.healthz = Some((listener, ProxyHealth::new(timeout)));
        self
    }

    /// `/healthz` answers `503` while any of `conditions` is set (see
    /// [`Conditions`]).
    #[must_use]
    pub fn conditions(mut self, conditions: Conditions) -> Self {
        self.conditions = conditions;
        self
    }

    /// The health `/healthz` reports, once [`healthz`](Self::healthz) is
    /// set: others may add to it (a held-back input, say).
    pub fn proxy_health(&self) -> Option<ProxyHealth> {
        self.healthz.as_ref().map(|(_, health)| health.clone())
    }

    /// Serves the health-check node ports on the node's addresses within
    /// `prefixes` (`--nodeport-addresses`), following them; by default on
    /// every address.
    #[must_use]
    pub fn health_check_prefixes(mut self, prefixes: Vec<IpNet>) -> Self {
        self.prefixes = Some(prefixes);
        self
    }

    /// Puts them around `backend`. Spawns the servers on the current tokio
    /// runtime.
    pub fn around<S: IncrementalSink + Send + 'static>(
        mut self,
        backend: S,
    ) -> Box<dyn IncrementalSink + Send> {
        let backend: Box<dyn IncrementalSink + Send> = match self.healthz {
            None => Box::new(backend),
            Some((listener, health)) => {
                let health = health.with_conditions(self.conditions);
                tokio::spawn(serve_healthz(listener, health.clone()));
                let server = match self.prefixes {
                    Some(prefixes) => HealthCheckServer::on_prefixes(prefixes, health.clone()),
                    None => HealthCheckServer::new(
                        vec![std::net::Ipv4Addr::UNSPECIFIED.into()],
                        health.clone(),
                    ),
                };
                self.followers.push(Box::new(server));
                Box::new(Healthy::new(backend, health))
            }
        };
        if self.followers.is_empty() {
            return backend;
        }
        // The backend first: the followers act on its new rules.
        Box::new(kpng_sink::Follow::new(backend, self.followers))
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
