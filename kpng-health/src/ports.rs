//! The health-check node ports: [`HealthCheckServer`] serves one HTTP port
//! per `type: LoadBalancer` Service with `externalTrafficPolicy: Local`,
//! on the node's addresses (followed by [`crate::addresses`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use kpng_model::ServiceName;
use kpng_model::v1::{ServiceType, TrafficPolicy};
use kpng_model::view::NodeView;
use kpng_sink::{Round, Sink, SinkError};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::Error;
use crate::ProxyHealth;
use kpng_netfilter::addresses::AddressEvents;

use crate::addresses::Bind;
use crate::http::{self, Reply};

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
pub(crate) struct Ports {
    addresses: Vec<IpAddr>,
    listeners: BTreeMap<u16, Listener>,
}

impl Ports {
    /// Moves every listener to `addresses`, and opens what an earlier
    /// attempt could not. The first socket that cannot be opened is the
    /// error; the next sync or address change tries it again.
    pub(crate) fn rebind(
        &mut self,
        addresses: Vec<IpAddr>,
        health: &ProxyHealth,
    ) -> Result<(), Error> {
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
    pub fn on_prefixes(prefixes: Vec<kpng_model::IpNet>, health: ProxyHealth) -> Self {
        let bind = Arc::new(Bind::Prefixes(prefixes));
        let ports = Arc::new(Mutex::new(Ports::default()));
        let follower = match AddressEvents::open(None) {
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
            .filter(|e| e.is_local() && e.local() && e.endpoint().ready())
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

impl Sink for HealthCheckServer {
    /// Opens listeners for the new health-check ports of the round's
    /// view, updates the counts of the others in place, and closes those
    /// no longer wanted. A port that cannot be opened fails the round
    /// (and is retried with the next).
    fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
        let view = round.view();
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

/// Moves the listeners whenever the node's addresses change.
pub(crate) async fn follow(
    mut events: AddressEvents,
    bind: Arc<Bind>,
    ports: Arc<Mutex<Ports>>,
    health: ProxyHealth,
) {
    loop {
        let Some(changes) = events.changed().await else {
            tracing::warn!("no longer following address changes; at each sync only");
            return;
        };
        tracing::debug!(?changes, "address changes");
        let addresses = match events.addresses().await {
            Ok(all) => bind.select(all),
            Err(error) => {
                tracing::warn!(%error, "listing the addresses over rtnetlink");
                bind.resolve()
            }
        };
        let Ok(mut ports) = ports.lock() else {
            return;
        };
        if let Err(error) = ports.rebind(addresses, &health) {
            tracing::warn!(%error, "a health check port did not move; the next sync retries");
        }
    }
}
