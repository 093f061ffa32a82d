//! The distributed design at scale: N node namespaces (see
//! `kpng_lab::cluster`), one `kpng file --watch … to-api` server and one
//! agent per node, each in its node's namespace programming its kernel.
//!
//! ```text
//! cargo build --release -p kpng-cli
//! cargo bench -p kpng-lab --bench cluster [-- --nodes 100 --backend nft|iptables|ebpf --services 20 --changes 3 --no-conntrack-cleanup --source file|api]
//! ```
//!
//! `--source api` runs the server from the API instead (`kpng kube …
//! to-api` against the lab's test apiserver, `kpng_lab::cluster::ApiSource`):
//! each change is one EndpointSlice MODIFIED event, and its time is from
//! the event's sending (the source) to each node's kernel.
//!
//! It prints the time to build the cluster, the time from the server's
//! start to every agent's first full sync, then for each change (the
//! manifest rewritten, one endpoint removed or put back, which changes
//! every node's view) the time from the change to each node's kernel
//! having it, p50/p99/max over the nodes: from the file written (this
//! includes the file source's polling, every 1 s, and its 0.5 s wait for
//! the file to settle) and from the server's reload of it. "In the
//! kernel" is the agent's `synced revision=R` log line, logged once the
//! backend's batch is applied; at the end every node's ruleset is listed
//! to check that it holds the last change. Memory is the whole process
//! tree's (server and agents): RSS summed, and PSS (shared pages divided).
//! The CPU the agents spend on each change is printed too: in this lab
//! every node shares one kernel, whose conntrack table is one hash table
//! for all namespaces, so each agent's conntrack cleanup (a dump of the
//! table after a change that removes UDP endpoints) walks all of it, and
//! the N agents' walks queue on the same cores; `--no-conntrack-cleanup`
//! runs the agents without it.
#![allow(missing_docs, clippy::unwrap_used)]

use std::time::{Duration, Instant, SystemTime};

use kpng_lab::cluster::{AgentBackend, ApiSource, Cluster, pod_ip};
use kpng_lab::scenarios::service;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn num(name: &str, default: usize) -> usize {
    arg(name).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// p50, p99 and max of `samples`, in ms.
fn percentiles(samples: &mut [Duration]) -> (f64, f64, f64) {
    samples.sort();
    let at = |q: f64| {
        let i = ((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len()) - 1;
        ms(samples[i])
    };
    (at(0.5), at(0.99), at(1.0))
}

fn since(at: SystemTime, from: SystemTime) -> Duration {
    at.duration_since(from).unwrap_or_default()
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// The endpoint that each change removes or puts back (on node-1, in no
/// other Service).
const MOVING: &str = "10.244.1.200";

/// `services` NodePort Services (svc-I at 10.96.I/200.I%200+10), each with
/// three endpoints on pods of three consecutive nodes; svc-0 has a fourth,
/// [`MOVING`], unless `removed`.
fn manifest(cluster: &Cluster, services: usize, removed: bool) -> String {
    let n = cluster.nodes;
    let items: Vec<String> = (0..services)
        .map(|i| {
            let mut eps: Vec<String> = (0..3)
                .map(|m| {
                    let k = (i * 3 + m) % n + 1;
                    format!("{{addresses: [{}], nodeName: node-{k}}}", pod_ip(k, 0))
                })
                .collect();
            if i == 0 && !removed {
                eps.push(format!("{{addresses: [{MOVING}], nodeName: node-1}}"));
            }
            let spec = format!(
                "{{type: NodePort, clusterIP: 10.96.{}.{}, ports: [{{name: http, port: 80, targetPort: 8080, nodePort: {}}}]}}",
                i / 200,
                i % 200 + 10,
                30000 + i
            );
            service(&format!("svc-{i}"), &spec, &format!("[{}]", eps.join(", ")))
        })
        .collect();
    cluster.manifest(&items)
}

fn main() {
    let backend = match arg("--backend").as_deref() {
        Some("iptables") => AgentBackend::Iptables,
        Some("ebpf") => AgentBackend::Ebpf,
        _ => AgentBackend::Nft,
    };
    if let Some(why) = kpng_lab::cluster::unavailable(backend) {
        println!("SKIPPED: {why}");
        return;
    }
    let nodes = num("--nodes", 100);
    let services = num("--services", 20).max(1);
    let changes = num("--changes", 3);
    println!(
        "cluster bench: {nodes} nodes, {services} NodePort Services x 3 endpoints, backend {}{}",
        backend.name(),
        if std::env::args().any(|a| a == "--no-conntrack-cleanup") {
            ", agents with --no-conntrack-cleanup"
        } else {
            ""
        }
    );

    let t = Instant::now();
    let mut cluster = Cluster::without_servers(nodes, 1, backend);
    if std::env::args().any(|a| a == "--no-conntrack-cleanup") {
        cluster.agent_flags.push("--no-conntrack-cleanup".into());
    }
    println!(
        "  cluster built ({} namespaces): {:.1} s",
        2 + 2 * nodes,
        t.elapsed().as_secs_f64()
    );

    let mut removed = false;
    let from_api = arg("--source").as_deref() == Some("api");
    let start;
    let source = if from_api {
        let source = ApiSource::start(&cluster, &manifest(&cluster, services, removed));
        start = SystemTime::now();
        cluster.start_kube_server(&source);
        println!("  source: the API (kpng kube ... to-api against the lab's apiserver)");
        Some(source)
    } else {
        cluster.write_manifest(&manifest(&cluster, services, removed));
        start = SystemTime::now();
        cluster.start_server();
        None
    };
    cluster.start_agents();
    let spawned = SystemTime::now();
    let timeout = Duration::from_secs(120 + nodes as u64);
    let mut first: Vec<Duration> = cluster
        .wait_all_synced(timeout)
        .into_iter()
        .map(|at| since(at, start))
        .collect();
    let (p50, p99, max) = percentiles(&mut first);
    println!(
        "  first full sync, from the server's start ({:.0} ms to spawn server and agents): all {nodes} nodes {max:.0} ms (p50 {p50:.0}, p99 {p99:.0})",
        ms(since(spawned, start))
    );
    // What the agents start after their first sync (the removal of
    // kube-proxy's leftovers) ends first.
    std::thread::sleep(Duration::from_secs(2));
    let (rss, pss, count) = cluster.memory();
    println!(
        "  memory after the first sync, {count} processes: RSS sum {:.1} MiB, PSS sum {:.1} MiB",
        mib(rss),
        mib(pss)
    );

    // What the agents spend with nothing to do, to set against what a
    // change costs them.
    let idle = cluster.cpu_ms();
    std::thread::sleep(Duration::from_secs(3));
    let idle = (cluster.cpu_ms().1 - idle.1) / 3.0;
    println!(
        "  idle CPU of the agents: {idle:.0} ms a second ({:.2} ms a node)",
        idle / nodes as f64
    );

    for c in 1..=changes {
        std::thread::sleep(Duration::from_millis(1500));
        removed = !removed;
        let cpu_before = cluster.cpu_ms();
        if let Some(source) = &source {
            let before = cluster.synced_revision();
            let (sent, events) = source.update(&manifest(&cluster, services, removed));
            assert_eq!(events, 1, "one EndpointSlice changed");
            let applied = cluster.wait_revision(before + 1, Duration::from_secs(60));
            let cpu_after = cluster.cpu_ms();
            let mut from_event: Vec<Duration> = applied.iter().map(|t| since(*t, sent)).collect();
            let (e50, e99, emax) = percentiles(&mut from_event);
            println!(
                "  change {c} ({}; revision {}): watch event sent -> node kernel, {} nodes: p50 {e50:.1} ms, p99 {e99:.1} ms, max {emax:.1} ms",
                if removed {
                    "an endpoint removed"
                } else {
                    "the endpoint back"
                },
                before + 1,
                applied.len()
            );
            let agents_cpu = cpu_after.1 - cpu_before.1;
            println!(
                "    CPU for the change: server {:.0} ms, agents {agents_cpu:.0} ms ({:.1} ms a node; 10 ms ticks)",
                cpu_after.0 - cpu_before.0,
                agents_cpu / applied.len().max(1) as f64
            );
            continue;
        }
        let at = cluster.write_manifest(&manifest(&cluster, services, removed));
        let (reloaded, revision) = cluster.wait_reload(at, Duration::from_secs(30));
        let applied = cluster.wait_revision(revision, Duration::from_secs(60));
        let cpu_after = cluster.cpu_ms();
        let mut from_write: Vec<Duration> = applied.iter().map(|t| since(*t, at)).collect();
        let mut from_reload: Vec<Duration> = applied.iter().map(|t| since(*t, reloaded)).collect();
        let (w50, w99, wmax) = percentiles(&mut from_write);
        let (r50, r99, rmax) = percentiles(&mut from_reload);
        println!(
            "  change {c} ({}; revision {revision}): file written -> server reloaded {:.0} ms",
            if removed {
                "an endpoint removed"
            } else {
                "the endpoint back"
            },
            ms(since(reloaded, at))
        );
        println!(
            "    server reload -> node kernel, {} nodes: p50 {r50:.1} ms, p99 {r99:.1} ms, max {rmax:.1} ms",
            applied.len()
        );
        println!(
            "    file written  -> node kernel:            p50 {w50:.1} ms, p99 {w99:.1} ms, max {wmax:.1} ms"
        );
        let agents_cpu = cpu_after.1 - cpu_before.1;
        println!(
            "    CPU for the change: server {:.0} ms, agents {agents_cpu:.0} ms ({:.1} ms a node; 10 ms ticks)",
            cpu_after.0 - cpu_before.0,
            agents_cpu / applied.len().max(1) as f64
        );
    }

    // Every node's kernel holds the last state.
    let wrong: Vec<usize> = (1..=nodes)
        .filter(|&k| cluster.rules(k).contains(MOVING) == removed)
        .collect();
    assert!(
        wrong.is_empty(),
        "nodes whose rules do not hold the last change: {wrong:?}"
    );
    println!("  checked: every node's ruleset holds the last change");
    let (rss, pss, count) = cluster.memory();
    println!(
        "  memory at the end, {count} processes: RSS sum {:.1} MiB ({:.1} MiB a process), PSS sum {:.1} MiB",
        mib(rss),
        mib(rss) / count.max(1) as f64,
        mib(pss)
    );
}
