//! Values loaded from the packet (`ip daddr`, `numgen random mod N`):
//! their expressions, their types, and the `typeof` user data nft keeps
//! beside a set declared by them.

use super::expr::{Expr, MetaKey, PayloadBase, Reg};
use super::types::{DataType, TableFamily};

/// A value loaded from the packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Load {
    /// `ip saddr` or `ip6 saddr`.
    Saddr(TableFamily),
    /// `ip daddr` or `ip6 daddr`.
    Daddr(TableFamily),
    /// `meta l4proto`.
    L4Proto,
    /// `th dport`.
    Dport,
    /// `th sport`.
    Sport,
    /// `numgen random mod N`.
    Random(u32),
    /// `numgen inc mod N`: 0, 1, … N-1, 0, … over the packets the rule
    /// sees (round robin).
    Inc(u32),
    /// `jhash ip saddr . th sport mod N seed 0x0`: a flow's hash (its
    /// source address and port; the destination is the rule's), the same
    /// for every packet of the flow and for every node (consistent
    /// hashing's slot, with a Maglev table).
    Jhash(TableFamily, u32),
    /// `meta mark`.
    Mark,
}

impl Load {
    /// How many bytes it loads.
    pub fn len(self) -> u32 {
        match self {
            Load::Saddr(TableFamily::Ip6) | Load::Daddr(TableFamily::Ip6) => 16,
            Load::Saddr(_)
            | Load::Daddr(_)
            | Load::Random(_)
            | Load::Inc(_)
            | Load::Jhash(..)
            | Load::Mark => 4,
            Load::L4Proto => 1,
            Load::Dport | Load::Sport => 2,
        }
    }

    /// Whether it loads nothing (never: every load has a length).
    pub fn is_empty(self) -> bool {
        false
    }

    /// The type nft gives the value (a `numgen` value is a plain
    /// `integer`, which only a `typeof` declaration can name).
    pub fn datatype(self) -> DataType {
        match self {
            Load::Saddr(family) | Load::Daddr(family) => DataType::addr(family),
            Load::L4Proto => DataType::INET_PROTO,
            Load::Dport | Load::Sport => DataType::INET_SERVICE,
            Load::Random(_) | Load::Inc(_) | Load::Jhash(..) => DataType::INTEGER,
            Load::Mark => DataType::MARK,
        }
    }

    /// nft's byte order of the value (`BYTEORDER_*`): host order for meta
    /// and numgen values, network order for packet fields.
    fn byte_order(self) -> u32 {
        match self {
            Load::L4Proto | Load::Random(_) | Load::Inc(_) | Load::Jhash(..) | Load::Mark => 1,
            _ => 2,
        }
    }

    /// The expression nft's `typeof` names, in the user data nft writes
    /// beside a set (so `nft list` prints the declaration back): the
    /// expression's kind and its own attributes.
    fn describe(self, out: &mut Vec<u8>) {
        // nft's expression kinds, protocol descriptions and header fields.
        const PAYLOAD: u32 = 7;
        const META: u32 = 9;
        const NUMGEN: u32 = 23;
        const DESC_TH: u32 = 11;
        const DESC_IP: u32 = 12;
        const DESC_IP6: u32 = 13;
        let (kind, attrs): (u32, &[u32]) = match self {
            Load::Saddr(TableFamily::Ip6) => (PAYLOAD, &[DESC_IP6, 8]),
            Load::Daddr(TableFamily::Ip6) => (PAYLOAD, &[DESC_IP6, 9]),
            Load::Saddr(_) => (PAYLOAD, &[DESC_IP, 11]),
            Load::Daddr(_) => (PAYLOAD, &[DESC_IP, 12]),
            Load::Sport => (PAYLOAD, &[DESC_TH, 1]),
            Load::Dport => (PAYLOAD, &[DESC_TH, 2]),
            // NFT_META_L4PROTO.
            Load::L4Proto => (META, &[16]),
            // NFT_META_MARK.
            Load::Mark => (META, &[3]),
            // NFT_NG_RANDOM, the modulus, no offset.
            Load::Random(modulus) => (NUMGEN, &[1, modulus, 0]),
            // NFT_NG_INCREMENTAL.
            Load::Inc(modulus) => (NUMGEN, &[0, modulus, 0]),
            // An integer as numgen's is: nft 1.0.6 cannot list a set
            // declared by `typeof jhash …` (it crashes), so a hash keys a
            // map declared by `numgen`'s integer.
            Load::Jhash(_, modulus) => (NUMGEN, &[1, modulus, 0]),
        };
        udata_u32(out, 0, kind);
        let mut inner = Vec::new();
        for (i, value) in attrs.iter().enumerate() {
            udata_u32(&mut inner, u8::try_from(i).unwrap_or(u8::MAX), *value);
        }
        udata(out, 1, &inner);
    }
}

/// The type of a concatenation of `loads` (or of the one load).
pub fn datatype(loads: &[Load]) -> DataType {
    match loads {
        [one] => one.datatype(),
        _ => DataType::concat(&loads.iter().map(|l| l.datatype()).collect::<Vec<_>>()),
    }
}

/// One user-data attribute (libnftnl's format: type, length, value; no
/// padding).
fn udata(out: &mut Vec<u8>, kind: u8, value: &[u8]) {
    out.push(kind);
    out.push(u8::try_from(value.len()).unwrap_or(u8::MAX));
    out.extend_from_slice(value);
}

fn udata_u32(out: &mut Vec<u8>, kind: u8, value: u32) {
    udata(out, kind, &value.to_ne_bytes());
}

/// The `typeof` description of `loads`: one expression, or a concatenation.
fn describe(loads: &[Load]) -> Vec<u8> {
    let mut out = Vec::new();
    match loads {
        [one] => one.describe(&mut out),
        _ => {
            // EXPR_CONCAT, then each part in a nest of its index.
            udata_u32(&mut out, 0, 13);
            let mut parts = Vec::new();
            for (i, load) in loads.iter().enumerate() {
                let mut part = Vec::new();
                load.describe(&mut part);
                udata(&mut parts, u8::try_from(i).unwrap_or(u8::MAX), &part);
            }
            udata(&mut out, 1, &parts);
        }
    }
    out
}

fn byte_order(loads: &[Load]) -> u32 {
    match loads {
        [one] => one.byte_order(),
        // A concatenation's parts carry their own.
        _ => 0,
    }
}

/// The user data nft writes beside a set declared by `typeof`, so that
/// `nft list` (and any nft that reads the set back) names its key and
/// value by the expressions that make them.
pub(crate) fn set_userdata(key: &[Load], data: Option<&Typeof>) -> Vec<u8> {
    let mut out = Vec::new();
    udata_u32(&mut out, 0, byte_order(key));
    if let Some(data) = data {
        let order = match data {
            Typeof::Verdict => 0,
            Typeof::Value(loads) => byte_order(loads),
        };
        udata_u32(&mut out, 1, order);
    }
    udata(&mut out, 3, &describe(key));
    if let Some(data) = data {
        let described = match data {
            // EXPR_VERDICT, with no attributes.
            Typeof::Verdict => {
                let mut v = Vec::new();
                udata_u32(&mut v, 0, 1);
                udata(&mut v, 1, &[]);
                v
            }
            Typeof::Value(loads) => describe(loads),
        };
        udata(&mut out, 4, &described);
        // Whether the values are ranges: no.
        udata_u32(&mut out, 6, 0);
    }
    out
}

/// What a map declared by `typeof` maps to.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Typeof {
    /// Verdicts.
    Verdict,
    /// Values such as these loads make (a NAT target: `ip daddr . th
    /// dport`).
    Value(Vec<Load>),
}

impl Load {
    /// The expressions that load it into `dreg`: one, but for a hash,
    /// whose input is loaded first into registers 8 on (beyond any key
    /// kpng builds: a concatenation of IPv6 address, protocol, port and a
    /// number fills registers 0 to 6).
    pub fn exprs(self, dreg: Reg) -> Vec<Expr> {
        match self {
            Load::Jhash(family, modulus) => {
                let input = Reg::r32(8);
                let saddr = Load::Saddr(family);
                vec![
                    saddr.expr(input),
                    Load::Sport.expr(input.after(saddr.len())),
                    Expr::Hash {
                        sreg: input,
                        len: saddr.len() + 4,
                        modulus,
                        seed: 0,
                        dreg,
                    },
                ]
            }
            other => vec![other.expr(dreg)],
        }
    }

    /// The expression that loads it into `dreg` (for a hash: the hash
    /// itself, its input loaded by [`exprs`](Self::exprs)).
    pub fn expr(self, dreg: Reg) -> Expr {
        let payload = |base, offset, len| Expr::Payload {
            base,
            offset,
            len,
            dreg,
        };
        match self {
            Load::Saddr(TableFamily::Ip6) => payload(PayloadBase::Network, 8, 16),
            Load::Daddr(TableFamily::Ip6) => payload(PayloadBase::Network, 24, 16),
            Load::Saddr(_) => payload(PayloadBase::Network, 12, 4),
            Load::Daddr(_) => payload(PayloadBase::Network, 16, 4),
            Load::Dport => payload(PayloadBase::Transport, 2, 2),
            Load::Sport => payload(PayloadBase::Transport, 0, 2),
            Load::L4Proto => Expr::Meta {
                key: MetaKey::L4Proto,
                dreg,
            },
            Load::Mark => Expr::Meta {
                key: MetaKey::Mark,
                dreg,
            },
            Load::Random(modulus) => Expr::Numgen {
                modulus,
                random: true,
                offset: 0,
                dreg,
            },
            Load::Inc(modulus) => Expr::Numgen {
                modulus,
                random: false,
                offset: 0,
                dreg,
            },
            Load::Jhash(family, modulus) => Expr::Hash {
                sreg: Reg::r32(8),
                len: Load::Saddr(family).len() + 4,
                modulus,
                seed: 0,
                dreg,
            },
        }
    }
}
