//! Two server replicas with real packets, over three nodes: both `kpng
//! file --watch … to-api` on the same manifest, every agent given both
//! (`--api unix://S,unix://S2`). The serving replica is killed (SIGKILL)
//! while pods of every node connect through a Service: no connection is
//! lost, the agents move to the other replica without a full resync, and
//! a change made after the kill reaches every node. Run as root with the
//! `kpng` binary built (`cargo build -p kpng-cli`); otherwise it prints
//! SKIPPED and passes (not root) or fails naming the missing binary.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use kpng_lab::cluster::{AgentBackend, Cluster, pod_ip};
use kpng_lab::endpoints;
use kpng_lab::scenarios::service;

/// How long the cluster may take to converge after a change: the file
/// source looks every second and waits 0.5 s for the file to settle.
const CONVERGE: Duration = Duration::from_secs(30);

/// Connections per node's pod while the serving replica is killed.
const CONNECTIONS: usize = 400;

fn web(pods: &[(usize, usize)]) -> String {
    let items: Vec<String> = pods
        .iter()
        .map(|&(k, j)| format!("{{addresses: [{}], nodeName: node-{k}}}", pod_ip(k, j)))
        .collect();
    service(
        "web",
        "{clusterIP: 10.96.0.10, ports: [{name: http, port: 80, targetPort: 8080}]}",
        &format!("[{}]", items.join(", ")),
    )
}

/// Waits until 20 connections to the ClusterIP of `web` from pod 1 of
/// every node reach exactly `want`.
fn wait_everywhere(cluster: &Cluster, want: &[String]) {
    let want: BTreeSet<String> = want.iter().cloned().collect();
    let deadline = Instant::now() + CONVERGE;
    for k in 1..=cluster.nodes {
        loop {
            let lines = cluster.connect(&cluster.pod_ns(k, 1), "tcp", "10.96.0.10", 80, 20);
            if endpoints(&lines) == want && lines.len() == 20 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node-{k} never reached {want:?}: {lines:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn the_serving_replica_killed_under_traffic(backend: AgentBackend) {
    kpng_lab::require_cluster!(backend);
    let ep = |k| pod_ip(k, 0);
    let mut cluster = Cluster::new(3, 2, backend);
    cluster.write_manifest(&cluster.manifest(&[web(&[(1, 0), (2, 0), (3, 0)])]));
    cluster.start_server();
    cluster.start_replica();
    cluster.start_agents();
    cluster.wait_all_synced(CONVERGE);
    wait_everywhere(&cluster, &[ep(1), ep(2), ep(3)]);

    // Pods of every node connect through the Service while the serving
    // replica is killed.
    let clients: Vec<_> = (1..=3)
        .map(|k| {
            let ns = cluster.pod_ns(k, 1);
            cluster.spawn_connect(&ns, "tcp", "10.96.0.10", 80, CONNECTIONS)
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    cluster.kill_server_for_replica();
    let mut lost = Vec::new();
    for (k, client) in (1..=3).zip(clients) {
        let out = client.wait_with_output().expect("client");
        let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect();
        let answered = lines
            .iter()
            .filter(|l| {
                l.split_whitespace()
                    .next()
                    .is_some_and(|e| [ep(1), ep(2), ep(3)].iter().any(|x| x == e))
            })
            .count();
        lost.push((k, CONNECTIONS - answered));
    }
    println!(
        "connections lost while the serving replica was killed, per node (of {CONNECTIONS}): {lost:?}"
    );
    assert!(lost.iter().all(|(_, n)| *n == 0), "{lost:?}");

    // A change made after the kill reaches every node, through the other
    // replica.
    let at = cluster.write_manifest(&cluster.manifest(&[web(&[(1, 0), (2, 0)])]));
    cluster.wait_reload(at, CONVERGE);
    wait_everywhere(&cluster, &[ep(1), ep(2)]);
    for k in 1..=3 {
        let agent = cluster.agent(k).expect("running");
        let log = agent.log_text();
        assert!(
            log.contains("api-2.sock"),
            "node-{k}'s agent did not move to the other replica:\n{log}"
        );
        // One full round, the first: the move resumed from the view held.
        let full = log
            .lines()
            .filter(|l| l.contains(" synced ") && l.contains("full=true"))
            .count();
        assert_eq!(full, 1, "node-{k}'s full rounds:\n{log}");
    }
}

mod nft {
    use kpng_lab::cluster::AgentBackend;

    #[test]
    fn the_serving_replica_killed_under_traffic() {
        super::the_serving_replica_killed_under_traffic(AgentBackend::Nft);
    }
}

mod iptables {
    use kpng_lab::cluster::AgentBackend;

    #[test]
    fn the_serving_replica_killed_under_traffic() {
        super::the_serving_replica_killed_under_traffic(AgentBackend::Iptables);
    }
}
