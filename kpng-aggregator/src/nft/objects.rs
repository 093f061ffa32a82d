//! What a producer publishes: the subsystem's keys (a table, a chain, a
//! set or an element, in its table) and values (their content), and the
//! [`Fragment`] that builds a whole publication table by table.

use std::collections::BTreeMap;
use std::fmt;

use kpng_netfilter::nft::{BaseChain, Data, Element, Expr, Set, Table};
use kpng_store::MapSnapshot;

use super::TableFamily;

/// A table: the unit of ownership.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct TableName {
    /// Its family.
    pub family: TableFamily,
    /// Its name.
    pub name: String,
}

impl TableName {
    pub(super) fn table(&self) -> Table {
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
    pub fn table(&mut self, family: TableFamily, name: &str) -> TableBuilder<'_> {
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
pub fn chain_key(family: TableFamily, table: &str, chain: &str) -> Key {
    Key {
        table: TableName {
            family,
            name: table.to_owned(),
        },
        object: Object::Chain(chain.to_owned()),
    }
}

/// The key of an element (not a range's end), for deltas.
pub fn element_key(family: TableFamily, table: &str, set: &str, key: Vec<u8>) -> Key {
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

/// The sets of `state`, by table and name (for elements and text).
pub(super) fn sets_of(state: &MapSnapshot<Key, Value>) -> BTreeMap<(&TableName, &str), &Set> {
    state
        .entries()
        .iter()
        .filter_map(|(k, v)| match (&k.object, v) {
            (Object::Set(name), Value::Set(set)) => Some(((&k.table, name.as_str()), set)),
            _ => None,
        })
        .collect()
}

pub(super) fn element_of(key: &ElementKey, value: &Value) -> Element {
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

#[cfg(test)]
mod tests {
    use kpng_netfilter::nft::{DataType, Element, Set};

    use crate::nft::testing::{drop_from, input};
    use crate::nft::{Fragment, Key, TableFamily, Value};

    #[test]
    fn fragments_travel_as_json() {
        let mut f = Fragment::new();
        f.table(TableFamily::Ip, "fw")
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
