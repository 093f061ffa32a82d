//! Tables, chains, sets, elements and rules.

use super::expr::{Data, Expr};

/// A table's address family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    /// `ip`: IPv4.
    Ip,
    /// `ip6`: IPv6.
    Ip6,
    /// `inet`: both.
    Inet,
}

impl Family {
    /// The kernel's number (`NFPROTO_*`).
    pub fn number(self) -> u8 {
        match self {
            Family::Inet => 1,
            Family::Ip => 2,
            Family::Ip6 => 10,
        }
    }

    /// nft's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Family::Ip => "ip",
            Family::Ip6 => "ip6",
            Family::Inet => "inet",
        }
    }
}

impl std::fmt::Display for Family {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A table: a family and a name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Table {
    /// The family.
    pub family: Family,
    /// The name.
    pub name: String,
}

impl Table {
    /// A table.
    pub fn new(family: Family, name: impl Into<String>) -> Self {
        Self {
            family,
            name: name.into(),
        }
    }
}

impl std::fmt::Display for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "table {} {}", self.family, self.name)
    }
}

/// A base chain's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChainType {
    /// Filtering.
    Filter,
    /// NAT: only the first packet of a connection passes.
    Nat,
}

/// Where a base chain is attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Hook {
    /// Before routing.
    Prerouting,
    /// To this host.
    Input,
    /// Routed through.
    Forward,
    /// From this host.
    Output,
    /// After routing.
    Postrouting,
}

impl Hook {
    pub(crate) fn from_number(n: u32) -> Option<Self> {
        Some(match n {
            0 => Hook::Prerouting,
            1 => Hook::Input,
            2 => Hook::Forward,
            3 => Hook::Output,
            4 => Hook::Postrouting,
            _ => return None,
        })
    }
}

/// What makes a chain a base chain: the kernel calls it at a hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BaseChain {
    /// Its type.
    pub kind: ChainType,
    /// Its hook.
    pub hook: Hook,
    /// Its priority at the hook (lower runs first; dstnat is -100,
    /// srcnat 100, filter 0).
    pub priority: i32,
}

/// A chain: a base chain, or a regular one that rules jump to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Chain {
    /// The name.
    pub name: String,
    /// The hook, for a base chain (its policy is accept).
    pub base: Option<BaseChain>,
}

impl Chain {
    /// A regular chain.
    pub fn regular(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            base: None,
        }
    }

    /// A base chain with policy accept.
    pub fn base(name: impl Into<String>, kind: ChainType, hook: Hook, priority: i32) -> Self {
        Self {
            name: name.into(),
            base: Some(BaseChain {
                kind,
                hook,
                priority,
            }),
        }
    }
}

/// The type of a set's key or a map's value, as nft names types (its
/// numbering, which `nft list` reads back), and its length in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DataType {
    /// nft's type number (a concatenation packs its parts' numbers, six
    /// bits each).
    pub id: u32,
    /// The length in bytes, each part of a concatenation rounded up to a
    /// whole register (4 bytes).
    pub len: u32,
}

impl DataType {
    /// A 32-bit integer (nft's `integer`): a mark, a numgen value.
    pub const INTEGER: DataType = DataType { id: 4, len: 4 };
    /// `ipv4_addr`.
    pub const IPV4_ADDR: DataType = DataType { id: 7, len: 4 };
    /// `ipv6_addr`.
    pub const IPV6_ADDR: DataType = DataType { id: 8, len: 16 };
    /// `inet_proto` (one byte).
    pub const INET_PROTO: DataType = DataType { id: 12, len: 1 };
    /// `inet_service` (a port, two bytes).
    pub const INET_SERVICE: DataType = DataType { id: 13, len: 2 };
    /// `mark`.
    pub const MARK: DataType = DataType { id: 19, len: 4 };

    /// The address type of a family (`Inet` is taken as IPv4).
    pub fn addr(family: Family) -> DataType {
        match family {
            Family::Ip6 => Self::IPV6_ADDR,
            Family::Ip | Family::Inet => Self::IPV4_ADDR,
        }
    }

    /// A concatenation of `parts` (nft's `a . b . c`).
    pub fn concat(parts: &[DataType]) -> DataType {
        const TYPE_BITS: u32 = 6;
        let id = parts.iter().fold(0, |id, p| (id << TYPE_BITS) | p.id);
        let len = parts.iter().map(|p| p.len.next_multiple_of(4)).sum();
        DataType { id, len }
    }
}

/// What a map maps to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MapTo {
    /// Verdicts (a verdict map).
    Verdict,
    /// Values of this type.
    Value(DataType),
}

/// A named set or map.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Set {
    /// The name.
    pub name: String,
    /// The key's type.
    pub key: DataType,
    /// For a map, what it maps to.
    pub map: Option<MapTo>,
    /// Elements are ranges (intervals; prefixes are ranges).
    pub interval: bool,
    /// Elements expire; rules may add them (`dynset`).
    pub timeout: bool,
}

impl Set {
    /// A set of keys.
    pub fn new(name: impl Into<String>, key: DataType) -> Self {
        Self {
            name: name.into(),
            key,
            map: None,
            interval: false,
            timeout: false,
        }
    }

    /// A verdict map.
    pub fn verdict_map(name: impl Into<String>, key: DataType) -> Self {
        Self {
            map: Some(MapTo::Verdict),
            ..Self::new(name, key)
        }
    }

    /// A set of ranges.
    pub fn intervals(mut self) -> Self {
        self.interval = true;
        self
    }

    /// A set whose elements expire and that rules may update.
    pub fn with_timeouts(mut self) -> Self {
        self.timeout = true;
        self
    }
}

/// One element of a set or map.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Element {
    /// The key, as the registers hold it (each part of a concatenation
    /// padded to whole registers).
    pub key: Vec<u8>,
    /// In an interval set: this element ends the range the previous one
    /// started (its key is the first value after the range).
    pub interval_end: bool,
    /// In a map: the value.
    pub data: Option<Data>,
    /// In a set with timeouts: its own timeout, in milliseconds.
    pub timeout_ms: Option<u64>,
}

impl Element {
    /// A set element.
    pub fn key(key: Vec<u8>) -> Self {
        Self {
            key,
            interval_end: false,
            data: None,
            timeout_ms: None,
        }
    }

    /// A map element.
    pub fn map(key: Vec<u8>, data: Data) -> Self {
        Self {
            data: Some(data),
            ..Self::key(key)
        }
    }
}

/// A rule: expressions in order, in a chain.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Rule {
    /// The chain.
    pub chain: String,
    /// The expressions.
    pub exprs: Vec<Expr>,
}

impl Rule {
    /// A rule of `chain`.
    pub fn new(chain: impl Into<String>, exprs: Vec<Expr>) -> Self {
        Self {
            chain: chain.into(),
            exprs,
        }
    }
}

/// Key bytes: the parts of a concatenation, each padded to whole 32-bit
/// registers, as lookups see them.
pub fn key(parts: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for part in parts {
        out.extend_from_slice(part);
        out.resize(out.len().next_multiple_of(4), 0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concatenations_pack_types_and_pad_lengths() {
        let t = DataType::concat(&[
            DataType::IPV4_ADDR,
            DataType::INET_PROTO,
            DataType::INET_SERVICE,
        ]);
        assert_eq!(t.len, 12);
        assert_eq!(t.id, (7 << 12) | (12 << 6) | 13);
        assert_eq!(
            key(&[&[10, 0, 0, 1], &[6], &80u16.to_be_bytes()]),
            [10, 0, 0, 1, 6, 0, 0, 0, 0, 80, 0, 0]
        );
    }
}
