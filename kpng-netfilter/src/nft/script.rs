//! Transactions as nft scripts (`nft -f` input), for dry runs and for
//! people: what [`Transaction`]'s `Display` writes.
//!
//! Every command is one line. Elements print as nft writes them, which
//! needs the set's types: the transaction knows those of the sets it
//! declares, and of others it was told about with
//! [`Transaction::describe`].

use std::fmt::{self, Write as _};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::elements::Elements;
use super::expr::Data;
use super::load::{Load, Typeof};
use super::object::{DataType, Element, MapTo, Set, Table};
use super::text::{Kind, constant, verdict};
use super::tx::{Op, Transaction};

/// How many elements one `add element` line holds.
const ELEMENTS_PER_LINE: usize = 256;

/// The parts of a type: one for a plain type, each part of a
/// concatenation (six bits of the id each) in order.
fn parts(t: DataType) -> Vec<u32> {
    let mut id = t.id;
    let mut out = Vec::new();
    while id != 0 {
        out.push(id & 0x3f);
        id >>= 6;
    }
    out.reverse();
    out
}

/// nft's name of a type, and how its values print.
fn type_info(id: u32) -> Option<(&'static str, usize, Kind)> {
    Some(match id {
        4 => ("integer", 4, Kind::Other),
        7 => ("ipv4_addr", 4, Kind::Addr),
        8 => ("ipv6_addr", 16, Kind::Addr),
        12 => ("inet_proto", 1, Kind::Proto),
        13 => ("inet_service", 2, Kind::Port),
        19 => ("mark", 4, Kind::Mark),
        _ => return None,
    })
}

/// A type as nft declares it: `ipv4_addr . inet_service`.
fn type_words(t: DataType) -> String {
    let words: Vec<String> = parts(t)
        .into_iter()
        .map(|id| type_info(id).map_or_else(|| format!("type#{id}"), |(w, ..)| w.to_owned()))
        .collect();
    words.join(" . ")
}

/// A value of type `t`, part by part (each padded to whole registers).
fn value_words(t: DataType, bytes: &[u8]) -> String {
    let mut out = Vec::new();
    let mut at = 0;
    for id in parts(t) {
        let Some((_, len, kind)) = type_info(id) else {
            return constant(Kind::Other, bytes);
        };
        let Some(part) = bytes.get(at..at + len) else {
            return constant(Kind::Other, bytes);
        };
        out.push(match id {
            // A plain integer, as nft reads it back: decimal, host order.
            4 => u32::from_ne_bytes(part.try_into().unwrap_or_default()).to_string(),
            _ => constant(kind, part),
        });
        at += len.next_multiple_of(4);
    }
    out.join(" . ")
}

/// The words of a load, as `typeof` names it.
fn load_words(load: Load) -> String {
    match load {
        Load::Saddr(f) => format!("{f} saddr"),
        Load::Daddr(f) => format!("{f} daddr"),
        Load::L4Proto => "meta l4proto".into(),
        Load::Dport => "th dport".into(),
        Load::Sport => "th sport".into(),
        Load::Random(n) => format!("numgen random mod {n}"),
        Load::Inc(n) => format!("numgen inc mod {n}"),
        Load::Jhash(family, n) => format!(
            "jhash {} . th sport mod {n} seed 0x0",
            load_words(Load::Saddr(family))
        ),
        Load::Mark => "meta mark".into(),
    }
}

fn loads_words(loads: &[Load]) -> String {
    loads
        .iter()
        .map(|l| load_words(*l))
        .collect::<Vec<_>>()
        .join(" . ")
}

impl Set {
    /// `map` or `set`, as nft's commands name it.
    pub fn kind(&self) -> &'static str {
        if self.map.is_some() { "map" } else { "set" }
    }

    /// The set's declaration in nft's syntax, what goes between the
    /// braces of `add map TABLE NAME { ... }`: `typeof ip daddr . th dport
    /// : verdict` or `type ipv4_addr; flags interval`.
    pub fn declaration(&self) -> String {
        let mut body = match &self.typeof_key {
            Some(key) => format!("typeof {}", loads_words(key)),
            None => format!("type {}", type_words(self.key)),
        };
        match (&self.map, &self.typeof_data) {
            (Some(_), Some(Typeof::Verdict)) | (Some(MapTo::Verdict), None) => {
                body.push_str(" : verdict");
            }
            (_, Some(Typeof::Value(loads))) => {
                let _ = write!(body, " : {}", loads_words(loads));
            }
            (Some(MapTo::Value(t)), None) => {
                let _ = write!(body, " : {}", type_words(*t));
            }
            (None, _) => {}
        }
        let mut flags = Vec::new();
        if self.interval {
            flags.push("interval");
        }
        if self.timeout {
            flags.extend(["dynamic", "timeout"]);
        }
        if !flags.is_empty() {
            let _ = write!(body, "; flags {}", flags.join(","));
        }
        if let Some(size) = self.size {
            let _ = write!(body, "; size {size}");
        }
        if self.counter {
            body.push_str("; counter");
        }
        body
    }

    /// One element in nft's syntax (a range's start prints as itself:
    /// see [`elements_text`](Self::elements_text) for whole ranges).
    pub fn element_text(&self, e: &Element) -> String {
        let mut out = value_words(self.key, &e.key);
        if let Some(comment) = &e.comment {
            let _ = write!(out, " comment \"{comment}\"");
        }
        match (&e.data, self.map) {
            (Some(Data::Verdict(v)), _) => {
                let _ = write!(out, " : {}", verdict(v));
            }
            (Some(Data::Value(bytes)), Some(MapTo::Value(t))) => {
                let _ = write!(out, " : {}", value_words(t, bytes));
            }
            (Some(Data::Value(bytes)), _) => {
                let _ = write!(out, " : {}", constant(Kind::Other, bytes));
            }
            (None, _) => {}
        }
        if let Some(ms) = e.timeout_ms {
            let _ = write!(out, " timeout {}s", ms / 1000);
        }
        out
    }

    /// Elements in nft's syntax; in an interval set, each start and the
    /// end after it print as one range (`10.0.0.0/8`, `10.0.0.1`,
    /// `10.0.0.1-10.0.0.5`).
    pub fn elements_text(&self, elements: &[Element]) -> Vec<String> {
        if !self.interval {
            return elements.iter().map(|e| self.element_text(e)).collect();
        }
        let mut out = Vec::new();
        let mut i = 0;
        while i < elements.len() {
            let start = &elements[i];
            if start.interval_end {
                // An end with no start: a range from the bottom.
                i += 1;
                continue;
            }
            let end = elements.get(i + 1).filter(|e| e.interval_end);
            out.push(range_text(&start.key, end.map(|e| e.key.as_slice())));
            i += if end.is_some() { 2 } else { 1 };
        }
        out
    }
}

/// A range from `start` up to (not including) `end`, or to the top of the
/// address space: as a prefix when it is one.
fn range_text(start: &[u8], end: Option<&[u8]>) -> String {
    let as_int = |b: &[u8]| b.iter().fold(0u128, |n, x| (n << 8) | u128::from(*x));
    let bits = u32::try_from(start.len() * 8).unwrap_or(128);
    let ip = |n: u128| -> IpAddr {
        if bits == 32 {
            IpAddr::V4(Ipv4Addr::from(u32::try_from(n).unwrap_or(u32::MAX)))
        } else {
            IpAddr::V6(Ipv6Addr::from(n))
        }
    };
    if bits != 32 && bits != 128 {
        return constant(Kind::Other, start);
    }
    let first = as_int(start);
    let space_end = if bits == 128 {
        None
    } else {
        Some(1u128 << bits)
    };
    // One past the last address, `None` at the top of a 128-bit space.
    let past = end.map(as_int).or(space_end);
    let size = match past {
        Some(p) => p.wrapping_sub(first),
        None => 0u128.wrapping_sub(first),
    };
    if size == 1 {
        return ip(first).to_string();
    }
    if size.is_power_of_two() && first % size == 0 {
        return format!("{}/{}", ip(first), bits - size.trailing_zeros());
    }
    if size == 0 && first == 0 {
        return format!("{}/0", ip(0));
    }
    let last = past.map_or(u128::MAX, |p| p - 1);
    format!("{}-{}", ip(first), ip(last))
}

impl Transaction {
    fn set_of(&self, table: &Table, name: &str) -> Option<&Set> {
        self.ops()
            .find_map(|op| match op {
                Op::AddSet(t, s) if t == table && s.name == name => Some(s),
                _ => None,
            })
            .or_else(|| {
                self.described
                    .iter()
                    .find(|(t, s)| t == table && s.name == name)
                    .map(|(_, s)| s)
            })
    }

    fn elements_line(
        &self,
        f: &mut fmt::Formatter<'_>,
        verb: &str,
        table: &Table,
        set: &str,
        elements: &Elements,
    ) -> fmt::Result {
        let known = self.set_of(table, set);
        let t = format!("{} {}", table.family, table.name);
        let (mut at, n) = (0, elements.len());
        while at < n {
            let mut end = (at + ELEMENTS_PER_LINE).min(n);
            // A range's start and end stay on one line.
            if known.is_some_and(|s| s.interval)
                && elements.get(end).is_some_and(|e| e.interval_end)
            {
                end += 1;
            }
            let chunk = elements.slice(at..end);
            let words = match known {
                Some(s) => s.elements_text(&chunk),
                None => chunk
                    .iter()
                    .map(|e| constant(Kind::Other, &e.key))
                    .collect(),
            };
            writeln!(f, "{verb} element {t} {set} {{ {} }}", words.join(", "))?;
            at = end;
        }
        Ok(())
    }
}

/// The transaction as an nft script: one command per line, in order.
impl fmt::Display for Transaction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = |table: &Table| format!("{} {}", table.family, table.name);
        for op in self.ops() {
            match op {
                Op::AddTable(table) => writeln!(f, "add {table}")?,
                Op::DeleteTable(table) => writeln!(f, "delete {table}")?,
                Op::AddChain(table, chain) => {
                    let comment = chain.comment.as_ref().map(|c| format!(" comment \"{c}\";"));
                    match (&chain.base, comment) {
                        (Some(base), comment) => writeln!(
                            f,
                            "add chain {} {} {{ type {} hook {} priority {}; policy accept;{} }}",
                            t(table),
                            chain.name,
                            base.kind.name(),
                            base.hook.name(),
                            base.priority,
                            comment.unwrap_or_default()
                        )?,
                        (None, Some(comment)) => {
                            writeln!(f, "add chain {} {} {{{comment} }}", t(table), chain.name)?;
                        }
                        (None, None) => writeln!(f, "add chain {} {}", t(table), chain.name)?,
                    }
                }
                Op::DeleteChain(table, chain) => writeln!(f, "delete chain {} {chain}", t(table))?,
                Op::FlushChain(table, chain) => writeln!(f, "flush chain {} {chain}", t(table))?,
                Op::AddSet(table, set) => writeln!(
                    f,
                    "add {} {} {} {{ {}; }}",
                    set.kind(),
                    t(table),
                    set.name,
                    set.declaration()
                )?,
                Op::DeleteSet(table, set) => writeln!(f, "delete set {} {set}", t(table))?,
                Op::FlushSet(table, set) => writeln!(f, "flush set {} {set}", t(table))?,
                Op::AddElements(table, set, elements) => {
                    self.elements_line(f, "add", table, set, elements)?;
                }
                Op::DeleteElements(table, set, elements) => {
                    self.elements_line(f, "delete", table, set, elements)?;
                }
                Op::AddRule(table, rule) => {
                    writeln!(f, "add rule {} {} {rule}", t(table), rule.chain)?;
                }
                Op::DeleteRule(table, chain, handle) => {
                    writeln!(f, "delete rule {} {chain} handle {handle}", t(table))?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nft::{NfVerdict, TableFamily, key};

    #[test]
    fn declarations_read_as_nft_takes_them() {
        let pick = Set::keyed_by(
            "vip-cluster",
            &[
                Load::Daddr(TableFamily::Ip),
                Load::L4Proto,
                Load::Dport,
                Load::Random(2),
            ],
        )
        .to_values(&[Load::Daddr(TableFamily::Ip), Load::Dport]);
        assert_eq!(
            pick.declaration(),
            "typeof ip daddr . meta l4proto . th dport . numgen random mod 2 : ip daddr . th dport"
        );
        assert_eq!(
            pick.clone().with_counter().declaration(),
            "typeof ip daddr . meta l4proto . th dport . numgen random mod 2 : ip daddr . th dport; counter"
        );
        let e = Element::map(
            key(&[
                &[10, 96, 0, 1],
                &[6],
                &80u16.to_be_bytes(),
                &2u32.to_ne_bytes(),
            ]),
            Data::Value(key(&[&[10, 244, 1, 5], &8080u16.to_be_bytes()])),
        );
        assert_eq!(
            pick.element_text(&e),
            "10.96.0.1 . tcp . 80 . 2 : 10.244.1.5 . 8080"
        );
        let vmap = Set::verdict_map(
            "service-ips",
            DataType::concat(&[DataType::IPV6_ADDR, DataType::INET_PROTO]),
        );
        assert_eq!(vmap.declaration(), "type ipv6_addr . inet_proto : verdict");
        let e = Element::map(
            key(&[&"fd00::1".parse::<Ipv6Addr>().expect("ip").octets(), &[17]]),
            Data::Verdict(NfVerdict::Goto("svc".into())),
        );
        assert_eq!(vmap.element_text(&e), "fd00::1 . udp : goto svc");
        assert_eq!(
            vmap.element_text(&e.with_comment("ns/web:dns/udp")),
            "fd00::1 . udp comment \"ns/web:dns/udp\" : goto svc"
        );
        let aff = Set::new("aff", DataType::IPV4_ADDR).with_timeouts();
        assert_eq!(aff.declaration(), "type ipv4_addr; flags dynamic,timeout");
    }

    #[test]
    fn ranges_print_as_prefixes_or_ranges() {
        let set = Set::new("r", DataType::IPV4_ADDR).intervals();
        let start = |b: [u8; 4]| Element::key(b.to_vec());
        let end = |b: [u8; 4]| Element {
            interval_end: true,
            ..Element::key(b.to_vec())
        };
        let elements = [
            start([10, 0, 0, 0]),
            end([11, 0, 0, 0]),
            start([192, 168, 1, 1]),
            end([192, 168, 1, 2]),
            start([192, 168, 2, 1]),
            end([192, 168, 2, 6]),
            start([224, 0, 0, 0]),
        ];
        assert_eq!(
            set.elements_text(&elements),
            [
                "10.0.0.0/8",
                "192.168.1.1",
                "192.168.2.1-192.168.2.5",
                "224.0.0.0/3"
            ]
        );
        let all = Set::new("r6", DataType::IPV6_ADDR).intervals();
        assert_eq!(all.elements_text(&[Element::key(vec![0; 16])]), ["::/0"]);
    }
}
