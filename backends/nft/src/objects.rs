//! Desired nft objects, what changed since the last applied sync, and the
//! netlink transactions between them.

use std::collections::BTreeMap;

use kpng_netfilter::Error;
use kpng_netfilter::nft::{
    Chain, Data, DataRef, Element, ElementList, NfVerdict, Rule, Set, Socket, Table, Transaction,
};

use crate::claims::Claims;
use crate::render::{
    ChainDef, Elem, Key, NODEPORT_CLASSES, NODEPORT_KEYS, Pick, Render, SERVICE_CLASSES,
    SERVICE_KEYS, SetName, Value, prefix_of,
};

/// The objects of one family's table, with reference counts: Service
/// ports alike share a chain, and several Services may contribute the
/// same hairpin pair.
#[derive(Clone, Debug, Default)]
pub(crate) struct Objects {
    pub(crate) chains: BTreeMap<String, (ChainDef, u32)>,
    pub(crate) sets: BTreeMap<String, (Set, u32)>,
    pub(crate) elements: BTreeMap<SetName, Claims>,
}

/// What the kernel held, before the changes since the last applied sync,
/// of each name those changes touched. Recorded at the first touch, when
/// the desired objects still equal the applied ones: the kernel's state
/// needs no copy of its own.
#[derive(Clone, Debug, Default)]
pub(crate) struct Pending {
    chains: BTreeMap<String, Option<ChainDef>>,
    sets: BTreeMap<String, Option<Set>>,
    elements: BTreeMap<SetName, BTreeMap<Key, Option<Elem>>>,
}

impl Pending {
    /// Whether the changes can be made in place: the kernel cannot change
    /// a set's declaration or a base chain's hook, so such a change takes
    /// a full sync.
    pub(crate) fn in_place(&self, desired: &Objects) -> bool {
        let sets = self
            .sets
            .iter()
            .all(|(name, was)| match (was, desired.sets.get(name)) {
                (Some(old), Some((new, _))) => old == new,
                _ => true,
            });
        let chains = self
            .chains
            .iter()
            .all(|(name, was)| match (was, desired.chains.get(name)) {
                (Some(old), Some((new, _))) => old.base == new.base,
                _ => true,
            });
        sets && chains
    }
}

/// Records in `pending` which element held `e`'s key in `set`, unless
/// recorded since the last applied sync.
fn record_holder(pending: Option<&mut Pending>, set: &SetName, claims: &Claims, e: &Elem) {
    if let Some(p) = pending {
        let keys = p.elements.entry(set.clone()).or_default();
        keys.entry(e.key).or_insert_with(|| claims.holder(&e.key));
    }
}

/// Records in `was` what `objects` held under `name`, unless recorded
/// since the last applied sync.
fn record<V: Clone>(
    objects: &BTreeMap<String, (V, u32)>,
    was: Option<&mut BTreeMap<String, Option<V>>>,
    name: &str,
) {
    if let Some(was) = was {
        let now = objects.get(name).map(|(v, _)| v.clone());
        was.entry(name.to_owned()).or_insert(now);
    }
}

/// One more user of `name` (made with `value` by the first).
fn hold<V: Clone>(
    objects: &mut BTreeMap<String, (V, u32)>,
    was: Option<&mut BTreeMap<String, Option<V>>>,
    name: &str,
    value: &V,
) {
    record(objects, was, name);
    objects
        .entry(name.to_owned())
        .or_insert_with(|| (value.clone(), 0))
        .1 += 1;
}

/// One user fewer of `name`: gone with its last, unless `keep` says so.
fn release<V: Clone>(
    objects: &mut BTreeMap<String, (V, u32)>,
    was: Option<&mut BTreeMap<String, Option<V>>>,
    name: &str,
    keep: impl Fn(&V) -> bool,
) {
    record(objects, was, name);
    if let Some((value, n)) = objects.get_mut(name) {
        *n = n.saturating_sub(1);
        if *n == 0 && !keep(value) {
            objects.remove(name);
        }
    }
}

impl Objects {
    /// Removes a render's contributions, recording what was there first
    /// in `pending` (not needed for a full sync, which replaces all).
    pub(crate) fn remove(&mut self, render: &Render, mut pending: Option<&mut Pending>) {
        for name in render.chains.keys() {
            let was = pending.as_deref_mut().map(|p| &mut p.chains);
            release(&mut self.chains, was, name, |chain| chain.retain);
        }
        for name in render.sets.keys() {
            let was = pending.as_deref_mut().map(|p| &mut p.sets);
            // A class's set stays with its chain.
            let class = self
                .chains
                .get(name)
                .is_some_and(|(chain, _)| chain.class.is_some());
            release(&mut self.sets, was, name, |_| class);
        }
        for (set, elements) in &render.elements {
            let counts = self.elements.entry(set.clone()).or_default();
            for e in elements {
                record_holder(pending.as_deref_mut(), set, counts, e);
                counts.remove(e);
            }
            if counts.is_empty() {
                self.elements.remove(set);
            }
        }
    }

    /// Orders the rules of the classes chains by how many keys each
    /// class's set holds, most first (then by name), so that the most
    /// used classes are found after the fewest lookups. For a full sync,
    /// which writes the chains whole; an incremental one appends.
    pub(crate) fn order_classes(&mut self) {
        for classes in [SERVICE_CLASSES, NODEPORT_CLASSES] {
            let mut rules: Vec<(usize, &String, &Vec<_>)> = self
                .chains
                .iter()
                .filter_map(|(name, (chain, _))| match &chain.class {
                    Some((to, rule)) if *to == classes => {
                        let keys = self.elements.get(name.as_str()).map_or(0, Claims::len);
                        Some((keys, name, rule))
                    }
                    _ => None,
                })
                .collect();
            rules.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
            let rules: Vec<_> = rules.into_iter().map(|(_, _, rule)| rule.clone()).collect();
            if let Some((chain, _)) = self.chains.get_mut(classes) {
                chain.rules = rules;
            }
        }
    }

    /// Gives back what the element tables' growth left unused (after a
    /// full sync, when they hold the whole view).
    pub(crate) fn shrink(&mut self) {
        self.elements.values_mut().for_each(Claims::shrink);
    }

    /// Adds a render's contributions, recording in `pending` what was
    /// there first.
    pub(crate) fn add(&mut self, render: &Render, mut pending: Option<&mut Pending>) {
        // A shared chain's rules are the same for every user.
        for (name, chain) in &render.chains {
            let new = !self.chains.contains_key(name);
            let was = pending.as_deref_mut().map(|p| &mut p.chains);
            hold(&mut self.chains, was, name, chain);
            // A class first used: its rule goes last in its classes chain.
            if let (true, Some((classes, rule))) = (new, &chain.class) {
                let was = pending.as_deref_mut().map(|p| &mut p.chains);
                record(&self.chains, was, classes);
                if let Some((chain, _)) = self.chains.get_mut(*classes) {
                    chain.rules.push(rule.clone());
                }
            }
        }
        for (name, set) in &render.sets {
            let was = pending.as_deref_mut().map(|p| &mut p.sets);
            hold(&mut self.sets, was, name, set);
        }
        for (set, elements) in &render.elements {
            let counts = self.elements.entry(set.clone()).or_default();
            for e in elements {
                record_holder(pending.as_deref_mut(), set, counts, e);
                counts.add(e);
            }
        }
    }

    /// The kernel's elements of `set`: one per key, or for an interval
    /// set the merged ranges of its prefixes.
    pub(crate) fn kernel_elements(&self, table: &Table, set: &Set) -> Vec<Element> {
        let Some(elements) = self.elements.get(set.name.as_str()) else {
            return Vec::new();
        };
        if set.interval {
            let prefixes = elements
                .holders(&set.name)
                .filter_map(|e| prefix_of(&e.key));
            return Element::ranges(table.family, prefixes);
        }
        elements.holders(&set.name).map(|e| element(&e)).collect()
    }

    /// Whether the kernel's table holds exactly these objects: the same
    /// chains (hooks, and rules expression by expression) and sets
    /// (declarations, and elements but for the sets the data path fills).
    /// Read layout first and then set by set, stopping at the first
    /// difference. A restart onto what the previous run left then needs no
    /// transaction at all.
    pub(crate) fn matches(&self, table: &Table, socket: &mut Socket) -> Result<bool, Error> {
        let Some(state) = socket.read_layout(table)? else {
            return Ok(false);
        };
        if state.sets.len() != self.sets.len() || state.chains.len() != self.chains.len() {
            return Ok(false);
        }
        let chains = state.chains.iter().all(|have| {
            let Some((want, _)) = self.chains.get(&have.name) else {
                return false;
            };
            have.hook == want.base.map(|b| (b.hook, b.priority))
                && have.comment.as_deref() == want.comment.as_deref()
                && have.rules.len() == want.rules.len()
                && have.rules.iter().zip(&want.rules).all(|(rule, exprs)| {
                    rule.exprs.len() == exprs.len()
                        && rule
                            .exprs
                            .iter()
                            .zip(exprs)
                            .all(|(raw, e)| raw.decode().as_ref() == Some(e))
                })
        });
        let declared = state.sets.iter().all(|have| {
            self.sets.get(&have.name).is_some_and(|(want, _)| {
                have.key == want.key
                    && have.map == want.map
                    && have.interval == want.interval
                    && have.timeout == want.timeout
                    && have.counter == want.counter
            })
        });
        if !chains || !declared {
            return Ok(false);
        }
        let sort = |mut v: Vec<Element>| {
            v.sort_unstable_by(|a, b| (&a.key, a.interval_end).cmp(&(&b.key, b.interval_end)));
            v
        };
        for (want, _) in self.sets.values() {
            // A set with timeouts is the data path's (affinity clients).
            if want.timeout {
                continue;
            }
            let have = socket.read_elements(table, &want.name)?;
            let want = self.kernel_elements(table, want);
            if have.len() != want.len() || sort(have) != sort(want) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The transaction that replaces the whole table with these objects:
    /// add it (so that the delete cannot fail), delete it, and make it
    /// again with everything in it. Rules and elements may name any chain
    /// or set, so all of those come first.
    pub(crate) fn full(&self, table: &Table, tx: &mut Transaction) {
        tx.add_table(table).delete_table(table).add_table(table);
        for (set, _) in self.sets.values() {
            let set = match self.size_of(&set.name) {
                Some(size) => set.clone().with_size(size),
                None => set.clone(),
            };
            tx.add_set(table, set);
        }
        for (name, (chain, _)) in &self.chains {
            tx.add_chain(table, chain_of(name, chain));
        }
        for (name, (chain, _)) in &self.chains {
            for rule in &chain.rules {
                tx.add_rule(table, Rule::new(name.as_str(), rule.clone()));
            }
        }
        // Added in runs, so that no set's elements are ever held twice
        // whole (the pick maps hold ~100k at 10k Services).
        const RUN: usize = 4096;
        for (set, _) in self.sets.values() {
            if set.interval {
                tx.add_elements(table, &set.name, self.kernel_elements(table, set));
                continue;
            }
            let Some(elements) = self.elements.get(set.name.as_str()) else {
                continue;
            };
            // In runs, without a list of them all, flat: nothing is
            // allocated per element.
            let mut run = ElementList::with_capacity(RUN.min(elements.len()));
            for e in elements.holders(&set.name) {
                let data = match &e.value {
                    Value::None => None,
                    Value::Goto(chain) => Some(DataRef::Goto(chain)),
                    Value::Jump(chain) => Some(DataRef::Jump(chain)),
                    Value::Target(t) => Some(DataRef::Value(t.as_slice())),
                };
                run.push(e.key.as_slice(), data, e.comment.as_deref());
                if run.len() == RUN {
                    let full = std::mem::replace(&mut run, ElementList::with_capacity(RUN));
                    tx.add_element_list(table, &set.name, full);
                }
            }
            tx.add_element_list(table, &set.name, run);
        }
    }

    /// The size a full sync declares the pick map `name` with (the
    /// maps holding an element per endpoint), or a set of keys of 32,768
    /// or more: twice its elements, a power of two, at least 65,536. The
    /// kernel then makes its hash table once, at that size, instead of
    /// growing it while a million elements go in (1.5 s of system time at
    /// a million). The size is also the
    /// most the map holds: a change that would go past it is made a full
    /// sync ([`Objects::outgrown`]). `None` for other sets.
    pub(crate) fn size_of(&self, name: &str) -> Option<u32> {
        sized_sets().find(|s| *s == name)?;
        let len = self.elements.get(name).map_or(0, Claims::len);
        // The keys' sets are a tenth of the pick maps: declared only when
        // large; a small one grows as it fills, as before (a declared size
        // costs its buckets, 128 KiB at 8,192, in every small node).
        if (name == SERVICE_KEYS || name == NODEPORT_KEYS) && len < 1 << 15 {
            return None;
        }
        Some(sized(len))
    }

    /// Whether a pick map now holds more elements than `declared` (the
    /// sizes the last full sync gave them) allows.
    pub(crate) fn outgrown(&self, declared: &BTreeMap<&'static str, u32>) -> bool {
        sized_sets().any(|name| {
            let len = self.elements.get(name).map_or(0, Claims::len);
            declared
                .get(name)
                .is_some_and(|size| len > usize::try_from(*size).unwrap_or(usize::MAX))
        })
    }

    /// The sizes a full sync of these objects declares the pick maps with.
    pub(crate) fn declared_sizes(&self) -> BTreeMap<&'static str, u32> {
        sized_sets()
            .filter_map(|name| Some((name, self.size_of(name)?)))
            .collect()
    }

    /// The transaction that turns the applied table into these objects,
    /// for the names `pending` touched: new sets and chains first, changed
    /// chains flushed and filled, elements deleted then added, and what is
    /// gone emptied, then deleted once nothing points at it.
    pub(crate) fn incremental(&self, table: &Table, pending: &Pending, tx: &mut Transaction) {
        for (name, was) in &pending.sets {
            if let (None, Some(set)) = (was, self.set(name)) {
                tx.add_set(table, set.clone());
            }
        }
        let gone_chains = self.write_chains(table, pending, tx);
        self.write_elements(table, pending, tx);
        // Gone chains may point at each other (an affinity chain's rules
        // name its endpoint sets, its map names its endpoint chains):
        // empty them all, delete the sets, then the chains.
        for name in &gone_chains {
            tx.flush_chain(table, name);
        }
        for (name, was) in &pending.sets {
            if was.is_some() && self.set(name).is_none() {
                tx.delete_set(table, name);
            }
        }
        for name in gone_chains {
            tx.delete_chain(table, name);
        }
    }

    fn set(&self, name: &str) -> Option<&Set> {
        self.sets.get(name).map(|(s, _)| s)
    }

    /// Adds new chains and flushes changed ones, then fills both (once
    /// every chain exists: rules may point at each other). Returns the
    /// chains that are gone, for the caller to remove last.
    fn write_chains<'p>(
        &self,
        table: &Table,
        pending: &'p Pending,
        tx: &mut Transaction,
    ) -> Vec<&'p String> {
        let mut refill = Vec::new();
        let mut gone = Vec::new();
        for (name, was) in &pending.chains {
            match (was, self.chains.get(name).map(|(c, _)| c)) {
                (None, Some(chain)) => {
                    tx.add_chain(table, chain_of(name, chain));
                    refill.push((name, chain));
                }
                (Some(old), Some(chain)) if old != chain => {
                    tx.flush_chain(table, name);
                    refill.push((name, chain));
                }
                (Some(_), None) => gone.push(name),
                _ => {}
            }
        }
        for (name, chain) in refill {
            for rule in &chain.rules {
                tx.add_rule(table, Rule::new(name.as_str(), rule.clone()));
            }
        }
        gone
    }

    /// The elements `pending` touched: deleted, then added (an interval
    /// set, whose ranges merge, is written whole). Elements of a set that
    /// goes are deleted too: a verdict map's elements hold the chains
    /// they point at.
    fn write_elements(&self, table: &Table, pending: &Pending, tx: &mut Transaction) {
        let mut adds = Vec::new();
        for (set_name, keys) in &pending.elements {
            let was_set = pending.sets.get(set_name.as_ref());
            let Some(set) = self
                .set(set_name)
                .or_else(|| was_set.and_then(Option::as_ref))
            else {
                continue;
            };
            let (is_new, is_gone) = (matches!(was_set, Some(None)), self.set(set_name).is_none());
            tx.describe(table, set);
            let wanted = self.elements.get(set_name);
            if set.interval {
                let changed = keys
                    .iter()
                    .any(|(key, was)| *was != wanted.and_then(|e| e.holder(key)));
                if changed && !is_gone {
                    if !is_new {
                        tx.flush_set(table, set_name);
                    }
                    adds.push((set_name, self.kernel_elements(table, set)));
                }
                continue;
            }
            let (mut add, mut del) = (Vec::new(), Vec::new());
            for (key, was) in keys {
                let now = wanted.and_then(|w| w.holder(key));
                if *was != now {
                    del.extend(was.as_ref().map(element));
                    add.extend(now.as_ref().map(element));
                }
            }
            tx.delete_elements(table, set_name, del);
            if !is_gone {
                adds.push((set_name, add));
            }
        }
        for (set, elements) in adds {
            tx.add_elements(table, set, elements);
        }
    }
}

fn chain_of(name: &str, chain: &ChainDef) -> Chain {
    Chain {
        name: name.to_owned(),
        base: chain.base,
        comment: chain.comment.as_deref().map(str::to_owned),
    }
}

/// An element in the kernel's form.
fn element(e: &Elem) -> Element {
    let key = e.key.as_slice().to_vec();
    let element = match &e.value {
        Value::None => Element::key(key),
        Value::Goto(chain) => Element::map(key, Data::Verdict(NfVerdict::Goto(chain.to_string()))),
        Value::Jump(chain) => Element::map(key, Data::Verdict(NfVerdict::Jump(chain.to_string()))),
        Value::Target(t) => Element::map(key, Data::Value(t.as_slice().to_vec())),
    };
    match &e.comment {
        Some(comment) => element.with_comment(comment.as_ref()),
        None => element,
    }
}

/// The sets declared with their size: the pick maps (an element per
/// endpoint) and the keys of the Service ports of a class (one per port
/// and address). The kernel's fixed-size hash then holds them, made once;
/// the growing one rehashed as 100k elements went in.
fn sized_sets() -> impl Iterator<Item = &'static str> {
    Pick::ALL
        .iter()
        .map(|p| p.map())
        .chain([SERVICE_KEYS, NODEPORT_KEYS])
}

/// A pick map's declared size for `len` elements: see
/// [`Objects::size_of`].
fn sized(len: usize) -> u32 {
    let want = len.saturating_mul(2).max(1 << 16).next_power_of_two();
    u32::try_from(want).unwrap_or(1 << 31)
}
