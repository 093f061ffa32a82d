//! Batches of [`ViewOp`]s on the wire in compact form
//! (`kpng.model.v1.ViewChanges` with round tables): endpoints as
//! `SetEndpoints` (addresses as bytes, flags as bits, node names, zones,
//! hints and port lists as indices into tables sent once per round).
//!
//! A Service's endpoints go either as one `CompactEndpoint` message each,
//! or, to a watcher that asked for them (`WatchRequest.endpoint_columns`),
//! in columns (`EndpointColumns`: the addresses in one `bytes`, flags,
//! nodes, zones and ports as packed numbers), which decode with a few
//! allocations per Service instead of some per endpoint. The
//! [`Decoder`] reads both.

use std::collections::HashMap;
use std::net::IpAddr;

use super::wire;
use kpng_model::endpoint::{EndpointInfo, Interner, PortInfo, PortList};
use kpng_model::v1::{self, Protocol, view_change::Change};
use kpng_model::view::{EndpointView, ViewOp};
use kpng_model::{Error, ServiceName};

const READY: u32 = 1;
const SERVING: u32 = 2;
const TERMINATING: u32 = 4;
const IS_LOCAL: u32 = 8;
const CLUSTER: u32 = 16;
const LOCAL: u32 = 32;
/// In columns: the address is IPv6.
const V6: u32 = 64;
/// In columns: an address in the other family follows in `other_ips`.
const OTHER: u32 = 128;

fn ip_bytes(ip: &IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    }
}

fn put_ip(out: &mut Vec<u8>, ip: &IpAddr) {
    match ip {
        IpAddr::V4(v4) => out.extend_from_slice(&v4.octets()),
        IpAddr::V6(v6) => out.extend_from_slice(&v6.octets()),
    }
}

/// A view endpoint's other address: the endpoint's one in the family its
/// view's address is not in.
fn other_address(e: &EndpointView) -> Option<IpAddr> {
    let ep = e.endpoint();
    if e.ip() == ep.address() {
        ep.other_address()
    } else {
        Some(ep.address())
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

/// The address at the start of `bytes` (16 bytes for IPv6, else 4), and
/// the rest. The columns' sizes were checked: never short.
fn take_ip(bytes: &[u8], v6: bool) -> (IpAddr, &[u8]) {
    if v6 && let Some((head, rest)) = bytes.split_first_chunk::<16>() {
        return (IpAddr::from(*head), rest);
    }
    match bytes.split_first_chunk::<4>() {
        Some((head, rest)) => (IpAddr::from(*head), rest),
        None => (IpAddr::from([0u8; 4]), bytes),
    }
}

/// One endpoint's flags.
fn endpoint_flags(e: &EndpointView) -> u32 {
    let ep = e.endpoint();
    let flag = |on: bool, bit: u32| if on { bit } else { 0 };
    flag(ep.ready(), READY)
        | flag(ep.serving(), SERVING)
        | flag(ep.terminating(), TERMINATING)
        | flag(e.is_local(), IS_LOCAL)
        | flag(e.cluster(), CLUSTER)
        | flag(e.local(), LOCAL)
}

/// A run of one Service's endpoints being encoded.
enum Run {
    Compact(Vec<v1::CompactEndpoint>),
    Columns(v1::EndpointColumns),
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
    /// Endpoints go in columns.
    columns: bool,
}

impl Encoder {
    /// An encoder at the start of a round.
    pub fn new() -> Self {
        Self::default()
    }

    /// An encoder that sends endpoints in columns (`EndpointColumns`),
    /// for a watcher that asked for them, or as one `CompactEndpoint`
    /// each (the default).
    pub fn with_columns(mut self, columns: bool) -> Self {
        self.columns = columns;
        self
    }

    /// Endpoints go in columns from now on, or not.
    pub(crate) fn set_columns(&mut self, columns: bool) {
        self.columns = columns;
    }

    /// The round ended (a sync was sent): the tables start over.
    pub fn end_round(&mut self) {
        // Dropped, not cleared: a full view's tables hold every node
        // name, and an encoder lives as long as its stream.
        *self = Self::default().with_columns(self.columns);
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
    fn endpoint(&mut self, batch: &mut v1::ViewChanges, e: &EndpointView) -> v1::CompactEndpoint {
        let ep = e.endpoint();
        let (ip, other) = (e.ip(), other_address(e));
        let flags = endpoint_flags(e);
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

    /// Appends an endpoint to columns: its view's address first, the
    /// endpoint's other one in `other_ips`.
    fn push_columns(
        &mut self,
        tables: &mut v1::ViewChanges,
        columns: &mut v1::EndpointColumns,
        e: &EndpointView,
    ) {
        let ep = e.endpoint();
        let (ip, other) = (e.ip(), other_address(e));
        let mut flags = endpoint_flags(e);
        if ip.is_ipv6() {
            flags |= V6;
        }
        put_ip(&mut columns.ips, &ip);
        if let Some(other) = other {
            flags |= OTHER;
            put_ip(&mut columns.other_ips, &other);
        }
        // Every bit fits in a byte.
        columns.flags.push(u8::try_from(flags).unwrap_or(u8::MAX));
        let node = self.string(tables, ep.node_name());
        let zone = self.zone(tables, ep.zone());
        let ports = self.ports(tables, ep.ports());
        columns.places.extend([node, zone, ports]);
        let count = |hints: &[Box<str>]| u32::try_from(hints.len()).unwrap_or(u32::MAX);
        columns
            .hint_counts
            .extend([count(ep.hint_zones()), count(ep.hint_nodes())]);
        for hint in ep.hint_zones().iter().chain(ep.hint_nodes()) {
            let i = self.string(tables, hint);
            columns.hints.push(i);
        }
    }

    /// One batch: `ops` in order, runs of endpoints of one Service as
    /// one `SetEndpoints`, with the table entries they add.
    pub fn batch<'a>(&mut self, ops: impl IntoIterator<Item = &'a ViewOp>) -> v1::ViewChanges {
        let mut tables = v1::ViewChanges::default();
        let mut batch = self.batch_with_tables(ops, &mut tables);
        batch.strings = tables.strings;
        batch.port_lists = tables.port_lists;
        batch
    }

    /// [`batch`](Self::batch), the table entries the ops add pushed onto
    /// `tables` (its `strings` and `port_lists`) instead of the batch:
    /// an encoder whose round never ends shares one table among batches
    /// sent to many watchers.
    pub(crate) fn batch_with_tables<'a>(
        &mut self,
        ops: impl IntoIterator<Item = &'a ViewOp>,
        tables: &mut v1::ViewChanges,
    ) -> v1::ViewChanges {
        let mut batch = v1::ViewChanges::default();
        let mut run: Option<(ServiceName, Run)> = None;
        let flush = |run: &mut Option<(ServiceName, Run)>, batch: &mut v1::ViewChanges| {
            if let Some((name, endpoints)) = run.take() {
                let mut set = v1::SetEndpoints {
                    service: Some(wire::service_ref(&name)),
                    ..Default::default()
                };
                match endpoints {
                    Run::Compact(endpoints) => set.endpoints = endpoints,
                    Run::Columns(mut columns) => {
                        // Columns of zeros are left out.
                        for column in [&mut columns.places, &mut columns.hint_counts] {
                            if column.iter().all(|v| *v == 0) {
                                column.clear();
                            }
                        }
                        set.columns = Some(columns);
                    }
                }
                batch.changes.push(v1::ViewChange {
                    change: Some(Change::SetEndpoints(set)),
                });
            }
        };
        for op in ops {
            if let ViewOp::SetEndpoint(name, endpoint) = op {
                if !matches!(&run, Some((current, _)) if current == name) {
                    flush(&mut run, &mut batch);
                    let empty = if self.columns {
                        Run::Columns(v1::EndpointColumns::default())
                    } else {
                        Run::Compact(Vec::new())
                    };
                    run = Some((name.clone(), empty));
                }
                if let Some((_, endpoints)) = &mut run {
                    match endpoints {
                        Run::Compact(list) => {
                            let compact = self.endpoint(tables, endpoint);
                            list.push(compact);
                        }
                        Run::Columns(columns) => self.push_columns(tables, columns, endpoint),
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

/// What [`Decoder::batch_grouped`] hands on: an op, or the endpoints of
/// one `SetEndpoints` together (the same as one
/// [`ViewOp::SetEndpoint`] each, in order).
#[derive(Clone, Debug, PartialEq)]
pub enum Decoded {
    /// An op other than endpoints set.
    Op(ViewOp),
    /// Endpoints of Service set, in order.
    Endpoints(ServiceName, Vec<EndpointView>),
}

/// An endpoint as the wire has it, its strings and port list looked up
/// by index.
struct Parts<'a> {
    ip: IpAddr,
    other: Option<IpAddr>,
    flags: u32,
    node: u32,
    zone: u32,
    ports: u32,
    hint_zones: &'a [u32],
    hint_nodes: &'a [u32],
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
    /// Per node index of the round, its zone index and an endpoint on
    /// it: the next endpoints of that node take its shared node and zone
    /// with no look-up.
    nodes: Vec<Option<(u32, EndpointInfo)>>,
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
        self.nodes = Vec::new();
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
    /// out of the tables, [`Error::InvalidValue`] naming a column of
    /// the wrong size; or `op`'s error.
    pub fn batch<E: From<Error>>(
        &mut self,
        batch: v1::ViewChanges,
        mut op: impl FnMut(ViewOp) -> Result<(), E>,
    ) -> Result<(), E> {
        self.batch_grouped(batch, |decoded| match decoded {
            Decoded::Op(one) => op(one),
            Decoded::Endpoints(name, endpoints) => {
                for endpoint in endpoints {
                    op(ViewOp::SetEndpoint(name.clone(), endpoint))?;
                }
                Ok(())
            }
        })
    }

    /// [`batch`](Self::batch), the endpoints of each `SetEndpoints`
    /// handed on together (for
    /// [`NodeView::set_endpoints`](kpng_model::view::NodeView::set_endpoints)).
    ///
    /// # Errors
    /// As [`batch`](Self::batch). A `SetEndpoints` with a bad endpoint
    /// hands on none of its endpoints.
    pub fn batch_grouped<E: From<Error>>(
        &mut self,
        batch: v1::ViewChanges,
        mut each: impl FnMut(Decoded) -> Result<(), E>,
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
                    let mut endpoints = Vec::with_capacity(
                        set.endpoints.len() + set.columns.as_ref().map_or(0, |c| c.flags.len()),
                    );
                    for c in set.endpoints {
                        let other = (!c.other_address.is_empty())
                            .then(|| ip_from("other_address", &c.other_address))
                            .transpose()?;
                        endpoints.push(self.endpoint(&Parts {
                            ip: ip_from("ip", &c.ip)?,
                            other,
                            flags: c.flags,
                            node: c.node,
                            zone: c.zone,
                            ports: c.ports,
                            hint_zones: &c.hint_zones,
                            hint_nodes: &c.hint_nodes,
                        })?);
                    }
                    if let Some(columns) = set.columns {
                        self.columns(&columns, &mut endpoints)?;
                    }
                    each(Decoded::Endpoints(name, endpoints))?;
                }
                change => each(Decoded::Op(wire::from_wire(v1::ViewChange { change })?))?,
            }
        }
        Ok(())
    }

    /// The endpoints of `c`, appended to `out`, after checking the size
    /// of every column.
    fn columns(
        &mut self,
        c: &v1::EndpointColumns,
        out: &mut Vec<EndpointView>,
    ) -> Result<(), Error> {
        let n = c.flags.len();
        let per_endpoint = |field: &str, column: &[u32], k: usize| -> Result<bool, Error> {
            match column.len() {
                0 => Ok(false),
                len if len == k * n => Ok(true),
                len => Err(mis_sized(
                    field,
                    format!("{len} numbers for {n} endpoints ({k} each)"),
                )),
            }
        };
        let places = per_endpoint("places", &c.places, 3)?;
        let hinted = per_endpoint("hint_counts", &c.hint_counts, 2)?;
        let (mut ips, mut others) = (0usize, 0usize);
        for f in &c.flags {
            let v6 = u32::from(*f) & V6 != 0;
            ips += if v6 { 16 } else { 4 };
            if u32::from(*f) & OTHER != 0 {
                others += if v6 { 4 } else { 16 };
            }
        }
        for (field, bytes, want) in [("ips", &c.ips, ips), ("other_ips", &c.other_ips, others)] {
            if bytes.len() != want {
                return Err(mis_sized(
                    field,
                    format!(
                        "{} bytes where the flags of {n} endpoints say {want}",
                        bytes.len()
                    ),
                ));
            }
        }
        let hints: u64 = c.hint_counts.iter().map(|k| u64::from(*k)).sum();
        if c.hints.len() as u64 != hints {
            return Err(mis_sized(
                "hints",
                format!("{} numbers where hint_counts say {hints}", c.hints.len()),
            ));
        }
        let (mut ip_bytes, mut other_bytes) = (c.ips.as_slice(), c.other_ips.as_slice());
        let mut hint_list = c.hints.as_slice();
        for (i, flags) in c.flags.iter().enumerate() {
            let flags = u32::from(*flags);
            let v6 = flags & V6 != 0;
            let (ip, rest) = take_ip(ip_bytes, v6);
            ip_bytes = rest;
            let other = if flags & OTHER != 0 {
                let (other, rest) = take_ip(other_bytes, !v6);
                other_bytes = rest;
                Some(other)
            } else {
                None
            };
            let [node, zone, ports] = match places {
                true => [c.places[3 * i], c.places[3 * i + 1], c.places[3 * i + 2]],
                false => [0; 3],
            };
            let [zones, nodes] = match hinted {
                true => [c.hint_counts[2 * i], c.hint_counts[2 * i + 1]],
                false => [0; 2],
            };
            // The counts were summed: never beyond the list.
            let (hint_zones, rest) = hint_list.split_at((zones as usize).min(hint_list.len()));
            let (hint_nodes, rest) = rest.split_at((nodes as usize).min(rest.len()));
            hint_list = rest;
            out.push(self.endpoint(&Parts {
                ip,
                other,
                flags,
                node,
                zone,
                ports,
                hint_zones,
                hint_nodes,
            })?);
        }
        Ok(())
    }

    fn endpoint(&mut self, c: &Parts<'_>) -> Result<EndpointView, Error> {
        let Self {
            strings,
            port_lists,
            interner,
            nodes,
        } = self;
        let string = |i: u32| Self::string(strings, i);
        let ports = match c.ports {
            0 => PortList::default(),
            i => port_lists
                .get(i as usize - 1)
                .cloned()
                .ok_or_else(|| bad_index("port_lists", i))?,
        };
        let (ready, serving, terminating) = (
            c.flags & READY != 0,
            c.flags & SERVING != 0,
            c.flags & TERMINATING != 0,
        );
        let plain = c.other.is_none() && c.hint_zones.is_empty() && c.hint_nodes.is_empty();
        let known = match nodes.get(c.node as usize) {
            Some(Some((zone, on_node))) if plain && *zone == c.zone => Some(on_node),
            _ => None,
        };
        let endpoint = match known {
            // The node's shared copy, no look-up.
            Some(on_node) => on_node.on_same_node(c.ip, ports, ready, serving, terminating),
            // The first of its node in the round: the node looked up,
            // kept for the next ones.
            None if plain => {
                let on_node = EndpointInfo::builder(c.ip)
                    .node(string(c.node)?, string(c.zone)?)
                    .intern(interner);
                let endpoint = on_node.on_same_node(c.ip, ports, ready, serving, terminating);
                // The node index was found in the table: it is not
                // beyond it.
                let slot = c.node as usize;
                if nodes.len() <= slot {
                    nodes.resize(slot + 1, None);
                }
                nodes[slot] = Some((c.zone, on_node));
                endpoint
            }
            None => {
                let names = |list: &[u32]| -> Result<Vec<&str>, Error> {
                    list.iter().map(|i| string(*i)).collect()
                };
                let mut builder = EndpointInfo::builder(c.ip)
                    .conditions(ready, serving, terminating)
                    .node(string(c.node)?, string(c.zone)?)
                    .hint_zones(names(c.hint_zones)?)
                    .hint_nodes(names(c.hint_nodes)?)
                    .ports(ports);
                if let Some(other) = c.other {
                    builder = builder.other_address(other);
                }
                builder.intern(interner)
            }
        };
        // Built at `ip`: always one of its addresses.
        let view = EndpointView::at(endpoint, c.ip).ok_or_else(|| bad_index("ip", 0))?;
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

fn mis_sized(column: &str, reason: String) -> Error {
    Error::InvalidValue {
        field: format!("EndpointColumns.{column}"),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kpng_model::v1::{self, Endpoint, EndpointPort, IpSet, Node, Service, view_change::Change};
    use kpng_model::view::{EndpointView, NodeView, ViewOp};
    use kpng_model::{EndpointInfo, ServiceName};
    use proptest::prelude::*;

    use super::{Decoded, Decoder, Encoder};

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
    fn compact_batches_decode_to_the_same_ops() {
        same_ops(false);
    }

    #[test]
    fn columns_decode_to_the_same_ops() {
        same_ops(true);
    }

    /// Batches of both forms of endpoints decode to the ops encoded.
    fn same_ops(columns: bool) {
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
            ViewOp::SetService(Arc::new(
                kpng_model::ServiceInfo::new(Service {
                    namespace: "default".into(),
                    name: "web".into(),
                    ..Default::default()
                })
                .expect("valid"),
            )),
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
        let mut encoder = Encoder::new().with_columns(columns);
        let batches = [encoder.batch(&first), encoder.batch(&second)];
        for batch in &batches {
            for change in &batch.changes {
                if let Some(Change::SetEndpoints(set)) = &change.change {
                    assert_eq!(set.columns.is_some(), columns, "{set:?}");
                    assert_eq!(set.endpoints.is_empty(), columns, "{set:?}");
                }
            }
        }
        // The second batch reuses the first one's table entries.
        assert!(batches[1].strings.is_empty(), "{:?}", batches[1].strings);
        assert!(batches[1].port_lists.is_empty());
        let mut decoder = Decoder::new();
        let mut ops = Vec::new();
        for batch in batches {
            decoder
                .batch::<kpng_model::Error>(batch, |op| {
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
        let mut stale = Encoder::new()
            .with_columns(columns)
            .batch(&[set(&web, "10.0.0.2", &plain, false)]);
        stale.strings.clear();
        stale.port_lists.clear();
        let error = decoder
            .batch::<kpng_model::Error>(stale, |_| Ok(()))
            .expect_err("no table");
        assert!(error.to_string().contains("ViewChanges."), "{error}");
    }

    fn decode(batch: v1::ViewChanges) -> Result<Vec<ViewOp>, kpng_model::Error> {
        let mut ops = Vec::new();
        Decoder::new().batch::<kpng_model::Error>(batch, |op| {
            ops.push(op);
            Ok(())
        })?;
        Ok(ops)
    }

    /// The columns of the one `SetEndpoints` of `batch`.
    fn columns(batch: &mut v1::ViewChanges) -> &mut v1::EndpointColumns {
        batch
            .changes
            .iter_mut()
            .find_map(|c| match &mut c.change {
                Some(Change::SetEndpoints(set)) => set.columns.as_mut(),
                _ => None,
            })
            .expect("columns")
    }

    #[test]
    fn a_column_of_the_wrong_size_is_refused_by_name() {
        let web = ServiceName::new("default", "web");
        let dual = endpoint(&["10.0.0.1", "fd00::1"], "node-a", &["zone-a"]);
        let plain = endpoint(&["10.0.0.2"], "node-b", &[]);
        let ops = [
            ViewOp::SetService(Arc::new(
                kpng_model::ServiceInfo::new(Service::new("default", "web")).expect("valid"),
            )),
            set(&web, "10.0.0.1", &dual, true),
            set(&web, "fd00::1", &dual, false),
            set(&web, "10.0.0.2", &plain, false),
        ];
        let good = Encoder::new().with_columns(true).batch(&ops);
        assert_eq!(decode(good.clone()).expect("decodes"), ops);
        type Spoil = fn(&mut v1::EndpointColumns);
        let cases: [(&str, Spoil); 9] = [
            // One more endpoint with its places, IPv6: 16 more bytes
            // wanted.
            ("EndpointColumns.ips", |c| {
                c.flags.push(64);
                c.places.extend([0, 0, 0]);
                c.hint_counts.extend([0, 0]);
            }),
            ("EndpointColumns.ips", |c| {
                c.ips.pop();
            }),
            ("EndpointColumns.ips", |c| c.ips.push(1)),
            ("EndpointColumns.other_ips", |c| c.other_ips.truncate(2)),
            // One more endpoint: its places missing.
            ("EndpointColumns.places", |c| c.flags.push(64)),
            ("EndpointColumns.places", |c| {
                c.places.pop();
            }),
            ("EndpointColumns.places", |c| c.places.push(1)),
            ("EndpointColumns.hints", |c| c.hints.push(1)),
            ("EndpointColumns.hint_counts", |c| {
                c.hint_counts.pop();
            }),
        ];
        for (field, spoil) in cases {
            let mut bad = good.clone();
            spoil(columns(&mut bad));
            let error = decode(bad).expect_err(field).to_string();
            assert!(error.contains(field), "{field}: {error}");
        }
        // An index beyond the tables.
        let mut bad = good.clone();
        columns(&mut bad).places[0] = 99;
        let error = decode(bad).expect_err("index").to_string();
        assert!(error.contains("ViewChanges.strings"), "{error}");
        // Columns cut short in the bytes on the wire: prost refuses them.
        let bytes = prost::Message::encode_to_vec(&good);
        let cut = <v1::ViewChanges as prost::Message>::decode(&bytes[..bytes.len() - 3]);
        assert!(cut.is_err());
    }

    #[test]
    fn grouped_endpoints_build_the_same_view() {
        let web = ServiceName::new("default", "web");
        let a = endpoint(&["10.0.0.3"], "node-a", &[]);
        let b = endpoint(&["10.0.0.1"], "node-a", &[]);
        let ops = [
            ViewOp::SetService(Arc::new(
                kpng_model::ServiceInfo::new(Service::new("default", "web")).expect("valid"),
            )),
            set(&web, "10.0.0.3", &a, false),
            set(&web, "10.0.0.1", &b, true),
        ];
        let batch = Encoder::new().with_columns(true).batch(&ops);
        let (mut one_by_one, mut grouped) = (NodeView::default(), NodeView::default());
        for op in decode(batch.clone()).expect("decodes") {
            one_by_one.apply(&op).expect("fits");
        }
        let mut groups = 0;
        Decoder::new()
            .batch_grouped::<kpng_model::Error>(batch, |decoded| match decoded {
                Decoded::Op(op) => grouped.apply(&op),
                Decoded::Endpoints(name, endpoints) => {
                    groups += 1;
                    grouped.set_endpoints(&name, endpoints)
                }
            })
            .expect("decodes");
        assert_eq!(groups, 1);
        assert_eq!(grouped, one_by_one);
        // Endpoints of a Service the view does not hold: refused.
        let mut empty = NodeView::default();
        let one = match &ops[1] {
            ViewOp::SetEndpoint(_, e) => e.clone(),
            op => panic!("{op:?}"),
        };
        assert!(
            empty.set_endpoints(&web, vec![]).is_ok(),
            "no endpoints, no ops"
        );
        let error = empty.set_endpoints(&web, vec![one]).expect_err("unknown");
        assert!(error.to_string().contains("default/web"), "{error}");
    }

    /// An endpoint of any shape: one or two families, any node and zone,
    /// hints, conditions, ports.
    fn any_endpoint() -> impl Strategy<Value = (EndpointInfo, bool, [bool; 3])> {
        (
            0u8..=255,
            prop_oneof![Just(0u8), Just(1), Just(2)],
            0u8..4,
            0u8..3,
            proptest::collection::vec(0u8..4, 0..3),
            proptest::collection::vec(0u8..4, 0..2),
            any::<[bool; 3]>(),
            any::<[bool; 4]>(),
            0u16..3,
        )
            .prop_map(
                |(n, families, node, zone, zones, nodes, marks, conds, ports)| {
                    let v4: std::net::IpAddr = format!("10.1.0.{n}").parse().expect("v4");
                    let v6: std::net::IpAddr = format!("fd00::{n:x}").parse().expect("v6");
                    let (primary, other) = match families {
                        0 => (v4, None),
                        1 => (v6, None),
                        _ => (v4, Some(v6)),
                    };
                    let node = if node == 0 {
                        String::new()
                    } else {
                        format!("node-{node}")
                    };
                    let zone = if zone == 0 {
                        String::new()
                    } else {
                        format!("zone-{zone}")
                    };
                    let zones: Vec<String> = zones.iter().map(|z| format!("zone-{z}")).collect();
                    let nodes: Vec<String> = nodes.iter().map(|z| format!("node-{z}")).collect();
                    let ports = kpng_model::endpoint::PortList::new((0..ports).map(|p| {
                        kpng_model::endpoint::PortInfo::new(
                            &format!("p{p}"),
                            kpng_model::v1::Protocol::Tcp,
                            8000 + p,
                        )
                    }));
                    let mut builder = EndpointInfo::builder(primary)
                        .conditions(conds[0], conds[1], conds[2])
                        .node(&node, &zone)
                        .hint_zones(zones.iter().map(String::as_str))
                        .hint_nodes(nodes.iter().map(String::as_str))
                        .ports(ports);
                    if let Some(other) = other {
                        builder = builder.other_address(other);
                    }
                    (builder.build(), conds[3], marks)
                },
            )
    }

    proptest! {
        /// Any endpoints, set in batches of either form, decode to the
        /// same ops.
        #[test]
        fn both_forms_round_trip(
            batches in proptest::collection::vec(
                proptest::collection::vec((0u8..3, any_endpoint()), 0..12),
                1..4,
            ),
        ) {
            for columns in [false, true] {
                let (mut encoder, mut decoder) = (Encoder::new().with_columns(columns), Decoder::new());
                for batch in &batches {
                    let ops: Vec<ViewOp> = batch
                        .iter()
                        .map(|(service, (endpoint, other_view, marks))| {
                            let ip = match endpoint.other_address() {
                                Some(other) if *other_view => other,
                                _ => endpoint.address(),
                            };
                            ViewOp::SetEndpoint(
                                ServiceName::new("ns", format!("svc-{service}")),
                                EndpointView::at(endpoint.clone(), ip)
                                    .expect("its address")
                                    .with_is_local(marks[0])
                                    .with_cluster(marks[1])
                                    .with_local(marks[2]),
                            )
                        })
                        .collect();
                    let mut decoded = Vec::new();
                    decoder
                        .batch::<kpng_model::Error>(encoder.batch(&ops), |op| {
                            decoded.push(op);
                            Ok(())
                        })
                        .expect("decodes");
                    prop_assert_eq!(decoded, ops);
                }
            }
        }
    }
}
