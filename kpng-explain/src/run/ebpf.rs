//! The eBPF backend: which programs serve a packet (the socket programs
//! for the node's own sockets, the tc programs for packets from outside),
//! and what they leave to the netfilter rules beside them.

use super::*;

impl<'a> Run<'a> {
    /// The eBPF backend: socket programs for the node's own sockets, tc
    /// programs for packets from outside (with `tc`), the netfilter
    /// backend (with `netfilter`) for the rest.
    pub(super) fn ebpf(&mut self, found: &Found<'a>, tc: bool, netfilter: bool) -> Outcome {
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
    pub(super) fn unallocated(&mut self, how: &str) -> Option<Outcome> {
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
    pub(super) fn rest(&mut self, found: &Found<'a>, netfilter: bool) -> Outcome {
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
}
