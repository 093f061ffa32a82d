//! What is answered: the steps, the candidate endpoints with their
//! reasons, and the outcome.

use std::fmt;
use std::net::IpAddr;

use serde::Serialize;

use crate::{Packet, render};

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
    /// Never, and an endpoint on another node is returned directly (the
    /// eBPF tc programs' DSR, `--load-balancer-mode` or the
    /// `kpng.io/load-balancer-mode` annotation): the flow goes to it with
    /// the client's address, the Service's carried in an IP option, and
    /// its node replies to the client straight.
    DirectReturn,
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
    /// For the eBPF tc programs under `externalTrafficPolicy: Cluster`,
    /// an endpoint on another node whose route leaves by an interface
    /// without the programs: that interface's name (`no route` when there
    /// is none). The packet goes there with the client's address and the
    /// reply does not come back through this node: the connection fails.
    /// `None` when it is reached through the programs or was not asked
    /// (see [`Setup::with_tc_routes`](crate::Setup::with_tc_routes)).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reached_around: Option<String>,
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

/// The explanation of one packet: see [`explain`](crate::explain). `Display` gives the
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
