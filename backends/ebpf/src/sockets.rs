//! Ending connected UDP sockets whose endpoint left their Service
//! (issue #28), as kube-proxy clears the conntrack entries of a removed
//! UDP endpoint and Cilium ends such sockets.
//!
//! A UDP socket that `connect()`ed to a Service address was sent, once,
//! to one endpoint (`connect4/6` rewrote its destination): without this,
//! it keeps sending there after the endpoint left. After a round that
//! takes endpoints from UDP Service ports, the backend writes the
//! (Service address, endpoint) pairs into the iterator object's
//! `kpng_gone` map and runs its `iter/udp` program (`bpf/kpng_udp.c`) in
//! each network namespace of a process of its cgroup (pods have their
//! own). The program ends, with the kfunc `bpf_sock_destroy` (Linux
//! 6.5), each connected socket whose peer is such an endpoint and that
//! the socket programs sent there from that Service address (its entry in
//! `kpng_reverse`, keyed by the socket's cookie): the owner's next
//! receive (or send) fails with ECONNABORTED, and its next connect is
//! balanced anew. A socket connected to the endpoint's own address, and
//! any TCP socket, is left alone.
//!
//! An iterator walks the sockets of the network namespace of the thread
//! that creates it: a thread of its own enters each namespace (setns)
//! and makes one there. Where the kernel or the object cannot do it (no
//! `bpf_sock_destroy` in the kernel's BTF, the verifier refuses the
//! program), the backend logs one warning and goes on without it.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use aya::maps::{Array, HashMap, MapData};
use aya::programs::Iter;

use crate::object::UDP_OBJECT;

/// A (Service address, endpoint) pair a round took away: `struct
/// gone_key`, each half a `struct endpoint` (flags 0).
pub(crate) type GonePair = [u8; 40];

/// Per UDP Service address and port (a `struct endpoint`), the endpoints
/// a socket connected to it may be sent to now.
pub(crate) type Live = std::collections::HashMap<[u8; 20], std::collections::HashSet<[u8; 20]>>;

/// `struct reverse_key`: the socket's cookie, its peer (the endpoint),
/// padding.
type ReverseKey = [u8; 32];

/// The placeholder the C source gives the kfunc call's BTF id.
const KFUNC_PLACEHOLDER: [u8; 8] = [0x85, 0x20, 0x00, 0x00, 0x68, 0x70, 0x53, 0x44];

/// The kfunc the iterator calls.
const KFUNC: &str = "bpf_sock_destroy";

/// `kpng_gone`'s size in the object: a round's pairs are written (and
/// the namespaces walked) this many at a time.
const GONE_ENTRIES: usize = 1 << 12;

/// The iterator program.
const PROGRAM: &str = "kpng_udp_end";

/// The loaded iterator: its program's link, and its maps.
pub(crate) struct SocketEnder {
    // Held for the program: the link and maps reference it.
    _ebpf: aya::Ebpf,
    link: OwnedFd,
    gone: HashMap<MapData, GonePair, u8>,
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
    /// Sockets ended.
    pub(crate) sockets: u64,
    /// Sockets the kfunc failed to end.
    pub(crate) failed: u64,
    /// Network namespaces walked.
    pub(crate) namespaces: usize,
}

/// The object with the kfunc call's placeholder replaced by `id` (8-byte
/// aligned, as the ELF parser reads it): an error unless the placeholder
/// is there exactly once.
fn patched(id: u32) -> Result<Vec<u64>, String> {
    let at: Vec<usize> = UDP_OBJECT
        .windows(KFUNC_PLACEHOLDER.len())
        .enumerate()
        .filter(|(_, w)| *w == KFUNC_PLACEHOLDER)
        .map(|(i, _)| i)
        .collect();
    let [at] = at.as_slice() else {
        return Err(format!(
            "the object holds the kfunc placeholder {} times, not once",
            at.len()
        ));
    };
    let mut words = vec![0u64; UDP_OBJECT.len().div_ceil(8)];
    let bytes = bytes_mut(&mut words);
    bytes[..UDP_OBJECT.len()].copy_from_slice(UDP_OBJECT);
    bytes[at + 4..at + 8].copy_from_slice(&id.to_le_bytes());
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
            .load(&object[..UDP_OBJECT.len()])
            .map_err(|e| format!("loading {}: {e}", crate::object::UDP_OBJECT_FILE))?;
        let program: &mut Iter = ebpf
            .program_mut(PROGRAM)
            .ok_or_else(|| format!("no program {PROGRAM}"))?
            .try_into()
            .map_err(|e| format!("{PROGRAM}: {e}"))?;
        program
            .load("udp", &btf)
            .map_err(|e| format!("{PROGRAM} (iter/udp calling {KFUNC}): {e}"))?;
        let fd = program.fd().map_err(|e| format!("{PROGRAM}: {e}"))?;
        let link = crate::sys::iter_link(fd.as_fd())
            .map_err(|e| format!("{PROGRAM}: its iterator link: {e}"))?;
        let gone_map = ebpf.take_map("kpng_gone").ok_or("no map kpng_gone")?;
        let gone = HashMap::try_from(gone_map).map_err(|e| format!("kpng_gone: {e}"))?;
        let ended_map = ebpf.take_map("kpng_ended").ok_or("no map kpng_ended")?;
        let ended = Array::try_from(ended_map).map_err(|e| format!("kpng_ended: {e}"))?;
        let reverse_map = ebpf.take_map("kpng_reverse").ok_or("no map kpng_reverse")?;
        let reverse = HashMap::try_from(reverse_map).map_err(|e| format!("kpng_reverse: {e}"))?;
        let capacity = GONE_ENTRIES;
        Ok(Self {
            _ebpf: ebpf,
            link,
            gone,
            ended,
            reverse,
            capacity,
        })
    }

    /// The pairs of the connection map that `live` no longer allows: a
    /// socket sent from a Service address to an endpoint that is not
    /// (or no longer) one of that address's (what left while no kpng
    /// ran, read after a restart). TCP sockets' entries give pairs too;
    /// they end no UDP socket unless one was sent the same way.
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

    fn counted(&self) -> (u64, u64) {
        let get = |i| self.ended.get(&i, 0).unwrap_or(0);
        (get(0), get(1))
    }

    /// Ends the connected UDP sockets of the network namespaces of
    /// `cgroup`'s processes (and its descendants') that a Service sent to
    /// an endpoint of `pairs`.
    pub(crate) fn end(&mut self, pairs: &BTreeSet<GonePair>, cgroup: &Path) -> Ended {
        let (sockets, failed) = self.counted();
        let namespaces = namespaces_of(cgroup);
        let pairs: Vec<&GonePair> = pairs.iter().collect();
        for chunk in pairs.chunks(self.capacity.max(1)) {
            for pair in chunk {
                if let Err(error) = self.gone.insert(**pair, 1, 0) {
                    tracing::warn!(%error, "kpng_gone: cannot write a removed endpoint");
                }
            }
            let link = self.link.as_fd();
            let walked = std::thread::scope(|s| {
                s.spawn(|| walk(link, &namespaces))
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
            for pair in chunk {
                let _ = self.gone.remove(pair);
            }
        }
        let (sockets_now, failed_now) = self.counted();
        let ended = Ended {
            sockets: sockets_now.saturating_sub(sockets),
            failed: failed_now.saturating_sub(failed),
            namespaces: namespaces.len(),
        };
        if ended.failed > 0 {
            tracing::warn!(
                failed = ended.failed,
                "{KFUNC} failed for some connected UDP sockets"
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

/// Runs the iterator of `link` in each of `namespaces`, from the calling
/// thread (which it moves: call it on a thread of its own). Returns how
/// many it walked.
fn walk(link: std::os::fd::BorrowedFd<'_>, namespaces: &[File]) -> usize {
    let mut walked = 0;
    let mut sink = Vec::new();
    for ns in namespaces {
        let run = crate::sys::enter_netns(ns.as_fd())
            .and_then(|()| crate::sys::iter_create(link))
            .and_then(|fd| {
                sink.clear();
                File::from(fd).read_to_end(&mut sink)
            });
        match run {
            Ok(_) => walked += 1,
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
    fn the_object_holds_the_kfunc_placeholder_once_and_it_is_replaced() {
        let words = patched(0x1234_5678).expect("patched");
        let len = std::mem::size_of_val(words.as_slice());
        let mut copy = words.clone();
        let bytes = &bytes_mut(&mut copy)[..len];
        assert!(
            bytes
                .windows(8)
                .any(|w| w == [0x85, 0x20, 0, 0, 0x78, 0x56, 0x34, 0x12])
        );
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
