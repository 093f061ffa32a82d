//! Rule pieces in nft's terms: the loads, matches and statements a service
//! proxy writes, each as the expressions it stands for.
//!
//! ```
//! use kpng_netfilter::nft::build::{Load, lookup};
//! use kpng_netfilter::nft::{Family, Reg, Rule};
//!
//! let key = [Load::Daddr(Family::Ip), Load::L4Proto, Load::Dport];
//! let rule = Rule::new("services", lookup(&key, "service-ips", Some(Reg::VERDICT), false));
//! assert_eq!(rule.to_string(), "ip daddr . meta l4proto . th dport vmap @service-ips");
//! ```

use std::net::IpAddr;

use super::expr::{
    CmpOp, CtKey, Data, Expr, FibResult, MetaKey, NatKind, PayloadBase, Reg, Verdict,
};
use super::object::{DataType, Family};

/// A value loaded from the packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Load {
    /// `ip saddr` or `ip6 saddr`.
    Saddr(Family),
    /// `ip daddr` or `ip6 daddr`.
    Daddr(Family),
    /// `meta l4proto`.
    L4Proto,
    /// `th dport`.
    Dport,
    /// `th sport`.
    Sport,
    /// `numgen random mod N`.
    Random(u32),
}

impl Load {
    /// How many bytes it loads.
    pub fn len(self) -> u32 {
        match self {
            Load::Saddr(Family::Ip6) | Load::Daddr(Family::Ip6) => 16,
            Load::Saddr(_) | Load::Daddr(_) | Load::Random(_) => 4,
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
            Load::Random(_) => DataType::INTEGER,
        }
    }

    /// nft's byte order of the value (`BYTEORDER_*`): host order for meta
    /// and numgen values, network order for packet fields.
    fn byte_order(self) -> u32 {
        match self {
            Load::L4Proto | Load::Random(_) => 1,
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
            Load::Saddr(Family::Ip6) => (PAYLOAD, &[DESC_IP6, 8]),
            Load::Daddr(Family::Ip6) => (PAYLOAD, &[DESC_IP6, 9]),
            Load::Saddr(_) => (PAYLOAD, &[DESC_IP, 11]),
            Load::Daddr(_) => (PAYLOAD, &[DESC_IP, 12]),
            Load::Sport => (PAYLOAD, &[DESC_TH, 1]),
            Load::Dport => (PAYLOAD, &[DESC_TH, 2]),
            // NFT_META_L4PROTO.
            Load::L4Proto => (META, &[16]),
            // NFT_NG_RANDOM, the modulus, no offset.
            Load::Random(modulus) => (NUMGEN, &[1, modulus, 0]),
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
    /// The expression that loads it into `dreg`.
    pub fn expr(self, dreg: Reg) -> Expr {
        let payload = |base, offset, len| Expr::Payload {
            base,
            offset,
            len,
            dreg,
        };
        match self {
            Load::Saddr(Family::Ip6) => payload(PayloadBase::Network, 8, 16),
            Load::Daddr(Family::Ip6) => payload(PayloadBase::Network, 24, 16),
            Load::Saddr(_) => payload(PayloadBase::Network, 12, 4),
            Load::Daddr(_) => payload(PayloadBase::Network, 16, 4),
            Load::Dport => payload(PayloadBase::Transport, 2, 2),
            Load::Sport => payload(PayloadBase::Transport, 0, 2),
            Load::L4Proto => Expr::Meta {
                key: MetaKey::L4Proto,
                dreg,
            },
            Load::Random(modulus) => Expr::Numgen {
                modulus,
                random: true,
                offset: 0,
                dreg,
            },
        }
    }
}

/// Loads `keys` into consecutive registers from the first 32-bit one:
/// a concatenation, as lookups read it.
pub fn load(keys: &[Load]) -> Vec<Expr> {
    let mut reg = Reg::r32(0);
    keys.iter()
        .map(|k| {
            let e = k.expr(reg);
            reg = reg.after(k.len());
            e
        })
        .collect()
}

/// `KEYS @set` (or `KEYS != @set`), `KEYS vmap @map` with `dreg` the
/// verdict register, or `KEYS map @map` into `dreg`.
pub fn lookup(keys: &[Load], set: &str, dreg: Option<Reg>, invert: bool) -> Vec<Expr> {
    let mut out = load(keys);
    out.push(Expr::Lookup {
        sreg: Reg::r32(0),
        set: set.to_owned(),
        dreg,
        invert,
    });
    out
}

/// `LOAD VALUE`: the loaded value equals `value` (`meta l4proto tcp`).
pub fn equals(load: Load, value: &[u8]) -> Vec<Expr> {
    let r = Reg::r32(0);
    vec![
        load.expr(r),
        Expr::Cmp {
            sreg: r,
            op: CmpOp::Eq,
            data: value.to_vec(),
        },
    ]
}

/// `dnat ip to KEYS map @map`: the map holds (address, port) targets.
pub fn dnat_map(family: Family, keys: &[Load], map: &str) -> Vec<Expr> {
    let mut out = lookup(keys, map, Some(Reg::r32(0)), false);
    out.push(Expr::Nat {
        kind: NatKind::Dnat,
        family,
        addr: Some(Reg::r32(0)),
        proto: Some(Reg::r32(0).after(Load::Daddr(family).len())),
        flags: 0,
    });
    out
}

/// `dnat to ADDRESS:PORT`.
pub fn dnat_to(ip: IpAddr, port: u16) -> Vec<Expr> {
    let (family, addr) = match ip {
        IpAddr::V4(v4) => (Family::Ip, v4.octets().to_vec()),
        IpAddr::V6(v6) => (Family::Ip6, v6.octets().to_vec()),
    };
    let proto = Reg::r32(0).after(u32::try_from(addr.len()).unwrap_or(16));
    vec![
        Expr::Immediate {
            dreg: Reg::r32(0),
            data: Data::Value(addr),
        },
        Expr::Immediate {
            dreg: proto,
            data: Data::Value(port.to_be_bytes().to_vec()),
        },
        Expr::Nat {
            kind: NatKind::Dnat,
            family,
            addr: Some(Reg::r32(0)),
            proto: Some(proto),
            flags: 0,
        },
    ]
}

/// `meta mark set meta mark | BITS`.
pub fn mark_set_or(bits: u32) -> Vec<Expr> {
    mark_set(!bits, bits)
}

/// `meta mark set meta mark ^ BITS`.
pub fn mark_set_xor(bits: u32) -> Vec<Expr> {
    mark_set(u32::MAX, bits)
}

/// The 32-bit value `load` puts in the first register, then
/// `(value & mask) ^ xor` there.
fn masked(load: Expr, mask: u32, xor: u32) -> Vec<Expr> {
    let r = Reg::r32(0);
    vec![
        load,
        Expr::Bitwise {
            sreg: r,
            dreg: r,
            mask: mask.to_ne_bytes().to_vec(),
            xor: xor.to_ne_bytes().to_vec(),
        },
    ]
}

/// The packet mark, masked: `meta mark & MASK ^ XOR`.
fn mark(mask: u32, xor: u32) -> Vec<Expr> {
    let load = Expr::Meta {
        key: MetaKey::Mark,
        dreg: Reg::r32(0),
    };
    masked(load, mask, xor)
}

/// The masked first register compared with 0.
fn zero(op: CmpOp) -> Expr {
    Expr::Cmp {
        sreg: Reg::r32(0),
        op,
        data: vec![0; 4],
    }
}

fn mark_set(mask: u32, xor: u32) -> Vec<Expr> {
    let mut out = mark(mask, xor);
    out.push(Expr::MetaSet {
        key: MetaKey::Mark,
        sreg: Reg::r32(0),
    });
    out
}

/// `meta mark & BITS == 0` (`!= 0` when `set`).
pub fn mark_test(bits: u32, set: bool) -> Vec<Expr> {
    let mut out = mark(bits, 0);
    out.push(zero(if set { CmpOp::Neq } else { CmpOp::Eq }));
    out
}

/// `ct state new` (`bits`: `NEW` is 8) or `ct status dnat` (32).
pub fn ct_test(key: CtKey, bits: u32) -> Vec<Expr> {
    let mut out = masked(
        Expr::Ct {
            key,
            dreg: Reg::r32(0),
        },
        bits,
        0,
    );
    out.push(zero(CmpOp::Neq));
    out
}

/// `fib saddr type local` (`source`) or `fib daddr type local`.
pub fn fib_local(source: bool) -> Vec<Expr> {
    let r = Reg::r32(0);
    vec![
        Expr::Fib {
            flags: if source { 1 } else { 2 },
            result: FibResult::AddrType,
            dreg: r,
        },
        // RTN_LOCAL, in host order as the register holds it.
        Expr::Cmp {
            sreg: r,
            op: CmpOp::Eq,
            data: 2u32.to_ne_bytes().to_vec(),
        },
    ]
}

/// The verdict that ends a rule.
pub fn verdict(verdict: Verdict) -> Vec<Expr> {
    vec![Expr::verdict(verdict)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nft::{Rule, Set};

    fn text(exprs: Vec<Vec<Expr>>) -> String {
        Rule::new("c", exprs.concat()).to_string()
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The user data nft 1.0.6 wrote for the same declarations (read with
    /// `nft --debug=mnl`): nft lists sets declared here as it declared
    /// them itself.
    #[test]
    fn typeof_user_data_is_what_nft_writes() {
        let ip6 = Family::Ip6;
        let n6 = Set::keyed_by("n6", &[Load::L4Proto, Load::Dport, Load::Random(2)])
            .to_values(&[Load::Daddr(ip6), Load::Dport]);
        assert_eq!(
            hex(&n6.userdata().expect("typeof")),
            "000400000000010400000000034a00040d0000000142000e00040900000001060004100000000114000407000000010c00040b000000010402000000021a0004170000000112000401000000010402000000020400000000043400040d000000012c0014000407000000010c00040d0000000104090000000114000407000000010c00040b000000010402000000060400000000"
        );
        assert_eq!(
            n6.key,
            DataType {
                id: 0xc344,
                len: 12
            }
        );
        let v4 = Set::keyed_by(
            "v4",
            &[
                Load::Daddr(Family::Ip),
                Load::L4Proto,
                Load::Dport,
                Load::Random(2),
            ],
        )
        .to_values(&[Load::Daddr(Family::Ip), Load::Dport]);
        assert_eq!(
            v4.key,
            DataType {
                id: 0x1c_c344,
                len: 16
            }
        );
        assert!(hex(&v4.userdata().expect("typeof")).starts_with(
            "000400000000010400000000036000040d00000001580014000407000000010c00040c00000001040c000000"
        ));
        let g = Set::keyed_by("g", &[Load::Random(2)]).to_verdicts();
        assert_eq!(
            hex(&g.userdata().expect("typeof")),
            "000401000000010400000000031a000417000000011200040100000001040200000002040000000004080004010000000100060400000000"
        );
        let s = Set::keyed_by("s", &[Load::Saddr(ip6), Load::Sport]);
        assert_eq!(
            hex(&s.userdata().expect("typeof")),
            "000400000000033400040d000000012c0014000407000000010c00040d0000000104080000000114000407000000010c00040b000000010401000000"
        );
        assert_eq!(Set::new("plain", DataType::IPV4_ADDR).userdata(), None);
    }

    #[test]
    fn pieces_read_as_nft_writes_them() {
        let ip6 = [Load::Daddr(Family::Ip6), Load::L4Proto, Load::Dport];
        assert_eq!(
            text(vec![lookup(&ip6, "service-ips", Some(Reg::VERDICT), false)]),
            "ip6 daddr . meta l4proto . th dport vmap @service-ips"
        );
        let pick = [
            Load::Daddr(Family::Ip),
            Load::L4Proto,
            Load::Dport,
            Load::Random(3),
        ];
        assert_eq!(
            text(vec![dnat_map(Family::Ip, &pick, "vip-cluster")]),
            "dnat ip to ip daddr . meta l4proto . th dport . numgen random mod 3 map @vip-cluster"
        );
        assert_eq!(
            text(vec![dnat_to("fd00::5".parse().expect("ip"), 8080)]),
            "dnat to [fd00::5]:8080"
        );
        assert_eq!(
            text(vec![
                lookup(&[Load::Saddr(Family::Ip)], "cluster-cidrs", None, true),
                mark_set_or(0x4000),
            ]),
            "ip saddr != @cluster-cidrs meta mark set meta mark | 0x00004000"
        );
        assert_eq!(
            text(vec![mark_test(0x4000, false), verdict(Verdict::Return)]),
            "meta mark & 0x00004000 == 0x00000000 return"
        );
        assert_eq!(
            text(vec![ct_test(CtKey::State, 8), fib_local(false)]),
            "ct state new fib daddr type local"
        );
        assert_eq!(
            text(vec![
                equals(Load::L4Proto, &[6]),
                dnat_to("10.0.0.1".parse().expect("ip"), 80)
            ]),
            "meta l4proto tcp dnat to 10.0.0.1:80"
        );
    }
}
