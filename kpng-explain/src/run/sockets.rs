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
}
