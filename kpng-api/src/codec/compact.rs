//! Batches of [`ViewOp`]s on the wire in compact form
//! (`kpng.model.v1.ViewChanges` with round tables): endpoints as
//! `SetEndpoints` (addresses as bytes, flags as bits, node names, zones,
//! hints and port lists as indices into tables sent once per round).

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
    fn endpoint(&mut self, batch: &mut v1::ViewChanges, e: &EndpointView) -> v1::CompactEndpoint {
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
                let compact = self.endpoint(tables, endpoint);
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kpng_model::v1::{Endpoint, EndpointPort, IpSet, Node, Service};
    use kpng_model::view::{EndpointView, ViewOp};
    use kpng_model::{EndpointInfo, ServiceName};

    use super::{Decoder, Encoder};

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
        let mut stale = Encoder::new().batch(&[set(&web, "10.0.0.2", &plain, false)]);
        stale.strings.clear();
        stale.port_lists.clear();
        let error = decoder
            .batch::<kpng_model::Error>(stale, |_| Ok(()))
            .expect_err("no table");
        assert!(error.to_string().contains("ViewChanges."), "{error}");
    }
}
