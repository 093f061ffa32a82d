//! Connection tracking over ctnetlink, the netlink interface the
//! `conntrack` tool itself uses: one dump of a family's flows of one
//! protocol (UDP, TCP), and deletes of single flows by their original
//! tuple; and the nudge that makes the client of a deleted TCP flow find
//! out ([`crate::nudge`]). kpng never runs the
//! tool. Messages are built and read by hand from
//! `linux/netfilter/nfnetlink_conntrack.h`, like the element lists of
//! [`crate::nft`].
//!
//! The socket is [`crate::nft::Socket`]: ctnetlink and nf_tables are both
//! `NETLINK_NETFILTER` subsystems.

use std::net::IpAddr;
use std::time::Duration;

use nix::errno::Errno;

use netlink_packet_core::NLA_F_NESTED;

use crate::Error;
use crate::nft::expr::nla;
use crate::nft::raw::{NLMSG_DONE, NLMSG_ERROR, attributes, error_code};
use crate::nft::{CtDirection, CtKey, Expr, Reg, Socket, TableFamily};

const NFNL_SUBSYS_CTNETLINK: u16 = 1;
const IPCTNL_MSG_CT_NEW: u16 = 0;
const IPCTNL_MSG_CT_GET: u16 = 1;
const IPCTNL_MSG_CT_DELETE: u16 = 2;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_DUMP: u16 = 0x300;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;

const CTA_TUPLE_ORIG: u16 = 1;
const CTA_TUPLE_REPLY: u16 = 2;
const CTA_TIMEOUT: u16 = 7;
const CTA_ZONE: u16 = 18;
const CTA_TUPLE_IP: u16 = 1;
const CTA_TUPLE_PROTO: u16 = 2;
const CTA_IP_V4_SRC: u16 = 1;
const CTA_IP_V4_DST: u16 = 2;
const CTA_IP_V6_SRC: u16 = 3;
const CTA_IP_V6_DST: u16 = 4;
const CTA_PROTO_NUM: u16 = 1;
const CTA_PROTO_SRC_PORT: u16 = 2;
const CTA_PROTO_DST_PORT: u16 = 3;

/// `IPPROTO_UDP`.
pub const UDP: u8 = 17;
/// `IPPROTO_TCP`.
pub const TCP: u8 = 6;

/// The packet mark of the nudges sent to the clients of TCP flows whose
/// endpoint left (`b"kpng"`): the netfilter backends leave packets with
/// exactly this mark untracked (`--end-tcp-connections`).
pub const NUDGE_MARK: u32 = 0x6b70_6e67;

/// One direction of a flow: addresses and ports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tuple {
    /// The source address.
    pub src: IpAddr,
    /// The destination address.
    pub dst: IpAddr,
    /// The source port.
    pub src_port: u16,
    /// The destination port.
    pub dst_port: u16,
}

/// One flow the kernel tracks: what the client sent to, and where the
/// replies come from (an endpoint, when the flow was DNATed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Flow {
    /// Its protocol ([`UDP`] or [`TCP`]).
    pub protocol: u8,
    /// The original direction (client to Service address).
    pub original: Tuple,
    /// The reply direction (endpoint to client).
    pub reply: Tuple,
    /// The conntrack zone (0 for most).
    pub zone: u16,
}

impl Flow {
    /// Whether the flow was DNATed: its replies come from another address
    /// than the one the client sent to.
    pub fn dnated(&self) -> bool {
        self.reply.src != self.original.dst || self.reply.src_port != self.original.dst_port
    }
}

/// Where a netfilter backend records the UDP flows it translated, so that
/// the flows to a removed endpoint are found without walking the
/// conntrack table: in each family's table (`ip TABLE`, `ip6 TABLE`), the
/// set [`flows`](Self::flows) holds one element per DNATed UDP flow seen
/// within [`timeout`](Self::timeout) (each packet of the flow, either
/// way, refreshes it), keyed by its original tuple and the address that
/// answers it ([`key`](Self::key)); the set [`untrusted`](Self::untrusted)
/// holds [`YOUNG`](Self::YOUNG) for `timeout` after the record was made
/// (flows older than it may be missing) and [`MISSED`](Self::MISSED) for
/// `timeout` after a flow could not be recorded (the set was full, or the
/// flow was in another conntrack zone than 0). The record is to be
/// trusted only while `untrusted` is empty and no UDP conntrack timeout
/// exceeds `timeout`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowRecord {
    /// The tables' name (one per family).
    pub table: String,
    /// The set of flows.
    pub flows: String,
    /// The set that says when the record cannot be trusted.
    pub untrusted: String,
    /// How long an element outlives the last packet of its flow: at least
    /// the longest UDP conntrack timeout.
    pub timeout: Duration,
}

impl FlowRecord {
    /// The element of [`untrusted`](Self::untrusted) (a 32-bit host-order
    /// key) present while the record is younger than its timeout.
    pub const YOUNG: u32 = 1;
    /// The element of [`untrusted`](Self::untrusted) present for the
    /// timeout after a flow was not recorded.
    pub const MISSED: u32 = 2;

    /// The expressions that load a flow's key from its conntrack entry
    /// into the registers from `r32(0)` on: `ct original ip saddr . ct
    /// original proto-src . ct original ip daddr . ct original proto-dst .
    /// ct reply ip saddr` (`ip6` in an IPv6 table).
    pub fn key(family: TableFamily) -> Vec<Expr> {
        let (src, dst, len) = match family {
            TableFamily::Ip6 => (CtKey::SRC_IP6, CtKey::DST_IP6, 16),
            TableFamily::Ip | TableFamily::Inet => (CtKey::SRC_IP, CtKey::DST_IP, 4),
        };
        let parts = [
            (src, CtDirection::Original, len),
            (CtKey::PROTO_SRC, CtDirection::Original, 2),
            (dst, CtDirection::Original, len),
            (CtKey::PROTO_DST, CtDirection::Original, 2),
            (src, CtDirection::Reply, len),
        ];
        let mut reg = Reg::r32(0);
        parts
            .into_iter()
            .map(|(key, direction, len)| {
                let expr = Expr::CtDir {
                    key,
                    direction,
                    dreg: reg,
                };
                reg = reg.after(len);
                expr
            })
            .collect()
    }

    /// The key of `flow` as the set holds it (see [`key`](Self::key)).
    pub fn element_key(flow: &Flow) -> Vec<u8> {
        let addr = |a: IpAddr| match a {
            IpAddr::V4(v4) => v4.octets().to_vec(),
            IpAddr::V6(v6) => v6.octets().to_vec(),
        };
        let port = |p: u16| {
            let [a, b] = p.to_be_bytes();
            [a, b, 0, 0]
        };
        let mut out = addr(flow.original.src);
        out.extend(port(flow.original.src_port));
        out.extend(addr(flow.original.dst));
        out.extend(port(flow.original.dst_port));
        out.extend(addr(flow.reply.src));
        out
    }

    /// The UDP flow an element's key names, as far as the key tells: its
    /// original tuple (zone 0) and the address that answers it. The rest
    /// of the reply tuple is unknown: its source port reads as 0 (the flow
    /// was DNATed), its destination as the original source.
    pub fn flow_of(key: &[u8]) -> Option<Flow> {
        let len = match key.len() {
            20 => 4,
            56 => 16,
            _ => return None,
        };
        let ip = |at: usize| parse_ip(key.get(at..at + len)?);
        let port = |at: usize| Some(u16::from_be_bytes(key.get(at..at + 2)?.try_into().ok()?));
        let original = Tuple {
            src: ip(0)?,
            src_port: port(len)?,
            dst: ip(len + 4)?,
            dst_port: port(2 * len + 4)?,
        };
        Some(Flow {
            protocol: UDP,
            original,
            reply: Tuple {
                src: ip(2 * len + 8)?,
                dst: original.src,
                src_port: 0,
                dst_port: original.src_port,
            },
            zone: 0,
        })
    }
}

/// The longest UDP conntrack timeout of a network namespace
/// (`nf_conntrack_udp_timeout`, `nf_conntrack_udp_timeout_stream`), read
/// from the sysctl files opened once in that namespace: a read is two
/// `pread`s.
#[derive(Debug)]
pub struct UdpTimeouts {
    files: Vec<std::fs::File>,
}

impl UdpTimeouts {
    /// Opens the sysctls of the namespace at `netns` (the process's own
    /// when `None`).
    ///
    /// # Errors
    /// [`Error::Io`] when they cannot be opened (no conntrack module).
    pub fn open(netns: Option<&std::path::Path>) -> Result<Self, Error> {
        let open = || {
            [
                "nf_conntrack_udp_timeout",
                "nf_conntrack_udp_timeout_stream",
            ]
            .into_iter()
            .map(|name| std::fs::File::open(format!("/proc/sys/net/netfilter/{name}")))
            .collect::<std::io::Result<Vec<_>>>()
        };
        let files = match netns {
            None => open(),
            Some(path) => crate::on_thread_in_netns(path, open),
        }
        .map_err(|source| Error::Io {
            what: "open the UDP conntrack timeouts",
            source,
        })?;
        Ok(Self { files })
    }

    /// The longer of the two, as they are now.
    ///
    /// # Errors
    /// [`Error::Io`] when a read fails or reads no number.
    pub fn longest(&mut self) -> Result<Duration, Error> {
        use std::os::unix::fs::FileExt as _;
        let mut longest = 0u64;
        for file in &self.files {
            let mut buf = [0u8; 32];
            let n = file.read_at(&mut buf, 0).map_err(|source| Error::Io {
                what: "read a UDP conntrack timeout",
                source,
            })?;
            let text = std::str::from_utf8(&buf[..n]).unwrap_or_default();
            let seconds: u64 = text.trim().parse().map_err(|_| Error::Io {
                what: "read a UDP conntrack timeout",
                source: std::io::Error::other(format!("not a number: {text:?}")),
            })?;
            longest = longest.max(seconds);
        }
        Ok(Duration::from_secs(longest))
    }
}

fn tuple_bytes(protocol: u8, tuple: &Tuple) -> Vec<u8> {
    let mut ip = Vec::new();
    match (tuple.src, tuple.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            ip.extend(nla(CTA_IP_V4_SRC, &s.octets()));
            ip.extend(nla(CTA_IP_V4_DST, &d.octets()));
        }
        (s, d) => {
            let v6 = |a: IpAddr| match a {
                IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
                IpAddr::V6(v6) => v6.octets(),
            };
            ip.extend(nla(CTA_IP_V6_SRC, &v6(s)));
            ip.extend(nla(CTA_IP_V6_DST, &v6(d)));
        }
    }
    let mut proto = Vec::new();
    proto.extend(nla(CTA_PROTO_NUM, &[protocol]));
    proto.extend(nla(CTA_PROTO_SRC_PORT, &tuple.src_port.to_be_bytes()));
    proto.extend(nla(CTA_PROTO_DST_PORT, &tuple.dst_port.to_be_bytes()));
    let mut out = Vec::new();
    out.extend(nla(CTA_TUPLE_IP | NLA_F_NESTED, &ip));
    out.extend(nla(CTA_TUPLE_PROTO | NLA_F_NESTED, &proto));
    out
}

/// A ctnetlink request: netlink header, nfgenmsg, attributes.
fn request(kind: u16, flags: u16, seq: u32, family: u8, attrs: &[u8]) -> Vec<u8> {
    let len = u32::try_from(16 + 4 + attrs.len()).unwrap_or(u32::MAX);
    let mut out = Vec::with_capacity(len as usize);
    out.extend_from_slice(&len.to_ne_bytes());
    out.extend_from_slice(&((NFNL_SUBSYS_CTNETLINK << 8) | kind).to_ne_bytes());
    out.extend_from_slice(&flags.to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    // nfgenmsg: family, version 0, resource id 0.
    out.extend_from_slice(&[family, 0, 0, 0]);
    out.extend_from_slice(attrs);
    out
}

fn parse_ip(payload: &[u8]) -> Option<IpAddr> {
    match payload.len() {
        4 => Some(IpAddr::from(<[u8; 4]>::try_from(payload).ok()?)),
        16 => Some(IpAddr::from(<[u8; 16]>::try_from(payload).ok()?)),
        _ => None,
    }
}

/// A tuple's protocol, addresses and ports.
fn parse_tuple(buf: &[u8]) -> Option<(u8, Tuple)> {
    let (mut src, mut dst, mut proto, mut sport, mut dport) = (None, None, None, None, None);
    for (kind, payload) in attributes(buf) {
        match kind {
            CTA_TUPLE_IP => {
                for (kind, payload) in attributes(payload) {
                    match kind {
                        CTA_IP_V4_SRC | CTA_IP_V6_SRC => src = parse_ip(payload),
                        CTA_IP_V4_DST | CTA_IP_V6_DST => dst = parse_ip(payload),
                        _ => {}
                    }
                }
            }
            CTA_TUPLE_PROTO => {
                for (kind, payload) in attributes(payload) {
                    let port = || Some(u16::from_be_bytes(payload.get(..2)?.try_into().ok()?));
                    match kind {
                        CTA_PROTO_NUM => proto = payload.first().copied(),
                        CTA_PROTO_SRC_PORT => sport = port(),
                        CTA_PROTO_DST_PORT => dport = port(),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Some((
        proto?,
        Tuple {
            src: src?,
            dst: dst?,
            src_port: sport?,
            dst_port: dport?,
        },
    ))
}

/// A dumped flow (with ports: UDP, TCP, SCTP).
fn parse_flow(body: &[u8]) -> Option<Flow> {
    let (mut original, mut reply, mut zone) = (None, None, 0);
    for (kind, payload) in attributes(body.get(4..)?) {
        match kind {
            CTA_TUPLE_ORIG => original = parse_tuple(payload),
            CTA_TUPLE_REPLY => reply = parse_tuple(payload),
            CTA_ZONE => zone = u16::from_be_bytes(payload.get(..2)?.try_into().ok()?),
            _ => {}
        }
    }
    let (protocol, original) = original?;
    let (_, reply) = reply?;
    Some(Flow {
        protocol,
        original,
        reply,
        zone,
    })
}

fn family_byte(ip: IpAddr) -> u8 {
    match ip {
        IpAddr::V4(_) => libc::AF_INET as u8,
        IpAddr::V6(_) => libc::AF_INET6 as u8,
    }
}

impl Socket {
    /// The flows of `protocol` ([`UDP`], [`TCP`]) the kernel tracks in one
    /// family (`ipv6`: IPv6, else IPv4), in one dump.
    ///
    /// # Errors
    /// [`Error::Io`] or [`Error::Decode`].
    pub fn flows(&mut self, ipv6: bool, protocol: u8) -> Result<Vec<Flow>, Error> {
        let family = if ipv6 { libc::AF_INET6 } else { libc::AF_INET } as u8;
        let seq = self.take_seqs(1);
        self.send_all(&request(
            IPCTNL_MSG_CT_GET,
            NLM_F_REQUEST | NLM_F_DUMP,
            seq,
            family,
            &[],
        ))?;
        let mut flows = Vec::new();
        self.answers(
            seq,
            "receive a conntrack dump",
            "a conntrack dump",
            256 * 1024,
            |message| match message.kind {
                NLMSG_DONE => Ok(true),
                NLMSG_ERROR => match error_code(message.body) {
                    0 => Ok(false),
                    code => Err(Error::Io {
                        what: "dump the conntrack table",
                        source: Errno::from_raw(-code).into(),
                    }),
                },
                _ => {
                    flows.extend(parse_flow(message.body).filter(|f| f.protocol == protocol));
                    Ok(false)
                }
            },
        )?;
        Ok(flows)
    }

    /// The flow the kernel tracks under `original` (of `protocol`, in
    /// `zone`), found by its hash as a delete finds it, without a walk;
    /// `None` when there is none.
    ///
    /// # Errors
    /// [`Error::Io`] when the kernel refuses for another reason.
    pub fn flow(
        &mut self,
        protocol: u8,
        original: &Tuple,
        zone: u16,
    ) -> Result<Option<Flow>, Error> {
        let mut body = Vec::new();
        body.extend(nla(
            CTA_TUPLE_ORIG | NLA_F_NESTED,
            &tuple_bytes(protocol, original),
        ));
        if zone != 0 {
            body.extend(nla(CTA_ZONE, &zone.to_be_bytes()));
        }
        let seq = self.take_seqs(1);
        self.send_all(&request(
            IPCTNL_MSG_CT_GET,
            NLM_F_REQUEST | NLM_F_ACK,
            seq,
            family_byte(original.src),
            &body,
        ))?;
        let mut found = Ok(None);
        self.answers(
            seq,
            "receive a conntrack answer",
            "a conntrack answer",
            8 * 1024,
            |message| {
                if message.kind != NLMSG_ERROR {
                    found = Ok(parse_flow(message.body));
                    return Ok(false);
                }
                match -error_code(message.body) {
                    0 => {}
                    e if e == Errno::ENOENT as i32 => found = Ok(None),
                    e => {
                        found = Err(Error::Io {
                            what: "get a conntrack entry",
                            source: Errno::from_raw(e).into(),
                        })
                    }
                }
                Ok(true)
            },
        )?;
        found
    }

    /// Makes a conntrack entry for `flow` (its original and reply tuples,
    /// zone 0) that lives `timeout` unless a packet refreshes it: for tests
    /// and benchmarks that need a table of a given size without sending
    /// its packets.
    ///
    /// # Errors
    /// [`Error::Io`] when the kernel refuses (the entry exists: `EEXIST`).
    pub fn add_flow(&mut self, flow: &Flow, timeout: Duration) -> Result<(), Error> {
        let mut body = Vec::new();
        body.extend(nla(
            CTA_TUPLE_ORIG | NLA_F_NESTED,
            &tuple_bytes(flow.protocol, &flow.original),
        ));
        body.extend(nla(
            CTA_TUPLE_REPLY | NLA_F_NESTED,
            &tuple_bytes(flow.protocol, &flow.reply),
        ));
        let seconds = u32::try_from(timeout.as_secs()).unwrap_or(u32::MAX);
        body.extend(nla(CTA_TIMEOUT, &seconds.to_be_bytes()));
        let seq = self.take_seqs(1);
        self.send_all(&request(
            IPCTNL_MSG_CT_NEW,
            NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
            seq,
            family_byte(flow.original.src),
            &body,
        ))?;
        let mut result = Ok(());
        self.answers(
            seq,
            "receive a conntrack answer",
            "a conntrack answer",
            8 * 1024,
            |message| {
                if message.kind != NLMSG_ERROR {
                    return Ok(false);
                }
                let code = -error_code(message.body);
                if code != 0 {
                    result = Err(Error::Io {
                        what: "make a conntrack entry",
                        source: Errno::from_raw(code).into(),
                    });
                }
                Ok(true)
            },
        )?;
        result
    }

    /// Deletes one flow, found by its original tuple (and zone). Returns
    /// whether it was there (it may have timed out meanwhile).
    ///
    /// # Errors
    /// [`Error::Io`] when the kernel refuses for another reason.
    pub fn delete_flow(&mut self, flow: &Flow) -> Result<bool, Error> {
        let mut body = Vec::new();
        body.extend(nla(
            CTA_TUPLE_ORIG | NLA_F_NESTED,
            &tuple_bytes(flow.protocol, &flow.original),
        ));
        if flow.zone != 0 {
            body.extend(nla(CTA_ZONE, &flow.zone.to_be_bytes()));
        }
        let seq = self.take_seqs(1);
        let family = family_byte(flow.original.src);
        self.send_all(&request(
            IPCTNL_MSG_CT_DELETE,
            NLM_F_REQUEST | NLM_F_ACK,
            seq,
            family,
            &body,
        ))?;
        let mut found = Ok(true);
        self.answers(
            seq,
            "receive a conntrack answer",
            "a conntrack answer",
            8 * 1024,
            |message| {
                if message.kind != NLMSG_ERROR {
                    return Ok(false);
                }
                found = match -error_code(message.body) {
                    0 => Ok(true),
                    e if e == Errno::ENOENT as i32 => Ok(false),
                    e => Err(Error::Io {
                        what: "delete a conntrack entry",
                        source: Errno::from_raw(e).into(),
                    }),
                };
                Ok(true)
            },
        )?;
        found
    }
}

#[cfg(test)]
mod tests {
    use netlink_packet_core::NLA_F_NESTED;

    use super::{Flow, Tuple, nla, parse_flow, request, tuple_bytes};

    /// A recorded flow's key reads back as its original tuple and the
    /// address that answers it, in both families; keys of another length
    /// are refused.
    #[test]
    fn record_keys_read_back() {
        use super::FlowRecord;
        let ip = |t: &str| t.parse().expect("ip");
        for (client, service, endpoint) in [
            ("10.244.1.99", "10.96.0.10", "10.244.2.10"),
            ("fd00:1::99", "fd00:96::10", "fd00:2::10"),
        ] {
            let flow = Flow {
                protocol: super::UDP,
                original: Tuple {
                    src: ip(client),
                    dst: ip(service),
                    src_port: 40000,
                    dst_port: 53,
                },
                reply: Tuple {
                    src: ip(endpoint),
                    dst: ip(client),
                    src_port: 0,
                    dst_port: 40000,
                },
                zone: 0,
            };
            let key = FlowRecord::element_key(&flow);
            assert_eq!(FlowRecord::flow_of(&key), Some(flow));
            assert!(flow.dnated());
        }
        assert_eq!(FlowRecord::flow_of(&[0; 21]), None);
        // The loads fill the key's registers in order: 5 parts, the
        // last at 4 + 4 + 4 + 4 bytes (IPv4) or 16 + 4 + 16 + 4 (IPv6).
        use crate::nft::{Expr, Reg, TableFamily};
        for (family, last) in [(TableFamily::Ip, 4), (TableFamily::Ip6, 10)] {
            let key = FlowRecord::key(family);
            assert_eq!(key.len(), 5);
            let Some(Expr::CtDir { dreg, .. }) = key.last() else {
                panic!("{key:?}");
            };
            assert_eq!(*dreg, Reg::r32(last));
        }
    }

    /// A flow encoded as a dump answer's body parses back.
    #[test]
    fn flows_parse_back() {
        let ip = |t: &str| t.parse().expect("ip");
        let flow = Flow {
            protocol: super::UDP,
            original: Tuple {
                src: ip("10.244.1.99"),
                dst: ip("10.96.0.10"),
                src_port: 40000,
                dst_port: 53,
            },
            reply: Tuple {
                src: ip("10.244.2.10"),
                dst: ip("10.244.1.99"),
                src_port: 5353,
                dst_port: 40000,
            },
            zone: 0,
        };
        let mut attrs = Vec::new();
        attrs.extend(nla(
            super::CTA_TUPLE_ORIG | NLA_F_NESTED,
            &tuple_bytes(flow.protocol, &flow.original),
        ));
        attrs.extend(nla(
            super::CTA_TUPLE_REPLY | NLA_F_NESTED,
            &tuple_bytes(flow.protocol, &flow.reply),
        ));
        let message = request(0, 0, 1, libc::AF_INET as u8, &attrs);
        assert_eq!(parse_flow(&message[16..]), Some(flow));
        assert!(flow.dnated());
    }
}
