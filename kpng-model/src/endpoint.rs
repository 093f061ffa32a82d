//! The endpoint as the store and node views hold it: [`EndpointInfo`].
//!
//! The protobuf message [`v1::Endpoint`] is the ENLS's wire and file
//! form: every address is text, every endpoint owns its node name and its
//! port list. A cluster holds hundreds of thousands of endpoints, and in
//! memory they repeat almost everything: every endpoint of an
//! EndpointSlice has the same ports, and every endpoint on one node the
//! same node and zone. [`EndpointInfo`] keeps one endpoint in 48 bytes:
//!
//! - its address in binary form, inline;
//! - its conditions as bits;
//! - its node and zone, its port list and its topology hints behind shared
//!   pointers, which an [`Interner`] makes point to one copy of each
//!   distinct value.
//!
//! Equality compares content, with pointer equality as a shortcut, so two
//! endpoints built apart are equal when their content is. Hashing hashes
//! content, the same in every process.
//!
//! # Example
//!
//! ```
//! use kpng_model::endpoint::{EndpointInfo, Interner, PortInfo, PortList};
//! use kpng_model::v1::Protocol;
//!
//! let mut interner = Interner::new();
//! let ports = PortList::new([PortInfo::new("http", Protocol::Tcp, 8080)]);
//! let a = EndpointInfo::builder("10.244.1.5".parse()?)
//!     .node("node-a", "zone-1")
//!     .ports(ports.clone())
//!     .intern(&mut interner);
//! let b = EndpointInfo::builder("10.244.1.6".parse()?)
//!     .node("node-a", "zone-1")
//!     .ports(ports)
//!     .intern(&mut interner);
//! assert_eq!(a.node_name(), "node-a");
//! assert_eq!(a.port("http", Protocol::Tcp), Some(8080));
//! assert!(a.ready() && a.serving() && !a.terminating());
//! // One copy of the node and zone for both.
//! assert!(a.shares_node_with(&b));
//! // The protobuf form round-trips.
//! let proto = a.to_proto();
//! assert_eq!(EndpointInfo::from_proto(&proto)?, a);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::net::IpAddr;
use std::sync::Arc;

use crate::addr::IpFamily;
use crate::v1::{self, IpSet, Protocol};
use crate::{Error, Result};

const READY: u8 = 1;
const SERVING: u8 = 2;
const TERMINATING: u8 = 4;

/// The conditions as the bits an endpoint keeps.
fn condition_bits(ready: bool, serving: bool, terminating: bool) -> u8 {
    let bit = |on: bool, bit: u8| if on { bit } else { 0 };
    bit(ready, READY) | bit(serving, SERVING) | bit(terminating, TERMINATING)
}

/// Where an endpoint runs: its node and zone, shared by every endpoint on
/// that node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct Place {
    node: Box<str>,
    zone: Box<str>,
}

/// What few endpoints have: topology hints, an address of the other
/// family, other copies of the address.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct Extra {
    hint_zones: Box<[Box<str>]>,
    hint_nodes: Box<[Box<str>]>,
    other_address: Option<IpAddr>,
    /// See [`EndpointInfo::copies`]: none has copies of its own.
    copies: Box<[EndpointInfo]>,
}

/// One port of an endpoint: the Service port name it serves, its protocol
/// and its number.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PortInfo {
    name: Arc<str>,
    port: u16,
    protocol: Protocol,
}

impl PortInfo {
    /// A port.
    pub fn new(name: &str, protocol: Protocol, port: u16) -> Self {
        Self {
            name: name.into(),
            port,
            protocol,
        }
    }

    /// The Service port name (EndpointSlice ports carry it).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The protocol.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// The port number on the endpoint.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl fmt::Debug for PortInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{:?}:{}", self.name, self.protocol, self.port)
    }
}

/// The ports of an endpoint, sorted by (name, protocol): one shared list
/// for every endpoint of an EndpointSlice. Cloning is O(1).
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct PortList(Option<Arc<Vec<PortInfo>>>);

impl PortList {
    /// A list of `ports`, sorted by (name, protocol); of two ports with the
    /// same name and protocol, the first is kept.
    pub fn new(ports: impl IntoIterator<Item = PortInfo>) -> Self {
        let mut ports: Vec<PortInfo> = ports.into_iter().collect();
        if ports.is_empty() {
            return Self(None);
        }
        ports.sort_by(|a, b| (&a.name, a.protocol).cmp(&(&b.name, b.protocol)));
        ports.dedup_by(|b, a| a.name == b.name && a.protocol == b.protocol);
        ports.shrink_to_fit();
        Self(Some(Arc::new(ports)))
    }

    /// The ports, sorted by (name, protocol).
    pub fn as_slice(&self) -> &[PortInfo] {
        self.0.as_deref().map_or(&[], Vec::as_slice)
    }

    /// The port number serving Service port `name` over `protocol`.
    pub fn find(&self, name: &str, protocol: Protocol) -> Option<u16> {
        self.as_slice()
            .iter()
            .find(|p| &*p.name == name && p.protocol == protocol)
            .map(|p| p.port)
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// Whether two lists are one shared copy (not only equal).
    pub fn is_shared_with(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }
}

impl fmt::Debug for PortList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

/// One endpoint address of a Service, as kube-proxy uses it: 48 bytes,
/// the rest shared.
///
/// Its primary [`address`](Self::address) is the store's key for it.
/// Build one with [`builder`](Self::builder) or
/// [`from_proto`](Self::from_proto); the read side is the accessor
/// methods. See the [module docs](self).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct EndpointInfo {
    address: IpAddr,
    flags: u8,
    place: Option<Arc<Place>>,
    ports: PortList,
    extra: Option<Arc<Extra>>,
}

impl EndpointInfo {
    /// A ready, serving endpoint at `address`, on no known node, with no
    /// ports: the start of a [`builder`](Self::builder), built.
    pub fn new(address: IpAddr) -> Self {
        Self::builder(address).build()
    }

    /// A builder for an endpoint at `address`: ready and serving, not
    /// terminating, until told otherwise.
    pub fn builder<'a>(address: IpAddr) -> EndpointBuilder<'a> {
        EndpointBuilder {
            address,
            other_address: None,
            flags: READY | SERVING,
            node: "",
            zone: "",
            hint_zones: Vec::new(),
            hint_nodes: Vec::new(),
            ports: PortList::default(),
            copies: Vec::new(),
        }
    }

    /// The endpoint of a protobuf [`v1::Endpoint`]. Its primary address
    /// is its first IPv4 address, or its first IPv6 address when it has no
    /// IPv4 one; the first address of the other family is kept too. A
    /// further address of one family is ignored, as kube-proxy uses only
    /// the first.
    ///
    /// # Errors
    /// [`Error::InvalidAddress`] for an address that does not parse, and
    /// [`Error::InvalidValue`] for an endpoint with no address, a port
    /// number outside 0..=65535 or an unknown protocol.
    pub fn from_proto(endpoint: &v1::Endpoint) -> Result<Self> {
        let first = |list: &[String]| -> Result<Option<IpAddr>> {
            list.first()
                .map(|t| crate::addr::canonical_ip("endpoint.addresses", t))
                .transpose()
        };
        let (v4, v6) = match &endpoint.addresses {
            Some(set) => (first(&set.v4)?, first(&set.v6)?),
            None => (None, None),
        };
        let (address, other_address) = match (v4, v6) {
            (Some(v4), v6) => (v4, v6),
            (None, Some(v6)) => (v6, None),
            (None, None) => {
                return Err(Error::InvalidValue {
                    field: "endpoint.addresses".into(),
                    reason: "no address".into(),
                });
            }
        };
        let mut ports = Vec::with_capacity(endpoint.ports.len());
        for (i, p) in endpoint.ports.iter().enumerate() {
            let bad = |reason: String| Error::InvalidValue {
                field: format!("endpoint.ports[{i}]"),
                reason,
            };
            let port = u16::try_from(p.port).map_err(|_| bad(format!("port {}", p.port)))?;
            let protocol = Protocol::try_from(p.protocol)
                .map_err(|_| bad(format!("protocol {}", p.protocol)))?;
            ports.push(PortInfo::new(&p.name, protocol, port));
        }
        let mut copies = Vec::with_capacity(endpoint.copies.len());
        for (i, copy) in endpoint.copies.iter().enumerate() {
            let field = || format!("endpoint.copies[{i}]");
            let copy = Self::from_keyed_proto(address, copy.clone()).map_err(|e| match e {
                Error::InvalidValue { field: f, reason } => Error::InvalidValue {
                    field: format!("{}.{}", field(), f.trim_start_matches("endpoint.")),
                    reason,
                },
                other => other,
            })?;
            if copy.address != address {
                return Err(Error::InvalidValue {
                    field: field(),
                    reason: format!("address {} is not the endpoint's {address}", copy.address),
                });
            }
            copies.push(copy);
        }
        let builder = Self::builder(address)
            .conditions(endpoint.ready, endpoint.serving, endpoint.terminating)
            .node(&endpoint.node_name, &endpoint.zone)
            .hint_zones(endpoint.hint_zones.iter().map(String::as_str))
            .hint_nodes(endpoint.hint_nodes.iter().map(String::as_str))
            .ports(PortList::new(ports))
            .copies(copies);
        Ok(match other_address {
            Some(other) => builder.other_address(other),
            None => builder,
        }
        .build())
    }

    /// The endpoint of a wire entry keyed by `ip` (a store entry, a
    /// node-view op): an endpoint message that carries no address takes
    /// its key's; otherwise as [`from_proto`](Self::from_proto).
    ///
    /// ```
    /// use kpng_model::EndpointInfo;
    ///
    /// let ip = "10.244.1.5".parse()?;
    /// let endpoint = EndpointInfo::from_keyed_proto(ip, Default::default())?;
    /// assert_eq!(endpoint.address(), ip);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`from_proto`](Self::from_proto).
    pub fn from_keyed_proto(ip: IpAddr, mut endpoint: v1::Endpoint) -> Result<Self> {
        let none = |a: &IpSet| a.v4.is_empty() && a.v6.is_empty();
        if endpoint.addresses.as_ref().is_none_or(none) {
            endpoint.addresses = Some(IpSet::single(ip));
        }
        Self::from_proto(&endpoint)
    }

    /// The protobuf form.
    pub fn to_proto(&self) -> v1::Endpoint {
        let strings = |list: &[Box<str>]| list.iter().map(|s| s.to_string()).collect();
        v1::Endpoint {
            addresses: Some(IpSet::from_addrs(
                std::iter::once(self.address).chain(self.other_address()),
            )),
            node_name: self.node_name().to_owned(),
            zone: self.zone().to_owned(),
            hint_zones: strings(self.hint_zones()),
            hint_nodes: strings(self.hint_nodes()),
            ready: self.ready(),
            serving: self.serving(),
            terminating: self.terminating(),
            ports: self
                .ports
                .as_slice()
                .iter()
                .map(|p| v1::EndpointPort {
                    name: p.name.to_string(),
                    protocol: p.protocol as i32,
                    port: u32::from(p.port),
                })
                .collect(),
            copies: self.copies().iter().map(Self::to_proto).collect(),
        }
    }

    /// The primary address: the store's key for this endpoint.
    pub fn address(&self) -> IpAddr {
        self.address
    }

    /// The address of the other family, for an endpoint that has both.
    pub fn other_address(&self) -> Option<IpAddr> {
        self.extra.as_ref().and_then(|e| e.other_address)
    }

    /// The endpoint's address in `family`, if it has one.
    pub fn address_in(&self, family: IpFamily) -> Option<IpAddr> {
        std::iter::once(self.address)
            .chain(self.other_address())
            .find(|ip| IpFamily::of(ip) == family)
    }

    /// `conditions.ready`, resolved: unset means true.
    pub fn ready(&self) -> bool {
        self.flags & READY != 0
    }

    /// `conditions.serving`, resolved: unset means true.
    pub fn serving(&self) -> bool {
        self.flags & SERVING != 0
    }

    /// `conditions.terminating`, resolved: unset means false.
    pub fn terminating(&self) -> bool {
        self.flags & TERMINATING != 0
    }

    /// `nodeName`, or empty when unknown.
    pub fn node_name(&self) -> &str {
        self.place.as_deref().map_or("", |p| &p.node)
    }

    /// `zone`, or empty when unknown.
    pub fn zone(&self) -> &str {
        self.place.as_deref().map_or("", |p| &p.zone)
    }

    /// `hints.forZones`, sorted.
    pub fn hint_zones(&self) -> &[Box<str>] {
        self.extra.as_deref().map_or(&[], |e| &e.hint_zones)
    }

    /// `hints.forNodes`, sorted.
    pub fn hint_nodes(&self) -> &[Box<str>] {
        self.extra.as_deref().map_or(&[], |e| &e.hint_nodes)
    }

    /// The ports.
    pub fn ports(&self) -> &PortList {
        &self.ports
    }

    /// The other copies of this address, when the EndpointSlices of its
    /// Service list it more than once: the first copy on each node other
    /// than this one's, in slice-name order, each as its slice lists it
    /// (see [`fold`](Self::fold)). Empty for almost every endpoint.
    ///
    /// The store keeps them so that each node's view can prefer the copy
    /// on that node, as kube-proxy does (`kpng-view` resolves them: a node
    /// view's endpoints have none).
    pub fn copies(&self) -> &[EndpointInfo] {
        self.extra.as_deref().map_or(&[], |e| &e.copies)
    }

    /// The endpoint as `node` uses it: its copy on `node` when it has one
    /// (with the ports of every copy merged in, its own first), else this
    /// one; either way with no copies. kube-proxy favours the local copy
    /// of an address that EndpointSlices list more than once. An empty
    /// `node` is no node: this endpoint is used.
    ///
    /// ```
    /// use kpng_model::EndpointInfo;
    ///
    /// let ip = "10.1.0.5".parse()?;
    /// let leaving = EndpointInfo::builder(ip).node("node-a", "").conditions(false, true, true);
    /// let arrived = EndpointInfo::builder(ip).node("node-b", "");
    /// let stored = EndpointInfo::fold([leaving.build(), arrived.build()]).expect("one address");
    /// assert_eq!(stored.copies().len(), 1);
    /// assert!(stored.for_node("node-b").ready());
    /// assert!(stored.for_node("node-a").terminating());
    /// assert!(stored.for_node("node-c").terminating());
    /// assert!(stored.for_node("node-b").copies().is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn for_node(&self, node: &str) -> std::borrow::Cow<'_, Self> {
        use std::borrow::Cow;
        let copies = self.copies();
        if copies.is_empty() {
            return Cow::Borrowed(self);
        }
        let local = (!node.is_empty() && self.node_name() != node)
            .then(|| copies.iter().find(|c| c.node_name() == node))
            .flatten();
        Cow::Owned(match local {
            // Its own ports first, then those only other copies list
            // (this one's, merged at `fold`).
            Some(copy) => copy.with_ports(merged_ports(copy.ports(), self.ports())),
            None => self.with_copies(Vec::new()),
        })
    }

    /// One endpoint from the copies of one address that EndpointSlices
    /// list, in slice-name order (a copy that has copies counts as itself
    /// followed by them): the first copy, with the ports of every copy
    /// merged in (of two with one name and protocol, the earlier copy's),
    /// keeping as [`copies`](Self::copies) the first copy on each node
    /// other than the first copy's. A copy on no node, or on a node an
    /// earlier copy is on, is never used by any node and adds only its
    /// ports. `None` for no copies; copies of another address than the
    /// first's are not this address's and are ignored.
    pub fn fold(copies: impl IntoIterator<Item = EndpointInfo>) -> Option<Self> {
        let mut copies = copies.into_iter();
        let first = copies.next()?;
        let mut rest = first.copies().to_vec();
        rest.extend(copies.flat_map(|c| {
            let more = c.copies().to_vec();
            std::iter::once(c).chain(more)
        }));
        if rest.is_empty() {
            return Some(first);
        }
        let mut ports = first.ports.clone();
        let mut kept: Vec<EndpointInfo> = Vec::new();
        for copy in rest {
            if copy.address != first.address {
                continue;
            }
            ports = merged_ports(&ports, copy.ports());
            let node = copy.node_name();
            if !node.is_empty()
                && node != first.node_name()
                && !kept.iter().any(|k| k.node_name() == node)
            {
                kept.push(copy.with_copies(Vec::new()));
            }
        }
        Some(first.with_ports(ports).with_copies(kept))
    }

    /// The same endpoint with `copies` as its [`copies`](Self::copies).
    fn with_copies(&self, copies: Vec<EndpointInfo>) -> Self {
        if copies.is_empty() && self.copies().is_empty() {
            return self.clone();
        }
        let extra = Extra {
            copies: copies.into_boxed_slice(),
            ..self.extra.as_deref().cloned().unwrap_or_default()
        };
        let empty = extra == Extra::default();
        Self {
            extra: (!empty).then(|| Arc::new(extra)),
            ..self.clone()
        }
    }

    /// The port number serving Service port `name` over `protocol`.
    pub fn port(&self, name: &str, protocol: Protocol) -> Option<u16> {
        self.ports.find(name, protocol)
    }

    /// A builder that starts from this endpoint, to make a changed copy.
    pub fn to_builder(&self) -> EndpointBuilder<'_> {
        EndpointBuilder {
            address: self.address,
            other_address: self.other_address(),
            flags: self.flags,
            node: self.node_name(),
            zone: self.zone(),
            hint_zones: self.hint_zones().iter().map(|z| &**z).collect(),
            hint_nodes: self.hint_nodes().iter().map(|n| &**n).collect(),
            ports: self.ports.clone(),
            copies: self.copies().to_vec(),
        }
    }

    /// The same endpoint with other conditions (its shared parts stay
    /// shared).
    pub fn with_conditions(&self, ready: bool, serving: bool, terminating: bool) -> Self {
        Self {
            flags: condition_bits(ready, serving, terminating),
            ..self.clone()
        }
    }

    /// An endpoint at `address` on this one's node and zone (the same
    /// shared copy), with `ports` and these conditions, and no hints and
    /// no address of the other family: how a decoder makes many
    /// endpoints of one node without looking the node up again.
    ///
    /// ```
    /// use kpng_model::EndpointInfo;
    /// use kpng_model::endpoint::{Interner, PortList};
    ///
    /// let mut interner = Interner::new();
    /// let first = EndpointInfo::builder("10.0.0.1".parse()?)
    ///     .node("node-a", "zone-1")
    ///     .intern(&mut interner);
    /// let second = first.on_same_node("10.0.0.2".parse()?, PortList::default(), true, false, false);
    /// assert!(second.shares_node_with(&first));
    /// assert_eq!(
    ///     second,
    ///     EndpointInfo::builder("10.0.0.2".parse()?)
    ///         .node("node-a", "zone-1")
    ///         .conditions(true, false, false)
    ///         .build()
    /// );
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn on_same_node(
        &self,
        address: IpAddr,
        ports: PortList,
        ready: bool,
        serving: bool,
        terminating: bool,
    ) -> Self {
        Self {
            address,
            flags: condition_bits(ready, serving, terminating),
            place: self.place.clone(),
            ports,
            extra: None,
        }
    }

    /// The same endpoint with other ports.
    pub fn with_ports(&self, ports: PortList) -> Self {
        Self {
            ports,
            ..self.clone()
        }
    }

    /// Whether two endpoints hold one shared copy of their node and zone.
    pub fn shares_node_with(&self, other: &Self) -> bool {
        match (&self.place, &other.place) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }
}

impl fmt::Debug for EndpointInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("EndpointInfo");
        d.field("address", &self.address);
        if let Some(other) = self.other_address() {
            d.field("other_address", &other);
        }
        d.field("node_name", &self.node_name())
            .field("zone", &self.zone())
            .field("ready", &self.ready())
            .field("serving", &self.serving())
            .field("terminating", &self.terminating());
        if !self.hint_zones().is_empty() {
            d.field("hint_zones", &self.hint_zones());
        }
        if !self.hint_nodes().is_empty() {
            d.field("hint_nodes", &self.hint_nodes());
        }
        d.field("ports", &self.ports);
        if !self.copies().is_empty() {
            d.field("copies", &self.copies());
        }
        d.finish()
    }
}

/// Serialized as its protobuf form's proto3 JSON ([`v1::Endpoint`]).
impl serde::Serialize for EndpointInfo {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_proto().serialize(serializer)
    }
}

/// Builds an [`EndpointInfo`]: see [`EndpointInfo::builder`].
#[derive(Clone, Debug)]
#[must_use]
pub struct EndpointBuilder<'a> {
    address: IpAddr,
    other_address: Option<IpAddr>,
    flags: u8,
    node: &'a str,
    zone: &'a str,
    hint_zones: Vec<&'a str>,
    hint_nodes: Vec<&'a str>,
    ports: PortList,
    copies: Vec<EndpointInfo>,
}

impl<'a> EndpointBuilder<'a> {
    /// The resolved conditions (see [`v1::Endpoint::resolve_conditions`]).
    pub fn conditions(mut self, ready: bool, serving: bool, terminating: bool) -> Self {
        self.flags = condition_bits(ready, serving, terminating);
        self
    }

    /// The node the endpoint runs on and its zone (empty when unknown).
    pub fn node(mut self, node: &'a str, zone: &'a str) -> Self {
        self.node = node;
        self.zone = zone;
        self
    }

    /// `hints.forZones`.
    pub fn hint_zones(mut self, zones: impl IntoIterator<Item = &'a str>) -> Self {
        self.hint_zones = zones.into_iter().collect();
        self
    }

    /// `hints.forNodes`.
    pub fn hint_nodes(mut self, nodes: impl IntoIterator<Item = &'a str>) -> Self {
        self.hint_nodes = nodes.into_iter().collect();
        self
    }

    /// The address of the other family, for a dual-stack endpoint. An
    /// address of the primary's own family is ignored. Of a dual-stack
    /// endpoint, the IPv4 address is the primary one (as in
    /// [`EndpointInfo::from_proto`]): given an IPv4 address here, an IPv6
    /// primary becomes the other address.
    pub fn other_address(mut self, address: IpAddr) -> Self {
        match (IpFamily::of(&self.address), IpFamily::of(&address)) {
            (IpFamily::V6, IpFamily::V4) => {
                self.other_address = Some(self.address);
                self.address = address;
            }
            (IpFamily::V4, IpFamily::V6) => self.other_address = Some(address),
            _ => {}
        }
        self
    }

    /// The ports.
    pub fn ports(mut self, ports: PortList) -> Self {
        self.ports = ports;
        self
    }

    /// The other copies of the address (see [`EndpointInfo::copies`]),
    /// as [`EndpointInfo::fold`] keeps them: the first on each node other
    /// than this one's, with no copies of their own. Use `fold` to make
    /// them from every copy that slices list.
    pub fn copies(mut self, copies: Vec<EndpointInfo>) -> Self {
        self.copies = copies;
        self
    }

    fn place(&self) -> Option<Place> {
        (!self.node.is_empty() || !self.zone.is_empty()).then(|| Place {
            node: self.node.into(),
            zone: self.zone.into(),
        })
    }

    fn sorted(list: &mut Vec<&str>) {
        list.sort_unstable();
        list.dedup();
    }

    fn extra(&mut self) -> Option<Extra> {
        Self::sorted(&mut self.hint_zones);
        Self::sorted(&mut self.hint_nodes);
        let boxed = |list: &[&str]| list.iter().map(|s| Box::from(*s)).collect();
        (!self.hint_zones.is_empty()
            || !self.hint_nodes.is_empty()
            || self.other_address.is_some()
            || !self.copies.is_empty())
        .then(|| Extra {
            hint_zones: boxed(&self.hint_zones),
            hint_nodes: boxed(&self.hint_nodes),
            other_address: self.other_address,
            copies: std::mem::take(&mut self.copies).into_boxed_slice(),
        })
    }

    /// The endpoint, with its own copies of its node, zone and hints.
    pub fn build(mut self) -> EndpointInfo {
        EndpointInfo {
            address: self.address,
            flags: self.flags,
            place: self.place().map(Arc::new),
            extra: self.extra().map(Arc::new),
            ports: self.ports,
        }
    }

    /// The endpoint, sharing with `interner` one copy of each distinct
    /// node and zone, port list and set of hints.
    pub fn intern(mut self, interner: &mut Interner) -> EndpointInfo {
        let place = (!self.node.is_empty() || !self.zone.is_empty()).then(|| {
            let (node, zone) = (self.node, self.zone);
            interner.places.get(
                stable_hash(&(node, zone)),
                |p| &*p.node == node && &*p.zone == zone,
                || {
                    Arc::new(Place {
                        node: node.into(),
                        zone: zone.into(),
                    })
                },
            )
        });
        let extra = self.extra().map(|extra| {
            interner.extras.get(
                stable_hash(&extra),
                |e| *e == extra,
                || Arc::new(extra.clone()),
            )
        });
        EndpointInfo {
            address: self.address,
            flags: self.flags,
            place,
            extra,
            ports: interner.ports(self.ports),
        }
    }
}

/// `first`, then the ports of `more` whose name and protocol it lacks;
/// `first` itself (shared) when `more` adds none.
fn merged_ports(first: &PortList, more: &PortList) -> PortList {
    let adds = more
        .as_slice()
        .iter()
        .any(|p| first.find(&p.name, p.protocol).is_none());
    if adds {
        PortList::new(first.as_slice().iter().chain(more.as_slice()).cloned())
    } else {
        first.clone()
    }
}

/// SipHash-1-3 under a fixed key.
fn stable_hash<T: Hash + ?Sized>(value: &T) -> u64 {
    let mut hasher = siphasher::sip::SipHasher13::new_with_keys(0x6b70_6e67, 0x696e_7465_726e);
    value.hash(&mut hasher);
    hasher.finish()
}

/// One kind of shared value, by content hash: the first value of a hash
/// in one map (no allocation of its own), values whose hash collides
/// with it in another.
#[derive(Debug)]
struct Pool<T: ?Sized> {
    first: HashMap<u64, Arc<T>>,
    more: HashMap<u64, Vec<Arc<T>>>,
    len: usize,
    /// The size at which unused values are next dropped.
    purge_at: usize,
}

impl<T: ?Sized> Default for Pool<T> {
    fn default() -> Self {
        Self {
            first: HashMap::new(),
            more: HashMap::new(),
            len: 0,
            purge_at: 1024,
        }
    }
}

impl<T: ?Sized> Pool<T> {
    fn get(&mut self, hash: u64, eq: impl Fn(&T) -> bool, make: impl FnOnce() -> Arc<T>) -> Arc<T> {
        if let Some(found) = self.first.get(&hash).filter(|v| eq(v)) {
            return found.clone();
        }
        if let Some(found) = self
            .more
            .get(&hash)
            .and_then(|list| list.iter().find(|v| eq(v)))
        {
            return found.clone();
        }
        let value = make();
        match self.first.entry(hash) {
            std::collections::hash_map::Entry::Occupied(_) => {
                self.more.entry(hash).or_default().push(value.clone());
            }
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(value.clone());
            }
        }
        self.len += 1;
        if self.len >= self.purge_at {
            self.purge();
        }
        value
    }

    /// Drops the values only the pool holds. Amortized O(1) per insert:
    /// the next purge waits until the pool has doubled.
    fn purge(&mut self) {
        self.first.retain(|_, v| Arc::strong_count(v) > 1);
        self.more.retain(|_, list| {
            list.retain(|v| Arc::strong_count(v) > 1);
            !list.is_empty()
        });
        self.len = self.first.len() + self.more.values().map(Vec::len).sum::<usize>();
        self.purge_at = (self.len * 2).max(1024);
    }
}

/// Makes equal parts of endpoints one shared copy: node and zone, port
/// lists (and their port names), topology hints.
///
/// An interner only holds what some endpoint still uses, give or take a
/// factor of two: values no endpoint holds any more are dropped as it
/// grows. Keep one per source of endpoints (an ingest, a decoder).
#[derive(Debug, Default)]
pub struct Interner {
    places: Pool<Place>,
    extras: Pool<Extra>,
    port_lists: Pool<Vec<PortInfo>>,
    names: Pool<str>,
}

impl Interner {
    /// An empty interner.
    pub fn new() -> Self {
        Self::default()
    }

    /// The shared copy of a port list equal to `ports`.
    pub fn ports(&mut self, ports: PortList) -> PortList {
        let Some(list) = ports.0 else {
            return PortList(None);
        };
        let names = &mut self.names;
        let shared = self.port_lists.get(
            stable_hash(&*list),
            |l| *l == *list,
            || {
                Arc::new(
                    list.iter()
                        .map(|p| PortInfo {
                            name: names.get(
                                stable_hash(&*p.name),
                                |n| *n == *p.name,
                                || p.name.clone(),
                            ),
                            port: p.port,
                            protocol: p.protocol,
                        })
                        .collect(),
                )
            },
        );
        PortList(Some(shared))
    }

    /// A shared port name.
    pub fn port_name(&mut self, name: &str) -> Arc<str> {
        self.names
            .get(stable_hash(name), |n| n == name, || Arc::from(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v1::EndpointPort;

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("ip")
    }

    #[test]
    fn a_pool_keeps_values_whose_hashes_collide_apart() {
        let mut pool: Pool<str> = Pool::default();
        let get = |pool: &mut Pool<str>, text: &'static str| {
            // Every value under one hash.
            pool.get(7, |v| v == text, || Arc::from(text))
        };
        let a = get(&mut pool, "a");
        let b = get(&mut pool, "b");
        let c = get(&mut pool, "c");
        assert_eq!((&*a, &*b, &*c), ("a", "b", "c"));
        for (held, text) in [(&a, "a"), (&b, "b"), (&c, "c")] {
            assert!(Arc::ptr_eq(held, &get(&mut pool, text)), "{text}");
        }
        assert_eq!(pool.len, 3);
        // Unused ones go at a purge, from either map; the others stay.
        drop((a, c));
        pool.purge();
        assert_eq!(pool.len, 1);
        assert!(Arc::ptr_eq(&b, &get(&mut pool, "b")));
        let again = get(&mut pool, "a");
        assert_eq!(pool.len, 2);
        assert!(Arc::ptr_eq(&again, &get(&mut pool, "a")));
    }

    #[test]
    fn an_endpoint_is_48_bytes() {
        assert_eq!(std::mem::size_of::<EndpointInfo>(), 48);
    }

    #[test]
    fn interned_endpoints_share_their_parts_and_equal_fresh_ones() {
        let mut interner = Interner::new();
        let ports = || PortList::new([PortInfo::new("http", Protocol::Tcp, 8080)]);
        let make = |addr: &str| {
            EndpointInfo::builder(ip(addr))
                .node("node-a", "zone-1")
                .hint_zones(["zone-1"])
                .ports(ports())
        };
        let a = make("10.0.0.1").intern(&mut interner);
        let b = make("10.0.0.2").intern(&mut interner);
        assert!(a.shares_node_with(&b));
        assert!(a.ports().is_shared_with(b.ports()));
        assert_eq!(a.hint_zones(), b.hint_zones());
        // Built apart, equal in content: equal, with equal hashes.
        let fresh = make("10.0.0.1").build();
        assert!(!fresh.shares_node_with(&a));
        assert_eq!(fresh, a);
        let hash = |e: &EndpointInfo| stable_hash(e);
        assert_eq!(hash(&fresh), hash(&a));
        // Any field that differs makes them differ.
        assert_ne!(a.with_conditions(true, true, true), a);
        assert_ne!(make("10.0.0.1").node("node-b", "zone-1").build(), a);
        assert_ne!(
            a.with_ports(PortList::new([PortInfo::new("http", Protocol::Tcp, 8081)])),
            a
        );
    }

    #[test]
    fn the_interner_drops_what_no_endpoint_holds() {
        let mut interner = Interner::new();
        let kept = EndpointInfo::builder(ip("10.0.0.1"))
            .node("kept", "")
            .intern(&mut interner);
        for n in 0..5_000 {
            let name = format!("node-{n}");
            drop(
                EndpointInfo::builder(ip("10.0.0.2"))
                    .node(&name, "")
                    .intern(&mut interner),
            );
        }
        // Purged as it grew: far fewer than 5,000 places are left.
        assert!(interner.places.len < 2_100, "{}", interner.places.len);
        let again = EndpointInfo::builder(ip("10.0.0.3"))
            .node("kept", "")
            .intern(&mut interner);
        assert!(again.shares_node_with(&kept));
    }

    #[test]
    fn dual_stack_endpoints_keep_ipv4_as_the_primary_address() {
        let e = EndpointInfo::builder(ip("fd00::1"))
            .other_address(ip("10.0.0.1"))
            .build();
        assert_eq!(e.address(), ip("10.0.0.1"));
        assert_eq!(e.other_address(), Some(ip("fd00::1")));
        assert_eq!(e.address_in(IpFamily::V6), Some(ip("fd00::1")));
        // An address of the same family is not a second address.
        let single = EndpointInfo::builder(ip("10.0.0.1"))
            .other_address(ip("10.0.0.2"))
            .build();
        assert_eq!(single.other_address(), None);
        assert_eq!(EndpointInfo::from_proto(&e.to_proto()).expect("valid"), e);
    }

    #[test]
    fn bad_protobuf_endpoints_are_named() {
        let no_address = v1::Endpoint::default();
        let error = EndpointInfo::from_proto(&no_address).expect_err("no address");
        assert!(error.to_string().contains("endpoint.addresses"), "{error}");
        let big_port = v1::Endpoint {
            addresses: Some(IpSet::single(ip("10.0.0.1"))),
            ports: vec![EndpointPort {
                name: "http".into(),
                protocol: Protocol::Tcp as i32,
                port: 70_000,
            }],
            ..Default::default()
        };
        let error = EndpointInfo::from_proto(&big_port).expect_err("port");
        assert_eq!(error.to_string(), "invalid endpoint.ports[0]: port 70000");
    }

    #[test]
    fn copies_of_an_address_fold_into_one_endpoint_that_each_node_resolves() {
        let http = |port| PortList::new([PortInfo::new("http", Protocol::Tcp, port)]);
        let metrics = PortList::new([PortInfo::new("metrics", Protocol::Tcp, 9090)]);
        let copy = |node: &str, ports: &PortList, ready: bool| {
            EndpointInfo::builder(ip("10.1.0.5"))
                .node(node, "")
                .conditions(ready, true, !ready)
                .ports(ports.clone())
                .build()
        };
        // In slice order: no node, node-a (terminating), node-b twice,
        // node-a again, another address.
        let folded = EndpointInfo::fold([
            copy("", &http(8080), true),
            copy("node-a", &http(8081), false),
            copy("node-b", &metrics, true),
            copy("node-b", &http(8082), false),
            copy("node-a", &http(8083), true),
            EndpointInfo::new(ip("10.1.0.6")),
        ])
        .expect("copies");
        // The first copy, with every copy's ports, the earlier ones first.
        assert_eq!(folded.node_name(), "");
        assert_eq!(folded.port("http", Protocol::Tcp), Some(8080));
        assert_eq!(folded.port("metrics", Protocol::Tcp), Some(9090));
        // The first copy on each other node.
        let nodes: Vec<&str> = folded.copies().iter().map(|c| c.node_name()).collect();
        assert_eq!(nodes, ["node-a", "node-b"]);
        assert!(folded.copies().iter().all(|c| c.copies().is_empty()));

        // node-a: its own copy, its own port first, the others merged in.
        let a = folded.for_node("node-a");
        assert_eq!((a.node_name(), a.terminating()), ("node-a", true));
        assert_eq!(a.port("http", Protocol::Tcp), Some(8081));
        assert_eq!(a.port("metrics", Protocol::Tcp), Some(9090));
        assert!(a.copies().is_empty());
        let b = folded.for_node("node-b");
        assert_eq!((b.node_name(), b.ready()), ("node-b", true));
        assert_eq!(b.port("http", Protocol::Tcp), Some(8080));
        // Any other node, or none: the first copy, without copies.
        for node in ["node-c", ""] {
            let other = folded.for_node(node);
            assert_eq!(other.node_name(), "");
            assert!(other.copies().is_empty());
            assert_eq!(other.ports(), folded.ports());
        }

        // Folding again, or one copy alone, changes nothing.
        assert_eq!(EndpointInfo::fold([folded.clone()]), Some(folded.clone()));
        let single = copy("node-a", &http(8080), true);
        assert_eq!(EndpointInfo::fold([single.clone()]), Some(single.clone()));
        assert!(matches!(
            single.for_node("node-a"),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(EndpointInfo::fold([]), None);

        // A copy on the first copy's own node, or on no node, is never
        // used: only its ports are.
        let same = EndpointInfo::fold([
            copy("node-a", &http(8080), true),
            copy("node-a", &metrics, false),
        ])
        .expect("copies");
        assert!(same.copies().is_empty());
        assert_eq!(same.port("metrics", Protocol::Tcp), Some(9090));

        // The protobuf form keeps the copies, and the copies change the
        // endpoint's identity.
        let proto = folded.to_proto();
        assert_eq!(proto.copies.len(), 2);
        assert_eq!(EndpointInfo::from_proto(&proto).expect("valid"), folded);
        assert_ne!(folded.for_node("node-c").into_owned(), folded);
        let mut foreign = proto.clone();
        foreign.copies[0].addresses = Some(IpSet::single(ip("10.1.0.7")));
        let error = EndpointInfo::from_proto(&foreign).expect_err("another address");
        assert!(error.to_string().contains("endpoint.copies[0]"), "{error}");
    }

    #[test]
    fn serialized_as_the_protobuf_json() {
        let e = EndpointInfo::builder(ip("10.0.0.1"))
            .node("node-a", "")
            .ports(PortList::new([PortInfo::new("dns", Protocol::Udp, 53)]))
            .build();
        let json = serde_json::to_value(&e).expect("json");
        assert_eq!(json["nodeName"], "node-a");
        assert_eq!(json["addresses"]["v4"][0], "10.0.0.1");
        assert_eq!(json["ports"][0]["protocol"], "PROTOCOL_UDP");
    }
}
