//! What the maps must hold, and the writes that take them there.
//!
//! Each Service contributes records (one per Service address, port and
//! protocol a local socket may ask for), endpoint sets (one per port,
//! family and policy) and its live ClusterIPs. A set's slots are kept in
//! pages of 8 endpoints (`kpng_slots`), page 0 holding the count. A round
//! compares a changed Service's new contribution with its last one and
//! writes the difference, in an order that keeps every Service usable at
//! every moment:
//!
//! - a set is changed in place: new endpoints take the slots of gone
//!   ones, the set grows past its end, and holes left are filled with its
//!   last endpoints. Only the pages that changed are written, page 0 (the
//!   count) last; pages beyond the new count are deleted after it. A
//!   connection reads the count and then one slot, and every slot below
//!   either count holds an endpoint of the set as it was or as it is
//!   becoming;
//! - a new set is written whole before any record points at it, and a
//!   set is deleted only after the records that pointed at it;
//! - a deleted set's number is reused one round later, never in the round
//!   a program may still have read it in.
//!
//! A full round (the first, or one after a failure) adopts what the maps
//! hold: sets its records lead to are changed in place, and only what no
//! Service wants is deleted, last.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;

use kpng_model::view::{NodeView, ServiceView};
use kpng_model::{IpFamily, IpNet, ServiceName};

use crate::Error;
use crate::layout::{
    self, EMPTY_DROP, EMPTY_REJECT, EXT_RANGES, EXT_SNAT, Endpoint, Frontend, PAGE, Record,
    member_key, page_bytes, proto_number, slot_key,
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

/// The addresses a local socket reaches NodePorts on: this node's
/// addresses (from its Node object) inside `--nodeport-addresses`, or all
/// of them; loopback never.
pub(crate) fn nodeport_ips(view: &NodeView, prefixes: Option<&[IpNet]>) -> Vec<IpAddr> {
    let mut ips: Vec<IpAddr> = IpFamily::BOTH
        .into_iter()
        .flat_map(|f| view.node_addresses(f))
        .filter(|ip| match prefixes {
            None => true,
            Some(prefixes) => prefixes
                .iter()
                .any(|net| kpng_model::addr::cidr_contains(*net, *ip)),
        })
        .collect();
    ips.sort();
    ips.dedup();
    ips
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
/// - With `external` (tc programs attached), packets from outside to a
///   Service's NodePorts, external IPs and LB IPs (source ranges
///   included) get records of their own: under
///   `externalTrafficPolicy: Local` they lead to the local endpoints,
///   under `Cluster` to every endpoint, masqueraded towards those on
///   other nodes.
pub(crate) fn contribution(
    service: &ServiceName,
    view: &ServiceView,
    node_ips: &[IpAddr],
    external: bool,
) -> Contribution {
    let mut out = Contribution::default();
    for family in IpFamily::BOTH {
        let plan = view.plan(family);
        let v6 = family == IpFamily::V6;
        let cluster_ips: Vec<IpAddr> = plan.cluster_ips.clone();
        if cluster_ips.is_empty() {
            // Not a Service of this family (single stack): nothing of it
            // here, its NodePorts included, as kube-proxy's proxier of
            // that family does not know it.
            continue;
        }
        let lb_ips: Vec<IpAddr> = if plan.source_ranges.is_empty() {
            plan.lb_ips.clone()
        } else {
            Vec::new()
        };
        let externals: Vec<IpAddr> = plan.external_ips.iter().copied().chain(lb_ips).collect();
        let node_ips: Vec<IpAddr> = node_ips
            .iter()
            .copied()
            .filter(|ip| IpFamily::of(ip) == family)
            .collect();
        out.live.extend(cluster_ips.iter().copied());
        let local_ips: BTreeSet<IpAddr> = view
            .endpoints
            .iter()
            .filter(|e| e.is_local() && e.family() == family)
            .map(|e| e.ip())
            .collect();
        let affinity = plan.affinity.unwrap_or(0);
        // Parsed once, when the plan was made.
        let ranges: Vec<(IpAddr, u8)> = plan
            .source_ranges
            .iter()
            .map(|r| (r.network(), r.prefix_len()))
            .collect();
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
                    .map(|&(ip, port)| Endpoint {
                        ip,
                        port,
                        local: local_ips.contains(&ip),
                    })
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
                out.records.insert((Side::Socket, frontend), claim);
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
            if external {
                // Local: the local endpoints, the client kept. Cluster:
                // every endpoint, masqueraded towards other nodes'.
                let (target, policy) = if plan.etp_local {
                    let local = set(true);
                    out.sets.insert(local.clone(), targets(&port.local));
                    (local, 0)
                } else {
                    (cluster.clone(), EXT_SNAT)
                };
                let mut claim = |ip: IpAddr, number: u16, ranged: bool| {
                    let frontend = Frontend {
                        ip,
                        port: number,
                        proto,
                    };
                    let claim = Claim {
                        set: target.clone(),
                        affinity,
                        flags: flags | policy | if ranged { EXT_RANGES } else { 0 },
                    };
                    out.records.insert((Side::External, frontend), claim);
                    frontend
                };
                if let Some(node_port) = port.node_port {
                    for ip in &node_ips {
                        claim(*ip, node_port, false);
                    }
                }
                for ip in plan.external_ips.iter().copied() {
                    claim(ip, port.number, false);
                }
                for ip in plan.lb_ips.iter().copied() {
                    let ranged = !ranges.is_empty();
                    let frontend = claim(ip, port.number, ranged);
                    for &(net, len) in &ranges {
                        out.ranges.insert((frontend, net, len));
                    }
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
    /// The endpoints in slot order, as the maps hold them.
    slots: Vec<Endpoint>,
    /// Whether its members are in `kpng_members` (a set of a Service with
    /// ClientIP affinity).
    members: bool,
}

/// What the maps held when a full round began, for it to adopt.
#[derive(Debug, Default)]
struct Found {
    /// Each record, by side and frontend.
    records: HashMap<RecordKey, Record>,
    /// Each set's endpoints in slot order.
    sets: HashMap<u32, Vec<Endpoint>>,
    /// The live ClusterIPs.
    live: HashSet<IpAddr>,
    /// The keys of every page (set, page).
    pages: Vec<(u32, u32)>,
    /// The keys of every member.
    members: Vec<Vec<u8>>,
    /// The keys of every source range.
    ranges: Vec<Vec<u8>>,
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
}

/// The page of slot `i`.
fn page_of_slot(i: usize) -> usize {
    i / PAGE
}

impl State {
    /// The writes made since the last call.
    pub(crate) fn take_writes(&mut self) -> usize {
        std::mem::take(&mut self.writes)
    }

    /// Endpoint sets and records held.
    pub(crate) fn sizes(&self) -> (usize, usize) {
        (self.sets.len(), self.records.len())
    }

    /// Starts a round: the pages the last one cut off go, then the set
    /// numbers it freed become reusable.
    pub(crate) fn begin_round(&mut self, t: &mut dyn Tables) -> Result<(), Error> {
        for key in std::mem::take(&mut self.later) {
            self.delete(t, Table::Slots, &key)?;
        }
        self.free.append(&mut self.quarantine);
        Ok(())
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

    /// Reads back what the maps hold: each set's endpoints (from its
    /// pages), each record, the live ClusterIPs and the CIDRs.
    fn read_back(t: &dyn Tables) -> Result<(Found, u32), Error> {
        let mut found = Found::default();
        let mut max_id = 0;
        for side in [Side::Socket, Side::External] {
            let table = side.table();
            for key in t.keys(table)? {
                let (Ok(k), Some(value)) =
                    (<[u8; 20]>::try_from(key.as_slice()), t.get(table, &key)?)
                else {
                    continue;
                };
                let Ok(v) = <[u8; 16]>::try_from(value.as_slice()) else {
                    continue;
                };
                let record = Record::from_bytes(&v);
                let at = (side, Frontend::from_key(&k));
                found.records.insert(at, record);
                max_id = max_id.max(record.set);
            }
        }
        found.ranges = t.keys(Table::Ranges)?;
        let mut pages: HashMap<u32, BTreeMap<u32, Vec<u8>>> = HashMap::new();
        for key in t.keys(Table::Slots)? {
            let (set, page) = layout::slot_of(&key);
            max_id = max_id.max(set);
            found.pages.push((set, page));
            if let Some(value) = t.get(Table::Slots, &key)? {
                pages.entry(set).or_default().insert(page, value);
            }
        }
        let paged: HashSet<u32> = pages.keys().copied().collect();
        for (set, pages) in pages {
            let Some(first) = pages.get(&0) else { continue };
            let (count, _) = layout::page_of(first);
            let count = count as usize;
            let mut slots = Vec::with_capacity(count);
            for i in 0..count {
                let Some(page) = pages.get(&index(page_of_slot(i))) else {
                    break;
                };
                slots.push(layout::page_of(page).1[i % PAGE]);
            }
            if slots.len() == count {
                found.sets.insert(set, slots);
            }
        }
        // A record's set with no page at all is an empty one.
        for set in found.records.values().map(|r| &r.set) {
            if !paged.contains(set) {
                found.sets.entry(*set).or_default();
            }
        }
        for key in t.keys(Table::Members)? {
            max_id = max_id.max(layout::set_of(&key));
            found.members.push(key);
        }
        for key in t.keys(Table::Live)? {
            if let Ok(k) = <[u8; 20]>::try_from(key.as_slice()) {
                found.live.insert(layout::live_ip(&k));
            }
        }
        Ok((found, max_id))
    }

    /// Replaces everything with `services`, adopting what the maps hold
    /// (a previous run's, or what a failed round left): a set whose record
    /// the maps hold is taken as it is and changed in place, so a restart
    /// onto the same state writes nothing and one onto another state
    /// writes the difference; whatever the maps hold and no Service wants
    /// is deleted last.
    pub(crate) fn replace_all(
        &mut self,
        t: &mut dyn Tables,
        services: &mut dyn Iterator<Item = (ServiceName, Contribution)>,
        cidrs: &[IpNet],
    ) -> Result<(), Error> {
        let (found, max_id) = Self::read_back(t)?;
        let kernel_cidrs: BTreeSet<(IpAddr, u8)> = t
            .keys(Table::Cidrs)?
            .iter()
            .filter_map(|key| {
                let data = <[u8; 20]>::try_from(key.get(4..)?).ok()?;
                let len = u32::from_ne_bytes(key.get(..4)?.try_into().ok()?);
                Some(layout::cidr_of(len, &data))
            })
            .collect();
        let writes = self.writes;
        *self = State {
            next_id: max_id,
            records: found.records.clone(),
            cidrs: kernel_cidrs,
            found: Some(found),
            writes,
            ..State::default()
        };
        for (name, contribution) in services {
            self.update_service(t, &name, contribution)?;
        }
        self.set_cidrs(t, cidrs)?;
        let found = self.found.take().unwrap_or_default();
        // Records nobody claims.
        let mut stale: Vec<RecordKey> = self
            .records
            .keys()
            .filter(|f| !self.claims.contains_key(f))
            .copied()
            .collect();
        stale.sort_unstable();
        for at in stale {
            self.records.remove(&at);
            self.delete(t, at.0.table(), &at.1.key())?;
        }
        // Source ranges no Service has.
        let wanted: HashSet<[u8; 40]> = self
            .ranges
            .keys()
            .map(|&(f, ip, len)| layout::range_key(&f, ip, len))
            .collect();
        let mut stale: Vec<&Vec<u8>> = found
            .ranges
            .iter()
            .filter(|key| {
                <[u8; 40]>::try_from(key.as_slice()).map_or(true, |k| !wanted.contains(&k))
            })
            .collect();
        stale.sort_unstable();
        for key in stale {
            self.delete(t, Table::Ranges, key)?;
        }
        // Sets not adopted, and any page of a set no one holds.
        let kept: HashSet<u32> = self.sets.values().map(|s| s.id).collect();
        // Pages past the count of a kept set (a failed round's).
        let needed: HashMap<u32, usize> = self
            .sets
            .values()
            .map(|s| (s.id, s.slots.len().div_ceil(PAGE)))
            .collect();
        for &(set, page) in &found.pages {
            if needed.get(&set).is_some_and(|&n| page as usize >= n) {
                self.delete(t, Table::Slots, &slot_key(set, page))?;
            }
        }
        let mut gone: BTreeSet<u32> = BTreeSet::new();
        // (The pages read back are all there is of such sets: the round
        // wrote only pages of kept ones.) Page 0 first: the set is empty
        // from then on.
        let mut stale: Vec<(u32, u32)> = found
            .pages
            .iter()
            .filter(|(set, _)| !kept.contains(set))
            .copied()
            .collect();
        stale.sort_unstable_by_key(|&(set, page)| (page != 0, set, page));
        for (set, page) in stale {
            self.delete(t, Table::Slots, &slot_key(set, page))?;
            gone.insert(set);
        }
        // Members: exactly those of the sets that keep them.
        let want: BTreeSet<[u8; 24]> = self
            .sets
            .values()
            .filter(|s| s.members)
            .flat_map(|s| s.slots.iter().map(move |ep| member_key(s.id, ep)))
            .collect();
        let have: BTreeSet<Vec<u8>> = found.members.into_iter().collect();
        for key in &want {
            if !have.contains(key.as_slice()) {
                self.put(t, Table::Members, key, &[1])?;
            }
        }
        for key in have {
            let wanted = <[u8; 24]>::try_from(key.as_slice()).is_ok_and(|k| want.contains(&k));
            if !wanted {
                gone.insert(layout::set_of(&key));
                self.delete(t, Table::Members, &key)?;
            }
        }
        let mut found_live: Vec<IpAddr> = found.live.into_iter().collect();
        found_live.sort_unstable();
        for ip in found_live {
            if !self.live.contains_key(&ip) {
                self.delete(t, Table::Live, &layout::live_key(ip))?;
            }
        }
        self.quarantine
            .extend(gone.into_iter().filter(|id| !kept.contains(id)));
        Ok(())
    }

    /// Writes the node's addresses the tc programs masquerade to (the
    /// first of each family; none: zeros), where they changed.
    pub(crate) fn set_node(&mut self, t: &mut dyn Tables, ips: &[IpAddr]) -> Result<(), Error> {
        for (slot, family) in IpFamily::BOTH.into_iter().enumerate() {
            let value = ips
                .iter()
                .find(|ip| IpFamily::of(ip) == family)
                .map(|&ip| {
                    Endpoint {
                        ip,
                        port: 0,
                        local: true,
                    }
                    .bytes()
                })
                .unwrap_or([0u8; 20]);
            let key = index(slot).to_ne_bytes();
            if t.get(Table::Node, &key)?.as_deref() != Some(value.as_slice()) {
                self.put(t, Table::Node, &key, &value)?;
            }
        }
        Ok(())
    }

    /// Makes the Service CIDRs `cidrs`: writes the new, deletes the gone.
    pub(crate) fn set_cidrs(&mut self, t: &mut dyn Tables, cidrs: &[IpNet]) -> Result<(), Error> {
        let want: BTreeSet<(IpAddr, u8)> = cidrs
            .iter()
            .map(|c| (c.network(), c.prefix_len()))
            .collect();
        for &(ip, len) in want.difference(&self.cidrs.clone()) {
            let (bits, data) = layout::cidr_key(ip, len);
            self.put(t, Table::Cidrs, &cidr_bytes(bits, &data), &[1])?;
        }
        for &(ip, len) in self.cidrs.clone().difference(&want) {
            let (bits, data) = layout::cidr_key(ip, len);
            self.delete(t, Table::Cidrs, &cidr_bytes(bits, &data))?;
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
            let members = new
                .records
                .values()
                .any(|c| c.affinity > 0 && &c.set == set);
            let unchanged = old.sets.get(set) == Some(endpoints)
                && self.sets.get(set).is_some_and(|s| s.members == members);
            if !unchanged {
                let hint = new
                    .records
                    .iter()
                    .filter(|(_, c)| &c.set == set)
                    .find_map(|(f, _)| Some(self.found.as_ref()?.records.get(f)?.set));
                self.write_set(t, set, endpoints, members, hint)?;
            }
        }
        // New source ranges before the records that check them.
        for range in new.ranges.difference(&old.ranges) {
            let n = self.ranges.entry(*range).or_default();
            *n += 1;
            let key = layout::range_key(&range.0, range.1, range.2);
            let held = self
                .found
                .as_ref()
                .is_some_and(|f| f.ranges.iter().any(|k| k.as_slice() == key.as_slice()));
            if *n == 1 && !held {
                self.put(t, Table::Ranges, &key, &[1])?;
            }
        }
        // 2. Records.
        let mut touched: BTreeSet<RecordKey> = BTreeSet::new();
        for (frontend, claim) in &old.records {
            if new.records.get(frontend) != Some(claim) {
                if let Some(claims) = self.claims.get_mut(frontend) {
                    claims.retain(|(n, _)| n != name);
                }
                touched.insert(*frontend);
            }
        }
        for (frontend, claim) in &new.records {
            if old.records.get(frontend) != Some(claim) {
                let claims = self.claims.entry(*frontend).or_default();
                // Kept in name order: the first claimant wins.
                let at = claims.partition_point(|(n, _)| n < name);
                claims.insert(at, (name.clone(), claim.clone()));
                touched.insert(*frontend);
            }
        }
        for at in touched {
            self.resolve(t, at)?;
        }
        // Gone source ranges after them.
        for range in old.ranges.difference(&new.ranges) {
            let n = self.ranges.entry(*range).or_default();
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.ranges.remove(range);
                let key = layout::range_key(&range.0, range.1, range.2);
                self.delete(t, Table::Ranges, &key)?;
            }
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
            let held = self.found.as_ref().is_some_and(|f| f.live.contains(ip));
            if *n == 1 && !held {
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
    fn resolve(&mut self, t: &mut dyn Tables, at: RecordKey) -> Result<(), Error> {
        let (side, frontend) = at;
        let winner = self
            .claims
            .get(&at)
            .and_then(|c| c.first())
            .and_then(|(_, claim)| {
                let set = self.sets.get(&claim.set)?;
                Some(Record {
                    set: set.id,
                    affinity: claim.affinity,
                    flags: claim.flags,
                })
            });
        if self.claims.get(&at).is_some_and(Vec::is_empty) {
            self.claims.remove(&at);
        }
        match winner {
            Some(record) => {
                if self.records.get(&at) != Some(&record) {
                    self.put(t, side.table(), &frontend.key(), &record.bytes())?;
                    self.records.insert(at, record);
                }
            }
            None => {
                if self.records.remove(&at).is_some() {
                    self.delete(t, side.table(), &frontend.key())?;
                }
            }
        }
        Ok(())
    }

    /// Makes set `name` hold `want`: a set it has, changed in place; one
    /// the maps held before a full round (`hint`: the set a record of it
    /// led to), adopted and changed in place; or a new one.
    fn write_set(
        &mut self,
        t: &mut dyn Tables,
        name: &SetName,
        want: &[Endpoint],
        members: bool,
        hint: Option<u32>,
    ) -> Result<(), Error> {
        // A set the maps held is taken only as it is: changing it in place
        // could show its new endpoints to records of another set that
        // still lead to it until they are rewritten.
        let same = |slots: &Vec<Endpoint>| {
            let (mut a, mut b) = (slots.clone(), want.to_vec());
            a.sort();
            b.sort();
            a == b
        };
        let adopted = hint.and_then(|id| {
            let found = self.found.as_mut()?;
            if !found.sets.get(&id).is_some_and(same) {
                return None;
            }
            let slots = found.sets.remove(&id)?;
            Some(SetState {
                id,
                slots,
                // Members are reconciled at the end of a full round.
                members,
            })
        });
        let mut set = match (self.sets.remove(name), adopted) {
            (Some(set), _) | (None, Some(set)) => set,
            (None, None) => SetState {
                id: self.alloc(),
                slots: Vec::new(),
                members,
            },
        };
        let result = self.change_set(t, &mut set, want, members);
        self.sets.insert(name.clone(), set);
        result
    }

    /// Takes `set` to `want`: gone endpoints' slots take new ones, the
    /// set grows past its end, and holes left are filled from its end;
    /// then only the pages that changed are written, the count (page 0)
    /// last.
    fn change_set(
        &mut self,
        t: &mut dyn Tables,
        set: &mut SetState,
        want: &[Endpoint],
        members: bool,
    ) -> Result<(), Error> {
        let id = set.id;
        if set.slots.is_empty() {
            return self.fill_set(t, set, want, members);
        }
        let old = set.slots.clone();
        let have: HashSet<Endpoint> = old.iter().copied().collect();
        let wanted: HashSet<Endpoint> = want.iter().copied().collect();
        let added: Vec<Endpoint> = want.iter().copied().filter(|e| !have.contains(e)).collect();
        let removed: Vec<Endpoint> = old
            .iter()
            .copied()
            .filter(|e| !wanted.contains(e))
            .collect();
        let keep_members = self.found.is_none();
        if keep_members && members {
            let all: &[Endpoint] = if set.members { &added } else { want };
            for ep in all {
                self.put(t, Table::Members, &member_key(id, ep), &[1])?;
            }
        }

        // The new arrangement.
        let mut slots = old.clone();
        let holes: Vec<usize> = (0..slots.len())
            .filter(|&i| !wanted.contains(&slots[i]))
            .collect();
        let mut added_iter = added.iter().copied();
        let mut left: std::collections::VecDeque<usize> = std::collections::VecDeque::new();
        for &hole in &holes {
            match added_iter.next() {
                Some(ep) => slots[hole] = ep,
                None => left.push_back(hole),
            }
        }
        slots.extend(added_iter);
        let mut len = slots.len();
        loop {
            while len > 0 && left.back() == Some(&(len - 1)) {
                left.pop_back();
                len -= 1;
            }
            let Some(hole) = left.pop_front() else {
                break;
            };
            slots[hole] = slots[len - 1];
            len -= 1;
        }
        slots.truncate(len);

        // The pages to write: those with a slot that changed, below the
        // larger count. Pages other than the first keep the old tail
        // until the count drops, so that a reader of the old count finds
        // endpoints there.
        let (old_len, new_len) = (old.len(), slots.len());
        let content = |i: usize| -> Option<Endpoint> {
            slots.get(i).copied().or_else(|| old.get(i).copied())
        };
        let pages = old_len.max(new_len).div_ceil(PAGE);
        for page in 1..pages {
            let range = page * PAGE..(page + 1) * PAGE;
            let dirty = range.clone().any(|i| content(i) != old.get(i).copied());
            if dirty && page * PAGE < new_len {
                let page_slots: Vec<Option<Endpoint>> = range.map(content).collect();
                self.put(
                    t,
                    Table::Slots,
                    &slot_key(id, index(page)),
                    &page_bytes(0, &page_slots),
                )?;
            }
        }
        let first_dirty = new_len != old_len || (0..PAGE).any(|i| slots.get(i) != old.get(i));
        if first_dirty {
            if new_len == 0 {
                self.delete(t, Table::Slots, &slot_key(id, 0))?;
            } else {
                let page_slots: Vec<Option<Endpoint>> =
                    (0..PAGE).map(|i| slots.get(i).copied()).collect();
                self.put(
                    t,
                    Table::Slots,
                    &slot_key(id, 0),
                    &page_bytes(index(new_len), &page_slots),
                )?;
            }
        }
        for page in new_len.div_ceil(PAGE).max(1)..old_len.div_ceil(PAGE) {
            self.later.push(slot_key(id, index(page)));
        }
        if keep_members {
            let gone: Vec<Endpoint> = if set.members && !members {
                old.clone()
            } else if members {
                removed
            } else {
                Vec::new()
            };
            for ep in &gone {
                self.delete(t, Table::Members, &member_key(id, ep))?;
            }
        }
        set.slots = slots;
        set.members = members;
        Ok(())
    }

    /// Fills an empty set: its members, its pages after the first, then
    /// the first (the count).
    fn fill_set(
        &mut self,
        t: &mut dyn Tables,
        set: &mut SetState,
        want: &[Endpoint],
        members: bool,
    ) -> Result<(), Error> {
        let id = set.id;
        if members && self.found.is_none() {
            for ep in want {
                self.put(t, Table::Members, &member_key(id, ep), &[1])?;
            }
        }
        let page = |n: usize| -> Vec<Option<Endpoint>> {
            (n * PAGE..(n + 1) * PAGE)
                .map(|i| want.get(i).copied())
                .collect()
        };
        for n in (1..want.len().div_ceil(PAGE)).rev() {
            self.put(
                t,
                Table::Slots,
                &slot_key(id, index(n)),
                &page_bytes(0, &page(n)),
            )?;
        }
        if !want.is_empty() {
            self.put(
                t,
                Table::Slots,
                &slot_key(id, 0),
                &page_bytes(index(want.len()), &page(0)),
            )?;
        }
        set.slots = want.to_vec();
        set.members = members;
        Ok(())
    }

    fn drop_set(&mut self, t: &mut dyn Tables, name: &SetName) -> Result<(), Error> {
        let Some(set) = self.sets.remove(name) else {
            return Ok(());
        };
        // The count first (page 0): the set is empty from then on; its
        // other pages next round.
        if !set.slots.is_empty() {
            self.delete(t, Table::Slots, &slot_key(set.id, 0))?;
        }
        for page in 1..set.slots.len().div_ceil(PAGE) {
            self.later.push(slot_key(set.id, index(page)));
        }
        if set.members {
            for ep in &set.slots {
                self.delete(t, Table::Members, &member_key(set.id, ep))?;
            }
        }
        self.quarantine.push(set.id);
        Ok(())
    }
}

/// A slot or page number: sets hold far fewer than 2^32 endpoints.
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

    /// The endpoints a frontend's record leads to, in slot order, reading
    /// the count and the pages as a program does; `Err` names a page
    /// missing below the count.
    fn lookup(t: &Recorder, frontend: &Frontend) -> Result<Vec<Endpoint>, String> {
        let Some(value) = t.value(Table::Services, &frontend.key()) else {
            return Ok(Vec::new());
        };
        let mut v = [0u8; 16];
        v.copy_from_slice(value);
        let set = Record::from_bytes(&v).set;
        let Some(first) = t.value(Table::Slots, &slot_key(set, 0)) else {
            return Ok(Vec::new());
        };
        let (count, _) = layout::page_of(first);
        (0..count as usize)
            .map(|i| {
                let page = t
                    .value(Table::Slots, &slot_key(set, index(i / PAGE)))
                    .ok_or(format!(
                        "page {} of set {set} missing, count {count}",
                        i / PAGE
                    ))?;
                Ok(layout::page_of(page).1[i % PAGE])
            })
            .collect()
    }

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
            let frontends: Vec<Frontend> = self
                .inner
                .tables
                .get(&Table::Services)
                .map(|t| {
                    t.keys()
                        .filter_map(|k| <[u8; 20]>::try_from(k.as_slice()).ok())
                        .map(|k| Frontend::from_key(&k))
                        .collect()
                })
                .unwrap_or_default();
            for frontend in frontends {
                match lookup(&self.inner, &frontend) {
                    Err(e) => self.violations.push(e),
                    Ok(eps) => {
                        for ep in eps {
                            if !self.allowed.contains(&ep) {
                                self.violations.push(format!("{ep} is not an endpoint"));
                            }
                        }
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
        fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
            self.inner.get(table, key)
        }
    }

    fn endpoint(i: u8) -> Endpoint {
        Endpoint {
            ip: IpAddr::from([10, 244, 0, i]),
            port: 8080,
            local: i.is_multiple_of(3),
        }
    }

    fn frontend(i: u8) -> Frontend {
        Frontend {
            ip: IpAddr::from([10, 96, 0, i]),
            port: 80,
            proto: crate::layout::TCP,
        }
    }

    /// Service `web-<i>`, one port, its ClusterIP 10.96.0.<i> on `eps`.
    fn single(i: u8, eps: &[Endpoint], affinity: bool) -> (ServiceName, Contribution) {
        let service = ServiceName::new("t", format!("web-{i}"));
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
            (Side::Socket, frontend(i)),
            Claim {
                set,
                affinity: if affinity { 60 } else { 0 },
                flags: if eps.is_empty() {
                    EMPTY_REJECT
                } else {
                    EMPTY_DROP
                },
            },
        );
        c.live.insert(frontend(i).ip);
        (service, c)
    }

    fn sorted(mut eps: Vec<Endpoint>) -> Vec<Endpoint> {
        eps.sort();
        eps
    }

    proptest! {
        /// Any sequence of endpoint lists (up to 40 endpoints: 5 pages):
        /// after every single write the Service is whole; after each round
        /// the maps hold exactly the endpoints asked for, each once, with
        /// no page or member left over; and a round writes O(change)
        /// elements.
        #[test]
        fn sets_change_in_place_and_stay_whole(
            steps in proptest::collection::vec(proptest::collection::btree_set(0u8..48, 0..40), 1..10),
            affinity in any::<bool>(),
        ) {
            let mut state = State::default();
            let mut t = Checked::default();
            let mut before: Vec<Endpoint> = Vec::new();
            for step in steps {
                let want: Vec<Endpoint> = step.iter().map(|&i| endpoint(i)).collect();
                t.allowed = before.iter().chain(&want).copied().collect();
                state.begin_round(&mut t).expect("begin");
                let (name, c) = single(1, &want, affinity);
                state.take_writes();
                state.update_service(&mut t, &name, c).expect("update");
                prop_assert!(t.violations.is_empty(), "{:?}", t.violations);
                let got = lookup(&t.inner, &frontend(1)).expect("whole");
                prop_assert_eq!(sorted(got), sorted(want.clone()));
                let writes = state.take_writes();
                // The pages past the count go at the next round's start.
                state.begin_round(&mut t).expect("begin");
                let deferred = state.take_writes();
                prop_assert!(t.violations.is_empty(), "{:?}", t.violations);
                let pages = t.inner.keys(Table::Slots).expect("keys").len();
                prop_assert_eq!(pages, want.len().div_ceil(PAGE));
                let members = t.inner.keys(Table::Members).expect("keys").len();
                prop_assert_eq!(members, if affinity { want.len() } else { 0 });
                let added = want.iter().filter(|e| !before.contains(e)).count();
                let removed = before.iter().filter(|e| !want.contains(e)).count();
                let writes = writes + deferred;
                // Pages: at most one per endpoint added or removed, one
                // per page moved from or deleted, and page 0; members:
                // one per endpoint added or removed; the record and live
                // ClusterIP the first time.
                let bound = if affinity { 3 } else { 2 } * (added + removed) + 3;
                prop_assert!(writes <= bound, "{} writes for +{} -{}", writes, added, removed);
                before = want;
            }
        }

        /// A full round onto what another run left adopts it: onto the
        /// same state it writes nothing, onto another it writes no more
        /// than rewriting would, and the maps end as a fresh run's would.
        #[test]
        fn a_full_round_adopts_what_the_maps_hold(
            old in proptest::collection::vec(proptest::collection::btree_set(0u8..48, 0..20), 1..5),
            new in proptest::collection::vec(proptest::collection::btree_set(0u8..48, 0..20), 1..5),
        ) {
            let services = |lists: &[BTreeSet<u8>]| -> Vec<(ServiceName, Contribution)> {
                lists
                    .iter()
                    .enumerate()
                    .map(|(i, l)| {
                        let eps: Vec<Endpoint> = l.iter().map(|&e| endpoint(e)).collect();
                        single(u8::try_from(i).unwrap_or(0), &eps, i % 2 == 1)
                    })
                    .collect()
            };
            let mut t = Recorder::default();
            let mut first = State::default();
            first.replace_all(&mut t, &mut services(&old).into_iter(), &[]).expect("first run");

            // A restart onto the same state: nothing written.
            let mut same = State::default();
            same.replace_all(&mut t, &mut services(&old).into_iter(), &[]).expect("same");
            prop_assert_eq!(same.take_writes(), 0);

            // A restart onto another state: the maps end as a fresh run's.
            let mut other = State::default();
            other.replace_all(&mut t, &mut services(&new).into_iter(), &[]).expect("other");
            let mut fresh_t = Recorder::default();
            let mut fresh = State::default();
            fresh.replace_all(&mut fresh_t, &mut services(&new).into_iter(), &[]).expect("fresh");
            prop_assert!(other.take_writes() <= fresh.take_writes() + t.keys(Table::Slots).map(|k| k.len()).unwrap_or(0) + 64);
            for (i, list) in new.iter().enumerate() {
                let want: Vec<Endpoint> = list.iter().map(|&e| endpoint(e)).collect();
                let got = lookup(&t, &frontend(u8::try_from(i).unwrap_or(0))).expect("whole");
                prop_assert_eq!(sorted(got), sorted(want));
            }
            for table in [Table::Services, Table::Slots, Table::Members, Table::Live] {
                prop_assert_eq!(
                    t.keys(table).expect("keys").len(),
                    fresh_t.keys(table).expect("keys").len(),
                    "{:?}", table
                );
            }
        }
    }
}
