//! Rule expressions: the nf_tables virtual machine's instructions, as the
//! kernel takes them (`linux/netfilter/nf_tables.h`).
//!
//! Every expression is encoded here from the header's constants, under its
//! kernel name, as the payload of `netlink-packet-netfilter`'s expression
//! list: one encoder per expression, beside its type, so that what the
//! kernel receives can be read next to the header.

use netlink_packet_core::{DefaultNla, NLA_F_NESTED};
use netlink_packet_netfilter::nftables::{ExpressionAttribute, Expressions, ListAttribute};

use super::types::TableFamily;

/// A register of the nf_tables virtual machine.
///
/// Expressions load into registers and read from them. The verdict
/// register decides what happens to the packet; data lives in the sixteen
/// 32-bit registers, and a value longer than four bytes (an IPv6 address)
/// fills several in a row, as does a concatenation (each part rounded up
/// to whole registers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Reg(u32);

impl Reg {
    /// The verdict register.
    pub const VERDICT: Reg = Reg(0);

    /// The 32-bit data register `n` (0 to 15; larger values are taken
    /// modulo 16).
    pub const fn r32(n: u8) -> Reg {
        Reg(8 + (n as u32 % 16))
    }

    /// The register `bytes` further on: where the next part of a
    /// concatenation goes after a part of `bytes` bytes.
    pub const fn after(self, bytes: u32) -> Reg {
        Reg(self.0 + bytes.div_ceil(4))
    }

    /// The kernel's number for it.
    pub fn number(self) -> u32 {
        self.0
    }
}

/// What a rule or a verdict map decides.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NfVerdict {
    /// Let the packet through (this hook).
    Accept,
    /// Drop it.
    Drop,
    /// Go on with the next rule.
    Continue,
    /// Return to the calling chain.
    Return,
    /// Run this chain, then come back.
    Jump(String),
    /// Run this chain and do not come back.
    Goto(String),
}

impl NfVerdict {
    /// The kernel's code (`NF_DROP`, `NF_ACCEPT`, `NFT_*`).
    pub fn code(&self) -> i32 {
        match self {
            NfVerdict::Drop => 0,
            NfVerdict::Accept => 1,
            NfVerdict::Continue => -1,
            NfVerdict::Return => -5,
            NfVerdict::Jump(_) => -3,
            NfVerdict::Goto(_) => -4,
        }
    }

    /// The chain a jump or goto names.
    pub fn chain(&self) -> Option<&str> {
        match self {
            NfVerdict::Jump(chain) | NfVerdict::Goto(chain) => Some(chain),
            _ => None,
        }
    }
}

/// A value or a verdict: what an immediate loads and a map maps to.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Data {
    /// Bytes, as the registers hold them.
    Value(Vec<u8>),
    /// A verdict.
    Verdict(NfVerdict),
}

/// Which header a payload expression reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PayloadBase {
    /// The link-layer header.
    Link,
    /// The network header (IPv4 or IPv6).
    Network,
    /// The transport header (TCP, UDP, SCTP).
    Transport,
}

/// Packet metadata (`NFT_META_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MetaKey {
    /// The packet mark (`skb->mark`).
    Mark,
    /// The network family (`NFPROTO_*`).
    NfProto,
    /// The transport protocol number.
    L4Proto,
    /// The input interface index.
    Iif,
    /// The output interface index.
    Oif,
    /// Another key, by its kernel number.
    Other(u32),
}

impl MetaKey {
    fn number(self) -> u32 {
        match self {
            MetaKey::Mark => 3,
            MetaKey::Iif => 4,
            MetaKey::Oif => 5,
            MetaKey::NfProto => 15,
            MetaKey::L4Proto => 16,
            MetaKey::Other(n) => n,
        }
    }
}

/// Conntrack keys (`NFT_CT_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CtKey {
    /// The state bits (`new`, `established`, ...): a 32-bit mask.
    State,
    /// The status bits (`dnat`, `snat`, ...): a 32-bit mask.
    Status,
    /// The connection mark.
    Mark,
    /// Another key, by its kernel number.
    Other(u32),
}

impl CtKey {
    /// `ct original|reply ip saddr` (`NFT_CT_SRC_IP`), with a direction.
    pub const SRC_IP: CtKey = CtKey::Other(19);
    /// `ct original|reply ip daddr` (`NFT_CT_DST_IP`), with a direction.
    pub const DST_IP: CtKey = CtKey::Other(20);
    /// `ct original|reply ip6 saddr` (`NFT_CT_SRC_IP6`), with a direction.
    pub const SRC_IP6: CtKey = CtKey::Other(21);
    /// `ct original|reply ip6 daddr` (`NFT_CT_DST_IP6`), with a direction.
    pub const DST_IP6: CtKey = CtKey::Other(22);
    /// `ct original|reply proto-src` (`NFT_CT_PROTO_SRC`), with a direction.
    pub const PROTO_SRC: CtKey = CtKey::Other(11);
    /// `ct original|reply proto-dst` (`NFT_CT_PROTO_DST`), with a direction.
    pub const PROTO_DST: CtKey = CtKey::Other(12);
    /// `ct zone` (`NFT_CT_ZONE`): two bytes, host order.
    pub const ZONE: CtKey = CtKey::Other(17);

    fn number(self) -> u32 {
        match self {
            CtKey::State => 0,
            CtKey::Status => 2,
            CtKey::Mark => 3,
            CtKey::Other(n) => n,
        }
    }
}

/// One direction of a tracked flow (`IP_CT_DIR_*`), for the conntrack
/// keys that have one ([`Expr::CtDir`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CtDirection {
    /// `ct original`: as the client sent it.
    Original,
    /// `ct reply`: as the replies come.
    Reply,
}

impl CtDirection {
    fn number(self) -> u8 {
        match self {
            CtDirection::Original => 0,
            CtDirection::Reply => 1,
        }
    }
}

/// Comparison operators (`NFT_CMP_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CmpOp {
    /// Equal.
    Eq,
    /// Not equal.
    Neq,
    /// Less than (byte-wise, big-endian).
    Lt,
    /// Less than or equal.
    Lte,
    /// Greater than.
    Gt,
    /// Greater than or equal.
    Gte,
}

/// Source or destination NAT.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NatKind {
    /// Rewrite the source.
    Snat,
    /// Rewrite the destination.
    Dnat,
}

/// What a `fib` lookup returns (`NFT_FIB_RESULT_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FibResult {
    /// The output interface index.
    Oif,
    /// The address type (`RTN_LOCAL`, ...).
    AddrType,
}

/// How a packet is rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RejectKind {
    /// An ICMP (or ICMPv6) unreachable of this code, per the table's
    /// family.
    Icmp(u8),
    /// A TCP reset.
    TcpReset,
    /// A family-independent unreachable (`NFT_REJECT_ICMPX_*`: 0 no
    /// route, 1 port, 2 host, 3 administratively prohibited).
    Icmpx(u8),
}

/// What a dynamic set update does (`NFT_DYNSET_OP_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DynsetOp {
    /// Add the key unless present.
    Add,
    /// Add the key, or refresh its timeout.
    Update,
    /// Remove the key.
    Delete,
}

/// One instruction of a rule.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Expr {
    /// Loads `len` bytes at `offset` of a header into `dreg`.
    Payload {
        /// The header.
        base: PayloadBase,
        /// Where in it.
        offset: u32,
        /// How many bytes.
        len: u32,
        /// Where to.
        dreg: Reg,
    },
    /// Loads packet metadata into `dreg`.
    Meta {
        /// Which.
        key: MetaKey,
        /// Where to.
        dreg: Reg,
    },
    /// Sets packet metadata from `sreg`.
    MetaSet {
        /// Which.
        key: MetaKey,
        /// From where.
        sreg: Reg,
    },
    /// Loads conntrack data into `dreg`.
    Ct {
        /// Which.
        key: CtKey,
        /// Where to.
        dreg: Reg,
    },
    /// Loads conntrack data of one direction of the flow into `dreg`
    /// (`ct original ip saddr`, `ct reply proto-src`).
    CtDir {
        /// Which (one with a direction: [`CtKey::SRC_IP`] and the like).
        key: CtKey,
        /// Which direction.
        direction: CtDirection,
        /// Where to.
        dreg: Reg,
    },
    /// Compares `sreg` with `data`; the rule stops here unless it holds.
    Cmp {
        /// What to compare.
        sreg: Reg,
        /// How.
        op: CmpOp,
        /// With what.
        data: Vec<u8>,
    },
    /// `dreg = (sreg & mask) ^ xor`, over `mask.len()` bytes.
    Bitwise {
        /// From.
        sreg: Reg,
        /// To.
        dreg: Reg,
        /// The mask.
        mask: Vec<u8>,
        /// The xor (as long as the mask).
        xor: Vec<u8>,
    },
    /// Looks `sreg` up in a set: the rule stops here unless it is there
    /// (or, `invert`, unless it is not). With `dreg`, a map lookup loads
    /// the mapped value (or, into the verdict register, decides).
    Lookup {
        /// The key.
        sreg: Reg,
        /// The set or map, by name.
        set: String,
        /// Where a map's value goes.
        dreg: Option<Reg>,
        /// Match when the key is absent.
        invert: bool,
    },
    /// Loads a constant: a value, or (into the verdict register) a verdict.
    Immediate {
        /// Where to.
        dreg: Reg,
        /// What.
        data: Data,
    },
    /// Source or destination NAT to the address (and port) in registers.
    Nat {
        /// Which.
        kind: NatKind,
        /// The address family of `addr`.
        family: TableFamily,
        /// The register holding the new address.
        addr: Option<Reg>,
        /// The register holding the new port.
        proto: Option<Reg>,
        /// `NF_NAT_RANGE_*` flags.
        flags: u32,
    },
    /// Source NAT to the output interface's address.
    Masquerade {
        /// `NF_NAT_RANGE_*` flags (`PROTO_RANDOM_FULLY` is 16).
        flags: u32,
    },
    /// Loads a number generated per packet into `dreg`, from `offset` to
    /// `offset + modulus - 1`.
    Numgen {
        /// How many values.
        modulus: u32,
        /// Random (true) or incremental.
        random: bool,
        /// The first value.
        offset: u32,
        /// Where to.
        dreg: Reg,
    },
    /// A Jenkins hash of `len` bytes from `sreg` on, modulo `modulus`, into
    /// `dreg` (`jhash ip saddr . th sport mod 1021 seed 0x0`).
    Hash {
        /// Where the hashed bytes start.
        sreg: Reg,
        /// How many bytes.
        len: u32,
        /// How many values.
        modulus: u32,
        /// The hash's seed.
        seed: u32,
        /// Where to.
        dreg: Reg,
    },
    /// A routing lookup (`fib`).
    Fib {
        /// `NFTA_FIB_F_*` flags (source 1, destination 2, mark 4, iif 8,
        /// oif 16, present 32).
        flags: u32,
        /// What to return.
        result: FibResult,
        /// Where to.
        dreg: Reg,
    },
    /// Rejects the packet.
    Reject(RejectKind),
    /// Counts packets and bytes.
    Counter,
    /// Leaves the packet untracked by conntrack (in a chain of priority
    /// `raw`, before conntrack sees it).
    Notrack,
    /// Adds the key in `key` to a set from the packet path, or refreshes
    /// its timeout.
    Dynset {
        /// What to do.
        op: DynsetOp,
        /// The set, by name.
        set: String,
        /// The key.
        key: Reg,
        /// The element's timeout, in milliseconds.
        timeout_ms: Option<u64>,
    },
}

/// The NLA header's size: length and type, two bytes each.
const NLA_HDRLEN: usize = 4;

/// One attribute in wire form: length, type, value, padding to 4 bytes.
pub(crate) fn nla(kind: u16, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(NLA_HDRLEN + value.len().next_multiple_of(4));
    let len = u16::try_from(NLA_HDRLEN + value.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&len.to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(value);
    out.resize(out.len().next_multiple_of(4), 0);
    out
}

/// A string attribute's value: the text and a terminating NUL.
pub(crate) fn cstr(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() + 1);
    out.extend_from_slice(text.as_bytes());
    out.push(0);
    out
}

fn be32(value: u32) -> Vec<u8> {
    value.to_be_bytes().to_vec()
}

/// The nested `NFTA_DATA_*` form of data (`nft_data_attributes`).
pub(crate) fn data_nest(data: &Data) -> Vec<u8> {
    const NFTA_DATA_VALUE: u16 = 1;
    const NFTA_DATA_VERDICT: u16 = 2;
    const NFTA_VERDICT_CODE: u16 = 1;
    const NFTA_VERDICT_CHAIN: u16 = 2;
    match data {
        Data::Value(bytes) => nla(NFTA_DATA_VALUE, bytes),
        Data::Verdict(verdict) => {
            let mut inner = nla(NFTA_VERDICT_CODE, &verdict.code().to_be_bytes());
            if let Some(chain) = verdict.chain() {
                inner.extend(nla(NFTA_VERDICT_CHAIN, &cstr(chain)));
            }
            nla(NFTA_DATA_VERDICT | NLA_F_NESTED, &inner)
        }
    }
}

impl Expr {
    /// The expression that ends a rule with `verdict`.
    pub fn verdict(verdict: NfVerdict) -> Self {
        Expr::Immediate {
            dreg: Reg::VERDICT,
            data: Data::Verdict(verdict),
        }
    }

    /// The kernel's name for it.
    pub fn name(&self) -> &'static str {
        match self {
            Expr::Payload { .. } => "payload",
            Expr::Meta { .. } | Expr::MetaSet { .. } => "meta",
            Expr::Ct { .. } | Expr::CtDir { .. } => "ct",
            Expr::Cmp { .. } => "cmp",
            Expr::Bitwise { .. } => "bitwise",
            Expr::Lookup { .. } => "lookup",
            Expr::Immediate { .. } => "immediate",
            Expr::Nat { .. } => "nat",
            Expr::Masquerade { .. } => "masq",
            Expr::Numgen { .. } => "numgen",
            Expr::Hash { .. } => "hash",
            Expr::Fib { .. } => "fib",
            Expr::Reject(_) => "reject",
            Expr::Counter => "counter",
            Expr::Notrack => "notrack",
            Expr::Dynset { .. } => "dynset",
        }
    }

    /// Its attributes (`NFTA_<NAME>_*`, in the header's numbering).
    pub(crate) fn attributes(&self) -> Vec<DefaultNla> {
        let a = |kind: u16, value: Vec<u8>| DefaultNla::new(kind, value);
        let reg = |r: &Reg| be32(r.0);
        match self {
            Expr::Payload {
                base,
                offset,
                len,
                dreg,
            } => {
                let base = match base {
                    PayloadBase::Link => 0,
                    PayloadBase::Network => 1,
                    PayloadBase::Transport => 2,
                };
                vec![
                    a(1, reg(dreg)),
                    a(2, be32(base)),
                    a(3, be32(*offset)),
                    a(4, be32(*len)),
                ]
            }
            Expr::Meta { key, dreg } => vec![a(1, reg(dreg)), a(2, be32(key.number()))],
            Expr::MetaSet { key, sreg } => vec![a(2, be32(key.number())), a(3, reg(sreg))],
            Expr::Ct { key, dreg } => vec![a(1, reg(dreg)), a(2, be32(key.number()))],
            Expr::CtDir {
                key,
                direction,
                dreg,
            } => vec![
                a(1, reg(dreg)),
                a(2, be32(key.number())),
                a(3, vec![direction.number()]),
            ],
            Expr::Cmp { sreg, op, data } => {
                let op = match op {
                    CmpOp::Eq => 0,
                    CmpOp::Neq => 1,
                    CmpOp::Lt => 2,
                    CmpOp::Lte => 3,
                    CmpOp::Gt => 4,
                    CmpOp::Gte => 5,
                };
                vec![
                    a(1, reg(sreg)),
                    a(2, be32(op)),
                    a(3 | NLA_F_NESTED, data_nest(&Data::Value(data.clone()))),
                ]
            }
            Expr::Bitwise {
                sreg,
                dreg,
                mask,
                xor,
            } => {
                let len = u32::try_from(mask.len()).unwrap_or(u32::MAX);
                vec![
                    a(1, reg(sreg)),
                    a(2, reg(dreg)),
                    a(3, be32(len)),
                    a(4 | NLA_F_NESTED, data_nest(&Data::Value(mask.clone()))),
                    a(5 | NLA_F_NESTED, data_nest(&Data::Value(xor.clone()))),
                ]
            }
            Expr::Lookup {
                sreg,
                set,
                dreg,
                invert,
            } => {
                let mut out = vec![a(1, cstr(set)), a(2, reg(sreg))];
                if let Some(dreg) = dreg {
                    out.push(a(3, reg(dreg)));
                }
                if *invert {
                    out.push(a(5, be32(1)));
                }
                out
            }
            Expr::Immediate { dreg, data } => {
                vec![a(1, reg(dreg)), a(2 | NLA_F_NESTED, data_nest(data))]
            }
            Expr::Nat {
                kind,
                family,
                addr,
                proto,
                flags,
            } => {
                let kind = match kind {
                    NatKind::Snat => 0,
                    NatKind::Dnat => 1,
                };
                let mut out = vec![a(1, be32(kind)), a(2, be32(u32::from(family.number())))];
                if let Some(addr) = addr {
                    out.push(a(3, reg(addr)));
                }
                if let Some(proto) = proto {
                    out.push(a(5, reg(proto)));
                }
                if *flags != 0 {
                    out.push(a(7, be32(*flags)));
                }
                out
            }
            Expr::Masquerade { flags } => {
                if *flags == 0 {
                    Vec::new()
                } else {
                    vec![a(1, be32(*flags))]
                }
            }
            Expr::Hash {
                sreg,
                len,
                modulus,
                seed,
                dreg,
            } => vec![
                a(1, reg(sreg)),
                a(2, reg(dreg)),
                a(3, be32(*len)),
                a(4, be32(*modulus)),
                a(5, be32(*seed)),
                // NFT_HASH_JENKINS.
                a(7, be32(0)),
            ],
            Expr::Numgen {
                modulus,
                random,
                offset,
                dreg,
            } => {
                let mut out = vec![
                    a(1, reg(dreg)),
                    a(2, be32(*modulus)),
                    a(3, be32(u32::from(*random))),
                ];
                if *offset != 0 {
                    out.push(a(4, be32(*offset)));
                }
                out
            }
            Expr::Fib {
                flags,
                result,
                dreg,
            } => {
                let result = match result {
                    FibResult::Oif => 1,
                    FibResult::AddrType => 3,
                };
                vec![a(1, reg(dreg)), a(2, be32(result)), a(3, be32(*flags))]
            }
            Expr::Reject(kind) => {
                let (kind, code) = match kind {
                    RejectKind::Icmp(code) => (0, *code),
                    RejectKind::TcpReset => (1, 0),
                    RejectKind::Icmpx(code) => (2, *code),
                };
                vec![a(1, be32(kind)), a(2, vec![code])]
            }
            Expr::Counter | Expr::Notrack => Vec::new(),
            Expr::Dynset {
                op,
                set,
                key,
                timeout_ms,
            } => {
                let op = match op {
                    DynsetOp::Add => 0,
                    DynsetOp::Update => 1,
                    DynsetOp::Delete => 2,
                };
                let mut out = vec![a(1, cstr(set)), a(3, be32(op)), a(4, reg(key))];
                if let Some(ms) = timeout_ms {
                    out.push(a(6, ms.to_be_bytes().to_vec()));
                }
                out
            }
        }
    }

    /// The expression as an element of a rule's expression list.
    pub(crate) fn to_list(&self) -> ListAttribute<ExpressionAttribute> {
        Expressions::Other {
            expression_type: self.name().to_owned(),
            attributes: self.attributes(),
        }
        .into()
    }
}

/// One expression as the kernel sent it back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawExpr {
    /// Its kernel name (`payload`, `lookup`, ...).
    pub name: String,
    /// Its attributes: type and value, as the kernel sent them.
    pub attributes: Vec<(u16, Vec<u8>)>,
}

/// The attribute type without the nested and byte-order flags.
fn kind_of(kind: u16) -> u16 {
    kind & 0x3fff
}

/// The attributes nested in `bytes`: (type, value).
fn nested(bytes: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + NLA_HDRLEN <= bytes.len() {
        let len = usize::from(u16::from_ne_bytes([bytes[at], bytes[at + 1]]));
        let kind = kind_of(u16::from_ne_bytes([bytes[at + 2], bytes[at + 3]]));
        if len < NLA_HDRLEN || at + len > bytes.len() {
            break;
        }
        out.push((kind, &bytes[at + NLA_HDRLEN..at + len]));
        at += len.next_multiple_of(4);
    }
    out
}

/// The data a nested `NFTA_DATA_*` attribute holds.
fn data_of(bytes: &[u8]) -> Option<Data> {
    let (kind, value) = nested(bytes).into_iter().next()?;
    match kind {
        1 => Some(Data::Value(value.to_vec())),
        2 => {
            let (mut code, mut chain) = (None, None);
            for (k, v) in nested(value) {
                match k {
                    1 => code = Some(i32::from_be_bytes(v.get(..4)?.try_into().ok()?)),
                    2 => chain = Some(String::from_utf8_lossy(v).trim_end_matches('\0').to_owned()),
                    _ => {}
                }
            }
            Some(Data::Verdict(match (code?, chain) {
                (0, _) => NfVerdict::Drop,
                (1, _) => NfVerdict::Accept,
                (-1, _) => NfVerdict::Continue,
                (-5, _) => NfVerdict::Return,
                (-3, Some(c)) => NfVerdict::Jump(c),
                (-4, Some(c)) => NfVerdict::Goto(c),
                _ => return None,
            }))
        }
        _ => None,
    }
}

impl RawExpr {
    fn attr(&self, kind: u16) -> Option<&[u8]> {
        self.attributes
            .iter()
            .find(|(k, _)| kind_of(*k) == kind)
            .map(|(_, v)| v.as_slice())
    }

    fn u32(&self, kind: u16) -> Option<u32> {
        Some(u32::from_be_bytes(
            self.attr(kind)?.get(..4)?.try_into().ok()?,
        ))
    }

    /// A register. The kernel dumps a 32-bit register that starts one of
    /// the four 128-bit registers under the 128-bit number (`NFT_REG_1`
    /// to `NFT_REG_4`): read as the 32-bit register it is.
    fn reg(&self, kind: u16) -> Option<Reg> {
        self.u32(kind).map(|n| match n {
            1..=4 => Reg(8 + (n - 1) * 4),
            n => Reg(n),
        })
    }

    fn text(&self, kind: u16) -> Option<String> {
        let bytes = self.attr(kind)?;
        Some(
            String::from_utf8_lossy(bytes)
                .trim_end_matches('\0')
                .to_owned(),
        )
    }

    fn data(&self, kind: u16) -> Option<Data> {
        data_of(self.attr(kind)?)
    }

    fn value(&self, kind: u16) -> Option<Vec<u8>> {
        match self.data(kind)? {
            Data::Value(v) => Some(v),
            Data::Verdict(_) => None,
        }
    }

    /// The typed expression, when it is one this crate writes; `None` for
    /// another expression or a form this crate does not produce.
    pub fn decode(&self) -> Option<Expr> {
        Some(match self.name.as_str() {
            "payload" => Expr::Payload {
                base: match self.u32(2)? {
                    0 => PayloadBase::Link,
                    1 => PayloadBase::Network,
                    2 => PayloadBase::Transport,
                    _ => return None,
                },
                offset: self.u32(3)?,
                len: self.u32(4)?,
                dreg: self.reg(1)?,
            },
            "meta" => {
                let key = match self.u32(2)? {
                    3 => MetaKey::Mark,
                    4 => MetaKey::Iif,
                    5 => MetaKey::Oif,
                    15 => MetaKey::NfProto,
                    16 => MetaKey::L4Proto,
                    n => MetaKey::Other(n),
                };
                match (self.reg(1), self.reg(3)) {
                    (Some(dreg), _) => Expr::Meta { key, dreg },
                    (None, Some(sreg)) => Expr::MetaSet { key, sreg },
                    (None, None) => return None,
                }
            }
            "ct" => {
                let key = match self.u32(2)? {
                    0 => CtKey::State,
                    2 => CtKey::Status,
                    3 => CtKey::Mark,
                    n => CtKey::Other(n),
                };
                let dreg = self.reg(1)?;
                match self.attr(3).map(|v| v.first().copied()) {
                    None => Expr::Ct { key, dreg },
                    Some(Some(0)) => Expr::CtDir {
                        key,
                        direction: CtDirection::Original,
                        dreg,
                    },
                    Some(Some(1)) => Expr::CtDir {
                        key,
                        direction: CtDirection::Reply,
                        dreg,
                    },
                    Some(_) => return None,
                }
            }
            "cmp" => Expr::Cmp {
                sreg: self.reg(1)?,
                op: match self.u32(2)? {
                    0 => CmpOp::Eq,
                    1 => CmpOp::Neq,
                    2 => CmpOp::Lt,
                    3 => CmpOp::Lte,
                    4 => CmpOp::Gt,
                    5 => CmpOp::Gte,
                    _ => return None,
                },
                data: self.value(3)?,
            },
            "bitwise" => Expr::Bitwise {
                sreg: self.reg(1)?,
                dreg: self.reg(2)?,
                mask: self.value(4)?,
                xor: self.value(5)?,
            },
            "lookup" => Expr::Lookup {
                sreg: self.reg(2)?,
                set: self.text(1)?,
                dreg: self.reg(3),
                invert: self.u32(5).is_some_and(|f| f & 1 != 0),
            },
            "immediate" => Expr::Immediate {
                dreg: self.reg(1)?,
                data: self.data(2)?,
            },
            "nat" => Expr::Nat {
                kind: match self.u32(1)? {
                    0 => NatKind::Snat,
                    1 => NatKind::Dnat,
                    _ => return None,
                },
                family: match self.u32(2)? {
                    2 => TableFamily::Ip,
                    10 => TableFamily::Ip6,
                    1 => TableFamily::Inet,
                    _ => return None,
                },
                addr: self.reg(3),
                proto: self.reg(5),
                // The kernel adds the flags the registers imply
                // (`NF_NAT_RANGE_MAP_IPS`, `PROTO_SPECIFIED`).
                flags: self.u32(7).unwrap_or(0) & !0b11,
            },
            "masq" => Expr::Masquerade {
                flags: self.u32(1).unwrap_or(0),
            },
            // Jenkins hashes only (NFT_HASH_JENKINS, the default).
            "hash" if self.u32(7).unwrap_or(0) == 0 => Expr::Hash {
                sreg: self.reg(1)?,
                dreg: self.reg(2)?,
                len: self.u32(3)?,
                modulus: self.u32(4)?,
                seed: self.u32(5).unwrap_or(0),
            },
            "numgen" => Expr::Numgen {
                modulus: self.u32(2)?,
                random: self.u32(3)? == 1,
                offset: self.u32(4).unwrap_or(0),
                dreg: self.reg(1)?,
            },
            "fib" => Expr::Fib {
                flags: self.u32(3)?,
                result: match self.u32(2)? {
                    1 => FibResult::Oif,
                    3 => FibResult::AddrType,
                    _ => return None,
                },
                dreg: self.reg(1)?,
            },
            "reject" => {
                let code = self.attr(2).and_then(|c| c.first().copied()).unwrap_or(0);
                Expr::Reject(match self.u32(1)? {
                    0 => RejectKind::Icmp(code),
                    1 => RejectKind::TcpReset,
                    2 => RejectKind::Icmpx(code),
                    _ => return None,
                })
            }
            "counter" => Expr::Counter,
            "notrack" => Expr::Notrack,
            "dynset" => Expr::Dynset {
                op: match self.u32(3)? {
                    0 => DynsetOp::Add,
                    1 => DynsetOp::Update,
                    2 => DynsetOp::Delete,
                    _ => return None,
                },
                set: self.text(1)?,
                key: self.reg(4)?,
                timeout_ms: self
                    .attr(6)
                    .and_then(|t| Some(u64::from_be_bytes(t.get(..8)?.try_into().ok()?)))
                    .filter(|t| *t != 0),
            },
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_follow_the_kernel_numbering() {
        assert_eq!(Reg::VERDICT.number(), 0);
        assert_eq!(Reg::r32(0).number(), 8);
        assert_eq!(Reg::r32(15).number(), 23);
        // An IPv6 address fills four registers, a port one.
        assert_eq!(Reg::r32(0).after(16), Reg::r32(4));
        assert_eq!(Reg::r32(4).after(1), Reg::r32(5));
    }

    #[test]
    fn attributes_are_padded_and_strings_terminated() {
        // The length counts the header and the value, not the padding.
        assert_eq!(nla(1, &[0xaa]), [5, 0, 1, 0, 0xaa, 0, 0, 0]);
        assert_eq!(cstr("ab"), b"ab\0");
        // A goto verdict: NFTA_DATA_VERDICT { code -4, chain "c" }.
        let nest = data_nest(&Data::Verdict(NfVerdict::Goto("c".into())));
        assert_eq!(&nest[2..4], &(2 | NLA_F_NESTED).to_ne_bytes());
        assert_eq!(&nest[8..12], &(-4i32).to_be_bytes());
    }

    #[test]
    fn every_expression_decodes_from_its_own_attributes() {
        let r = Reg::r32;
        let all = vec![
            Expr::Payload {
                base: PayloadBase::Transport,
                offset: 2,
                len: 2,
                dreg: r(2),
            },
            Expr::Meta {
                key: MetaKey::L4Proto,
                dreg: r(1),
            },
            Expr::MetaSet {
                key: MetaKey::Mark,
                sreg: r(0),
            },
            Expr::Ct {
                key: CtKey::Status,
                dreg: r(0),
            },
            Expr::CtDir {
                key: CtKey::SRC_IP6,
                direction: CtDirection::Reply,
                dreg: r(4),
            },
            Expr::Cmp {
                sreg: r(0),
                op: CmpOp::Neq,
                data: vec![1, 2, 3, 4],
            },
            Expr::Bitwise {
                sreg: r(0),
                dreg: r(1),
                mask: vec![0xff; 4],
                xor: vec![0, 0, 0x40, 0],
            },
            Expr::Lookup {
                sreg: r(0),
                set: "s".into(),
                dreg: Some(Reg::VERDICT),
                invert: false,
            },
            Expr::Lookup {
                sreg: r(0),
                set: "cidrs".into(),
                dreg: None,
                invert: true,
            },
            Expr::verdict(NfVerdict::Goto("c".into())),
            Expr::Immediate {
                dreg: r(0),
                data: Data::Value(vec![10, 0, 0, 1]),
            },
            Expr::Nat {
                kind: NatKind::Dnat,
                family: TableFamily::Ip6,
                addr: Some(r(0)),
                proto: Some(r(4)),
                flags: 0,
            },
            Expr::Masquerade { flags: 16 },
            Expr::Numgen {
                modulus: 3,
                random: true,
                offset: 0,
                dreg: r(3),
            },
            Expr::Hash {
                sreg: r(8),
                len: 8,
                modulus: 1021,
                seed: 0,
                dreg: r(3),
            },
            Expr::Fib {
                flags: 1,
                result: FibResult::AddrType,
                dreg: r(0),
            },
            Expr::Reject(RejectKind::Icmpx(1)),
            Expr::Counter,
            Expr::Notrack,
            Expr::Dynset {
                op: DynsetOp::Update,
                set: "aff".into(),
                key: r(0),
                timeout_ms: Some(10_800_000),
            },
        ];
        for expr in all {
            let raw = RawExpr {
                name: expr.name().to_owned(),
                attributes: expr
                    .attributes()
                    .into_iter()
                    .map(|nla| {
                        use netlink_packet_core::Nla as _;
                        let mut value = vec![0; nla.value_len()];
                        nla.emit_value(&mut value);
                        (nla.kind(), value)
                    })
                    .collect(),
            };
            assert_eq!(raw.decode(), Some(expr));
        }
    }

    #[test]
    fn expressions_carry_their_kernel_names() {
        let lookup = Expr::Lookup {
            sreg: Reg::r32(0),
            set: "m".into(),
            dreg: Some(Reg::VERDICT),
            invert: false,
        };
        assert_eq!(lookup.name(), "lookup");
        let attrs = lookup.attributes();
        assert_eq!(attrs.len(), 3);
        assert_eq!(Expr::Masquerade { flags: 16 }.name(), "masq");
    }
}
