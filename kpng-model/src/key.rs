//! Typed keys of the ENLS map and the values they hold.

use std::cmp::Ordering;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use crate::ServiceInfo;
use crate::endpoint::EndpointInfo;
use crate::v1::{IpSet, Node, Protocol, Service, ServiceCidr, ServicePort, ServiceType};

/// The identity of a Service: its namespace and name.
///
/// Both parts share one reference-counted allocation, so cloning a name
/// (which the persistent store does when it copies a tree node) never
/// allocates, and comparing two names reads one string each. A name also
/// carries a 64-bit fingerprint of its text (FNV-1a, the same on every
/// machine and run). Names hash by it, so hash maps keyed by names need
/// no hashing of their own, and order by it first, so comparisons read the
/// strings only on a fingerprint match. Names therefore sort in a fixed,
/// deterministic order that is not alphabetical.
#[derive(Clone)]
pub struct ServiceName {
    fingerprint: u64,
    /// `namespace/name`; a namespace never contains a `/`.
    text: Arc<str>,
    /// Where the namespace ends in `text`.
    split: u32,
}

impl ServiceName {
    /// Builds a name from its two parts.
    pub fn new(namespace: impl AsRef<str>, name: impl AsRef<str>) -> Self {
        let (namespace, name) = (namespace.as_ref(), name.as_ref());
        Self {
            fingerprint: fingerprint(namespace, name),
            text: format!("{namespace}/{name}").into(),
            split: u32::try_from(namespace.len()).unwrap_or(u32::MAX),
        }
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        self.text.get(..self.split as usize).unwrap_or_default()
    }

    /// The name.
    pub fn name(&self) -> &str {
        self.text.get(self.split as usize + 1..).unwrap_or_default()
    }

    /// The fingerprint names order by first.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }
}

/// FNV-1a over `namespace`, a `/` separator and `name`.
fn fingerprint(namespace: &str, name: &str) -> u64 {
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in namespace.bytes().chain([b'/']).chain(name.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(PRIME);
    }
    hash
}

impl PartialEq for ServiceName {
    fn eq(&self, other: &Self) -> bool {
        self.fingerprint == other.fingerprint
            && self.split == other.split
            && (Arc::ptr_eq(&self.text, &other.text) || self.text == other.text)
    }
}

impl Eq for ServiceName {}

impl Ord for ServiceName {
    fn cmp(&self, other: &Self) -> Ordering {
        self.fingerprint
            .cmp(&other.fingerprint)
            .then_with(|| self.namespace().cmp(other.namespace()))
            .then_with(|| self.name().cmp(other.name()))
    }
}

impl PartialOrd for ServiceName {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl std::hash::Hash for ServiceName {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.fingerprint.hash(state);
    }
}

impl fmt::Display for ServiceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.text)
    }
}

impl fmt::Debug for ServiceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl serde::Serialize for ServiceName {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// The kind of an ENLS entry. Each kind has its own "synced" flag in the
/// store, set when its source finished its initial list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub enum Kind {
    /// Nodes (topology labels and addresses).
    Node,
    /// ServiceCIDRs (the ranges Service IPs are allocated from).
    ServiceCidr,
    /// Services.
    Service,
    /// Endpoints (from EndpointSlices).
    Endpoint,
}

impl Kind {
    /// Every kind, in key order.
    pub const ALL: [Kind; 4] = [Kind::Node, Kind::ServiceCidr, Kind::Service, Kind::Endpoint];
}

/// The key of one ENLS entry.
///
/// Keys order by kind (nodes, ServiceCIDRs, Services, endpoints), then by
/// name (see
/// [`ServiceName`] for its order), then by address.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Key {
    /// A node, by name.
    Node(Arc<str>),
    /// A ServiceCIDR, by name.
    ServiceCidr(Arc<str>),
    /// A Service.
    Service(ServiceName),
    /// An endpoint of a Service, identified by its primary address
    /// (endpoints are de-duplicated by address).
    Endpoint(ServiceName, IpAddr),
}

impl Key {
    /// The kind of entry this key names.
    pub fn kind(&self) -> Kind {
        match self {
            Key::Node(_) => Kind::Node,
            Key::ServiceCidr(_) => Kind::ServiceCidr,
            Key::Service(_) => Kind::Service,
            Key::Endpoint(..) => Kind::Endpoint,
        }
    }

    /// The Service this key belongs to: the Service itself or the owner of
    /// an endpoint. `None` for nodes and ServiceCIDRs.
    pub fn service(&self) -> Option<&ServiceName> {
        match self {
            Key::Node(_) | Key::ServiceCidr(_) => None,
            Key::Service(name) | Key::Endpoint(name, _) => Some(name),
        }
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Node(name) => write!(f, "node/{name}"),
            Key::ServiceCidr(name) => write!(f, "servicecidr/{name}"),
            Key::Service(name) => write!(f, "service/{name}"),
            Key::Endpoint(name, id) => write!(f, "endpoint/{name}/{id}"),
        }
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl serde::Serialize for Key {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// The value of one ENLS entry. Values are shared (`Arc`): a snapshot, a
/// diff operation or a node view holds them without copying.
///
/// Equality compares content, field by field, and never allocates; two
/// clones of one `Arc` compare in O(1) (the standard library short-cuts
/// pointer-equal `Arc`s of `Eq` types).
#[derive(Clone, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(tag = "kind", content = "value")]
pub enum Value {
    /// A node.
    Node(Arc<Node>),
    /// A ServiceCIDR.
    ServiceCidr(Arc<ServiceCidr>),
    /// A Service, its addresses typed.
    Service(Arc<ServiceInfo>),
    /// An endpoint.
    Endpoint(EndpointInfo),
}

impl Value {
    /// The kind of this value.
    pub fn kind(&self) -> Kind {
        match self {
            Value::Node(_) => Kind::Node,
            Value::ServiceCidr(_) => Kind::ServiceCidr,
            Value::Service(_) => Kind::Service,
            Value::Endpoint(_) => Kind::Endpoint,
        }
    }
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Node(v) => v.fmt(f),
            Value::ServiceCidr(v) => v.fmt(f),
            Value::Service(v) => v.fmt(f),
            Value::Endpoint(v) => v.fmt(f),
        }
    }
}

impl Service {
    /// The key of this Service.
    pub fn service_name(&self) -> ServiceName {
        ServiceName::new(self.namespace.as_str(), self.name.as_str())
    }

    /// A `ClusterIP` Service `namespace/name`, with no address or port
    /// yet: for tests and for sources other than Kubernetes. Its enums
    /// read back typed through prost's getters (`r#type()`,
    /// `internal_traffic_policy()`).
    ///
    /// ```
    /// use kpng_model::v1::{Protocol, Service, ServicePort, ServiceType};
    ///
    /// let web = Service::new("default", "web")
    ///     .with_type(ServiceType::NodePort)
    ///     .with_cluster_ips(["10.96.0.10".parse()?])
    ///     .with_port(ServicePort::new("http", Protocol::Tcp, 80));
    /// assert_eq!(web.r#type(), ServiceType::NodePort);
    /// assert_eq!(web.ports[0].protocol(), Protocol::Tcp);
    /// # Ok::<(), std::net::AddrParseError>(())
    /// ```
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            ..Self::default()
        }
    }

    /// Sets the type.
    #[must_use]
    pub fn with_type(mut self, kind: ServiceType) -> Self {
        self.set_type(kind);
        self
    }

    /// Sets the ClusterIPs (canonical, split by family).
    #[must_use]
    pub fn with_cluster_ips(mut self, ips: impl IntoIterator<Item = IpAddr>) -> Self {
        self.cluster_ips = Some(IpSet::from_addrs(ips));
        self
    }

    /// Adds a port.
    #[must_use]
    pub fn with_port(mut self, port: ServicePort) -> Self {
        self.ports.push(port);
        self
    }
}

impl ServicePort {
    /// A port as a Service spec lists it: its name, protocol and number
    /// (the target port, a node port: set the fields).
    pub fn new(name: impl Into<String>, protocol: Protocol, port: u16) -> Self {
        let mut new = Self {
            name: name.into(),
            port: u32::from(port),
            ..Self::default()
        };
        new.set_protocol(protocol);
        new
    }
}

/// The wire form of store entries (`kpng.model.v1.EnlsChange`), as the
/// global watch streams them.
pub mod wire {
    use std::sync::Arc;

    use super::{Key, Value};
    use crate::v1::{self, enls_change::Change};
    use crate::{Error, ServiceName};

    fn bad(field: &str, value: &str) -> Error {
        Error::InvalidAddress {
            field: format!("EnlsChange.{field}"),
            value: value.to_owned(),
        }
    }

    fn service_ref(name: &ServiceName) -> v1::ServiceRef {
        v1::ServiceRef {
            namespace: name.namespace().to_owned(),
            name: name.name().to_owned(),
        }
    }

    fn endpoint_key(name: &ServiceName, ip: &std::net::IpAddr) -> v1::EndpointKey {
        v1::EndpointKey {
            service: Some(service_ref(name)),
            ip: ip.to_string(),
        }
    }

    fn from_key(key: Option<v1::EndpointKey>) -> Result<(ServiceName, std::net::IpAddr), Error> {
        let key = key.ok_or_else(|| bad("endpoint", "missing"))?;
        let service = key
            .service
            .ok_or_else(|| bad("endpoint.service", "missing"))?;
        let ip = key.ip.parse().map_err(|_| bad("endpoint.ip", &key.ip))?;
        Ok((ServiceName::new(&service.namespace, &service.name), ip))
    }

    /// The wire form of a set (`Some(value)`) or delete (`None`).
    pub fn to_wire(key: &Key, value: Option<&Value>) -> v1::EnlsChange {
        let change = match (key, value) {
            (Key::Service(_), Some(Value::Service(s))) => Change::SetService(s.service().clone()),
            (Key::Service(name), _) => Change::DeleteService(service_ref(name)),
            (Key::Endpoint(name, ip), Some(Value::Endpoint(e))) => {
                Change::SetEndpoint(v1::EndpointEntry {
                    key: Some(endpoint_key(name, ip)),
                    endpoint: Some(e.to_proto()),
                })
            }
            (Key::Endpoint(name, ip), _) => Change::DeleteEndpoint(endpoint_key(name, ip)),
            (Key::Node(_), Some(Value::Node(n))) => Change::SetNode((**n).clone()),
            (Key::Node(name), _) => Change::DeleteNode(name.to_string()),
            (Key::ServiceCidr(_), Some(Value::ServiceCidr(c))) => {
                Change::SetServiceCidr((**c).clone())
            }
            (Key::ServiceCidr(name), _) => Change::DeleteServiceCidr(name.to_string()),
        };
        v1::EnlsChange {
            change: Some(change),
        }
    }

    /// The key and the new value (`None`: deleted) a wire change stands
    /// for.
    ///
    /// # Errors
    /// [`Error::InvalidAddress`] naming a missing part or a bad address;
    /// [`Error::InvalidServiceAddress`] for a Service's.
    pub fn from_wire(change: v1::EnlsChange) -> Result<(Key, Option<Value>), Error> {
        Ok(
            match change.change.ok_or_else(|| bad("change", "missing"))? {
                Change::SetService(s) => (
                    Key::Service(s.service_name()),
                    Some(Value::Service(Arc::new(crate::ServiceInfo::new(s)?))),
                ),
                Change::DeleteService(r) => {
                    (Key::Service(ServiceName::new(&r.namespace, &r.name)), None)
                }
                Change::SetEndpoint(entry) => {
                    let (name, ip) = from_key(entry.key)?;
                    let endpoint = entry.endpoint.unwrap_or_default();
                    let endpoint = crate::EndpointInfo::from_keyed_proto(ip, endpoint)?;
                    (Key::Endpoint(name, ip), Some(Value::Endpoint(endpoint)))
                }
                Change::DeleteEndpoint(key) => {
                    let (name, ip) = from_key(Some(key))?;
                    (Key::Endpoint(name, ip), None)
                }
                Change::SetNode(n) => (
                    Key::Node(n.name.as_str().into()),
                    Some(Value::Node(Arc::new(n))),
                ),
                Change::DeleteNode(name) => (Key::Node(name.as_str().into()), None),
                Change::SetServiceCidr(c) => (
                    Key::ServiceCidr(c.name.as_str().into()),
                    Some(Value::ServiceCidr(Arc::new(c))),
                ),
                Change::DeleteServiceCidr(name) => (Key::ServiceCidr(name.as_str().into()), None),
            },
        )
    }
}
