//! [`ServicePlan`]: a Service resolved for one IP family, as every
//! backend starts from it (addresses by role, typed when the Service
//! entered, policies, and per port the endpoint targets).

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
///
/// The addresses and prefixes are the Service's own, typed when it
/// entered (see [`ServiceInfo`](crate::ServiceInfo)): a plan lends them
/// and parses nothing.
///
/// ```
/// use std::sync::Arc;
/// use kpng_model::v1::{Protocol, Service, ServicePort};
/// use kpng_model::view::ServiceView;
/// use kpng_model::{IpFamily, ServiceInfo};
///
/// let web = Service::new("default", "web")
///     .with_cluster_ips(["10.96.0.10".parse()?])
///     .with_port(ServicePort::new("http", Protocol::Tcp, 80));
/// let view = ServiceView::new(Arc::new(ServiceInfo::new(web)?));
/// let plan = view.plan(IpFamily::V4);
/// assert_eq!(plan.cluster_ips, ["10.96.0.10".parse::<std::net::IpAddr>()?]);
/// assert_eq!((plan.ports[0].protocol, plan.ports[0].number), ("tcp", 80));
/// assert!(plan.ports[0].cluster.is_empty(), "no endpoint yet");
/// assert!(view.plan(IpFamily::V6).cluster_ips.is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ServicePlan<'a> {
    /// The ClusterIPs.
    pub cluster_ips: &'a [IpAddr],
    /// The externalIPs.
    pub external_ips: &'a [IpAddr],
    /// The load-balancer ingress IPs to program (ipMode VIP or unset).
    pub lb_ips: &'a [IpAddr],
    /// `loadBalancerSourceRanges` (for LB IPs only), host bits cleared.
    pub source_ranges: &'a [ipnet::IpNet],
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
    pub fn externals(&self) -> impl Iterator<Item = &'a IpAddr> + 'a {
        self.external_ips.iter().chain(self.lb_ips)
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
            cluster_ips: svc.cluster_ips(family),
            external_ips: svc.external_ips(family),
            lb_ips: svc.load_balancer_ips(family),
            source_ranges: svc.source_ranges(family),
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
