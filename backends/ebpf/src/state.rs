//! What the maps must hold, and the writes that take them there.
//!
//! Each Service contributes records (one per Service address, port and
//! protocol a local socket may ask for), endpoint sets (one per port,
//! family and policy) and its live ClusterIPs. A set's slots are kept in
//! pages of 8 endpoints (`kpng_slots`), page 0 holding the count. The
//! jobs, one module each:
//!
//! - [`render`]: what the maps should hold for one Service, its
//!   [`Contribution`];
//! - [`write`](mod@write): a round's writes, the difference between a
//!   changed Service's new contribution and its last one, in the order
//!   that keeps every Service whole at every moment;
//! - [`adopt`]: a full round (the first, or one after a failure) reading
//!   back what the maps hold and adopting it.
//!
//! This module holds what they share: the names of sets and records,
//! [`State`] (the maps as written) and its counted writes.

mod adopt;
mod render;
#[cfg(test)]
mod testing;
mod write;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

use kpng_model::ServiceName;

use crate::Error;
use crate::layout::{Endpoint, Frontend, Record};
use crate::sizes::Usage;
use crate::tables::{Table, Tables};

use adopt::Found;
pub(crate) use render::{Sources, contribution, nodeport_ips};

/// An endpoint set, named by its owner: a Service port, in one family,
/// for one policy.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct SetName {
    service: ServiceName,
    port: u16,
    proto: u8,
    v6: bool,
    /// The local-policy endpoints (`internalTrafficPolicy: Local`).
    local: bool,
}

/// A record as a Service asks for it, before set numbers are known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Claim {
    set: SetName,
    affinity: u32,
    flags: u32,
}

/// Which traffic a record serves: sockets of the node's cgroup
/// (`kpng_services`) or packets from outside the node at its interfaces
/// (`kpng_external`, the tc programs').
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Side {
    Socket,
    External,
}

impl Side {
    fn table(self) -> Table {
        match self {
            Side::Socket => Table::Services,
            Side::External => Table::External,
        }
    }
}

/// A record's place: its side and frontend.
type RecordKey = (Side, Frontend);

/// A source range of an external frontend.
type Range = (Frontend, IpAddr, u8);

/// What one Service contributes to the maps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Contribution {
    records: BTreeMap<RecordKey, Claim>,
    sets: BTreeMap<SetName, Vec<Endpoint>>,
    live: BTreeSet<IpAddr>,
    ranges: BTreeSet<Range>,
}

impl Contribution {
    /// Whether `set` needs a Maglev table: a record of packets from
    /// outside leads to it with Maglev balancing.
    fn maglev(&self, set: &SetName) -> bool {
        self.records.iter().any(|((side, _), c)| {
            *side == Side::External && c.flags & crate::layout::BAL_MAGLEV != 0 && &c.set == set
        })
    }

    /// The entries it asks of each map sized from the cluster (records
    /// another Service also claims, and ClusterIPs two Services share, are
    /// counted for each: an upper bound).
    pub(crate) fn usage(&self) -> Usage {
        let mut usage = Usage::default();
        for (side, _) in self.records.keys() {
            match side {
                Side::Socket => usage.0[Usage::SERVICES] += 1,
                Side::External => usage.0[Usage::EXTERNAL] += 1,
            }
        }
        for (set, endpoints) in &self.sets {
            let n = endpoints.len() as u64;
            usage.0[Usage::SLOTS] += n.div_ceil(crate::layout::PAGE as u64);
            if self
                .records
                .values()
                .any(|c| c.affinity > 0 && &c.set == set)
            {
                usage.0[Usage::MEMBERS] += n;
            }
            if self.maglev(set) {
                usage.0[Usage::MAGLEV] += 1;
            }
        }
        usage.0[Usage::LIVE] = self.live.len() as u64;
        usage.0[Usage::RANGES] = self.ranges.len() as u64;
        usage
    }
}

#[derive(Debug)]
struct SetState {
    id: u32,
    /// The endpoints in slot order, as the maps hold them.
    slots: Vec<Endpoint>,
    /// Whether its members are in `kpng_members` (a set of a Service with
    /// ClientIP affinity).
    members: bool,
    /// Whether it has a Maglev table in `kpng_maglev`.
    maglev: bool,
}

/// The maps as written, and how to change them.
#[derive(Debug, Default)]
pub(crate) struct State {
    contributions: HashMap<ServiceName, Contribution>,
    sets: HashMap<SetName, SetState>,
    /// Who asks for each frontend; the first Service by name wins, the
    /// others wait their turn (two Services claiming one external IP and
    /// port).
    claims: HashMap<RecordKey, Vec<(ServiceName, Claim)>>,
    records: HashMap<RecordKey, Record>,
    live: HashMap<IpAddr, usize>,
    ranges: HashMap<Range, usize>,
    cidrs: BTreeSet<(IpAddr, u8)>,
    next_id: u32,
    free: Vec<u32>,
    /// Set numbers freed this round: reusable from the next one.
    quarantine: Vec<u32>,
    /// Pages past a set's count, deleted at the start of the next round:
    /// a program that read the old count just before may still read them.
    later: Vec<[u8; 8]>,
    /// During a full round: what the maps held, not yet adopted.
    found: Option<Found>,
    /// Element writes and deletes since the last `take_writes`.
    writes: usize,
    /// What the contributions ask of the maps (CIDRs apart).
    usage: Usage,
}

impl State {
    /// The writes made since the last call.
    pub(crate) fn take_writes(&mut self) -> usize {
        std::mem::take(&mut self.writes)
    }

    /// Counts `n` writes more (made by another state, replaced by this
    /// one).
    pub(crate) fn add_writes(&mut self, n: usize) {
        self.writes += n;
    }

    /// What the maps hold (at most), by map.
    pub(crate) fn usage(&self) -> Usage {
        let mut usage = self.usage;
        usage.0[Usage::CIDRS] = self.cidrs.len() as u64;
        // Pages past a set's new end, deleted next round.
        usage.0[Usage::SLOTS] += self.later.len() as u64;
        usage
    }

    /// What the maps will hold once `changes` are written (each Service's
    /// new contribution; an empty one: it goes), with `cidrs` Service
    /// CIDRs.
    pub(crate) fn need_with(&self, changes: &[(ServiceName, Contribution)], cidrs: usize) -> Usage {
        let mut need = self.usage;
        for (name, new) in changes {
            if let Some(old) = self.contributions.get(name) {
                need.sub(&old.usage());
            }
            need.add(&new.usage());
        }
        need.0[Usage::CIDRS] = cidrs as u64;
        need
    }

    /// Endpoint sets and records held.
    /// The (Service address, endpoint) pairs `changes` take from the UDP
    /// Service ports that sockets connect to (records of the socket side):
    /// each endpoint of a record's set before that its set after lacks
    /// (address and port; the record gone: all of them).
    /// `full`: `changes` are every Service (a full round): those it lacks
    /// are gone.
    pub(crate) fn udp_gone(
        &self,
        changes: &[(ServiceName, Contribution)],
        full: bool,
    ) -> BTreeSet<crate::sockets::GonePair> {
        use crate::sockets::{endpoint_bytes, pair};
        let mut out = BTreeSet::new();
        let none = Contribution::default();
        let mut gone_services = Vec::new();
        if full {
            let listed: std::collections::HashSet<&ServiceName> =
                changes.iter().map(|(name, _)| name).collect();
            gone_services = self
                .contributions
                .keys()
                .filter(|name| !listed.contains(name))
                .map(|name| (name, &none))
                .collect();
        }
        let changed = changes.iter().map(|(name, new)| (name, new));
        for (name, new) in changed.chain(gone_services) {
            let Some(old) = self.contributions.get(name) else {
                continue;
            };
            for (key, claim) in &old.records {
                let (side, frontend) = key;
                if *side != Side::Socket || frontend.proto != crate::layout::UDP {
                    continue;
                }
                let Some(before) = old.sets.get(&claim.set) else {
                    continue;
                };
                let after: &[Endpoint] = new
                    .records
                    .get(key)
                    .and_then(|c| new.sets.get(&c.set))
                    .map_or(&[], Vec::as_slice);
                let service = endpoint_bytes(frontend.ip, frontend.port);
                for ep in before {
                    if !after.iter().any(|a| a.ip == ep.ip && a.port == ep.port) {
                        out.insert(pair(service, endpoint_bytes(ep.ip, ep.port)));
                    }
                }
            }
        }
        out
    }

    /// The (Service address, endpoint) pairs of the TCP Service ports
    /// that sockets connect to (records of the socket side, as the
    /// Service's last contribution wrote them) for the endpoints that left
    /// each Service of `round` ([`kpng_sink::ServiceChange::departed`]:
    /// gone from the view, not merely unused), each at its port for that
    /// Service port. Call it before the round's contributions are
    /// written. None in a full round (nothing to compare with).
    pub(crate) fn tcp_departed(
        &self,
        round: &kpng_sink::Round<'_>,
    ) -> BTreeSet<crate::sockets::GonePair> {
        use crate::sockets::{endpoint_bytes, pair};
        let mut out = BTreeSet::new();
        for change in round.services() {
            let mut departed = change.departed().peekable();
            if departed.peek().is_none() {
                continue;
            }
            let (Some(before), Some(old)) = (change.before, self.contributions.get(change.name))
            else {
                continue;
            };
            let departed: Vec<&kpng_model::view::EndpointView> = departed.collect();
            for ((side, frontend), claim) in &old.records {
                if *side != Side::Socket || frontend.proto != crate::layout::TCP {
                    continue;
                }
                let Some(port) = tcp_port(&before.service, claim.set.port) else {
                    continue;
                };
                let service = endpoint_bytes(frontend.ip, frontend.port);
                let family = |ip: &IpAddr| ip.is_ipv6() == claim.set.v6;
                let targets = kpng_model::view::port_targets(departed.iter().copied(), port);
                for (ip, target) in targets.into_iter().filter(|(ip, _)| family(ip)) {
                    out.insert(pair(service, endpoint_bytes(ip, target)));
                }
            }
        }
        out
    }

    pub(crate) fn sizes(&self) -> (usize, usize) {
        (self.sets.len(), self.records.len())
    }

    fn put(
        &mut self,
        t: &mut dyn Tables,
        table: Table,
        key: &[u8],
        value: &[u8],
    ) -> Result<(), Error> {
        self.writes += 1;
        t.put(table, key, value)
    }

    fn delete(&mut self, t: &mut dyn Tables, table: Table, key: &[u8]) -> Result<(), Error> {
        self.writes += 1;
        t.delete(table, key)
    }
}

/// The endpoints of each UDP Service address and port that sockets
/// connect to (records of the socket side) in `changes`, every Service
/// of a full round: what a connected UDP socket may be sent to now.
pub(crate) fn udp_live(changes: &[(ServiceName, Contribution)]) -> crate::sockets::Live {
    use crate::sockets::endpoint_bytes;
    let mut out = crate::sockets::Live::new();
    for (_, contribution) in changes {
        for ((side, frontend), claim) in &contribution.records {
            if *side != Side::Socket || frontend.proto != crate::layout::UDP {
                continue;
            }
            let endpoints = out
                .entry(endpoint_bytes(frontend.ip, frontend.port))
                .or_default();
            for ep in contribution.sets.get(&claim.set).into_iter().flatten() {
                endpoints.insert(endpoint_bytes(ep.ip, ep.port));
            }
        }
    }
    out
}

/// The endpoints in the view (used or not: one that drains keeps its
/// connections) of each TCP Service address and port that sockets
/// connect to (records of the socket side) in `changes`, every Service
/// of a full round of `view`, each at its port: what a TCP socket may be
/// connected to now.
pub(crate) fn tcp_live(
    changes: &[(ServiceName, Contribution)],
    view: &kpng_model::view::NodeView,
) -> crate::sockets::Live {
    use crate::sockets::endpoint_bytes;
    let mut out = crate::sockets::Live::new();
    for (name, contribution) in changes {
        let Some(service) = view.services.get(name) else {
            continue;
        };
        for ((side, frontend), claim) in &contribution.records {
            if *side != Side::Socket || frontend.proto != crate::layout::TCP {
                continue;
            }
            let endpoints = out
                .entry(endpoint_bytes(frontend.ip, frontend.port))
                .or_default();
            let Some(port) = tcp_port(&service.service, claim.set.port) else {
                continue;
            };
            let targets = kpng_model::view::port_targets(service.endpoints.iter(), port);
            for (ip, target) in targets {
                if ip.is_ipv6() == claim.set.v6 {
                    endpoints.insert(endpoint_bytes(ip, target));
                }
            }
        }
    }
    out
}

/// The TCP port numbered `number` of `service`.
fn tcp_port(
    service: &kpng_model::ServiceInfo,
    number: u16,
) -> Option<&kpng_model::v1::ServicePort> {
    service
        .ports
        .iter()
        .find(|p| p.protocol_name() == Some("tcp") && u16::try_from(p.port).ok() == Some(number))
}

/// A slot or page number: sets hold far fewer than 2^32 endpoints.
fn index(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod udp_gone_tests {
    use super::testing::endpoint;
    use super::*;
    use crate::layout::{TCP, UDP};
    use crate::sockets::{endpoint_bytes, pair};
    use crate::tables::Recorder;

    /// Service `dns` on 10.96.0.10: TCP and UDP 53 over `eps` (port 5353).
    fn dns(eps: &[Endpoint]) -> (ServiceName, Contribution) {
        let service = ServiceName::new("t", "dns");
        let mut c = Contribution::default();
        for proto in [TCP, UDP] {
            let set = SetName {
                service: service.clone(),
                port: 53,
                proto,
                v6: false,
                local: false,
            };
            let eps: Vec<Endpoint> = eps.iter().map(|e| Endpoint { port: 5353, ..*e }).collect();
            c.sets.insert(set.clone(), eps);
            let frontend = Frontend {
                ip: IpAddr::from([10, 96, 0, 10]),
                port: 53,
                proto,
            };
            let claim = Claim {
                set,
                affinity: 0,
                flags: 0,
            };
            c.records.insert((Side::Socket, frontend), claim);
        }
        (service, c)
    }

    fn gone(ip: u8) -> crate::sockets::GonePair {
        pair(
            endpoint_bytes(IpAddr::from([10, 96, 0, 10]), 53),
            endpoint_bytes(IpAddr::from([10, 244, 0, ip]), 5353),
        )
    }

    /// The UDP port's removed endpoints, each once (not the TCP port's);
    /// all of them when the Service goes; none for an added endpoint.
    #[test]
    fn the_pairs_are_the_udp_ports_removed_endpoints() {
        let mut state = State::default();
        let mut t = Recorder::default();
        let (name, c) = dns(&[endpoint(1), endpoint(2), endpoint(3)]);
        state.begin_round(&mut t).expect("begin");
        state.update_service(&mut t, &name, c).expect("update");

        let (_, fewer) = dns(&[endpoint(1), endpoint(3), endpoint(4)]);
        let pairs = state.udp_gone(&[(name.clone(), fewer.clone())], false);
        assert_eq!(pairs.into_iter().collect::<Vec<_>>(), [gone(2)]);
        state.update_service(&mut t, &name, fewer).expect("update");

        let (_, more) = dns(&[endpoint(1), endpoint(3), endpoint(4), endpoint(5)]);
        assert!(state.udp_gone(&[(name.clone(), more)], false).is_empty());

        let all = [gone(1), gone(3), gone(4)];
        let pairs = state.udp_gone(&[(name, Contribution::default())], false);
        assert_eq!(pairs.into_iter().collect::<Vec<_>>(), all);
        // A full round that no longer lists the Service: gone too.
        let pairs = state.udp_gone(&[], true);
        assert_eq!(pairs.into_iter().collect::<Vec<_>>(), all);
    }
}
