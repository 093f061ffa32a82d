//! The writes of a round, in the order that keeps every Service usable
//! at every moment.
//!
//! A round compares a changed Service's new contribution with its last
//! one and writes the difference:
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
//!   a program may still have read it in;
//! - a set's Maglev table (indexes into its slots) is written after its
//!   slots. A flow from outside that starts between the two may find an
//!   index past the new count (it picks at random) or one whose slot took
//!   another endpoint (a live one): either way an endpoint of the set.

use std::collections::{BTreeSet, HashSet};
use std::net::IpAddr;

use kpng_model::{IpFamily, IpNet, ServiceName};

use super::{Contribution, RecordKey, SetName, SetState, State, index};
use crate::Error;
use crate::layout::{self, Endpoint, PAGE, Record, member_key, page_bytes, slot_key};
use crate::tables::{Table, Tables, cidr_bytes};

impl State {
    /// Starts a round: the pages the last one cut off go, then the set
    /// numbers it freed become reusable.
    pub(crate) fn begin_round(&mut self, t: &mut dyn Tables) -> Result<(), Error> {
        for key in std::mem::take(&mut self.later) {
            self.delete(t, Table::Slots, &key)?;
        }
        self.free.append(&mut self.quarantine);
        Ok(())
    }

    fn alloc(&mut self) -> u32 {
        if let Some(id) = self.free.pop() {
            return id;
        }
        self.next_id += 1;
        self.next_id
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
        self.usage.sub(&old.usage());
        self.usage.add(&new.usage());
        // 1. Sets first: whole before any record points at them.
        for (set, endpoints) in &new.sets {
            let members = new
                .records
                .values()
                .any(|c| c.affinity > 0 && &c.set == set);
            let maglev = new.maglev(set);
            let unchanged = old.sets.get(set) == Some(endpoints)
                && self
                    .sets
                    .get(set)
                    .is_some_and(|s| s.members == members && s.maglev == maglev);
            if !unchanged {
                let hint = new
                    .records
                    .iter()
                    .filter(|(_, c)| &c.set == set)
                    .find_map(|(f, _)| Some(self.found.as_ref()?.records.get(f)?.set));
                self.write_set(t, set, endpoints, (members, maglev), hint)?;
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
        (members, maglev): (bool, bool),
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
                // Its table, if any, is compared below.
                maglev: false,
            })
        });
        let mut set = match (self.sets.remove(name), adopted) {
            (Some(set), _) | (None, Some(set)) => set,
            (None, None) => SetState {
                id: self.alloc(),
                slots: Vec::new(),
                members,
                maglev: false,
            },
        };
        let before = (maglev && set.maglev).then(|| set.slots.clone());
        let result = self
            .change_set(t, &mut set, want, members)
            .and_then(|()| self.write_maglev(t, &mut set, maglev, before));
        self.sets.insert(name.clone(), set);
        result
    }

    /// Writes `set`'s Maglev table when it is to have one and its slots
    /// changed from `before` (none: it had no table), or deletes the
    /// table it no longer needs. In a full round, a table the maps hold
    /// as it should be is kept.
    fn write_maglev(
        &mut self,
        t: &mut dyn Tables,
        set: &mut SetState,
        maglev: bool,
        before: Option<Vec<Endpoint>>,
    ) -> Result<(), Error> {
        let key = set.id.to_ne_bytes();
        if maglev {
            if before.as_deref() != Some(set.slots.as_slice()) {
                let bytes = layout::maglev_bytes(&set.slots);
                let held = self
                    .found
                    .as_ref()
                    .and_then(|f| f.maglev.get(&set.id))
                    .is_some_and(|held| *held == bytes);
                if !held {
                    self.put(t, Table::Maglev, &key, &bytes)?;
                }
            }
        } else if set.maglev {
            self.delete(t, Table::Maglev, &key)?;
        }
        set.maglev = maglev;
        Ok(())
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
        if set.maglev {
            self.delete(t, Table::Maglev, &set.id.to_ne_bytes())?;
        }
        self.quarantine.push(set.id);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use proptest::prelude::*;

    use crate::Error;
    use crate::layout::{Endpoint, Frontend, PAGE};
    use crate::state::State;
    use crate::state::testing::{endpoint, from_outside, frontend, lookup, single, sorted};
    use crate::tables::{Recorder, Table, Tables, served};

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

        /// A Maglev Service's table follows its set through any sequence
        /// of endpoint lists and of balancing turned on and off: after
        /// each round it is there exactly while Maglev is asked for, and
        /// names each slot's endpoint as `kpng_model::maglev::table` of
        /// the set does (whatever the slot order); a restart onto the
        /// same state writes nothing, and the Service's removal leaves no
        /// table.
        #[test]
        fn maglev_tables_follow_their_sets(
            steps in proptest::collection::vec(
                (proptest::collection::btree_set(0u8..48, 0..30), any::<bool>()),
                1..8,
            ),
        ) {
            let mut state = State::default();
            let mut t = Recorder::default();
            for (step, maglev) in &steps {
                let want: Vec<Endpoint> = step.iter().map(|&i| endpoint(i)).collect();
                state.begin_round(&mut t).expect("begin");
                let (name, c) = from_outside(1, &want, *maglev);
                state.update_service(&mut t, &name, c).expect("update");
                let tables = t.keys(Table::Maglev).expect("keys").len();
                prop_assert_eq!(tables, usize::from(*maglev));
                let lines = served(&t).expect("served");
                let external: Vec<&String> =
                    lines.iter().filter(|l| l.starts_with("external ")).collect();
                prop_assert_eq!(external.len(), 1, "{:?}", lines);
                prop_assert_eq!(
                    external[0].contains(" table -> "),
                    *maglev,
                    "{:?}",
                    external
                );
            }
            let Some((last, maglev)) = steps.last() else { return Ok(()) };
            let want: Vec<Endpoint> = last.iter().map(|&i| endpoint(i)).collect();
            // (the pages the last round cut off go first, as at the next
            // round's start)
            state.begin_round(&mut t).expect("begin");
            t.take_lines();
            let mut again = State::default();
            again
                .replace_all(&mut t, &mut std::iter::once(from_outside(1, &want, *maglev)), &[])
                .expect("restart");
            prop_assert_eq!(again.take_writes(), 0, "{:?}", t.take_lines());
            let (name, _) = from_outside(1, &want, *maglev);
            again
                .update_service(&mut t, &name, Default::default())
                .expect("removal");
            prop_assert_eq!(t.keys(Table::Maglev).expect("keys").len(), 0);
        }
    }
}
