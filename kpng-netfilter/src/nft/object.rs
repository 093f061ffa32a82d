//! Tables, chains, sets, elements and rules.

use std::net::IpAddr;

use super::expr::{Data, Expr};
use super::load::{self, Load, Typeof};
pub use super::types::{DataType, TableFamily};

/// A table: a family and a name.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct Table {
    /// The family.
    pub family: TableFamily,
    /// The name.
    pub name: String,
}

impl Table {
    /// A table.
    pub fn new(family: TableFamily, name: impl Into<String>) -> Self {
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChainType {
    /// Filtering.
    Filter,
    /// NAT: only the first packet of a connection passes.
    Nat,
}

impl ChainType {
    /// nft's name for it, which is also the kernel's (`NFTA_CHAIN_TYPE`).
    pub fn name(self) -> &'static str {
        match self {
            ChainType::Filter => "filter",
            ChainType::Nat => "nat",
        }
    }
}

/// Where a base chain is attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChainHook {
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

impl ChainHook {
    /// nft's name for it.
    pub fn name(self) -> &'static str {
        match self {
            ChainHook::Prerouting => "prerouting",
            ChainHook::Input => "input",
            ChainHook::Forward => "forward",
            ChainHook::Output => "output",
            ChainHook::Postrouting => "postrouting",
        }
    }

    pub(crate) fn from_number(n: u32) -> Option<Self> {
        Some(match n {
            0 => ChainHook::Prerouting,
            1 => ChainHook::Input,
            2 => ChainHook::Forward,
            3 => ChainHook::Output,
            4 => ChainHook::Postrouting,
            _ => return None,
        })
    }
}

/// What makes a chain a base chain: the kernel calls it at a hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct BaseChain {
    /// Its type.
    pub kind: ChainType,
    /// Its hook.
    pub hook: ChainHook,
    /// Its priority at the hook (lower runs first; dstnat is -100,
    /// srcnat 100, filter 0).
    pub priority: i32,
}

/// A chain: a base chain, or a regular one that rules jump to.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Chain {
    /// The name.
    pub name: String,
    /// The hook, for a base chain (its policy is accept).
    #[serde(default)]
    pub base: Option<BaseChain>,
    /// A comment, kept by the kernel beside the chain (as nft's
    /// `comment "..."` is: `NFTA_CHAIN_USERDATA`), which `nft list` prints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

impl Chain {
    /// A regular chain.
    pub fn regular(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            base: None,
            comment: None,
        }
    }

    /// The chain with `comment` (cut to [`COMMENT_MAX`] bytes).
    pub fn with_comment(mut self, comment: impl Into<String>) -> Self {
        self.comment = Some(fit_comment(comment.into()));
        self
    }

    /// A base chain with policy accept.
    pub fn base(name: impl Into<String>, kind: ChainType, hook: ChainHook, priority: i32) -> Self {
        Self {
            name: name.into(),
            base: Some(BaseChain {
                kind,
                hook,
                priority,
            }),
            comment: None,
        }
    }
}

/// What a map maps to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MapTo {
    /// Verdicts (a verdict map).
    Verdict,
    /// Values of this type.
    Value(DataType),
}

/// A named set or map.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Set {
    /// The name.
    pub name: String,
    /// The key's type.
    pub key: DataType,
    /// For a map, what it maps to.
    #[serde(default)]
    pub map: Option<MapTo>,
    /// Elements are ranges (intervals; prefixes are ranges).
    #[serde(default)]
    pub interval: bool,
    /// Elements expire; rules may add them (`dynset`).
    #[serde(default)]
    pub timeout: bool,
    /// The expressions that make the key, for a set declared by them
    /// (nft's `typeof`; see [`Set::keyed_by`]).
    #[serde(default)]
    pub typeof_key: Option<Vec<Load>>,
    /// What a map declared by `typeof` maps to.
    #[serde(default)]
    pub typeof_data: Option<Typeof>,
    /// The most elements it holds (`size`); `None`: the kernel's default
    /// (65,535 for a set that rules add to).
    #[serde(default)]
    pub size: Option<u32>,
    /// Each element carries a counter of the packets that matched it
    /// (nft's `counter` in the declaration: `NFTA_SET_EXPRESSIONS`).
    /// The kernel counts a map's lookups too, so a NAT map's element
    /// counts the connections sent to its target.
    #[serde(default)]
    pub counter: bool,
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
            typeof_key: None,
            typeof_data: None,
            size: None,
            counter: false,
        }
    }

    /// A set whose key is what `key` loads, declared as nft's `typeof`
    /// does: the kernel keeps the expressions beside the set, so `nft list`
    /// prints `typeof ip daddr . numgen random mod 2`. A key with a
    /// `numgen` part needs this: its type, `integer`, has no fixed length
    /// nft could name otherwise.
    pub fn keyed_by(name: impl Into<String>, key: &[Load]) -> Self {
        Self {
            typeof_key: Some(key.to_vec()),
            ..Self::new(name, load::datatype(key))
        }
    }

    /// Makes a set declared by [`keyed_by`](Self::keyed_by) a verdict map.
    pub fn to_verdicts(mut self) -> Self {
        self.map = Some(MapTo::Verdict);
        if self.typeof_key.is_some() {
            self.typeof_data = Some(Typeof::Verdict);
        }
        self
    }

    /// Makes a set a map to values such as `value` loads (a NAT target:
    /// `ip daddr . th dport`).
    pub fn to_values(mut self, value: &[Load]) -> Self {
        self.map = Some(MapTo::Value(load::datatype(value)));
        if self.typeof_key.is_some() {
            self.typeof_data = Some(Typeof::Value(value.to_vec()));
        }
        self
    }

    /// The user data nft keeps beside a set declared by `typeof`.
    pub(crate) fn userdata(&self) -> Option<Vec<u8>> {
        let key = self.typeof_key.as_deref()?;
        Some(load::set_userdata(key, self.typeof_data.as_ref()))
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

    /// A set that holds at most `size` elements (nft's `size`): what rules
    /// add beyond it is not added.
    pub fn with_size(mut self, size: u32) -> Self {
        self.size = Some(size);
        self
    }

    /// A set whose elements count the packets that match them (see
    /// [`Set::counter`]); read them with
    /// [`Socket::read_counters`](super::Socket::read_counters).
    pub fn with_counter(mut self) -> Self {
        self.counter = true;
        self
    }
}

/// One element of a set or map.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Element {
    /// The key, as the registers hold it (each part of a concatenation
    /// padded to whole registers).
    pub key: Vec<u8>,
    /// In an interval set: this element ends the range the previous one
    /// started (its key is the first value after the range).
    #[serde(default)]
    pub interval_end: bool,
    /// In a map: the value.
    #[serde(default)]
    pub data: Option<Data>,
    /// In a set with timeouts: its own timeout, in milliseconds.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// A comment, kept by the kernel beside the element (nft's
    /// `comment "..."`: `NFTA_SET_ELEM_USERDATA`), which `nft list` prints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

/// What an element's counter counted (`counter packets N bytes M`), as
/// the kernel reads it back ([`Socket::read_counters`](super::Socket::read_counters)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ElementCounter {
    /// Packets that matched the element (for a NAT map, connections).
    pub packets: u64,
    /// Their bytes.
    pub bytes: u64,
}

impl Element {
    /// A set element.
    pub fn key(key: Vec<u8>) -> Self {
        Self {
            key,
            interval_end: false,
            data: None,
            timeout_ms: None,
            comment: None,
        }
    }

    /// The element with `comment` (cut to [`COMMENT_MAX`] bytes).
    pub fn with_comment(mut self, comment: impl Into<String>) -> Self {
        self.comment = Some(fit_comment(comment.into()));
        self
    }

    /// The elements of an interval set that holds `prefixes` (those of
    /// `family`'s addresses; others are left out): overlapping and
    /// touching prefixes merge into one range, since the kernel refuses
    /// overlaps. Each range is a start and, unless it reaches the top of
    /// the address space, an end.
    pub fn ranges(
        family: TableFamily,
        prefixes: impl IntoIterator<Item = ipnet::IpNet>,
    ) -> Vec<Element> {
        let bits: u32 = if family == TableFamily::Ip6 { 128 } else { 32 };
        // Each range as [first, past]; `past` is `None` at the top.
        let mut ranges: Vec<(u128, Option<u128>)> = prefixes
            .into_iter()
            .filter_map(|prefix| {
                let (ip, len) = (prefix.network(), prefix.prefix_len());
                let n = match (ip, family) {
                    (IpAddr::V4(v4), TableFamily::Ip | TableFamily::Inet) => {
                        u128::from(u32::from(v4))
                    }
                    (IpAddr::V6(v6), TableFamily::Ip6) => u128::from(v6),
                    _ => return None,
                };
                let host = bits - u32::from(len).min(bits);
                let first = if host >= 128 { 0 } else { (n >> host) << host };
                let size = 1u128.checked_shl(host);
                let past = size.and_then(|s| first.checked_add(s));
                let past = past.filter(|p| bits == 128 || *p < (1u128 << bits));
                Some((first, past))
            })
            .collect();
        ranges.sort_unstable();
        let mut merged: Vec<(u128, Option<u128>)> = Vec::new();
        for (first, past) in ranges {
            match merged.last_mut() {
                Some((_, last)) if last.is_none_or(|l| first <= l) => {
                    *last = match (*last, past) {
                        (Some(a), Some(b)) => Some(a.max(b)),
                        _ => None,
                    };
                }
                _ => merged.push((first, past)),
            }
        }
        let bytes = |n: u128| -> Vec<u8> {
            if bits == 32 {
                u32::try_from(n).unwrap_or(u32::MAX).to_be_bytes().to_vec()
            } else {
                n.to_be_bytes().to_vec()
            }
        };
        let mut out = Vec::with_capacity(merged.len() * 2);
        for (first, past) in merged {
            out.push(Element::key(bytes(first)));
            if let Some(past) = past {
                out.push(Element {
                    interval_end: true,
                    ..Element::key(bytes(past))
                });
            }
        }
        out
    }

    /// A map element.
    pub fn map(key: Vec<u8>, data: Data) -> Self {
        Self {
            data: Some(data),
            ..Self::key(key)
        }
    }
}

/// The longest comment nft accepts, in bytes (`NFTNL_UDATA_COMMENT_MAXLEN`,
/// its terminating NUL included).
pub const COMMENT_MAX: usize = 127;

/// `comment` as nft can hold it: cut to at most [`COMMENT_MAX`] bytes on a
/// character boundary, with no quotes or control characters (which nft's
/// one-line syntax and the C string cannot hold).
pub fn fit_comment(mut comment: String) -> String {
    comment.retain(|c| c != '"' && !c.is_control());
    if comment.len() > COMMENT_MAX {
        let mut at = COMMENT_MAX;
        while !comment.is_char_boundary(at) {
            at -= 1;
        }
        comment.truncate(at);
    }
    comment
}

/// The user data nft keeps a chain's or an element's comment in: one
/// libnftnl TLV, type `NFTNL_UDATA_CHAIN_COMMENT` or
/// `NFTNL_UDATA_SET_ELEM_COMMENT` (both 0), a one-byte length, and the
/// text with its terminating NUL.
/// Whether `comment` is as [`fit_comment`] leaves it.
pub(crate) fn comment_fits(comment: &str) -> bool {
    comment.len() <= COMMENT_MAX && !comment.chars().any(|c| c == '"' || c.is_control())
}

pub(crate) fn comment_userdata(comment: &str) -> Vec<u8> {
    // Comments come fitted already (`with_comment`); fit only what is not.
    let fits = comment_fits(comment);
    let fitted;
    let text = if fits {
        comment
    } else {
        fitted = fit_comment(comment.to_owned());
        fitted.as_str()
    };
    let mut out = Vec::with_capacity(text.len() + 3);
    out.push(0);
    out.push(u8::try_from(text.len() + 1).unwrap_or(u8::MAX));
    out.extend_from_slice(text.as_bytes());
    out.push(0);
    out
}

/// The comment in nft's user data of a chain or element (the TLV of type
/// 0), if any.
pub(crate) fn userdata_comment(mut udata: &[u8]) -> Option<String> {
    while let [kind, len, rest @ ..] = udata {
        let value = rest.get(..usize::from(*len))?;
        if *kind == 0 {
            let text = value.strip_suffix(&[0]).unwrap_or(value);
            return Some(String::from_utf8_lossy(text).into_owned());
        }
        udata = &rest[usize::from(*len)..];
    }
    None
}

/// A rule: expressions in order, in a chain.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
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

    #[test]
    fn comments_are_nfts_user_data() {
        let udata = comment_userdata("default/web:http/tcp");
        assert_eq!(&udata[..2], &[0, 21]);
        assert_eq!(udata.last(), Some(&0));
        assert_eq!(
            userdata_comment(&udata).as_deref(),
            Some("default/web:http/tcp")
        );
        // Another TLV first (a set element's flags, type 1): skipped.
        let with_flags = [vec![1, 4, 0, 0, 0, 0], udata].concat();
        assert_eq!(
            userdata_comment(&with_flags).as_deref(),
            Some("default/web:http/tcp")
        );
        assert_eq!(userdata_comment(&[0, 9, b'x']), None);
        let long = Element::key(vec![1]).with_comment("é".repeat(100));
        assert!(long.comment.is_some_and(|c| c.len() <= COMMENT_MAX));
    }

    #[test]
    fn prefixes_merge_into_ranges() {
        let p =
            |s: &str, len| ipnet::IpNet::new(s.parse::<IpAddr>().expect("ip"), len).expect("cidr");
        let keys = |v: Vec<Element>| -> Vec<(Vec<u8>, bool)> {
            v.into_iter().map(|e| (e.key, e.interval_end)).collect()
        };
        // Overlapping, touching, and of the other family.
        let got = Element::ranges(
            TableFamily::Ip,
            [
                p("10.1.0.0", 16),
                p("10.0.0.0", 8),
                p("11.0.0.0", 8),
                p("fd00::", 8),
                p("192.168.1.7", 32),
            ],
        );
        assert_eq!(
            keys(got),
            [
                (vec![10, 0, 0, 0], false),
                (vec![12, 0, 0, 0], true),
                (vec![192, 168, 1, 7], false),
                (vec![192, 168, 1, 8], true),
            ]
        );
        // To the top of the space: no end.
        let got = Element::ranges(TableFamily::Ip, [p("255.255.255.255", 32), p("0.0.0.0", 1)]);
        assert_eq!(keys(got).len(), 3);
        let got = Element::ranges(TableFamily::Ip6, [p("::", 0)]);
        assert_eq!(keys(got), [(vec![0; 16], false)]);
    }
}
