//! The distributed design with real packets, over three nodes: one `kpng
//! file --watch … to-api` server, one `kpng api … to-<backend>` agent in
//! each node's namespace (see `kpng_lab::cluster`). Each check sends
//! packets: cross-node ClusterIP, NodePort from outside to an endpoint on
//! another node (masqueraded, so the reply comes back the same way),
//! externalTrafficPolicy and internalTrafficPolicy Local, the health-check
//! node port of each node, a manifest change reaching every node, and an
//! agent's and the server's restart, and the same changes from the API
//! (`kpng kube … to-api` against a test apiserver, a change a watch
//! event); for nft, iptables and eBPF (socket
//! programs in a cgroup per node, tc on its fabric link, nft beside; the
//! EPERM of a dropped connection shows the socket programs at work). Run
//! as root with the `kpng` binary built (`cargo build -p kpng`);
//! otherwise it prints SKIPPED and passes (not root) or fails naming the
//! missing binary.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use kpng_lab::cluster::{AgentBackend, ApiSource, CLIENT_IP, Cluster, node_ip, pod_ip};
use kpng_lab::endpoints;
use kpng_lab::scenarios::service;

/// How long the cluster may take to converge after a change: the file
/// source looks every second and waits 0.5 s for the file to settle.
const CONVERGE: Duration = Duration::from_secs(30);

/// YAML for endpoints on these (node, pod) pairs, ready.
fn eps(pods: &[(usize, usize)]) -> String {
    let items: Vec<String> = pods
        .iter()
        .map(|&(k, j)| format!("{{addresses: [{}], nodeName: node-{k}}}", pod_ip(k, j)))
        .collect();
    format!("[{}]", items.join(", "))
}

/// What a pod's client sees of a connection its node drops: a timeout,
/// or with socket-level balancing an EPERM at once (no packet is sent).
fn dropped_locally(backend: AgentBackend) -> &'static str {
    if backend.sockets() {
        "ERROR [Errno 1] Operation not permitted"
    } else {
        "TIMEOUT"
    }
}

fn set(ips: &[String]) -> BTreeSet<String> {
    ips.iter().cloned().collect()
}

const WEB_PORTS: &str = "ports: [{name: http, port: 80, targetPort: 8080}, {name: dns, port: 53, protocol: UDP, targetPort: 5353}]";

fn web(pods: &[(usize, usize)]) -> String {
    service(
        "web",
        &format!("{{clusterIP: 10.96.0.10, {WEB_PORTS}}}"),
        &eps(pods),
    )
}

/// A cluster of three nodes with two pods each, the manifest written, the
/// server and every agent started and synced once.
fn started(backend: AgentBackend, items: &[String]) -> Cluster {
    let mut cluster = Cluster::new(3, 2, backend);
    cluster.write_manifest(&cluster.manifest(items));
    cluster.start_server();
    cluster.start_agents();
    cluster.wait_all_synced(CONVERGE);
    cluster
}

/// Waits until 20 connections to the ClusterIP of `web` from pod 1 of
/// every node in `nodes` reach exactly `want`.
fn wait_everywhere(cluster: &Cluster, nodes: &[usize], want: &[String]) {
    let want = set(want);
    let deadline = Instant::now() + CONVERGE;
    for &k in nodes {
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

fn cross_node_traffic_policies_and_health_checks(backend: AgentBackend) {
    kpng_lab::require_cluster!(backend);
    let cluster = started(
        backend,
        &[
            web(&[(2, 0), (3, 0)]),
            service(
                "np",
                "{type: NodePort, clusterIP: 10.96.0.20, ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30080}]}",
                &eps(&[(2, 0)]),
            ),
            service(
                "local",
                "{type: LoadBalancer, clusterIP: 10.96.0.21, externalTrafficPolicy: Local, healthCheckNodePort: 32000, ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30081}]}",
                &eps(&[(2, 0)]),
            ),
            service(
                "itp",
                "{clusterIP: 10.96.0.30, internalTrafficPolicy: Local, ports: [{name: http, port: 80, targetPort: 8080}]}",
                &eps(&[(1, 0), (2, 0)]),
            ),
        ],
    );
    let pod = |k| cluster.pod_ns(k, 1);

    // ClusterIP from a pod on node-1 to endpoints on node-2 and node-3,
    // TCP and UDP, not masqueraded (the endpoint sees the pod).
    let lines = cluster.connect(&pod(1), "tcp", "10.96.0.10", 80, 40);
    assert_eq!(lines.len(), 40, "{lines:?}");
    assert_eq!(
        endpoints(&lines),
        set(&[pod_ip(2, 0), pod_ip(3, 0)]),
        "{lines:?}"
    );
    let me = pod_ip(1, 1);
    assert!(lines.iter().all(|l| l.ends_with(&me)), "{lines:?}");
    let lines = cluster.connect(&pod(1), "udp", "10.96.0.10", 53, 40);
    assert_eq!(
        endpoints(&lines),
        set(&[pod_ip(2, 0), pod_ip(3, 0)]),
        "{lines:?}"
    );

    // NodePort from outside to node-1 and node-3, the endpoint on node-2:
    // masqueraded to the node the client reached, so the reply returns
    // through it.
    let client = cluster.client_ns();
    for k in [1, 3] {
        let lines = cluster.connect(&client, "tcp", &node_ip(k), 30080, 5);
        let want = format!("{} {}", pod_ip(2, 0), node_ip(k));
        assert!(lines.iter().all(|l| *l == want), "node-{k}: {lines:?}");
        assert_eq!(lines.len(), 5);
    }

    // externalTrafficPolicy Local: node-2 (the endpoint's) answers and the
    // client address is kept; node-1 and node-3 have no local endpoint
    // and drop.
    let lines = cluster.connect(&client, "tcp", &node_ip(2), 30081, 5);
    let want = format!("{} {CLIENT_IP}", pod_ip(2, 0));
    assert!(lines.iter().all(|l| *l == want), "{lines:?}");
    for k in [1, 3] {
        let line = cluster.connect(&client, "tcp", &node_ip(k), 30081, 1);
        assert_eq!(line, ["TIMEOUT"], "node-{k}");
    }

    // The health-check node port of each node: 200 with one local
    // endpoint on node-2, 503 with none elsewhere.
    for (k, status, local) in [(1, 503, 0), (2, 200, 1), (3, 503, 0)] {
        let (code, body) = cluster.http_get(&client, &format!("http://{}:32000/", node_ip(k)));
        assert_eq!(code, status, "node-{k}: {body}");
        let json: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(json["localEndpoints"], local, "node-{k}: {body}");
        assert_eq!(json["service"]["name"], "local", "{body}");
    }

    // internalTrafficPolicy Local: each node's pods reach only its own
    // endpoint; node-3 has none, so the ClusterIP drops there.
    for k in [1, 2] {
        let lines = cluster.connect(&pod(k), "tcp", "10.96.0.30", 80, 10);
        assert_eq!(
            endpoints(&lines),
            set(&[pod_ip(k, 0)]),
            "node-{k}: {lines:?}"
        );
        assert_eq!(lines.len(), 10);
    }
    let line = cluster.connect(&pod(3), "tcp", "10.96.0.30", 80, 1);
    assert_eq!(line, [dropped_locally(backend)], "node-3");
}

fn changes_and_restarts_reach_every_node(backend: AgentBackend) {
    kpng_lab::require_cluster!(backend);
    let all = [(1, 0), (2, 0), (3, 0)];
    let mut cluster = started(backend, &[web(&all)]);
    let ep = |k| pod_ip(k, 0);
    wait_everywhere(&cluster, &[1, 2, 3], &[ep(1), ep(2), ep(3)]);

    // An endpoint removed: every agent syncs the server's new revision, and
    // every node's kernel stops sending to it.
    let at = cluster.write_manifest(&cluster.manifest(&[web(&[(1, 0), (2, 0)])]));
    let (_, revision) = cluster.wait_reload(at, CONVERGE);
    cluster.wait_revision(revision, CONVERGE);
    wait_everywhere(&cluster, &[1, 2, 3], &[ep(1), ep(2)]);

    // node-1's agent killed: its rules stay and serve; a change made
    // meanwhile reaches the other nodes, not node-1, until it is back.
    cluster.kill_agent(1);
    wait_everywhere(&cluster, &[1], &[ep(1), ep(2)]);
    let at = cluster.write_manifest(&cluster.manifest(&[web(&[(2, 0), (3, 0)])]));
    let (_, revision) = cluster.wait_reload(at, CONVERGE);
    cluster.wait_revision(revision, CONVERGE);
    wait_everywhere(&cluster, &[2, 3], &[ep(2), ep(3)]);
    wait_everywhere(&cluster, &[1], &[ep(1), ep(2)]);
    cluster.start_agent(1);
    wait_everywhere(&cluster, &[1, 2, 3], &[ep(2), ep(3)]);

    // The server killed: every node keeps serving; the manifest changes
    // while it is down; the restarted server's state reaches every node
    // (the agents reconnect by themselves).
    cluster.kill_server();
    wait_everywhere(&cluster, &[1, 2, 3], &[ep(2), ep(3)]);
    cluster.write_manifest(&cluster.manifest(&[web(&[(1, 0)])]));
    cluster.start_server();
    wait_everywhere(&cluster, &[1, 2, 3], &[ep(1)]);
    for k in 1..=3 {
        let agent = cluster.agent(k).expect("running");
        assert!(
            agent.log_text().contains("reconnecting"),
            "node-{k}'s agent lost the server: {}",
            agent.log_text()
        );
    }
}

/// The server fed from the API (`kpng kube … to-api` against the lab's
/// test apiserver) instead of a file: a change is one watch event, which
/// reaches every node's kernel; a Service added is two; the server
/// restarted lists the current state and every node follows.
fn changes_from_the_api_reach_every_node(backend: AgentBackend) {
    kpng_lab::require_cluster!(backend);
    let all = [(1, 0), (2, 0), (3, 0)];
    let mut cluster = Cluster::new(3, 2, backend);
    let source = ApiSource::start(&cluster, &cluster.manifest(&[web(&all)]));
    cluster.start_kube_server(&source);
    cluster.start_agents();
    cluster.wait_all_synced(CONVERGE);
    let ep = |k| pod_ip(k, 0);
    wait_everywhere(&cluster, &[1, 2, 3], &[ep(1), ep(2), ep(3)]);

    // An endpoint removed at the source: one EndpointSlice MODIFIED.
    let before = cluster.synced_revision();
    let (_, events) = source.update(&cluster.manifest(&[web(&[(1, 0), (2, 0)])]));
    assert_eq!(events, 1, "one EndpointSlice changed");
    cluster.wait_revision(before + 1, CONVERGE);
    wait_everywhere(&cluster, &[1, 2, 3], &[ep(1), ep(2)]);

    // A Service added: its Service and EndpointSlice ADDED.
    let other = service(
        "other",
        "{clusterIP: 10.96.0.11, ports: [{name: http, port: 80, targetPort: 8080}]}",
        &eps(&[(3, 0)]),
    );
    let (_, events) = source.update(&cluster.manifest(&[web(&[(1, 0), (2, 0)]), other.clone()]));
    assert_eq!(events, 2, "a Service and its EndpointSlice added");
    for k in 1..=3 {
        let deadline = Instant::now() + CONVERGE;
        loop {
            let lines = cluster.connect(&cluster.pod_ns(k, 1), "tcp", "10.96.0.11", 80, 5);
            if endpoints(&lines) == set(&[ep(3)]) && lines.len() == 5 {
                break;
            }
            assert!(Instant::now() < deadline, "node-{k}: {lines:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    // The server restarted after a change it did not see: it lists the
    // source's current state, and every node follows.
    cluster.kill_server();
    source.update(&cluster.manifest(&[web(&[(3, 0)]), other]));
    cluster.start_kube_server(&source);
    wait_everywhere(&cluster, &[1, 2, 3], &[ep(3)]);
}

mod nft {
    use kpng_lab::cluster::AgentBackend;

    #[test]
    fn cross_node_traffic_policies_and_health_checks() {
        super::cross_node_traffic_policies_and_health_checks(AgentBackend::Nft);
    }

    #[test]
    fn changes_and_restarts_reach_every_node() {
        super::changes_and_restarts_reach_every_node(AgentBackend::Nft);
    }

    #[test]
    fn changes_from_the_api_reach_every_node() {
        super::changes_from_the_api_reach_every_node(AgentBackend::Nft);
    }
}

mod iptables {
    use kpng_lab::cluster::AgentBackend;

    #[test]
    fn cross_node_traffic_policies_and_health_checks() {
        super::cross_node_traffic_policies_and_health_checks(AgentBackend::Iptables);
    }

    #[test]
    fn changes_and_restarts_reach_every_node() {
        super::changes_and_restarts_reach_every_node(AgentBackend::Iptables);
    }

    #[test]
    fn changes_from_the_api_reach_every_node() {
        super::changes_from_the_api_reach_every_node(AgentBackend::Iptables);
    }
}

mod ebpf {
    use kpng_lab::cluster::AgentBackend;

    #[test]
    fn cross_node_traffic_policies_and_health_checks() {
        super::cross_node_traffic_policies_and_health_checks(AgentBackend::Ebpf);
    }

    #[test]
    fn changes_and_restarts_reach_every_node() {
        super::changes_and_restarts_reach_every_node(AgentBackend::Ebpf);
    }

    #[test]
    fn changes_from_the_api_reach_every_node() {
        super::changes_from_the_api_reach_every_node(AgentBackend::Ebpf);
    }
}
