//! The eBPF tc programs: packets from outside, translated at the
//! interface.

use super::*;
use kpng_model::v1::LoadBalancerMode;

impl<'a> Run<'a> {
    /// The tc programs on a packet from outside to a Service port.
    pub(super) fn tc(&mut self, service: &'a ServiceView, port: usize, role: Role) -> Outcome {
        let plan = service.plan(self.family);
        let pp = &plan.ports[port];
        let name = service.service.service_name();
        self.describe_hit(&name, pp, role);
        self.step("from outside, at an interface with the eBPF tc programs");
        if role == Role::LoadBalancerIp
            && !plan.source_ranges.is_empty()
            && let Some(dropped) =
                self.source_ranges(&name, plan.source_ranges, ": dropped at ingress")
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
        } else if self
            .setup
            .proxy
            .direct_return(service.service.service(), self.packet.protocol.model())
        {
            self.step(format!(
                "externalTrafficPolicy: Cluster: the cluster's endpoints; load balancer mode {}: direct server return: the client address kept; to an endpoint on another node the Service's address and port ride in {} on the {}, and that node's tc programs restore them and reply to the client straight, from the Service's address",
                mode_name(self.setup.proxy.load_balancer_mode_of(service.service.service())),
                if self.family == IpFamily::V4 {
                    "an IPv4 option (8 bytes)"
                } else {
                    "an IPv6 destination option (24 bytes)"
                },
                if self.packet.protocol == crate::Protocol::Udp {
                    "each datagram"
                } else {
                    "first packet"
                },
            ));
            (false, Masquerade::DirectReturn)
        } else {
            self.step("externalTrafficPolicy: Cluster: the cluster's endpoints; masquerade: only towards endpoints on other nodes (a local endpoint's reply leaves through this node anyway)");
            (false, Masquerade::RemoteEndpoints)
        };
        let mut targets = self.targets(service, pp, local);
        if targets.is_empty() {
            return self.no_local_endpoint(&name, role);
        }
        if masquerade == Masquerade::RemoteEndpoints {
            self.routes_around(&mut targets);
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

    /// The endpoints on other nodes among `targets` whose route leaves by
    /// an interface without the tc programs: named, each with its
    /// interface, or, when the routes cannot be asked here, a step saying
    /// so.
    fn routes_around(&mut self, targets: &mut [Target]) {
        if targets.iter().all(|t| t.local) {
            return;
        }
        let Some(routes) = self.setup.tc_routes.clone() else {
            self.step("the tc programs masquerade at the interface a packet leaves by: an endpoint on another node whose route leaves by an interface without them is not masqueraded and its connections fail; the routes were not asked here (on the node, explain with --tc-interfaces; `to-ebpf` warns of each such endpoint)");
            return;
        };
        let mut around = 0;
        for target in targets.iter_mut().filter(|t| !t.local) {
            let Some(interface) = routes.around(target.ip) else {
                continue;
            };
            around += 1;
            self.step(format!(
                "{}: its route leaves by {interface}, which has no tc programs: not masqueraded, it answers the client directly and the connection fails (add the interface to --tc-interfaces)",
                render::target_text(target)
            ));
            target.reached_around = Some(interface);
        }
        if around == 0 {
            self.step("every endpoint on another node is reached through an interface with the tc programs (the routes asked here)");
        }
    }
}

/// The annotation's (and flag's) word for `mode`.
fn mode_name(mode: LoadBalancerMode) -> &'static str {
    match mode {
        LoadBalancerMode::Dsr => "dsr",
        LoadBalancerMode::Hybrid => "hybrid",
        LoadBalancerMode::Snat | LoadBalancerMode::Unspecified => "snat",
    }
}
