//! What is asked: the packet, where it comes from, and the proxy's
//! settings and data path it meets.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use kpng_sink::ProxyConfig;
use serde::Serialize;

use crate::Error;

/// A packet's layer 4 protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

impl Protocol {
    /// As Services and nft spell it: `tcp`, `udp`, `sctp`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Tcp => "tcp",
            Self::Udp => "udp",
            Self::Sctp => "sctp",
        }
    }

    /// The model's protocol.
    pub fn model(self) -> kpng_model::v1::Protocol {
        match self {
            Self::Tcp => kpng_model::v1::Protocol::Tcp,
            Self::Udp => kpng_model::v1::Protocol::Udp,
            Self::Sctp => kpng_model::v1::Protocol::Sctp,
        }
    }
}

impl FromStr for Protocol {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s.to_ascii_lowercase().as_str() {
            "tcp" => Ok(Self::Tcp),
            "udp" => Ok(Self::Udp),
            "sctp" => Ok(Self::Sctp),
            _ => Err(Error::Protocol(s.to_owned())),
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a packet comes from, as the node's rules tell it apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// A pod on this node (its packets reach the node's routing from the
    /// pod's interface; with the eBPF backend, its sockets are the node's).
    Pod,
    /// A process of the node itself (the output path).
    Host,
    /// Another machine: a client outside the cluster, or a pod or node
    /// elsewhere sending through this node.
    Outside,
}

impl FromStr for Origin {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s.to_ascii_lowercase().as_str() {
            "pod" => Ok(Self::Pod),
            "host" | "node" => Ok(Self::Host),
            "outside" | "external" => Ok(Self::Outside),
            _ => Err(Error::Origin(s.to_owned())),
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Pod => "a pod on this node",
            Self::Host => "this node itself",
            Self::Outside => "outside this node",
        })
    }
}

/// The packet to explain: the first of a connection (or a datagram).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Packet {
    /// Where it comes from.
    pub origin: Origin,
    /// Its protocol.
    pub protocol: Protocol,
    /// Its source address.
    pub source: IpAddr,
    /// Its destination address.
    pub destination: IpAddr,
    /// Its destination port.
    pub port: u16,
    /// Its source port, when known: then a Maglev Service's endpoint for
    /// the flow is named exactly.
    pub source_port: Option<u16>,
}

impl Packet {
    /// The packet from source port `port`.
    #[must_use]
    pub fn from_port(mut self, port: u16) -> Self {
        self.source_port = Some(port);
        self
    }

    /// A packet.
    pub fn new(
        origin: Origin,
        protocol: Protocol,
        source: IpAddr,
        destination: IpAddr,
        port: u16,
    ) -> Self {
        Self {
            origin,
            protocol,
            source,
            destination,
            port,
            source_port: None,
        }
    }
}

impl fmt::Display for Packet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (s, d) = (self.source, self.destination);
        let at = |ip: IpAddr| match ip {
            IpAddr::V4(_) => ip.to_string(),
            IpAddr::V6(_) => format!("[{ip}]"),
        };
        let sport = self.source_port.map_or(String::new(), |p| format!(":{p}"));
        write!(
            f,
            "{} {}{sport} -> {}:{}, from {}",
            self.protocol,
            at(s),
            at(d),
            self.port,
            self.origin
        )
    }
}

/// Which mechanisms program the node: what the explanation follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DataPath {
    /// The nftables backend: every packet is translated in the node's NAT
    /// hooks; Services pick endpoints as their balancing says.
    Nftables,
    /// The iptables backend: the same rules as nftables', endpoints picked
    /// at random whatever a Service's balancing.
    Iptables,
    /// The eBPF backend: its socket programs serve the node's own and its
    /// pods' sockets at connect time. Services pick endpoints as their
    /// balancing says, except that sockets pick a Maglev Service's at
    /// random (a socket keeps its endpoint for its life).
    Ebpf {
        /// Its tc programs are on the interfaces packets from outside
        /// come in by (`--tc-interfaces`): they serve NodePorts, external
        /// IPs, LB IPs and ClusterIPs (TCP, UDP and SCTP), refuse and
        /// drop as the netfilter rules do.
        tc: bool,
        /// A netfilter backend runs beside it (`--north-south nft`, the
        /// default) for what the programs do not translate.
        netfilter: bool,
    },
}

/// The proxy's settings the explanation depends on.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Setup {
    /// kube-proxy's settings (`--cluster-cidr`, `--service-cidr`,
    /// `--nodeport-addresses`, `--masquerade-all`).
    pub proxy: ProxyConfig,
    /// The mechanisms programmed.
    pub data_path: DataPath,
    /// The routes the eBPF tc programs depend on, when they can be asked
    /// (see [`with_tc_routes`](Self::with_tc_routes)).
    pub tc_routes: Option<TcRoutes>,
    /// With [`DataPath::Ebpf`]: the node's own sockets reach NodePorts on
    /// `127.0.0.1` and `::1` (inside `--nodeport-addresses`, or that
    /// unset), as `to-ebpf --localhost-nodeports` (the default) serves
    /// them. The netfilter backends never serve NodePorts on loopback.
    pub localhost_nodeports: bool,
}

impl Setup {
    /// The settings (localhost NodePorts on, as `to-ebpf`'s default).
    pub fn new(proxy: ProxyConfig, data_path: DataPath) -> Self {
        Self {
            proxy,
            data_path,
            tc_routes: None,
            localhost_nodeports: true,
        }
    }

    /// Whether the eBPF backend serves localhost NodePorts (see
    /// [`Setup::localhost_nodeports`]).
    #[must_use]
    pub fn localhost_nodeports(mut self, on: bool) -> Self {
        self.localhost_nodeports = on;
        self
    }

    /// Asks `around` of each endpoint on another node that the eBPF tc
    /// programs send `externalTrafficPolicy: Cluster` traffic to: the
    /// interface its route leaves by when that interface has no tc
    /// programs (`no route` when there is none), `None` when the route
    /// goes through them. The tc programs masquerade at the interface a
    /// packet leaves by, so an endpoint reached around them sees the
    /// client's address and answers it directly: the explanation names
    /// it ([`Target::reached_around`](crate::Target::reached_around)).
    /// Without it, the explanation says it cannot know. On a node,
    /// `kpng_backend_ebpf::TcRoutes` answers as the backend's own check
    /// does.
    #[must_use]
    pub fn with_tc_routes(
        mut self,
        around: impl Fn(IpAddr) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.tc_routes = Some(TcRoutes(std::sync::Arc::new(around)));
        self
    }
}

/// How the routes of endpoints on other nodes go past the eBPF tc
/// programs (see [`Setup::with_tc_routes`]).
#[derive(Clone)]
pub struct TcRoutes(std::sync::Arc<dyn Fn(IpAddr) -> Option<String> + Send + Sync>);

impl TcRoutes {
    /// The interface without tc programs that `endpoint`'s route leaves
    /// by (`no route` when there is none); `None` when it goes through
    /// them.
    pub fn around(&self, endpoint: IpAddr) -> Option<String> {
        (self.0)(endpoint)
    }
}

impl fmt::Debug for TcRoutes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcRoutes").finish_non_exhaustive()
    }
}
