//! Direct server return with real packets, in a dual-stack cluster of
//! namespaces (as root; skipped otherwise): a client outside reaches a
//! NodePort or external IP on node-1 whose endpoint runs on node-2, with
//! the agents' eBPF tc programs in `--load-balancer-mode dsr`. The
//! endpoint sees the client's address, the client gets its replies from
//! the address it sent to (a connected socket takes no other), and no
//! reply crosses node-1 (a counter in node-1's prerouting hook of packets
//! from node-2's pods stays at zero, where the masqueraded control's
//! replies count). Every probe is also checked against `kpng explain`.
#![allow(missing_docs)]

use std::time::Duration;

use kpng_lab::cluster::{
    AgentBackend, CLIENT_IP, CLIENT_IP6, Cluster, node_ip, node_ip6, pod_ip, pod_ip6,
};

const CONVERGE: Duration = Duration::from_secs(30);

/// A dual-stack NodePort Service `name` (ClusterIPs 10.96.0.N and
/// fd00:96::N), TCP 80 and UDP 53 on node ports `np` and `np + 1`, the
/// external IPs 203.0.113.N and 2001:db8::N, annotated with `mode` (when
/// given), served by pod 0 of node-2 in both families.
fn dual(name: &str, n: u8, np: u16, mode: Option<&str>) -> String {
    let annotations = mode
        .map(|m| format!(", annotations: {{kpng.io/load-balancer-mode: {m}}}"))
        .unwrap_or_default();
    let slice = |family: &str, ip: &str| {
        format!(
            r#"- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {{namespace: t, name: {name}-{family}, labels: {{kubernetes.io/service-name: {name}}}}}
  addressType: {family}
  endpoints: [{{addresses: ["{ip}"], nodeName: node-2}}]
  ports: [{{name: http, port: 8080, protocol: TCP}}, {{name: dns, port: 5353, protocol: UDP}}]
"#
        )
    };
    format!(
        r#"- apiVersion: v1
  kind: Service
  metadata: {{namespace: t, name: {name}{annotations}}}
  spec: {{type: NodePort, clusterIP: 10.96.0.{n}, clusterIPs: [10.96.0.{n}, "fd00:96::{n}"], ipFamilies: [IPv4, IPv6], ipFamilyPolicy: RequireDualStack, externalIPs: [203.0.113.{n}, "2001:db8::{n}"], ports: [{{name: http, port: 80, targetPort: 8080, nodePort: {np}}}, {{name: dns, port: 53, protocol: UDP, targetPort: 5353, nodePort: {}}}]}}
{}{}"#,
        np + 1,
        slice("IPv4", &pod_ip(2, 0)),
        slice("IPv6", &pod_ip6(2, 0)),
    )
}

/// Waits until `host:port` answers the client over TCP.
fn wait_served(cluster: &Cluster, host: &str, port: u16) {
    let deadline = std::time::Instant::now() + CONVERGE;
    loop {
        let lines = cluster.connect(&cluster.client_ns(), "tcp", host, port, 1);
        if lines.first().is_some_and(|l| {
            !l.starts_with("TIMEOUT") && !l.starts_with("ERROR") && !l.starts_with("REFUSED")
        }) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{host}:{port} never served: {lines:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `count` probes of `proto` from the client to `host:port`, each of
/// which must read `want`.
fn probe(cluster: &Cluster, proto: &str, host: &str, port: u16, want: &str) {
    let lines = cluster.connect(&cluster.client_ns(), proto, host, port, 5);
    assert!(
        lines.len() == 5 && lines.iter().all(|l| l == want),
        "{proto} {host}:{port}: want {want:?}, got {lines:?}"
    );
}

#[test]
fn replies_leave_the_endpoints_node_straight_to_the_client() {
    kpng_lab::require_cluster!(AgentBackend::Ebpf);
    let mut cluster = Cluster::dual_stack(2, 1, AgentBackend::Ebpf);
    cluster.agent_flags = vec!["--load-balancer-mode".into(), "dsr".into()];
    let items = [
        dual("dsr", 20, 30080, None),
        dual("snat", 21, 30180, Some("snat")),
        dual("hybrid", 22, 30280, Some("hybrid")),
    ];
    cluster.write_manifest(&cluster.manifest(&items));
    // The external IPs are routed to node-1.
    cluster.route_client_to("203.0.113.0/24", 1);
    cluster.route_client_to("2001:db8::/64", 1);
    cluster.start_server();
    cluster.start_agents();
    cluster.wait_all_synced(CONVERGE);
    // Replies that come back through node-1.
    let crossing = cluster.count_from(1, &["10.244.2.0/24", "fd00:244:0:2::/64"]);
    wait_served(&cluster, &node_ip(1), 30080);
    wait_served(&cluster, &node_ip6(1), 30080);
    let before = crossing.packets();

    let (pod, pod6) = (pod_ip(2, 0), pod_ip6(2, 0));
    let kept = format!("{pod} {CLIENT_IP}");
    let kept6 = format!("{pod6} {CLIENT_IP6}");
    // DSR (the flag): NodePorts and external IPs, TCP and UDP, both
    // families: the endpoint sees the client, the replies come from the
    // address the client sent to, and none crosses node-1.
    for (host, port, want) in [
        (node_ip(1), 30080, &kept),
        ("203.0.113.20".to_owned(), 80, &kept),
        (node_ip6(1), 30080, &kept6),
        ("2001:db8::20".to_owned(), 80, &kept6),
    ] {
        probe(&cluster, "tcp", &host, port, want);
        let udp = if port == 80 { 53 } else { port + 1 };
        probe(&cluster, "udpc", &host, udp, want);
    }
    // Hybrid (annotated): TCP returned directly, UDP masqueraded.
    probe(&cluster, "tcp", &node_ip(1), 30280, &kept);
    probe(&cluster, "tcp", &node_ip6(1), 30280, &kept6);
    assert_eq!(
        crossing.packets(),
        before,
        "replies of directly returned flows crossed node-1"
    );
    probe(
        &cluster,
        "udpc",
        &node_ip(1),
        30281,
        &format!("{pod} {}", node_ip(1)),
    );
    probe(
        &cluster,
        "udpc",
        &node_ip6(1),
        30281,
        &format!("{pod6} {}", node_ip6(1)),
    );
    let after_hybrid = crossing.packets();
    assert!(
        after_hybrid >= before + 10,
        "hybrid's UDP replies did not come back through node-1"
    );

    // SNAT (annotated), the control: masqueraded to node-1, whose
    // replies come back through it (and are counted).
    probe(
        &cluster,
        "tcp",
        &node_ip(1),
        30180,
        &format!("{pod} {}", node_ip(1)),
    );
    probe(
        &cluster,
        "tcp",
        &node_ip6(1),
        30180,
        &format!("{pod6} {}", node_ip6(1)),
    );
    assert!(
        crossing.packets() >= after_hybrid + 10,
        "the masqueraded replies were not counted: the counter sees nothing"
    );

    // Node-2, the endpoint's own node: the client kept, as ever.
    probe(&cluster, "tcp", &node_ip(2), 30080, &kept);
    probe(&cluster, "tcp", &node_ip6(2), 30080, &kept6);
}
