//! Ending TCP flows whose endpoint left (`--end-tcp-connections`).
//!
//! A TCP flow translated to an endpoint that is no longer in the node view
//! (gone from its Service's slices, or no longer serving: an endpoint that
//! drains stays in the view, in neither set) is deleted, and its client
//! nudged ([`kpng_netfilter::nudge`]): its next packet, a new flow to
//! conntrack, reaches a live endpoint (or the Service's reset, when none
//! is left), which resets it. The client's connection fails within the
//! sync instead of waiting on a dead peer.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use kpng_model::IpFamily;
use kpng_model::v1::Protocol;
use kpng_model::view::NodeView;
use kpng_netfilter::conntrack::Flow;
use kpng_sink::Round;

/// An endpoint of one Service port: its address and port.
type Target = (IpAddr, u16);

/// What a view still has: per TCP Service address and port, and per TCP
/// node port, the endpoints present (used or not).
#[derive(Debug, Default)]
pub(crate) struct Present {
    pub(crate) addresses: BTreeMap<(IpAddr, u16), BTreeSet<Target>>,
    node_ports: BTreeMap<u16, BTreeSet<Target>>,
}

impl Present {
    pub(crate) fn of(view: &NodeView) -> Self {
        let mut present = Self::default();
        for service in view.services.values() {
            if !service
                .service
                .ports
                .iter()
                .any(|p| p.protocol == Protocol::Tcp as i32)
            {
                continue;
            }
            for family in IpFamily::BOTH {
                let plan = service.plan(family);
                for port in plan.ports.iter().filter(|p| p.protocol == "tcp") {
                    let targets: BTreeSet<Target> = service
                        .endpoints
                        .iter()
                        .filter(|e| e.family() == family)
                        .filter_map(|e| Some((e.ip(), e.port(&port.port.name, Protocol::Tcp)?)))
                        .collect();
                    for &address in plan.cluster_ips.iter().chain(plan.externals()) {
                        present
                            .addresses
                            .entry((address, port.number))
                            .or_default()
                            .extend(&targets);
                    }
                    if let Some(np) = port.node_port {
                        present.node_ports.entry(np).or_default().extend(&targets);
                    }
                }
            }
        }
        present
    }
}

/// Whether `round` can have taken an endpoint from a Service: a full
/// round (what the kernel holds is not known), or a Service that lost
/// one (or went).
pub(crate) fn round_may_end(round: &Round<'_>) -> bool {
    round.is_full()
        || round
            .services()
            .any(|change| change.departed().next().is_some())
}

/// The flows of `flows` to end: translated to a Service address and port
/// (or a node port) of the view by an endpoint no longer present, or to
/// an address and port of `known` (seen in an earlier view) that the view
/// no longer has (its Service went).
pub(crate) fn to_end(
    present: &Present,
    known: &BTreeSet<(IpAddr, u16)>,
    flows: &[Flow],
) -> Vec<Flow> {
    flows
        .iter()
        .filter(|flow| {
            if !flow.dnated() {
                return false;
            }
            let to = (flow.original.dst, flow.original.dst_port);
            let from = (flow.reply.src, flow.reply.src_port);
            if let Some(targets) = present.addresses.get(&to) {
                return !targets.contains(&from);
            }
            if let Some(targets) = present.node_ports.get(&flow.original.dst_port) {
                return !targets.contains(&from);
            }
            known.contains(&to)
        })
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kpng_model::EndpointInfo;
    use kpng_model::endpoint::{PortInfo, PortList};
    use kpng_model::v1::{Service, ServicePort};
    use kpng_model::view::{EndpointView, ServiceView};
    use kpng_netfilter::conntrack::{TCP, Tuple};

    use super::*;

    /// A Service `web` at 10.96.0.80:80 (TCP) with endpoints on 8080,
    /// `used` or present in neither set.
    fn view(endpoints: &[(&str, bool)]) -> NodeView {
        let svc = Arc::new(
            kpng_model::ServiceInfo::new(
                Service::new("t", "web")
                    .with_cluster_ips(["10.96.0.80".parse().expect("ip")])
                    .with_port(ServicePort::new("http", Protocol::Tcp, 80)),
            )
            .expect("valid"),
        );
        let ports = PortList::new([PortInfo::new("http", Protocol::Tcp, 8080)]);
        let endpoints = endpoints
            .iter()
            .map(|(ip, used)| {
                let ip = ip.parse().expect("ip");
                EndpointView::at(EndpointInfo::builder(ip).ports(ports.clone()).build(), ip)
                    .expect("its address")
                    .with_cluster(*used)
            })
            .collect();
        let mut view = NodeView::default();
        view.services.insert(
            svc.service_name(),
            Arc::new(ServiceView {
                service: svc,
                endpoints,
            }),
        );
        view
    }

    fn flow(to: &str, from: &str) -> Flow {
        let ip = |t: &str| t.parse().expect("ip");
        Flow {
            protocol: TCP,
            original: Tuple {
                src: ip("10.244.9.9"),
                dst: ip(to),
                src_port: 40000,
                dst_port: 80,
            },
            reply: Tuple {
                src: ip(from),
                dst: ip("10.244.9.9"),
                src_port: if from == to { 80 } else { 8080 },
                dst_port: 40000,
            },
            zone: 0,
        }
    }

    /// A flow to an endpoint gone from the view ends; one to an endpoint
    /// still there, used or draining, stays; so does one to an address
    /// that is no Service, and one not translated.
    #[test]
    fn flows_to_departed_endpoints_end_and_no_other() {
        let v = view(&[("10.244.1.1", true), ("10.244.2.2", false)]);
        let present = Present::of(&v);
        let gone = flow("10.96.0.80", "10.244.3.3");
        let flows = [
            flow("10.96.0.80", "10.244.1.1"),
            flow("10.96.0.80", "10.244.2.2"),
            gone,
            flow("10.1.2.3", "10.244.3.3"),
            flow("10.96.0.80", "10.96.0.80"),
        ];
        assert_eq!(to_end(&present, &BTreeSet::new(), &flows), [gone]);
        // The Service deleted: its flows end once it was seen.
        let known: BTreeSet<(IpAddr, u16)> = present.addresses.keys().copied().collect();
        let none = Present::of(&NodeView::default());
        assert_eq!(to_end(&none, &known, &flows[..2]).len(), 2);
        assert!(to_end(&none, &BTreeSet::new(), &flows[..2]).is_empty());
    }

    /// Only a round that took an endpoint (or a Service) away, or a full
    /// one, dumps the flows.
    #[test]
    fn only_rounds_that_take_an_endpoint_dump() {
        let two = view(&[("10.244.1.1", true), ("10.244.2.2", true)]);
        let drained = view(&[("10.244.1.1", true), ("10.244.2.2", false)]);
        let one = view(&[("10.244.1.1", true)]);
        assert!(!round_may_end(&Round::between(&one, &two)));
        assert!(!round_may_end(&Round::between(&two, &drained)), "it drains");
        assert!(round_may_end(&Round::between(&drained, &one)));
        assert!(round_may_end(&Round::between(&one, &NodeView::default())));
        assert!(round_may_end(&Round::full(&one)));
    }
}
