//! What the maps must hold, and the writes that take them there.
//!
//! Each Service contributes records (one per Service address, port and
//! protocol a local socket may ask for), endpoint sets (one per port,
//! family and policy) and its live ClusterIPs. A round compares a changed
//! Service's new contribution with its last one and writes the
//! difference, in an order that keeps every Service usable at every
//! moment:
//!
//! - a set is changed in place, slot by slot: new endpoints take the
//!   slots of gone ones, the set grows by writing slots past its count and
//!   then the count, and shrinks by moving its last endpoints into the
//!   holes and then lowering the count. A connection reads one count and
//!   one slot, and every slot below every count it can read holds an
//!   endpoint of the set as it was or as it is becoming;
//! - a new set is written whole before any record points at it, and a
//!   set is deleted only after the records that pointed at it;
//! - a deleted set's number is reused one round later, never in the round
//!   a program may still have read it in.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;

use kpng_model::view::{NodeView, ServiceView};
use kpng_model::{IpFamily, ServiceName};

use crate::Error;
use crate::layout::{
    self, EMPTY_DROP, EMPTY_REJECT, Endpoint, Frontend, Record, member_key, proto_number, slot_key,
};
use crate::tables::{Table, Tables, cidr_bytes};

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

/// What one Service contributes to the maps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Contribution {
    records: BTreeMap<Frontend, Claim>,
    sets: BTreeMap<SetName, Vec<Endpoint>>,
    live: BTreeSet<IpAddr>,
}

/// The addresses a local socket reaches NodePorts on: this node's
/// addresses (from its Node object) inside `--nodeport-addresses`, or all
/// of them; loopback never.
pub(crate) fn nodeport_ips(view: &NodeView, prefixes: Option<&[(IpAddr, u8)]>) -> Vec<IpAddr> {
    let mut ips: Vec<IpAddr> = IpFamily::BOTH
        .into_iter()
        .flat_map(|f| view.node_addresses(f))
        .filter(|ip| match prefixes {
            None => true,
            Some(prefixes) => prefixes
                .iter()
                .any(|(net, len)| kpng_model::addr::cidr_contains((*net, *len), *ip)),
        })
        .collect();
    ips.sort();
    ips.dedup();
    ips
}

fn parse(ips: &[String]) -> impl Iterator<Item = IpAddr> + '_ {
    ips.iter().filter_map(|ip| ip.parse().ok())
}

/// What `view` asks of the maps.
///
/// - ClusterIPs lead to the internal-policy endpoints (the local ones for
///   `internalTrafficPolicy: Local`).
/// - External IPs, LB IPs and NodePorts (on `node_ips`) lead to the
///   cluster-policy endpoints: a local socket is the node or one of its
///   pods, which kube-proxy sends to every endpoint whatever the
///   external policy.
/// - LB IPs with `loadBalancerSourceRanges` get no record: the socket
///   goes on unchanged and the node's netfilter rules check its source
///   (see docs/semantics.md).
/// - A port with no endpoint at all is refused; a Local policy with no
///   local endpoint drops.
pub(crate) fn contribution(view: &ServiceView, node_ips: &[IpAddr]) -> Contribution {
    let mut out = Contribution::default();
    let service = view.name();
    for family in IpFamily::BOTH {
        let plan = view.plan(family);
        let v6 = family == IpFamily::V6;
        let cluster_ips: Vec<IpAddr> = parse(plan.cluster_ips).collect();
        let lb_ips: Vec<IpAddr> = if plan.source_ranges.is_empty() {
            parse(plan.lb_ips).collect()
        } else {
            Vec::new()
        };
        let externals: Vec<IpAddr> = parse(plan.external_ips).chain(lb_ips).collect();
        let node_ips: Vec<IpAddr> = node_ips
            .iter()
            .copied()
            .filter(|ip| IpFamily::of(ip) == family)
            .collect();
        out.live.extend(cluster_ips.iter().copied());
        let affinity = plan.affinity.unwrap_or(0);
        for port in &plan.ports {
            let proto = proto_number(port.protocol);
            let set = |local: bool| SetName {
                service: service.clone(),
                port: port.number,
                proto,
                v6,
                local,
            };
            let targets = |list: &[(IpAddr, u16)]| -> Vec<Endpoint> {
                list.iter()
                    .map(|&(ip, port)| Endpoint { ip, port })
                    .collect()
            };
            let cluster = set(false);
            out.sets.insert(cluster.clone(), targets(&port.cluster));
            let flags = if port.cluster.is_empty() {
                EMPTY_REJECT
            } else {
                EMPTY_DROP
            };
            let internal = if plan.itp_local && !port.cluster.is_empty() {
                let local = set(true);
                out.sets.insert(local.clone(), targets(&port.local));
                local
            } else {
                cluster.clone()
            };
            let mut claim = |ip: IpAddr, number: u16, set: &SetName| {
                let frontend = Frontend {
                    ip,
                    port: number,
                    proto,
                };
                let claim = Claim {
                    set: set.clone(),
                    affinity,
                    flags,
                };
                out.records.insert(frontend, claim);
            };
            for ip in &cluster_ips {
                claim(*ip, port.number, &internal);
            }
            for ip in &externals {
                claim(*ip, port.number, &cluster);
            }
            if let Some(node_port) = port.node_port {
                for ip in &node_ips {
                    claim(*ip, node_port, &cluster);
                }
            }
        }
    }
    // Only the sets a record leads to (a family with no address of the
    // Service needs none).
    let used: BTreeSet<&SetName> = out.records.values().map(|c| &c.set).collect();
    let sets = std::mem::take(&mut out.sets);
    out.sets = sets
        .into_iter()
        .filter(|(name, _)| used.contains(name))
        .collect();
    out
}

#[derive(Debug)]
struct SetState {
    id: u32,
    slots: Vec<Endpoint>,
}

/// The maps as written, and how to change them.
#[derive(Debug, Default)]
pub(crate) struct State {
    contributions: HashMap<ServiceName, Contribution>,
    sets: HashMap<SetName, SetState>,
    /// Who asks for each frontend; the first Service by name wins, the
    /// others wait their turn (two Services claiming one external IP and
    /// port).
    claims: BTreeMap<Frontend, BTreeMap<ServiceName, Claim>>,
    records: HashMap<Frontend, Record>,
    live: HashMap<IpAddr, usize>,
    cidrs: BTreeSet<(IpAddr, u8)>,
    next_id: u32,
    free: Vec<u32>,
    /// Set numbers freed this round: reusable from the next one.
    quarantine: Vec<u32>,
    /// Element writes and deletes since the last `take_writes`.
    writes: usize,
}

impl State {
    /// The writes made since the last call.
    pub(crate) fn take_writes(&mut self) -> usize {
        std::mem::take(&mut self.writes)
    }

    /// The Services that contribute anything.
    pub(crate) fn services(&self) -> impl Iterator<Item = &ServiceName> {
        self.contributions.keys()
    }

    /// Endpoint sets and records held.
    pub(crate) fn sizes(&self) -> (usize, usize) {
        (self.sets.len(), self.records.len())
    }

    /// Starts a round: the set numbers freed in the last one become
    /// reusable.
    pub(crate) fn begin_round(&mut self) {
        self.free.append(&mut self.quarantine);
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

    fn alloc(&mut self) -> u32 {
        if let Some(id) = self.free.pop() {
            return id;
        }
        self.next_id += 1;
        self.next_id
    }

    /// Replaces everything: `services` are written as new, then whatever
    /// the maps held before (a previous run's, or a failed round's) and
    /// no longer want is deleted. Records are replaced in place, so a
    /// Service present before and after stays reachable throughout.
    pub(crate) fn replace_all(
        &mut self,
        t: &mut dyn Tables,
        services: &mut dyn Iterator<Item = (ServiceName, Contribution)>,
        cidrs: &[(IpAddr, u8)],
    ) -> Result<(), Error> {
        let old_sets: HashSet<u32> = [Table::Sets, Table::Slots, Table::Members]
            .into_iter()
            .map(|table| t.keys(table))
            .collect::<Result<Vec<_>, _>>()?
            .iter()
            .flatten()
            .map(|k| layout::set_of(k))
            .collect();
        let old_services = t.keys(Table::Services)?;
        let old_live = t.keys(Table::Live)?;
        let old_cidrs = t.keys(Table::Cidrs)?;
        let writes = self.writes;
        *self = State {
            next_id: old_sets.iter().copied().max().unwrap_or(0),
            writes,
            ..State::default()
        };
        for (name, contribution) in services {
            self.update_service(t, &name, contribution)?;
        }
        self.set_cidrs(t, cidrs, true)?;
        for key in old_services {
            let mut fe = [0u8; 20];
            if key.len() == 20 {
                fe.copy_from_slice(&key);
            }
            if !self.records.contains_key(&Frontend::from_key(&fe)) {
                self.delete(t, Table::Services, &key)?;
            }
        }
        for table in [Table::Sets, Table::Slots, Table::Members] {
            for key in t.keys(table)? {
                if old_sets.contains(&layout::set_of(&key)) {
                    self.delete(t, table, &key)?;
                }
            }
        }
        for key in old_live {
            let mut k = [0u8; 20];
            if key.len() == 20 {
                k.copy_from_slice(&key);
            }
            if !self.live.contains_key(&layout::live_ip(&k)) {
                self.delete(t, Table::Live, &key)?;
            }
        }
        for key in old_cidrs {
            let mut data = [0u8; 20];
            if key.len() == 24 {
                data.copy_from_slice(&key[4..]);
            }
            let len = u32::from_ne_bytes([key[0], key[1], key[2], key[3]]);
            if !self.cidrs.contains(&layout::cidr_of(len, &data)) {
                self.delete(t, Table::Cidrs, &key)?;
            }
        }
        self.quarantine.extend(old_sets);
        Ok(())
    }

    /// Writes the Service CIDRs; `fresh`: the maps' own are being
    /// replaced by the caller, so only additions are written here.
    pub(crate) fn set_cidrs(
        &mut self,
        t: &mut dyn Tables,
        cidrs: &[(IpAddr, u8)],
        fresh: bool,
    ) -> Result<(), Error> {
        let want: BTreeSet<(IpAddr, u8)> = cidrs.iter().copied().collect();
        for &(ip, len) in want.difference(&self.cidrs.clone()) {
            let (bits, data) = layout::cidr_key(ip, len);
            self.put(t, Table::Cidrs, &cidr_bytes(bits, &data), &[1])?;
        }
        if !fresh {
            for &(ip, len) in self.cidrs.clone().difference(&want) {
                let (bits, data) = layout::cidr_key(ip, len);
                self.delete(t, Table::Cidrs, &cidr_bytes(bits, &data))?;
            }
        }
        self.cidrs = want;
        Ok(())
    }

    /// Takes one Service from its last contribution to `new` (empty: the
    /// Service is gone).
    pub(crate) fn update_service(
        &mut self,
        t: &mut dyn Tables,
        name: &ServiceName,
        new: Contribution,
    ) -> Result<(), Error> {
        let old = self.contributions.remove(name).unwrap_or_default();
        if old == new {
            if new != Contribution::default() {
                self.contributions.insert(name.clone(), new);
            }
            return Ok(());
        }
        // 1. Sets first: whole before any record points at them.
        for (set, endpoints) in &new.sets {
            if old.sets.get(set) != Some(endpoints) {
                self.write_set(t, set, endpoints)?;
            }
        }
        // 2. Records.
        let mut touched: BTreeSet<Frontend> = BTreeSet::new();
        for (frontend, claim) in &old.records {
            if new.records.get(frontend) != Some(claim) {
                if let Some(claims) = self.claims.get_mut(frontend) {
                    claims.remove(name);
                }
                touched.insert(*frontend);
            }
        }
        for (frontend, claim) in &new.records {
            // A record whose set was rewritten in place needs no write;
            // one that changed, or is new, does.
            if old.records.get(frontend) != Some(claim) {
                self.claims
                    .entry(*frontend)
                    .or_default()
                    .insert(name.clone(), claim.clone());
                touched.insert(*frontend);
            }
        }
        for frontend in touched {
            self.resolve(t, frontend)?;
        }
        // 3. Sets no record points at any more.
        for set in old.sets.keys() {
            if !new.sets.contains_key(set) {
                self.drop_set(t, set)?;
            }
        }
        // 4. Live ClusterIPs.
        for ip in old.live.difference(&new.live) {
            let n = self.live.entry(*ip).or_default();
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.live.remove(ip);
                self.delete(t, Table::Live, &layout::live_key(*ip))?;
            }
        }
        for ip in new.live.difference(&old.live) {
            let n = self.live.entry(*ip).or_default();
            *n += 1;
            if *n == 1 {
                self.put(t, Table::Live, &layout::live_key(*ip), &1u32.to_ne_bytes())?;
            }
        }
        if new != Contribution::default() {
            self.contributions.insert(name.clone(), new);
        }
        Ok(())
    }

    /// Writes the winning claim of `frontend`, or deletes its record when
    /// nobody claims it.
    fn resolve(&mut self, t: &mut dyn Tables, frontend: Frontend) -> Result<(), Error> {
        let winner = self
            .claims
            .get(&frontend)
            .and_then(|c| c.values().next())
            .and_then(|claim| {
                let set = self.sets.get(&claim.set)?;
                Some(Record {
                    set: set.id,
                    affinity: claim.affinity,
                    flags: claim.flags,
                })
            });
        if self.claims.get(&frontend).is_some_and(BTreeMap::is_empty) {
            self.claims.remove(&frontend);
        }
        match winner {
            Some(record) => {
                if self.records.get(&frontend) != Some(&record) {
                    self.put(t, Table::Services, &frontend.key(), &record.bytes())?;
                    self.records.insert(frontend, record);
                }
            }
            None => {
                if self.records.remove(&frontend).is_some() {
                    self.delete(t, Table::Services, &frontend.key())?;
                }
            }
        }
        Ok(())
    }

    /// Makes set `name` hold `want` (a new set, or one changed in place).
    fn write_set(
        &mut self,
        t: &mut dyn Tables,
        name: &SetName,
        want: &[Endpoint],
    ) -> Result<(), Error> {
        let Some(mut set) = self.sets.remove(name) else {
            let id = self.alloc();
            for (i, ep) in want.iter().enumerate() {
                self.put(t, Table::Members, &member_key(id, ep), &[1])?;
                self.put(t, Table::Slots, &slot_key(id, index(i)), &ep.bytes())?;
            }
            self.put(
                t,
                Table::Sets,
                &id.to_ne_bytes(),
                &index(want.len()).to_ne_bytes(),
            )?;
            self.sets.insert(
                name.clone(),
                SetState {
                    id,
                    slots: want.to_vec(),
                },
            );
            return Ok(());
        };
        let result = self.change_set(t, &mut set, want);
        self.sets.insert(name.clone(), set);
        result
    }

    fn change_set(
        &mut self,
        t: &mut dyn Tables,
        set: &mut SetState,
        want: &[Endpoint],
    ) -> Result<(), Error> {
        let id = set.id;
        let have: HashSet<Endpoint> = set.slots.iter().copied().collect();
        let wanted: HashSet<Endpoint> = want.iter().copied().collect();
        let added: Vec<Endpoint> = want.iter().copied().filter(|e| !have.contains(e)).collect();
        let holes: Vec<usize> = (0..set.slots.len())
            .filter(|&i| !wanted.contains(&set.slots[i]))
            .collect();
        let removed: Vec<Endpoint> = holes.iter().map(|&i| set.slots[i]).collect();
        let old_len = set.slots.len();
        for ep in &added {
            self.put(t, Table::Members, &member_key(id, ep), &[1])?;
        }
        // New endpoints take the gone ones' slots, then go past the end.
        let mut added = added.into_iter();
        let mut left: Vec<usize> = Vec::new();
        for &hole in &holes {
            match added.next() {
                Some(ep) => {
                    set.slots[hole] = ep;
                    self.put(t, Table::Slots, &slot_key(id, index(hole)), &ep.bytes())?;
                }
                None => left.push(hole),
            }
        }
        for ep in added {
            self.put(
                t,
                Table::Slots,
                &slot_key(id, index(set.slots.len())),
                &ep.bytes(),
            )?;
            set.slots.push(ep);
        }
        // Holes left: fill each, lowest first, with the last endpoint
        // that stays; the tail beyond is cut below.
        let mut left: std::collections::VecDeque<usize> = left.into();
        let mut len = set.slots.len();
        loop {
            while len > 0 && left.back() == Some(&(len - 1)) {
                left.pop_back();
                len -= 1;
            }
            let Some(hole) = left.pop_front() else {
                break;
            };
            let ep = set.slots[len - 1];
            set.slots[hole] = ep;
            self.put(t, Table::Slots, &slot_key(id, index(hole)), &ep.bytes())?;
            len -= 1;
        }
        set.slots.truncate(len);
        let new_len = len;
        if new_len != old_len {
            self.put(
                t,
                Table::Sets,
                &id.to_ne_bytes(),
                &index(new_len).to_ne_bytes(),
            )?;
        }
        for i in new_len..old_len {
            self.delete(t, Table::Slots, &slot_key(id, index(i)))?;
        }
        for ep in &removed {
            self.delete(t, Table::Members, &member_key(id, ep))?;
        }
        Ok(())
    }

    fn drop_set(&mut self, t: &mut dyn Tables, name: &SetName) -> Result<(), Error> {
        let Some(set) = self.sets.remove(name) else {
            return Ok(());
        };
        self.delete(t, Table::Sets, &set.id.to_ne_bytes())?;
        for (i, ep) in set.slots.iter().enumerate() {
            self.delete(t, Table::Slots, &slot_key(set.id, index(i)))?;
            self.delete(t, Table::Members, &member_key(set.id, ep))?;
        }
        self.quarantine.push(set.id);
        Ok(())
    }
}

/// A slot number: sets hold far fewer than 2^32 endpoints.
fn index(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::net::IpAddr;

    use proptest::prelude::*;

    use super::*;
    use crate::tables::Recorder;

    /// A recorder that checks, after every single write, that every
    /// record's set is whole: each slot below its count holds an endpoint
    /// of the set as it was or as it is becoming.
    #[derive(Default)]
    struct Checked {
        inner: Recorder,
        allowed: HashSet<Endpoint>,
        violations: Vec<String>,
    }

    impl Checked {
        fn check(&mut self) {
            for (key, value) in self
                .inner
                .tables
                .get(&Table::Services)
                .cloned()
                .unwrap_or_default()
            {
                let mut v = [0u8; 16];
                v.copy_from_slice(&value);
                let record = Record::from_bytes(&v);
                let count = self
                    .inner
                    .get(Table::Sets, &record.set.to_ne_bytes())
                    .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
                    .unwrap_or(0);
                for i in 0..count {
                    match self.inner.get(Table::Slots, &slot_key(record.set, i)) {
                        None => self
                            .violations
                            .push(format!("{key:?}: slot {i} of {count} missing")),
                        Some(ep) if !self.allowed.contains(&Endpoint::from_bytes(ep)) => {
                            self.violations.push(format!(
                                "slot {i}: {} is not an endpoint",
                                Endpoint::from_bytes(ep)
                            ))
                        }
                        Some(_) => {}
                    }
                }
            }
        }
    }

    impl Tables for Checked {
        fn put(&mut self, table: Table, key: &[u8], value: &[u8]) -> Result<(), Error> {
            self.inner.put(table, key, value)?;
            self.check();
            Ok(())
        }
        fn delete(&mut self, table: Table, key: &[u8]) -> Result<(), Error> {
            self.inner.delete(table, key)?;
            self.check();
            Ok(())
        }
        fn keys(&self, table: Table) -> Result<Vec<Vec<u8>>, Error> {
            self.inner.keys(table)
        }
    }

    fn endpoint(i: u8) -> Endpoint {
        Endpoint {
            ip: IpAddr::from([10, 244, 0, i]),
            port: 8080,
        }
    }

    fn frontend() -> Frontend {
        Frontend {
            ip: IpAddr::from([10, 96, 0, 10]),
            port: 80,
            proto: crate::layout::TCP,
        }
    }

    /// One Service, one port, its ClusterIP on the endpoints `eps`.
    fn single(eps: &[Endpoint]) -> (ServiceName, Contribution) {
        let service = ServiceName::new("t", "web");
        let set = SetName {
            service: service.clone(),
            port: 80,
            proto: crate::layout::TCP,
            v6: false,
            local: false,
        };
        let mut c = Contribution::default();
        c.sets.insert(set.clone(), eps.to_vec());
        c.records.insert(
            frontend(),
            Claim {
                set,
                affinity: 0,
                flags: if eps.is_empty() {
                    EMPTY_REJECT
                } else {
                    EMPTY_DROP
                },
            },
        );
        c.live.insert(frontend().ip);
        (service, c)
    }

    /// The endpoints the maps hold for the frontend, in slot order.
    fn held(t: &Recorder) -> Vec<Endpoint> {
        let Some(value) = t.get(Table::Services, &frontend().key()) else {
            return Vec::new();
        };
        let mut v = [0u8; 16];
        v.copy_from_slice(value);
        let set = Record::from_bytes(&v).set;
        let count = t
            .get(Table::Sets, &set.to_ne_bytes())
            .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .unwrap_or(0);
        (0..count)
            .filter_map(|i| {
                t.get(Table::Slots, &slot_key(set, i))
                    .map(Endpoint::from_bytes)
            })
            .collect()
    }

    proptest! {
        /// Any sequence of endpoint lists: after every single write the
        /// Service is whole; after each round the maps hold exactly the
        /// endpoints asked for, each once, with no slot or member left
        /// over; and a round writes O(change) elements.
        #[test]
        fn sets_change_in_place_and_stay_whole(
            steps in proptest::collection::vec(proptest::collection::btree_set(0u8..16, 0..10), 1..12)
        ) {
            let mut state = State::default();
            let mut t = Checked::default();
            let mut before: Vec<Endpoint> = Vec::new();
            for step in steps {
                state.begin_round();
                let want: Vec<Endpoint> = step.iter().map(|&i| endpoint(i)).collect();
                t.allowed = before.iter().chain(&want).copied().collect();
                let (name, c) = single(&want);
                state.take_writes();
                state.update_service(&mut t, &name, c).expect("update");
                prop_assert!(t.violations.is_empty(), "{:?}", t.violations);
                let mut got = held(&t.inner);
                got.sort();
                let mut sorted = want.clone();
                sorted.sort();
                prop_assert_eq!(&got, &sorted);
                let slots = t.inner.keys(Table::Slots).expect("keys").len();
                let members = t.inner.keys(Table::Members).expect("keys").len();
                prop_assert_eq!((slots, members), (want.len(), want.len()));
                let added = want.iter().filter(|e| !before.contains(e)).count();
                let removed = before.iter().filter(|e| !want.contains(e)).count();
                let writes = state.take_writes();
                // + the count, and the record (its flags follow the set's
                // emptiness) and live ClusterIP the first time.
                prop_assert!(writes <= 2 * added + 3 * removed + 3, "{} writes for +{} -{}", writes, added, removed);
                before = want;
            }
        }
    }

    #[test]
    fn replacing_all_keeps_what_is_wanted_and_deletes_the_rest() {
        let mut t = Recorder::default();
        let mut old = State::default();
        let (name, c) = single(&[endpoint(1), endpoint(2)]);
        old.update_service(&mut t, &name, c).expect("old");
        let gone = ServiceName::new("t", "gone");
        let mut other = single(&[endpoint(3)]).1;
        other.records = other
            .records
            .into_values()
            .map(|claim| {
                let fe = Frontend {
                    ip: IpAddr::from([10, 96, 0, 99]),
                    port: 80,
                    proto: crate::layout::TCP,
                };
                (
                    fe,
                    SetName {
                        service: gone.clone(),
                        ..claim.set.clone()
                    },
                    claim,
                )
            })
            .map(|(fe, set, claim)| (fe, Claim { set, ..claim }))
            .collect();
        other.sets = other
            .sets
            .into_values()
            .map(|eps| {
                (
                    SetName {
                        service: gone.clone(),
                        port: 80,
                        proto: crate::layout::TCP,
                        v6: false,
                        local: false,
                    },
                    eps,
                )
            })
            .collect();
        other.live = [IpAddr::from([10, 96, 0, 99])].into();
        old.update_service(&mut t, &gone, other).expect("other");

        // A new process: its state is empty; the maps hold the old run's.
        let mut new = State::default();
        let (name, c) = single(&[endpoint(2), endpoint(4)]);
        new.replace_all(&mut t, &mut std::iter::once((name, c)), &[])
            .expect("replace");
        let mut got = held(&t);
        got.sort();
        assert_eq!(got, vec![endpoint(2), endpoint(4)]);
        // Only the new set's elements are left, and one record.
        assert_eq!(t.keys(Table::Services).expect("keys").len(), 1);
        assert_eq!(t.keys(Table::Sets).expect("keys").len(), 1);
        assert_eq!(t.keys(Table::Slots).expect("keys").len(), 2);
        assert_eq!(t.keys(Table::Members).expect("keys").len(), 2);
        assert_eq!(t.keys(Table::Live).expect("keys").len(), 1);
    }
}
