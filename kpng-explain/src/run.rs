//! The walk of one packet through a node's rules: what the destination
//! is, and the steps every mechanism shares (the Service port hit, its
//! endpoints, balancing, affinity, the translation). Each mechanism
//! interprets the rest in a file of its own: `netfilter.rs` (the nftables
//! and iptables rules), `sockets.rs` (the eBPF socket programs), `tc.rs`
//! (the eBPF tc programs), and `ebpf.rs` which of them serves a packet.

mod ebpf;
mod netfilter;
mod sockets;
mod tc;

use std::net::IpAddr;

use kpng_model::view::{NodeView, PortPlan, ServicePlan, ServiceView};
use kpng_model::{IpFamily, IpNet, ServiceName};
use kpng_store::Snapshot;

use crate::render::{self, list, port_label, target_text, targets_text};
use crate::{
    Balancing, DataPath, EndpointReason, Explanation, Masquerade, Mechanism, Origin, Outcome,
    Packet, Role, Setup, Target,
};

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

/// One packet's walk: what it meets, the steps said so far and the
/// candidate endpoints explained.
pub(crate) struct Run<'a> {
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
    /// A walk of `packet` through the rules of `node`, whose view is
    /// `view` (of `snapshot`).
    pub(crate) fn new(
        snapshot: &'a Snapshot,
        node: &'a str,
        setup: &'a Setup,
        packet: &'a Packet,
        family: IpFamily,
        view: &'a NodeView,
    ) -> Self {
        Self {
            snapshot,
            node,
            setup,
            packet,
            family,
            view,
            steps: Vec::new(),
            endpoints: Vec::new(),
            described: false,
        }
    }

    /// The walk, explained.
    pub(crate) fn explain(mut self) -> Explanation {
        let outcome = self.walk();
        Explanation {
            node: self.node.to_owned(),
            packet: *self.packet,
            steps: self.steps,
            endpoints: self.endpoints,
            outcome,
        }
    }

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
            let svc = &service.service;
            let family = self.family;
            // The addresses are typed: a Service is planned (its
            // endpoints looked at) only when the packet is for it.
            let roles = [
                (svc.cluster_ips(family), Role::ClusterIp),
                (svc.external_ips(family), Role::ExternalIp),
                (svc.load_balancer_ips(family), Role::LoadBalancerIp),
            ];
            let addressed = roles.iter().any(|(ips, _)| ips.contains(&dst));
            let node_port_hit = on_node_port
                && node_port.is_none()
                && svc.ports.iter().any(|q| q.node_port == u32::from(p.port));
            if svc.load_balancer_proxy_ips(family).contains(&dst) {
                proxy_ip = Some(&**service);
            }
            if !addressed && !node_port_hit {
                continue;
            }
            let plan = service.plan(family);
            let port = plan.ports.iter().position(matches);
            for (ips, role) in roles {
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
            if node_port_hit
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
    /// (its Node object's), within `--nodeport-addresses` when set; on
    /// loopback, only a localhost NodePort ([`Run::localhost_nodeport`]).
    fn is_nodeport_address(&self, ip: IpAddr) -> bool {
        if ip.is_loopback() {
            return self.localhost_nodeport(ip);
        }
        match &self.setup.proxy.nodeport_addresses {
            // The rules check that the address is the node's (fib) and in
            // the prefixes: an address in them is taken to be the node's.
            Some(prefixes) => prefixes.iter().any(|n| n.contains(&ip)),
            None => self.view.node_addresses(self.family).any(|a| a == ip),
        }
    }

    /// `ip` is a localhost NodePort address for this packet: the eBPF
    /// backend serves them (`Setup::localhost_nodeports`) to the node's
    /// own sockets, on `127.0.0.1` and `::1` inside
    /// `--nodeport-addresses` (or that unset). A pod's loopback is its
    /// own; the netfilter backends serve none.
    fn localhost_nodeport(&self, ip: IpAddr) -> bool {
        let served = matches!(self.setup.data_path, DataPath::Ebpf { .. })
            && self.setup.localhost_nodeports
            && self.packet.origin == Origin::Host
            && (ip == IpAddr::from(std::net::Ipv4Addr::LOCALHOST)
                || ip == IpAddr::from(std::net::Ipv6Addr::LOCALHOST));
        served
            && self
                .setup
                .proxy
                .nodeport_addresses
                .as_ref()
                .is_none_or(|prefixes| prefixes.iter().any(|n| n.contains(&ip)))
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
            Role::NodePort if dst.is_loopback() => format!(
                "{dst} is loopback, where the node's own sockets reach NodePorts (localhost NodePorts, --localhost-nodeports), and {} port {} is a NodePort",
                pp.protocol, self.packet.port
            ),
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
                    reached_around: None,
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
    /// A Local traffic policy (internal for a ClusterIP, external
    /// otherwise) and no endpoint on this node: the rules drop it.
    fn no_local_endpoint(&mut self, name: &ServiceName, role: Role) -> Outcome {
        let which = if role == Role::ClusterIp {
            "internalTrafficPolicy"
        } else {
            "externalTrafficPolicy"
        };
        self.step(format!(
            "{which}: Local, and this node has no endpoint of {name}"
        ));
        Outcome::Dropped {
            reason: format!("{which} Local and no endpoint of {name} on this node"),
        }
    }

    fn no_usable_endpoint(&mut self, name: &ServiceName, pp: &PortPlan<'_>, how: &str) -> Outcome {
        self.step(format!(
            "Service port {name}:{} has no usable endpoint anywhere",
            port_label(pp)
        ));
        Outcome::Rejected {
            reason: format!("{name} has no usable endpoint: {how}"),
        }
    }
}
