//! An API server that blinks, with real packets: watches dropped while
//! objects change, a resume answered `410 Gone` (as an HTTP status and as
//! an ERROR event), the apiserver down for seconds and back (with its
//! history, or with it compacted so that only a list works).
//!
//! - **Node-local**: `kpng kube --kubeconfig K --node node-a to-nft` in the
//!   lab's node namespace, against a test apiserver listening on that
//!   namespace's loopback ([`ApiSource::in_namespace`]); a pod client
//!   connects to ClusterIPs served by echo servers in other namespaces.
//! - **Server and agents**: `kpng kube … to-api` against the apiserver,
//!   an agent per node of a three-node cluster; every node's data plane
//!   must converge.
//!
//! After each fault the data plane must hold exactly the new state: an
//! endpoint removed while kpng was away is no longer reached (the stale
//! backend of cilium#48050), a Service added is, a Service deleted is
//! not. A whole relist that replaces every endpoint is applied at once,
//! while one in which most Services were really deleted is held by the
//! mass-deletion guard, as any other such input. Each test prints the
//! time from the apiserver's return to the data plane converged, read
//! from kpng's `synced` log lines. Run as root with the `kpng` binary
//! built (`cargo build -p kpng-cli`); otherwise it prints SKIPPED.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use kpng_backend_nft::NftBackend;
use kpng_lab::cluster::{AgentBackend, ApiSource, Cluster, Process, kpng_binary, pod_ip};
use kpng_lab::scenarios::{E1, E2, E3, lab, manifest, service};
use kpng_lab::{Lab, endpoints};
use kpng_testkit::apiserver::{GoneForm, Outage};

/// How long a data plane may take to converge after a fault ends: the
/// watch's backoff after seconds of failures reaches 3.2–6.4 s.
const CONVERGE: Duration = Duration::from_secs(40);

/// How long the apiserver stays down.
const DOWN: Duration = Duration::from_secs(5);

const PORTS: &str = "ports: [{name: http, port: 80, targetPort: 8080}]";

fn svc(name: &str, ip: &str, eps: &[&str]) -> String {
    let eps: Vec<String> = eps
        .iter()
        .map(|e| format!("{{addresses: [{e}]}}"))
        .collect();
    service(
        name,
        &format!("{{clusterIP: {ip}, {PORTS}}}"),
        &format!("[{}]", eps.join(", ")),
    )
}

/// What a probe may see of a ClusterIP: its endpoints, in a set.
fn set(ips: &[&str]) -> BTreeSet<String> {
    ips.iter().map(|s| (*s).to_owned()).collect()
}

/// The node-local proxy against its apiserver, in a lab of its own.
struct NodeLocal {
    lab: Lab,
    source: ApiSource,
    kpng: Process,
    dir: std::path::PathBuf,
}

impl Drop for NodeLocal {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl NodeLocal {
    /// The lab (e1, e2, e3 serving), the apiserver in its node namespace
    /// serving `items`, and `kpng kube … to-nft` there with `flags`,
    /// synced once.
    fn start(items: &[String], flags: &[&str]) -> Self {
        let lab = lab();
        let dir = std::env::temp_dir().join(format!("{}-api", lab.prefix));
        std::fs::create_dir_all(&dir).expect("a directory");
        let source = ApiSource::in_namespace(&lab.ns("node"), &dir, &manifest(items));
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &lab.ns("node")])
            .arg(kpng_binary())
            .args(["kube", "--kubeconfig"])
            .arg(source.kubeconfig())
            .args(["--node", kpng_lab::NODE, "to-nft"])
            .args([
                "--cluster-cidr",
                "10.244.0.0/16",
                "--service-cidr",
                "10.96.0.0/16",
            ])
            .args([
                "--metrics-bind-address",
                "",
                "--conntrack-max-per-core",
                "0",
            ])
            .args(["--healthz-bind-address", "127.0.0.1:10256"])
            .args(flags);
        let kpng = Process::spawn(command);
        let node = Self {
            lab,
            source,
            kpng,
            dir,
        };
        node.wait_synced(SystemTime::UNIX_EPOCH);
        node
    }

    fn wait_synced(&self, after: SystemTime) {
        let deadline = Instant::now() + CONVERGE;
        while !self.kpng.synced().iter().any(|(at, _)| *at >= after) {
            assert!(
                Instant::now() < deadline,
                "kpng did not sync:\n{}",
                self.kpng.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until 20 connections from the pod client to `ip` reach
    /// exactly `want` (none: every one fails).
    fn wait_reaches(&self, ip: &str, want: &[&str]) {
        let want = set(want);
        let deadline = Instant::now() + CONVERGE;
        loop {
            // Two probes of an address that must fail (each may wait 2 s).
            let count = if want.is_empty() { 2 } else { 20 };
            let lines = self.lab.connect("podc", "tcp", ip, 80, count);
            if endpoints(&lines) == want && lines.len() == count {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{ip} never reached exactly {want:?}: {lines:?}\n{}",
                self.kpng.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The time from `back` to kpng's sync of its latest revision (the
    /// data plane seen converged by packets already), in seconds.
    fn converged_after(&self, back: SystemTime) -> f64 {
        since(back, final_sync(&self.kpng))
    }

    fn held_back(&self) -> bool {
        self.kpng.log_text().contains("mass deletion held back")
    }
}

/// When `process` first synced the latest revision it synced.
fn final_sync(process: &Process) -> Option<SystemTime> {
    let synced = process.synced();
    let latest = synced.iter().map(|(_, r)| *r).max()?;
    synced
        .into_iter()
        .find(|(_, r)| *r == latest)
        .map(|(at, _)| at)
}

/// Seconds from `back` to `at` (0 when before, or none).
fn since(back: SystemTime, at: Option<SystemTime>) -> f64 {
    at.and_then(|at| at.duration_since(back).ok())
        .map_or(0.0, |d| d.as_secs_f64())
}

/// web (e1, e2, e3) and old (e3) before; while kpng is away, web loses e2,
/// old is deleted and new (e2) added.
fn before() -> Vec<String> {
    vec![
        svc("web", "10.96.0.10", &[E1, E2, E3]),
        svc("old", "10.96.0.11", &[E3]),
    ]
}

fn after() -> Vec<String> {
    vec![
        svc("web", "10.96.0.10", &[E1, E3]),
        svc("new", "10.96.0.12", &[E2]),
    ]
}

/// The data plane holds exactly [`after`]: no stale backend, the new
/// Service programmed, the deleted one gone.
fn node_holds_after(node: &NodeLocal) {
    node.wait_reaches("10.96.0.10", &[E1, E3]);
    node.wait_reaches("10.96.0.12", &[E2]);
    node.wait_reaches("10.96.0.11", &[]);
}

/// The watches held and dropped, the objects made those of `manifest`,
/// the history compacted or not, the watches let go: what a client sees
/// of a short blink.
fn blink(source: &ApiSource, manifest: &str, compact: bool) -> SystemTime {
    let server = source.server();
    server.hold_watches(true);
    server.drop_watches();
    source.update(manifest);
    if compact {
        server.compact();
    }
    let back = SystemTime::now();
    server.hold_watches(false);
    back
}

fn node_local_start() -> Option<NodeLocal> {
    if let Some(why) = kpng_lab::unavailable(<NftBackend as kpng_lab::LabBackend>::TOOLS) {
        eprintln!("SKIPPED: {why}");
        return None;
    }
    let node = NodeLocal::start(&before(), &[]);
    node.wait_reaches("10.96.0.10", &[E1, E2, E3]);
    node.wait_reaches("10.96.0.11", &[E3]);
    Some(node)
}

/// Watches dropped while objects change: kpng resumes from its
/// resourceVersion and the apiserver sends what it missed.
#[test]
fn node_local_resumes_a_dropped_watch_with_the_changes_made_meanwhile() {
    let Some(node) = node_local_start() else {
        return;
    };
    let back = blink(&node.source, &manifest(&after()), false);
    node_holds_after(&node);
    println!(
        "node-local, watch dropped and resumed: converged {:.2} s after the watches were let go",
        node.converged_after(back)
    );
}

/// The resume answered with an HTTP `410 Gone` (the history compacted):
/// kpng must list again and converge to the new state.
#[test]
fn node_local_lists_again_after_410_as_a_status() {
    let Some(node) = node_local_start() else {
        return;
    };
    node.source.server().answer_gone_as(GoneForm::Status);
    let back = blink(&node.source, &manifest(&after()), true);
    node_holds_after(&node);
    println!(
        "node-local, 410 as a status: converged {:.2} s after the watches were let go",
        node.converged_after(back)
    );
}

/// The same `410` as an ERROR event in the watch stream.
#[test]
fn node_local_lists_again_after_410_as_an_event() {
    let Some(node) = node_local_start() else {
        return;
    };
    node.source.server().answer_gone_as(GoneForm::Event);
    let back = blink(&node.source, &manifest(&after()), true);
    node_holds_after(&node);
    println!(
        "node-local, 410 as an event: converged {:.2} s after the watches were let go",
        node.converged_after(back)
    );
}

/// The apiserver down for [`DOWN`] while objects change: first refusing
/// connections and back with its history (kpng resumes), then closing
/// them unanswered and back with its history compacted, answering `410` as a status
/// (only a list works). The data plane keeps serving the old state while
/// the apiserver is down.
#[test]
fn node_local_follows_an_apiserver_down_and_back() {
    let Some(node) = node_local_start() else {
        return;
    };
    let server = node.source.server();
    server.go_down(Outage::Refuse);
    node.source.update(&manifest(&after()));
    std::thread::sleep(DOWN);
    node.wait_reaches("10.96.0.11", &[E3]);
    let back = SystemTime::now();
    server.come_back();
    node_holds_after(&node);
    println!(
        "node-local, apiserver down {} s (refused), history kept: converged {:.2} s after it came back",
        DOWN.as_secs(),
        node.converged_after(back)
    );

    server.answer_gone_as(GoneForm::Status);
    server.go_down(Outage::Close);
    node.source.update(&manifest(&before()));
    server.compact();
    std::thread::sleep(DOWN);
    node.wait_reaches("10.96.0.12", &[E2]);
    let back = SystemTime::now();
    server.come_back();
    node.wait_reaches("10.96.0.10", &[E1, E2, E3]);
    node.wait_reaches("10.96.0.11", &[E3]);
    node.wait_reaches("10.96.0.12", &[]);
    println!(
        "node-local, apiserver down {} s (closed), history compacted: converged {:.2} s after it came back",
        DOWN.as_secs(),
        node.converged_after(back)
    );
}

/// Twelve Services, each on e1. A relist (after a compacted history) in
/// which every endpoint changed (each Service now on e2 and e3) is no
/// mass deletion: it is applied at once. A relist in which ten of the
/// twelve Services were really deleted is held by the guard (the
/// Services stay programmed, `/healthz` says why), and applied once it
/// has lasted `--mass-delete-confirm-after`.
#[test]
fn node_local_whole_relist_is_applied_and_a_real_mass_deletion_is_held() {
    if let Some(why) = kpng_lab::unavailable(<NftBackend as kpng_lab::LabBackend>::TOOLS) {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let ip = |k: usize| format!("10.96.1.{k}");
    let services = |eps: &[&str], count: usize| -> Vec<String> {
        (0..count)
            .map(|k| svc(&format!("s{k}"), &ip(k), eps))
            .collect()
    };
    let confirm = Duration::from_secs(8);
    let node = NodeLocal::start(&services(&[E1], 12), &["--mass-delete-confirm-after", "8s"]);
    node.wait_reaches(&ip(0), &[E1]);
    node.wait_reaches(&ip(11), &[E1]);
    // The 410 as an event: what is tested here is the guard, not the
    // status form (the tests above).
    node.source.server().answer_gone_as(GoneForm::Event);

    // Every endpoint replaced while away: a whole relist, applied.
    let back = blink(&node.source, &manifest(&services(&[E2, E3], 12)), true);
    for k in [0, 5, 11] {
        node.wait_reaches(&ip(k), &[E2, E3]);
    }
    assert!(!node.held_back(), "{}", node.kpng.log_text());
    println!(
        "node-local, a relist replacing every endpoint of 12 Services: applied {:.2} s after the \
         watches were let go, not held",
        node.converged_after(back)
    );

    // Ten of twelve Services deleted while away, with their
    // EndpointSlices: held. The guard counts Services: whichever relist
    // lands first, a held Service stays programmed (its endpoints, or a
    // REJECT once the EndpointSlices' relist took them), never dropped
    // as an unallocated address (a timeout).
    let deleted_at = blink(&node.source, &manifest(&services(&[E2, E3], 2)), true);
    let deadline = Instant::now() + CONVERGE;
    while !node.held_back() {
        assert!(
            Instant::now() < deadline,
            "not held:\n{}",
            node.kpng.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let held = node.lab.connect("podc", "tcp", &ip(11), 80, 2);
    assert!(
        held.iter()
            .all(|l| l.starts_with("REFUSED") || l.starts_with(E2) || l.starts_with(E3)),
        "a held Service stays programmed: {held:?}"
    );
    node.wait_reaches(&ip(1), &[E2, E3]);
    let health = node
        .lab
        .in_node(&["curl", "-s", "-m", "2", "http://127.0.0.1:10256/healthz"]);
    assert!(health.contains("heldBack"), "{health}");
    // Confirmed once it lasted: the deleted Services go (their address
    // dropped as unallocated).
    let deadline = Instant::now() + CONVERGE;
    loop {
        let lines = node.lab.connect("podc", "tcp", &ip(11), 80, 2);
        if lines.iter().all(|l| l == "TIMEOUT") {
            break;
        }
        assert!(Instant::now() < deadline, "never deleted: {lines:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    node.wait_reaches(&ip(1), &[E2, E3]);
    let waited = deleted_at.elapsed().map_or(0.0, |d| d.as_secs_f64());
    assert!(
        waited >= confirm.as_secs_f64(),
        "applied only once confirmed ({waited:.1} s)"
    );
    assert!(
        node.kpng.log_text().contains("mass deletion confirmed"),
        "{}",
        node.kpng.log_text()
    );
}

// ---- The server and its agents ----

/// The cluster's web Service (10.96.0.10) on these pods, and more.
fn cluster_items(
    cluster: &Cluster,
    web: &[(usize, usize)],
    other: Option<(usize, usize)>,
) -> String {
    let eps = |pods: &[(usize, usize)]| {
        let items: Vec<String> = pods
            .iter()
            .map(|&(k, j)| format!("{{addresses: [{}], nodeName: node-{k}}}", pod_ip(k, j)))
            .collect();
        format!("[{}]", items.join(", "))
    };
    let mut items = vec![service(
        "web",
        &format!("{{clusterIP: 10.96.0.10, {PORTS}}}"),
        &eps(web),
    )];
    if let Some(pod) = other {
        items.push(service(
            "other",
            &format!("{{clusterIP: 10.96.0.11, {PORTS}}}"),
            &eps(&[pod]),
        ));
    }
    cluster.manifest(&items)
}

/// Waits until 10 connections to `ip` from pod 1 of every node reach
/// exactly `want` (none: two, and both fail).
fn wait_every_node(cluster: &Cluster, ip: &str, want: &[String]) {
    let want: BTreeSet<String> = want.iter().cloned().collect();
    let deadline = Instant::now() + CONVERGE;
    for k in 1..=cluster.nodes {
        loop {
            let count = if want.is_empty() { 2 } else { 10 };
            let lines = cluster.connect(&cluster.pod_ns(k, 1), "tcp", ip, 80, count);
            if endpoints(&lines) == want && lines.len() == count {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node-{k}: {ip} never reached exactly {want:?}: {lines:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The time from `back` to the last node's sync of the latest revision
/// (every node's data plane seen converged by packets already), in
/// seconds.
fn fleet_converged_after(cluster: &Cluster, back: SystemTime) -> f64 {
    let last = (1..=cluster.nodes)
        .filter_map(|k| cluster.agent(k))
        .filter_map(final_sync)
        .max();
    since(back, last)
}

/// A three-node cluster whose server reads the API: web on every node's
/// pod 0, other on node 3's pod 0.
fn cluster_start() -> Option<(Cluster, ApiSource)> {
    if let Some(why) = kpng_lab::cluster::unavailable(AgentBackend::Nft) {
        eprintln!("SKIPPED: {why}");
        return None;
    }
    let mut cluster = Cluster::new(3, 2, AgentBackend::Nft);
    let all = [(1, 0), (2, 0), (3, 0)];
    let source = ApiSource::start(&cluster, &cluster_items(&cluster, &all, Some((3, 0))));
    cluster.start_kube_server(&source);
    cluster.start_agents();
    cluster.wait_all_synced(CONVERGE);
    wait_every_node(
        &cluster,
        "10.96.0.10",
        &[pod_ip(1, 0), pod_ip(2, 0), pod_ip(3, 0)],
    );
    wait_every_node(&cluster, "10.96.0.11", &[pod_ip(3, 0)]);
    Some((cluster, source))
}

/// What changes while the server is away: web loses node 2's pod (the
/// stale backend to rule out), other is deleted.
fn cluster_after(cluster: &Cluster) -> String {
    cluster_items(cluster, &[(1, 0), (3, 0)], None)
}

fn cluster_holds_after(cluster: &Cluster) {
    wait_every_node(cluster, "10.96.0.10", &[pod_ip(1, 0), pod_ip(3, 0)]);
    wait_every_node(cluster, "10.96.0.11", &[]);
}

/// The server's watches dropped while objects change: it resumes and
/// every node follows.
#[test]
fn the_server_resumes_a_dropped_watch_and_every_node_follows() {
    let Some((cluster, source)) = cluster_start() else {
        return;
    };
    let back = blink(&source, &cluster_after(&cluster), false);
    cluster_holds_after(&cluster);
    println!(
        "server, watch dropped and resumed: every node converged {:.2} s after the watches were \
         let go",
        fleet_converged_after(&cluster, back)
    );
}

/// The server's resume answered `410` as a status, then (another blink)
/// as an event: it lists again, and every node converges each time.
#[test]
fn the_server_lists_again_after_410_and_every_node_follows() {
    let Some((cluster, source)) = cluster_start() else {
        return;
    };
    let server = source.server();
    server.answer_gone_as(GoneForm::Status);
    let back = blink(&source, &cluster_after(&cluster), true);
    cluster_holds_after(&cluster);
    println!(
        "server, 410 as a status: every node converged {:.2} s after the watches were let go",
        fleet_converged_after(&cluster, back)
    );
    server.answer_gone_as(GoneForm::Event);
    let back = blink(
        &source,
        &cluster_items(&cluster, &[(2, 0)], Some((1, 0))),
        true,
    );
    wait_every_node(&cluster, "10.96.0.10", &[pod_ip(2, 0)]);
    wait_every_node(&cluster, "10.96.0.11", &[pod_ip(1, 0)]);
    println!(
        "server, 410 as an event: every node converged {:.2} s after the watches were let go",
        fleet_converged_after(&cluster, back)
    );
}

/// The apiserver down for [`DOWN`] while objects change: refusing, back
/// with its history (the server resumes); then closing connections
/// unanswered, back with its history compacted (`410` as a status: the
/// server lists again), every endpoint replaced and a Service added
/// meanwhile: no agent holds it as a mass deletion. (Pod 1 of each node
/// is the client: an endpoint is never the client itself.)
#[test]
fn the_server_follows_an_apiserver_down_and_back() {
    let Some((cluster, source)) = cluster_start() else {
        return;
    };
    let server = source.server();
    server.go_down(Outage::Refuse);
    source.update(&cluster_after(&cluster));
    std::thread::sleep(DOWN);
    let back = SystemTime::now();
    server.come_back();
    cluster_holds_after(&cluster);
    println!(
        "server, apiserver down {} s (refused), history kept: every node converged {:.2} s after \
         it came back",
        DOWN.as_secs(),
        fleet_converged_after(&cluster, back)
    );

    server.answer_gone_as(GoneForm::Status);
    server.go_down(Outage::Close);
    source.update(&cluster_items(&cluster, &[(2, 0)], Some((1, 0))));
    server.compact();
    std::thread::sleep(DOWN);
    let back = SystemTime::now();
    server.come_back();
    wait_every_node(&cluster, "10.96.0.10", &[pod_ip(2, 0)]);
    wait_every_node(&cluster, "10.96.0.11", &[pod_ip(1, 0)]);
    println!(
        "server, apiserver down {} s (closed), history compacted: every node converged {:.2} s \
         after it came back",
        DOWN.as_secs(),
        fleet_converged_after(&cluster, back)
    );
    for k in 1..=cluster.nodes {
        let log = cluster.agent(k).map(Process::log_text).unwrap_or_default();
        assert!(!log.contains("mass deletion held back"), "node-{k}:\n{log}");
    }
}
