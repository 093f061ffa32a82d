//! Traffic counters: what a data plane counted of each Service port's
//! new connections, per endpoint, and how to name the Service port.
//!
//! A backend that counts ([`ConnectionCounters`]) reports rows in its
//! own terms, the destination a connection was sent to (an address and
//! port, or a node port) and the endpoint it was given;
//! [`ServicePorts`] finds the Service port of a destination in a node
//! view, so metrics can carry the Service's name.
//!
//! ```
//! use std::sync::Arc;
//! use kpng_model::v1::{Protocol, Service, ServicePort};
//! use kpng_model::view::{NodeView, ServiceView};
//! use kpng_sink::traffic::{ConnectionCount, Destination, ServicePorts};
//!
//! let svc = Arc::new(kpng_model::ServiceInfo::new(
//!     Service::new("default", "web")
//!         .with_cluster_ips(["10.96.0.10".parse()?])
//!         .with_port(ServicePort::new("http", Protocol::Tcp, 80)),
//! ).expect("valid"));
//! let mut view = NodeView::default();
//! view.services.insert(svc.service_name(), Arc::new(ServiceView::new(svc)));
//! let row = ConnectionCount {
//!     protocol: Protocol::Tcp,
//!     destination: Destination::Address("10.96.0.10:80".parse()?),
//!     endpoint: "10.244.1.5:8080".parse()?,
//!     connections: 3,
//! };
//! let ports = ServicePorts::of(&view);
//! let (name, port) = ports.find(&row).expect("a Service port");
//! assert_eq!((name.name(), port.name.as_str()), ("web", "http"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashMap;
use std::net::SocketAddr;

use kpng_model::ServiceName;
use kpng_model::v1::{Protocol, ServicePort};
use kpng_model::view::NodeView;

use crate::SinkError;

/// Where a counted connection was addressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Destination {
    /// A ClusterIP, externalIP or load-balancer IP, with the Service's
    /// port.
    Address(SocketAddr),
    /// A node port (on any of the node's NodePort addresses).
    NodePort(u16),
}

/// New connections a data plane sent to one endpoint for one
/// destination, since its counter was made (a counter is made with the
/// rule or map entry that sends there, and may start again from 0 when
/// the backend replaces it: a Prometheus counter reset).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionCount {
    /// The transport protocol.
    pub protocol: Protocol,
    /// Where the connection was addressed.
    pub destination: Destination,
    /// The endpoint it was sent to.
    pub endpoint: SocketAddr,
    /// How many (for UDP, flows: the data planes count a flow's first
    /// packet).
    pub connections: u64,
}

/// A backend's counters, read when asked (at a metrics scrape): cheap
/// to call from another thread than the one that syncs.
pub trait ConnectionCounters: Send + Sync {
    /// Every counter that counted at least one connection, per
    /// destination and endpoint; a destination and endpoint may come in
    /// several rows (they add up).
    ///
    /// # Errors
    /// The backend's, when its data plane cannot be read.
    fn read(&self) -> Result<Vec<ConnectionCount>, SinkError>;
}

/// The Service port of each destination of a node view.
#[derive(Debug, Default)]
pub struct ServicePorts<'a> {
    addresses: HashMap<(Protocol, SocketAddr), (&'a ServiceName, &'a ServicePort)>,
    node_ports: HashMap<(Protocol, u16), (&'a ServiceName, &'a ServicePort)>,
}

impl<'a> ServicePorts<'a> {
    /// Indexes every address and node port of `view`'s Services (at
    /// 10k Services, a few milliseconds).
    pub fn of(view: &'a NodeView) -> Self {
        let mut out = Self::default();
        for (name, service) in &view.services {
            let svc = &service.service;
            // Typed when the Service entered: nothing to parse.
            let ips = svc.proxied_ips();
            for port in &svc.ports {
                let protocol = port.protocol();
                if let Ok(number) = u16::try_from(port.port) {
                    for ip in ips {
                        out.addresses
                            .insert((protocol, SocketAddr::new(*ip, number)), (name, port));
                    }
                }
                if let Ok(node_port) = u16::try_from(port.node_port)
                    && node_port != 0
                {
                    out.node_ports.insert((protocol, node_port), (name, port));
                }
            }
        }
        out
    }

    /// The Service and port `count` was addressed to, if the view holds
    /// it. An address that is no Service's is taken for a node's (the
    /// eBPF tc programs count node ports by the node address they were
    /// reached on), and its port for a node port.
    pub fn find(&self, count: &ConnectionCount) -> Option<(&'a ServiceName, &'a ServicePort)> {
        match count.destination {
            Destination::Address(addr) => self
                .addresses
                .get(&(count.protocol, addr))
                .or_else(|| self.node_ports.get(&(count.protocol, addr.port())))
                .copied(),
            Destination::NodePort(port) => self.node_ports.get(&(count.protocol, port)).copied(),
        }
    }
}
