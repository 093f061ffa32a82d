//! The eBPF socket programs: the node's and its pods' sockets, served at
//! connect.

use super::*;

impl<'a> Run<'a> {
    pub(super) fn sockets(
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
            if netfilter {
                self.step("an LB IP with loadBalancerSourceRanges: the socket programs leave it, so that the rules check the source");
                return self.netfilter(&Found::Port {
                    service,
                    port,
                    role,
                });
            }
            if let Some(outcome) = self.ranged_at_connect(plan.source_ranges) {
                return outcome;
            }
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

    /// An LB IP with loadBalancerSourceRanges and no netfilter rules
    /// (`--north-south none`): the socket programs decide by whose socket
    /// it is, as the rules would by its source. The node's: translated
    /// when a node address is in the ranges; a pod's: when every pod
    /// network is, dropped when none overlaps them, left alone otherwise.
    /// `None`: translated.
    fn ranged_at_connect(&mut self, ranges: &[IpNet]) -> Option<Outcome> {
        let within = |ip: &IpAddr| ranges.iter().any(|r| r.contains(ip));
        let eperm = "the connect fails with EPERM";
        if self.packet.origin == Origin::Host {
            let node: Vec<IpAddr> = self.view.node_addresses(self.family).collect();
            if let Some(ip) = node.iter().find(|ip| within(ip)) {
                self.step(format!(
                    "an LB IP with loadBalancerSourceRanges ({}), and no netfilter rules (--north-south none): the node's own socket is served, as the node's address {ip} is in them",
                    list(ranges)
                ));
                return None;
            }
            self.step(format!(
                "an LB IP with loadBalancerSourceRanges ({}), and no netfilter rules (--north-south none): no address of the node ({}) is in them: {eperm}",
                list(ranges),
                node.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            return Some(Outcome::Dropped {
                reason: format!("no node address in the loadBalancerSourceRanges: {eperm}"),
            });
        }
        let pods: Vec<IpNet> = self
            .setup
            .proxy
            .cluster_cidrs
            .iter()
            .filter(|n| IpFamily::of(&n.network()) == self.family)
            .copied()
            .collect();
        let inside = |p: &IpNet| ranges.iter().any(|r| r.contains(p));
        let overlaps = |p: &IpNet| ranges.iter().any(|r| r.contains(p) || p.contains(r));
        if !pods.is_empty() && pods.iter().all(inside) {
            self.step(format!(
                "an LB IP with loadBalancerSourceRanges ({}), and no netfilter rules (--north-south none): a pod's socket is served, as every pod network ({}) is in them",
                list(ranges),
                list(&pods)
            ));
            return None;
        }
        if !pods.is_empty() && !pods.iter().any(overlaps) {
            self.step(format!(
                "an LB IP with loadBalancerSourceRanges ({}), and no netfilter rules (--north-south none): no pod network ({}) is in them: {eperm}",
                list(ranges),
                list(&pods)
            ));
            return Some(Outcome::Dropped {
                reason: format!("no pod network in the loadBalancerSourceRanges: {eperm}"),
            });
        }
        self.step(format!(
            "an LB IP with loadBalancerSourceRanges ({}), and no netfilter rules (--north-south none): a pod's source is not known at connect and the pod networks ({}) are partly in them, so the socket programs leave it",
            list(ranges),
            if pods.is_empty() { "none given: --cluster-cidr".to_owned() } else { list(&pods) }
        ));
        Some(Outcome::Untouched {
            reason: "an LB IP with source ranges that some pods' addresses are in and others not: not served (--north-south none)".into(),
        })
    }
}
