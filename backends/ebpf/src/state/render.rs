//! What the maps should hold for one Service: its records, the endpoint
//! sets they lead to and its live ClusterIPs, as a [`Contribution`]
//! (before set numbers are known), and the node addresses its NodePorts
//! are reached on.

use std::collections::BTreeSet;
use std::net::IpAddr;

use kpng_model::view::{NodeView, ServiceView};
use kpng_model::{IpFamily, IpNet, ServiceName};

use super::{Claim, Contribution, SetName, Side};
use crate::layout::{
    BAL_MAGLEV, BAL_RR, EMPTY_DROP, EMPTY_REJECT, EXT_DSR, EXT_POD_SOURCES, EXT_RANGES, EXT_SNAT,
    EXT_SNAT_ALL, Endpoint, Frontend, NODE_NETNS, RANGED_NO_PODS, RANGED_NODE, RANGED_PODS,
    SOCK_RANGED, model_protocol, proto_number,
};
use kpng_model::v1::Balancing;
use kpng_sink::ProxyConfig;

/// What the socket programs decide an LB IP with
/// `loadBalancerSourceRanges` by when no netfilter rules run beside them
/// to check a packet's source: the node's addresses (its own sockets'
/// sources) and the pod networks (`--cluster-cidr`, its pods').
#[derive(Debug, Default)]
pub(crate) struct Sources {
    /// The node's addresses, from its Node object.
    pub(crate) node: Vec<IpAddr>,
    /// The pod networks.
    pub(crate) pods: Vec<IpNet>,
}

impl Sources {
    /// The flags of the socket record of an LB IP of `family` with
    /// `ranges`: the node's sockets translate when one of its addresses
    /// is in them (else fail); pods' when every pod network is (fail
    /// when none overlaps them; otherwise, or with no pod network known,
    /// they are left alone).
    fn flags(&self, family: IpFamily, ranges: &[IpNet]) -> u32 {
        let mut flags = SOCK_RANGED;
        let node_in = self
            .node
            .iter()
            .filter(|ip| IpFamily::of(ip) == family)
            .any(|ip| ranges.iter().any(|r| r.contains(ip)));
        if node_in {
            flags |= RANGED_NODE;
        }
        let pods: Vec<&IpNet> = self
            .pods
            .iter()
            .filter(|n| IpFamily::of(&n.network()) == family)
            .collect();
        if !pods.is_empty() {
            let inside = |p: &IpNet| ranges.iter().any(|r| r.contains(p));
            let overlaps = |p: &IpNet| ranges.iter().any(|r| r.contains(p) || p.contains(r));
            if pods.iter().all(|p| inside(p)) {
                flags |= RANGED_PODS;
            } else if !pods.iter().any(|p| overlaps(p)) {
                flags |= RANGED_NO_PODS;
            }
        }
        flags
    }
}

/// The addresses a local socket reaches NodePorts on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct NodePortIps {
    /// This node's addresses (from its Node object) inside
    /// `--nodeport-addresses`, or all of them.
    pub(crate) node: Vec<IpAddr>,
    /// The loopback addresses (`127.0.0.1`, `::1`) served to the node's
    /// own sockets (localhost NodePorts), each when asked for
    /// (`EbpfConfig::localhost_nodeports`) and inside
    /// `--nodeport-addresses` (or that unset).
    pub(crate) loopback: Vec<IpAddr>,
}

/// The addresses a local socket reaches NodePorts on: this node's
/// addresses (from its Node object) inside `--nodeport-addresses`, or all
/// of them; with `localhost`, the loopback address of each family inside
/// `--nodeport-addresses` too (or that unset), as kube-proxy's iptables
/// mode serves `127.0.0.1` (which serves no `::1`: it would need
/// `route_localnet`, which IPv6 has not; sockets need no route).
pub(crate) fn nodeport_ips(
    view: &NodeView,
    prefixes: Option<&[IpNet]>,
    localhost: bool,
) -> NodePortIps {
    let inside = |ip: &IpAddr| match prefixes {
        None => true,
        Some(prefixes) => prefixes
            .iter()
            .any(|net| kpng_model::addr::cidr_contains(*net, *ip)),
    };
    let mut node: Vec<IpAddr> = IpFamily::BOTH
        .into_iter()
        .flat_map(|f| view.node_addresses(f))
        .filter(|ip| !ip.is_loopback() && inside(ip))
        .collect();
    node.sort();
    node.dedup();
    let loopback = if localhost {
        [
            IpAddr::from(std::net::Ipv4Addr::LOCALHOST),
            IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
        ]
        .into_iter()
        .filter(inside)
        .collect()
    } else {
        Vec::new()
    };
    NodePortIps { node, loopback }
}

/// What `view` asks of the maps.
///
/// - ClusterIPs lead to the internal-policy endpoints (the local ones for
///   `internalTrafficPolicy: Local`).
/// - External IPs, LB IPs and NodePorts (on `node_ips.node`) lead to the
///   cluster-policy endpoints: a local socket is the node or one of its
///   pods, which kube-proxy sends to every endpoint whatever the
///   external policy.
/// - NodePorts on `node_ips.loopback` (localhost NodePorts) lead to the
///   same set, for the node's own network namespace only (`NODE_NETNS`):
///   kube-proxy's rules send the node's traffic to every endpoint,
///   masqueraded, under either external policy; a pod's loopback is its
///   own. Sockets only: no packet from outside is for loopback.
/// - LB IPs with `loadBalancerSourceRanges` get no record: the socket
///   goes on unchanged and the node's netfilter rules check its source
///   (see docs/reference/semantics.md). With `sources` (no netfilter
///   rules beside), they get one that says whose sockets it translates
///   ([`Sources::flags`]).
/// - A port with no endpoint at all is refused; a Local policy with no
///   local endpoint drops.
/// - With `external` (tc programs attached), packets from outside to a
///   Service's NodePorts, external IPs and LB IPs (source ranges
///   included) get records of their own: under
///   `externalTrafficPolicy: Local` they lead to the local endpoints,
///   under `Cluster` to every endpoint, masqueraded towards those on
///   other nodes. Its ClusterIPs get records too (a ClusterIP reached
///   from outside the node): the internal-policy endpoints, masqueraded
///   as kube-proxy's rules do (`external`'s settings): always with
///   `--masquerade-all`, else unless the source is in `--cluster-cidr`
///   (the pod networks, written to `kpng_ranges` for the record), never
///   when no cluster CIDR of the family is known.
/// - `balancing` (the Service's, or the default) is a flag of each
///   record without ClientIP affinity: round robin for sockets and
///   packets from outside; Maglev for packets from outside (the tc
///   programs hash each new flow; the set gets a Maglev table), sockets
///   pick at random. With affinity, a client's first endpoint is picked at
///   random, as the nftables backend does.
pub(crate) fn contribution(
    service: &ServiceName,
    view: &ServiceView,
    node_ips: &NodePortIps,
    external: Option<&ProxyConfig>,
    sources: Option<&Sources>,
    balancing: Balancing,
) -> Contribution {
    let mut out = Contribution::default();
    for family in IpFamily::BOTH {
        // No ClusterIP of this family: nothing of it (see below); its
        // plan is not worked out.
        if view.service.cluster_ips(family).is_empty() {
            continue;
        }
        let plan = view.plan(family);
        let v6 = family == IpFamily::V6;
        let cluster_ips: &[IpAddr] = plan.cluster_ips;
        if cluster_ips.is_empty() {
            // Not a Service of this family (single stack): nothing of it
            // here, its NodePorts included, as kube-proxy's proxier of
            // that family does not know it.
            continue;
        }
        let lb_ips: &[IpAddr] = if plan.source_ranges.is_empty() {
            plan.lb_ips
        } else {
            &[]
        };
        let externals: Vec<IpAddr> = plan.external_ips.iter().chain(lb_ips).copied().collect();
        let of_family = |ips: &[IpAddr]| -> Vec<IpAddr> {
            ips.iter()
                .copied()
                .filter(|ip| IpFamily::of(ip) == family)
                .collect()
        };
        let (node_ips, loopback) = (of_family(&node_ips.node), of_family(&node_ips.loopback));
        out.live.extend(cluster_ips.iter().copied());
        let local_ips: BTreeSet<IpAddr> = view
            .endpoints
            .iter()
            .filter(|e| e.is_local() && e.family() == family)
            .map(|e| e.ip())
            .collect();
        let affinity = plan.affinity.unwrap_or(0);
        let how = match balancing {
            _ if affinity > 0 => 0,
            Balancing::Maglev => BAL_MAGLEV,
            Balancing::RoundRobin => BAL_RR,
            _ => 0,
        };
        // Parsed once, when the plan was made.
        let ranges: Vec<(IpAddr, u8)> = plan
            .source_ranges
            .iter()
            .map(|r| (r.network(), r.prefix_len()))
            .collect();
        for port in &plan.ports {
            let proto = proto_number(port.protocol);
            let set = |local: bool| SetName {
                service: service.clone(),
                port: port.number,
                proto,
                v6,
                local,
            };
            let targets = |list: &[(IpAddr, u16)]| -> Vec<Endpoint> {
                list.iter()
                    .map(|&(ip, port)| Endpoint {
                        ip,
                        port,
                        local: local_ips.contains(&ip),
                    })
                    .collect()
            };
            let cluster = set(false);
            out.sets.insert(cluster.clone(), targets(&port.cluster));
            let flags = if port.cluster.is_empty() {
                EMPTY_REJECT
            } else {
                EMPTY_DROP
            };
            let internal = if plan.itp_local && !port.cluster.is_empty() {
                let local = set(true);
                out.sets.insert(local.clone(), targets(&port.local));
                local
            } else {
                cluster.clone()
            };
            let mut claim = |ip: IpAddr, number: u16, set: &SetName, more: u32| {
                let frontend = Frontend {
                    ip,
                    port: number,
                    proto,
                };
                let claim = Claim {
                    set: set.clone(),
                    affinity,
                    flags: flags | how | more,
                };
                out.records.insert((Side::Socket, frontend), claim);
            };
            for ip in cluster_ips {
                claim(*ip, port.number, &internal, 0);
            }
            for ip in &externals {
                claim(*ip, port.number, &cluster, 0);
            }
            if let Some(sources) = sources.filter(|_| !ranges.is_empty()) {
                let ranged = sources.flags(family, plan.source_ranges);
                for ip in plan.lb_ips {
                    claim(*ip, port.number, &cluster, ranged);
                }
            }
            if let Some(node_port) = port.node_port {
                for ip in &node_ips {
                    claim(*ip, node_port, &cluster, 0);
                }
                for ip in &loopback {
                    claim(*ip, node_port, &cluster, NODE_NETNS);
                }
            }
            if let Some(proxy) = external {
                // A ClusterIP from outside: as kube-proxy's rules.
                let pods: Vec<&IpNet> = proxy
                    .cluster_cidrs
                    .iter()
                    .filter(|n| IpFamily::of(&n.network()) == family)
                    .collect();
                let masquerade = if proxy.masquerade_all {
                    EXT_SNAT_ALL
                } else if pods.is_empty() {
                    0
                } else {
                    EXT_SNAT_ALL | EXT_POD_SOURCES
                };
                for ip in cluster_ips {
                    let frontend = Frontend {
                        ip: *ip,
                        port: port.number,
                        proto,
                    };
                    let claim = Claim {
                        set: internal.clone(),
                        affinity,
                        flags: flags | masquerade | how,
                    };
                    out.records.insert((Side::External, frontend), claim);
                    if masquerade & EXT_POD_SOURCES != 0 {
                        for net in &pods {
                            out.ranges
                                .insert((frontend, net.network(), net.prefix_len()));
                        }
                    }
                }
                // Local: the local endpoints, the client kept. Cluster:
                // every endpoint, masqueraded towards other nodes'.
                let (target, policy) = if plan.etp_local {
                    let local = set(true);
                    out.sets.insert(local.clone(), targets(&port.local));
                    (local, 0)
                } else if proxy.direct_return(view.service.service(), model_protocol(proto)) {
                    // Returned directly: the endpoint's node restores
                    // the Service's address, carried in an IP option.
                    (cluster.clone(), EXT_DSR)
                } else {
                    (cluster.clone(), EXT_SNAT)
                };
                let mut claim = |ip: IpAddr, number: u16, ranged: bool| {
                    let frontend = Frontend {
                        ip,
                        port: number,
                        proto,
                    };
                    let claim = Claim {
                        set: target.clone(),
                        affinity,
                        flags: flags | policy | how | if ranged { EXT_RANGES } else { 0 },
                    };
                    out.records.insert((Side::External, frontend), claim);
                    frontend
                };
                if let Some(node_port) = port.node_port {
                    for ip in &node_ips {
                        claim(*ip, node_port, false);
                    }
                }
                for ip in plan.external_ips.iter().copied() {
                    claim(ip, port.number, false);
                }
                for ip in plan.lb_ips.iter().copied() {
                    let ranged = !ranges.is_empty();
                    let frontend = claim(ip, port.number, ranged);
                    for &(net, len) in &ranges {
                        out.ranges.insert((frontend, net, len));
                    }
                }
            }
        }
    }
    // Only the sets a record leads to (a family with no address of the
    // Service needs none).
    let used: BTreeSet<&SetName> = out.records.values().map(|c| &c.set).collect();
    let sets = std::mem::take(&mut out.sets);
    out.sets = sets
        .into_iter()
        .filter(|(name, _)| used.contains(name))
        .collect();
    out
}
