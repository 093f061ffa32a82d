//! The nftables subsystem: producers publish tables, chains with their
//! rules, sets and maps, and elements, as kernel objects
//! ([`kpng_netfilter::nft`]'s types), and the aggregator applies them over
//! nf_tables netlink, with no `nft` process.
//!
//! **Ownership**: a producer owns the tables it publishes (a table is
//! `family name`); nobody else may publish or delete anything in them.
//!
//! **Ordering between producers**: nftables runs every base chain of a
//! hook, in increasing priority; a packet dropped by one is not seen by
//! the next, and an `accept` only ends that chain. Two base chains of
//! different producers on the same family and hook must therefore have
//! different priorities: equal ones would run in an undefined order, so
//! such a publication is refused. Use nft's standard priorities as
//! anchors (`dstnat` = -100, `filter` = 0, `srcnat` = 100): the kpng
//! backend's NAT chains sit at `dstnat`, a firewall that must see
//! original destinations goes below -100, one that must see translated
//! ones above it.
//!
//! **Checks**, before anything reaches the kernel: names are 1 to 255
//! bytes with no NUL; every object's table is published; an element's set
//! is, and its key and value have the set's lengths and kinds; every set a
//! rule looks up and every chain a rule or element jumps to is published
//! in the same table. Each error names the object.
//!
//! Rules are lists of [`Expr`]s, which [`kpng_netfilter::nft::build`]
//! makes from nft's terms; over the unix socket they are JSON (see
//! [`crate::socket`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;

use kpng_netfilter::nft::{
    BaseChain, Chain, Data, Element, Expr, MapTo, Rule, Set, Socket, Table, Transaction,
};
use kpng_store::MapOp;
use kpng_store::MapSnapshot;

use crate::Subsystem;

pub use kpng_netfilter::nft::Family;

/// A table: the unit of ownership.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct TableName {
    /// Its family.
    pub family: Family,
    /// Its name.
    pub name: String,
}

impl TableName {
    fn table(&self) -> Table {
        Table::new(self.family, self.name.as_str())
    }
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "table {} {}", self.family, self.name)
    }
}

/// An element's identity in its set: its key bytes (each part of a
/// concatenation padded to 4 bytes), and for a range's end, the flag.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct ElementKey {
    /// The key, as registers hold it.
    pub key: Vec<u8>,
    /// In an interval set: this element ends a range.
    #[serde(default)]
    pub interval_end: bool,
}

/// One object, in its table.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Object {
    /// The table itself.
    Table,
    /// A chain.
    Chain(String),
    /// A set or map.
    Set(String),
    /// An element of a set or map.
    Element(String, ElementKey),
}

/// The identity of a published object.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct Key {
    /// Its table.
    pub table: TableName,
    /// The object.
    pub object: Object,
}

/// The content of a published object.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Value {
    /// A table. A new `epoch` replaces the table whole (deleted and made
    /// again with its content, in one transaction): a producer that lost
    /// track of the kernel asks for it this way.
    Table {
        /// The table's generation.
        epoch: u64,
    },
    /// A chain: its hook if it is a base chain, and its rules in order.
    Chain {
        /// The hook of a base chain.
        #[serde(default)]
        base: Option<BaseChain>,
        /// The rules, each a list of expressions.
        rules: Vec<Vec<Expr>>,
    },
    /// A set or map: its declaration (its elements are published apart).
    Set(Set),
    /// An element: what it maps to, and its own timeout.
    Element {
        /// In a map: the value or verdict.
        #[serde(default)]
        data: Option<Data>,
        /// In a set with timeouts: the element's, in milliseconds.
        #[serde(default)]
        timeout_ms: Option<u64>,
    },
}

/// A producer's whole publication, built table by table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fragment {
    entries: imbl::OrdMap<Key, Value>,
}

/// Adds objects to one table of a [`Fragment`].
#[derive(Debug)]
pub struct TableBuilder<'a> {
    fragment: &'a mut Fragment,
    table: TableName,
}

impl Fragment {
    /// An empty fragment (publishing it removes everything the producer
    /// had).
    pub fn new() -> Self {
        Self::default()
    }

    /// Declares a table and returns a builder for its content.
    pub fn table(&mut self, family: Family, name: &str) -> TableBuilder<'_> {
        let table = TableName {
            family,
            name: name.to_owned(),
        };
        self.entries.insert(
            Key {
                table: table.clone(),
                object: Object::Table,
            },
            Value::Table { epoch: 0 },
        );
        TableBuilder {
            fragment: self,
            table,
        }
    }
}

impl From<Fragment> for imbl::OrdMap<Key, Value> {
    fn from(fragment: Fragment) -> Self {
        fragment.entries
    }
}

impl TableBuilder<'_> {
    /// Sets the table's epoch (see [`Value::Table`]).
    pub fn epoch(&mut self, epoch: u64) -> &mut Self {
        self.insert(Object::Table, Value::Table { epoch })
    }

    fn insert(&mut self, object: Object, value: Value) -> &mut Self {
        self.fragment.entries.insert(
            Key {
                table: self.table.clone(),
                object,
            },
            value,
        );
        self
    }

    /// A regular chain with its rules.
    pub fn chain(&mut self, name: &str, rules: impl IntoIterator<Item = Vec<Expr>>) -> &mut Self {
        let rules = rules.into_iter().collect();
        self.insert(
            Object::Chain(name.to_owned()),
            Value::Chain { base: None, rules },
        )
    }

    /// A base chain: called at `base`'s hook, with policy accept.
    pub fn base_chain(
        &mut self,
        name: &str,
        base: BaseChain,
        rules: impl IntoIterator<Item = Vec<Expr>>,
    ) -> &mut Self {
        let rules = rules.into_iter().collect();
        self.insert(
            Object::Chain(name.to_owned()),
            Value::Chain {
                base: Some(base),
                rules,
            },
        )
    }

    /// A set or map (its elements with [`element`](Self::element)).
    pub fn set(&mut self, set: Set) -> &mut Self {
        self.insert(Object::Set(set.name.clone()), Value::Set(set))
    }

    /// An element of a set or map.
    pub fn element(&mut self, set: &str, element: Element) -> &mut Self {
        let key = ElementKey {
            key: element.key,
            interval_end: element.interval_end,
        };
        self.insert(
            Object::Element(set.to_owned(), key),
            Value::Element {
                data: element.data,
                timeout_ms: element.timeout_ms,
            },
        )
    }
}

/// The key of a chain, for deltas.
pub fn chain_key(family: Family, table: &str, chain: &str) -> Key {
    Key {
        table: TableName {
            family,
            name: table.to_owned(),
        },
        object: Object::Chain(chain.to_owned()),
    }
}

/// The key of an element (not a range's end), for deltas.
pub fn element_key(family: Family, table: &str, set: &str, key: Vec<u8>) -> Key {
    Key {
        table: TableName {
            family,
            name: table.to_owned(),
        },
        object: Object::Element(
            set.to_owned(),
            ElementKey {
                key,
                interval_end: false,
            },
        ),
    }
}

fn check_name(what: &str, name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 255 || name.contains('\0') {
        return Err(format!("{what} name {name:?}: 1 to 255 bytes, with no NUL"));
    }
    Ok(())
}

/// The sets a rule reads and the chains it jumps to.
fn references(rule: &[Expr]) -> (Vec<&str>, Vec<&str>) {
    let (mut sets, mut chains) = (Vec::new(), Vec::new());
    for e in rule {
        match e {
            Expr::Lookup { set, .. } | Expr::Dynset { set, .. } => sets.push(set.as_str()),
            Expr::Immediate {
                data: Data::Verdict(v),
                ..
            } => chains.extend(v.chain()),
            _ => {}
        }
    }
    (sets, chains)
}

fn check_element(set: &Set, element: &ElementKey, value: &Value) -> Result<(), String> {
    let what = || format!("element {:02x?} of set {}", element.key, set.name);
    if element.key.len() != set.key.len as usize {
        return Err(format!(
            "{}: the key is {} bytes, the set's {}",
            what(),
            element.key.len(),
            set.key.len
        ));
    }
    if element.interval_end && !set.interval {
        return Err(format!("{}: a range's end in a set of no ranges", what()));
    }
    let Value::Element { data, .. } = value else {
        return Err(format!("{}: holds {value:?}", what()));
    };
    match (set.map, data, element.interval_end) {
        (None, None, _) | (Some(_), None, true) => Ok(()),
        (Some(MapTo::Verdict), Some(Data::Verdict(_)), _) => Ok(()),
        (Some(MapTo::Value(t)), Some(Data::Value(v)), _) if v.len() == t.len as usize => Ok(()),
        (map, data, _) => Err(format!(
            "{}: {data:?} does not fit the set's values ({map:?})",
            what()
        )),
    }
}

/// The nftables subsystem: applies over nf_tables netlink.
#[derive(Debug)]
pub struct Nft {
    netns: Option<PathBuf>,
    dry_run: bool,
    socket: Option<Socket>,
    last_script: String,
}

impl Nft {
    /// Programs the network namespace at `netns` (`/run/netns/NAME`), or
    /// the process's own.
    pub fn new(netns: Option<PathBuf>) -> Self {
        Self {
            netns,
            dry_run: false,
            socket: None,
            last_script: String::new(),
        }
    }

    /// Computes transactions without applying them.
    pub fn dry_run() -> Self {
        Self {
            dry_run: true,
            ..Self::new(None)
        }
    }

    /// The last transaction as an nft script (`nft -f` takes it).
    pub fn last_script(&self) -> &str {
        &self.last_script
    }

    fn send(&mut self, tx: &Transaction) -> Result<(), kpng_netfilter::Error> {
        let mut socket = match self.socket.take() {
            Some(socket) => socket,
            None => Socket::open(self.netns.as_deref())?,
        };
        socket.apply(tx)?;
        self.socket = Some(socket);
        Ok(())
    }
}

/// The sets of `state`, by table and name (for elements and text).
fn sets_of(state: &MapSnapshot<Key, Value>) -> BTreeMap<(&TableName, &str), &Set> {
    state
        .entries()
        .iter()
        .filter_map(|(k, v)| match (&k.object, v) {
            (Object::Set(name), Value::Set(set)) => Some(((&k.table, name.as_str()), set)),
            _ => None,
        })
        .collect()
}

fn element_of(key: &ElementKey, value: &Value) -> Element {
    let (data, timeout_ms) = match value {
        Value::Element { data, timeout_ms } => (data.clone(), *timeout_ms),
        _ => (None, None),
    };
    Element {
        key: key.key.clone(),
        interval_end: key.interval_end,
        data,
        timeout_ms,
        comment: None,
    }
}

/// Writes every object of `table` in `state` into `tx` (after the table's
/// own add): sets, chains, rules, elements.
fn write_table(state: &MapSnapshot<Key, Value>, table: &TableName, tx: &mut Transaction) {
    let t = table.table();
    let objects: Vec<(&Key, &Value)> = state
        .entries()
        .iter()
        .filter(|(k, _)| &k.table == table)
        .collect();
    for (k, v) in &objects {
        if let (Object::Set(_), Value::Set(set)) = (&k.object, v) {
            tx.add_set(&t, set.clone());
        }
    }
    for (k, v) in &objects {
        if let (Object::Chain(name), Value::Chain { base, .. }) = (&k.object, v) {
            tx.add_chain(
                &t,
                Chain {
                    name: name.clone(),
                    base: *base,
                    comment: None,
                },
            );
        }
    }
    for (k, v) in &objects {
        if let (Object::Chain(name), Value::Chain { rules, .. }) = (&k.object, v) {
            for rule in rules {
                tx.add_rule(&t, Rule::new(name.as_str(), rule.clone()));
            }
        }
    }
    let mut elements: BTreeMap<&str, Vec<Element>> = BTreeMap::new();
    for (k, v) in &objects {
        if let Object::Element(set, key) = &k.object {
            elements
                .entry(set.as_str())
                .or_default()
                .push(element_of(key, v));
        }
    }
    for (set, list) in elements {
        tx.add_elements(&t, set, list);
    }
}

/// The transaction that turns `before` into `after`, given their diff:
/// tables that cannot change in place replaced whole, then the in-place
/// changes of the others ([`InPlace`]), then the tables that are gone.
fn transaction(
    before: &MapSnapshot<Key, Value>,
    after: &MapSnapshot<Key, Value>,
    ops: &[MapOp<Key, Value>],
    full: bool,
) -> Transaction {
    let mut tx = Transaction::new();
    let tables_after: BTreeSet<&TableName> = after.entries().keys().map(|k| &k.table).collect();
    let tables_before: BTreeSet<&TableName> = before.entries().keys().map(|k| &k.table).collect();
    let (sets_before, sets_after) = (sets_of(before), sets_of(after));
    for ((table, _), set) in sets_after.iter().chain(sets_before.iter()) {
        tx.describe(&table.table(), set);
    }
    let replaced = replaced_tables(before, ops, full.then_some(&tables_after));
    for table in &replaced {
        let t = table.table();
        tx.add_table(&t).delete_table(&t).add_table(&t);
        write_table(after, table, &mut tx);
    }
    let gone_tables: BTreeSet<&TableName> =
        tables_before.difference(&tables_after).copied().collect();
    let mut in_place = InPlace::default();
    for op in ops {
        let table = match op {
            MapOp::Set(k, _) | MapOp::Delete(k) => &k.table,
        };
        if !replaced.contains(table) && !gone_tables.contains(table) {
            in_place.note(op, before, &sets_before, &sets_after, &mut tx);
        }
    }
    in_place.write(after, &sets_before, &mut tx);
    for table in gone_tables {
        tx.delete_table(&table.table());
    }
    tx
}

/// The tables replaced whole: all of `all` (a full apply), and any table
/// whose epoch, base chain hooks or set declarations changed (the kernel
/// cannot change those in place).
fn replaced_tables<'a>(
    before: &MapSnapshot<Key, Value>,
    ops: &'a [MapOp<Key, Value>],
    all: Option<&BTreeSet<&'a TableName>>,
) -> BTreeSet<&'a TableName> {
    let mut replaced: BTreeSet<&TableName> = all.cloned().unwrap_or_default();
    for op in ops {
        let MapOp::Set(key, new) = op else { continue };
        let changed_kind = match (before.get(key), new) {
            (Some(Value::Chain { base: old, .. }), Value::Chain { base, .. }) => old != base,
            (Some(Value::Set(old)), Value::Set(set)) => old != set,
            (Some(Value::Table { epoch: old }), Value::Table { epoch }) => old != epoch,
            _ => false,
        };
        if changed_kind {
            replaced.insert(&key.table);
        }
    }
    replaced
}

/// Elements per (table, set), in one batch each.
type Runs<'a> = BTreeMap<(&'a TableName, &'a String), Vec<Element>>;

/// The in-place changes of the tables that stay, gathered from the ops
/// and written in the order the kernel needs.
#[derive(Default)]
struct InPlace<'a> {
    new_chains: Vec<(&'a Key, &'a String, Option<BaseChain>)>,
    refill: Vec<(&'a Key, &'a String, &'a Vec<Vec<Expr>>, bool)>,
    gone_chains: Vec<(&'a Key, &'a String)>,
    gone_sets: Vec<(&'a Key, &'a String)>,
    adds: Runs<'a>,
    deletes: Runs<'a>,
    /// Interval sets, whose ranges are rewritten whole.
    rewritten: BTreeSet<(&'a TableName, &'a str)>,
}

impl<'a> InPlace<'a> {
    /// Notes one op (tables and sets new in place are added at once).
    fn note(
        &mut self,
        op: &'a MapOp<Key, Value>,
        before: &MapSnapshot<Key, Value>,
        sets_before: &BTreeMap<(&TableName, &str), &Set>,
        sets_after: &BTreeMap<(&TableName, &str), &Set>,
        tx: &mut Transaction,
    ) {
        let interval = |k: &Key, set: &str| {
            sets_after
                .get(&(&k.table, set))
                .or_else(|| sets_before.get(&(&k.table, set)))
                .is_some_and(|s| s.interval)
        };
        let mut delete_old = |k: &'a Key, set: &'a String, key: &ElementKey| {
            if let Some(old) = before.get(k) {
                self.deletes
                    .entry((&k.table, set))
                    .or_default()
                    .push(element_of(key, old));
            }
        };
        match op {
            MapOp::Set(k, v) => match (&k.object, v) {
                (Object::Table, _) if before.get(k).is_none() => {
                    tx.add_table(&k.table.table());
                }
                (Object::Set(_), Value::Set(set)) if before.get(k).is_none() => {
                    tx.add_set(&k.table.table(), set.clone());
                }
                (Object::Chain(name), Value::Chain { base, rules }) => {
                    if before.get(k).is_none() {
                        self.new_chains.push((k, name, *base));
                    }
                    self.refill.push((k, name, rules, before.get(k).is_some()));
                }
                (Object::Element(set, _), _) if interval(k, set) => {
                    self.rewritten.insert((&k.table, set.as_str()));
                }
                (Object::Element(set, key), v) => {
                    delete_old(k, set, key);
                    self.adds
                        .entry((&k.table, set))
                        .or_default()
                        .push(element_of(key, v));
                }
                _ => {}
            },
            MapOp::Delete(k) => match &k.object {
                Object::Chain(name) => self.gone_chains.push((k, name)),
                Object::Set(name) => self.gone_sets.push((k, name)),
                Object::Element(set, _) if interval(k, set) => {
                    if sets_after.contains_key(&(&k.table, set.as_str())) {
                        self.rewritten.insert((&k.table, set.as_str()));
                    }
                }
                Object::Element(set, key) => delete_old(k, set, key),
                Object::Table => {}
            },
        }
    }

    /// Writes what was noted: new chains, then their rules (once every
    /// chain exists: rules may point at each other), element deletes
    /// before adds (a changed value is both), interval sets whole, and
    /// last what is gone: chains emptied (they may point at each other and
    /// at sets), then sets deleted, then chains.
    fn write(
        self,
        after: &MapSnapshot<Key, Value>,
        sets_before: &BTreeMap<(&TableName, &str), &Set>,
        tx: &mut Transaction,
    ) {
        for (k, name, base) in self.new_chains {
            let chain = Chain {
                name: name.clone(),
                base,
                comment: None,
            };
            tx.add_chain(&k.table.table(), chain);
        }
        for (k, name, rules, existed) in self.refill {
            let t = k.table.table();
            if existed {
                tx.flush_chain(&t, name);
            }
            for rule in rules {
                tx.add_rule(&t, Rule::new(name.as_str(), rule.clone()));
            }
        }
        for ((table, set), elements) in self.deletes {
            tx.delete_elements(&table.table(), set, elements);
        }
        for ((table, set), elements) in self.adds {
            tx.add_elements(&table.table(), set, elements);
        }
        for (table, set) in self.rewritten {
            let t = table.table();
            if sets_before.contains_key(&(table, set)) {
                tx.flush_set(&t, set);
            }
            let elements: Vec<Element> = after
                .entries()
                .iter()
                .filter(|(k, _)| &k.table == table)
                .filter_map(|(k, v)| match &k.object {
                    Object::Element(s, key) if s == set => Some(element_of(key, v)),
                    _ => None,
                })
                .collect();
            tx.add_elements(&t, set, elements);
        }
        for (k, name) in &self.gone_chains {
            tx.flush_chain(&k.table.table(), name);
        }
        for (k, name) in self.gone_sets {
            tx.delete_set(&k.table.table(), name);
        }
        for (k, name) in self.gone_chains {
            tx.delete_chain(&k.table.table(), name);
        }
    }
}

impl Subsystem for Nft {
    type Key = Key;
    type Value = Value;
    type Scope = TableName;

    fn scope(key: &Key) -> TableName {
        key.table.clone()
    }

    fn check(state: &MapSnapshot<Key, Value>) -> Result<(), String> {
        let entries = state.entries();
        let sets = sets_of(state);
        let chain_in = |table: &TableName, name: &str| {
            entries.contains_key(&Key {
                table: table.clone(),
                object: Object::Chain(name.to_owned()),
            })
        };
        for (key, value) in entries {
            check_name("table", &key.table.name)?;
            let declared = entries.contains_key(&Key {
                table: key.table.clone(),
                object: Object::Table,
            });
            if key.object != Object::Table && !declared {
                return Err(format!("{} is used but not published", key.table));
            }
            match (&key.object, value) {
                (Object::Table, Value::Table { .. }) => {}
                (Object::Chain(name), Value::Chain { rules, .. }) => {
                    check_name("chain", name)?;
                    for (i, rule) in rules.iter().enumerate() {
                        let (used_sets, used_chains) = references(rule);
                        for set in used_sets {
                            if !sets.contains_key(&(&key.table, set)) {
                                return Err(format!(
                                    "rule {} of chain {name} in {} uses set {set}, which is not published there",
                                    i + 1,
                                    key.table
                                ));
                            }
                        }
                        for chain in used_chains {
                            if !chain_in(&key.table, chain) {
                                return Err(format!(
                                    "rule {} of chain {name} in {} jumps to chain {chain}, which is not published there",
                                    i + 1,
                                    key.table
                                ));
                            }
                        }
                    }
                }
                (Object::Set(name), Value::Set(set)) => {
                    check_name("set", name)?;
                    if &set.name != name {
                        return Err(format!("set {name} is declared as {}", set.name));
                    }
                }
                (Object::Element(set_name, element), value) => {
                    let Some(set) = sets.get(&(&key.table, set_name.as_str())) else {
                        return Err(format!(
                            "element {:02x?} of set {set_name}, which is not published in {}",
                            element.key, key.table
                        ));
                    };
                    check_element(set, element, value)?;
                    if let Value::Element {
                        data: Some(Data::Verdict(v)),
                        ..
                    } = value
                        && let Some(chain) = v.chain()
                        && !chain_in(&key.table, chain)
                    {
                        return Err(format!(
                            "element {:02x?} of set {set_name} in {} points at chain {chain}, which is not published there",
                            element.key, key.table
                        ));
                    }
                }
                (object, value) => {
                    return Err(format!("{object:?} cannot hold {value:?}"));
                }
            }
        }
        Ok(())
    }

    fn clash(
        mine: &MapSnapshot<Key, Value>,
        theirs: &MapSnapshot<Key, Value>,
    ) -> Result<(), String> {
        let hooks = |state: &MapSnapshot<Key, Value>| -> Vec<(Family, BaseChain, String)> {
            state
                .entries()
                .iter()
                .filter_map(|(k, v)| match (&k.object, v) {
                    (
                        Object::Chain(name),
                        Value::Chain {
                            base: Some(base), ..
                        },
                    ) => Some((
                        k.table.family,
                        *base,
                        format!("chain {name} of {}", k.table),
                    )),
                    _ => None,
                })
                .collect()
        };
        let theirs = hooks(theirs);
        for (family, base, what) in hooks(mine) {
            if let Some((.., other)) = theirs.iter().find(|(f, b, _)| {
                *f == family && b.hook == base.hook && b.priority == base.priority
            }) {
                return Err(format!(
                    "{what} has hook {:?} priority {}, as {other}: the order would be undefined",
                    base.hook, base.priority
                ));
            }
        }
        Ok(())
    }

    fn apply(
        &mut self,
        before: &MapSnapshot<Key, Value>,
        after: &MapSnapshot<Key, Value>,
        ops: &[MapOp<Key, Value>],
        full: bool,
    ) -> Result<(), String> {
        let tx = transaction(before, after, ops, full);
        self.last_script = tx.to_string();
        if self.dry_run || tx.is_empty() {
            return Ok(());
        }
        self.send(&tx).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Aggregator;
    use kpng_netfilter::nft::build::{Load, lookup, verdict};
    use kpng_netfilter::nft::{ChainType, DataType, Hook, Verdict};

    fn input(priority: i32) -> BaseChain {
        BaseChain {
            kind: ChainType::Filter,
            hook: Hook::Input,
            priority,
        }
    }

    fn drop_from(set: &str) -> Vec<Expr> {
        [
            lookup(&[Load::Saddr(Family::Ip)], set, None, false),
            verdict(Verdict::Drop),
        ]
        .concat()
    }

    #[test]
    fn bad_publications_are_refused_with_the_object_named() {
        let mut agg = Aggregator::new(Nft::dry_run());
        // A rule that uses a set nobody published.
        let mut f = Fragment::new();
        f.table(Family::Ip, "fw")
            .base_chain("in", input(0), [drop_from("missing")]);
        let err = agg.publish("p", f).unwrap_err().to_string();
        assert!(err.contains("uses set missing"), "{err}");
        // An element of the wrong length.
        let mut f = Fragment::new();
        f.table(Family::Ip, "fw")
            .set(Set::new("s", DataType::IPV4_ADDR))
            .element("s", Element::key(vec![1, 2, 3]));
        let err = agg.publish("p", f).unwrap_err().to_string();
        assert!(err.contains("the key is 3 bytes, the set's 4"), "{err}");
        // A name the kernel cannot hold.
        let mut f = Fragment::new();
        f.table(Family::Ip, "fw\0x");
        assert!(agg.publish("p", f).is_err());
        assert_eq!(agg.published("p").map(|s| s.len()).unwrap_or(0), 0);
    }

    #[test]
    fn equal_priorities_on_one_hook_are_refused() {
        let mut agg = Aggregator::new(Nft::dry_run());
        let mut a = Fragment::new();
        a.table(Family::Inet, "a").base_chain("in", input(0), []);
        let mut b = Fragment::new();
        b.table(Family::Inet, "b").base_chain("in", input(0), []);
        agg.publish("a", a).unwrap();
        let err = agg.publish("b", b.clone()).unwrap_err().to_string();
        assert!(err.contains("undefined"), "{err}");
        let mut b = Fragment::new();
        b.table(Family::Inet, "b").base_chain("in", input(10), []);
        agg.publish("b", b).unwrap();
    }

    #[test]
    fn a_delta_writes_only_the_change() {
        let mut agg = Aggregator::new(Nft::dry_run());
        let mut f = Fragment::new();
        f.table(Family::Ip, "fw")
            .set(Set::new("bad", DataType::IPV4_ADDR))
            .element("bad", Element::key(vec![192, 0, 2, 1]))
            .base_chain("in", input(0), [drop_from("bad")]);
        agg.publish("fw", f).unwrap();
        agg.flush();
        assert!(
            agg.subsystem()
                .last_script()
                .contains("add rule ip fw in ip saddr @bad drop"),
            "{}",
            agg.subsystem().last_script()
        );
        let add = MapOp::Set(
            element_key(Family::Ip, "fw", "bad", vec![192, 0, 2, 2]),
            Value::Element {
                data: None,
                timeout_ms: None,
            },
        );
        let del = MapOp::Delete(element_key(Family::Ip, "fw", "bad", vec![192, 0, 2, 1]));
        agg.publish_delta("fw", [add, del]).unwrap();
        let report = agg.flush();
        assert_eq!(report.transactions, 1);
        assert_eq!(
            agg.subsystem().last_script(),
            "delete element ip fw bad { 192.0.2.1 }\nadd element ip fw bad { 192.0.2.2 }\n"
        );
        // Nothing changed: no transaction.
        assert_eq!(agg.flush().transactions, 0);
    }

    #[test]
    fn fragments_travel_as_json() {
        let mut f = Fragment::new();
        f.table(Family::Ip, "fw")
            .set(Set::new("bad", DataType::IPV4_ADDR))
            .element("bad", Element::key(vec![192, 0, 2, 1]))
            .base_chain("in", input(0), [drop_from("bad")]);
        let entries: imbl::OrdMap<Key, Value> = f.into();
        for (k, v) in &entries {
            let text = serde_json::to_string(&(k, v)).unwrap();
            let back: (Key, Value) = serde_json::from_str(&text).unwrap();
            assert_eq!((k, v), (&back.0, &back.1), "{text}");
        }
    }
}
