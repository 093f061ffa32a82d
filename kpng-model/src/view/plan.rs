//! [`ServicePlan`]: a Service resolved for one IP family, as every
//! backend starts from it (addresses by role, typed and parsed once,
//! policies, and per port the endpoint targets).

use std::net::IpAddr;

use super::{EndpointView, ServiceView};
use crate::addr::IpFamily;
use crate::v1::{Protocol, TrafficPolicy};

/// The targets (address, port) of `endpoints` for one Service port, in
/// order; endpoints without that port are left out.
pub fn port_targets<'a>(
    endpoints: impl Iterator<Item = &'a EndpointView>,
    port: &crate::v1::ServicePort,
) -> Vec<(IpAddr, u16)> {
    let protocol = Protocol::try_from(port.protocol).unwrap_or(Protocol::Tcp);
    endpoints
        .filter_map(|e| Some((e.ip(), e.port(&port.name, protocol)?)))
        .collect()
}

impl crate::v1::ServicePort {
    /// The protocol as iptables and nft spell it (`tcp`, `udp`, `sctp`);
    /// unspecified is TCP, as in Kubernetes. `None` for an unknown value.
    pub fn protocol_name(&self) -> Option<&'static str> {
        match Protocol::try_from(self.protocol).ok()? {
            Protocol::Tcp | Protocol::Unspecified => Some("tcp"),
            Protocol::Udp => Some("udp"),
            Protocol::Sctp => Some("sctp"),
        }
    }
}

/// One Service in one family, resolved for a data plane: its addresses
/// by role, its policies, and per port the endpoint targets. Every backend
/// starts from this, so none re-reads the Service's fields.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ServicePlan<'a> {
    /// The ClusterIPs, parsed once when the plan is made (as every
    /// address here: an entry that is not an address is left out and
    /// reported once by [`ServiceView::plan`]).
    pub cluster_ips: Vec<IpAddr>,
    /// The externalIPs.
    pub external_ips: Vec<IpAddr>,
    /// The load-balancer ingress IPs to program (ipMode VIP or unset).
    pub lb_ips: Vec<IpAddr>,
    /// `loadBalancerSourceRanges` (for LB IPs only), parsed once when the
    /// plan is made: renderers take these typed prefixes and parse no
    /// text. An entry that is not a CIDR is left out and reported once,
    /// with a warning, by [`ServiceView::plan`].
    pub source_ranges: Vec<ipnet::IpNet>,
    /// `internalTrafficPolicy: Local`.
    pub itp_local: bool,
    /// `externalTrafficPolicy: Local`.
    pub etp_local: bool,
    /// The ClientIP affinity timeout, in seconds.
    pub affinity: Option<u32>,
    /// The ports with a known protocol and a valid number.
    pub ports: Vec<PortPlan<'a>>,
}

/// One port of a [`ServicePlan`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct PortPlan<'a> {
    /// The port.
    pub port: &'a crate::v1::ServicePort,
    /// `tcp`, `udp` or `sctp`.
    pub protocol: &'static str,
    /// The Service port number.
    pub number: u16,
    /// The NodePort, when this Service type has them.
    pub node_port: Option<u16>,
    /// The cluster-policy targets (address, endpoint port).
    pub cluster: Vec<(IpAddr, u16)>,
    /// The local-policy targets.
    pub local: Vec<(IpAddr, u16)>,
}

impl<'a> ServicePlan<'a> {
    /// The external addresses: externalIPs, then LB IPs.
    pub fn externals(&self) -> impl Iterator<Item = &IpAddr> + '_ {
        self.external_ips.iter().chain(&self.lb_ips)
    }
}

impl ServiceView {
    /// The Service resolved for `family`: see [`ServicePlan`].
    pub fn plan(&self, family: IpFamily) -> ServicePlan<'_> {
        use crate::v1::ServiceType;
        let svc = &self.service;
        let node_ports = matches!(
            ServiceType::try_from(svc.r#type),
            Ok(ServiceType::NodePort | ServiceType::LoadBalancer)
        );
        let ports = svc
            .ports
            .iter()
            .filter_map(|port| {
                let protocol = port.protocol_name()?;
                let number = u16::try_from(port.port).ok()?;
                Some(PortPlan {
                    port,
                    protocol,
                    number,
                    node_port: u16::try_from(port.node_port)
                        .ok()
                        .filter(|p| node_ports && *p != 0),
                    cluster: port_targets(self.cluster_endpoints(family), port),
                    local: port_targets(self.local_endpoints(family), port),
                })
            })
            .collect();
        ServicePlan {
            cluster_ips: addresses(self, "clusterIPs", svc.cluster_ips.as_ref(), family),
            external_ips: addresses(self, "externalIPs", svc.external_ips.as_deref(), family),
            lb_ips: addresses(
                self,
                "loadBalancerIPs",
                svc.load_balancer_ips.as_deref(),
                family,
            ),
            source_ranges: source_ranges(self, family),
            itp_local: svc.internal_traffic_policy() == TrafficPolicy::Local,
            etp_local: svc.external_traffic_policy() == TrafficPolicy::Local,
            affinity: svc
                .client_ip_affinity
                .as_ref()
                .map(|a| a.timeout_seconds.max(1)),
            ports,
        }
    }
}

/// The addresses of one of `view`'s sets in `family`, parsed; each entry
/// that is not an address (or not of `family`) is reported once here.
fn addresses(
    view: &ServiceView,
    field: &str,
    set: Option<&crate::v1::IpSet>,
    family: IpFamily,
) -> Vec<IpAddr> {
    let texts = crate::addr::family_of(set, family);
    let mut out = Vec::with_capacity(texts.len());
    for text in texts {
        match text.parse::<IpAddr>() {
            Ok(ip) if IpFamily::of(&ip) == family => out.push(ip),
            _ => tracing::warn!(
                service = %view.service.service_name(),
                field,
                address = %text,
                "address ignored"
            ),
        }
    }
    out
}

/// The typed `loadBalancerSourceRanges` of `view` in `family`; each entry
/// that is not a CIDR is reported once here, so that no renderer parses
/// (or reports) it again.
fn source_ranges(view: &ServiceView, family: IpFamily) -> Vec<ipnet::IpNet> {
    let texts = crate::addr::family_of(view.service.load_balancer_source_ranges.as_deref(), family);
    if texts.is_empty() {
        return Vec::new();
    }
    let (valid, invalid) =
        crate::addr::parse_prefixes("loadBalancerSourceRanges", texts.iter().map(String::as_str));
    for error in invalid {
        tracing::warn!(service = %view.service.service_name(), %error, "source range ignored");
    }
    // A prefix listed under the other family (only a hand-written view
    // can have one) has no place in this family's rules.
    valid
        .into_iter()
        .filter(|p| IpFamily::of(&p.network()) == family)
        .collect()
}
