//! Typed keys of the ENLS map and the values they hold.

use std::cmp::Ordering;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use crate::v1::{Endpoint, Node, Service};

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
    /// Services.
    Service,
    /// Endpoints (from EndpointSlices).
    Endpoint,
}

impl Kind {
    /// Every kind, in key order.
    pub const ALL: [Kind; 3] = [Kind::Node, Kind::Service, Kind::Endpoint];
}

/// The key of one ENLS entry.
///
/// Keys order by kind (nodes, Services, endpoints), then by name (see
/// [`ServiceName`] for its order), then by address.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Key {
    /// A node, by name.
    Node(Arc<str>),
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
            Key::Service(_) => Kind::Service,
            Key::Endpoint(..) => Kind::Endpoint,
        }
    }

    /// The Service this key belongs to: the Service itself or the owner of
    /// an endpoint. `None` for nodes.
    pub fn service(&self) -> Option<&ServiceName> {
        match self {
            Key::Node(_) => None,
            Key::Service(name) | Key::Endpoint(name, _) => Some(name),
        }
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Node(name) => write!(f, "node/{name}"),
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
    /// A Service.
    Service(Arc<Service>),
    /// An endpoint.
    Endpoint(Arc<Endpoint>),
}

impl Value {
    /// The kind of this value.
    pub fn kind(&self) -> Kind {
        match self {
            Value::Node(_) => Kind::Node,
            Value::Service(_) => Kind::Service,
            Value::Endpoint(_) => Kind::Endpoint,
        }
    }
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Node(v) => v.fmt(f),
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
}
