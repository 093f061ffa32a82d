//! The nftables subsystem: producers publish tables, chains with their
//! rules, sets and maps, and elements.
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
//! **Text checks**: names are `[A-Za-z0-9_-]`, at most 64 characters;
//! rules, set declarations and elements are single statements (no newline,
//! `;` or `#`), so a publication cannot smuggle in another command.

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use kpng_diff::MapOp;
use kpng_store::MapSnapshot;

use crate::Subsystem;

/// An nftables family.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// `ip`.
    Ip,
    /// `ip6`.
    Ip6,
    /// `inet`.
    Inet,
}

impl Family {
    fn word(self) -> &'static str {
        match self {
            Family::Ip => "ip",
            Family::Ip6 => "ip6",
            Family::Inet => "inet",
        }
    }
}

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

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "table {} {}", self.family.word(), self.name)
    }
}

/// One object, in its table.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Object {
    /// The table itself.
    Table,
    /// A chain.
    Chain(String),
    /// A set or map.
    Set(String),
    /// An element of a set or map: the set, the element's text.
    Element(String, String),
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

/// A base chain's hook.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Hook {
    /// `filter`, `nat` or `route`.
    pub kind: String,
    /// `prerouting`, `input`, `forward`, `output`, `postrouting`.
    pub hook: String,
    /// Its priority: lower runs first.
    pub priority: i32,
}

/// The content of a published object.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Value {
    /// A table. A new `epoch` replaces the table whole (deleted and made
    /// again with its content, in one transaction): a producer that lost
    /// track of the kernel (after a failure, or for what nft cannot change
    /// in place) asks for it this way.
    Table {
        /// The table's generation.
        epoch: u64,
    },
    /// A chain: its hook if it is a base chain, and its rules in order.
    Chain {
        /// The hook of a base chain.
        hook: Option<Hook>,
        /// The rules.
        rules: Vec<String>,
    },
    /// A set or map: its declaration (`type ipv4_addr; flags interval`).
    Set(String),
    /// An element.
    Element,
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
    pub fn chain<'r>(
        &mut self,
        name: &str,
        hook: Option<Hook>,
        rules: impl IntoIterator<Item = &'r str>,
    ) -> &mut Self {
        let rules = rules.into_iter().map(str::to_owned).collect();
        self.insert(Object::Chain(name.to_owned()), Value::Chain { hook, rules })
    }

    /// A base chain: `type KIND hook HOOK priority PRIORITY`.
    pub fn base_chain<'r>(
        &mut self,
        name: &str,
        kind: &str,
        hook: &str,
        priority: i32,
        rules: impl IntoIterator<Item = &'r str>,
    ) -> &mut Self {
        let hook = Hook {
            kind: kind.to_owned(),
            hook: hook.to_owned(),
            priority,
        };
        self.chain(name, Some(hook), rules)
    }

    /// A set or map with its declaration.
    pub fn set(&mut self, name: &str, declaration: &str) -> &mut Self {
        self.insert(
            Object::Set(name.to_owned()),
            Value::Set(declaration.to_owned()),
        )
    }

    /// An element of a set or map.
    pub fn element(&mut self, set: &str, element: &str) -> &mut Self {
        self.insert(
            Object::Element(set.to_owned(), element.to_owned()),
            Value::Element,
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

/// The key of an element, for deltas.
pub fn element_key(family: Family, table: &str, set: &str, element: &str) -> Key {
    Key {
        table: TableName {
            family,
            name: table.to_owned(),
        },
        object: Object::Element(set.to_owned(), element.to_owned()),
    }
}

fn check_name(what: &str, name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{what} name {name:?}: use [A-Za-z0-9_-], at most 64"
        ))
    }
}

fn check_text(what: &str, text: &str, extra: &[char]) -> Result<(), String> {
    match text
        .chars()
        .find(|c| ['\n', '\r', ';', '#'].contains(c) || extra.contains(c))
    {
        Some(c) => Err(format!("{what} {text:?}: {c:?} is not allowed")),
        None if text.trim().is_empty() => Err(format!("{what} is empty")),
        None => Ok(()),
    }
}

fn check_decl(set: &str, decl: &str) -> Result<(), String> {
    match decl
        .chars()
        .find(|c| ['\n', '\r', '#', '{', '}'].contains(c))
    {
        Some(c) => Err(format!(
            "declaration of set {set} {decl:?}: {c:?} is not allowed"
        )),
        None if decl.trim().is_empty() => Err(format!("declaration of set {set} is empty")),
        None => Ok(()),
    }
}

/// The nftables subsystem: applies with `nft -f -`.
#[derive(Debug)]
pub struct Nft {
    command: Vec<String>,
    timeout: Duration,
    dry_run: bool,
    last_script: String,
}

impl Nft {
    /// Runs `command` (e.g. `["nft"]`, or `["ip", "netns", "exec", NS,
    /// "nft"]`); `-f -` is added.
    pub fn new(command: Vec<String>) -> Self {
        Self {
            command,
            timeout: Duration::from_secs(60),
            dry_run: false,
            last_script: String::new(),
        }
    }

    /// Computes scripts without running nft.
    pub fn dry_run() -> Self {
        Self {
            command: Vec::new(),
            timeout: Duration::from_secs(60),
            dry_run: true,
            last_script: String::new(),
        }
    }

    /// The script of the last apply.
    pub fn last_script(&self) -> &str {
        &self.last_script
    }

    fn run(&self, script: &str) -> Result<(), String> {
        run_script(&self.command, script, self.timeout).map_err(|e| match e {
            // nft's own message is the useful part.
            kpng_netfilter::Error::Command { stderr, .. } => stderr,
            other => other.to_string(),
        })
    }
}

/// Runs `command` with `-f -` on `script` (one nft transaction), through
/// [`kpng_netfilter::process`]: the script is fed and stderr drained on
/// threads of their own, a run longer than `timeout` is killed (the kernel
/// applies a transaction whole or not at all), and `nft` dies with kpng,
/// so a killed kpng leaves no transaction to commit after its restart.
///
/// # Errors
/// [`kpng_netfilter::Error::Spawn`], [`Timeout`](kpng_netfilter::Error::Timeout),
/// or [`Command`](kpng_netfilter::Error::Command) with nft's message.
pub fn run_script(
    command: &[String],
    script: &str,
    timeout: Duration,
) -> Result<(), kpng_netfilter::Error> {
    kpng_netfilter::process::Process::new(command.iter().cloned())
        .args(["-f", "-"])
        .input(script.as_bytes())
        .timeout(timeout)
        .run()
        .map(drop)
}

fn chain_decl(table: &TableName, name: &str, hook: Option<&Hook>) -> String {
    let t = format!("{} {}", table.family.word(), table.name);
    match hook {
        Some(h) => format!(
            "add chain {t} {name} {{ type {} hook {} priority {}; }}\n",
            h.kind, h.hook, h.priority
        ),
        None => format!("add chain {t} {name}\n"),
    }
}

/// The script that turns `before` into `after`, given their diff.
fn script(
    before: &MapSnapshot<Key, Value>,
    after: &MapSnapshot<Key, Value>,
    ops: &[MapOp<Key, Value>],
    full: bool,
) -> String {
    let mut out = String::new();
    let t = |table: &TableName| format!("{} {}", table.family.word(), table.name);
    let tables_after: BTreeSet<&TableName> = after.entries().keys().map(|k| &k.table).collect();
    let tables_before: BTreeSet<&TableName> = before.entries().keys().map(|k| &k.table).collect();
    // A full apply, and any table whose base chains changed hook, is
    // replaced whole: delete and re-add everything in it.
    let mut replaced: BTreeSet<&TableName> = BTreeSet::new();
    if full {
        replaced.extend(tables_after.iter().copied());
    }
    for op in ops {
        // nft cannot change a base chain's hook or a set's type in place.
        let MapOp::Set(key, new) = op else { continue };
        let changed_kind = match (before.get(key), new) {
            (Some(Value::Chain { hook: old, .. }), Value::Chain { hook, .. }) => old != hook,
            (Some(Value::Set(old)), Value::Set(decl)) => old != decl,
            (Some(Value::Table { epoch: old }), Value::Table { epoch }) => old != epoch,
            _ => false,
        };
        if changed_kind {
            replaced.insert(&key.table);
        }
    }
    for table in &replaced {
        let name = t(table);
        out.push_str(&format!("add table {name}\ndelete table {name}\n"));
    }
    // What to write: every object of a replaced table, and the ops of the
    // others.
    let mut sets: Vec<(&Key, &Value)> = after
        .entries()
        .iter()
        .filter(|(k, _)| replaced.contains(&k.table))
        .collect();
    let mut deletes: Vec<&Key> = Vec::new();
    for op in ops {
        match op {
            MapOp::Set(k, v) if !replaced.contains(&k.table) => sets.push((k, v)),
            MapOp::Delete(k) if !replaced.contains(&k.table) => deletes.push(k),
            _ => {}
        }
    }
    // Tables, chains and sets first (rules may name any chain or set).
    for (k, v) in &sets {
        match (&k.object, v) {
            (Object::Table, _) => out.push_str(&format!("add table {}\n", t(&k.table))),
            (Object::Chain(name), Value::Chain { hook, .. }) => {
                out.push_str(&chain_decl(&k.table, name, hook.as_ref()));
            }
            (Object::Set(name), Value::Set(decl)) => {
                let kind = if decl.contains(" : ") { "map" } else { "set" };
                let decl = decl.trim_end().trim_end_matches(';');
                out.push_str(&format!(
                    "add {kind} {} {name} {{ {decl}; }}\n",
                    t(&k.table)
                ));
            }
            _ => {}
        }
    }
    // Chains are refilled whole.
    let deleted_tables: BTreeSet<&TableName> = tables_before
        .iter()
        .filter(|table| !tables_after.contains(*table))
        .copied()
        .collect();
    let doomed = |k: &Key| deleted_tables.contains(&k.table);
    for k in deletes.iter().filter(|k| !doomed(k)) {
        if let Object::Chain(name) = &k.object {
            out.push_str(&format!("flush chain {} {name}\n", t(&k.table)));
        }
    }
    for (k, v) in &sets {
        if let (Object::Chain(name), Value::Chain { rules, .. }) = (&k.object, v) {
            if !replaced.contains(&k.table) {
                out.push_str(&format!("flush chain {} {name}\n", t(&k.table)));
            }
            for rule in rules {
                out.push_str(&format!("add rule {} {name} {rule}\n", t(&k.table)));
            }
        }
    }
    // Deletes first: a map element whose value changed is a delete and an
    // add of the same key.
    for k in &deletes {
        if doomed(k) {
            continue;
        }
        if let Object::Element(set, element) = &k.object {
            let set_gone = deletes
                .iter()
                .any(|d| d.table == k.table && d.object == Object::Set(set.clone()));
            if !set_gone {
                out.push_str(&format!(
                    "delete element {} {set} {{ {element} }}\n",
                    t(&k.table)
                ));
            }
        }
    }
    for (k, _) in &sets {
        if let Object::Element(set, element) = &k.object {
            out.push_str(&format!(
                "add element {} {set} {{ {element} }}\n",
                t(&k.table)
            ));
        }
    }
    for k in &deletes {
        if doomed(k) {
            continue;
        }
        match &k.object {
            Object::Chain(name) => out.push_str(&format!("delete chain {} {name}\n", t(&k.table))),
            Object::Set(name) => out.push_str(&format!("delete set {} {name}\n", t(&k.table))),
            _ => {}
        }
    }
    for table in deleted_tables {
        out.push_str(&format!("delete table {}\n", t(table)));
    }
    out
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
        for (key, value) in entries {
            check_name("table", &key.table.name)?;
            let declared = |object: Object| {
                entries.contains_key(&Key {
                    table: key.table.clone(),
                    object,
                })
            };
            if key.object != Object::Table && !declared(Object::Table) {
                return Err(format!("{} is used but not published", key.table));
            }
            match (&key.object, value) {
                (Object::Table, Value::Table { .. }) => {}
                (Object::Chain(name), Value::Chain { hook, rules }) => {
                    check_name("chain", name)?;
                    if let Some(h) = hook {
                        for (what, word) in [("chain type", &h.kind), ("hook", &h.hook)] {
                            check_name(what, word)?;
                        }
                    }
                    for rule in rules {
                        check_text(&format!("rule of chain {name}"), rule, &[])?;
                    }
                }
                (Object::Set(name), Value::Set(decl)) => {
                    check_name("set", name)?;
                    // A declaration may hold `;` (`type ipv4_addr; flags
                    // interval`): it sits inside braces it cannot close.
                    check_decl(name, decl)?;
                }
                (Object::Element(set, element), Value::Element) => {
                    if !declared(Object::Set(set.clone())) {
                        return Err(format!(
                            "element {element:?} of set {set}, which is not published"
                        ));
                    }
                    check_text(&format!("element of set {set}"), element, &['{', '}', ','])?;
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
        let hooks = |state: &MapSnapshot<Key, Value>| -> Vec<(Family, String, i32, String)> {
            state
                .entries()
                .iter()
                .filter_map(|(k, v)| match (&k.object, v) {
                    (Object::Chain(name), Value::Chain { hook: Some(h), .. }) => Some((
                        k.table.family,
                        h.hook.clone(),
                        h.priority,
                        format!("chain {name} of {}", k.table),
                    )),
                    _ => None,
                })
                .collect()
        };
        let theirs = hooks(theirs);
        for (family, hook, priority, what) in hooks(mine) {
            if let Some((.., other)) = theirs
                .iter()
                .find(|(f, h, p, _)| *f == family && *h == hook && *p == priority)
            {
                return Err(format!(
                    "{what} has hook {hook} priority {priority}, as {other}: the order would be undefined"
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
        let script = script(before, after, ops, full);
        self.last_script.clone_from(&script);
        if self.dry_run || script.is_empty() {
            return Ok(());
        }
        self.run(&script)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Aggregator;

    #[test]
    fn hostile_text_is_refused_with_the_object_named() {
        let mut agg = Aggregator::new(Nft::dry_run());
        let mut f = Fragment::new();
        f.table(Family::Ip, "fw")
            .chain("in", None, ["accept; add table ip evil"]);
        let err = agg.publish("p", f).unwrap_err().to_string();
        assert!(
            err.contains("rule of chain in") && err.contains("';'"),
            "{err}"
        );
        let mut f = Fragment::new();
        f.table(Family::Ip, "fw x");
        assert!(agg.publish("p", f).is_err());
        let mut f = Fragment::new();
        f.table(Family::Ip, "fw")
            .set("s", "type ipv4_addr")
            .element("s", "1.2.3.4 }");
        assert!(agg.publish("p", f).is_err());
        assert_eq!(agg.published("p").map(|s| s.len()).unwrap_or(0), 0);
    }

    #[test]
    fn equal_priorities_on_one_hook_are_refused() {
        let mut agg = Aggregator::new(Nft::dry_run());
        let mut a = Fragment::new();
        a.table(Family::Inet, "a")
            .base_chain("in", "filter", "input", 0, []);
        let mut b = Fragment::new();
        b.table(Family::Inet, "b")
            .base_chain("in", "filter", "input", 0, []);
        agg.publish("a", a).unwrap();
        let err = agg.publish("b", b.clone()).unwrap_err().to_string();
        assert!(err.contains("undefined"), "{err}");
        let mut b = Fragment::new();
        b.table(Family::Inet, "b")
            .base_chain("in", "filter", "input", 10, []);
        agg.publish("b", b).unwrap();
    }

    #[test]
    fn a_delta_writes_only_the_change() {
        let mut agg = Aggregator::new(Nft::dry_run());
        let mut f = Fragment::new();
        f.table(Family::Ip, "fw")
            .set("bad", "type ipv4_addr")
            .element("bad", "192.0.2.1")
            .base_chain("in", "filter", "input", 0, ["ip saddr @bad drop"]);
        agg.publish("fw", f).unwrap();
        agg.flush();
        let add = MapOp::Set(
            element_key(Family::Ip, "fw", "bad", "192.0.2.2"),
            Value::Element,
        );
        let del = MapOp::Delete(element_key(Family::Ip, "fw", "bad", "192.0.2.1"));
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
}
