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
use super::object::Family;

/// A value loaded from the packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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
    use crate::nft::Rule;

    fn text(exprs: Vec<Vec<Expr>>) -> String {
        Rule::new("c", exprs.concat()).to_string()
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
    }
}
