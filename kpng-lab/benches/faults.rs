//! A cut of a third of the fleet, at scale: N node namespaces (see
//! `kpng_lab::cluster`), the server in a namespace of its own on the
//! fabric serving TCP with mutual TLS (`Cluster::serve_over_fabric`), an
//! agent per node (nftables) connecting across the fabric.
//!
//! ```text
//! cargo build --release -p kpng-cli
//! cargo bench -p kpng-lab --bench faults [-- --nodes 100 --services 20 --cut-seconds 30]
//! ```
//!
//! Every third node is cut off from the server (every packet between
//! them dropped on the fabric, no reset) for `--cut-seconds`; once the
//! server lists every cut node away (its keepalive), one endpoint is
//! removed, which changes every node's view. It prints when the server
//! saw the cut nodes away, the fleet view during the cut, then from the
//! heal: when each cut node reconnected (its agent's `connected … after
//! N failed attempts` line) and applied the change (`synced revision=R`),
//! p50/p99/max over the cut nodes; the server's CPU from the heal to the
//! whole fleet converged (against the same time idle before the heal),
//! and its peak RSS then, with the whole process tree's (server and
//! agents, RSS summed) sampled every 250 ms.
#![allow(missing_docs, clippy::unwrap_used)]

use std::time::{Duration, Instant, SystemTime};

use kpng_lab::cluster::{AgentBackend, Cluster, pod_ip};
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

/// p50, p99 and max of `samples`, in seconds.
fn percentiles(samples: &mut [f64]) -> (f64, f64, f64) {
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let i = ((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len()) - 1;
        samples[i]
    };
    (at(0.5), at(0.99), at(1.0))
}

fn secs(at: SystemTime, from: SystemTime) -> f64 {
    at.duration_since(from).unwrap_or_default().as_secs_f64()
}

/// The endpoint the change removes (on node-1, in svc-0 only).
const MOVING: &str = "10.244.1.200";

/// `services` ClusterIP Services, each with three endpoints on pods of
/// three consecutive nodes; svc-0 has a fourth, [`MOVING`], unless
/// `removed`.
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
                "{{clusterIP: 10.96.{}.{}, ports: [{{name: http, port: 80, targetPort: 8080}}]}}",
                i / 200,
                i % 200 + 10
            );
            service(&format!("svc-{i}"), &spec, &format!("[{}]", eps.join(", ")))
        })
        .collect();
    cluster.manifest(&items)
}

/// The server's resident memory now, in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The time of the first line of node `k`'s agent at or after `since`
/// that contains `text`.
fn logged(cluster: &Cluster, k: usize, text: &str, since: SystemTime) -> Option<SystemTime> {
    cluster
        .agent(k)?
        .log()
        .into_iter()
        .filter(|l| l.text.contains(text))
        .filter_map(|l| l.at)
        .find(|at| *at >= since)
}

fn synced(cluster: &Cluster, k: usize, revision: u64) -> Option<SystemTime> {
    cluster
        .agent(k)?
        .synced()
        .into_iter()
        .find(|(_, r)| *r >= revision)
        .map(|(at, _)| at)
}

fn main() {
    let backend = AgentBackend::Nft;
    if let Some(why) = kpng_lab::cluster::unavailable(backend) {
        println!("SKIPPED: {why}");
        return;
    }
    let nodes = num("--nodes", 100).max(3);
    let services = num("--services", 20).max(1);
    let cut_for = Duration::from_secs(num("--cut-seconds", 30) as u64);
    let cut: Vec<usize> = (1..=nodes).filter(|k| k % 3 == 0).collect();
    let kept: Vec<usize> = (1..=nodes).filter(|k| k % 3 != 0).collect();
    println!(
        "faults bench: {nodes} nodes (agents nftables, server over TCP + mTLS on the fabric), \
         {services} Services x 3 endpoints; {} nodes cut for {} s",
        cut.len(),
        cut_for.as_secs()
    );
    let t = Instant::now();
    let mut cluster = Cluster::without_servers(nodes, 1, backend);
    cluster.serve_over_fabric();
    println!("  cluster built: {:.1} s", t.elapsed().as_secs_f64());
    cluster.write_manifest(&manifest(&cluster, services, false));
    let start = SystemTime::now();
    cluster.start_server();
    cluster.start_agents();
    let first = cluster.wait_all_synced(Duration::from_secs(120 + nodes as u64));
    let slowest = first.iter().map(|t| secs(*t, start)).fold(0.0, f64::max);
    println!("  every agent's first sync: {slowest:.1} s after the server's start");
    let server_pid = cluster.server().expect("the server runs").pid();
    std::thread::sleep(Duration::from_secs(2));

    // The cut.
    let cut_at = Instant::now();
    cluster.faults(0, &cut);
    let away_deadline = cut_at + Duration::from_secs(40);
    let away = loop {
        let fleet = cluster.fleet();
        let away = fleet.listed.iter().filter(|n| n.streams == 0).count();
        if away >= cut.len() || Instant::now() > away_deadline {
            break away;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    println!(
        "  the server lists {away} of {} cut nodes away {:.1} s after the cut",
        cut.len(),
        cut_at.elapsed().as_secs_f64()
    );
    let written = cluster.write_manifest(&manifest(&cluster, services, true));
    let (reloaded, revision) = cluster.wait_reload(written, Duration::from_secs(30));
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut kept_latency = Vec::new();
    for &k in &kept {
        loop {
            if let Some(at) = synced(&cluster, k, revision) {
                kept_latency.push(secs(at, reloaded));
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node-{k} never synced {revision}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let (p50, p99, max) = percentiles(&mut kept_latency);
    println!(
        "  the change (revision {revision}) on the {} nodes not cut: reload to synced p50 {p50:.3} s, p99 {p99:.3} s, max {max:.3} s",
        kept.len()
    );
    std::thread::sleep(Duration::from_secs(2));
    let fleet = cluster.fleet();
    println!(
        "  fleet view during the cut: {} nodes, {} up to date, {} behind, {} away; worst {:.1} s behind",
        fleet.nodes,
        fleet.up_to_date,
        fleet.behind,
        fleet.away,
        fleet
            .listed
            .iter()
            .map(|n| n.seconds_behind)
            .fold(0.0, f64::max)
    );
    // The server's CPU idle, over as long as the heal will take (10 s).
    let idle_window = Duration::from_secs(10);
    let until_heal = cut_for.saturating_sub(cut_at.elapsed());
    if until_heal > idle_window {
        std::thread::sleep(until_heal - idle_window);
    }
    let idle_before = cluster.cpu_ms().0;
    let idle_start = Instant::now();
    std::thread::sleep(cut_for.saturating_sub(cut_at.elapsed()));
    let idle_ms_per_s =
        (cluster.cpu_ms().0 - idle_before) / idle_start.elapsed().as_secs_f64().max(1e-3);

    // The heal.
    let cpu_before = cluster.cpu_ms().0;
    cluster.faults(0, &[]);
    let healed = SystemTime::now();
    let heal = Instant::now();
    let (mut peak_server, mut peak_tree, mut last_sample) = (0u64, 0u64, None::<Instant>);
    let deadline = heal + Duration::from_secs(120);
    loop {
        peak_server = peak_server.max(rss_kib(server_pid));
        if last_sample.is_none_or(|at| at.elapsed() >= Duration::from_millis(250)) {
            peak_tree = peak_tree.max(cluster.memory().0);
            last_sample = Some(Instant::now());
        }
        if cut.iter().all(|&k| synced(&cluster, k, revision).is_some()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the cut nodes did not converge within 120 s of the heal"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let converged = heal.elapsed().as_secs_f64();
    let server_ms = cluster.cpu_ms().0 - cpu_before;
    let mut reconnected: Vec<f64> = cut
        .iter()
        .filter_map(|&k| logged(&cluster, k, "connected to", healed))
        .map(|at| secs(at, healed))
        .collect();
    let mut applied: Vec<f64> = cut
        .iter()
        .filter_map(|&k| synced(&cluster, k, revision))
        .map(|at| secs(at, healed))
        .collect();
    let (r50, r99, rmax) = percentiles(&mut reconnected);
    let (a50, a99, amax) = percentiles(&mut applied);
    let rmin = reconnected.first().copied().unwrap_or(0.0);
    println!(
        "  heal -> reconnected ({} of {} logged): min {rmin:.2} s, p50 {r50:.2} s, p99 {r99:.2} s, max {rmax:.2} s",
        reconnected.len(),
        cut.len()
    );
    println!(
        "  heal -> the change applied on the cut nodes: p50 {a50:.2} s, p99 {a99:.2} s, max {amax:.2} s; whole fleet converged {converged:.2} s after the heal"
    );
    println!(
        "  server CPU from the heal to convergence: {server_ms:.0} ms over {converged:.1} s ({:.0} ms/s; idle before the heal {idle_ms_per_s:.0} ms/s)",
        server_ms / converged.max(1e-3)
    );
    println!(
        "  peak RSS during the reconnections: server {:.1} MiB; whole process tree (server + {nodes} agents, RSS summed) {:.1} MiB",
        peak_server as f64 / 1024.0,
        peak_tree as f64 / 1024.0
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let fleet = cluster.fleet();
        if fleet.up_to_date as usize == nodes && fleet.behind == 0 && fleet.away == 0 {
            println!(
                "  fleet view after the heal: {} up to date, 0 behind, 0 away ({:.1} s after the heal)",
                fleet.up_to_date,
                heal.elapsed().as_secs_f64()
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the fleet view never showed every node up to date: {fleet:#?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}
