//! Rules as nft writes them (`nft list`), for dry runs and messages.
//!
//! A rule is a list of register operations; nft's syntax names what they
//! do together (`ip daddr . meta l4proto . th dport vmap @services`). The
//! printer follows the registers: loads name a value, a lookup or
//! comparison that reads them prints it, and statements print their own
//! words. What it does not recognise prints as the expression's debug
//! form, so nothing is ever left out.

use std::fmt::{self, Write as _};
use std::net::{Ipv4Addr, Ipv6Addr};

use super::expr::{
    CmpOp, CtDirection, CtKey, Data, DynsetOp, Expr, FibResult, MetaKey, NatKind, NfVerdict,
    PayloadBase, Reg, RejectKind,
};
use super::object::{Rule, TableFamily};

/// What a register holds: its nft words and how to print a constant of it.
#[derive(Clone, Debug)]
struct Value {
    words: String,
    kind: Kind,
    /// A flag mask applied to it (`ct state & new`), printed by the
    /// comparison that tests it.
    mask: Option<Vec<u8>>,
    /// How many 32-bit registers it fills (an IPv6 address: four).
    width: usize,
    /// Whether it is computed (`meta mark & 0x4000`), not loaded.
    computed: bool,
}

impl Value {
    fn new(words: impl Into<String>, kind: Kind) -> Self {
        Self {
            words: words.into(),
            kind,
            mask: None,
            width: 1,
            computed: false,
        }
    }

    /// The value loaded from `len` bytes.
    fn of_len(self, len: usize) -> Self {
        Self {
            width: len.div_ceil(4).max(1),
            ..self
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Kind {
    Addr,
    Port,
    Proto,
    Mark,
    CtState,
    CtStatus,
    AddrType,
    Other,
}

/// The names of the bits set in a 32-bit host-order flag word.
fn flags(kind: Kind, bytes: &[u8]) -> Option<String> {
    let word = u32::from_ne_bytes(bytes.try_into().ok()?);
    let names: &[(u32, &str)] = match kind {
        Kind::CtState => &[
            (1, "invalid"),
            (2, "established"),
            (4, "related"),
            (8, "new"),
            (64, "untracked"),
        ],
        Kind::CtStatus => &[
            (1, "expected"),
            (2, "seen-reply"),
            (4, "assured"),
            (16, "snat"),
            (32, "dnat"),
        ],
        _ => return None,
    };
    // Named only when every bit set has a name.
    let known = names.iter().fold(0, |all, (bit, _)| all | bit);
    let set: Vec<&str> = names
        .iter()
        .filter(|(bit, _)| word & bit != 0)
        .map(|(_, n)| *n)
        .collect();
    (!set.is_empty() && word & !known == 0).then(|| set.join(","))
}

fn payload_words(base: PayloadBase, offset: u32, len: u32) -> Option<(&'static str, Kind)> {
    Some(match (base, offset, len) {
        (PayloadBase::Network, 12, 4) => ("ip saddr", Kind::Addr),
        (PayloadBase::Network, 16, 4) => ("ip daddr", Kind::Addr),
        (PayloadBase::Network, 8, 16) => ("ip6 saddr", Kind::Addr),
        (PayloadBase::Network, 24, 16) => ("ip6 daddr", Kind::Addr),
        (PayloadBase::Transport, 0, 2) => ("th sport", Kind::Port),
        (PayloadBase::Transport, 2, 2) => ("th dport", Kind::Port),
        (PayloadBase::Transport, 13, 1) => ("tcp flags", Kind::Other),
        _ => return None,
    })
}

pub(crate) fn constant(kind: Kind, bytes: &[u8]) -> String {
    match (kind, bytes.len()) {
        (Kind::Addr, 4) => {
            Ipv4Addr::from(<[u8; 4]>::try_from(bytes).unwrap_or_default()).to_string()
        }
        (Kind::Addr, 16) => {
            Ipv6Addr::from(<[u8; 16]>::try_from(bytes).unwrap_or_default()).to_string()
        }
        (Kind::Port, 2) => u16::from_be_bytes([bytes[0], bytes[1]]).to_string(),
        (Kind::Proto, 1) => match bytes[0] {
            6 => "tcp".into(),
            17 => "udp".into(),
            132 => "sctp".into(),
            n => n.to_string(),
        },
        (Kind::Mark, 4) => format!(
            "{:#010x}",
            u32::from_ne_bytes(<[u8; 4]>::try_from(bytes).unwrap_or_default())
        ),
        (Kind::AddrType, 4) => {
            match u32::from_ne_bytes(<[u8; 4]>::try_from(bytes).unwrap_or_default()) {
                1 => "unicast".into(),
                2 => "local".into(),
                3 => "broadcast".into(),
                5 => "multicast".into(),
                n => n.to_string(),
            }
        }
        (Kind::CtState | Kind::CtStatus, 4) => {
            flags(kind, bytes).unwrap_or_else(|| constant(Kind::Other, bytes))
        }
        _ => bytes.iter().fold(String::from("0x"), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        }),
    }
}

pub(crate) fn verdict(v: &NfVerdict) -> String {
    match v {
        NfVerdict::Accept => "accept".into(),
        NfVerdict::Drop => "drop".into(),
        NfVerdict::Continue => "continue".into(),
        NfVerdict::Return => "return".into(),
        NfVerdict::Jump(c) => format!("jump {c}"),
        NfVerdict::Goto(c) => format!("goto {c}"),
    }
}

/// The registers from `first` on, as many as hold values in a row: a
/// concatenation's parts.
fn concat(regs: &[Option<Value>; 24], first: Reg) -> Option<String> {
    let mut at = usize::try_from(first.number()).ok()?;
    let mut words = Vec::new();
    while let Some(Some(v)) = regs.get(at) {
        words.push(v.words.clone());
        at += v.width;
    }
    (!words.is_empty()).then(|| words.join(" . "))
}

/// The registers from `first` on that make up `len` bytes: a hash's
/// input.
fn concat_of(regs: &[Option<Value>; 24], first: Reg, len: u32) -> Option<String> {
    let mut at = usize::try_from(first.number()).ok()?;
    let end = at + usize::try_from(len.div_ceil(4)).ok()?;
    let mut words = Vec::new();
    while at < end {
        let v = regs.get(at)?.as_ref()?;
        words.push(v.words.clone());
        at += v.width;
    }
    (!words.is_empty()).then(|| words.join(" . "))
}

impl fmt::Display for Rule {
    /// The rule in nft's syntax, as `nft list` prints it in a table of
    /// the rule's address family, counters without their numbers (for the
    /// shapes kpng writes; anything else prints as the expression it is).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut regs: [Option<Value>; 24] = Default::default();
        let mut out: Vec<String> = Vec::new();
        let slot = |r: Reg| usize::try_from(r.number()).unwrap_or(usize::MAX);
        for e in &self.exprs {
            match e {
                Expr::Payload {
                    base,
                    offset,
                    len,
                    dreg,
                } => {
                    let value = match payload_words(*base, *offset, *len) {
                        Some((words, kind)) => Value::new(words, kind),
                        // nft's raw payload: `@th,OFFSET,LENGTH` in bits.
                        None => Value::new(
                            format!(
                                "@{},{},{}",
                                match base {
                                    PayloadBase::Link => "ll",
                                    PayloadBase::Network => "nh",
                                    PayloadBase::Transport => "th",
                                },
                                offset * 8,
                                len * 8
                            ),
                            Kind::Other,
                        ),
                    };
                    clear_from(&mut regs, slot(*dreg), *len);
                    let len = usize::try_from(*len).unwrap_or(4);
                    set(&mut regs, slot(*dreg), value.of_len(len));
                }
                Expr::Meta { key, dreg } => {
                    let (words, kind) = match key {
                        MetaKey::L4Proto => ("meta l4proto", Kind::Proto),
                        MetaKey::Mark => ("meta mark", Kind::Mark),
                        MetaKey::NfProto => ("meta nfproto", Kind::Other),
                        MetaKey::Iif => ("meta iif", Kind::Other),
                        MetaKey::Oif => ("meta oif", Kind::Other),
                        MetaKey::Other(_) => ("meta", Kind::Other),
                    };
                    set(&mut regs, slot(*dreg), Value::new(words, kind));
                }
                Expr::Ct { key, dreg } => {
                    let value = match *key {
                        CtKey::State => Value::new("ct state", Kind::CtState),
                        CtKey::Status => Value::new("ct status", Kind::CtStatus),
                        CtKey::Mark => Value::new("ct mark", Kind::Mark),
                        CtKey::ZONE => Value::new("ct zone", Kind::Other),
                        CtKey::Other(_) => Value::new("ct", Kind::Other),
                    };
                    set(&mut regs, slot(*dreg), value);
                }
                Expr::CtDir {
                    key,
                    direction,
                    dreg,
                } => {
                    let (words, kind, len) = match *key {
                        CtKey::SRC_IP => ("ip saddr", Kind::Addr, 4),
                        CtKey::DST_IP => ("ip daddr", Kind::Addr, 4),
                        CtKey::SRC_IP6 => ("ip6 saddr", Kind::Addr, 16),
                        CtKey::DST_IP6 => ("ip6 daddr", Kind::Addr, 16),
                        CtKey::PROTO_SRC => ("proto-src", Kind::Port, 2),
                        CtKey::PROTO_DST => ("proto-dst", Kind::Port, 2),
                        _ => ("", Kind::Other, 4),
                    };
                    let direction = match direction {
                        CtDirection::Original => "original",
                        CtDirection::Reply => "reply",
                    };
                    let value = Value::new(format!("ct {direction} {words}"), kind).of_len(len);
                    set(&mut regs, slot(*dreg), value);
                }
                Expr::Fib {
                    flags,
                    result,
                    dreg,
                } => {
                    let dir = if flags & 1 != 0 { "saddr" } else { "daddr" };
                    let what = match result {
                        FibResult::AddrType => "type",
                        FibResult::Oif => "oif",
                    };
                    let kind = match result {
                        FibResult::AddrType => Kind::AddrType,
                        FibResult::Oif => Kind::Other,
                    };
                    set(
                        &mut regs,
                        slot(*dreg),
                        Value::new(format!("fib {dir} {what}"), kind),
                    );
                }
                Expr::Hash {
                    sreg,
                    len,
                    modulus,
                    seed,
                    dreg,
                } => {
                    let input = concat_of(&regs, *sreg, *len).unwrap_or_else(|| format!("{e:?}"));
                    let words = format!("jhash {input} mod {modulus} seed {seed:#x}");
                    set(&mut regs, slot(*dreg), Value::new(words, Kind::Other));
                }
                Expr::Numgen {
                    modulus,
                    random,
                    dreg,
                    ..
                } => {
                    let how = if *random { "random" } else { "inc" };
                    let words = format!("numgen {how} mod {modulus}");
                    set(&mut regs, slot(*dreg), Value::new(words, Kind::Other));
                }
                Expr::Bitwise {
                    sreg,
                    dreg,
                    mask,
                    xor,
                } => {
                    let Some(src) = regs.get(slot(*sreg)).cloned().flatten() else {
                        out.push(format!("{e:?}"));
                        continue;
                    };
                    let kind = src.kind;
                    if matches!(kind, Kind::CtState | Kind::CtStatus) && xor.iter().all(|b| *b == 0)
                    {
                        let value = Value {
                            mask: Some(mask.clone()),
                            ..src
                        };
                        set(&mut regs, slot(*dreg), value);
                        continue;
                    }
                    // nft writes `x | bits` as mask = !bits, xor = bits.
                    let or = mask.len() == xor.len()
                        && mask.iter().zip(xor.iter()).all(|(m, x)| *m == !*x)
                        && xor.iter().any(|b| *b != 0);
                    let fixed = mask.iter().all(|b| *b == 0);
                    let words = if fixed {
                        // A constant (`build::load_fixed`): nft reads
                        // `x & 0 | c` back as this.
                        format!(
                            "{} & {} | {}",
                            src.words,
                            constant(kind, mask),
                            constant(kind, xor)
                        )
                    } else if or {
                        format!("{} | {}", src.words, constant(kind, xor))
                    } else if xor.iter().all(|b| *b == 0) {
                        format!("{} & {}", src.words, constant(kind, mask))
                    } else if mask.iter().all(|b| *b == 0xff) {
                        format!("{} ^ {}", src.words, constant(kind, xor))
                    } else {
                        format!(
                            "({} & {}) ^ {}",
                            src.words,
                            constant(kind, mask),
                            constant(kind, xor)
                        )
                    };
                    let value = Value {
                        computed: true,
                        ..Value::new(words, kind)
                    };
                    set(&mut regs, slot(*dreg), value);
                }
                Expr::Cmp { sreg, op, data } => {
                    let Some(src) = regs.get(slot(*sreg)).cloned().flatten() else {
                        out.push(format!("{e:?}"));
                        continue;
                    };
                    let op = match op {
                        CmpOp::Eq => "==",
                        CmpOp::Neq => "!=",
                        CmpOp::Lt => "<",
                        CmpOp::Lte => "<=",
                        CmpOp::Gt => ">",
                        CmpOp::Gte => ">=",
                    };
                    match (&src.mask, op) {
                        // A flag test: `ct state new`.
                        (Some(mask), "!=") if data.iter().all(|b| *b == 0) => {
                            out.push(format!("{} {}", src.words, constant(src.kind, mask)));
                        }
                        (_, "==") if src.kind == Kind::AddrType => {
                            out.push(format!("{} {}", src.words, constant(src.kind, data)));
                        }
                        // A plain value equals a constant: nft leaves out
                        // the `==` (`meta l4proto tcp`), not after a mask.
                        (None, "==") if !src.computed => {
                            out.push(format!("{} {}", src.words, constant(src.kind, data)));
                        }
                        _ => out.push(format!("{} {op} {}", src.words, constant(src.kind, data))),
                    }
                }
                Expr::Lookup {
                    sreg,
                    set: name,
                    dreg,
                    invert,
                } => {
                    let key = concat(&regs, *sreg).unwrap_or_else(|| format!("{e:?}"));
                    match dreg {
                        None => {
                            let not = if *invert { "!= " } else { "" };
                            out.push(format!("{key} {not}@{name}"));
                        }
                        Some(d) if *d == Reg::VERDICT => out.push(format!("{key} vmap @{name}")),
                        Some(d) => set(
                            &mut regs,
                            slot(*d),
                            Value::new(format!("{key} map @{name}"), Kind::Other),
                        ),
                    }
                }
                Expr::Immediate { dreg, data } => match data {
                    Data::Verdict(v) => out.push(verdict(v)),
                    Data::Value(bytes) => {
                        // Immediates load NAT targets: a port or an address.
                        let kind = if bytes.len() == 2 {
                            Kind::Port
                        } else {
                            Kind::Addr
                        };
                        let value = Value::new(constant(kind, bytes), kind).of_len(bytes.len());
                        set(&mut regs, slot(*dreg), value);
                    }
                },
                Expr::MetaSet { key, sreg } => {
                    let what = match key {
                        MetaKey::Mark => "meta mark",
                        _ => "meta",
                    };
                    let value = regs
                        .get(slot(*sreg))
                        .cloned()
                        .flatten()
                        .map_or_else(|| format!("{e:?}"), |v| v.words);
                    out.push(format!("{what} set {value}"));
                }
                Expr::Nat {
                    kind,
                    family,
                    addr,
                    proto,
                    ..
                } => {
                    let word = match kind {
                        NatKind::Dnat => "dnat",
                        NatKind::Snat => "snat",
                    };
                    let fam = match family {
                        TableFamily::Ip6 => "ip6",
                        _ => "ip",
                    };
                    let value =
                        |r: &Option<Reg>| r.and_then(|r| regs.get(slot(r)).cloned().flatten());
                    // As nft lists it in a table of the address's family: the
                    // family is named for a map's target only.
                    let text = match (value(addr), value(proto)) {
                        (Some(a), _) if a.words.contains(" map @") => {
                            format!("{word} {fam} to {}", a.words)
                        }
                        (Some(a), Some(p)) if fam == "ip6" => {
                            format!("{word} to [{}]:{}", a.words, p.words)
                        }
                        (Some(a), Some(p)) => format!("{word} to {}:{}", a.words, p.words),
                        (Some(a), None) => format!("{word} to {}", a.words),
                        _ => format!("{e:?}"),
                    };
                    out.push(text);
                }
                Expr::Masquerade { flags } => out.push(if flags & 16 != 0 {
                    "masquerade fully-random".into()
                } else {
                    "masquerade".into()
                }),
                Expr::Reject(kind) => out.push(match kind {
                    RejectKind::TcpReset => "reject with tcp reset".into(),
                    _ => "reject".into(),
                }),
                Expr::Counter => out.push("counter".into()),
                Expr::Notrack => out.push("notrack".into()),
                Expr::Dynset {
                    op,
                    set: name,
                    key,
                    timeout_ms,
                } => {
                    let key = concat(&regs, *key).unwrap_or_else(|| format!("{e:?}"));
                    let op = match op {
                        DynsetOp::Add => "add",
                        DynsetOp::Update => "update",
                        DynsetOp::Delete => "delete",
                    };
                    let timeout = timeout_ms
                        .map(|ms| format!(" timeout {}s", ms / 1000))
                        .unwrap_or_default();
                    out.push(format!("{op} @{name} {{ {key}{timeout} }}"));
                }
            }
        }
        f.write_str(&out.join(" "))
    }
}

fn set(regs: &mut [Option<Value>; 24], at: usize, value: Value) {
    if let Some(slot) = regs.get_mut(at) {
        *slot = Some(value);
    }
}

/// A load of `len` bytes from `at` overwrites the registers it fills.
fn clear_from(regs: &mut [Option<Value>; 24], at: usize, len: u32) {
    let n = usize::try_from(len.div_ceil(4)).unwrap_or(1);
    for slot in regs.iter_mut().skip(at).take(n) {
        *slot = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pick_rule_reads_as_nft_lists_it() {
        let r = Reg::r32;
        let rule = Rule::new(
            "pick-2",
            vec![
                Expr::Payload {
                    base: PayloadBase::Network,
                    offset: 16,
                    len: 4,
                    dreg: r(0),
                },
                Expr::Meta {
                    key: MetaKey::L4Proto,
                    dreg: r(1),
                },
                Expr::Payload {
                    base: PayloadBase::Transport,
                    offset: 2,
                    len: 2,
                    dreg: r(2),
                },
                Expr::Numgen {
                    modulus: 2,
                    random: true,
                    offset: 0,
                    dreg: r(3),
                },
                Expr::Lookup {
                    sreg: r(0),
                    set: "pick".into(),
                    dreg: Some(r(0)),
                    invert: false,
                },
                Expr::Nat {
                    kind: NatKind::Dnat,
                    family: TableFamily::Ip,
                    addr: Some(r(0)),
                    proto: Some(r(1)),
                    flags: 0,
                },
            ],
        );
        // As nft 1.0.6 listed the same rule in `cargo bench -p
        // kpng-netfilter --bench netlink`.
        assert_eq!(
            rule.to_string(),
            "dnat ip to ip daddr . meta l4proto . th dport . numgen random mod 2 map @pick"
        );
        // A flow's hash and a round-robin number, as nft 1.0.6 lists them
        // (checked with `nft -f` and `nft list ruleset` in a namespace).
        use crate::nft::build;
        use crate::nft::load::Load;
        let keys = |last| {
            [
                Load::Daddr(TableFamily::Ip),
                Load::L4Proto,
                Load::Dport,
                last,
            ]
        };
        let maglev = Rule::new(
            "c",
            build::dnat_map(
                TableFamily::Ip,
                &keys(Load::Jhash(TableFamily::Ip, 1021)),
                "vip-cluster",
            ),
        );
        assert_eq!(
            maglev.to_string(),
            "dnat ip to ip daddr . meta l4proto . th dport . jhash ip saddr . th sport mod 1021 seed 0x0 map @vip-cluster"
        );
        let v6 = [
            Load::Daddr(TableFamily::Ip6),
            Load::L4Proto,
            Load::Dport,
            Load::Jhash(TableFamily::Ip6, 1021),
        ];
        let maglev6 = Rule::new("c", build::dnat_map(TableFamily::Ip6, &v6, "vip-cluster"));
        assert_eq!(
            maglev6.to_string(),
            "dnat ip6 to ip6 daddr . meta l4proto . th dport . jhash ip6 saddr . th sport mod 1021 seed 0x0 map @vip-cluster"
        );
        let rr = Rule::new(
            "c",
            build::dnat_map(TableFamily::Ip, &keys(Load::Inc(3)), "vip-cluster"),
        );
        assert_eq!(
            rr.to_string(),
            "dnat ip to ip daddr . meta l4proto . th dport . numgen inc mod 3 map @vip-cluster"
        );
        let unknown = Rule::new(
            "c",
            vec![
                Expr::Payload {
                    base: PayloadBase::Link,
                    offset: 0,
                    len: 6,
                    dreg: r(0),
                },
                Expr::Cmp {
                    sreg: r(0),
                    op: CmpOp::Eq,
                    data: vec![0; 6],
                },
            ],
        );
        // Not a shape nft names here: printed as nft reads a raw payload
        // (`@ll,OFFSET,LENGTH` in bits), not dropped.
        assert!(
            unknown.to_string().contains("@ll,0,48 0x000000000000"),
            "{unknown}"
        );
    }
}
