//! What the kpng binary's integration tests share: a network namespace of
//! the test's own.

// Each test binary uses a part of it.
#![allow(dead_code)]

use std::process::{Child, Command, Output, Stdio};

/// What a finished command gave: exit code (-1 when killed), stdout and
/// stderr as text.
pub(crate) fn text(out: &Output) -> (i32, String, String) {
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A network namespace of the test's own (loopback up), deleted on drop
/// with the processes started in it (`children`), also when the test
/// fails; `None` (and SKIPPED printed) when not root. Its name is `tag`
/// and the test process's id: tags differ between tests of one binary.
pub(crate) struct Namespace {
    pub(crate) name: String,
    pub(crate) children: Vec<Child>,
}

impl Namespace {
    pub(crate) fn new(tag: &str) -> Option<Self> {
        let root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
        if !root {
            eprintln!("SKIPPED: not root");
            return None;
        }
        let name = format!("{tag}{}", std::process::id());
        let added = Command::new("ip").args(["netns", "add", &name]).status();
        assert!(added.is_ok_and(|s| s.success()), "ip netns add {name}");
        let namespace = Self {
            name,
            children: Vec::new(),
        };
        namespace.run(&["ip", "link", "set", "lo", "up"], None);
        Some(namespace)
    }

    /// `args` run in the namespace.
    pub(crate) fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.name]).args(args);
        command
    }

    /// Runs `args` in the namespace with `input` on its stdin; its stdout.
    /// It must succeed.
    pub(crate) fn run(&self, args: &[&str], input: Option<&str>) -> String {
        use std::io::Write as _;
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let mut stdin = child.stdin.take().expect("stdin");
        stdin
            .write_all(input.unwrap_or_default().as_bytes())
            .expect("input");
        drop(stdin);
        let out = child.wait_with_output().expect("run");
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A shell line run in the namespace: its standard output. It must
    /// succeed.
    pub(crate) fn sh(&self, line: &str) -> String {
        self.run(&["sh", "-c", line], None)
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}
