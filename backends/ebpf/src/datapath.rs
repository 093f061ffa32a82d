//! Loading the object, pinning its maps and links under a bpffs
//! directory, attaching the programs to a cgroup, and adopting what a
//! previous run left.
//!
//! Under the pin directory (`/sys/fs/bpf/kpng` by default):
//!
//! ```text
//! v-<object digest>/maps/kpng_services, kpng_slots, ...
//! v-<object digest>/links-<cgroup inode>/kpng_connect4, ...
//! ```
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

use crate::Error;
use crate::object::{OBJECT, PROGRAMS, digest};
use crate::tables::Kernel;

/// The maps only the tc programs use.
const TC_MAPS: [&str; 7] = [
    "kpng_external",
    "kpng_ranges",
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
}

impl std::fmt::Debug for Datapath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Datapath")
            .field("adopted", &self.adopted)
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
}

impl Datapath {
    /// Loads the object (or opens its pinned maps), attaches its programs
    /// to `cgroup` (or adopts the pinned links), and removes the pins of
    /// any other object or cgroup under `pin_path`.
    pub(crate) fn open(pin_path: &Path, cgroup: &Path, tc: &Tc) -> Result<Self, Error> {
        check_bpffs(pin_path)?;
        // With tc or without, the maps differ in size: each has its pins.
        let with_tc = if tc.interfaces.is_empty() { "" } else { "-tc" };
        let version = pin_path.join(format!("v-{:016x}{with_tc}", digest()));
        let maps_dir = version.join("maps");
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

        let mut loader = EbpfLoader::new();
        loader.default_map_pin_directory(&maps_dir);
        if tc.interfaces.is_empty() {
            // No tc program: its maps are made as small as the kernel
            // takes them (an LRU map wants some entries per CPU).
            for name in TC_MAPS {
                loader.map_max_entries(name, 64);
            }
        }
        let mut ebpf = loader.load(OBJECT).map_err(|e| Error::Load(Box::new(e)))?;
        let mut adopted = true;
        for (name, _) in PROGRAMS {
            let pin = links_dir.join(name);
            if pinned(&pin) {
                continue;
            }
            adopted = false;
            let program: &mut CgroupSockAddr = ebpf
                .program_mut(name)
                .ok_or(Error::Missing { name })?
                .try_into()
                .map_err(|source| Error::Program { name, source })?;
            program
                .load()
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
        let tc_dirs = attach_tc(&mut ebpf, &version, tc, &mut adopted)?;
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
        let take = |ebpf: &mut aya::Ebpf, name: &'static str| {
            ebpf.take_map(name).ok_or(Error::Missing { name })
        };
        let wrap = |map: &'static str| move |source| Error::Map { map, source };
        let kernel = Kernel {
            services: HashMap::try_from(take(&mut ebpf, "kpng_services")?)
                .map_err(wrap("kpng_services"))?,
            slots: HashMap::try_from(take(&mut ebpf, "kpng_slots")?).map_err(wrap("kpng_slots"))?,
            members: HashMap::try_from(take(&mut ebpf, "kpng_members")?)
                .map_err(wrap("kpng_members"))?,
            live: HashMap::try_from(take(&mut ebpf, "kpng_live")?).map_err(wrap("kpng_live"))?,
            cidrs: LpmTrie::try_from(take(&mut ebpf, "kpng_cidrs")?).map_err(wrap("kpng_cidrs"))?,
            external: HashMap::try_from(take(&mut ebpf, "kpng_external")?)
                .map_err(wrap("kpng_external"))?,
            ranges: LpmTrie::try_from(take(&mut ebpf, "kpng_ranges")?)
                .map_err(wrap("kpng_ranges"))?,
            node: aya::maps::Array::try_from(take(&mut ebpf, "kpng_node")?)
                .map_err(wrap("kpng_node"))?,
        };
        let counters = PerCpuArray::try_from(take(&mut ebpf, "kpng_counters")?)
            .map_err(wrap("kpng_counters"))?;
        tracing::info!(
            pins = %version.display(),
            cgroup = %cgroup.display(),
            adopted,
            "eBPF programs attached"
        );
        Ok(Self {
            kernel,
            counters,
            adopted,
            stale,
        })
    }

    /// Removes the pins of other objects, cgroups and interfaces (which
    /// detaches their programs): called once the maps are filled.
    pub(crate) fn retire_stale(&mut self) {
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
}

/// Attaches the tc programs (ingress and egress) to every interface of
/// `tc`, or adopts their pinned links; returns the pin directories in use.
fn attach_tc(
    ebpf: &mut aya::Ebpf,
    version: &Path,
    tc: &Tc,
    adopted: &mut bool,
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
                continue;
            }
            *adopted = false;
            let program: &mut SchedClassifier = ebpf
                .program_mut(name)
                .ok_or(Error::Missing { name })?
                .try_into()
                .map_err(|source| Error::Program { name, source })?;
            if program.fd().is_err() {
                program
                    .load()
                    .map_err(|source| Error::Program { name, source })?;
            }
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
    }
    Ok(dirs)
}

/// The kernel memory of the maps kpng pinned under `pin_path`, as the
/// kernel counts it (`memlock`, which from Linux 6.4 on is what a map
/// uses: its buckets, its preallocated elements, the elements it holds).
pub fn map_memory(pin_path: &Path) -> u64 {
    let Ok(versions) = std::fs::read_dir(pin_path) else {
        return 0;
    };
    let mut total = 0;
    for version in versions.flatten() {
        let Ok(maps) = std::fs::read_dir(version.path().join("maps")) else {
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
