//! Rule pieces in nft's terms: the loads, matches and statements a service
//! proxy writes, each as the expressions it stands for.
//!
//! ```
//! use kpng_netfilter::nft::build::{Load, lookup};
//! use kpng_netfilter::nft::{TableFamily, Reg, Rule};
//!
//! let key = [Load::Daddr(TableFamily::Ip), Load::L4Proto, Load::Dport];
//! let rule = Rule::new("services", lookup(&key, "service-ips", Some(Reg::VERDICT), false));
//! assert_eq!(rule.to_string(), "ip daddr . meta l4proto . th dport vmap @service-ips");
//! ```

use std::net::IpAddr;

use super::expr::{CmpOp, CtKey, Data, Expr, FibResult, MetaKey, NatKind, NfVerdict, Reg};
use super::types::TableFamily;

pub use super::load::{Load, Typeof, datatype};

/// Loads `keys` into consecutive registers from the first 32-bit one:
/// a concatenation, as lookups read it.
pub fn load(keys: &[Load]) -> Vec<Expr> {
    let mut reg = Reg::r32(0);
    keys.iter()
        .flat_map(|k| {
            let e = k.exprs(reg);
            reg = reg.after(k.len());
            e
        })
        .collect()
}

/// Loads `keys` as [`load`] does, each part given a value made a
/// constant: `LOAD & 0 | VALUE` (the value's bytes in the load's order),
/// which nft writes for a constant inside a concatenation of packet
/// fields (nft 1.0.6 parses no bare constant there). A set keyed by a
/// packet field and constants (a client and the endpoint it was sent
/// to) is then one set for all, not one per constant.
pub fn load_fixed(keys: &[(Load, Option<&[u8]>)]) -> Vec<Expr> {
    let mut reg = Reg::r32(0);
    let mut out = Vec::new();
    for (load, value) in keys {
        out.extend(load.exprs(reg));
        if let Some(value) = value {
            out.push(Expr::Bitwise {
                sreg: reg,
                dreg: reg,
                mask: vec![0; value.len()],
                xor: value.to_vec(),
            });
        }
        reg = reg.after(load.len());
    }
    out
}

/// `KEYS @set` as [`lookup`] reads it, the keys loaded by [`load_fixed`].
pub fn lookup_fixed(keys: &[(Load, Option<&[u8]>)], set: &str) -> Vec<Expr> {
    let mut out = load_fixed(keys);
    out.push(Expr::Lookup {
        sreg: Reg::r32(0),
        set: set.to_owned(),
        dreg: None,
        invert: false,
    });
    out
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
pub fn dnat_map(family: TableFamily, keys: &[Load], map: &str) -> Vec<Expr> {
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
        IpAddr::V4(v4) => (TableFamily::Ip, v4.octets().to_vec()),
        IpAddr::V6(v6) => (TableFamily::Ip6, v6.octets().to_vec()),
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

/// `meta mark == VALUE`.
pub fn mark_is(value: u32) -> Vec<Expr> {
    vec![
        Expr::Meta {
            key: MetaKey::Mark,
            dreg: Reg::r32(0),
        },
        Expr::Cmp {
            sreg: Reg::r32(0),
            op: CmpOp::Eq,
            data: value.to_ne_bytes().to_vec(),
        },
    ]
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
pub fn verdict(verdict: NfVerdict) -> Vec<Expr> {
    vec![Expr::verdict(verdict)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nft::{DataType, Rule, Set};

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
        let ip6 = TableFamily::Ip6;
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
                Load::Daddr(TableFamily::Ip),
                Load::L4Proto,
                Load::Dport,
                Load::Random(2),
            ],
        )
        .to_values(&[Load::Daddr(TableFamily::Ip), Load::Dport]);
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
        let ip6 = [Load::Daddr(TableFamily::Ip6), Load::L4Proto, Load::Dport];
        assert_eq!(
            text(vec![lookup(&ip6, "service-ips", Some(Reg::VERDICT), false)]),
            "ip6 daddr . meta l4proto . th dport vmap @service-ips"
        );
        let pick = [
            Load::Daddr(TableFamily::Ip),
            Load::L4Proto,
            Load::Dport,
            Load::Random(3),
        ];
        assert_eq!(
            text(vec![dnat_map(TableFamily::Ip, &pick, "vip-cluster")]),
            "dnat ip to ip daddr . meta l4proto . th dport . numgen random mod 3 map @vip-cluster"
        );
        assert_eq!(
            text(vec![dnat_to("fd00::5".parse().expect("ip"), 8080)]),
            "dnat to [fd00::5]:8080"
        );
        assert_eq!(
            text(vec![
                lookup(&[Load::Saddr(TableFamily::Ip)], "cluster-cidrs", None, true),
                mark_set_or(0x4000),
            ]),
            "ip saddr != @cluster-cidrs meta mark set meta mark | 0x00004000"
        );
        assert_eq!(
            text(vec![mark_test(0x4000, false), verdict(NfVerdict::Return)]),
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
