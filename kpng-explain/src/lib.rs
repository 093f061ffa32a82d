//! Explains what a kpng-rs proxy does with one packet on one node.
//!
//! Given the cluster state (a store [`Snapshot`]), a node, the proxy's
//! settings ([`Setup`]) and a [`Packet`] (source, destination, port,
//! protocol; from a pod on the node, from the node itself or from
//! outside), [`explain`] says, step by step and with the reason for
//! each, what the node's rules do with it:
//!
//! - the Service and port it hits, and as what (ClusterIP, externalIP, LB
//!   IP, NodePort);
//! - the traffic policy that applies, and the endpoint set it picks;
//! - every candidate endpoint, used or not, and why (ready, topology
//!   hints, the terminating fallback, local or not);
//! - ClientIP affinity;
//! - masquerade or not, and why;
//! - or a reject or a drop, and why (no endpoint, source ranges, an
//!   unallocated Service CIDR address, an unknown port, ipMode Proxy).
//!
//! The endpoint choice is `kpng-view`'s own ([`kpng_view::selection`]),
//! so what is explained is what the node view holds; the data-plane
//! steps follow the backends' rules (docs/semantics.md), for netfilter
//! (nftables, iptables) or the eBPF programs ([`DataPath`]). The lab
//! (`kpng-lab`) checks every answer against real packets.
//!
//! # Example
//!
//! ```
//! use kpng_explain::{DataPath, Origin, Outcome, Packet, Protocol, Setup, explain};
//! use kpng_kube::{Ingest, IngestConfig, file};
//! use kpng_store::Store;
//!
//! let manifest = r#"
//! apiVersion: v1
//! kind: List
//! items:
//! - {apiVersion: v1, kind: Node, metadata: {name: node-a}}
//! - apiVersion: v1
//!   kind: Service
//!   metadata: {namespace: t, name: web}
//!   spec: {clusterIP: 10.96.0.10, ports: [{name: http, port: 80, targetPort: 8080}]}
//! - apiVersion: discovery.k8s.io/v1
//!   kind: EndpointSlice
//!   metadata: {namespace: t, name: web-1, labels: {kubernetes.io/service-name: web}}
//!   addressType: IPv4
//!   endpoints: [{addresses: [10.244.2.10], nodeName: node-b}]
//!   ports: [{name: http, port: 8080, protocol: TCP}]
//! "#;
//! let mut ingest = Ingest::new(Store::new(), IngestConfig::default());
//! ingest.load(&file::parse_str("cluster.yaml", manifest)?);
//! let snapshot = ingest.reader().snapshot();
//!
//! let setup = Setup::new(
//!     kpng_sink::ProxyConfig::default().cluster_cidrs(["10.244.0.0/16".parse()?]),
//!     DataPath::Nftables,
//! );
//! let packet = Packet::new(
//!     Origin::Pod,
//!     Protocol::Tcp,
//!     "10.244.1.99".parse()?,
//!     "10.96.0.10".parse()?,
//!     80,
//! );
//! let explained = explain(&snapshot, "node-a", &setup, &packet)?;
//! let Outcome::Translated { endpoints, masquerade, .. } = &explained.outcome else {
//!     panic!("{explained}");
//! };
//! assert_eq!(endpoints[0].ip.to_string(), "10.244.2.10");
//! assert_eq!(masquerade, &kpng_explain::Masquerade::No);
//! println!("{explained}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

mod render;

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use kpng_model::view::{NodeView, PortPlan, ServicePlan, ServiceView};
use kpng_model::{IpFamily, IpNet, ServiceName};
use kpng_sink::ProxyConfig;
use kpng_store::Snapshot;
use serde::Serialize;

/// What can go wrong before anything is explained.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The source and destination are not of one IP family.
    #[error("the source {from} and the destination {destination} are not of one IP family")]
    MixedFamilies {
        /// The source.
        from: IpAddr,
        /// The destination.
        destination: IpAddr,
    },
    /// The node has no Node object in the state: a mistyped name, most
    /// likely.
    #[error("node {node:?} is not in the cluster state (its nodes: {known})")]
    UnknownNode {
        /// The name given.
        node: String,
        /// The nodes the state has, the first few.
        known: String,
    },
    /// A word that names no protocol.
    #[error("unknown protocol {0:?}: tcp, udp or sctp")]
    Protocol(String),
    /// A word that names no origin.
    #[error("unknown origin {0:?}: pod, host or outside")]
    Origin(String),
}

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
}

impl Setup {
    /// The settings.
    pub fn new(proxy: ProxyConfig, data_path: DataPath) -> Self {
        Self { proxy, data_path }
    }
}

/// What the Service address a packet hit is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A ClusterIP.
    ClusterIp,
    /// An externalIP.
    ExternalIp,
    /// A load-balancer ingress IP (ipMode VIP or unset).
    LoadBalancerIp,
    /// A NodePort on one of the NodePort addresses.
    NodePort,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::ClusterIp => "ClusterIP",
            Self::ExternalIp => "externalIP",
            Self::LoadBalancerIp => "load-balancer IP",
            Self::NodePort => "NodePort",
        })
    }
}

/// Whether the translated packet's source is rewritten to the node's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Masquerade {
    /// Always: the endpoint sees the node's address.
    Yes,
    /// Never: the endpoint sees the client's address.
    No,
    /// Only when the endpoint chosen is the client itself (hairpin).
    Hairpin,
    /// Only towards endpoints on other nodes (the eBPF tc programs): a
    /// local endpoint sees the client.
    RemoteEndpoints,
}

/// How a new connection picks its endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Balancing {
    /// Uniformly at random.
    Random,
    /// By the flow's slot in the Service port's Maglev table (a hash of
    /// its source address and port): the same endpoint for the flow on
    /// every node while that endpoint stays.
    Maglev,
    /// In turn.
    RoundRobin,
}

/// What translates the packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mechanism {
    /// Netfilter NAT rules.
    Netfilter,
    /// The eBPF socket programs, at connect (or sendmsg): no packet is
    /// translated.
    Sockets,
    /// The eBPF tc programs at the interface.
    Tc,
}

/// One endpoint a translated packet may go to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Target {
    /// The endpoint's address.
    pub ip: IpAddr,
    /// Its port for this Service port.
    pub port: u16,
    /// Its node (empty when unknown).
    pub node: String,
    /// On this node.
    pub local: bool,
}

/// What happens to the packet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "verdict")]
#[non_exhaustive]
pub enum Outcome {
    /// Sent to one of `endpoints`.
    Translated {
        /// The Service, `namespace/name`.
        service: String,
        /// The Service port's name (empty when unnamed).
        port: String,
        /// What the destination is to the Service.
        role: Role,
        /// The endpoints one is chosen from (uniformly at random, unless
        /// affinity holds the client to one).
        endpoints: Vec<Target>,
        /// Whether the source is rewritten.
        masquerade: Masquerade,
        /// ClientIP affinity's timeout, when the Service has it.
        affinity_seconds: Option<u32>,
        /// How the endpoint is picked (affinity aside).
        balancing: Balancing,
        /// What translates it.
        mechanism: Mechanism,
    },
    /// Refused: an ICMP port unreachable (or `ECONNREFUSED` at connect).
    Rejected {
        /// Why.
        reason: String,
    },
    /// Dropped: the client times out (or gets `EPERM` at connect).
    Dropped {
        /// Why.
        reason: String,
    },
    /// Not for the proxy: the packet goes on as routed.
    Untouched {
        /// Why.
        reason: String,
    },
}

/// One candidate endpoint of the Service, used or not, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EndpointReason {
    /// Its address in the packet's family.
    pub ip: IpAddr,
    /// Its node.
    pub node: String,
    /// Its conditions.
    pub ready: bool,
    /// Serving.
    pub serving: bool,
    /// Terminating.
    pub terminating: bool,
    /// Used under `Cluster` policies.
    pub cluster: bool,
    /// Used under `Local` policies.
    pub local: bool,
    /// Why, in words.
    pub why: String,
}

/// The explanation of one packet: see [`explain`]. `Display` gives the
/// text; `serde` the JSON.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Explanation {
    /// The node.
    pub node: String,
    /// The packet.
    pub packet: Packet,
    /// What the rules do, step by step, each with its reason.
    pub steps: Vec<String>,
    /// The Service's candidate endpoints in the packet's family, when a
    /// Service port was hit.
    pub endpoints: Vec<EndpointReason>,
    /// What happens.
    pub outcome: Outcome,
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        render::text(self, f)
    }
}

/// Explains what node `node`, programmed from `snapshot` with `setup`,
/// does with `packet`.
///
/// # Errors
/// [`Error::MixedFamilies`] when the packet's addresses are of two
/// families; [`Error::UnknownNode`] when the state has no Node object of
/// that name.
pub fn explain(
    snapshot: &Snapshot,
    node: &str,
    setup: &Setup,
    packet: &Packet,
) -> Result<Explanation, Error> {
    let family = IpFamily::of(&packet.destination);
    if IpFamily::of(&packet.source) != family {
        return Err(Error::MixedFamilies {
            from: packet.source,
            destination: packet.destination,
        });
    }
    if snapshot.node(node).is_none() {
        let known: Vec<String> = snapshot.nodes().take(5).map(|n| n.name.clone()).collect();
        return Err(Error::UnknownNode {
            node: node.to_owned(),
            known: if known.is_empty() {
                "none".into()
            } else {
                known.join(", ")
            },
        });
    }
    let view = kpng_view::node_view(snapshot, node);
    let mut run = Run {
        snapshot,
        node,
        setup,
        packet,
        family,
        view: &view,
        steps: Vec::new(),
        endpoints: Vec::new(),
        described: false,
    };
    let outcome = run.walk();
    Ok(Explanation {
        node: node.to_owned(),
        packet: *packet,
        steps: run.steps,
        endpoints: run.endpoints,
        outcome,
    })
}

/// What the destination is, among the node view's Services.
enum Found<'a> {
    /// A Service port, by address and port.
    Port {
        service: &'a ServiceView,
        port: usize,
        role: Role,
    },
    /// An LB IP of ipMode Proxy.
    ProxyIp(&'a ServiceView),
    /// A ClusterIP, but no port of its Service matches.
    ClusterIpOtherPort(&'a ServiceView),
    /// Nothing.
    Nothing,
}

struct Run<'a> {
    snapshot: &'a Snapshot,
    node: &'a str,
    setup: &'a Setup,
    packet: &'a Packet,
    family: IpFamily,
    view: &'a NodeView,
    steps: Vec<String>,
    endpoints: Vec<EndpointReason>,
    /// The Service port hit is described (by one mechanism, before it
    /// hands the packet to another).
    described: bool,
}

impl<'a> Run<'a> {
    fn step(&mut self, text: impl Into<String>) {
        self.steps.push(text.into());
    }

    fn walk(&mut self) -> Outcome {
        let found = self.find();
        match self.setup.data_path {
            DataPath::Nftables | DataPath::Iptables => self.netfilter(&found),
            DataPath::Ebpf { tc, netfilter } => self.ebpf(&found, tc, netfilter),
        }
    }

    /// The Service address (or NodePort) the packet is for: addresses
    /// first, then node ports, as the rules look them up.
    fn find(&self) -> Found<'a> {
        let (dst, p) = (self.packet.destination, self.packet);
        let matches =
            |port: &PortPlan<'_>| port.protocol == p.protocol.name() && port.number == p.port;
        let mut other_port = None;
        let mut proxy_ip = None;
        let mut node_port = None;
        let on_node_port = self.is_nodeport_address(dst);
        for service in self.view.services.values() {
            let plan = service.plan(self.family);
            let port = plan.ports.iter().position(matches);
            for (ips, role) in [
                (&plan.cluster_ips, Role::ClusterIp),
                (&plan.external_ips, Role::ExternalIp),
                (&plan.lb_ips, Role::LoadBalancerIp),
            ] {
                if ips.contains(&dst) {
                    match port {
                        Some(port) => {
                            return Found::Port {
                                service,
                                port,
                                role,
                            };
                        }
                        None if role == Role::ClusterIp => other_port = Some(&**service),
                        None => {}
                    }
                }
            }
            if kpng_model::addr::family_of(
                service.service.load_balancer_proxy_ips.as_deref(),
                self.family,
            )
            .iter()
            .any(|t| t.parse() == Ok(dst))
            {
                proxy_ip = Some(&**service);
            }
            if on_node_port
                && node_port.is_none()
                && let Some(port) = plan
                    .ports
                    .iter()
                    .position(|q| q.protocol == p.protocol.name() && q.node_port == Some(p.port))
            {
                node_port = Some((&**service, port));
            }
        }
        if let Some((service, port)) = node_port {
            return Found::Port {
                service,
                port,
                role: Role::NodePort,
            };
        }
        if let Some(service) = other_port {
            return Found::ClusterIpOtherPort(service);
        }
        proxy_ip.map_or(Found::Nothing, Found::ProxyIp)
    }

    /// The node's NodePort addresses hold `ip`: one of the node's own
    /// (its Node object's), within `--nodeport-addresses` when set; never
    /// loopback.
    fn is_nodeport_address(&self, ip: IpAddr) -> bool {
        if ip.is_loopback() {
            return false;
        }
        match &self.setup.proxy.nodeport_addresses {
            // The rules check that the address is the node's (fib) and in
            // the prefixes: an address in them is taken to be the node's.
            Some(prefixes) => prefixes.iter().any(|n| n.contains(&ip)),
            None => self.view.node_addresses(self.family).any(|a| a == ip),
        }
    }

    fn in_cluster_cidr(&self, ip: IpAddr) -> Option<IpNet> {
        self.setup
            .proxy
            .cluster_cidrs
            .iter()
            .find(|n| n.contains(&ip))
            .copied()
    }

    fn has_cluster_cidr(&self) -> bool {
        self.setup
            .proxy
            .cluster_cidrs
            .iter()
            .any(|n| IpFamily::of(&n.network()) == self.family)
    }

    fn service_cidr(&self, ip: IpAddr) -> Option<IpNet> {
        self.view
            .service_cidrs_with(&self.setup.proxy.service_cidrs)
            .into_iter()
            .find(|n| n.contains(&ip))
    }

    /// Netfilter: the NAT rules, then the filter rules for what they did
    /// not translate.
    fn netfilter(&mut self, found: &Found<'a>) -> Outcome {
        match *found {
            Found::Port {
                service,
                port,
                role,
            } => self.netfilter_port(service, port, role),
            Found::ClusterIpOtherPort(service) => {
                self.unknown_port(service, "ICMP port unreachable")
            }
            Found::ProxyIp(service) => self.proxy_ip(service),
            Found::Nothing => self.unallocated_or_untouched(),
        }
    }

    /// A ClusterIP of `service` on a port it does not have: refused
    /// (`how`, as the mechanism refuses).
    fn unknown_port(&mut self, service: &ServiceView, how: &str) -> Outcome {
        let name = service.service.service_name();
        self.step(format!(
            "{} is a ClusterIP of Service {name}, which has no {} port {}",
            self.packet.destination, self.packet.protocol, self.packet.port
        ));
        Outcome::Rejected {
            reason: format!("unknown port on a live ClusterIP ({name}): {how}"),
        }
    }

    fn proxy_ip(&mut self, service: &ServiceView) -> Outcome {
        let name = service.service.service_name();
        self.step(format!(
            "{} is a load-balancer IP of Service {name} with ipMode Proxy: not programmed, the load balancer sends traffic to the endpoints itself",
            self.packet.destination
        ));
        Outcome::Untouched {
            reason: format!("ipMode Proxy load-balancer IP of {name}: not programmed"),
        }
    }

    fn unallocated_or_untouched(&mut self) -> Outcome {
        let dst = self.packet.destination;
        if let Some(net) = self.service_cidr(dst) {
            self.step(format!(
                "{dst} is in the Service CIDR {net}, and no Service has it (an unallocated Service address)"
            ));
            return Outcome::Dropped {
                reason: format!("unallocated address {dst} in the Service CIDR {net}"),
            };
        }
        self.step(format!(
            "{dst}:{} ({}) is no Service address, externalIP, load-balancer IP or NodePort of this node",
            self.packet.port, self.packet.protocol
        ));
        Outcome::Untouched {
            reason: "not a Service's: the packet goes on as routed".into(),
        }
    }

    fn netfilter_port(&mut self, service: &'a ServiceView, port: usize, role: Role) -> Outcome {
        let plan = service.plan(self.family);
        let pp = &plan.ports[port];
        let name = service.service.service_name();
        self.describe_hit(&name, pp, role);
        let origin = self.packet.origin;

        // Source ranges: checked where packets come in (prerouting), on
        // LB IPs only.
        if role == Role::LoadBalancerIp && !plan.source_ranges.is_empty() {
            if origin == Origin::Host {
                self.step("loadBalancerSourceRanges are checked on packets coming in, not on the node's own");
            } else if let Some(dropped) = self.source_ranges(&name, &plan.source_ranges, "") {
                return dropped;
            }
        }
        if pp.cluster.is_empty() {
            return self.no_usable_endpoint(&name, pp, "ICMP port unreachable");
        }
        let (local, masquerade) = self.netfilter_policy(&plan, role);
        let targets = self.targets(service, pp, local);
        if targets.is_empty() {
            let which = if role == Role::ClusterIp {
                "internalTrafficPolicy"
            } else {
                "externalTrafficPolicy"
            };
            self.step(format!(
                "{which}: Local, and this node has no endpoint of {name}"
            ));
            return Outcome::Dropped {
                reason: format!("{which} Local and no endpoint of {name} on this node"),
            };
        }
        let masquerade = self.hairpin(masquerade, &targets);
        self.affinity(&plan);
        self.translated(
            &name,
            pp,
            role,
            targets,
            masquerade,
            plan.affinity,
            Mechanism::Netfilter,
        )
    }

    /// Which endpoint set (local or cluster) and whether to masquerade,
    /// as the netfilter rules decide.
    fn netfilter_policy(&mut self, plan: &ServicePlan<'_>, role: Role) -> (bool, Masquerade) {
        let (src, origin) = (self.packet.source, self.packet.origin);
        let masquerade_all = self.setup.proxy.masquerade_all;
        if role == Role::ClusterIp {
            let local = plan.itp_local;
            self.step(if local {
                "internalTrafficPolicy: Local: this node's endpoints only".to_owned()
            } else {
                "internalTrafficPolicy: Cluster: the cluster's endpoints".to_owned()
            });
            let masquerade = if masquerade_all {
                self.step("masquerade: yes (--masquerade-all)");
                Masquerade::Yes
            } else if !self.has_cluster_cidr() {
                self.step(
                    "masquerade: no (no --cluster-cidr of this family to tell pods from others)",
                );
                Masquerade::No
            } else if let Some(net) = self.in_cluster_cidr(src) {
                self.step(format!(
                    "masquerade: no (the source {src} is in --cluster-cidr {net})"
                ));
                Masquerade::No
            } else {
                self.step(format!(
                    "masquerade: yes (the source {src} is outside --cluster-cidr: ClusterIP traffic from outside the pod network)"
                ));
                Masquerade::Yes
            };
            return (local, masquerade);
        }
        if !plan.etp_local {
            self.step("externalTrafficPolicy: Cluster: the cluster's endpoints");
            self.step("masquerade: yes (external traffic under externalTrafficPolicy Cluster)");
            return (false, Masquerade::Yes);
        }
        self.step("externalTrafficPolicy: Local");
        if self.has_cluster_cidr()
            && let Some(net) = self.in_cluster_cidr(src)
        {
            self.step(format!(
                "the source {src} is a pod (in --cluster-cidr {net}): pods short-circuit to the cluster's endpoints; masquerade: no"
            ));
            return (false, Masquerade::No);
        }
        let node_source =
            origin == Origin::Host || self.view.node_addresses(self.family).any(|a| a == src);
        if node_source {
            self.step("the source is this node: the cluster's endpoints; masquerade: yes");
            return (false, Masquerade::Yes);
        }
        self.step(
            "from elsewhere: this node's endpoints only, the client address kept; masquerade: no",
        );
        (true, Masquerade::No)
    }

    /// A Service port's local endpoints include the client itself:
    /// masqueraded then (hairpin), whatever else.
    fn hairpin(&mut self, masquerade: Masquerade, targets: &[Target]) -> Masquerade {
        let src = self.packet.source;
        if masquerade == Masquerade::No && targets.iter().any(|t| t.local && t.ip == src) {
            self.step(format!(
                "the client {src} is one of the endpoints: if it is chosen, the packet is masqueraded (hairpin)"
            ));
            return Masquerade::Hairpin;
        }
        masquerade
    }

    fn affinity(&mut self, plan: &ServicePlan<'_>) {
        if let Some(seconds) = plan.affinity {
            self.step(format!(
                "sessionAffinity ClientIP: {} keeps the endpoint first chosen for {seconds} s after its last use",
                self.packet.source
            ));
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn translated(
        &mut self,
        name: &ServiceName,
        pp: &PortPlan<'_>,
        role: Role,
        endpoints: Vec<Target>,
        masquerade: Masquerade,
        affinity_seconds: Option<u32>,
        mechanism: Mechanism,
    ) -> Outcome {
        let balancing = self.balancing(name, mechanism, affinity_seconds.is_some());
        let socket_maglev = mechanism == Mechanism::Sockets
            && self.view.services.get(name).is_some_and(|s| {
                self.setup.proxy.balancing_of(&s.service) == kpng_model::v1::Balancing::Maglev
            });
        self.step(match balancing {
            Balancing::Random if socket_maglev && affinity_seconds.is_none() => {
                "picked uniformly at random at connect (a Maglev Service: the socket keeps its endpoint for its life, so there is no flow to hash; Maglev's hash serves packets from outside)".to_owned()
            }
            Balancing::Random => "picked uniformly at random".to_owned(),
            Balancing::RoundRobin if mechanism == Mechanism::Netfilter => "picked in turn (round robin; Service ports with as many endpoints share the turn)".to_owned(),
            Balancing::RoundRobin => "picked in turn (round robin; the turn is the Service port's own, for sockets and packets from outside alike)".to_owned(),
            Balancing::Maglev => format!(
                "picked by the flow's slot in the Maglev table ({} slots): a hash of its source address and port, so the flow keeps its endpoint while that stays, on every node",
                kpng_model::maglev::SLOTS
            ),
        });
        let mut endpoints = endpoints;
        if let (Balancing::Maglev, Some(sport)) = (balancing, self.packet.source_port) {
            let targets: Vec<(IpAddr, u16)> = endpoints.iter().map(|t| (t.ip, t.port)).collect();
            let table = kpng_model::maglev::table(&targets, kpng_model::maglev::SLOTS);
            let slot =
                kpng_model::maglev::flow_slot(self.packet.source, sport, kpng_model::maglev::SLOTS);
            if let Some(chosen) = table
                .get(slot as usize)
                .and_then(|&i| endpoints.get(i as usize))
                .cloned()
            {
                self.step(format!(
                    "this flow (source port {sport}) hashes to slot {slot} of {}, which names {}",
                    kpng_model::maglev::SLOTS,
                    target_text(&chosen)
                ));
                endpoints = vec![chosen];
            }
        }
        self.step(format!(
            "translated ({}) to {}",
            match mechanism {
                Mechanism::Netfilter => "DNAT in netfilter",
                Mechanism::Sockets =>
                    "at connect, by the eBPF socket programs: no packet is translated",
                Mechanism::Tc => "DNAT by the eBPF tc programs at the interface",
            },
            targets_text(&endpoints)
        ));
        Outcome::Translated {
            service: name.to_string(),
            port: pp.port.name.clone(),
            role,
            endpoints,
            masquerade,
            affinity_seconds,
            balancing,
            mechanism,
        }
    }

    /// How the Service picks endpoints by `mechanism`: its balancing (or
    /// the default) without affinity, in the nftables rules and the eBPF
    /// programs; random in iptables' rules. The eBPF socket programs pick a
    /// Maglev Service's endpoint at random (a connected socket keeps its
    /// endpoint for its life: there is no flow of it to keep in place).
    fn balancing(&self, name: &ServiceName, mechanism: Mechanism, affinity: bool) -> Balancing {
        use kpng_model::v1::Balancing as Wanted;
        if self.setup.data_path == DataPath::Iptables || affinity {
            return Balancing::Random;
        }
        let Some(service) = self.view.services.get(name) else {
            return Balancing::Random;
        };
        match self.setup.proxy.balancing_of(&service.service) {
            Wanted::Maglev if mechanism == Mechanism::Sockets => Balancing::Random,
            Wanted::Maglev => Balancing::Maglev,
            Wanted::RoundRobin => Balancing::RoundRobin,
            _ => Balancing::Random,
        }
    }

    /// Names the Service port hit and explains its endpoints (once).
    fn describe_hit(&mut self, name: &ServiceName, pp: &PortPlan<'_>, role: Role) {
        if std::mem::replace(&mut self.described, true) {
            return;
        }
        let dst = self.packet.destination;
        let what = match role {
            Role::NodePort => format!(
                "{dst} is a NodePort address of this node, and {} port {} is a NodePort",
                pp.protocol, self.packet.port
            ),
            _ => format!("{dst} is a {role}"),
        };
        self.step(format!(
            "{what} of Service {name}, port {} ({} {})",
            port_label(pp),
            pp.protocol,
            pp.number
        ));
        self.explain_endpoints(name);
    }

    /// The Service port's endpoints in the local or cluster set.
    fn targets(&self, service: &ServiceView, pp: &PortPlan<'_>, local: bool) -> Vec<Target> {
        let set = if local { &pp.local } else { &pp.cluster };
        set.iter()
            .map(|(ip, port)| {
                let endpoint = service.endpoints.iter().find(|e| e.ip() == *ip);
                Target {
                    ip: *ip,
                    port: *port,
                    node: endpoint.map_or(String::new(), |e| e.endpoint().node_name().to_owned()),
                    local: endpoint.is_some_and(|e| e.is_local()),
                }
            })
            .collect()
    }

    /// The candidates of the Service in the packet's family, each with
    /// why it is used or not (kpng-view's own decisions).
    fn explain_endpoints(&mut self, name: &ServiceName) {
        let Some(selection) = kpng_view::selection(self.snapshot, name, self.node) else {
            return;
        };
        let Some(family) = selection.families.iter().find(|f| f.family == self.family) else {
            return;
        };
        let zone = selection.zone.as_str();
        self.step(render::selection_summary(family, zone));
        self.endpoints = family
            .candidates
            .iter()
            .map(|c| render::endpoint_reason(c, family, zone))
            .collect();
    }

    /// The eBPF backend: socket programs for the node's own sockets, tc
    /// programs for packets from outside (with `tc`), the netfilter
    /// backend (with `netfilter`) for the rest.
    fn ebpf(&mut self, found: &Found<'a>, tc: bool, netfilter: bool) -> Outcome {
        let origin = self.packet.origin;
        if origin == Origin::Outside {
            if !tc {
                return self.rest(found, netfilter);
            }
            match *found {
                Found::Port {
                    service,
                    port,
                    role,
                } => return self.tc(service, port, role),
                Found::ClusterIpOtherPort(service) => {
                    return self.unknown_port(
                        service,
                        "an ICMP port unreachable, built by the eBPF tc programs",
                    );
                }
                Found::Nothing => {
                    if let Some(outcome) = self.unallocated("dropped by the eBPF tc programs") {
                        return outcome;
                    }
                }
                Found::ProxyIp(_) => {}
            }
            return self.rest(found, netfilter);
        }
        match *found {
            Found::Port {
                service,
                port,
                role,
            } => self.sockets(service, port, role, netfilter),
            Found::ClusterIpOtherPort(service) => {
                self.unknown_port(service, "the connect fails with ECONNREFUSED")
            }
            Found::ProxyIp(service) => self.proxy_ip(service),
            Found::Nothing => self
                .unallocated("the connect fails with EPERM")
                .unwrap_or_else(|| self.rest(found, netfilter)),
        }
    }

    /// An unallocated address of the Service CIDRs: dropped (`how`, as
    /// the mechanism drops it); `None` when the destination is none.
    fn unallocated(&mut self, how: &str) -> Option<Outcome> {
        let dst = self.packet.destination;
        let net = self.service_cidr(dst)?;
        self.step(format!(
            "{dst} is in the Service CIDR {net}, and no Service has it (an unallocated Service address)"
        ));
        Some(Outcome::Dropped {
            reason: format!("unallocated address {dst} in the Service CIDR {net}: {how}"),
        })
    }

    /// What the eBPF programs leave: the netfilter backend's, or nothing.
    fn rest(&mut self, found: &Found<'a>, netfilter: bool) -> Outcome {
        if netfilter {
            self.step("not served by the eBPF programs: the nftables rules beside them (--north-south nft)");
            return self.netfilter(found);
        }
        match *found {
            Found::Port {
                role: Role::NodePort,
                ..
            } => {
                self.step("not served by the eBPF programs, and no nftables rules (--north-south none): nothing listens on the node port");
                Outcome::Rejected {
                    reason: "no program serves it and nothing listens on the node port: the kernel refuses".into(),
                }
            }
            _ => {
                self.step(
                    "not served by the eBPF programs, and no nftables rules (--north-south none)",
                );
                Outcome::Untouched {
                    reason: "not served (--north-south none): the packet goes on as routed".into(),
                }
            }
        }
    }

    fn sockets(
        &mut self,
        service: &'a ServiceView,
        port: usize,
        role: Role,
        netfilter: bool,
    ) -> Outcome {
        let plan = service.plan(self.family);
        let pp = &plan.ports[port];
        let name = service.service.service_name();
        self.describe_hit(&name, pp, role);
        if role == Role::LoadBalancerIp && !plan.source_ranges.is_empty() {
            self.step("an LB IP with loadBalancerSourceRanges: the socket programs leave it, so that the rules check the source");
            if netfilter {
                return self.netfilter(&Found::Port {
                    service,
                    port,
                    role,
                });
            }
            return Outcome::Untouched {
                reason: "an LB IP with source ranges, not served (--north-south none)".into(),
            };
        }
        self.step(format!(
            "from {}: the eBPF socket programs serve this socket at connect",
            self.packet.origin
        ));
        if pp.cluster.is_empty() {
            return self.no_usable_endpoint(&name, pp, "the connect fails with ECONNREFUSED");
        }
        let local = role == Role::ClusterIp && plan.itp_local;
        self.step(match role {
            Role::ClusterIp if local => "internalTrafficPolicy: Local: this node's endpoints only",
            Role::ClusterIp => "internalTrafficPolicy: Cluster: the cluster's endpoints",
            _ => "the node's and its pods' traffic to external addresses: the cluster's endpoints, whatever the external policy",
        });
        let targets = self.targets(service, pp, local);
        if targets.is_empty() {
            self.step(format!(
                "internalTrafficPolicy: Local, and this node has no endpoint of {name}"
            ));
            return Outcome::Dropped {
                reason: format!(
                    "internalTrafficPolicy Local and no endpoint of {name} on this node: the connect fails with EPERM"
                ),
            };
        }
        self.step("masquerade: no (no packet is translated: the endpoint sees the client, and a pod reaching itself connects to itself)");
        if plan.affinity.is_some() {
            self.step("affinity is kept per client network namespace");
        }
        self.affinity(&plan);
        self.translated(
            &name,
            pp,
            role,
            targets,
            Masquerade::No,
            plan.affinity,
            Mechanism::Sockets,
        )
    }

    /// An LB IP's loadBalancerSourceRanges against the packet's source:
    /// the drop when it is outside them (`dropped` says where).
    fn source_ranges(
        &mut self,
        name: &ServiceName,
        ranges: &[IpNet],
        dropped: &str,
    ) -> Option<Outcome> {
        let src = self.packet.source;
        if ranges.iter().any(|n| n.contains(&src)) {
            self.step(format!(
                "the source {src} is in loadBalancerSourceRanges ({})",
                list(ranges)
            ));
            return None;
        }
        self.step(format!(
            "the source {src} is outside loadBalancerSourceRanges ({}){dropped}",
            list(ranges)
        ));
        Some(Outcome::Dropped {
            reason: format!("source {src} outside the loadBalancerSourceRanges of {name}"),
        })
    }

    /// A Service port with no usable endpoint anywhere: rejected, `how`.
    fn no_usable_endpoint(&mut self, name: &ServiceName, pp: &PortPlan<'_>, how: &str) -> Outcome {
        self.step(format!(
            "Service port {name}:{} has no usable endpoint anywhere",
            port_label(pp)
        ));
        Outcome::Rejected {
            reason: format!("{name} has no usable endpoint: {how}"),
        }
    }

    /// The tc programs on a packet from outside to a Service port.
    fn tc(&mut self, service: &'a ServiceView, port: usize, role: Role) -> Outcome {
        let plan = service.plan(self.family);
        let pp = &plan.ports[port];
        let name = service.service.service_name();
        self.describe_hit(&name, pp, role);
        self.step("from outside, at an interface with the eBPF tc programs");
        if role == Role::LoadBalancerIp
            && !plan.source_ranges.is_empty()
            && let Some(dropped) =
                self.source_ranges(&name, &plan.source_ranges, ": dropped at ingress")
        {
            return dropped;
        }
        if pp.cluster.is_empty() {
            return self.no_usable_endpoint(
                &name,
                pp,
                "an ICMP port unreachable, built by the eBPF tc programs",
            );
        }
        let (local, masquerade) = if role == Role::ClusterIp {
            // As kube-proxy's rules: the internal policy's endpoints,
            // masqueraded unless the source is a pod.
            self.netfilter_policy(&plan, role)
        } else if plan.etp_local {
            self.step("externalTrafficPolicy: Local: this node's endpoints only, the client address kept; masquerade: no");
            (true, Masquerade::No)
        } else {
            self.step("externalTrafficPolicy: Cluster: the cluster's endpoints; masquerade: only towards endpoints on other nodes (a local endpoint's reply leaves through this node anyway)");
            (false, Masquerade::RemoteEndpoints)
        };
        let targets = self.targets(service, pp, local);
        if targets.is_empty() {
            let which = if role == Role::ClusterIp {
                "internalTrafficPolicy"
            } else {
                "externalTrafficPolicy"
            };
            self.step(format!(
                "{which}: Local, and this node has no endpoint of {name}"
            ));
            return Outcome::Dropped {
                reason: format!("{which} Local and no endpoint of {name} on this node"),
            };
        }
        self.affinity(&plan);
        self.translated(
            &name,
            pp,
            role,
            targets,
            masquerade,
            plan.affinity,
            Mechanism::Tc,
        )
    }
}

fn port_label(pp: &PortPlan<'_>) -> String {
    if pp.port.name.is_empty() {
        pp.number.to_string()
    } else {
        pp.port.name.clone()
    }
}

fn target_text(t: &Target) -> String {
    let at = match t.ip {
        IpAddr::V4(_) => format!("{}:{}", t.ip, t.port),
        IpAddr::V6(_) => format!("[{}]:{}", t.ip, t.port),
    };
    match (t.node.is_empty(), t.local) {
        (_, true) => format!("{at} (this node)"),
        (true, false) => at,
        (false, false) => format!("{at} ({})", t.node),
    }
}

/// `a`, or `one of 3: a, b, c`.
fn targets_text(targets: &[Target]) -> String {
    let all: Vec<String> = targets.iter().map(target_text).collect();
    match all.as_slice() {
        [one] => one.clone(),
        _ => format!("one of {}: {}", all.len(), all.join(", ")),
    }
}

fn list(nets: &[IpNet]) -> String {
    nets.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
