//! Arbitrary transactions from bytes: every expression kind with
//! arbitrary registers, lengths and values, elements of arbitrary keys and
//! data, in runs large enough to span messages. Shared by the round-trip
//! test (`tests/roundtrip.rs`) and the `nft_netlink` fuzz target.
//!
//! Values the decoder normalises are not generated: NAT flags the
//! registers imply (the kernel adds them), and `Other` meta and ct keys
//! that have names.

use kpng_netfilter::nft::{
    Chain, ChainHook, ChainType, CmpOp, CtKey, Data, DataType, DynsetOp, Element, Expr, FibResult,
    MapTo, MetaKey, NatKind, NfVerdict, PayloadBase, Reg, RejectKind, Rule, Set, Table,
    TableFamily, Transaction,
};

/// Reads bytes, then zeros once they run out.
pub(crate) struct Bytes<'a>(pub(crate) &'a [u8]);

impl Bytes<'_> {
    pub(crate) fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
    pub(crate) fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    pub(crate) fn vec(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.u8()).collect()
    }
    pub(crate) fn done(&self) -> bool {
        self.0.is_empty()
    }
}

const CHAINS: [&str; 3] = [
    "c0",
    "c1",
    "a-chain-with-a-long-name-to-vary-the-attribute-padding",
];

fn sets() -> Vec<Set> {
    vec![
        Set::new("addrs", DataType::IPV4_ADDR),
        Set::verdict_map(
            "vmap",
            DataType::concat(&[DataType::IPV6_ADDR, DataType::INET_SERVICE]),
        ),
        Set {
            map: Some(MapTo::Value(DataType::concat(&[
                DataType::IPV4_ADDR,
                DataType::INET_SERVICE,
            ]))),
            ..Set::new(
                "targets",
                DataType::concat(&[DataType::INET_PROTO, DataType::MARK]),
            )
        },
        Set::new("ranges", DataType::IPV6_ADDR).intervals(),
        Set::new("timed", DataType::IPV4_ADDR).with_timeouts(),
    ]
}

fn reg(b: &mut Bytes<'_>) -> Reg {
    Reg::r32(b.u8() % 16)
}

fn verdict(b: &mut Bytes<'_>) -> NfVerdict {
    let chain = CHAINS[usize::from(b.u8()) % CHAINS.len()].to_owned();
    match b.u8() % 6 {
        0 => NfVerdict::Accept,
        1 => NfVerdict::Drop,
        2 => NfVerdict::Continue,
        3 => NfVerdict::Return,
        4 => NfVerdict::Jump(chain),
        _ => NfVerdict::Goto(chain),
    }
}

fn expr(b: &mut Bytes<'_>, sets: &[Set]) -> Expr {
    let set = sets[usize::from(b.u8()) % sets.len()].name.clone();
    match b.u8() % 16 {
        0 => Expr::Payload {
            base: [
                PayloadBase::Link,
                PayloadBase::Network,
                PayloadBase::Transport,
            ][usize::from(b.u8()) % 3],
            offset: u32::from(b.u8()),
            len: u32::from(b.u8() % 16) + 1,
            dreg: reg(b),
        },
        1 => Expr::Meta {
            key: [
                MetaKey::Mark,
                MetaKey::NfProto,
                MetaKey::L4Proto,
                MetaKey::Iif,
                MetaKey::Oif,
                MetaKey::Other(7),
            ][usize::from(b.u8()) % 6],
            dreg: reg(b),
        },
        2 => Expr::MetaSet {
            key: MetaKey::Mark,
            sreg: reg(b),
        },
        3 => Expr::Ct {
            key: [CtKey::State, CtKey::Status, CtKey::Mark, CtKey::Other(9)]
                [usize::from(b.u8()) % 4],
            dreg: reg(b),
        },
        4 => {
            let len = usize::from(b.u8() % 16) + 1;
            Expr::Cmp {
                sreg: reg(b),
                op: [
                    CmpOp::Eq,
                    CmpOp::Neq,
                    CmpOp::Lt,
                    CmpOp::Lte,
                    CmpOp::Gt,
                    CmpOp::Gte,
                ][usize::from(b.u8()) % 6],
                data: b.vec(len),
            }
        }
        5 => Expr::Bitwise {
            sreg: reg(b),
            dreg: reg(b),
            mask: b.vec(4),
            xor: b.vec(4),
        },
        6 => Expr::Lookup {
            sreg: reg(b),
            set,
            dreg: match b.u8() % 3 {
                0 => None,
                1 => Some(Reg::VERDICT),
                _ => Some(reg(b)),
            },
            invert: b.u8() & 1 == 1,
        },
        7 => {
            let data = if b.u8() & 1 == 1 {
                Data::Verdict(verdict(b))
            } else {
                let len = usize::from(b.u8() % 16) + 1;
                Data::Value(b.vec(len))
            };
            let dreg = match &data {
                Data::Verdict(_) => Reg::VERDICT,
                Data::Value(_) => reg(b),
            };
            Expr::Immediate { dreg, data }
        }
        8 => Expr::Nat {
            kind: if b.u8() & 1 == 1 {
                NatKind::Dnat
            } else {
                NatKind::Snat
            },
            family: [TableFamily::Ip, TableFamily::Ip6, TableFamily::Inet][usize::from(b.u8()) % 3],
            addr: (b.u8() & 1 == 1).then(|| reg(b)),
            proto: (b.u8() & 1 == 1).then(|| reg(b)),
            // Without the bits the registers imply.
            flags: b.u32() & !0b11 & 0xff,
        },
        9 => Expr::Masquerade {
            flags: u32::from(b.u8()) & 0x1c,
        },
        10 => Expr::Numgen {
            modulus: b.u32().max(1),
            random: b.u8() & 1 == 1,
            offset: b.u32(),
            dreg: reg(b),
        },
        11 => Expr::Fib {
            flags: u32::from(b.u8() % 2) + 1,
            result: if b.u8() & 1 == 1 {
                FibResult::Oif
            } else {
                FibResult::AddrType
            },
            dreg: reg(b),
        },
        12 => Expr::Reject(match b.u8() % 3 {
            0 => RejectKind::Icmp(b.u8()),
            1 => RejectKind::TcpReset,
            _ => RejectKind::Icmpx(b.u8()),
        }),
        13 => Expr::Counter,
        14 => Expr::Dynset {
            op: [DynsetOp::Add, DynsetOp::Update, DynsetOp::Delete][usize::from(b.u8()) % 3],
            set,
            key: reg(b),
            timeout_ms: (b.u8() & 1 == 1).then(|| u64::from(b.u32())),
        },
        _ => Expr::verdict(verdict(b)),
    }
}

fn element(b: &mut Bytes<'_>, set: &Set) -> Element {
    let key = b.vec(set.key.len as usize);
    let data = match set.map {
        None => None,
        Some(MapTo::Verdict) => Some(Data::Verdict(verdict(b))),
        Some(MapTo::Value(t)) => Some(Data::Value(b.vec(t.len as usize))),
    };
    Element {
        key,
        interval_end: set.interval && b.u8() & 1 == 1,
        data,
        timeout_ms: (set.timeout && b.u8() & 1 == 1).then(|| u64::from(b.u32())),
        comment: None,
    }
}

/// A transaction made from `data`.
pub(crate) fn transaction(data: &[u8]) -> Transaction {
    let mut b = Bytes(data);
    let table = Table::new(TableFamily::Inet, "fuzz");
    let sets = sets();
    let mut tx = Transaction::new();
    tx.add_table(&table).add_chain(
        &table,
        Chain::base("in", ChainType::Filter, ChainHook::Input, -5),
    );
    for name in CHAINS {
        tx.add_chain(&table, Chain::regular(name));
    }
    for set in &sets {
        tx.add_set(&table, set.clone());
    }
    while !b.done() {
        match b.u8() % 3 {
            0 => {
                let n = usize::from(b.u8() % 6) + 1;
                let exprs = (0..n).map(|_| expr(&mut b, &sets)).collect();
                let chain = CHAINS[usize::from(b.u8()) % CHAINS.len()];
                tx.add_rule(&table, Rule::new(chain, exprs));
            }
            op => {
                let set = &sets[usize::from(b.u8()) % sets.len()];
                // Up to 2,041 elements: runs that span messages.
                let n = usize::from(b.u8()) * 8 + 1;
                let elements = (0..n).map(|_| element(&mut b, set)).collect();
                if op == 1 {
                    tx.add_elements(&table, &set.name, elements);
                } else {
                    tx.delete_elements(&table, &set.name, elements);
                }
            }
        }
    }
    tx
}
