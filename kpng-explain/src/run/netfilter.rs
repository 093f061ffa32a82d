//! The netfilter rules (nftables, iptables): the NAT rules, then the
//! filter rules for what they did not translate.

use super::*;

impl<'a> Run<'a> {
    /// Netfilter: the NAT rules, then the filter rules for what they did
    /// not translate.
    pub(super) fn netfilter(&mut self, found: &Found<'a>) -> Outcome {
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

    pub(super) fn unallocated_or_untouched(&mut self) -> Outcome {
        let dst = self.packet.destination;
        if let Some(net) = self.service_cidr(dst) {
            self.step(format!(
                "{dst} is in the Service CIDR {net}, and no Service has it (an unallocated Service address)"
            ));
            return Outcome::Dropped {
                reason: format!("unallocated address {dst} in the Service CIDR {net}"),
            };
        }
        if dst.is_loopback() {
            self.step(match self.setup.data_path {
                DataPath::Ebpf { .. } if self.packet.origin == Origin::Pod => format!(
                    "{dst} is the pod's own loopback: its sockets reach no NodePort there (localhost NodePorts are the node's own sockets')"
                ),
                DataPath::Ebpf { .. } if self.setup.localhost_nodeports => format!(
                    "{dst}:{} ({}) is no NodePort, or {dst} is outside --nodeport-addresses",
                    self.packet.port, self.packet.protocol
                ),
                DataPath::Ebpf { .. } => {
                    "no NodePort on loopback: --localhost-nodeports=false".to_owned()
                }
                _ => "no NodePort on loopback: the netfilter rules serve none (as kube-proxy's nftables mode; the eBPF backend's socket programs do, to-ebpf --localhost-nodeports)".to_owned(),
            });
        } else {
            self.step(format!(
                "{dst}:{} ({}) is no Service address, externalIP, load-balancer IP or NodePort of this node",
                self.packet.port, self.packet.protocol
            ));
        }
        Outcome::Untouched {
            reason: "not a Service's: the packet goes on as routed".into(),
        }
    }

    pub(super) fn netfilter_port(
        &mut self,
        service: &'a ServiceView,
        port: usize,
        role: Role,
    ) -> Outcome {
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
            } else if let Some(dropped) = self.source_ranges(&name, plan.source_ranges, "") {
                return dropped;
            }
        }
        if pp.cluster.is_empty() {
            return self.no_usable_endpoint(&name, pp, "ICMP port unreachable");
        }
        let (local, masquerade) = self.netfilter_policy(&plan, role);
        let targets = self.targets(service, pp, local);
        if targets.is_empty() {
            return self.no_local_endpoint(&name, role);
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
    pub(super) fn netfilter_policy(
        &mut self,
        plan: &ServicePlan<'_>,
        role: Role,
    ) -> (bool, Masquerade) {
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
    pub(super) fn hairpin(&mut self, masquerade: Masquerade, targets: &[Target]) -> Masquerade {
        let src = self.packet.source;
        if masquerade == Masquerade::No && targets.iter().any(|t| t.local && t.ip == src) {
            self.step(format!(
                "the client {src} is one of the endpoints: if it is chosen, the packet is masqueraded (hairpin)"
            ));
            return Masquerade::Hairpin;
        }
        masquerade
    }
}
