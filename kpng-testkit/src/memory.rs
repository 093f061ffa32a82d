//! A memory cgroup of a test's own: a limit, the usage, the peak and the
//! OOM kills of what runs in it; removed on drop (its processes killed
//! first), also when the test fails.
//!
//! Machines mount either hierarchy: cgroup v2 with the memory controller
//! (`memory.max`, `memory.peak`, `memory.events`), or cgroup v1's memory
//! hierarchy (`memory.limit_in_bytes`, `memory.max_usage_in_bytes`,
//! `memory.oom_control`). [`MemoryCgroup::new`] takes v2 when its root
//! offers the memory controller to children, v1 otherwise. Both count
//! what the kernel allocates for the processes (the nf_tables objects a
//! process creates, socket buffers) beside their pages.
//!
//! # Example
//!
//! ```no_run
//! use kpng_testkit::memory::MemoryCgroup;
//!
//! let cgroup = MemoryCgroup::new("my-test").expect("a memory cgroup");
//! let mut child = cgroup.command(&["sleep", "1"]).spawn().expect("spawn");
//! cgroup.set_limit(Some(64 << 20)).expect("limit");
//! child.wait().expect("wait");
//! assert_eq!(cgroup.oom_kills(), 0);
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::bpf::{cgroup2_root, unique};

/// Which hierarchy a [`MemoryCgroup`] lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hierarchy {
    /// cgroup v2 (`memory.max`).
    V2,
    /// cgroup v1's memory hierarchy (`memory.limit_in_bytes`).
    V1,
}

/// A child memory cgroup; see the [module](self) documentation.
#[derive(Debug)]
pub struct MemoryCgroup {
    /// Its directory.
    pub path: PathBuf,
    /// Its hierarchy.
    pub hierarchy: Hierarchy,
}

/// The cgroup v1 memory hierarchy's root, from `/proc/self/mountinfo`.
fn v1_memory_root() -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let mut fields = right.split(' ');
        if fields.next()? != "cgroup" {
            return None;
        }
        let options = fields.nth(1)?;
        options
            .split(',')
            .any(|o| o == "memory")
            .then(|| left.split(' ').nth(4).map(PathBuf::from))?
    })
}

/// The cgroup v2 root, when it hands the memory controller to children.
fn v2_memory_root() -> Option<PathBuf> {
    let root = cgroup2_root()?;
    let control = std::fs::read_to_string(root.join("cgroup.subtree_control")).ok()?;
    control
        .split_whitespace()
        .any(|c| c == "memory")
        .then_some(root)
}

fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The value of `key` in a `key value` per line file.
fn keyed(path: &Path, key: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok())?
    })
}

impl MemoryCgroup {
    /// Makes one (named `<tag>-<pid>-<n>`), without a limit.
    ///
    /// # Errors
    /// When neither hierarchy offers the memory controller, or the
    /// directory cannot be made.
    pub fn new(tag: &str) -> Result<Self, String> {
        let (root, hierarchy) = if let Some(root) = v2_memory_root() {
            (root, Hierarchy::V2)
        } else if let Some(root) = v1_memory_root() {
            (root, Hierarchy::V1)
        } else {
            return Err("no memory cgroup: neither cgroup v2 with the memory controller in its root's subtree_control nor a cgroup v1 memory hierarchy is mounted".into());
        };
        let path = root.join(unique(tag));
        std::fs::create_dir(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Self { path, hierarchy })
    }

    /// Another handle on the cgroup at `path` (to read it from another
    /// thread); dropping it leaves the cgroup alone.
    pub fn view(path: PathBuf, hierarchy: Hierarchy) -> MemoryView {
        MemoryView(std::mem::ManuallyDrop::new(Self { path, hierarchy }))
    }

    fn file(&self, v2: &str, v1: &str) -> PathBuf {
        self.path.join(match self.hierarchy {
            Hierarchy::V2 => v2,
            Hierarchy::V1 => v1,
        })
    }

    /// `args` run inside this cgroup: the shell joins it, then execs them,
    /// so every child they start is in it too.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(r#"echo $$ > "$0/cgroup.procs" && exec "$@""#)
            .arg(&self.path)
            .args(args);
        command
    }

    /// Sets the limit in bytes (`None`: no limit). Lowering it below the
    /// usage makes the kernel reclaim, or kill when it cannot.
    ///
    /// # Errors
    /// When the kernel refuses the value.
    pub fn set_limit(&self, bytes: Option<u64>) -> Result<(), String> {
        let value = match (bytes, self.hierarchy) {
            (Some(b), _) => b.to_string(),
            (None, Hierarchy::V2) => "max".into(),
            (None, Hierarchy::V1) => "-1".into(),
        };
        let file = self.file("memory.max", "memory.limit_in_bytes");
        std::fs::write(&file, &value).map_err(|e| format!("{} = {value}: {e}", file.display()))
    }

    /// The memory charged now, in bytes (0 when unreadable).
    pub fn usage(&self) -> u64 {
        read_u64(&self.file("memory.current", "memory.usage_in_bytes")).unwrap_or(0)
    }

    /// The highest usage since the cgroup was made or
    /// [`reset_peak`](Self::reset_peak), in bytes (0 when unreadable).
    pub fn peak(&self) -> u64 {
        read_u64(&self.file("memory.peak", "memory.max_usage_in_bytes")).unwrap_or(0)
    }

    /// Starts the peak over from the current usage.
    ///
    /// # Errors
    /// When this kernel cannot (cgroup v2 before Linux 6.12).
    pub fn reset_peak(&self) -> Result<(), String> {
        let (file, value) = match self.hierarchy {
            Hierarchy::V2 => (self.path.join("memory.peak"), "reset"),
            Hierarchy::V1 => (self.path.join("memory.max_usage_in_bytes"), "0"),
        };
        std::fs::write(&file, value).map_err(|e| format!("{}: {e}", file.display()))
    }

    /// The processes the kernel killed here for want of memory.
    pub fn oom_kills(&self) -> u64 {
        keyed(
            &self.file("memory.events", "memory.oom_control"),
            "oom_kill",
        )
        .unwrap_or(0)
    }

    /// How much of the usage is anonymous memory (heaps and stacks) and
    /// how much is the kernel's (slab: nf_tables objects, sockets), in
    /// bytes, from `memory.stat`; `(0, 0)` when unreadable.
    pub fn anon_and_kernel(&self) -> (u64, u64) {
        let stat = self.path.join("memory.stat");
        match self.hierarchy {
            Hierarchy::V2 => (
                keyed(&stat, "anon").unwrap_or(0),
                keyed(&stat, "kernel").unwrap_or(0),
            ),
            Hierarchy::V1 => {
                let anon = keyed(&stat, "rss").unwrap_or(0);
                let kernel = read_u64(&self.path.join("memory.kmem.usage_in_bytes")).unwrap_or(0);
                (anon, kernel)
            }
        }
    }
}

/// A handle on a [`MemoryCgroup`] that does not remove it when dropped
/// ([`MemoryCgroup::view`]).
#[derive(Debug)]
pub struct MemoryView(std::mem::ManuallyDrop<MemoryCgroup>);

impl std::ops::Deref for MemoryView {
    type Target = MemoryCgroup;

    fn deref(&self) -> &MemoryCgroup {
        &self.0
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        let procs = self.path.join("cgroup.procs");
        for _ in 0..50 {
            let pids = std::fs::read_to_string(&procs).unwrap_or_default();
            if pids.trim().is_empty() {
                break;
            }
            for pid in pids.split_whitespace() {
                let _ = Command::new("kill").args(["-9", pid]).status();
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = std::fs::remove_dir(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_reads_the_named_line() {
        let dir = std::env::temp_dir().join(unique("kpng-testkit-keyed"));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("memory.events");
        std::fs::write(&file, "low 0\nhigh 3\noom 1\noom_kill 2\n").unwrap();
        assert_eq!(keyed(&file, "oom_kill"), Some(2));
        assert_eq!(keyed(&file, "oom"), Some(1));
        assert_eq!(keyed(&file, "max"), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_limit_holds_and_the_cgroup_goes_away() {
        if not_root() {
            return;
        }
        let Ok(cgroup) = MemoryCgroup::new("kpng-testkit-mem") else {
            return;
        };
        let path = cgroup.path.clone();
        cgroup.set_limit(Some(256 << 20)).unwrap();
        let limit = cgroup.file("memory.max", "memory.limit_in_bytes");
        assert_eq!(read_u64(&limit), Some(256 << 20));
        let status = cgroup.command(&["true"]).status().unwrap();
        assert!(status.success());
        assert_eq!(cgroup.oom_kills(), 0);
        drop(cgroup);
        assert!(!path.exists());
    }

    fn not_root() -> bool {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("Uid:"))
                    .and_then(|l| l.split_whitespace().nth(1).map(|u| u != "0"))
            })
            .unwrap_or(true)
    }
}
