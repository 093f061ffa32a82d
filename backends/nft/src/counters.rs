//! Reading the pick maps' counters ([`NftConfig::counters`]).
//!
//! Each element of `vip-cluster`, `vip-local`, `np-cluster` and
//! `np-local` is one endpoint of one Service port's destination, at the
//! index `numgen` picks it by; its counter counts the lookups that found
//! it. The maps are looked up in the nat hooks, which see a connection's
//! first packet only: one lookup is one new connection (a UDP flow's
//! first packet). ClientIP-affinity Service ports DNAT in chains of
//! their own and are not counted.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Mutex;

use kpng_model::IpFamily;
use kpng_model::v1::Protocol;
use kpng_netfilter::nft::{self, Data, Element};
use kpng_sink::SinkError;
use kpng_sink::traffic::{ConnectionCount, ConnectionCounters, Destination};

use crate::render::{AFFINITY_COUNTS, InNft, Pick};
use crate::{Error, NftConfig};

/// Reads the counters of the tables an [`NftBackend`](crate::NftBackend)
/// of the same [`NftConfig`] programs, from any thread: it has a netlink
/// socket of its own, kept between reads.
///
/// ```no_run
/// use kpng_backend_nft::{CounterReader, NftConfig};
/// use kpng_sink::traffic::ConnectionCounters;
///
/// let reader = CounterReader::new(&NftConfig::default());
/// for row in reader.read()? {
///     println!("{:?} -> {}: {}", row.destination, row.endpoint, row.connections);
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct CounterReader {
    table: String,
    netns: Option<PathBuf>,
    socket: Mutex<Option<nft::Socket>>,
}

impl CounterReader {
    /// A reader of `config`'s tables (its name and network namespace).
    pub fn new(config: &NftConfig) -> Self {
        Self {
            table: config.table.clone(),
            netns: config.netns.clone(),
            socket: Mutex::new(None),
        }
    }

    /// Every element that counted a connection, in both families.
    ///
    /// # Errors
    /// [`Error::Kernel`] when the kernel cannot be read.
    pub fn counts(&self) -> Result<Vec<ConnectionCount>, Error> {
        let mut kept = self.socket.lock().unwrap_or_else(|e| e.into_inner());
        let mut socket = match kept.take() {
            Some(socket) => socket,
            None => nft::Socket::open(self.netns.as_deref())?,
        };
        let mut out = Vec::new();
        for family in IpFamily::BOTH {
            let fam = family;
            let table = nft::Table::new(fam.table_family(), self.table.as_str());
            for pick in Pick::ALL {
                for (element, counter) in socket.read_counters(&table, pick.map())? {
                    if counter.packets == 0 {
                        continue;
                    }
                    if let Some(row) = decode(family, pick, &element, counter.packets) {
                        out.push(row);
                    }
                }
            }
            // Service ports with ClientIP affinity (their own rules).
            for (element, counter) in socket.read_counters(&table, AFFINITY_COUNTS)? {
                if counter.packets > 0
                    && let Some(row) = decode_affinity(family, &element, counter.packets)
                {
                    out.push(row);
                }
            }
        }
        // Kept only after a read that went well.
        *kept = Some(socket);
        Ok(out)
    }
}

impl ConnectionCounters for CounterReader {
    fn read(&self) -> Result<Vec<ConnectionCount>, SinkError> {
        self.counts().map_err(|e| SinkError::backend("nft", e))
    }
}

/// An address of `family` at the start of `bytes`, and what follows.
fn address(family: IpFamily, bytes: &[u8]) -> Option<(IpAddr, &[u8])> {
    Some(match family {
        IpFamily::V4 => {
            let (a, rest) = bytes.split_first_chunk::<4>()?;
            (IpAddr::V4(Ipv4Addr::from(*a)), rest)
        }
        IpFamily::V6 => {
            let (a, rest) = bytes.split_first_chunk::<16>()?;
            (IpAddr::V6(Ipv6Addr::from(*a)), rest)
        }
    })
}

/// A protocol number and a port, each in a register's 4 bytes (as
/// `nft::key` pads them).
fn proto_port(bytes: &[u8]) -> Option<(Protocol, u16)> {
    let protocol = match *bytes.first()? {
        6 => Protocol::Tcp,
        17 => Protocol::Udp,
        132 => Protocol::Sctp,
        _ => return None,
    };
    let port = u16::from_be_bytes([*bytes.get(4)?, *bytes.get(5)?]);
    Some((protocol, port))
}

/// One pick-map element as a row: its key (destination, protocol, port,
/// index) and its target (endpoint address and port).
fn decode(family: IpFamily, pick: Pick, e: &Element, connections: u64) -> Option<ConnectionCount> {
    let (protocol, destination) = match pick {
        Pick::Vip { .. } => {
            let (ip, rest) = address(family, &e.key)?;
            let (protocol, port) = proto_port(rest)?;
            (protocol, Destination::Address(SocketAddr::new(ip, port)))
        }
        Pick::NodePort { .. } => {
            let (protocol, port) = proto_port(&e.key)?;
            (protocol, Destination::NodePort(port))
        }
    };
    let Some(Data::Value(target)) = &e.data else {
        return None;
    };
    let (ip, rest) = address(family, target)?;
    let port = u16::from_be_bytes([*rest.first()?, *rest.get(1)?]);
    Some(ConnectionCount {
        protocol,
        destination,
        endpoint: SocketAddr::new(ip, port),
        connections,
    })
}

/// One [`AFFINITY_COUNTS`] element as a row: its key holds the Service
/// port's ClusterIP, protocol and port, then the endpoint and its port.
fn decode_affinity(family: IpFamily, e: &Element, connections: u64) -> Option<ConnectionCount> {
    let (ip, rest) = address(family, &e.key)?;
    let (protocol, port) = proto_port(rest)?;
    let (endpoint, rest) = address(family, rest.get(8..)?)?;
    let endpoint_port = u16::from_be_bytes([*rest.first()?, *rest.get(1)?]);
    Some(ConnectionCount {
        protocol,
        destination: Destination::Address(SocketAddr::new(ip, port)),
        endpoint: SocketAddr::new(endpoint, endpoint_port),
        connections,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pick_map_elements_decode_as_rendered() {
        let key = nft::key(&[
            &[10, 96, 0, 10],
            &[6],
            &80u16.to_be_bytes(),
            &2u32.to_ne_bytes(),
        ]);
        let target = nft::key(&[&[10, 244, 1, 5], &8080u16.to_be_bytes()]);
        let mut e = Element::key(key);
        e.data = Some(Data::Value(target));
        let row = decode(IpFamily::V4, Pick::Vip { local: false }, &e, 7).expect("decoded");
        assert_eq!(row.protocol, Protocol::Tcp);
        assert_eq!(
            row.destination,
            Destination::Address("10.96.0.10:80".parse().unwrap())
        );
        assert_eq!(row.endpoint, "10.244.1.5:8080".parse().unwrap());
        assert_eq!(row.connections, 7);

        let key = nft::key(&[&[17], &30080u16.to_be_bytes(), &0u32.to_ne_bytes()]);
        let v6: Ipv6Addr = "fd00:244::5".parse().unwrap();
        let target = nft::key(&[&v6.octets(), &53u16.to_be_bytes()]);
        let mut e = Element::key(key);
        e.data = Some(Data::Value(target));
        let row = decode(IpFamily::V6, Pick::NodePort { local: true }, &e, 1).expect("decoded");
        assert_eq!(row.protocol, Protocol::Udp);
        assert_eq!(row.destination, Destination::NodePort(30080));
        assert_eq!(row.endpoint, "[fd00:244::5]:53".parse().unwrap());
    }
}
