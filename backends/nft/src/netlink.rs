//! Element-only transactions over nf_tables netlink, with no `nft` process.
//!
//! nft 1.0.6 reads every set element of the ruleset back from the kernel
//! before any command but a plain `add element`: at 100k endpoints that is
//! about 17 ms per transaction, whatever the change. Most updates (an
//! endpoint added, removed or moved) change map elements only, and the
//! element messages of nf_tables are small and stable, so such updates are
//! sent here as one netlink batch: atomic like an `nft -f` transaction (the
//! kernel commits all of it or none), and O(size of the change).
//!
//! Anything else (chains, rules, sets, interval sets) goes through `nft`.

use std::collections::BTreeMap;
use std::fs::File;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use kpng_model::IpFamily;
use nix::errno::Errno;
use nix::sched::{CloneFlags, setns};
use nix::sys::socket::{
    self, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, sockopt,
};
use nix::sys::time::TimeVal;

use crate::render::{
    CLUSTER_IPS, Elem, FIREWALL_IPS, HAIRPIN, NO_ENDPOINT_NODEPORTS, NO_ENDPOINT_SERVICES, Pick,
    SERVICE_IPS, SERVICE_NODEPORTS,
};

// Netlink and nf_tables constants (linux/netlink.h, linux/netfilter/
// nfnetlink.h, linux/netfilter/nf_tables.h).
const NLMSG_HDRLEN: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_CREATE: u16 = 0x400;
const NLA_F_NESTED: u16 = 0x8000;
const NFNL_MSG_BATCH_BEGIN: u16 = 16;
const NFNL_MSG_BATCH_END: u16 = 17;
const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFT_MSG_NEWSETELEM: u16 = 12;
const NFT_MSG_DELSETELEM: u16 = 14;
const NFTA_SET_ELEM_LIST_TABLE: u16 = 1;
const NFTA_SET_ELEM_LIST_SET: u16 = 2;
const NFTA_SET_ELEM_LIST_ELEMENTS: u16 = 3;
const NFTA_LIST_ELEM: u16 = 1;
const NFTA_SET_ELEM_KEY: u16 = 1;
const NFTA_SET_ELEM_DATA: u16 = 2;
const NFTA_DATA_VALUE: u16 = 1;
const NFTA_DATA_VERDICT: u16 = 2;
const NFTA_VERDICT_CODE: u16 = 1;
const NFTA_VERDICT_CHAIN: u16 = 2;
const NFT_JUMP: i32 = -3;
const NFT_GOTO: i32 = -4;
const NFPROTO_IPV4: u8 = 2;
const NFPROTO_IPV6: u8 = 10;

/// The largest batch sent here; bigger deltas go through `nft`, which
/// sizes its socket buffers for them.
pub(crate) const MAX_BATCH: usize = 128 * 1024;
/// Elements per message.
const CHUNK: usize = 256;

/// One part of an element key or value, as the kernel lays it out: each
/// part of a concatenation fills whole 32-bit registers.
#[derive(Clone, Copy, Debug)]
enum Part {
    /// `ipv4_addr` or `ipv6_addr`, network order.
    Addr,
    /// `inet_proto`: one byte, padded to four.
    Proto,
    /// `inet_service`: two bytes in network order, padded to four.
    Port,
    /// A `numgen` value: 32 bits in host order.
    Index,
}

/// What a map maps to.
#[derive(Clone, Copy, Debug)]
enum Data {
    /// A set: nothing.
    None,
    /// `goto`/`jump` a chain.
    Verdict,
    /// A NAT target: address and port.
    Target,
}

/// The layout of a map's elements, or `None` for maps this path does not
/// write (interval sets, affinity sets).
fn schema(map: &str) -> Option<(&'static [Part], Data)> {
    use Part::{Addr, Index, Port, Proto};
    const VIP: &[Part] = &[Addr, Proto, Port];
    const NODE_PORT: &[Part] = &[Proto, Port];
    Some(match map {
        SERVICE_IPS | NO_ENDPOINT_SERVICES | FIREWALL_IPS => (VIP, Data::Verdict),
        SERVICE_NODEPORTS | NO_ENDPOINT_NODEPORTS => (NODE_PORT, Data::Verdict),
        CLUSTER_IPS => (&[Addr], Data::None),
        HAIRPIN => (&[Addr, Addr], Data::None),
        m if m == Pick::Vip { local: false }.map() || m == Pick::Vip { local: true }.map() => {
            (&[Addr, Proto, Port, Index], Data::Target)
        }
        m if m == Pick::NodePort { local: false }.map()
            || m == Pick::NodePort { local: true }.map() =>
        {
            (&[Proto, Port, Index], Data::Target)
        }
        _ => return None,
    })
}

/// Whether this path can write elements of `map`.
pub(crate) fn supports(map: &str) -> bool {
    schema(map).is_some()
}

/// An element this path cannot encode: a bug in the renderer, reported
/// instead of sending something else than the script says.
#[derive(Debug, thiserror::Error)]
#[error("cannot encode element {element:?} of map {map}: {why}")]
pub(crate) struct EncodeError {
    map: String,
    element: String,
    why: &'static str,
}

fn parts(
    family: IpFamily,
    layout: &[Part],
    text: &str,
    out: &mut Vec<u8>,
) -> Result<(), &'static str> {
    let mut words = text.split(" . ");
    for part in layout {
        let word = words.next().ok_or("too few parts")?.trim();
        match part {
            Part::Addr => match word.parse::<IpAddr>().map_err(|_| "bad address")? {
                IpAddr::V4(ip) if family == IpFamily::V4 => out.extend_from_slice(&ip.octets()),
                IpAddr::V6(ip) if family == IpFamily::V6 => out.extend_from_slice(&ip.octets()),
                _ => return Err("address of the other family"),
            },
            Part::Proto => {
                let number = match word {
                    "tcp" => 6,
                    "udp" => 17,
                    "sctp" => 132,
                    other => other.parse::<u8>().map_err(|_| "bad protocol")?,
                };
                out.extend_from_slice(&[number, 0, 0, 0]);
            }
            Part::Port => {
                let port = word.parse::<u16>().map_err(|_| "bad port")?;
                out.extend_from_slice(&port.to_be_bytes());
                out.extend_from_slice(&[0, 0]);
            }
            Part::Index => {
                let index = word.parse::<u32>().map_err(|_| "bad index")?;
                out.extend_from_slice(&index.to_ne_bytes());
            }
        }
    }
    if words.next().is_some() {
        return Err("too many parts");
    }
    Ok(())
}

/// A netlink message under construction, in a byte buffer.
struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    fn u16(&mut self, v: u16) {
        self.buf.extend_from_slice(&v.to_ne_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_ne_bytes());
    }
    fn pad(&mut self) {
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
    }

    /// Starts a message; returns where its length goes.
    fn begin(&mut self, kind: u16, flags: u16, seq: u32, family: u8, res_id: u16) -> usize {
        let start = self.buf.len();
        self.u32(0);
        self.u16(kind);
        self.u16(flags);
        self.u32(seq);
        self.u32(0);
        // struct nfgenmsg
        self.buf.push(family);
        self.buf.push(0);
        self.buf.extend_from_slice(&res_id.to_be_bytes());
        start
    }

    fn end(&mut self, start: usize) {
        let len = u32::try_from(self.buf.len() - start).unwrap_or(u32::MAX);
        self.buf[start..start + 4].copy_from_slice(&len.to_ne_bytes());
    }

    fn attr(&mut self, kind: u16, data: &[u8]) {
        let len = u16::try_from(4 + data.len()).unwrap_or(u16::MAX);
        self.u16(len);
        self.u16(kind);
        self.buf.extend_from_slice(data);
        self.pad();
    }

    fn string(&mut self, kind: u16, text: &str) {
        let mut data = Vec::with_capacity(text.len() + 1);
        data.extend_from_slice(text.as_bytes());
        data.push(0);
        self.attr(kind, &data);
    }

    fn nest(&mut self, kind: u16) -> usize {
        let start = self.buf.len();
        self.u16(0);
        self.u16(kind | NLA_F_NESTED);
        start
    }

    fn unnest(&mut self, start: usize) {
        let len = u16::try_from(self.buf.len() - start).unwrap_or(u16::MAX);
        self.buf[start..start + 2].copy_from_slice(&len.to_ne_bytes());
    }
}

/// Whether elements are added or deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verb {
    /// `add element`.
    Add,
    /// `delete element`.
    Delete,
}

/// One nf_tables batch of element changes, possibly across both families.
pub(crate) struct Batch {
    out: Writer,
    seq: u32,
    /// What each acknowledged message did, by sequence number.
    messages: BTreeMap<u32, String>,
}

impl Batch {
    pub(crate) fn new() -> Self {
        let mut out = Writer {
            buf: Vec::with_capacity(4096),
        };
        let start = out.begin(
            NFNL_MSG_BATCH_BEGIN,
            NLM_F_REQUEST,
            0,
            0,
            NFNL_SUBSYS_NFTABLES,
        );
        out.end(start);
        Self {
            out,
            seq: 1,
            messages: BTreeMap::new(),
        }
    }

    /// Adds or deletes `elements` of `map` in `table` of `family`.
    pub(crate) fn elements(
        &mut self,
        family: IpFamily,
        table: &str,
        map: &str,
        verb: Verb,
        elements: &[&Elem],
    ) -> Result<(), EncodeError> {
        let (layout, data) = schema(map).ok_or_else(|| EncodeError {
            map: map.to_owned(),
            element: String::new(),
            why: "no netlink layout for this map",
        })?;
        let nfproto = match family {
            IpFamily::V4 => NFPROTO_IPV4,
            IpFamily::V6 => NFPROTO_IPV6,
        };
        let (kind, flags) = match verb {
            Verb::Add => (NFT_MSG_NEWSETELEM, NLM_F_CREATE),
            Verb::Delete => (NFT_MSG_DELSETELEM, 0),
        };
        for chunk in elements.chunks(CHUNK) {
            let seq = self.seq;
            self.seq += 1;
            let out = &mut self.out;
            let msg = out.begin(
                (NFNL_SUBSYS_NFTABLES << 8) | kind,
                NLM_F_REQUEST | NLM_F_ACK | flags,
                seq,
                nfproto,
                0,
            );
            out.string(NFTA_SET_ELEM_LIST_TABLE, table);
            out.string(NFTA_SET_ELEM_LIST_SET, map);
            let list = out.nest(NFTA_SET_ELEM_LIST_ELEMENTS);
            for element in chunk {
                let bad = |why| EncodeError {
                    map: map.to_owned(),
                    element: element.to_string(),
                    why,
                };
                let (key_text, data_text) = match element.split_once(" : ") {
                    Some((k, d)) => (k, Some(d)),
                    None => (&***element, None),
                };
                let mut key = Vec::with_capacity(40);
                parts(family, layout, key_text, &mut key).map_err(bad)?;
                let item = out.nest(NFTA_LIST_ELEM);
                let nest = out.nest(NFTA_SET_ELEM_KEY);
                out.attr(NFTA_DATA_VALUE, &key);
                out.unnest(nest);
                // A delete names the key only.
                if verb == Verb::Add {
                    match (data, data_text) {
                        (Data::None, None) => {}
                        (Data::Verdict, Some(text)) => {
                            let (code, chain) = match text.split_once(' ') {
                                Some(("goto", chain)) => (NFT_GOTO, chain),
                                Some(("jump", chain)) => (NFT_JUMP, chain),
                                _ => return Err(bad("bad verdict")),
                            };
                            let data = out.nest(NFTA_SET_ELEM_DATA);
                            let verdict = out.nest(NFTA_DATA_VERDICT);
                            out.attr(NFTA_VERDICT_CODE, &code.to_be_bytes());
                            out.string(NFTA_VERDICT_CHAIN, chain);
                            out.unnest(verdict);
                            out.unnest(data);
                        }
                        (Data::Target, Some(text)) => {
                            let mut value = Vec::with_capacity(20);
                            parts(family, &[Part::Addr, Part::Port], text, &mut value)
                                .map_err(bad)?;
                            let data = out.nest(NFTA_SET_ELEM_DATA);
                            out.attr(NFTA_DATA_VALUE, &value);
                            out.unnest(data);
                        }
                        _ => return Err(bad("value does not fit the map")),
                    }
                }
                out.unnest(item);
            }
            out.unnest(list);
            out.end(msg);
            let verb = match verb {
                Verb::Add => "add",
                Verb::Delete => "delete",
            };
            self.messages
                .insert(seq, format!("{verb} element {family:?} {table} {map}"));
        }
        Ok(())
    }

    /// The size of the batch so far, in bytes.
    pub(crate) fn len(&self) -> usize {
        self.out.buf.len()
    }

    /// Whether the batch changes nothing.
    pub(crate) fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// Closes the batch with sequence numbers from `base` on; returns
    /// the bytes, what each acknowledged message does by its sequence
    /// number, and how many sequence numbers the batch used.
    fn finish(mut self, base: u32) -> (Vec<u8>, BTreeMap<u32, String>, u32) {
        let start = self.out.begin(
            NFNL_MSG_BATCH_END,
            NLM_F_REQUEST,
            self.seq,
            0,
            NFNL_SUBSYS_NFTABLES,
        );
        self.out.end(start);
        let count = self.seq + 1;
        let buf = &mut self.out.buf;
        let mut at = 0;
        while at + NLMSG_HDRLEN <= buf.len() {
            let mut word = [0u8; 4];
            word.copy_from_slice(&buf[at..at + 4]);
            let len = u32::from_ne_bytes(word) as usize;
            word.copy_from_slice(&buf[at + 8..at + 12]);
            let seq = u32::from_ne_bytes(word).wrapping_add(base);
            buf[at + 8..at + 12].copy_from_slice(&seq.to_ne_bytes());
            at += len.max(NLMSG_HDRLEN);
        }
        let messages = self
            .messages
            .into_iter()
            .map(|(seq, what)| (seq.wrapping_add(base), what))
            .collect();
        (self.out.buf, messages, count)
    }
}

/// Why a netlink transaction failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NetlinkError {
    /// The socket could not be opened, or not in the namespace asked for.
    #[error("cannot open an nf_tables netlink socket{}: {source}", netns_suffix(.netns))]
    Open {
        netns: Option<String>,
        #[source]
        source: std::io::Error,
    },
    /// Sending or receiving failed.
    #[error("netlink {what}: {errno}")]
    Io { what: &'static str, errno: Errno },
    /// The kernel refused the batch: nothing of it was applied.
    #[error("kernel refused {what}: {errno}")]
    Refused { what: String, errno: Errno },
}

fn netns_suffix(netns: &Option<String>) -> String {
    netns
        .as_ref()
        .map(|n| format!(" in network namespace {n}"))
        .unwrap_or_default()
}

fn open_here() -> nix::Result<OwnedFd> {
    let fd = socket::socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkNetFilter,
    )?;
    socket::bind(fd.as_raw_fd(), &NetlinkAddr::new(0, 0))?;
    socket::setsockopt(&fd, sockopt::ReceiveTimeout, &TimeVal::new(10, 0))?;
    Ok(fd)
}

/// Opens a socket in `netns` (a path such as `/run/netns/NAME`), or in the
/// process's own namespace. The namespace switch happens on a short-lived
/// thread, so no other thread ever runs in the wrong namespace; a socket
/// keeps the namespace it was made in.
fn open(netns: Option<&Path>) -> Result<OwnedFd, NetlinkError> {
    let failed = |source: std::io::Error| NetlinkError::Open {
        netns: netns.map(|p| p.display().to_string()),
        source,
    };
    let Some(path) = netns else {
        return open_here().map_err(|e| failed(e.into()));
    };
    let file = File::open(path).map_err(failed)?;
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                setns(&file, CloneFlags::CLONE_NEWNET)?;
                open_here()
            })
            .join()
    })
    .map_err(|_| failed(std::io::Error::other("namespace thread panicked")))?
    .map_err(|e| failed(e.into()))
}

/// A netlink socket kept open across transactions.
///
/// Closing an nf_tables netlink socket costs the kernel ~15 ms (it waits
/// for a grace period), ten times the transaction itself, so the backend
/// keeps one socket and numbers its batches with a sequence that runs on
/// across them; replies to older batches are ignored. After any failure
/// the socket is dropped and the next transaction opens a fresh one.
pub(crate) struct Socket {
    fd: OwnedFd,
    /// The sequence number the next batch starts at.
    next_seq: u32,
}

impl Socket {
    /// Opens a socket in `netns`, or in the process's own namespace.
    pub(crate) fn open(netns: Option<&Path>) -> Result<Self, NetlinkError> {
        Ok(Self {
            fd: open(netns)?,
            next_seq: 1,
        })
    }

    /// Sends `batch` and waits for the kernel's answer to each message.
    /// On an error the socket may hold replies of this batch still
    /// unread: drop it.
    pub(crate) fn send(&mut self, batch: Batch) -> Result<(), NetlinkError> {
        let base = self.next_seq;
        let (buf, mut pending, count) = batch.finish(base);
        self.next_seq = base.wrapping_add(count).max(1);
        let ours = |seq: u32| seq.wrapping_sub(base) < count;
        let fd = self.fd.as_raw_fd();
        let sent = socket::send(fd, &buf, MsgFlags::empty()).map_err(|errno| NetlinkError::Io {
            what: "send",
            errno,
        })?;
        if sent != buf.len() {
            return Err(NetlinkError::Io {
                what: "short send",
                errno: Errno::EMSGSIZE,
            });
        }
        let mut reply = vec![0u8; 64 * 1024];
        while !pending.is_empty() {
            let n = socket::recv(fd, &mut reply, MsgFlags::empty()).map_err(|errno| {
                NetlinkError::Io {
                    what: "receive",
                    errno,
                }
            })?;
            let mut at = 0;
            while at + NLMSG_HDRLEN <= n {
                let word = |i: usize| {
                    let mut b = [0u8; 4];
                    b.copy_from_slice(&reply[at + i..at + i + 4]);
                    b
                };
                let len = u32::from_ne_bytes(word(0)) as usize;
                let kind = u16::from_ne_bytes([reply[at + 4], reply[at + 5]]);
                let seq = u32::from_ne_bytes(word(8));
                if len < NLMSG_HDRLEN || at + len > n {
                    break;
                }
                if kind == NLMSG_ERROR && len >= NLMSG_HDRLEN + 4 && ours(seq) {
                    let code = i32::from_ne_bytes(word(NLMSG_HDRLEN));
                    let what = pending.remove(&seq);
                    if code != 0 {
                        return Err(NetlinkError::Refused {
                            what: what.unwrap_or_else(|| "the transaction".to_owned()),
                            errno: Errno::from_raw(-code),
                        });
                    }
                }
                at += len.next_multiple_of(4);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elem(text: &str) -> Elem {
        text.into()
    }

    #[test]
    fn keys_fill_whole_registers() {
        let mut key = Vec::new();
        parts(
            IpFamily::V4,
            &[Part::Addr, Part::Proto, Part::Port, Part::Index],
            "10.96.0.1 . tcp . 443 . 2",
            &mut key,
        )
        .unwrap();
        let mut want = vec![10, 96, 0, 1, 6, 0, 0, 0, 0x01, 0xbb, 0, 0];
        want.extend_from_slice(&2u32.to_ne_bytes());
        assert_eq!(key, want);

        let mut key = Vec::new();
        parts(
            IpFamily::V6,
            &[Part::Addr, Part::Port],
            "fd00::1 . 8080",
            &mut key,
        )
        .unwrap();
        assert_eq!(key.len(), 20);
        assert_eq!(&key[16..], &[0x1f, 0x90, 0, 0]);
    }

    #[test]
    fn bad_elements_are_named() {
        let mut batch = Batch::new();
        let e = elem("10.96.0.1 . tcp . 99999 : goto svc-c1");
        let err = batch
            .elements(IpFamily::V4, "kpng", SERVICE_IPS, Verb::Add, &[&e])
            .unwrap_err();
        assert!(err.to_string().contains("bad port"), "{err}");
        let e = elem("fd00::1 . tcp . 80 : goto svc-c1");
        let err = batch
            .elements(IpFamily::V4, "kpng", SERVICE_IPS, Verb::Add, &[&e])
            .unwrap_err();
        assert!(err.to_string().contains("other family"), "{err}");
        assert!(!supports("cluster-cidrs"));
    }

    #[test]
    fn a_batch_is_framed() {
        let mut batch = Batch::new();
        let e = elem("10.96.0.1 . tcp . 80 : goto svc-c1");
        batch
            .elements(IpFamily::V4, "kpng", SERVICE_IPS, Verb::Add, &[&e])
            .unwrap();
        let (buf, messages, count) = batch.finish(100);
        assert_eq!(messages.len(), 1);
        assert_eq!(count, 3);
        // Three messages: begin, the elements, end; lengths add up.
        let mut at = 0;
        let mut kinds = Vec::new();
        let mut seqs = Vec::new();
        while at < buf.len() {
            let len = u32::from_ne_bytes(buf[at..at + 4].try_into().unwrap()) as usize;
            kinds.push(u16::from_ne_bytes([buf[at + 4], buf[at + 5]]));
            seqs.push(u32::from_ne_bytes(buf[at + 8..at + 12].try_into().unwrap()));
            at += len;
        }
        assert_eq!(at, buf.len());
        assert_eq!(
            kinds,
            vec![
                NFNL_MSG_BATCH_BEGIN,
                (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWSETELEM,
                NFNL_MSG_BATCH_END
            ]
        );
        // Numbered from the base the socket gave, acks looked up by it.
        assert_eq!(seqs, vec![100, 101, 102]);
        assert!(messages.contains_key(&101));
    }
}
