//! Reading `kpng_traffic`: new connections per frontend and endpoint,
//! counted by the socket programs (`connect4/6`, and `sendmsg4/6` at a
//! datagram flow's first datagram) and the tc ingress program (at a
//! flow's first packet), when [`EbpfConfig::counters`] is on.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Mutex;

use aya::maps::{Map, MapData, PerCpuHashMap};
use kpng_model::v1::Protocol;
use kpng_sink::SinkError;
use kpng_sink::traffic::{ConnectionCount, ConnectionCounters, Destination};

use crate::datapath::{Tc, generation_of, version_dir};
use crate::layout::{Endpoint, Frontend};
use crate::{EbpfConfig, Error};

/// The map's name.
const MAP: &str = "kpng_traffic";

/// Reads the connection counters of the eBPF backend of the same
/// [`EbpfConfig`] (its pinned `kpng_traffic` map), from any thread.
/// Before the backend's first load it reads nothing.
///
/// A frontend is what the program saw: a Service address and port, or
/// (tc programs) a node address and node port, which
/// [`ServicePorts`](kpng_sink::traffic::ServicePorts) finds by its port.
///
/// ```no_run
/// use kpng_backend_ebpf::{EbpfConfig, TrafficReader};
///
/// let reader = TrafficReader::new(&EbpfConfig::default());
/// for row in reader.counts()? {
///     println!("{:?} -> {}: {}", row.destination, row.endpoint, row.connections);
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct TrafficReader {
    version: PathBuf,
    map: Mutex<Option<PerCpuHashMap<MapData, [u8; 40], u64>>>,
}

impl std::fmt::Debug for TrafficReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrafficReader")
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl TrafficReader {
    /// A reader of the maps `config`'s backend pins.
    pub fn new(config: &EbpfConfig) -> Self {
        let tc = Tc {
            interfaces: config.tc_interfaces.clone(),
            netns: config.tc_netns.clone(),
            xdp: config.xdp,
        };
        Self {
            version: version_dir(&config.pin_path, &tc, &config.map_sizes, config.counters),
            map: Mutex::new(None),
        }
    }

    /// The pinned map, of any generation (each holds the same map: it
    /// carries over when the cluster's maps grow).
    fn open(&self) -> Result<Option<PerCpuHashMap<MapData, [u8; 40], u64>>, Error> {
        let Ok(entries) = std::fs::read_dir(&self.version) else {
            return Ok(None);
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let pin = entry.path().join(MAP);
            if generation_of(&name).is_none() || !pin.exists() {
                continue;
            }
            let data = MapData::from_pin(&pin).map_err(|source| Error::Map { map: MAP, source })?;
            let map = PerCpuHashMap::try_from(
                Map::from_map_data(data).map_err(|source| Error::Map { map: MAP, source })?,
            )
            .map_err(|source| Error::Map { map: MAP, source })?;
            return Ok(Some(map));
        }
        Ok(None)
    }

    /// Every counter, summed over CPUs (at most 65,536 rows: the map is
    /// an LRU of that size).
    ///
    /// # Errors
    /// [`Error::Map`] when the pinned map cannot be opened or read.
    pub fn counts(&self) -> Result<Vec<ConnectionCount>, Error> {
        let mut held = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if held.is_none() {
            *held = self.open()?;
        }
        let Some(map) = held.as_ref() else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for item in map.iter() {
            // An entry the LRU evicted between two reads: skipped.
            let Ok((key, values)) = item else {
                continue;
            };
            let connections: u64 = values.iter().sum();
            if let Some(row) = decode(&key, connections) {
                out.push(row);
            }
        }
        Ok(out)
    }
}

impl ConnectionCounters for TrafficReader {
    fn read(&self) -> Result<Vec<ConnectionCount>, SinkError> {
        self.counts().map_err(|e| SinkError::backend("ebpf", e))
    }
}

/// A `struct traffic_key` (frontend, endpoint) and its count as a row.
fn decode(key: &[u8; 40], connections: u64) -> Option<ConnectionCount> {
    let (fe, ep) = key.split_at(20);
    let fe = Frontend::from_key(fe.try_into().ok()?);
    let ep = Endpoint::from_bytes(ep);
    let protocol = match fe.proto {
        6 => Protocol::Tcp,
        17 => Protocol::Udp,
        132 => Protocol::Sctp,
        _ => return None,
    };
    Some(ConnectionCount {
        protocol,
        destination: Destination::Address(SocketAddr::new(fe.ip, fe.port)),
        endpoint: SocketAddr::new(ep.ip, ep.port),
        connections,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_decode_as_the_programs_write_them() {
        let fe = Frontend {
            ip: "10.96.0.10".parse().unwrap(),
            port: 80,
            proto: 6,
        };
        let ep = Endpoint {
            ip: "10.244.1.5".parse().unwrap(),
            port: 8080,
            local: false,
        };
        let mut key = [0u8; 40];
        key[..20].copy_from_slice(&fe.key());
        key[20..].copy_from_slice(&ep.bytes());
        let row = decode(&key, 4).expect("a row");
        assert_eq!(row.protocol, Protocol::Tcp);
        assert_eq!(
            row.destination,
            Destination::Address("10.96.0.10:80".parse().unwrap())
        );
        assert_eq!(row.endpoint, "10.244.1.5:8080".parse().unwrap());
        assert_eq!(row.connections, 4);
    }
}
