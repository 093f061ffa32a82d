//! The maps' keys and values as bytes, in the layouts `bpf/kpng_sock.c`
//! declares: addresses and ports in network order, set numbers, counts
//! and flags in the host's order.

use std::fmt;
use std::net::IpAddr;

/// The protocols, as the kernel numbers them.
pub(crate) const TCP: u8 = 6;
pub(crate) const UDP: u8 = 17;
pub(crate) const SCTP: u8 = 132;

/// `EMPTY_REJECT`: no endpoint at all; a connect is refused.
pub(crate) const EMPTY_REJECT: u32 = 1;
/// `EMPTY_DROP`: endpoints, but none for a Local policy; dropped.
pub(crate) const EMPTY_DROP: u32 = 2;

/// The protocol number of an nft-style name.
pub(crate) fn proto_number(name: &str) -> u8 {
    match name {
        "udp" => UDP,
        "sctp" => SCTP,
        _ => TCP,
    }
}

/// The model's protocol of an IP protocol number.
pub(crate) fn model_protocol(number: u8) -> kpng_model::v1::Protocol {
    match number {
        UDP => kpng_model::v1::Protocol::Udp,
        SCTP => kpng_model::v1::Protocol::Sctp,
        _ => kpng_model::v1::Protocol::Tcp,
    }
}

fn proto_name(number: u8) -> &'static str {
    match number {
        UDP => "udp",
        SCTP => "sctp",
        _ => "tcp",
    }
}

/// 16 bytes of address (IPv4 in the first 4) and the family byte (4, 6).
fn addr_bytes(ip: IpAddr) -> ([u8; 16], u8) {
    let mut out = [0u8; 16];
    match ip {
        IpAddr::V4(v4) => {
            out[..4].copy_from_slice(&v4.octets());
            (out, 4)
        }
        IpAddr::V6(v6) => (v6.octets(), 6),
    }
}

fn addr_of(bytes: &[u8], family: u8) -> IpAddr {
    let mut a = [0u8; 16];
    a.copy_from_slice(&bytes[..16]);
    if family == 4 {
        IpAddr::from([a[0], a[1], a[2], a[3]])
    } else {
        IpAddr::from(a)
    }
}

/// Where a socket asks to go: a Service address, port and protocol
/// (`struct frontend`, 20 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Frontend {
    pub(crate) ip: IpAddr,
    pub(crate) port: u16,
    pub(crate) proto: u8,
}

impl Frontend {
    pub(crate) fn key(&self) -> [u8; 20] {
        let (addr, family) = addr_bytes(self.ip);
        let mut out = [0u8; 20];
        out[..16].copy_from_slice(&addr);
        out[16..18].copy_from_slice(&self.port.to_be_bytes());
        out[18] = self.proto;
        out[19] = family;
        out
    }

    pub(crate) fn from_key(key: &[u8; 20]) -> Self {
        Self {
            ip: addr_of(key, key[19]),
            port: u16::from_be_bytes([key[16], key[17]]),
            proto: key[18],
        }
    }
}

impl fmt::Display for Frontend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.ip, proto_name(self.proto), self.port)
    }
}

/// An endpoint: address and port (`struct endpoint`, 20 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Endpoint {
    pub(crate) ip: IpAddr,
    pub(crate) port: u16,
    /// On this node (`ENDPOINT_LOCAL`): the tc programs masquerade only
    /// towards endpoints elsewhere.
    pub(crate) local: bool,
}

impl Endpoint {
    pub(crate) fn bytes(&self) -> [u8; 20] {
        let (addr, family) = addr_bytes(self.ip);
        let mut out = [0u8; 20];
        out[..16].copy_from_slice(&addr);
        out[16..18].copy_from_slice(&self.port.to_be_bytes());
        out[18] = family;
        out[19] = u8::from(self.local);
        out
    }

    pub(crate) fn from_bytes(bytes: &[u8]) -> Self {
        Self {
            ip: addr_of(bytes, bytes[18]),
            port: u16::from_be_bytes([bytes[16], bytes[17]]),
            local: bytes[19] & 1 != 0,
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.ip {
            IpAddr::V4(ip) => write!(f, "{ip}:{}", self.port)?,
            IpAddr::V6(ip) => write!(f, "[{ip}]:{}", self.port)?,
        }
        if self.local {
            write!(f, " (local)")?;
        }
        Ok(())
    }
}

/// A Service record (`struct service`, 16 bytes): its endpoint set, its
/// affinity timeout and what an empty set does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Record {
    pub(crate) set: u32,
    pub(crate) affinity: u32,
    pub(crate) flags: u32,
}

impl Record {
    pub(crate) fn bytes(&self) -> [u8; 16] {
        let mut out = [0u8; 16];
        out[..4].copy_from_slice(&self.set.to_ne_bytes());
        out[4..8].copy_from_slice(&self.affinity.to_ne_bytes());
        out[8..12].copy_from_slice(&self.flags.to_ne_bytes());
        out
    }

    pub(crate) fn from_bytes(bytes: &[u8; 16]) -> Self {
        let word =
            |i: usize| u32::from_ne_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
        Self {
            set: word(0),
            affinity: word(4),
            flags: word(8),
        }
    }
}

impl fmt::Display for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "set {}", self.set)?;
        if self.affinity > 0 {
            write!(f, " affinity {}s", self.affinity)?;
        }
        match self.flags & (EMPTY_REJECT | EMPTY_DROP) {
            EMPTY_REJECT => write!(f, " empty: reject")?,
            EMPTY_DROP => write!(f, " empty: drop")?,
            _ => {}
        }
        if self.flags & EXT_RANGES != 0 {
            write!(f, " source ranges")?;
        }
        if self.flags & EXT_SNAT != 0 {
            write!(f, " masquerade")?;
        }
        if self.flags & EXT_DSR != 0 {
            write!(f, " direct return")?;
        }
        if self.flags & EXT_SNAT_ALL != 0 {
            write!(f, " masquerade to every endpoint")?;
        }
        if self.flags & EXT_POD_SOURCES != 0 {
            write!(f, " unless from a pod")?;
        }
        if self.flags & BAL_MAGLEV != 0 {
            write!(f, " maglev")?;
        }
        if self.flags & BAL_RR != 0 {
            write!(f, " round-robin")?;
        }
        if self.flags & SOCK_RANGED != 0 {
            let node = if self.flags & RANGED_NODE != 0 {
                "translated"
            } else {
                "dropped"
            };
            let pods = if self.flags & RANGED_PODS != 0 {
                "translated"
            } else if self.flags & RANGED_NO_PODS != 0 {
                "dropped"
            } else {
                "left alone"
            };
            write!(f, " source ranges: node {node}, pods {pods}")?;
        }
        if self.flags & NODE_NETNS != 0 {
            write!(f, " node only")?;
        }
        Ok(())
    }
}

/// Endpoints a page of a set holds (`PAGE`).
pub(crate) const PAGE: usize = 8;

/// `struct set_key`: a set and a page of its slots.
pub(crate) fn slot_key(set: u32, page: u32) -> [u8; 8] {
    let mut out = [0u8; 8];
    out[..4].copy_from_slice(&set.to_ne_bytes());
    out[4..].copy_from_slice(&page.to_ne_bytes());
    out
}

/// The set and page of a slot key.
pub(crate) fn slot_of(key: &[u8]) -> (u32, u32) {
    (
        set_of(key),
        u32::from_ne_bytes([key[4], key[5], key[6], key[7]]),
    )
}

/// The set of a slot key or member key (its first word).
pub(crate) fn set_of(key: &[u8]) -> u32 {
    u32::from_ne_bytes([key[0], key[1], key[2], key[3]])
}

/// `struct page`: the count (meaningful in page 0 only) and up to
/// [`PAGE`] endpoints (`None`: an unused slot, zeros).
pub(crate) fn page_bytes(count: u32, slots: &[Option<Endpoint>]) -> [u8; 168] {
    let mut out = [0u8; 168];
    out[..4].copy_from_slice(&count.to_ne_bytes());
    for (i, slot) in slots.iter().take(PAGE).enumerate() {
        if let Some(ep) = slot {
            out[8 + 20 * i..28 + 20 * i].copy_from_slice(&ep.bytes());
        }
    }
    out
}

/// The count and the endpoints of a page (unused slots included).
pub(crate) fn page_of(bytes: &[u8]) -> (u32, Vec<Endpoint>) {
    let count = u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    let slots = (0..PAGE)
        .filter(|i| bytes.len() >= 28 + 20 * i)
        .map(|i| Endpoint::from_bytes(&bytes[8 + 20 * i..28 + 20 * i]))
        .collect();
    (count, slots)
}

/// `struct member_key`: a set and an endpoint.
pub(crate) fn member_key(set: u32, endpoint: &Endpoint) -> [u8; 24] {
    let mut out = [0u8; 24];
    out[..4].copy_from_slice(&set.to_ne_bytes());
    out[4..].copy_from_slice(&endpoint.bytes());
    out
}

/// `struct live_key`: a ClusterIP in use.
pub(crate) fn live_key(ip: IpAddr) -> [u8; 20] {
    let (addr, family) = addr_bytes(ip);
    let mut out = [0u8; 20];
    out[..16].copy_from_slice(&addr);
    out[16] = family;
    out
}

/// The address of a live key.
pub(crate) fn live_ip(key: &[u8; 20]) -> IpAddr {
    addr_of(key, key[16])
}

/// The data part of `struct cidr_key` (after its prefix length): the
/// family byte, then the address; and the prefix length, in bits,
/// counting the family byte.
pub(crate) fn cidr_key(ip: IpAddr, len: u8) -> (u32, [u8; 20]) {
    let (addr, family) = addr_bytes(ip);
    let mut out = [0u8; 20];
    out[0] = family;
    out[1..17].copy_from_slice(&addr);
    (8 + u32::from(len), out)
}

/// `EXT_RANGES`: an external record whose sources are checked against
/// `kpng_ranges`.
pub(crate) const EXT_RANGES: u32 = 4;
/// `EXT_SNAT`: an external record of `externalTrafficPolicy: Cluster`,
/// masqueraded towards endpoints on other nodes.
pub(crate) const EXT_SNAT: u32 = 8;
/// `EXT_DSR`: an external record of `externalTrafficPolicy: Cluster`
/// returned directly (DSR) from endpoints on other nodes: the flow keeps
/// its client's address, and the Service's address and port ride in an
/// IPv4 option or IPv6 destination option (on a TCP SYN, an SCTP INIT,
/// every UDP datagram), which the endpoint's node's ingress program
/// takes out and its egress program writes back as the reply's source.
pub(crate) const EXT_DSR: u32 = 8192;
/// `EXT_SNAT_ALL`: masqueraded towards every endpoint, local ones too (a
/// ClusterIP reached from outside, as kube-proxy's rules masquerade it).
pub(crate) const EXT_SNAT_ALL: u32 = 64;
/// `EXT_POD_SOURCES`: `kpng_ranges` holds the record's pod networks
/// (`--cluster-cidr`): a source in them is not masqueraded.
pub(crate) const EXT_POD_SOURCES: u32 = 128;

/// `SOCK_RANGED`: a socket record of an LB IP with
/// `loadBalancerSourceRanges` (made when no netfilter rules check them):
/// the node's sockets translate with `RANGED_NODE`, else fail; pods' with
/// `RANGED_PODS`, fail with `RANGED_NO_PODS`, else are left alone.
pub(crate) const SOCK_RANGED: u32 = 256;
/// `RANGED_NODE`: a node address is in the ranges.
pub(crate) const RANGED_NODE: u32 = 512;
/// `RANGED_PODS`: every pod network is in the ranges.
pub(crate) const RANGED_PODS: u32 = 1024;
/// `RANGED_NO_PODS`: no pod network overlaps the ranges.
pub(crate) const RANGED_NO_PODS: u32 = 2048;
/// `NODE_NETNS`: a socket record of a NodePort on a loopback address
/// (a localhost NodePort), served to sockets of the node's own network
/// namespace only (`kpng_settings[0].node_netns`); another namespace's
/// loopback (a pod's) is its own.
pub(crate) const NODE_NETNS: u32 = 4096;
/// `BAL_MAGLEV`: a record whose new flows from outside take the endpoint
/// their Maglev slot names (`kpng_maglev`); sockets pick at random.
pub(crate) const BAL_MAGLEV: u32 = 16;
/// `BAL_RR`: a record whose new connections take the set's endpoints in
/// turn.
pub(crate) const BAL_RR: u32 = 32;

/// `struct maglev`: a set's Maglev table, each slot the index of an
/// endpoint in the set's slots (`u16`, the last one padding).
pub(crate) const MAGLEV_BYTES: usize = (kpng_model::maglev::SLOTS as usize + 1) * 2;

/// The Maglev table of a set holding `slots` (in slot order), as
/// `kpng_maglev` holds it.
pub(crate) fn maglev_bytes(slots: &[Endpoint]) -> Vec<u8> {
    let targets: Vec<(IpAddr, u16)> = slots.iter().map(|e| (e.ip, e.port)).collect();
    let table = kpng_model::maglev::table(&targets, kpng_model::maglev::SLOTS);
    let mut out = vec![0u8; MAGLEV_BYTES];
    for (slot, index) in table.into_iter().enumerate() {
        let index = u16::try_from(index).unwrap_or(u16::MAX);
        out[slot * 2..slot * 2 + 2].copy_from_slice(&index.to_ne_bytes());
    }
    out
}

/// A Maglev table as text: how many slots each index of the set holds.
pub(crate) fn maglev_text(bytes: &[u8]) -> String {
    let mut held: std::collections::BTreeMap<u16, usize> = std::collections::BTreeMap::new();
    for pair in bytes
        .chunks_exact(2)
        .take(kpng_model::maglev::SLOTS as usize)
    {
        *held
            .entry(u16::from_ne_bytes([pair[0], pair[1]]))
            .or_default() += 1;
    }
    let list: Vec<String> = held.iter().map(|(i, n)| format!("{i}:{n}")).collect();
    format!("slots by endpoint index {}", list.join(" "))
}

/// `struct range_key` as [`Tables`](crate::tables::Tables) takes it: the
/// prefix length (the frontend's 160 bits, then the range's), the
/// frontend, the range's address.
pub(crate) fn range_key(frontend: &Frontend, ip: IpAddr, len: u8) -> [u8; 40] {
    let (addr, _) = addr_bytes(ip);
    let mut out = [0u8; 40];
    out[..4].copy_from_slice(&(160 + u32::from(len)).to_ne_bytes());
    out[4..24].copy_from_slice(&frontend.key());
    out[24..].copy_from_slice(&addr);
    out
}

/// The source range of a range key's data (after its prefix length).
pub(crate) fn range_of(len: u32, data: &[u8]) -> (IpAddr, u8) {
    let prefix = u8::try_from(len.saturating_sub(160)).unwrap_or(u8::MAX);
    (addr_of(&data[20..36], data[19]), prefix)
}

/// The range of a CIDR key.
pub(crate) fn cidr_of(len: u32, data: &[u8; 20]) -> (IpAddr, u8) {
    let prefix = u8::try_from(len.saturating_sub(8)).unwrap_or(u8::MAX);
    (addr_of(&data[1..17], data[0]), prefix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_read_back_as_written() {
        for ip in ["10.96.0.10", "fd00::a"] {
            let fe = Frontend {
                ip: ip.parse().expect("ip"),
                port: 443,
                proto: UDP,
            };
            assert_eq!(Frontend::from_key(&fe.key()), fe);
            let ep = Endpoint {
                ip: ip.parse().expect("ip"),
                port: 8443,
                local: true,
            };
            assert_eq!(Endpoint::from_bytes(&ep.bytes()), ep);
            assert_eq!(live_ip(&live_key(fe.ip)), fe.ip);
            let (len, data) = cidr_key(fe.ip, 12);
            assert_eq!(cidr_of(len, &data), (fe.ip, 12));
        }
        let record = Record {
            set: 7,
            affinity: 10800,
            flags: EMPTY_DROP,
        };
        assert_eq!(Record::from_bytes(&record.bytes()), record);
        assert_eq!(slot_of(&slot_key(9, 3)), (9, 3));
        let ep = Endpoint {
            ip: "10.244.0.1".parse().expect("ip"),
            port: 8080,
            local: false,
        };
        let (count, slots) = page_of(&page_bytes(11, &[Some(ep), None]));
        assert_eq!((count, slots[0], slots.len()), (11, ep, PAGE));
    }

    #[test]
    fn addresses_and_ports_are_in_network_order() {
        let fe = Frontend {
            ip: "10.96.0.10".parse().expect("ip"),
            port: 80,
            proto: TCP,
        };
        let key = fe.key();
        assert_eq!(&key[..4], &[10, 96, 0, 10]);
        assert_eq!(&key[4..16], &[0; 12]);
        assert_eq!(&key[16..18], &[0, 80]);
        assert_eq!((key[18], key[19]), (6, 4));
    }
}
