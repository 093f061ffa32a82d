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
pub(crate) use render::{contribution, nodeport_ips};

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

/// A slot or page number: sets hold far fewer than 2^32 endpoints.
fn index(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}
