//! The node view: the ENLS projected onto one node.
//!
//! The view is computed by `kpng-view`, which applies kube-proxy's endpoint
//! selection rules (readiness, terminating fallback, topology hints, traffic
//! policies) once, so no backend re-implements them. Backends consume either
//! a whole [`NodeView`] or a stream of [`ViewOp`]s.
//!
//! On the wire (the ENLS watch), ops travel one by one ([`wire`]) or in
//! compact batches ([`compact`]), and [`ViewDigest`] names a view's content
//! so that a watcher can resume on another server instance.

use std::net::IpAddr;
use std::sync::Arc;

use imbl::OrdMap;

use crate::addr::IpFamily;
use crate::endpoint::EndpointInfo;
use crate::v1::{IpSet, Node, Protocol, Service, TrafficPolicy};
use crate::{Error, Result, ServiceName};

/// One endpoint address as this node uses it.
///
/// Only endpoints in at least one of the two sets appear in a view:
/// [`cluster`](Self::cluster) (the cluster-policy endpoints) or
/// [`local`](Self::local) (the local-policy endpoints). An endpoint with
/// both an IPv4 and an IPv6 address appears once per family, since each
/// family is selected on its own.
///
/// 56 bytes: the endpoint (shared with the store) and a byte of marks; the
/// address is one of the endpoint's own. Serialized (JSON, YAML) as `ip`,
/// `endpoint`, `isLocal`, `cluster` and `local`.
///
/// ```
/// use kpng_model::{EndpointInfo, IpFamily};
/// use kpng_model::view::EndpointView;
///
/// let ip = "10.244.1.5".parse()?;
/// let view = EndpointView::new(EndpointInfo::new(ip), IpFamily::V4)
///     .expect("an IPv4 endpoint")
///     .with_cluster(true);
/// assert_eq!(view.ip(), ip);
/// assert!(view.cluster() && !view.local() && !view.is_local());
/// assert!(EndpointView::new(EndpointInfo::new(ip), IpFamily::V6).is_none());
/// # Ok::<(), std::net::AddrParseError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EndpointView {
    endpoint: EndpointInfo,
    marks: u8,
}

/// The view's address is the endpoint's other one (of the other family).
const OTHER: u8 = 1;
const IS_LOCAL: u8 = 2;
const CLUSTER: u8 = 4;
const LOCAL: u8 = 8;

impl EndpointView {
    /// `endpoint` at its address in `family`, in neither set and not on
    /// this node until told ([`with_cluster`](Self::with_cluster),
    /// [`with_local`](Self::with_local),
    /// [`with_is_local`](Self::with_is_local)); `None` when it has no
    /// address in `family`.
    pub fn new(endpoint: EndpointInfo, family: IpFamily) -> Option<Self> {
        let ip = endpoint.address_in(family)?;
        Self::at(endpoint, ip)
    }

    /// `endpoint` at `ip`, which must be one of its addresses (`None`
    /// otherwise).
    pub fn at(endpoint: EndpointInfo, ip: IpAddr) -> Option<Self> {
        let marks = if ip == endpoint.address() {
            0
        } else if Some(ip) == endpoint.other_address() {
            OTHER
        } else {
            return None;
        };
        Some(Self { endpoint, marks })
    }

    fn mark(mut self, bit: u8, on: bool) -> Self {
        if on {
            self.marks |= bit;
        } else {
            self.marks &= !bit;
        }
        self
    }

    /// Sets whether it is a cluster-policy endpoint.
    #[must_use]
    pub fn with_cluster(self, on: bool) -> Self {
        self.mark(CLUSTER, on)
    }

    /// Sets whether it is a local-policy endpoint.
    #[must_use]
    pub fn with_local(self, on: bool) -> Self {
        self.mark(LOCAL, on)
    }

    /// Sets whether the endpoint runs on this node.
    #[must_use]
    pub fn with_is_local(self, on: bool) -> Self {
        self.mark(IS_LOCAL, on)
    }

    /// The address in this family.
    pub fn ip(&self) -> IpAddr {
        match self.endpoint.other_address() {
            Some(other) if self.marks & OTHER != 0 => other,
            _ => self.endpoint.address(),
        }
    }

    /// The endpoint, with its ports and conditions (shared with the
    /// store).
    pub fn endpoint(&self) -> &EndpointInfo {
        &self.endpoint
    }

    /// The endpoint runs on this node.
    pub fn is_local(&self) -> bool {
        self.marks & IS_LOCAL != 0
    }

    /// It is a cluster-policy endpoint: ready (topology-filtered), or
    /// serving-and-terminating when no endpoint is ready.
    pub fn cluster(&self) -> bool {
        self.marks & CLUSTER != 0
    }

    /// It is a local-policy endpoint: ready on this node, or
    /// serving-and-terminating on this node when none is ready here.
    pub fn local(&self) -> bool {
        self.marks & LOCAL != 0
    }

    /// The address family.
    pub fn family(&self) -> IpFamily {
        IpFamily::of(&self.ip())
    }

    /// The endpoint's port for a Service port, matched by port name and
    /// protocol (EndpointSlice ports carry the Service port's name).
    pub fn port(&self, name: &str, protocol: Protocol) -> Option<u16> {
        self.endpoint.port(name, protocol)
    }
}

impl serde::Serialize for EndpointView {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut s = serializer.serialize_struct("EndpointView", 5)?;
        s.serialize_field("ip", &self.ip())?;
        s.serialize_field("endpoint", &self.endpoint)?;
        s.serialize_field("isLocal", &self.is_local())?;
        s.serialize_field("cluster", &self.cluster())?;
        s.serialize_field("local", &self.local())?;
        s.end()
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
            .filter(move |e| e.cluster() && e.family() == family)
    }

    /// The local-policy endpoints of `family`.
    pub fn local_endpoints(&self, family: IpFamily) -> impl Iterator<Item = &EndpointView> {
        self.endpoints
            .iter()
            .filter(move |e| e.local() && e.family() == family)
    }

    /// The endpoints ClusterIP traffic goes to: local-policy ones when
    /// `internalTrafficPolicy: Local`, cluster-policy ones otherwise.
    pub fn internal_endpoints(&self, family: IpFamily) -> impl Iterator<Item = &EndpointView> {
        let local = self.service.internal_traffic_policy() == TrafficPolicy::Local;
        self.endpoints
            .iter()
            .filter(move |e| e.family() == family && if local { e.local() } else { e.cluster() })
    }

    /// The endpoints external traffic (NodePorts, externalIPs, LB IPs) from
    /// outside the cluster goes to: local-policy ones when
    /// `externalTrafficPolicy: Local`, cluster-policy ones otherwise.
    pub fn external_endpoints(&self, family: IpFamily) -> impl Iterator<Item = &EndpointView> {
        let local = self.service.external_traffic_policy() == TrafficPolicy::Local;
        self.endpoints
            .iter()
            .filter(move |e| e.family() == family && if local { e.local() } else { e.cluster() })
    }

    fn endpoint_index(&self, ip: &IpAddr) -> std::result::Result<usize, usize> {
        self.endpoints.binary_search_by(|e| e.ip().cmp(ip))
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
    /// The cluster's Service CIDRs: every ServiceCIDR object's ranges,
    /// merged. An address in them that no Service holds is dropped.
    pub service_cidrs: Arc<IpSet>,
    /// The Services, by name.
    pub services: OrdMap<ServiceName, Arc<ServiceView>>,
}

/// One change to a [`NodeView`].
///
/// A diff is a sequence of ops in this order: node ops first, then
/// `SetServiceCidrs`, then per Service (in name order) either one
/// `DeleteService`, or an optional `SetService` followed by its
/// `DeleteEndpoint`s and `SetEndpoint`s.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub enum ViewOp {
    /// This node's object was created or changed.
    SetNode(Arc<Node>),
    /// This node's object went away.
    DeleteNode,
    /// The cluster's Service CIDRs changed: all of them (empty: none).
    SetServiceCidrs(Arc<IpSet>),
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

    /// The Service CIDRs to drop unallocated addresses in: the cluster's
    /// (its ServiceCIDR objects) and `configured` ones (a `--service-cidr`
    /// flag, for clusters without ServiceCIDRs), nested ranges merged
    /// ([`outermost`](crate::addr::outermost)).
    pub fn service_cidrs_with(&self, configured: &[ipnet::IpNet]) -> Vec<ipnet::IpNet> {
        let cluster = self
            .service_cidrs
            .v4
            .iter()
            .chain(&self.service_cidrs.v6)
            .filter_map(|text| crate::addr::canonical_cidr("serviceCidrs", text).ok());
        crate::addr::outermost(cluster.chain(configured.iter().copied()))
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
            ViewOp::SetServiceCidrs(cidrs) => self.service_cidrs = cidrs.clone(),
            ViewOp::SetService(service) => {
                let name = service.service_name();
                // Already so (a shared view): nothing is copied, not even
                // the map's path to it.
                if self
                    .services
                    .get(&name)
                    .is_some_and(|v| v.service == *service)
                {
                    return Ok(());
                }
                match self.services.get_mut(&name) {
                    Some(view) => Arc::make_mut(view).service = service.clone(),
                    None => {
                        self.services
                            .insert(name, Arc::new(ServiceView::new(service.clone())));
                    }
                }
            }
            ViewOp::DeleteService(name) => {
                if self.services.contains_key(name) {
                    self.services.remove(name);
                }
            }
            ViewOp::SetEndpoint(name, endpoint) => {
                let held = self.service(name)?;
                if let Ok(i) = held.endpoint_index(&endpoint.ip())
                    && held.endpoints[i] == *endpoint
                {
                    // Already so: nothing is copied.
                    return Ok(());
                }
                let view = self.service_mut(name)?;
                match view.endpoint_index(&endpoint.ip()) {
                    Ok(i) => view.endpoints[i] = endpoint.clone(),
                    Err(i) => {
                        // Grow by a quarter, not double: a view is built one
                        // endpoint at a time and kept, and most Services
                        // have a few endpoints (10 fit in exactly 10).
                        let endpoints = &mut view.endpoints;
                        if endpoints.len() == endpoints.capacity() {
                            endpoints.reserve_exact((endpoints.len() / 4).max(1));
                        }
                        endpoints.insert(i, endpoint.clone());
                    }
                }
            }
            ViewOp::DeleteEndpoint(name, ip) => {
                if let Ok(i) = self.service(name)?.endpoint_index(ip) {
                    self.service_mut(name)?.endpoints.remove(i);
                }
            }
        }
        Ok(())
    }

    fn service(&self, name: &ServiceName) -> Result<&ServiceView> {
        self.services
            .get(name)
            .map(|s| &**s)
            .ok_or_else(|| Error::UnknownService(name.to_string()))
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
        let mut digest =
            Self::node_term(view.node.as_deref()) + Self::service_cidrs_term(&view.service_cidrs);
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

    /// The term the Service CIDRs contribute: none when there are none
    /// (a view without them digests as it did before they existed).
    pub fn service_cidrs_term(cidrs: &IpSet) -> Self {
        if cidrs.is_empty() {
            Self::default()
        } else {
            Self(stable_hash(&("service-cidrs", cidrs)))
        }
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

    pub(super) fn service_ref(name: &ServiceName) -> v1::ServiceRef {
        v1::ServiceRef {
            namespace: name.namespace().to_owned(),
            name: name.name().to_owned(),
        }
    }

    pub(super) fn service_name(r: Option<&v1::ServiceRef>) -> Result<ServiceName, Error> {
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
            ViewOp::SetServiceCidrs(cidrs) => Change::SetServiceCidrs((**cidrs).clone()),
            ViewOp::SetService(svc) => Change::SetService((**svc).clone()),
            ViewOp::DeleteService(name) => Change::DeleteService(service_ref(name)),
            ViewOp::SetEndpoint(name, ep) => Change::SetEndpoint(v1::SetEndpoint {
                service: Some(service_ref(name)),
                endpoint: Some(v1::EndpointRef {
                    ip: ep.ip().to_string(),
                    endpoint: Some(ep.endpoint.to_proto()),
                    is_local: ep.is_local(),
                    cluster: ep.cluster(),
                    local: ep.local(),
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
            Change::SetServiceCidrs(cidrs) => ViewOp::SetServiceCidrs(Arc::new(cidrs)),
            Change::SetService(svc) => ViewOp::SetService(Arc::new(svc)),
            Change::DeleteService(r) => ViewOp::DeleteService(service_name(Some(&r))?),
            Change::SetEndpoint(set) => {
                let name = service_name(set.service.as_ref())?;
                let ep = set
                    .endpoint
                    .ok_or_else(|| missing("set_endpoint.endpoint"))?;
                let ip = ip("set_endpoint.endpoint.ip", &ep.ip)?;
                let endpoint =
                    crate::EndpointInfo::from_keyed_proto(ip, ep.endpoint.unwrap_or_default())?;
                // Keyed at `ip`: always one of its addresses.
                let view = EndpointView::at(endpoint, ip)
                    .ok_or_else(|| missing("set_endpoint.endpoint.ip"))?
                    .with_is_local(ep.is_local)
                    .with_cluster(ep.cluster)
                    .with_local(ep.local);
                ViewOp::SetEndpoint(name, view)
            }
            Change::DeleteEndpoint(del) => ViewOp::DeleteEndpoint(
                service_name(del.service.as_ref())?,
                ip("delete_endpoint.ip", &del.ip)?,
            ),
            Change::SetEndpoints(_) => {
                return Err(Error::InvalidAddress {
                    field: "ViewChange.set_endpoints".into(),
                    value: "compact: decode its batch with view::compact::Decoder".into(),
                });
            }
        })
    }
}

/// Batches of [`ViewOp`]s on the wire in compact form
/// (`kpng.model.v1.ViewChanges` with round tables): endpoints as
/// `SetEndpoints` (addresses as bytes, flags as bits, node names, zones,
/// hints and port lists as indices into tables sent once per round).
pub mod compact {
    use std::collections::HashMap;
    use std::net::IpAddr;

    use super::{EndpointView, ViewOp, wire};
    use crate::endpoint::{EndpointInfo, Interner, PortInfo, PortList};
    use crate::v1::{self, Protocol, view_change::Change};
    use crate::{Error, ServiceName};

    const READY: u32 = 1;
    const SERVING: u32 = 2;
    const TERMINATING: u32 = 4;
    const IS_LOCAL: u32 = 8;
    const CLUSTER: u32 = 16;
    const LOCAL: u32 = 32;

    fn ip_bytes(ip: &IpAddr) -> Vec<u8> {
        match ip {
            IpAddr::V4(v4) => v4.octets().to_vec(),
            IpAddr::V6(v6) => v6.octets().to_vec(),
        }
    }

    fn ip_from(field: &str, bytes: &[u8]) -> Result<IpAddr, Error> {
        let bad = || Error::InvalidAddress {
            field: format!("CompactEndpoint.{field}"),
            value: format!("{bytes:02x?}"),
        };
        Ok(match bytes.len() {
            4 => IpAddr::from(<[u8; 4]>::try_from(bytes).map_err(|_| bad())?),
            16 => IpAddr::from(<[u8; 16]>::try_from(bytes).map_err(|_| bad())?),
            _ => return Err(bad()),
        })
    }

    /// Encodes batches of one round; [`end_round`](Self::end_round) at
    /// each sync.
    #[derive(Debug, Default)]
    pub struct Encoder {
        strings: HashMap<String, u32>,
        port_lists: HashMap<PortList, u32>,
        /// The last port list and zone looked up: endpoints in a row
        /// mostly share them, and comparing (shared copies: pointers) is
        /// cheaper than hashing.
        last_ports: Option<(PortList, u32)>,
        last_zone: Option<(String, u32)>,
    }

    impl Encoder {
        /// An encoder at the start of a round.
        pub fn new() -> Self {
            Self::default()
        }

        /// The round ended (a sync was sent): the tables start over.
        pub fn end_round(&mut self) {
            // Dropped, not cleared: a full view's tables hold every node
            // name, and an encoder lives as long as its stream.
            *self = Self::default();
        }

        fn zone(&mut self, batch: &mut v1::ViewChanges, zone: &str) -> u32 {
            match &self.last_zone {
                Some((last, i)) if last == zone => *i,
                _ => {
                    let i = self.string(batch, zone);
                    self.last_zone = Some((zone.to_owned(), i));
                    i
                }
            }
        }

        fn string(&mut self, batch: &mut v1::ViewChanges, text: &str) -> u32 {
            if text.is_empty() {
                return 0;
            }
            if let Some(i) = self.strings.get(text) {
                return *i;
            }
            let i = u32::try_from(self.strings.len() + 1).unwrap_or(u32::MAX);
            self.strings.insert(text.to_owned(), i);
            batch.strings.push(text.to_owned());
            i
        }

        fn ports(&mut self, batch: &mut v1::ViewChanges, ports: &PortList) -> u32 {
            if ports.is_empty() {
                return 0;
            }
            if let Some((last, i)) = &self.last_ports
                && last == ports
            {
                return *i;
            }
            let i = self.port_list(batch, ports);
            self.last_ports = Some((ports.clone(), i));
            i
        }

        fn port_list(&mut self, batch: &mut v1::ViewChanges, ports: &PortList) -> u32 {
            if let Some(i) = self.port_lists.get(ports) {
                return *i;
            }
            let i = u32::try_from(self.port_lists.len() + 1).unwrap_or(u32::MAX);
            self.port_lists.insert(ports.clone(), i);
            batch.port_lists.push(v1::PortList {
                ports: ports
                    .as_slice()
                    .iter()
                    .map(|p| v1::EndpointPort {
                        name: p.name().to_owned(),
                        protocol: p.protocol() as i32,
                        port: u32::from(p.port()),
                    })
                    .collect(),
            });
            i
        }

        /// The compact form of an endpoint: its view's address first, the
        /// endpoint's other one beside it.
        fn endpoint(
            &mut self,
            batch: &mut v1::ViewChanges,
            e: &EndpointView,
        ) -> v1::CompactEndpoint {
            let ep = e.endpoint();
            let ip = e.ip();
            let other = if ip == ep.address() {
                ep.other_address()
            } else {
                Some(ep.address())
            };
            let flag = |on: bool, bit: u32| if on { bit } else { 0 };
            let flags = flag(ep.ready(), READY)
                | flag(ep.serving(), SERVING)
                | flag(ep.terminating(), TERMINATING)
                | flag(e.is_local(), IS_LOCAL)
                | flag(e.cluster(), CLUSTER)
                | flag(e.local(), LOCAL);
            v1::CompactEndpoint {
                ip: ip_bytes(&ip),
                flags,
                node: self.string(batch, ep.node_name()),
                zone: self.zone(batch, ep.zone()),
                ports: self.ports(batch, ep.ports()),
                hint_zones: ep
                    .hint_zones()
                    .iter()
                    .map(|z| self.string(batch, z))
                    .collect(),
                hint_nodes: ep
                    .hint_nodes()
                    .iter()
                    .map(|n| self.string(batch, n))
                    .collect(),
                other_address: other.map(|ip| ip_bytes(&ip)).unwrap_or_default(),
            }
        }

        /// One batch: `ops` in order, runs of endpoints of one Service as
        /// one `SetEndpoints`, with the table entries they add.
        pub fn batch<'a>(&mut self, ops: impl IntoIterator<Item = &'a ViewOp>) -> v1::ViewChanges {
            let mut batch = v1::ViewChanges::default();
            let mut run: Option<(ServiceName, Vec<v1::CompactEndpoint>)> = None;
            let flush = |run: &mut Option<(ServiceName, Vec<v1::CompactEndpoint>)>,
                         batch: &mut v1::ViewChanges| {
                if let Some((name, endpoints)) = run.take() {
                    batch.changes.push(v1::ViewChange {
                        change: Some(Change::SetEndpoints(v1::SetEndpoints {
                            service: Some(wire::service_ref(&name)),
                            endpoints,
                        })),
                    });
                }
            };
            for op in ops {
                if let ViewOp::SetEndpoint(name, endpoint) = op {
                    let compact = self.endpoint(&mut batch, endpoint);
                    match &mut run {
                        Some((current, endpoints)) if current == name => endpoints.push(compact),
                        _ => {
                            flush(&mut run, &mut batch);
                            run = Some((name.clone(), vec![compact]));
                        }
                    }
                    continue;
                }
                flush(&mut run, &mut batch);
                batch.changes.push(wire::to_wire(op));
            }
            flush(&mut run, &mut batch);
            batch
        }
    }

    /// Decodes batches of one round; [`end_round`](Self::end_round) at
    /// each sync and reset.
    ///
    /// Endpoints decoded by one decoder share their node and zone, port
    /// lists and hints (an [`Interner`] that outlives rounds).
    #[derive(Debug, Default)]
    pub struct Decoder {
        strings: Vec<String>,
        port_lists: Vec<PortList>,
        interner: Interner,
    }

    impl Decoder {
        /// A decoder at the start of a round.
        pub fn new() -> Self {
            Self::default()
        }

        /// The round ended: the tables start over (their memory is
        /// given back).
        pub fn end_round(&mut self) {
            self.strings = Vec::new();
            self.port_lists = Vec::new();
        }

        fn string(strings: &[String], i: u32) -> Result<&str, Error> {
            match i {
                0 => Ok(""),
                i => strings
                    .get(i as usize - 1)
                    .map(String::as_str)
                    .ok_or_else(|| bad_index("strings", i)),
            }
        }

        /// The ops of one batch, in order, each handed to `op`.
        ///
        /// # Errors
        /// [`Error::InvalidAddress`] naming what is missing, malformed or
        /// out of the tables; or `op`'s error.
        pub fn batch<E: From<Error>>(
            &mut self,
            batch: v1::ViewChanges,
            mut op: impl FnMut(ViewOp) -> Result<(), E>,
        ) -> Result<(), E> {
            self.strings.extend(batch.strings);
            for (i, list) in batch.port_lists.into_iter().enumerate() {
                let mut ports = Vec::with_capacity(list.ports.len());
                for p in list.ports {
                    let bad = || Error::InvalidValue {
                        field: format!("ViewChanges.port_lists[{i}]"),
                        reason: format!("port {} of protocol {}", p.port, p.protocol),
                    };
                    let port = u16::try_from(p.port).map_err(|_| bad())?;
                    let protocol = Protocol::try_from(p.protocol).map_err(|_| bad())?;
                    ports.push(PortInfo::new(&p.name, protocol, port));
                }
                let list = self.interner.ports(PortList::new(ports));
                self.port_lists.push(list);
            }
            for change in batch.changes {
                match change.change {
                    Some(Change::SetEndpoints(set)) => {
                        let name = wire::service_name(set.service.as_ref())?;
                        for endpoint in set.endpoints {
                            op(ViewOp::SetEndpoint(name.clone(), self.endpoint(endpoint)?))?;
                        }
                    }
                    change => op(wire::from_wire(v1::ViewChange { change })?)?,
                }
            }
            Ok(())
        }

        fn endpoint(&mut self, c: v1::CompactEndpoint) -> Result<EndpointView, Error> {
            let Self {
                strings,
                port_lists,
                interner,
            } = self;
            let string = |i: u32| Self::string(strings, i);
            let ip = ip_from("ip", &c.ip)?;
            let ports = match c.ports {
                0 => PortList::default(),
                i => port_lists
                    .get(i as usize - 1)
                    .cloned()
                    .ok_or_else(|| bad_index("port_lists", i))?,
            };
            let strings = |list: &[u32]| -> Result<Vec<&str>, Error> {
                list.iter().map(|i| string(*i)).collect()
            };
            let mut builder = EndpointInfo::builder(ip)
                .conditions(
                    c.flags & READY != 0,
                    c.flags & SERVING != 0,
                    c.flags & TERMINATING != 0,
                )
                .node(string(c.node)?, string(c.zone)?)
                .hint_zones(strings(&c.hint_zones)?)
                .hint_nodes(strings(&c.hint_nodes)?)
                .ports(ports);
            if !c.other_address.is_empty() {
                builder = builder.other_address(ip_from("other_address", &c.other_address)?);
            }
            // Built at `ip`: always one of its addresses.
            let view =
                EndpointView::at(builder.intern(interner), ip).ok_or_else(|| bad_index("ip", 0))?;
            Ok(view
                .with_is_local(c.flags & IS_LOCAL != 0)
                .with_cluster(c.flags & CLUSTER != 0)
                .with_local(c.flags & LOCAL != 0))
        }
    }

    fn bad_index(table: &str, i: u32) -> Error {
        Error::InvalidAddress {
            field: format!("ViewChanges.{table}"),
            value: format!("index {i} beyond the round's table"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::compact::{Decoder, Encoder};
    use super::{EndpointView, ViewOp};
    use crate::v1::{Endpoint, EndpointPort, IpSet, Node, Service};
    use crate::{EndpointInfo, ServiceName};

    fn endpoint(addrs: &[&str], node: &str, hints: &[&str]) -> EndpointInfo {
        let proto = Endpoint {
            addresses: Some(IpSet {
                v4: addrs
                    .iter()
                    .filter(|a| !a.contains(':'))
                    .map(|a| a.to_string())
                    .collect(),
                v6: addrs
                    .iter()
                    .filter(|a| a.contains(':'))
                    .map(|a| a.to_string())
                    .collect(),
            }),
            node_name: node.into(),
            zone: "zone-a".into(),
            hint_zones: hints.iter().map(|h| h.to_string()).collect(),
            hint_nodes: vec![node.into()],
            ready: true,
            serving: true,
            terminating: node.is_empty(),
            ports: vec![EndpointPort {
                name: "http".into(),
                protocol: 1,
                port: 8080,
            }],
        };
        EndpointInfo::from_proto(&proto).expect("valid")
    }

    fn set(name: &ServiceName, ip: &str, ep: &EndpointInfo, local: bool) -> ViewOp {
        ViewOp::SetEndpoint(
            name.clone(),
            EndpointView::at(ep.clone(), ip.parse().expect("ip"))
                .expect("one of its addresses")
                .with_is_local(local)
                .with_cluster(!local)
                .with_local(local),
        )
    }

    /// A Service's addresses and `loadBalancerSourceRanges` are parsed
    /// once, when the plan is made: the renderers get typed addresses and
    /// prefixes (host bits cleared), and an entry that is not valid is
    /// left out and reported once, not once per renderer.
    #[test]
    fn addresses_and_source_ranges_are_parsed_once_and_typed() {
        use std::io::Write;
        use std::sync::Mutex;

        #[derive(Clone, Default)]
        struct Log(Arc<Mutex<Vec<u8>>>);
        impl Write for Log {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().expect("log").extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }

        let service = Arc::new(Service {
            namespace: "default".into(),
            name: "lb".into(),
            cluster_ips: Some(IpSet {
                v4: vec!["10.96.0.1".into(), "10.96.0.300".into()],
                v6: Vec::new(),
            }),
            load_balancer_source_ranges: Some(Box::new(IpSet {
                v4: vec!["192.168.1.7/24".into(), "10.0.0.0/33".into()],
                v6: vec!["fd00::/64".into()],
            })),
            ..Service::default()
        });
        let view = super::ServiceView::new(service);
        let log = Log::default();
        let writer = log.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let (v4, v6, cluster_ips) = tracing::subscriber::with_default(subscriber, || {
            let v4 = view.plan(crate::IpFamily::V4);
            let v6 = view.plan(crate::IpFamily::V6);
            (v4.source_ranges, v6.source_ranges, v4.cluster_ips)
        });
        let ip = |t: &str| t.parse::<std::net::IpAddr>().expect("ip");
        assert_eq!(cluster_ips, [ip("10.96.0.1")], "addresses typed too");
        let net = |t: &str| t.parse::<crate::IpNet>().expect("cidr");
        assert_eq!(v4, [net("192.168.1.0/24")], "typed, host bits cleared");
        assert_eq!(v6, [net("fd00::/64")]);
        let text = String::from_utf8(log.0.lock().expect("log").clone()).expect("utf-8");
        assert_eq!(text.matches("10.0.0.0/33").count(), 1, "{text}");
        assert_eq!(text.matches("10.96.0.300").count(), 1, "{text}");
        assert_eq!(text.lines().count(), 2, "{text}");
    }

    /// An op that finds its change made (a view shared by the driver)
    /// changes nothing and copies nothing; the others still apply.
    #[test]
    fn ops_already_made_copy_nothing() {
        let web = ServiceName::new("default", "web");
        let service = Arc::new(Service {
            namespace: "default".into(),
            name: "web".into(),
            ..Default::default()
        });
        let ep = endpoint(&["10.0.0.1"], "node-a", &[]);
        let ops = [
            ViewOp::SetService(service.clone()),
            set(&web, "10.0.0.1", &ep, true),
        ];
        let mut view = super::NodeView::default();
        for op in &ops {
            view.apply(op).expect("fits");
        }
        let held = view.clone();
        for op in ops.iter().chain([&ViewOp::DeleteEndpoint(
            web.clone(),
            "10.0.0.9".parse().expect("ip"),
        )]) {
            view.apply(op).expect("fits");
        }
        assert!(Arc::ptr_eq(&view.services[&web], &held.services[&web]));
        assert!(view.services.ptr_eq(&held.services), "the map was copied");
        view.apply(&ViewOp::DeleteService(ServiceName::new("default", "gone")))
            .expect("fits");
        assert!(view.services.ptr_eq(&held.services), "the map was copied");
        // A real change still applies, to a copy.
        view.apply(&set(&web, "10.0.0.1", &ep, false))
            .expect("fits");
        assert!(!Arc::ptr_eq(&view.services[&web], &held.services[&web]));
        assert!(!view.services[&web].endpoints[0].local());
        // An op for an unknown Service is still refused.
        let other = ServiceName::new("default", "other");
        assert!(
            view.apply(&ViewOp::DeleteEndpoint(
                other,
                "10.0.0.1".parse().expect("ip")
            ))
            .is_err()
        );
    }

    #[test]
    fn compact_batches_decode_to_the_same_ops() {
        let web = ServiceName::new("default", "web");
        let dns = ServiceName::new("kube-system", "dns");
        let dual = endpoint(&["10.0.0.1", "fd00::1"], "node-a", &["zone-a"]);
        let plain = endpoint(&["10.0.0.2"], "", &[]);
        // Only the first address of a family is kept.
        let two = endpoint(&["10.0.0.4", "10.0.0.5"], "node-a", &[]);
        assert_eq!(two.other_address(), None);
        let first = vec![
            ViewOp::SetNode(Arc::new(Node {
                name: "node-a".into(),
                ..Default::default()
            })),
            ViewOp::SetService(Arc::new(Service {
                namespace: "default".into(),
                name: "web".into(),
                ..Default::default()
            })),
            set(&web, "10.0.0.1", &dual, true),
            set(&web, "fd00::1", &dual, false),
            set(&web, "10.0.0.2", &plain, false),
        ];
        let second = vec![
            set(&dns, "10.0.0.4", &two, false),
            ViewOp::DeleteEndpoint(dns.clone(), "10.0.0.9".parse().expect("ip")),
            set(&dns, "10.0.0.2", &plain, true),
            ViewOp::DeleteService(web.clone()),
        ];
        let mut encoder = Encoder::new();
        let batches = [encoder.batch(&first), encoder.batch(&second)];
        // The second batch reuses the first one's table entries.
        assert!(batches[1].strings.is_empty(), "{:?}", batches[1].strings);
        assert!(batches[1].port_lists.is_empty());
        let mut decoder = Decoder::new();
        let mut ops = Vec::new();
        for batch in batches {
            decoder
                .batch::<crate::Error>(batch, |op| {
                    ops.push(op);
                    Ok(())
                })
                .expect("decodes");
        }
        assert_eq!(ops, [first, second].concat());

        // A new round starts with empty tables: an index from the old
        // one is refused by name.
        encoder.end_round();
        decoder.end_round();
        let mut stale = Encoder::new().batch(&[set(&web, "10.0.0.2", &plain, false)]);
        stale.strings.clear();
        stale.port_lists.clear();
        let error = decoder
            .batch::<crate::Error>(stale, |_| Ok(()))
            .expect_err("no table");
        assert!(error.to_string().contains("ViewChanges."), "{error}");
    }
}
