//! Typed keys of the ENLS map and the values they hold.

use std::fmt;
use std::sync::Arc;

use crate::v1::{Endpoint, Node, Service};

/// The identity of a Service: its namespace and name.
///
/// Both parts are reference-counted, so cloning a name (which the persistent
/// store does when it copies a tree node) never allocates.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceName {
    /// The namespace.
    pub namespace: Arc<str>,
    /// The name.
    pub name: Arc<str>,
}

impl ServiceName {
    /// Builds a name from its two parts.
    pub fn new(namespace: impl Into<Arc<str>>, name: impl Into<Arc<str>>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for ServiceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
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
/// Keys order by kind first, then by name. All endpoints of one Service are
/// therefore contiguous, which lets a reader range over them.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Key {
    /// A node, by name.
    Node(Arc<str>),
    /// A Service.
    Service(ServiceName),
    /// An endpoint of a Service, identified by its primary address in
    /// canonical text form (endpoints are de-duplicated by address).
    Endpoint(ServiceName, Arc<str>),
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
