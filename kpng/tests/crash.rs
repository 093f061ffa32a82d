//! Crash recovery: `kpng` is killed with SIGKILL at random points of a
//! large sync, in a network namespace, then restarted. Each time, the
//! ruleset must converge to exactly what a clean run programs (no stale
//! chain, set or element of the state before) and connections must work.
//! Run as root; otherwise it prints SKIPPED and passes. `KPNG_CRASH_RUNS`
//! sets the number of kills: 20 by default, to keep `cargo test` short;
//! `KPNG_CRASH_RUNS=50 cargo test -p kpng --test crash -- --nocapture`
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
        .args([
            "--node",
            "node-a",
            "to-nft",
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
    let after = dir.join(format!("{}-after.yaml", lab.prefix));
    std::fs::write(&before, manifest(800, 0)).expect("manifest");
    std::fs::write(&after, manifest(800, 400)).expect("manifest");

    // What a clean run programs for the state after.
    assert!(kpng(&reference, &after).status().expect("kpng").success());
    let want = ruleset(&reference);
    let start = Instant::now();
    assert!(kpng(&reference, &after).status().expect("kpng").success());
    let sync = start.elapsed();

    let node = lab.ns("node");
    let mut killed_midway = 0;
    for run in 0..runs {
        // The state before, applied whole.
        assert!(
            kpng(&node, &before).status().expect("kpng").success(),
            "run {run}"
        );
        // The state after, killed at a point spread over the sync.
        let mut child = kpng(&node, &after).spawn().expect("kpng");
        let at = sync.mul_f64((run as f64 + 0.5) / runs as f64);
        std::thread::sleep(at);
        let finished = child.try_wait().expect("wait").is_some();
        let _ = child.kill();
        let _ = child.wait();
        killed_midway += usize::from(!finished);
        // The restart converges to exactly the clean state.
        assert!(
            kpng(&node, &after).status().expect("kpng").success(),
            "run {run}"
        );
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
        "crash recovery: {runs} kills spread over a {:.0} ms sync ({killed_midway} while kpng still ran), each restart converged exactly",
        sync.as_secs_f64() * 1e3
    );
    let _ = std::fs::remove_file(&before);
    let _ = std::fs::remove_file(&after);
}
