//! Crash recovery: `kpng` is killed with SIGKILL at points spread over a
//! large sync, in a network namespace, then restarted onto a *different*,
//! smaller state (the honest case: a restart onto the same state cannot
//! tell whose transaction landed last). Each time, the ruleset must be
//! exactly what a clean run of the restart's state programs: nothing of
//! the killed run may land after the restart, and no stale chain, set or
//! element stays. Connections must work. The nft backend writes over
//! netlink, so the kernel commits a killed run's batch whole or not at
//! all; the iptables backend runs `iptables-restore`, which must die with
//! kpng.
//! Run as root; otherwise it prints SKIPPED and passes. `KPNG_CRASH_RUNS`
//! sets the number of kills: 20 by default, to keep `cargo test` short;
//! `KPNG_CRASH_RUNS=50 cargo test -p kpng-cli --test crash -- --nocapture`
//! runs the full 50 and prints the count.

use std::process::{Command, Stdio};
use std::time::Instant;

use kpng_lab::{Lab, settle, unavailable};

/// A manifest of `services` ClusterIP Services with 5 endpoints each, the
/// last one real (10.96.0.200 to the lab's e1).
fn manifest(services: usize, salt: usize) -> String {
    let mut out = String::from(
        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Node\n  metadata: {name: node-a}\n  status: {addresses: [{type: InternalIP, address: 192.168.50.1}]}\n",
    );
    let mut service = |name: &str, ip: &str, eps: &[String]| {
        out.push_str(&format!(
            "- apiVersion: v1\n  kind: Service\n  metadata: {{namespace: t, name: {name}}}\n  spec: {{clusterIP: {ip}, ports: [{{name: http, port: 80, targetPort: 8080}}]}}\n- apiVersion: discovery.k8s.io/v1\n  kind: EndpointSlice\n  metadata: {{namespace: t, name: {name}-1, labels: {{kubernetes.io/service-name: {name}}}}}\n  addressType: IPv4\n  endpoints: [{}]\n  ports: [{{name: http, port: 8080, protocol: TCP}}]\n",
            eps.iter()
                .map(|e| format!("{{addresses: [{e}], nodeName: node-b}}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    };
    for i in 0..services {
        let eps: Vec<String> = (0..5)
            .map(|j| {
                let n = (i + salt) * 5 + j;
                format!("10.245.{}.{}", n / 250, n % 250 + 1)
            })
            .collect();
        service(
            &format!("s{}", i + salt),
            &format!("10.96.{}.{}", 10 + (i + salt) / 250, (i + salt) % 250 + 1),
            &eps,
        );
    }
    service("real", "10.96.0.200", &["10.244.1.10".to_owned()]);
    out
}

fn ruleset(ns: &str) -> Vec<String> {
    Lab::nft_state(ns)
}

fn kpng(ns: &str, input: &std::path::Path) -> Command {
    kpng_with_path(ns, input, None, &["to-nft"])
}

/// `kpng` with `dir` first in its `PATH` (where a test puts its own
/// tools), programming through `sink` (`to-nft`, `to-iptables ...`).
fn kpng_with_path(
    ns: &str,
    input: &std::path::Path,
    dir: Option<&std::path::Path>,
    sink: &[&str],
) -> Command {
    let mut command = Command::new("ip");
    command
        .args([
            "netns",
            "exec",
            ns,
            env!("CARGO_BIN_EXE_kpng"),
            "file",
            "--input",
        ])
        .arg(input)
        .args(["--node", "node-a"])
        .args(sink)
        .args([
            "--once",
            "--cluster-cidr",
            "10.244.0.0/16",
            "--healthz-bind-address",
            "",
            "--metrics-bind-address",
            "",
        ])
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(dir) = dir {
        let path = std::env::var("PATH").unwrap_or_default();
        command.env("PATH", format!("{}:{path}", dir.display()));
        // The wrapper's temporary files go where the test cleans up.
        command.env("TMPDIR", dir);
    }
    command
}

#[test]
fn sigkill_at_random_points_then_restart_converges_exactly() {
    if let Some(why) = unavailable(&["nft"]) {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let runs: usize = std::env::var("KPNG_CRASH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let mut lab = Lab::new();
    lab.host("podc", &["10.244.1.99"], &[]);
    lab.host("e1", &["10.244.1.10"], &[]);
    lab.serve("e1", "10.244.1.10");
    let reference = lab.ns("ref");
    let _ = Command::new("ip")
        .args(["netns", "add", &reference])
        .status();
    struct Drop1(String);
    impl Drop for Drop1 {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
        }
    }
    let _reference_guard = Drop1(reference.clone());

    let dir = std::env::temp_dir();
    let before = dir.join(format!("{}-before.yaml", lab.prefix));
    let killed = dir.join(format!("{}-killed.yaml", lab.prefix));
    let after = dir.join(format!("{}-after.yaml", lab.prefix));
    std::fs::write(&before, manifest(800, 0)).expect("manifest");
    std::fs::write(&killed, manifest(800, 400)).expect("manifest");
    std::fs::write(&after, manifest(200, 1000)).expect("manifest");

    // How long the killed run's sync takes, from a clean run of it.
    assert!(kpng(&reference, &killed).status().expect("kpng").success());
    let start = Instant::now();
    assert!(kpng(&reference, &killed).status().expect("kpng").success());
    let sync = start.elapsed();
    // What a clean run programs for the restart's state.
    assert!(kpng(&reference, &after).status().expect("kpng").success());
    let want = ruleset(&reference);

    let node = lab.ns("node");
    let mut killed_midway = 0;
    for run in 0..runs {
        // The state before, applied whole.
        assert!(
            kpng(&node, &before).status().expect("kpng").success(),
            "run {run}"
        );
        // Another large state, killed at a point spread over its sync.
        let mut child = kpng(&node, &killed).spawn().expect("kpng");
        let at = sync.mul_f64((run as f64 + 0.5) / runs as f64);
        std::thread::sleep(at);
        let finished = child.try_wait().expect("wait").is_some();
        let _ = child.kill();
        let _ = child.wait();
        killed_midway += usize::from(!finished);
        // The restart, onto the smaller state, converges to exactly what
        // a clean run of it programs.
        assert!(
            kpng(&node, &after).status().expect("kpng").success(),
            "run {run}"
        );
        // Give a child of the killed run the time of a whole sync to land
        // its transaction, if it survived: it must not have.
        std::thread::sleep(sync);
        let got = ruleset(&node);
        assert!(
            got == want,
            "run {run} (killed after {at:?}): the ruleset differs from a clean run"
        );
    }
    settle();
    assert_eq!(
        lab.once("podc", "tcp", "10.96.0.200", 80),
        "10.244.1.10 10.244.1.99",
        "connections work"
    );
    println!(
        "crash recovery: {runs} kills spread over a {:.0} ms sync ({killed_midway} while kpng still ran), each restart onto another state converged exactly",
        sync.as_secs_f64() * 1e3
    );
    let _ = std::fs::remove_file(&before);
    let _ = std::fs::remove_file(&killed);
    let _ = std::fs::remove_file(&after);
}

/// The race a child process opens, made certain: kpng is killed while its
/// `iptables-restore` child holds a whole large transaction it has not
/// committed yet (a wrapper waits 3 s before running the real one, for
/// large input only). The restart, onto a small state, commits at once.
/// Had the child outlived kpng, it would commit the large state after the
/// restart's; it must die with kpng instead.
#[test]
fn a_killed_kpng_leaves_no_child_to_commit_after_its_restart() {
    if let Some(why) = unavailable(&["nft", "iptables-nft-restore"]) {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let lab = Lab::new();
    let dir = std::env::temp_dir().join(format!("{}-slow-restore", lab.prefix));
    std::fs::create_dir_all(&dir).expect("dir");
    struct Cleanup(std::path::PathBuf);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _cleanup = Cleanup(dir.clone());
    let killed = dir.join("killed.yaml");
    let after = dir.join("after.yaml");
    std::fs::write(&killed, manifest(800, 400)).expect("manifest");
    std::fs::write(&after, manifest(20, 1000)).expect("manifest");
    let marker = dir.join("holding");
    for tool in ["iptables-nft-restore", "ip6tables-nft-restore"] {
        let real = ["/usr/sbin", "/sbin", "/usr/bin"]
            .into_iter()
            .map(|d| std::path::Path::new(d).join(tool))
            .find(|p| p.exists())
            .expect("iptables installed");
        let wrapper = dir.join(tool);
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\nscript=$(mktemp)\ncat > \"$script\"\n\
                 if [ \"$(wc -c < \"$script\")\" -gt 200000 ]; then touch {marker}; sleep 3; fi\n\
                 {real} \"$@\" < \"$script\"; rc=$?; rm -f \"$script\"; exit $rc\n",
                marker = marker.display(),
                real = real.display(),
            ),
        )
        .expect("wrapper");
        Command::new("chmod")
            .args(["+x"])
            .arg(&wrapper)
            .status()
            .expect("chmod");
    }
    let iptables = ["to-iptables", "--iptables-mode", "nft"];

    // The lab made (and deletes) the node namespace; the reference is ours.
    let reference = lab.ns("ref");
    let node = lab.ns("node");
    let _ = Command::new("ip")
        .args(["netns", "add", &reference])
        .status();
    struct DelNs(String);
    impl Drop for DelNs {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
        }
    }
    let _reference = DelNs(reference.clone());
    /// Kills kpng (its child dies with it) when the test ends early.
    struct KillOnDrop(std::process::Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let clean = kpng_with_path(&reference, &after, None, &iptables).status();
    assert!(clean.expect("kpng").success());
    let want = ruleset(&reference);

    for run in 0..3 {
        let _ = std::fs::remove_file(&marker);
        let mut child = KillOnDrop(
            kpng_with_path(&node, &killed, Some(&dir), &iptables)
                .spawn()
                .expect("kpng"),
        );
        let waited = Instant::now();
        while !marker.exists() {
            assert!(
                child.0.try_wait().expect("wait").is_none(),
                "run {run}: kpng ended before iptables-restore got the large input"
            );
            assert!(
                waited.elapsed().as_secs() < 120,
                "run {run}: iptables-restore never got the large input"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        // kpng dies with its whole transaction handed over, uncommitted.
        drop(child);
        assert!(
            kpng_with_path(&node, &after, Some(&dir), &iptables)
                .status()
                .expect("kpng")
                .success(),
            "run {run}"
        );
        // Longer than the wrapper holds the large transaction.
        std::thread::sleep(std::time::Duration::from_secs(4));
        assert!(
            ruleset(&node) == want,
            "run {run}: the killed run's transaction landed after the restart"
        );
    }
}
