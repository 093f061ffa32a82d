//! The node view: the ENLS projected onto one node.
//!
//! The view is computed by `kpng-diff`, which applies kube-proxy's endpoint
//! selection rules (readiness, terminating fallback, topology hints, traffic
//! policies) once, so no backend re-implements them. Backends consume either
//! a whole [`NodeView`] or a stream of [`ViewOp`]s.

use std::net::IpAddr;
use std::sync::Arc;

use imbl::OrdMap;

use crate::addr::IpFamily;
use crate::v1::{Endpoint, Node, Protocol, Service, TrafficPolicy};
use crate::{Error, Result, ServiceName};

/// One endpoint address as this node uses it.
///
/// Only endpoints in at least one of the two sets appear in a view:
/// `cluster` (the cluster-policy endpoints) or `local` (the local-policy
/// endpoints). An endpoint with both an IPv4 and an IPv6 address appears once
/// per family, since each family is selected on its own.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointView {
    /// The address in this family.
    pub ip: IpAddr,
    /// The endpoint, with its ports and conditions.
    pub endpoint: Arc<Endpoint>,
    /// The endpoint runs on this node.
    pub is_local: bool,
    /// It is a cluster-policy endpoint: ready (topology-filtered), or
    /// serving-and-terminating when no endpoint is ready.
    pub cluster: bool,
    /// It is a local-policy endpoint: ready on this node, or
    /// serving-and-terminating on this node when none is ready here.
    pub local: bool,
}

impl EndpointView {
    /// The address family.
    pub fn family(&self) -> IpFamily {
        IpFamily::of(&self.ip)
    }

    /// The endpoint's port for a Service port, matched by port name and
    /// protocol (EndpointSlice ports carry the Service port's name).
    pub fn port(&self, name: &str, protocol: Protocol) -> Option<u16> {
        self.endpoint
            .ports
            .iter()
            .find(|p| p.name == name && p.protocol == protocol as i32)
            .and_then(|p| u16::try_from(p.port).ok())
    }
}

/// The targets (address, port) of `endpoints` for one Service port, in
/// order; endpoints without that port are left out.
pub fn port_targets<'a>(
    endpoints: impl Iterator<Item = &'a EndpointView>,
    port: &crate::v1::ServicePort,
) -> Vec<(IpAddr, u16)> {
    let protocol = Protocol::try_from(port.protocol).unwrap_or(Protocol::Tcp);
    endpoints
        .filter_map(|e| Some((e.ip, e.port(&port.name, protocol)?)))
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
    /// The ClusterIPs.
    pub cluster_ips: &'a [String],
    /// The externalIPs.
    pub external_ips: &'a [String],
    /// The load-balancer ingress IPs to program (ipMode VIP or unset).
    pub lb_ips: &'a [String],
    /// `loadBalancerSourceRanges` (for LB IPs only).
    pub source_ranges: &'a [String],
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
    pub fn externals(&self) -> impl Iterator<Item = &'a String> + 'a {
        self.external_ips.iter().chain(self.lb_ips)
    }
}

impl ServiceView {
    /// The Service resolved for `family`: see [`ServicePlan`].
    pub fn plan(&self, family: IpFamily) -> ServicePlan<'_> {
        use crate::addr::family_of;
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
            cluster_ips: family_of(&svc.cluster_ips, family),
            external_ips: family_of(&svc.external_ips, family),
            lb_ips: family_of(&svc.load_balancer_ips, family),
            source_ranges: family_of(&svc.load_balancer_source_ranges, family),
            itp_local: svc.internal_traffic_policy == TrafficPolicy::Local as i32,
            etp_local: svc.external_traffic_policy == TrafficPolicy::Local as i32,
            affinity: svc
                .client_ip_affinity
                .as_ref()
                .map(|a| a.timeout_seconds.max(1)),
            ports,
        }
    }
}

/// One Service as this node must program it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceView {
    /// The Service.
    pub service: Arc<Service>,
    /// The endpoints this node may use, sorted by address.
    pub endpoints: Vec<EndpointView>,
}

impl ServiceView {
    /// A view with no endpoints yet.
    pub fn new(service: Arc<Service>) -> Self {
        Self {
            service,
            endpoints: Vec::new(),
        }
    }

    /// The Service's name.
    pub fn name(&self) -> ServiceName {
        self.service.service_name()
    }

    /// Whether the Service has any usable endpoint in `family`, on any node.
    ///
    /// When this is false, every address of the Service in this family must
    /// REJECT. When it is true but a Local policy finds no local endpoint,
    /// traffic is DROPped instead: the two cases differ.
    pub fn has_endpoints(&self, family: IpFamily) -> bool {
        self.cluster_endpoints(family).next().is_some()
    }

    /// The cluster-policy endpoints of `family`.
    pub fn cluster_endpoints(&self, family: IpFamily) -> impl Iterator<Item = &EndpointView> {
        self.endpoints
            .iter()
            .filter(move |e| e.cluster && e.family() == family)
    }

    /// The local-policy endpoints of `family`.
    pub fn local_endpoints(&self, family: IpFamily) -> impl Iterator<Item = &EndpointView> {
        self.endpoints
            .iter()
            .filter(move |e| e.local && e.family() == family)
    }

    /// The endpoints ClusterIP traffic goes to: local-policy ones when
    /// `internalTrafficPolicy: Local`, cluster-policy ones otherwise.
    pub fn internal_endpoints(&self, family: IpFamily) -> impl Iterator<Item = &EndpointView> {
        let local = self.service.internal_traffic_policy == TrafficPolicy::Local as i32;
        self.endpoints
            .iter()
            .filter(move |e| e.family() == family && if local { e.local } else { e.cluster })
    }

    /// The endpoints external traffic (NodePorts, externalIPs, LB IPs) from
    /// outside the cluster goes to: local-policy ones when
    /// `externalTrafficPolicy: Local`, cluster-policy ones otherwise.
    pub fn external_endpoints(&self, family: IpFamily) -> impl Iterator<Item = &EndpointView> {
        let local = self.service.external_traffic_policy == TrafficPolicy::Local as i32;
        self.endpoints
            .iter()
            .filter(move |e| e.family() == family && if local { e.local } else { e.cluster })
    }

    fn endpoint_index(&self, ip: &IpAddr) -> std::result::Result<usize, usize> {
        self.endpoints.binary_search_by(|e| e.ip.cmp(ip))
    }
}

/// The whole state one node must program, at one revision.
///
/// Cloning is O(1): services are held in a persistent map.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeView {
    /// The revision of the ENLS this view was computed from.
    pub revision: u64,
    /// This node, when the ENLS knows it (its zone drives topology hints,
    /// its addresses the default NodePort addresses).
    pub node: Option<Arc<Node>>,
    /// The Services, by name.
    pub services: OrdMap<ServiceName, Arc<ServiceView>>,
}

/// One change to a [`NodeView`].
///
/// A diff is a sequence of ops in this order: node ops first, then per
/// Service (in name order) either one `DeleteService`, or an optional
/// `SetService` followed by its `DeleteEndpoint`s and `SetEndpoint`s.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub enum ViewOp {
    /// This node's object was created or changed.
    SetNode(Arc<Node>),
    /// This node's object went away.
    DeleteNode,
    /// A Service was created or its definition changed. A new Service starts
    /// with no endpoints; its endpoints follow as `SetEndpoint`.
    SetService(Arc<Service>),
    /// A Service left the view, with all its endpoints.
    DeleteService(ServiceName),
    /// An endpoint of a Service entered the view or changed (its sets, its
    /// ports or its conditions).
    SetEndpoint(ServiceName, EndpointView),
    /// An endpoint address left a Service's view.
    DeleteEndpoint(ServiceName, IpAddr),
}

impl NodeView {
    /// This node's own addresses in `family` (from its Node object),
    /// loopback excepted: where NodePorts listen by default.
    pub fn node_addresses(&self, family: IpFamily) -> impl Iterator<Item = IpAddr> + '_ {
        self.node
            .iter()
            .filter_map(|n| n.addresses.as_ref())
            .flat_map(move |a| a.addrs(family))
            .filter(|ip| !ip.is_loopback())
    }

    /// Applies one op.
    ///
    /// # Errors
    /// [`Error::UnknownService`] when an endpoint op names a Service that is
    /// not in the view: the ops were applied out of order or to the wrong
    /// view.
    pub fn apply(&mut self, op: &ViewOp) -> Result<()> {
        match op {
            ViewOp::SetNode(node) => self.node = Some(node.clone()),
            ViewOp::DeleteNode => self.node = None,
            ViewOp::SetService(service) => {
                let name = service.service_name();
                match self.services.get_mut(&name) {
                    Some(view) => Arc::make_mut(view).service = service.clone(),
                    None => {
                        self.services
                            .insert(name, Arc::new(ServiceView::new(service.clone())));
                    }
                }
            }
            ViewOp::DeleteService(name) => {
                self.services.remove(name);
            }
            ViewOp::SetEndpoint(name, endpoint) => {
                let view = self.service_mut(name)?;
                match view.endpoint_index(&endpoint.ip) {
                    Ok(i) => view.endpoints[i] = endpoint.clone(),
                    Err(i) => view.endpoints.insert(i, endpoint.clone()),
                }
            }
            ViewOp::DeleteEndpoint(name, ip) => {
                let view = self.service_mut(name)?;
                if let Ok(i) = view.endpoint_index(ip) {
                    view.endpoints.remove(i);
                }
            }
        }
        Ok(())
    }

    fn service_mut(&mut self, name: &ServiceName) -> Result<&mut ServiceView> {
        self.services
            .get_mut(name)
            .map(Arc::make_mut)
            .ok_or_else(|| Error::UnknownService(name.to_string()))
    }
}

/// A digest of a [`NodeView`]'s content: equal views have equal digests
/// in every process, so a watcher can tell a restarted server (or another
/// replica) which view it holds, and the server can tell whether that view
/// is still current without sending it.
///
/// The digest is the wrapping sum of one 128-bit term per Service (its
/// name and its [`ServiceView`]) and one for the node object, each a
/// SipHash-1-3 of the content under a fixed key. A sum can be kept up to
/// date in O(changed Services): subtract a Service's old term, add its new
/// one. The revision is not part of it. Terms come from the types' `Hash`,
/// so two builds of kpng-rs that hash differently only disagree, and a
/// disagreement costs a full transfer, never a wrong view.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ViewDigest(u128);

impl ViewDigest {
    /// The digest of a whole view, from scratch: O(view).
    pub fn of(view: &NodeView) -> Self {
        let mut digest = Self::node_term(view.node.as_deref());
        for (name, service) in &view.services {
            digest = digest + Self::service_term(name, service);
        }
        digest
    }

    /// The term a Service contributes.
    pub fn service_term(name: &ServiceName, service: &ServiceView) -> Self {
        Self(stable_hash(&(name.namespace(), name.name(), service)))
    }

    /// The term the node object (or its absence) contributes.
    pub fn node_term(node: Option<&Node>) -> Self {
        Self(stable_hash(&("node", node)))
    }

    /// The 16 bytes sent on the wire (big-endian).
    pub fn to_bytes(self) -> [u8; 16] {
        self.0.to_be_bytes()
    }

    /// The digest in `bytes`, or `None` unless there are exactly 16.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        Some(Self(u128::from_be_bytes(bytes.try_into().ok()?)))
    }
}

/// Adds a term.
impl std::ops::Add for ViewDigest {
    type Output = Self;
    fn add(self, term: Self) -> Self {
        Self(self.0.wrapping_add(term.0))
    }
}

/// Takes a term away.
impl std::ops::Sub for ViewDigest {
    type Output = Self;
    fn sub(self, term: Self) -> Self {
        Self(self.0.wrapping_sub(term.0))
    }
}

impl std::fmt::Display for ViewDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// SipHash-1-3, 128 bits, under a fixed key: the same in every process.
fn stable_hash<T: std::hash::Hash + ?Sized>(value: &T) -> u128 {
    use siphasher::sip128::{Hasher128, SipHasher13};
    use std::hash::Hasher as _;
    let mut hasher = SipHasher13::new_with_keys(0x6b70_6e67_2d72_7321, 0x7669_6577_2d64_6967);
    value.hash(&mut hasher);
    hasher.write_u8(0);
    hasher.finish128().as_u128()
}

/// The wire form of [`ViewOp`]s (`kpng.model.v1.ViewChange`), as the ENLS
/// watch service streams them.
pub mod wire {
    use std::sync::Arc;

    use super::{EndpointView, ViewOp};
    use crate::v1::{self, view_change::Change};
    use crate::{Error, ServiceName};

    fn service_ref(name: &ServiceName) -> v1::ServiceRef {
        v1::ServiceRef {
            namespace: name.namespace().to_owned(),
            name: name.name().to_owned(),
        }
    }

    fn service_name(r: Option<&v1::ServiceRef>) -> Result<ServiceName, Error> {
        let r = r.ok_or_else(|| missing("service"))?;
        Ok(ServiceName::new(&r.namespace, &r.name))
    }

    fn missing(field: &str) -> Error {
        Error::InvalidAddress {
            field: format!("ViewChange.{field}"),
            value: "missing".into(),
        }
    }

    fn ip(field: &str, text: &str) -> Result<std::net::IpAddr, Error> {
        text.parse().map_err(|_| Error::InvalidAddress {
            field: format!("ViewChange.{field}"),
            value: text.to_owned(),
        })
    }

    /// The wire form of an op.
    pub fn to_wire(op: &ViewOp) -> v1::ViewChange {
        let change = match op {
            ViewOp::SetNode(node) => Change::SetNode((**node).clone()),
            ViewOp::DeleteNode => Change::DeleteNode(true),
            ViewOp::SetService(svc) => Change::SetService((**svc).clone()),
            ViewOp::DeleteService(name) => Change::DeleteService(service_ref(name)),
            ViewOp::SetEndpoint(name, ep) => Change::SetEndpoint(v1::SetEndpoint {
                service: Some(service_ref(name)),
                endpoint: Some(v1::EndpointRef {
                    ip: ep.ip.to_string(),
                    endpoint: Some((*ep.endpoint).clone()),
                    is_local: ep.is_local,
                    cluster: ep.cluster,
                    local: ep.local,
                }),
            }),
            ViewOp::DeleteEndpoint(name, addr) => Change::DeleteEndpoint(v1::DeleteEndpoint {
                service: Some(service_ref(name)),
                ip: addr.to_string(),
            }),
        };
        v1::ViewChange {
            change: Some(change),
        }
    }

    /// The op a wire change stands for.
    ///
    /// # Errors
    /// [`Error::InvalidAddress`] naming a missing part or a bad address:
    /// the peer is not trusted.
    pub fn from_wire(change: v1::ViewChange) -> Result<ViewOp, Error> {
        Ok(match change.change.ok_or_else(|| missing("change"))? {
            Change::SetNode(node) => ViewOp::SetNode(Arc::new(node)),
            Change::DeleteNode(_) => ViewOp::DeleteNode,
            Change::SetService(svc) => ViewOp::SetService(Arc::new(svc)),
            Change::DeleteService(r) => ViewOp::DeleteService(service_name(Some(&r))?),
            Change::SetEndpoint(set) => {
                let name = service_name(set.service.as_ref())?;
                let ep = set
                    .endpoint
                    .ok_or_else(|| missing("set_endpoint.endpoint"))?;
                ViewOp::SetEndpoint(
                    name,
                    EndpointView {
                        ip: ip("set_endpoint.endpoint.ip", &ep.ip)?,
                        endpoint: Arc::new(ep.endpoint.unwrap_or_default()),
                        is_local: ep.is_local,
                        cluster: ep.cluster,
                        local: ep.local,
                    },
                )
            }
            Change::DeleteEndpoint(del) => ViewOp::DeleteEndpoint(
                service_name(del.service.as_ref())?,
                ip("delete_endpoint.ip", &del.ip)?,
            ),
        })
    }
}
