//! The node view: the ENLS projected onto one node.
//!
//! The view is computed by `kpng-view`, which applies kube-proxy's endpoint
//! selection rules (readiness, terminating fallback, topology hints, traffic
//! policies) once, so no backend re-implements them. A backend receives
//! the [`NodeView`] in rounds (`kpng_sink::Round`: the view and the
//! Services changed, with their [`ServiceView`]s before and after);
//! [`ViewOp`]s are the view's changes as the ENLS watch streams them.
//!
//! On the wire (the ENLS watch), ops travel one by one or in compact
//! batches (their codecs live with the API, in `kpng_api::codec`), and
//! [`ViewDigest`] names a view's content so that a watcher can resume on
//! another server instance.

use std::net::IpAddr;
use std::sync::Arc;

use imbl::OrdMap;

use crate::addr::IpFamily;
use crate::endpoint::EndpointInfo;
use crate::v1::{IpSet, Node, Protocol, TrafficPolicy};
use crate::{Error, Result, ServiceInfo, ServiceName};

mod digest;
mod plan;
pub use digest::{ViewDifference, ViewDigest, ViewSummary};
pub use plan::{PortPlan, ServicePlan, port_targets};

/// One endpoint address as this node uses it.
///
/// An endpoint a node uses is in at least one of two sets:
/// [`cluster`](Self::cluster) (the cluster-policy endpoints) or
/// [`local`](Self::local) (the local-policy endpoints). One that serves
/// but that this node does not use (a terminating endpoint while ready
/// ones remain; one topology hints send to other nodes) is in the view in
/// neither set ([`used`](Self::used) is false): programmed nowhere, it
/// tells a sink that the endpoint still serves, so that its connections
/// drain, where one absent from the view has left. An endpoint with
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

    /// It is in one of the two sets: traffic may be sent to it. `false`:
    /// it serves, but this node sends it nothing.
    pub fn used(&self) -> bool {
        self.marks & (CLUSTER | LOCAL) != 0
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

/// One Service as this node must program it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceView {
    /// The Service, its addresses typed.
    pub service: Arc<ServiceInfo>,
    /// The endpoints this node may use, and those that serve but that it
    /// does not use (in neither set), sorted by address.
    pub endpoints: Vec<EndpointView>,
}

impl ServiceView {
    /// A view with no endpoints yet.
    pub fn new(service: Arc<ServiceInfo>) -> Self {
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
    SetService(Arc<ServiceInfo>),
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

    /// Sets endpoints of Service `name`, as one
    /// [`ViewOp::SetEndpoint`] each in order, with one look-up of the
    /// Service for them all.
    ///
    /// # Errors
    /// [`Error::UnknownService`] when the view does not hold the Service
    /// (then nothing is set); none for no endpoints, as for no ops.
    pub fn set_endpoints(
        &mut self,
        name: &ServiceName,
        endpoints: Vec<EndpointView>,
    ) -> Result<()> {
        if endpoints.is_empty() {
            return Ok(());
        }
        let held = self.service(name)?;
        let (mut changed, mut missing) = (false, 0);
        for e in &endpoints {
            match held.endpoint_index(&e.ip()) {
                Ok(i) => changed |= held.endpoints[i] != *e,
                Err(_) => (changed, missing) = (true, missing + 1),
            }
        }
        if !changed {
            // Already so: nothing is copied.
            return Ok(());
        }
        let view = self.service_mut(name)?;
        let list = &mut view.endpoints;
        if list.is_empty() && endpoints.is_sorted_by(|a, b| a.ip() < b.ip()) {
            // New, in address order (as a full view sends them): the
            // list as it is.
            *list = endpoints;
            list.shrink_to_fit();
            return Ok(());
        }
        if missing > list.capacity() - list.len() {
            // Exactly what they need when the list is new (a full view
            // is built this way and kept), else by a quarter at least.
            list.reserve_exact(missing.max(list.len() / 4));
        }
        for endpoint in endpoints {
            let at = list.last().map_or(Err(0), |last| {
                // In address order (as a full view sends them): at the end.
                if last.ip() < endpoint.ip() {
                    Err(list.len())
                } else {
                    list.binary_search_by(|e| e.ip().cmp(&endpoint.ip()))
                }
            });
            match at {
                Ok(i) => list[i] = endpoint,
                Err(i) => list.insert(i, endpoint),
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{EndpointView, ViewOp};
    use crate::v1::{Endpoint, EndpointPort, IpSet, Service};
    use crate::{EndpointInfo, ServiceInfo, ServiceName};

    fn info(service: Service) -> Arc<ServiceInfo> {
        Arc::new(ServiceInfo::new(service).expect("valid"))
    }

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
            copies: Vec::new(),
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

    #[test]
    fn endpoints_set_together_are_as_if_set_one_by_one() {
        use super::NodeView;
        let web = ServiceName::new("default", "web");
        let ep = |ip: &str, node: &str| endpoint(&[ip], node, &[]);
        let views = |ops: &[ViewOp]| -> Vec<EndpointView> {
            ops.iter()
                .map(|op| match op {
                    ViewOp::SetEndpoint(_, e) => e.clone(),
                    _ => unreachable!(),
                })
                .collect()
        };
        let mut one_by_one = NodeView::default();
        one_by_one
            .apply(&ViewOp::SetService(info(Service::new("default", "web"))))
            .expect("set");
        let mut together = one_by_one.clone();
        // New and sorted; then unsorted, with a change, a repeat (the
        // last one counts) and one already so.
        let batches = [
            vec![
                set(&web, "10.0.0.2", &ep("10.0.0.2", "a"), true),
                set(&web, "10.0.0.5", &ep("10.0.0.5", "a"), false),
            ],
            vec![
                set(&web, "10.0.0.9", &ep("10.0.0.9", "b"), false),
                set(&web, "10.0.0.1", &ep("10.0.0.1", "b"), false),
                set(&web, "10.0.0.5", &ep("10.0.0.5", "c"), false),
                set(&web, "10.0.0.1", &ep("10.0.0.1", "c"), true),
                set(&web, "10.0.0.2", &ep("10.0.0.2", "a"), true),
            ],
        ];
        for batch in batches {
            for op in &batch {
                one_by_one.apply(op).expect("fits");
            }
            together.set_endpoints(&web, views(&batch)).expect("fits");
            assert_eq!(together, one_by_one);
        }
        let held = together.services.get(&web).map(|v| v.endpoints.len());
        assert_eq!(held, Some(4));
        // Nothing changes: the view stays shared.
        let before = together.clone();
        let again = vec![set(&web, "10.0.0.9", &ep("10.0.0.9", "b"), false)];
        together.set_endpoints(&web, views(&again)).expect("fits");
        assert!(Arc::ptr_eq(
            &before.services[&web],
            &together.services[&web]
        ));
        // An unknown Service: refused, nothing set.
        let other = ServiceName::new("default", "other");
        assert!(together.set_endpoints(&other, views(&again)).is_err());
        assert_eq!(together, before);
    }

    /// A Service's addresses and `loadBalancerSourceRanges` are typed
    /// once, when the Service enters: a plan lends them, per family, as
    /// they are held.
    #[test]
    fn plans_lend_the_typed_addresses() {
        let service = info(Service {
            namespace: "default".into(),
            name: "lb".into(),
            cluster_ips: Some(IpSet {
                v4: vec!["10.96.0.1".into()],
                v6: vec!["fd00::1".into()],
            }),
            load_balancer_source_ranges: Some(Box::new(IpSet {
                v4: vec!["192.168.1.7/24".into()],
                v6: vec!["fd00::/64".into()],
            })),
            ..Service::default()
        });
        let view = super::ServiceView::new(service.clone());
        let v4 = view.plan(crate::IpFamily::V4);
        let v6 = view.plan(crate::IpFamily::V6);
        let ip = |t: &str| t.parse::<std::net::IpAddr>().expect("ip");
        let net = |t: &str| t.parse::<crate::IpNet>().expect("cidr");
        assert_eq!(v4.cluster_ips, [ip("10.96.0.1")]);
        assert_eq!(v6.cluster_ips, [ip("fd00::1")]);
        assert_eq!(
            v4.source_ranges,
            [net("192.168.1.0/24")],
            "host bits cleared"
        );
        assert_eq!(v6.source_ranges, [net("fd00::/64")]);
        assert!(std::ptr::eq(
            v4.cluster_ips,
            service.cluster_ips(crate::IpFamily::V4)
        ));
    }

    /// An op that finds its change made (a view shared by the driver)
    /// changes nothing and copies nothing; the others still apply.
    #[test]
    fn ops_already_made_copy_nothing() {
        let web = ServiceName::new("default", "web");
        let service = info(Service {
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
}
