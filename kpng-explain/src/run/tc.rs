//! The eBPF tc programs: packets from outside, translated at the
//! interface.

use super::*;

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
        } else {
            self.step("externalTrafficPolicy: Cluster: the cluster's endpoints; masquerade: only towards endpoints on other nodes (a local endpoint's reply leaves through this node anyway)");
            (false, Masquerade::RemoteEndpoints)
        };
        let targets = self.targets(service, pp, local);
        if targets.is_empty() {
            return self.no_local_endpoint(&name, role);
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
