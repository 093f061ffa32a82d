//! Fixtures for tests of eBPF data paths: a bpf file system and a cgroup
//! of the test's own, removed on drop (also when the test fails), and a
//! way to run a command inside both a cgroup and a network namespace.
//!
//! Nothing is attached to the machine's own cgroups or pinned in its
//! `/sys/fs/bpf`: a test attaches its programs to its [`TestCgroup`] and
//! pins them in its [`BpfFs`]. Unmounting the bpffs drops every pin in it,
//! which detaches every pinned link, whatever the test left.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A name unique to this process and call: `<tag>-<pid>-<n>`.
pub fn unique(tag: &str) -> String {
    format!(
        "{tag}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

fn sh(script: &str) -> Result<String, String> {
    let out = Command::new("sh")
        .args(["-c", script])
        .output()
        .map_err(|e| format!("sh: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "`{script}` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The cgroup v2 root, from `/proc/self/mountinfo`.
pub fn cgroup2_root() -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        if right.split(' ').next()? != "cgroup2" {
            return None;
        }
        Some(PathBuf::from(left.split(' ').nth(4)?))
    })
}

/// Why eBPF tests cannot run here, if they cannot: not root, no cgroup
/// v2, no `ip` or `python3`.
pub fn unavailable() -> Option<String> {
    match sh("id -u") {
        Ok(uid) if uid.trim() == "0" => {}
        _ => return Some("not root: BPF programs and namespaces need root".into()),
    }
    if cgroup2_root().is_none() {
        return Some("no cgroup v2 hierarchy is mounted".into());
    }
    for tool in ["ip", "python3"] {
        if sh(&format!("command -v {tool} || test -x /usr/sbin/{tool}")).is_err() {
            return Some(format!("{tool} not found"));
        }
    }
    None
}

/// A bpf file system mounted on a directory of its own under the
/// system's temporary directory; unmounted and removed on drop.
#[derive(Debug)]
pub struct BpfFs {
    /// The mount point.
    pub path: PathBuf,
}

impl BpfFs {
    /// Mounts one.
    pub fn new(tag: &str) -> Result<Self, String> {
        let path = std::env::temp_dir().join(unique(tag));
        std::fs::create_dir_all(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let fs = BpfFs { path };
        sh(&format!("mount -t bpf bpf '{}'", fs.path.display()))?;
        Ok(fs)
    }
}

impl Drop for BpfFs {
    fn drop(&mut self) {
        let _ = sh(&format!("umount '{}'", self.path.display()));
        let _ = std::fs::remove_dir(&self.path);
    }
}

/// A child cgroup of the cgroup v2 root; on drop, whatever processes are
/// left in it are killed and it is removed.
#[derive(Debug)]
pub struct TestCgroup {
    /// Its directory.
    pub path: PathBuf,
}

impl TestCgroup {
    /// Makes one.
    pub fn new(tag: &str) -> Result<Self, String> {
        let root = cgroup2_root().ok_or("no cgroup v2 hierarchy")?;
        let path = root.join(unique(tag));
        std::fs::create_dir(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(TestCgroup { path })
    }

    /// `args` run inside this cgroup and network namespace `netns` (a
    /// name under `/run/netns`). The process joins the cgroup first:
    /// `ip netns exec` mounts a `/sys` of the namespace, where the
    /// cgroup tree is not visible.
    pub fn command(&self, netns: &str, args: &[&str]) -> Command {
        in_cgroup_and_netns(&self.path, netns, args)
    }
}

/// See [`TestCgroup::command`].
pub fn in_cgroup_and_netns(cgroup: &Path, netns: &str, args: &[&str]) -> Command {
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(r#"echo $$ > "$0/cgroup.procs" && exec ip netns exec "$@""#)
        .arg(cgroup)
        .arg(netns)
        .args(args);
    command
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let procs = self.path.join("cgroup.procs");
        for _ in 0..50 {
            let pids = std::fs::read_to_string(&procs).unwrap_or_default();
            if pids.trim().is_empty() {
                break;
            }
            for pid in pids.split_whitespace() {
                let _ = sh(&format!("kill -9 {pid}"));
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = std::fs::remove_dir(&self.path);
    }
}

/// A network namespace of the test's own, deleted on drop.
#[derive(Debug)]
pub struct TestNetns {
    /// Its name (under `/run/netns`).
    pub name: String,
}

impl TestNetns {
    /// Makes one, with loopback up.
    pub fn new(tag: &str) -> Result<Self, String> {
        let name = unique(tag);
        sh(&format!("ip netns add {name}"))?;
        let ns = TestNetns { name };
        sh(&format!("ip -n {} link set lo up", ns.name))?;
        Ok(ns)
    }

    /// Runs `script` (sh) inside the namespace; its output.
    pub fn sh(&self, script: &str) -> Result<String, String> {
        sh(&format!("ip netns exec {} sh -c '{script}'", self.name))
    }
}

impl Drop for TestNetns {
    fn drop(&mut self) {
        let _ = sh(&format!("ip netns pids {} | xargs -r kill -9", self.name));
        let _ = sh(&format!("ip netns del {}", self.name));
    }
}
