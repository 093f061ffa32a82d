//! Adoption: a full round (the first, or one after a failure) reads back
//! what the maps hold, pinned by a previous run or left by a failed
//! round, and adopts it: sets its records lead to are changed in place,
//! and only what no Service wants is deleted, last.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;

use kpng_model::{IpNet, ServiceName};

use super::{Contribution, RecordKey, Side, State, index};
use crate::Error;
use crate::layout::{self, Endpoint, Frontend, PAGE, Record, member_key, slot_key};
use crate::tables::{Table, Tables};

/// What the maps held when a full round began, for it to adopt.
#[derive(Debug, Default)]
pub(super) struct Found {
    /// Each record, by side and frontend.
    pub(super) records: HashMap<RecordKey, Record>,
    /// Each set's endpoints in slot order.
    pub(super) sets: HashMap<u32, Vec<Endpoint>>,
    /// The live ClusterIPs.
    pub(super) live: HashSet<IpAddr>,
    /// The keys of every page (set, page).
    pages: Vec<(u32, u32)>,
    /// The keys of every member.
    members: Vec<Vec<u8>>,
    /// The keys of every source range.
    pub(super) ranges: Vec<Vec<u8>>,
    /// Each set's Maglev table.
    pub(super) maglev: HashMap<u32, Vec<u8>>,
}

/// The page of slot `i`.
fn page_of_slot(i: usize) -> usize {
    i / PAGE
}

impl State {
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
        for key in t.keys(Table::Maglev)? {
            let Ok(k) = <[u8; 4]>::try_from(key.as_slice()) else {
                continue;
            };
            if let Some(value) = t.get(Table::Maglev, &key)? {
                found.maglev.insert(u32::from_ne_bytes(k), value);
            }
        }
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
        // Maglev tables of sets that have none now.
        let tables: HashSet<u32> = self
            .sets
            .values()
            .filter(|s| s.maglev)
            .map(|s| s.id)
            .collect();
        let mut stale: Vec<u32> = found
            .maglev
            .keys()
            .filter(|id| !tables.contains(id))
            .copied()
            .collect();
        stale.sort_unstable();
        for id in stale {
            self.delete(t, Table::Maglev, &id.to_ne_bytes())?;
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
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use kpng_model::ServiceName;
    use proptest::prelude::*;

    use crate::layout::Endpoint;
    use crate::state::testing::{endpoint, frontend, lookup, single, sorted};
    use crate::state::{Contribution, State};
    use crate::tables::{Recorder, Table, Tables};

    proptest! {
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
