//! What the `kpng` command's benches share: a test apiserver in a process
//! of its own, and a child's peak RSS and time.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Instant;

/// A test apiserver process (this bench binary in its serve mode: `args`
/// and then the kubeconfig path to write), with the kubeconfig to reach
/// it.
pub(crate) struct ApiServerProcess {
    child: std::process::Child,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
    /// The kubeconfig's path.
    pub(crate) kubeconfig: String,
}

impl ApiServerProcess {
    /// Starts this bench binary with `args` and the kubeconfig path, in
    /// network namespace `netns` (its loopback) when given; waits for it
    /// to print `ready`.
    pub(crate) fn start_in(
        netns: Option<&str>,
        args: &[&str],
        kubeconfig: &std::path::Path,
    ) -> Self {
        let exe = std::env::current_exe().unwrap();
        let mut command = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(exe);
                c
            }
            None => Command::new(exe),
        };
        let mut child = command
            .args(args)
            .arg(kubeconfig)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        assert_eq!(lines.next().unwrap().unwrap(), "ready");
        let kubeconfig = kubeconfig.to_str().unwrap().to_owned();
        Self {
            child,
            lines,
            kubeconfig,
        }
    }

    /// Stops it; returns how many list requests it served.
    pub(crate) fn stop(mut self) -> String {
        drop(self.child.stdin.take());
        let pages = self.lines.next().unwrap().unwrap();
        self.child.wait().unwrap();
        pages
    }
}

/// The serve mode: serves `script` until stdin closes, then prints how
/// many list requests it answered. In a process of its own: a child's
/// peak RSS as `wait4` reports it includes the RSS of the process it was
/// spawned from (the kernel folds the old address space's high-water mark
/// in at exec), so the bench's parent must stay small.
pub(crate) fn serve(script: kpng_testkit::apiserver::Script, kubeconfig: &str) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(kpng_testkit::apiserver::ApiServer::start(script));
    std::fs::write(kubeconfig, server.kubeconfig()).unwrap();
    println!("ready");
    let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
    let pages = server
        .requests()
        .iter()
        .filter(|r| !r.contains("watch=true"))
        .count();
    println!("{pages}");
}

/// Runs `kpng ARGS` to its end: its peak RSS in MiB (`wait4`) and the
/// time it took.
pub(crate) fn peak(args: &[&str]) -> (f64, f64) {
    peak_of(env!("CARGO_BIN_EXE_kpng"), args)
}

/// The `kpng` binaries a bench compares: `KPNG_BENCH_BINARIES`
/// (comma-separated paths, e.g. a build of an earlier commit and this
/// one), each row run with each in turn, in one run; by default the
/// binary built with the bench alone.
pub(crate) fn binaries() -> Vec<String> {
    match std::env::var("KPNG_BENCH_BINARIES") {
        Ok(list) if !list.trim().is_empty() => list.split(',').map(str::to_owned).collect(),
        _ => vec![env!("CARGO_BIN_EXE_kpng").to_owned()],
    }
}

/// Runs `program ARGS` to its end: its peak RSS in MiB (the largest of
/// it and its waited-for descendants, as `wait4` reports) and the time.
/// `KPNG_RSS_FLAGS` (whitespace-separated) is added to a `to-nft` command.
#[allow(clippy::zombie_processes)] // reaped by `wait4`, which clippy cannot see
pub(crate) fn peak_of(program: &str, args: &[&str]) -> (f64, f64) {
    let start = Instant::now();
    let extra = std::env::var("KPNG_RSS_FLAGS").unwrap_or_default();
    let extra: Vec<&str> = match args.contains(&"to-nft") {
        true => extra.split_whitespace().collect(),
        false => Vec::new(),
    };
    let child = Command::new(program)
        .args(args)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    // The child's log, read on a thread so it never blocks on a full pipe.
    let mut stderr = child.stderr.unwrap();
    let log = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        text
    });
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it for our child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `status` and `usage` are valid for writes; `pid` is our child.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let secs = start.elapsed().as_secs_f64();
    let log = log.join().unwrap_or_default();
    assert_eq!(waited, pid);
    assert_eq!(
        status,
        0,
        "{program} {args:?} exited with status {status}: {}",
        log.lines().rev().take(5).collect::<Vec<_>>().join(" | ")
    );
    (usage.ru_maxrss as f64 / 1024.0, secs)
}

/// The eBPF backend's real sync: `kpng file --input INPUT … to-ebpf
/// --once` loads its programs into a test cgroup and bpffs and writes the
/// maps. Returns its peak RSS in MiB, its time, and the kernel memory of
/// the maps in MiB (they stay pinned after it exits, until the bpffs
/// goes); `None`, having said why, where eBPF is unavailable.
pub(crate) fn ebpf_from_file(input: &str) -> Option<(f64, f64, f64)> {
    use kpng_testkit::bpf::{BpfFs, TestCgroup, unavailable};
    if let Some(why) = unavailable() {
        println!("ebpf: SKIPPED ({why})");
        return None;
    }
    let tag = std::process::id();
    let fs = BpfFs::new(&format!("kpng-bench-bpf-{tag}")).unwrap();
    let cgroup = TestCgroup::new(&format!("kpng-bench-cg-{tag}")).unwrap();
    let pins = fs.path.join("kpng");
    let (cgroup_path, pin_path) = (cgroup.path.to_str().unwrap(), pins.to_str().unwrap());
    let (mib, secs) = peak(&[
        "file",
        "--input",
        input,
        "--node",
        "node-0",
        "to-ebpf",
        "--once",
        "--cgroup-path",
        cgroup_path,
        "--bpf-pin-path",
        pin_path,
        "--north-south",
        "none",
        "--healthz-bind-address",
        "",
        "--metrics-bind-address",
        "",
        "--no-conntrack-cleanup",
        "--conntrack-max-per-core",
        "0",
        "--conntrack-tcp-timeout-established",
        "0",
        "--conntrack-tcp-timeout-close-wait",
        "0",
    ]);
    let kernel_mib = kpng_backend_ebpf::map_memory(&pins) as f64 / (1024.0 * 1024.0);
    drop(cgroup);
    drop(fs);
    Some((mib, secs, kernel_mib))
}

/// The elements of map `map` in table `ip kpng` of network namespace `ns`.
pub(crate) fn map_elements(ns: &str, map: &str) -> usize {
    Command::new("ip")
        .args(["netns", "exec", ns, "nft", "list", "map", "ip", "kpng", map])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).matches(" : ").count())
        .unwrap_or(0)
}

/// The real sync from the API: in a network namespace of its own (the
/// lab's, loopback up, deleted after), an apiserver started by `serve`
/// (given the namespace) and `kpng kube … to-nft --once`, which programs
/// the namespace over netlink. Returns its peak RSS in MiB, its time, and
/// the elements of map `map` read back.
pub(crate) fn applied_from_api(
    exe: &str,
    serve: impl FnOnce(&str) -> ApiServerProcess,
    map: &str,
) -> (f64, f64, usize) {
    let lab = kpng_lab::Lab::new();
    let ns = lab.ns("node");
    let apiserver = serve(&ns);
    let (mib, secs) = peak_of(
        "ip",
        &[
            "netns",
            "exec",
            &ns,
            exe,
            "kube",
            "--kubeconfig",
            &apiserver.kubeconfig,
            "--node",
            "node-0",
            "to-nft",
            "--once",
            "--healthz-bind-address",
            "",
            "--metrics-bind-address",
            "",
        ],
    );
    apiserver.stop();
    (mib, secs, map_elements(&ns, map))
}
