//! Loading the object, pinning its maps and links under a bpffs
//! directory, attaching the programs to a cgroup, and adopting what a
//! previous run left.
//!
//! Under the pin directory (`/sys/fs/bpf/kpng` by default):
//!
//! ```text
//! v-<object digest>/maps/kpng_services, kpng_slots, ...
//! v-<object digest>/maps-N/...        (the maps after N planned swaps)
//! v-<object digest>/links-<cgroup inode>/kpng_connect4, ...
//! ```
//!
//! The maps that hold the cluster are sized from it (see
//! [`sizes`](crate::sizes)): when a round needs more, a planned swap
//! loads the object anew with bigger maps in `next/`, fills them, switches
//! every link to the new programs (`BPF_LINK_UPDATE`) and renames `next`
//! to the next generation. The connections' maps (affinity, flows) are
//! the same maps in every generation: nothing a connection keeps is lost.
//! A restart opens the newest generation and, after its first sync,
//! switches the pinned links to its own programs (so that a swap cut
//! short by a crash is made whole).
//!
//! A pinned link keeps its program attached after the process exits: the
//! data path outlives kpng. A restart with the same object opens the same
//! maps (their contents intact) and finds its links pinned, so it attaches
//! nothing; a new object gets a directory of its own, attaches beside the
//! old one, and then removes the old pins (detaching the old programs).

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use aya::EbpfLoader;
use aya::maps::lpm_trie::LpmTrie;
use aya::maps::{HashMap, MapData, PerCpuArray};
use aya::programs::links::{FdLink, PinnedLink};
use aya::programs::{CgroupAttachMode, CgroupSockAddr};

use std::collections::BTreeMap;

use crate::Error;
use crate::object::{OBJECT, PROGRAMS, digest};
use crate::sizes::{CLUSTER_MAPS, CONNECTION_MAPS, Capacity, MapSizes};
use crate::tables::Kernel;

/// The maps only the tc programs use.
const TC_MAPS: [&str; 8] = [
    "kpng_external",
    "kpng_ranges",
    "kpng_maglev",
    "kpng_ext_flows",
    "kpng_ext_replies",
    "kpng_snat",
    "kpng_snat_out",
    "kpng_ext_affinity",
];

/// The default pin directory.
pub const DEFAULT_PIN_PATH: &str = "/sys/fs/bpf/kpng";

/// The file system type of bpffs in `/proc/self/mountinfo`.
const BPF_FS: &str = "bpf";

/// The mount point and file system type of the mount holding `path`
/// (from `/proc/self/mountinfo`).
fn mount_of(path: &Path) -> Option<(PathBuf, String)> {
    mounts()
        .into_iter()
        .filter(|(point, _)| path.starts_with(point))
        .max_by_key(|(point, _)| point.as_os_str().len())
}

/// Every mount point of this process and its file system type, in the
/// order of `/proc/self/mountinfo`.
fn mounts() -> Vec<(PathBuf, String)> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    info.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let point = PathBuf::from(left.split(' ').nth(4)?.replace("\\040", " "));
            Some((point, right.split(' ').next()?.to_string()))
        })
        .collect()
}

/// The cgroup v2 root: where `to-ebpf` attaches by default.
pub fn cgroup2_root() -> Option<PathBuf> {
    mounts()
        .into_iter()
        .find_map(|(point, fstype)| (fstype == "cgroup2").then_some(point))
}

/// Fails unless `dir` (or, when it does not exist yet, its parent) is on
/// a bpf file system.
fn check_bpffs(dir: &Path) -> Result<(), Error> {
    let probe = if dir.exists() {
        dir.to_path_buf()
    } else {
        dir.parent().unwrap_or(dir).to_path_buf()
    };
    let probe = probe.canonicalize().unwrap_or(probe);
    match mount_of(&probe) {
        Some((_, fstype)) if fstype == BPF_FS => Ok(()),
        _ => Err(Error::NotBpffs {
            path: dir.to_path_buf(),
        }),
    }
}

fn pin_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Pin {
        path: path.to_path_buf(),
        source,
    }
}

/// Whether `pin` holds a link already: an attachment a previous run left.
fn pinned(pin: &Path) -> bool {
    pin.exists() && PinnedLink::from_pin(pin).is_ok()
}

/// Pins `link` at `pin` (replacing a stale pin): it outlives the process.
fn keep(link: FdLink, pin: &Path) -> Result<(), Error> {
    if pin.exists() {
        std::fs::remove_file(pin).map_err(pin_err(pin))?;
    }
    link.pin(pin).map_err(|source| Error::PinLink {
        path: pin.to_path_buf(),
        source,
    })?;
    Ok(())
}

/// The maps and links of one object, attached to one cgroup.
pub(crate) struct Datapath {
    pub(crate) kernel: Kernel,
    counters: PerCpuArray<MapData, u64>,
    /// Whether every program was found attached (pinned) already.
    pub(crate) adopted: bool,
    /// Pins of another object, cgroup or interface, removed by
    /// [`retire_stale`](Self::retire_stale) after the first sync.
    stale: Vec<PathBuf>,
    /// The object as loaded: its programs are what the links run (once
    /// [`retire_stale`](Self::retire_stale) switched adopted ones).
    ebpf: aya::Ebpf,
    /// The object's pin directory (`v-<digest>...`).
    version: PathBuf,
    /// The maps in use: `maps` (generation 0) or `maps-N`.
    generation: u32,
    /// Every link in use (its pin) and the program it runs.
    links: Vec<(PathBuf, &'static str)>,
    /// Links found pinned: switched to this process's programs after the
    /// first sync.
    relink: Vec<(PathBuf, &'static str)>,
    /// Whether the tc programs are in use.
    tc: bool,
    /// Whether the XDP program is in use.
    xdp: bool,
    /// Whether the programs count connections (`kpng_traffic` sized for
    /// it).
    counted: bool,
}

impl std::fmt::Debug for Datapath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Datapath")
            .field("adopted", &self.adopted)
            .field("generation", &self.generation)
            .finish()
    }
}

/// What the programs counted since they were first attached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Counters {
    /// Sockets sent to an endpoint.
    pub translated: u64,
    /// Sockets refused (no endpoint; an unknown port on a ClusterIP).
    pub refused: u64,
    /// Sockets dropped (a Local policy without a local endpoint; an
    /// unallocated Service address).
    pub dropped: u64,
    /// Pages of slots found missing below a set's count: always 0 unless
    /// the backend has a bug.
    pub missing: u64,
    /// Packets the XDP program translated (`--xdp`).
    pub xdp: u64,
}

/// The directory of generation `n` of the maps.
fn generation_dir(version: &Path, n: u32) -> PathBuf {
    if n == 0 {
        version.join("maps")
    } else {
        version.join(format!("maps-{n}"))
    }
}

/// The generation a directory name is of (`maps`, `maps-N`).
pub(crate) fn generation_of(name: &str) -> Option<u32> {
    match name {
        "maps" => Some(0),
        _ => name.strip_prefix("maps-")?.parse().ok(),
    }
}

/// The pin directory of this object (`v-<digest>`), with tc or without
/// and with counters or without (the maps differ in size: each has its
/// pins), and with the sizes of the connection maps the operator set.
pub(crate) fn version_dir(pin_path: &Path, tc: &Tc, sizes: &MapSizes, counted: bool) -> PathBuf {
    let with_tc = if tc.interfaces.is_empty() { "" } else { "-tc" };
    let counted = if counted { "-counted" } else { "" };
    let fixed: Vec<String> = CONNECTION_MAPS
        .iter()
        .filter_map(|(name, _)| Some(format!("{name}={}", sizes.fixed(name)?)))
        .collect();
    let sized = if fixed.is_empty() {
        String::new()
    } else {
        let text = fixed.join(",");
        let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        format!("-c{:08x}", hash & 0xffff_ffff)
    };
    pin_path.join(format!("v-{:016x}{with_tc}{counted}{sized}", digest()))
}

/// Whether nothing of this object is pinned under `pin_path` yet (no map
/// of any generation): its first load can wait for the cluster to be
/// known. Checks what [`Datapath::open`] would refuse first: the bpf file
/// system and the cgroup.
pub(crate) fn fresh(
    pin_path: &Path,
    cgroup: &Path,
    tc: &Tc,
    sizes: &MapSizes,
    counted: bool,
) -> Result<bool, Error> {
    check_bpffs(pin_path)?;
    File::open(cgroup).map_err(|source| Error::Cgroup {
        path: cgroup.to_path_buf(),
        source,
    })?;
    let version = version_dir(pin_path, tc, sizes, counted);
    let Ok(entries) = std::fs::read_dir(&version) else {
        return Ok(true);
    };
    let pinned = entries.flatten().any(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        (generation_of(&name).is_some() || name.starts_with("links-") || name.starts_with("tc-"))
            && std::fs::read_dir(e.path()).is_ok_and(|mut d| d.next().is_some())
    });
    Ok(!pinned)
}

/// Where a swap builds the next generation of maps.
const NEXT: &str = "next";

/// Loads the object with its maps pinned in `maps_dir` (opening those
/// pinned there already), the maps sized from the cluster at `cluster`'s
/// sizes (the floor or fixed size where it has none), the others at
/// theirs.
fn load_object(
    loader: Option<EbpfLoader<'static>>,
    maps_dir: &Path,
    sizes: &MapSizes,
    cluster: &BTreeMap<&'static str, u32>,
    tc: bool,
    counted: bool,
) -> Result<aya::Ebpf, Error> {
    // (`EbpfLoader::new` parses the kernel's BTF: one made beforehand on
    // a thread saves the wait.)
    let mut loader = loader.unwrap_or_default();
    loader.default_map_pin_directory(maps_dir);
    for name in CLUSTER_MAPS {
        let size = cluster
            .get(name)
            .copied()
            .unwrap_or_else(|| sizes.load_size(name, 0));
        loader.map_max_entries(name, size);
    }
    for (name, _) in CONNECTION_MAPS {
        loader.map_max_entries(name, sizes.load_size(name, 0));
    }
    if !tc {
        // No tc program: its maps are made as small as the kernel takes
        // them (an LRU map wants some entries per CPU).
        for name in TC_MAPS {
            loader.map_max_entries(name, 64);
        }
    }
    if !counted {
        // Nothing counts into it: its per-CPU, preallocated 64k entries
        // would cost ~45 ms of each load.
        loader.map_max_entries("kpng_traffic", 64);
    }
    loader.load(OBJECT).map_err(|e| Error::Load(Box::new(e)))
}

/// Loads the programs into the kernel (the verifier checks them): the
/// socket programs, and with `tc` the tc ones.
fn load_programs(ebpf: &mut aya::Ebpf, tc: bool, xdp: bool) -> Result<(), Error> {
    use aya::programs::SchedClassifier;
    for (name, _) in PROGRAMS {
        let program: &mut CgroupSockAddr = ebpf
            .program_mut(name)
            .ok_or(Error::Missing { name })?
            .try_into()
            .map_err(|source| Error::Program { name, source })?;
        verified(|| program.load()).map_err(|source| Error::Program { name, source })?;
    }
    if tc {
        for name in TC_PROGRAMS {
            let program: &mut SchedClassifier = ebpf
                .program_mut(name)
                .ok_or(Error::Missing { name })?
                .try_into()
                .map_err(|source| Error::Program { name, source })?;
            verified(|| program.load()).map_err(|source| Error::Program { name, source })?;
        }
    }
    if tc && xdp {
        let name = XDP_PROGRAM;
        let program: &mut aya::programs::Xdp = ebpf
            .program_mut(name)
            .ok_or(Error::Missing { name })?
            .try_into()
            .map_err(|source| Error::Program { name, source })?;
        verified(|| program.load()).map_err(|source| Error::Program { name, source })?;
    }
    Ok(())
}

/// The XDP program.
const XDP_PROGRAM: &str = "kpng_xdp";

/// `load` (one program's `BPF_PROG_LOAD`), again while it fails with
/// `EAGAIN`: the verifier gives up so when a signal comes to the thread
/// during its walk (a child process's exit, with a `SIGCHLD` handler
/// installed, as the async runtime's process driver does), which takes
/// longer the bigger the program. As libbpf, up to five times.
pub(crate) fn verified<T>(
    mut load: impl FnMut() -> Result<T, aya::programs::ProgramError>,
) -> Result<T, aya::programs::ProgramError> {
    let mut tries = 1;
    loop {
        match load() {
            Err(aya::programs::ProgramError::LoadError { io_error, .. })
                if io_error.raw_os_error() == Some(libc::EAGAIN) && tries < 5 =>
            {
                tries += 1;
                tracing::debug!(tries, "BPF_PROG_LOAD interrupted (EAGAIN): again");
            }
            other => return other,
        }
    }
}

/// The tc programs.
const TC_PROGRAMS: [&str; 2] = ["kpng_tc_ingress", "kpng_tc_egress"];

/// Switches every link of `links` to `ebpf`'s program of its name, each
/// in one step (`BPF_LINK_UPDATE`).
fn relink(ebpf: &aya::Ebpf, links: &[(PathBuf, &'static str)]) -> Result<(), Error> {
    use std::os::fd::AsFd;
    for (pin, name) in links {
        let program = ebpf.program(name).ok_or(Error::Missing { name })?;
        let fd = program
            .fd()
            .map_err(|source| Error::Program { name, source })?;
        let update = |pin: &Path| -> std::io::Result<()> {
            let link = crate::sys::obj_get(pin)?;
            crate::sys::link_update(link.as_fd(), fd.as_fd())
        };
        update(pin).map_err(|source| Error::LinkUpdate {
            path: pin.clone(),
            source,
        })?;
    }
    Ok(())
}

/// `kpng_settings[0]` (`struct settings`): whether the programs count
/// each new connection per frontend and endpoint in `kpng_traffic`
/// (`EbpfConfig::counters`), and the cookie of the node's network
/// namespace (its sockets are the node's own).
fn set_settings(ebpf: &mut aya::Ebpf, count: bool, node_netns: u64) -> Result<(), Error> {
    const SETTING_COUNT: u32 = 1;
    let name = "kpng_settings";
    let map = ebpf.map_mut(name).ok_or(Error::Missing { name })?;
    let mut settings: aya::maps::Array<&mut MapData, [u8; 16]> =
        aya::maps::Array::try_from(map).map_err(|source| Error::Map { map: name, source })?;
    let flags = if count { SETTING_COUNT } else { 0 };
    let mut value = [0u8; 16];
    value[..4].copy_from_slice(&flags.to_ne_bytes());
    value[8..].copy_from_slice(&node_netns.to_ne_bytes());
    settings
        .set(0, value, 0)
        .map_err(|source| Error::Map { map: name, source })
}

/// The maps of a loaded object, and their sizes.
fn take_maps(ebpf: &mut aya::Ebpf) -> Result<(Kernel, PerCpuArray<MapData, u64>), Error> {
    let take = |ebpf: &mut aya::Ebpf, name: &'static str| {
        ebpf.take_map(name).ok_or(Error::Missing { name })
    };
    let wrap = |map: &'static str| move |source| Error::Map { map, source };
    let mut capacity = Capacity::default();
    for name in CLUSTER_MAPS {
        if let Some(map) = ebpf.map(name) {
            let info = match map {
                aya::maps::Map::HashMap(data) | aya::maps::Map::LpmTrie(data) => data.info(),
                _ => continue,
            };
            let info = info.map_err(|source| Error::Map { map: name, source })?;
            capacity.0.insert(name, info.max_entries());
        }
    }
    let kernel = Kernel {
        services: HashMap::try_from(take(ebpf, "kpng_services")?).map_err(wrap("kpng_services"))?,
        slots: HashMap::try_from(take(ebpf, "kpng_slots")?).map_err(wrap("kpng_slots"))?,
        members: HashMap::try_from(take(ebpf, "kpng_members")?).map_err(wrap("kpng_members"))?,
        live: HashMap::try_from(take(ebpf, "kpng_live")?).map_err(wrap("kpng_live"))?,
        cidrs: LpmTrie::try_from(take(ebpf, "kpng_cidrs")?).map_err(wrap("kpng_cidrs"))?,
        external: HashMap::try_from(take(ebpf, "kpng_external")?).map_err(wrap("kpng_external"))?,
        ranges: LpmTrie::try_from(take(ebpf, "kpng_ranges")?).map_err(wrap("kpng_ranges"))?,
        node: aya::maps::Array::try_from(take(ebpf, "kpng_node")?).map_err(wrap("kpng_node"))?,
        maglev: HashMap::try_from(take(ebpf, "kpng_maglev")?).map_err(wrap("kpng_maglev"))?,
        capacity,
    };
    let counters =
        PerCpuArray::try_from(take(ebpf, "kpng_counters")?).map_err(wrap("kpng_counters"))?;
    Ok((kernel, counters))
}

impl Datapath {
    /// Loads the object (or opens its pinned maps), attaches its programs
    /// to `cgroup` (or adopts the pinned links), and removes the pins of
    /// any other object or cgroup under `pin_path`. Maps not pinned yet
    /// are made at their floor (or fixed) size: the first sync sizes them
    /// from the cluster.
    pub(crate) fn open(
        pin_path: &Path,
        cgroup: &Path,
        tc: &Tc,
        sizes: &MapSizes,
        cluster: &BTreeMap<&'static str, u32>,
        count_traffic: bool,
        loader: Option<EbpfLoader<'static>>,
    ) -> Result<Self, Error> {
        check_bpffs(pin_path)?;
        let version = version_dir(pin_path, tc, sizes, count_traffic);
        std::fs::create_dir_all(&version).map_err(pin_err(&version))?;
        // The newest generation of maps; a swap that did not finish
        // (`next`) is dropped, older generations go after the first sync.
        let mut generation = 0;
        let mut older = Vec::new();
        for entry in std::fs::read_dir(&version)
            .map_err(pin_err(&version))?
            .flatten()
        {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == NEXT {
                let path = entry.path();
                std::fs::remove_dir_all(&path).map_err(pin_err(&path))?;
            } else if let Some(n) = generation_of(&name) {
                older.push(n);
                generation = generation.max(n);
            }
        }
        let maps_dir = generation_dir(&version, generation);
        std::fs::create_dir_all(&maps_dir).map_err(pin_err(&maps_dir))?;
        let cgroup_file = File::open(cgroup).map_err(|source| Error::Cgroup {
            path: cgroup.to_path_buf(),
            source,
        })?;
        let inode = cgroup_file
            .metadata()
            .map_err(|source| Error::Cgroup {
                path: cgroup.to_path_buf(),
                source,
            })?
            .ino();
        let links_dir = version.join(format!("links-{inode}"));
        std::fs::create_dir_all(&links_dir).map_err(pin_err(&links_dir))?;

        let with_tc = !tc.interfaces.is_empty();
        let mut ebpf = load_object(loader, &maps_dir, sizes, cluster, with_tc, count_traffic)?;
        load_programs(&mut ebpf, with_tc, tc.xdp.is_some())?;
        let mut adopted = true;
        let mut links = Vec::new();
        let mut relink = Vec::new();
        for (name, _) in PROGRAMS {
            let pin = links_dir.join(name);
            links.push((pin.clone(), name));
            if pinned(&pin) {
                relink.push((pin, name));
                continue;
            }
            adopted = false;
            let program: &mut CgroupSockAddr = ebpf
                .program_mut(name)
                .ok_or(Error::Missing { name })?
                .try_into()
                .map_err(|source| Error::Program { name, source })?;
            // A link (aya makes one on kernels >= 5.7) always runs beside
            // other programs of the cgroup; the kernel refuses attach flags
            // for links, so the mode is the one with none.
            let id = program
                .attach(&cgroup_file, CgroupAttachMode::Single)
                .map_err(|source| Error::Program { name, source })?;
            let link = program
                .take_link(id)
                .map_err(|source| Error::Program { name, source })?;
            let link: FdLink = link
                .try_into()
                .map_err(|source| Error::Link { name, source })?;
            keep(link, &pin)?;
        }
        let tc_dirs = attach_tc(&mut ebpf, &version, tc, &mut adopted, &mut relink)?;
        for dir in &tc_dirs {
            for name in TC_PROGRAMS {
                links.push((dir.join(name), name));
            }
        }
        // Older objects' pins (`v-*`), and other cgroups' and interfaces'
        // links: ours replace them once our maps are filled (the first
        // sync), so that something serves the Services meanwhile.
        let mut stale = Vec::new();
        for entry in std::fs::read_dir(pin_path)
            .map_err(pin_err(pin_path))?
            .flatten()
        {
            let path = entry.path();
            if path != version && entry.file_name().to_string_lossy().starts_with("v-") {
                stale.push(path);
            }
        }
        for entry in std::fs::read_dir(&version)
            .map_err(pin_err(&version))?
            .flatten()
        {
            let (path, name) = (
                entry.path(),
                entry.file_name().to_string_lossy().into_owned(),
            );
            let links = name.starts_with("links-") || name.starts_with("tc-");
            if links && path != links_dir && !tc_dirs.contains(&path) {
                stale.push(path);
            }
        }
        for n in older.into_iter().filter(|&n| n != generation) {
            stale.push(generation_dir(&version, n));
        }
        let node_netns =
            crate::sys::netns_cookie(tc.netns.as_deref()).map_err(|source| Error::NodeNetns {
                netns: tc.netns.clone(),
                source,
            })?;
        set_settings(&mut ebpf, count_traffic, node_netns)?;
        let (kernel, counters) = take_maps(&mut ebpf)?;
        tracing::info!(
            pins = %version.display(),
            cgroup = %cgroup.display(),
            adopted,
            generation,
            "eBPF programs attached"
        );
        Ok(Self {
            kernel,
            counters,
            adopted,
            stale,
            ebpf,
            version,
            generation,
            links,
            relink,
            tc: with_tc,
            xdp: with_tc && tc.xdp.is_some(),
            counted: count_traffic,
        })
    }

    /// The planned swap: loads the object anew with maps of `grow`'s
    /// sizes (the others as they are; the connection maps and counters
    /// are the same maps, pinned again), lets `fill` write the whole
    /// state into them, then switches every link to the new programs
    /// (`BPF_LINK_UPDATE`: atomic per program; both sets of maps serve the
    /// same meanwhile) and drops the old maps. On failure before the
    /// switch, the new maps go and the old ones serve on.
    pub(crate) fn swap<T>(
        &mut self,
        grow: &BTreeMap<&'static str, u32>,
        sizes: &MapSizes,
        fill: impl FnOnce(&mut Kernel) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let next = self.version.join(NEXT);
        if next.exists() {
            std::fs::remove_dir_all(&next).map_err(pin_err(&next))?;
        }
        std::fs::create_dir_all(&next).map_err(pin_err(&next))?;
        let result = self.swap_into(&next, grow, sizes, fill);
        if result.is_err() {
            let _ = std::fs::remove_dir_all(&next);
        }
        result
    }

    fn swap_into<T>(
        &mut self,
        next: &Path,
        grow: &BTreeMap<&'static str, u32>,
        sizes: &MapSizes,
        fill: impl FnOnce(&mut Kernel) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let current = generation_dir(&self.version, self.generation);
        // The connections' maps and the counters carry over.
        let kept = CONNECTION_MAPS.iter().map(|(name, _)| *name).chain([
            "kpng_counters",
            "kpng_node",
            "kpng_traffic",
            "kpng_settings",
            "kpng_nexthop",
            "kpng_xdp_modes",
        ]);
        for name in kept {
            let from = current.join(name);
            let map =
                MapData::from_pin(&from).map_err(|source| Error::Map { map: name, source })?;
            map.pin(next.join(name)).map_err(|source| Error::PinLink {
                path: next.join(name),
                source,
            })?;
        }
        let mut cluster = self.kernel.capacity.0.clone();
        cluster.extend(grow.iter().map(|(k, v)| (*k, *v)));
        let mut ebpf = load_object(None, next, sizes, &cluster, self.tc, self.counted)?;
        load_programs(&mut ebpf, self.tc, self.xdp)?;
        let (mut kernel, counters) = take_maps(&mut ebpf)?;
        let filled = fill(&mut kernel)?;
        if let Err(e) = relink(&ebpf, &self.links) {
            // Back to the old programs (whose maps still serve all).
            if let Err(back) = relink(&self.ebpf, &self.links) {
                tracing::error!(error = %back, "cannot switch the links back to the old maps");
            }
            return Err(e);
        }
        let generation = self.generation + 1;
        let dir = generation_dir(&self.version, generation);
        std::fs::rename(next, &dir).map_err(pin_err(&dir))?;
        tracing::info!(
            from = self.generation,
            to = generation,
            sizes = ?kernel.capacity.0,
            "eBPF maps grown: the programs switched to the new maps"
        );
        self.kernel = kernel;
        self.counters = counters;
        self.ebpf = ebpf;
        if let Err(error) = std::fs::remove_dir_all(&current) {
            tracing::warn!(path = %current.display(), %error, "cannot remove the old maps' pins");
        }
        self.generation = generation;
        self.relink.clear();
        Ok(filled)
    }

    /// The directory of the maps in use (the connection maps, such as
    /// `kpng_reverse`, are the same maps in every generation).
    pub(crate) fn maps_dir(&self) -> PathBuf {
        generation_dir(&self.version, self.generation)
    }

    /// Removes the pins of other objects, cgroups and interfaces (which
    /// detaches their programs), and switches links found pinned to this
    /// process's programs: called once the maps are filled.
    pub(crate) fn retire_stale(&mut self) {
        let found = std::mem::take(&mut self.relink);
        if let Err(error) = relink(&self.ebpf, &found) {
            tracing::warn!(%error, "cannot switch the pinned links to this process's programs");
        }
        for path in std::mem::take(&mut self.stale) {
            tracing::info!(path = %path.display(), "removing an older object's, cgroup's or interface's pins");
            if let Err(error) = std::fs::remove_dir_all(&path) {
                tracing::warn!(path = %path.display(), %error, "cannot remove old pins");
            }
        }
    }

    /// The programs' counters, summed over CPUs.
    pub(crate) fn counters(&self) -> Result<Counters, Error> {
        let read = |i: u32| -> Result<u64, Error> {
            let values = self.counters.get(&i, 0).map_err(|source| Error::Map {
                map: "kpng_counters",
                source,
            })?;
            Ok(values.iter().sum())
        };
        Ok(Counters {
            translated: read(0)?,
            refused: read(1)?,
            dropped: read(2)?,
            missing: read(3)?,
            xdp: read(4)?,
        })
    }
}

/// Where the tc programs go: the node's interfaces that face outside,
/// by name, in the network namespace `netns` (a path such as
/// `/run/netns/NAME`; `None`: the process's own).
#[derive(Clone, Debug, Default)]
pub(crate) struct Tc {
    pub(crate) interfaces: Vec<String>,
    pub(crate) netns: Option<PathBuf>,
    /// The XDP program on the same interfaces, and how.
    pub(crate) xdp: Option<crate::XdpMode>,
}

/// Attaches the tc programs (ingress and egress) to every interface of
/// `tc`, or adopts their pinned links; returns the pin directories in use.
fn attach_tc(
    ebpf: &mut aya::Ebpf,
    version: &Path,
    tc: &Tc,
    adopted: &mut bool,
    relink: &mut Vec<(PathBuf, &'static str)>,
) -> Result<Vec<PathBuf>, Error> {
    use aya::programs::SchedClassifier;
    use aya::programs::tc::TcAttachType;

    if tc.interfaces.is_empty() {
        return Ok(Vec::new());
    }
    // TCX links (Linux 6.6) pin and outlive the process; aya attaches
    // through netlink before, which pins nothing and needs a qdisc.
    let tcx = aya::util::KernelVersion::current()
        .is_ok_and(|k| k >= aya::util::KernelVersion::new(6, 6, 0));
    if !tcx {
        return Err(Error::TcNeedsTcx);
    }
    let netns_file = match &tc.netns {
        Some(path) => Some(File::open(path).map_err(|source| Error::Netns {
            path: path.clone(),
            source,
        })?),
        None => None,
    };
    let netns_id = match &netns_file {
        Some(file) => file.metadata().map(|m| m.ino()).unwrap_or(0),
        None => std::fs::metadata("/proc/self/ns/net")
            .map(|m| m.ino())
            .unwrap_or(0),
    };
    let mut dirs = Vec::new();
    for interface in &tc.interfaces {
        // The interface's index is in the pins' name: a link of an
        // interface deleted and made again is attached to nothing.
        let ifindex = std::thread::scope(|scope| {
            scope
                .spawn(|| -> Result<u32, Error> {
                    if let Some(file) = &netns_file {
                        nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET).map_err(
                            |e| Error::Netns {
                                path: tc.netns.clone().unwrap_or_default(),
                                source: e.into(),
                            },
                        )?;
                    }
                    nix::net::if_::if_nametoindex(interface.as_str()).map_err(|e| {
                        Error::NoInterface {
                            interface: interface.clone(),
                            source: e.into(),
                        }
                    })
                })
                .join()
                .unwrap_or(Err(Error::Thread))
        })?;
        let dir = version.join(format!("tc-{netns_id}-{interface}-{ifindex}"));
        dirs.push(dir.clone());
        std::fs::create_dir_all(&dir).map_err(pin_err(&dir))?;
        for (name, side) in [
            ("kpng_tc_ingress", TcAttachType::Ingress),
            ("kpng_tc_egress", TcAttachType::Egress),
        ] {
            let pin = dir.join(name);
            if pinned(&pin) {
                relink.push((pin, name));
                continue;
            }
            *adopted = false;
            let program: &mut SchedClassifier = ebpf
                .program_mut(name)
                .ok_or(Error::Missing { name })?
                .try_into()
                .map_err(|source| Error::Program { name, source })?;
            // In the namespace of the interfaces (setns affects this
            // thread only, so a scoped one does it).
            let link =
                std::thread::scope(|scope| {
                    scope
                        .spawn(|| -> Result<FdLink, Error> {
                            if let Some(file) = &netns_file {
                                nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET)
                                    .map_err(|e| Error::Netns {
                                        path: tc.netns.clone().unwrap_or_default(),
                                        source: e.into(),
                                    })?;
                            }
                            let id = program.attach(interface, side).map_err(|source| {
                                Error::Interface {
                                    interface: interface.clone(),
                                    source,
                                }
                            })?;
                            let link = program
                                .take_link(id)
                                .map_err(|source| Error::Program { name, source })?;
                            link.try_into()
                                .map_err(|source| Error::Link { name, source })
                        })
                        .join()
                        .unwrap_or(Err(Error::Thread))
                })?;
            keep(link, &pin)?;
        }
        attach_xdp(
            ebpf,
            tc,
            interface,
            ifindex,
            &dir,
            adopted,
            relink,
            netns_file.as_ref(),
        )?;
    }
    Ok(dirs)
}

/// The XDP program on `interface` (index `ifindex`), as `tc.xdp` says:
/// its link pinned in `dir` beside the tc ones (adopted when pinned),
/// attached in the driver and else generic (`XdpMode::Auto`), and the
/// mode written to `kpng_xdp_modes` for the program's checksum
/// arithmetic. Without XDP, a link an earlier run pinned there is removed
/// (which detaches it).
#[allow(clippy::too_many_arguments)]
fn attach_xdp(
    ebpf: &mut aya::Ebpf,
    tc: &Tc,
    interface: &str,
    ifindex: u32,
    dir: &Path,
    adopted: &mut bool,
    relink: &mut Vec<(PathBuf, &'static str)>,
    netns_file: Option<&File>,
) -> Result<(), Error> {
    use crate::XdpMode;
    use aya::programs::Xdp;
    use aya::programs::xdp::XdpMode as Attach;

    let name = XDP_PROGRAM;
    let pin = dir.join(name);
    let Some(mode) = tc.xdp else {
        if pinned(&pin) {
            std::fs::remove_file(&pin).map_err(pin_err(&pin))?;
            tracing::info!(interface, "XDP program detached (--xdp is off)");
        }
        return Ok(());
    };
    if pinned(&pin) {
        relink.push((pin, name));
        return Ok(());
    }
    *adopted = false;
    let program: &mut Xdp = ebpf
        .program_mut(name)
        .ok_or(Error::Missing { name })?
        .try_into()
        .map_err(|source| Error::Program { name, source })?;
    let (link, generic) = std::thread::scope(|scope| {
        scope
            .spawn(|| -> Result<(FdLink, bool), Error> {
                if let Some(file) = netns_file {
                    nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET).map_err(|e| {
                        Error::Netns {
                            path: tc.netns.clone().unwrap_or_default(),
                            source: e.into(),
                        }
                    })?;
                }
                let mut linked = |flags| -> Result<FdLink, String> {
                    let id = program
                        .attach(interface, flags)
                        .map_err(|e| e.to_string())?;
                    let link = program.take_link(id).map_err(|e| e.to_string())?;
                    FdLink::try_from(link).map_err(|e| e.to_string())
                };
                let mut native = "not tried".to_owned();
                if mode != XdpMode::Generic {
                    match linked(Attach::Driver) {
                        Ok(link) => return Ok((link, false)),
                        Err(e) => native = e,
                    }
                }
                let generic = if mode == XdpMode::Native {
                    "not tried".to_owned()
                } else {
                    match linked(Attach::Skb) {
                        Ok(link) => return Ok((link, true)),
                        Err(e) => e,
                    }
                };
                Err(Error::Xdp {
                    interface: interface.to_owned(),
                    native,
                    generic,
                })
            })
            .join()
            .unwrap_or(Err(Error::Thread))
    })?;
    keep(link, &pin)?;
    let mut modes: aya::maps::HashMap<_, u32, u32> =
        aya::maps::HashMap::try_from(ebpf.map_mut("kpng_xdp_modes").ok_or(Error::Missing {
            name: "kpng_xdp_modes",
        })?)
        .map_err(|source| Error::Map {
            map: "kpng_xdp_modes",
            source,
        })?;
    // (the program's XDP_GENERIC, XDP_NATIVE)
    modes
        .insert(ifindex, if generic { 1 } else { 2 }, 0)
        .map_err(|source| Error::Map {
            map: "kpng_xdp_modes",
            source,
        })?;
    tracing::info!(
        interface,
        mode = if generic { "generic" } else { "native" },
        "XDP program attached"
    );
    Ok(())
}

/// The kernel memory of the maps kpng pinned under `pin_path`, as the
/// kernel counts it (`memlock`, which from Linux 6.4 on is what a map
/// uses: its buckets, its preallocated elements, the elements it holds).
pub fn map_memory(pin_path: &Path) -> u64 {
    let Ok(versions) = std::fs::read_dir(pin_path) else {
        return 0;
    };
    let mut total = 0;
    let dirs = versions.flatten().flat_map(|version| {
        std::fs::read_dir(version.path())
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| generation_of(&e.file_name().to_string_lossy()).is_some())
            .map(|e| e.path())
    });
    for dir in dirs {
        let Ok(maps) = std::fs::read_dir(dir) else {
            continue;
        };
        for pin in maps.flatten() {
            let Ok(map) = aya::maps::MapData::from_pin(pin.path()) else {
                continue;
            };
            use std::os::fd::{AsFd, AsRawFd};
            let fd = map.fd().as_fd().as_raw_fd();
            let info =
                std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).unwrap_or_default();
            total += info
                .lines()
                .find_map(|l| l.strip_prefix("memlock:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    total
}

/// While alive, the kernel counts the runs and run time of every BPF
/// program (`BPF_ENABLE_STATS`): what one run of kpng's programs costs.
/// Counting itself costs a little per run; it stops when this is dropped.
#[derive(Debug)]
pub struct RunTimeStats(#[allow(dead_code)] std::os::fd::OwnedFd);

/// Runs and run time of one of kpng's programs (summed over its loaded
/// instances), counted while a [`RunTimeStats`] was alive.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProgramRuns {
    /// The program's name (as the kernel keeps it: 15 characters at most).
    pub name: String,
    /// How many times it ran.
    pub runs: u64,
    /// For how long in all.
    pub time: std::time::Duration,
}

impl ProgramRuns {
    /// The mean time of one run, in nanoseconds (0 when it never ran).
    pub fn nanos_per_run(&self) -> u64 {
        u64::try_from(self.time.as_nanos())
            .unwrap_or(u64::MAX)
            .checked_div(self.runs)
            .unwrap_or(0)
    }
}

impl RunTimeStats {
    /// Turns the counting on.
    pub fn enable() -> Result<Self, Error> {
        aya::sys::enable_stats(aya::sys::Stats::RunTime)
            .map(RunTimeStats)
            .map_err(|e| Error::Stats(e.io_error))
    }

    /// kpng's programs, by name, with what was counted so far.
    pub fn programs(&self) -> Vec<ProgramRuns> {
        let mut by_name: std::collections::BTreeMap<String, ProgramRuns> = Default::default();
        for info in aya::programs::loaded_programs().flatten() {
            let Some(name) = info.name_as_str().filter(|n| n.starts_with("kpng_")) else {
                continue;
            };
            let entry = by_name
                .entry(name.to_owned())
                .or_insert_with(|| ProgramRuns {
                    name: name.to_owned(),
                    ..ProgramRuns::default()
                });
            entry.runs += info.run_count();
            entry.time += info.run_time();
        }
        by_name.into_values().collect()
    }
}

/// What [`cleanup`] would remove under `pin_path`, changing nothing
/// (`--cleanup --dry-run`): kpng's own entries (`v-<digest>`), each a
/// program version's links and maps.
pub fn cleanup_plan(pin_path: &Path) -> Result<Vec<std::path::PathBuf>, Error> {
    if !pin_path.exists() {
        return Ok(Vec::new());
    }
    check_bpffs(pin_path)?;
    let entries = std::fs::read_dir(pin_path).map_err(pin_err(pin_path))?;
    let mut found: Vec<_> = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("v-"))
        .map(|e| e.path())
        .collect();
    found.sort();
    Ok(found)
}

/// Removes everything kpng pinned under `pin_path`: its links (which
/// detaches its programs from their cgroups) and its maps, then the
/// directory when nothing else is in it. Only kpng's own entries
/// (`v-<digest>`) are touched. Returns whether there was anything.
pub fn cleanup(pin_path: &Path) -> Result<bool, Error> {
    if !pin_path.exists() {
        return Ok(false);
    }
    check_bpffs(pin_path)?;
    let mut any = false;
    let entries = std::fs::read_dir(pin_path).map_err(pin_err(pin_path))?;
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with("v-") {
            let path = entry.path();
            std::fs::remove_dir_all(&path).map_err(pin_err(&path))?;
            any = true;
        }
    }
    // Not when it is the mount point itself, or holds others' pins.
    let _ = std::fs::remove_dir(pin_path);
    if any {
        tracing::info!(path = %pin_path.display(), "eBPF programs detached and maps removed");
    }
    Ok(any)
}

#[cfg(test)]
mod tests {
    use aya::programs::ProgramError;

    fn failed(errno: i32) -> ProgramError {
        ProgramError::LoadError {
            io_error: std::io::Error::from_raw_os_error(errno),
            verifier_log: aya_obj::VerifierLog::new(String::new()),
        }
    }

    /// A load the verifier gave up on with EAGAIN (a signal during its
    /// walk) is made again, up to five times in all; any other failure
    /// is returned at once.
    #[test]
    fn a_load_interrupted_by_a_signal_is_made_again() {
        let mut calls = 0;
        let result = super::verified(|| {
            calls += 1;
            if calls < 3 {
                Err(failed(libc::EAGAIN))
            } else {
                Ok(calls)
            }
        });
        assert_eq!(result.ok(), Some(3));

        let mut calls = 0;
        let result: Result<(), _> = super::verified(|| {
            calls += 1;
            Err(failed(libc::EAGAIN))
        });
        assert!(result.is_err());
        assert_eq!(calls, 5);

        let mut calls = 0;
        let result: Result<(), _> = super::verified(|| {
            calls += 1;
            Err(failed(libc::EACCES))
        });
        assert!(result.is_err());
        assert_eq!(calls, 1);
    }
}
