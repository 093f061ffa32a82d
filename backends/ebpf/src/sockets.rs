//! Ending sockets whose endpoint left their Service: connected UDP
//! sockets (issue #28), as kube-proxy clears the conntrack entries of a
//! removed UDP endpoint and Cilium ends such sockets; and, opt-in, TCP
//! connections (issue #38, [`crate::EbpfConfig::end_tcp_connections`]).
//!
//! A UDP socket that `connect()`ed to a Service address was sent, once,
//! to one endpoint (`connect4/6` rewrote its destination): without this,
//! it keeps sending there after the endpoint left. A TCP connection made
//! through a Service is one to the endpoint's own address: it lives on
//! after the endpoint left until one side ends it (or its packets find
//! no one). After a round that takes endpoints away, the backend writes
//! the (Service address, endpoint) pairs into the iterator object's
//! `kpng_gone` (UDP) and `kpng_gone_tcp` (TCP) maps and runs its
//! `iter/udp` and `iter/tcp` programs (`bpf/kpng_end.c`) in each network
//! namespace of a process of its cgroup (pods have their own). Each
//! program ends, with the kfunc `bpf_sock_destroy` (Linux 6.5), each
//! socket whose peer is such an endpoint and that the socket programs
//! sent there from that Service address (its entry in `kpng_reverse`,
//! keyed by the socket's cookie): a UDP socket's owner's next receive
//! (or send) fails with ECONNABORTED, and its next connect is balanced
//! anew; a TCP socket is aborted (`tcp_abort`: the peer gets a reset, the
//! owner's blocked or next call fails with ECONNABORTED). A socket
//! connected to the endpoint's own address is left alone.
//!
//! The pairs differ by protocol: UDP's are the endpoints a round takes
//! from a Service's endpoint sets (an endpoint that drains is no longer
//! sent datagrams), TCP's those that left the node's view altogether (an
//! endpoint that drains keeps its connections): `State::tcp_departed`.
//!
//! An iterator walks the sockets of the network namespace of the thread
//! that creates it: a thread of its own enters each namespace (setns)
//! and makes one there. Where the kernel or the object cannot do it (no
//! `bpf_sock_destroy` in the kernel's BTF, the verifier refuses a
//! program), the backend logs one warning and goes on without it.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use aya::maps::{Array, HashMap, MapData};
use aya::programs::Iter;

use crate::object::END_OBJECT;

/// A (Service address, endpoint) pair a round took away: `struct
/// gone_key`, each half a `struct endpoint` (flags 0).
pub(crate) type GonePair = [u8; 40];

/// Per Service address and port of one protocol (a `struct endpoint`),
/// the endpoints a socket connected to it may be connected to now.
pub(crate) type Live = std::collections::HashMap<[u8; 20], std::collections::HashSet<[u8; 20]>>;

/// `struct reverse_key`: the socket's cookie, its peer (the endpoint),
/// padding.
type ReverseKey = [u8; 32];

/// The placeholder the C source gives the kfunc call's BTF id.
const KFUNC_PLACEHOLDER: [u8; 8] = [0x85, 0x20, 0x00, 0x00, 0x68, 0x70, 0x53, 0x44];

/// The kfunc the iterator calls.
const KFUNC: &str = "bpf_sock_destroy";

/// The calls of the kfunc in the object: one in each program.
const KFUNC_CALLS: usize = 2;

/// `kpng_gone`'s (and `kpng_gone_tcp`'s) size in the object: a round's
/// pairs are written (and the namespaces walked) this many at a time.
const GONE_ENTRIES: usize = 1 << 12;

/// The iterator programs, and the kind of iterator each is.
const PROGRAMS: [(&str, &str); 2] = [("kpng_udp_end", "udp"), ("kpng_tcp_end", "tcp")];

/// The maps of pairs, in the order of [`PROGRAMS`].
const GONE_MAPS: [&str; 2] = ["kpng_gone", "kpng_gone_tcp"];

/// A protocol whose sockets the object ends: an index into [`PROGRAMS`]
/// and [`GONE_MAPS`]; its two counters in `kpng_ended` (sockets ended,
/// sockets the kfunc failed to end) are at twice the index and the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Proto {
    Udp = 0,
    Tcp = 1,
}

/// The loaded iterators: each program's link, and the maps.
pub(crate) struct SocketEnder {
    // Held for the programs: the links and maps reference them.
    _ebpf: aya::Ebpf,
    links: [OwnedFd; 2],
    gone: [HashMap<MapData, GonePair, u8>; 2],
    ended: Array<MapData, u64>,
    /// The socket programs' connection map: (socket, endpoint) -> the
    /// Service address it asked for.
    reverse: HashMap<MapData, ReverseKey, [u8; 20]>,
    capacity: usize,
}

impl std::fmt::Debug for SocketEnder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SocketEnder").finish_non_exhaustive()
    }
}

/// What one run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Ended {
    /// UDP sockets ended.
    pub(crate) udp: u64,
    /// TCP sockets ended.
    pub(crate) tcp: u64,
    /// Sockets the kfunc failed to end.
    pub(crate) failed: u64,
    /// Network namespaces walked.
    pub(crate) namespaces: usize,
}

/// The object with the kfunc calls' placeholder replaced by `id` (8-byte
/// aligned, as the ELF parser reads it): an error unless the placeholder
/// is there once for each program.
fn patched(id: u32) -> Result<Vec<u64>, String> {
    let at: Vec<usize> = END_OBJECT
        .windows(KFUNC_PLACEHOLDER.len())
        .enumerate()
        .filter(|(_, w)| *w == KFUNC_PLACEHOLDER)
        .map(|(i, _)| i)
        .collect();
    if at.len() != KFUNC_CALLS {
        return Err(format!(
            "the object holds the kfunc placeholder {} times, not {KFUNC_CALLS}",
            at.len()
        ));
    }
    let mut words = vec![0u64; END_OBJECT.len().div_ceil(8)];
    let bytes = bytes_mut(&mut words);
    bytes[..END_OBJECT.len()].copy_from_slice(END_OBJECT);
    for at in at {
        bytes[at + 4..at + 8].copy_from_slice(&id.to_le_bytes());
    }
    Ok(words)
}

fn bytes_mut(words: &mut [u64]) -> &mut [u8] {
    let len = std::mem::size_of_val(words);
    // SAFETY: u64s are 8 initialized bytes each, any byte pattern is a
    // valid u64, and the slice borrows `words` mutably for its lifetime.
    #[allow(unsafe_code)]
    unsafe {
        std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), len)
    }
}

impl SocketEnder {
    /// Loads the iterator, its `kpng_reverse` the map pinned at
    /// `reverse_pin` (the socket programs'). An error names what is
    /// missing.
    pub(crate) fn load(reverse_pin: &Path) -> Result<Self, String> {
        if !reverse_pin.exists() {
            return Err(format!("no map pinned at {}", reverse_pin.display()));
        }
        let btf = aya::Btf::from_sys_fs().map_err(|e| format!("the kernel's BTF: {e}"))?;
        let id = btf
            .id_by_type_name_kind(KFUNC, aya_obj::btf::BtfKind::Func)
            .map_err(|e| format!("the kfunc {KFUNC} (Linux 6.5): {e}"))?;
        let mut words = patched(id)?;
        let object = bytes_mut(&mut words);
        let mut ebpf = aya::EbpfLoader::new()
            .btf(Some(&btf))
            .map_pin_path("kpng_reverse", reverse_pin)
            .load(&object[..END_OBJECT.len()])
            .map_err(|e| format!("loading {}: {e}", crate::object::END_OBJECT_FILE))?;
        let mut links = Vec::new();
        for (name, kind) in PROGRAMS {
            let program: &mut Iter = ebpf
                .program_mut(name)
                .ok_or_else(|| format!("no program {name}"))?
                .try_into()
                .map_err(|e| format!("{name}: {e}"))?;
            crate::datapath::verified(|| program.load(kind, &btf))
                .map_err(|e| format!("{name} (iter/{kind} calling {KFUNC}): {e}"))?;
            let fd = program.fd().map_err(|e| format!("{name}: {e}"))?;
            links.push(
                crate::sys::iter_link(fd.as_fd())
                    .map_err(|e| format!("{name}: its iterator link: {e}"))?,
            );
        }
        let links: [OwnedFd; 2] = links
            .try_into()
            .map_err(|_| "not one link per program".to_string())?;
        let mut gone = Vec::new();
        for name in GONE_MAPS {
            let map = ebpf
                .take_map(name)
                .ok_or_else(|| format!("no map {name}"))?;
            gone.push(HashMap::try_from(map).map_err(|e| format!("{name}: {e}"))?);
        }
        let gone: [HashMap<MapData, GonePair, u8>; 2] = gone
            .try_into()
            .map_err(|_| "not one map of pairs per program".to_string())?;
        let ended_map = ebpf.take_map("kpng_ended").ok_or("no map kpng_ended")?;
        let ended = Array::try_from(ended_map).map_err(|e| format!("kpng_ended: {e}"))?;
        let reverse_map = ebpf.take_map("kpng_reverse").ok_or("no map kpng_reverse")?;
        let reverse = HashMap::try_from(reverse_map).map_err(|e| format!("kpng_reverse: {e}"))?;
        let capacity = GONE_ENTRIES;
        Ok(Self {
            _ebpf: ebpf,
            links,
            gone,
            ended,
            reverse,
            capacity,
        })
    }

    /// The pairs of the connection map that `live` no longer allows: a
    /// socket sent from a Service address to an endpoint that is not
    /// (or no longer) one of that address's (what left while no kpng
    /// ran, read after a restart). The map does not say a socket's
    /// protocol: the other protocol's sockets give pairs too, which end
    /// no socket of this one unless one was sent the same way.
    pub(crate) fn stale(&self, live: &Live) -> BTreeSet<GonePair> {
        let mut out = BTreeSet::new();
        for entry in self.reverse.iter() {
            let Ok((key, service)) = entry else {
                continue; // removed meanwhile
            };
            let mut endpoint = [0u8; 20];
            endpoint.copy_from_slice(&key[8..28]);
            if live
                .get(&service)
                .is_some_and(|eps| eps.contains(&endpoint))
            {
                continue;
            }
            out.insert(pair(service, endpoint));
        }
        out
    }

    /// Each protocol's counters: (ended, failed).
    fn counted(&self) -> [(u64, u64); 2] {
        let get = |i| self.ended.get(&i, 0).unwrap_or(0);
        [Proto::Udp, Proto::Tcp].map(|p| {
            let first = 2 * p as u32;
            (get(first), get(first + 1))
        })
    }

    /// Ends the sockets of the network namespaces of `cgroup`'s processes
    /// (and its descendants') that a Service sent to an endpoint of
    /// `pairs`: `pairs[Proto::Udp]`'s connected UDP sockets,
    /// `pairs[Proto::Tcp]`'s TCP ones. An iterator runs only for a
    /// protocol with pairs.
    pub(crate) fn end(&mut self, pairs: [&BTreeSet<GonePair>; 2], cgroup: &Path) -> Ended {
        let before = self.counted();
        let namespaces = namespaces_of(cgroup);
        let lists: [Vec<&GonePair>; 2] = pairs.map(|p| p.iter().collect());
        let chunk = self.capacity.max(1);
        let runs = lists
            .iter()
            .map(|l| l.len().div_ceil(chunk))
            .max()
            .unwrap_or(0);
        for run in 0..runs {
            let part = |l: &Vec<&GonePair>| -> Vec<GonePair> {
                l.iter()
                    .skip(run * chunk)
                    .take(chunk)
                    .map(|p| **p)
                    .collect()
            };
            let parts: [Vec<GonePair>; 2] = [part(&lists[0]), part(&lists[1])];
            for (gone, part) in self.gone.iter_mut().zip(&parts) {
                for pair in part {
                    if let Err(error) = gone.insert(*pair, 1, 0) {
                        tracing::warn!(%error, "cannot write a removed endpoint");
                    }
                }
            }
            let links: Vec<std::os::fd::BorrowedFd<'_>> = self
                .links
                .iter()
                .zip(&parts)
                .filter(|(_, part)| !part.is_empty())
                .map(|(link, _)| link.as_fd())
                .collect();
            let walked = std::thread::scope(|s| {
                s.spawn(|| walk(&links, &namespaces))
                    .join()
                    .unwrap_or_default()
            });
            if walked < namespaces.len() {
                tracing::debug!(
                    walked,
                    namespaces = namespaces.len(),
                    "some network namespaces were not walked"
                );
            }
            for (gone, part) in self.gone.iter_mut().zip(&parts) {
                for pair in part {
                    let _ = gone.remove(pair);
                }
            }
        }
        let now = self.counted();
        let delta = |p: Proto| {
            let (i, b) = (now[p as usize], before[p as usize]);
            (i.0.saturating_sub(b.0), i.1.saturating_sub(b.1))
        };
        let (udp, udp_failed) = delta(Proto::Udp);
        let (tcp, tcp_failed) = delta(Proto::Tcp);
        let ended = Ended {
            udp,
            tcp,
            failed: udp_failed + tcp_failed,
            namespaces: namespaces.len(),
        };
        if ended.failed > 0 {
            tracing::warn!(
                udp_failed,
                tcp_failed,
                "{KFUNC} failed for some sockets to removed endpoints"
            );
        }
        ended
    }
}

/// Whether the connection map pinned at `pin` holds any socket (false
/// when it cannot be opened).
pub(crate) fn remembers_any(pin: &Path) -> bool {
    let Ok(map) = MapData::from_pin(pin) else {
        return false;
    };
    let Ok(reverse) = HashMap::<_, ReverseKey, [u8; 20]>::try_from(aya::maps::Map::LruHashMap(map))
    else {
        return false;
    };
    reverse.keys().next().is_some()
}

/// Runs the iterators of `links` in each of `namespaces`, from the
/// calling thread (which it moves: call it on a thread of its own).
/// Returns how many namespaces it walked.
fn walk(links: &[std::os::fd::BorrowedFd<'_>], namespaces: &[File]) -> usize {
    let mut walked = 0;
    let mut sink = Vec::new();
    for ns in namespaces {
        let run = crate::sys::enter_netns(ns.as_fd()).and_then(|()| {
            for link in links {
                let fd = crate::sys::iter_create(*link)?;
                sink.clear();
                File::from(fd).read_to_end(&mut sink)?;
            }
            Ok(())
        });
        match run {
            Ok(()) => walked += 1,
            Err(error) => tracing::debug!(%error, "a network namespace not walked"),
        }
    }
    walked
}

/// The network namespaces of the processes of `cgroup` and its
/// descendants, each once (processes that end meanwhile are skipped).
fn namespaces_of(cgroup: &Path) -> Vec<File> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    let mut dirs: Vec<PathBuf> = vec![cgroup.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(entry.path());
            }
        }
        let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) else {
            continue;
        };
        // (0: a process outside this process's PID namespace.)
        for pid in procs.split_whitespace().filter(|pid| *pid != "0") {
            let path = format!("/proc/{pid}/ns/net");
            // One stat a process; an open for each new namespace only.
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            if !seen.insert((meta.dev(), meta.ino())) {
                continue;
            }
            // The same namespace, unless the process changed it meanwhile
            // (then its new one is walked, and the old one's sockets
            // wait for the next round).
            if let Ok(file) = File::open(&path) {
                out.push(file);
            }
        }
    }
    out
}

/// `struct endpoint` of an address and port (flags 0), as the programs
/// key sockets by their peer.
pub(crate) fn endpoint_bytes(ip: std::net::IpAddr, port: u16) -> [u8; 20] {
    crate::layout::Endpoint {
        ip,
        port,
        local: false,
    }
    .bytes()
}

/// A pair's key.
pub(crate) fn pair(service: [u8; 20], endpoint: [u8; 20]) -> GonePair {
    let mut out = [0u8; 40];
    out[..20].copy_from_slice(&service);
    out[20..].copy_from_slice(&endpoint);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_object_holds_the_kfunc_placeholder_once_a_program_and_each_is_replaced() {
        let words = patched(0x1234_5678).expect("patched");
        let len = std::mem::size_of_val(words.as_slice());
        let mut copy = words.clone();
        let bytes = &bytes_mut(&mut copy)[..len];
        let calls = bytes
            .windows(8)
            .filter(|w| *w == [0x85, 0x20, 0, 0, 0x78, 0x56, 0x34, 0x12])
            .count();
        assert_eq!(calls, KFUNC_CALLS);
        assert!(!bytes.windows(8).any(|w| w == KFUNC_PLACEHOLDER));
    }

    /// Without the socket programs' map there is nothing to load: the
    /// error names the pin (the backend then warns once and goes on).
    #[test]
    fn loading_without_the_reverse_map_names_it() {
        let pin = std::env::temp_dir().join(format!("kpng-no-such-map-{}", std::process::id()));
        let error = SocketEnder::load(&pin).expect_err("no map");
        assert!(error.contains(&pin.display().to_string()), "{error}");
    }

    #[test]
    fn a_pair_is_the_service_address_then_the_endpoint() {
        let service = endpoint_bytes("10.96.0.10".parse().expect("ip"), 53);
        let ep = endpoint_bytes("10.244.1.10".parse().expect("ip"), 5353);
        let p = pair(service, ep);
        assert_eq!(&p[..4], &[10, 96, 0, 10]);
        assert_eq!(&p[16..19], &[0, 53, 4]);
        assert_eq!(&p[20..24], &[10, 244, 1, 10]);
        assert_eq!(&p[36..39], &[0x14, 0xe9, 4]);
    }
}
