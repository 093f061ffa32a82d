//! Real packets through the nftables backend, in network namespaces the
//! tests create: a node that routes and runs the rules, endpoint pods with
//! echo servers (they answer with their own address and the peer address
//! they saw), a pod client and external clients. Run as root; otherwise
//! each test prints SKIPPED and passes.

mod support;

use kpng_backend_nft::Config;
use support::{Lab, Proxy, endpoints, settle};

const E1: &str = "10.244.1.10";
const E2: &str = "10.244.2.10";
const E3: &str = "10.244.3.10";
const POD_CLIENT: &str = "10.244.1.99";
const NODE_IP: &str = "192.168.50.1";
const EXT_IN: &str = "203.0.113.10";
const EXT_OUT: &str = "198.51.100.77";

fn config() -> Config {
    let mut config = Config::default();
    config.cluster_cidrs = Config::parse_cidrs("--cluster-cidr", "10.244.0.0/16").expect("cidr");
    config.service_cidrs = Config::parse_cidrs("--service-cidr", "10.96.0.0/16").expect("cidr");
    config
}

/// The node, three endpoint pods (e1 on this node, e2 and e3 elsewhere),
/// a pod client on this node, two external clients, and an upstream
/// router that answers for every other address (so that a packet the
/// rules let through is refused there, not lost: DROP is then visible as
/// a timeout, and a missing DROP as a refusal).
fn lab() -> Lab {
    let mut lab = Lab::new();
    lab.upstream();
    lab.host("ext", &[EXT_IN], &[NODE_IP]);
    lab.host("ext2", &[EXT_OUT], &[]);
    lab.host("podc", &[POD_CLIENT], &[]);
    for (name, ip) in [("e1", E1), ("e2", E2), ("e3", E3)] {
        lab.host(name, &[ip], &[]);
        lab.serve(name, ip);
    }
    lab
}

const NODES: &str = r#"
- apiVersion: v1
  kind: Node
  metadata: {name: node-a, labels: {topology.kubernetes.io/zone: zone-a}}
  status: {addresses: [{type: InternalIP, address: 192.168.50.1}]}
"#;

/// A Service and its one EndpointSlice; `eps` is YAML for the endpoints.
fn service(name: &str, spec: &str, eps: &str) -> String {
    service_with_status(name, spec, "{}", eps)
}

fn service_with_status(name: &str, spec: &str, status: &str, eps: &str) -> String {
    format!(
        r#"
- apiVersion: v1
  kind: Service
  metadata: {{namespace: t, name: {name}}}
  spec: {spec}
  status: {status}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {{namespace: t, name: {name}-1, labels: {{kubernetes.io/service-name: {name}}}}}
  addressType: IPv4
  endpoints: {eps}
  ports: [{{name: http, port: 8080, protocol: TCP}}, {{name: dns, port: 5353, protocol: UDP}}]
"#
    )
}

fn manifest(items: &[String]) -> String {
    format!(
        "apiVersion: v1\nkind: List\nitems:{NODES}{}",
        items.concat()
    )
}

const ALL3: &str = "[{addresses: [10.244.1.10], nodeName: node-a}, {addresses: [10.244.2.10], nodeName: node-b}, {addresses: [10.244.3.10], nodeName: node-c}]";

#[test]
fn cluster_ip_balancing_affinity_masquerade_hairpin_and_udp() {
    require_lab!();
    let lab = lab();
    let mut proxy = Proxy::new(&lab, config());
    let spec = |ip: &str, extra: &str| {
        format!(
            "{{clusterIP: {ip}, ports: [{{name: http, port: 80, targetPort: 8080}}, {{name: dns, port: 53, protocol: UDP, targetPort: 5353}}]{extra}}}"
        )
    };
    proxy
        .load(&manifest(&[
            service("web", &spec("10.96.0.10", ""), ALL3),
            service("sticky", &spec("10.96.0.11", ", sessionAffinity: ClientIP, sessionAffinityConfig: {clientIP: {timeoutSeconds: 60}}"), ALL3),
        ]))
        .expect("sync");
    settle();

    // ClusterIP from a pod: reached, all three endpoints over 50
    // connections, and no masquerade (the endpoint sees the pod address).
    let lines = lab.connect("podc", "tcp", "10.96.0.10", 80, 50);
    assert_eq!(lines.len(), 50, "{lines:?}");
    assert_eq!(
        endpoints(&lines),
        [E1, E2, E3].map(String::from).into(),
        "{lines:?}"
    );
    assert!(
        lines.iter().all(|l| l.ends_with(POD_CLIENT)),
        "pod address kept: {lines:?}"
    );

    // ClientIP affinity: one endpoint for every connection.
    let lines = lab.connect("podc", "tcp", "10.96.0.11", 80, 20);
    assert_eq!(endpoints(&lines).len(), 1, "{lines:?}");
    assert_eq!(lines.len(), 20);

    // Hairpin: an endpoint reaching itself through its Service works (it
    // is masqueraded, so the reply comes back through the node).
    let lines = lab.connect("e1", "tcp", "10.96.0.10", 80, 30);
    assert!(
        lines
            .iter()
            .all(|l| !l.starts_with("TIMEOUT") && !l.starts_with("ERROR")),
        "{lines:?}"
    );
    let hairpins: Vec<_> = lines
        .iter()
        .filter(|l| l.starts_with(&format!("{E1} ")))
        .collect();
    assert!(
        !hairpins.is_empty(),
        "some connection hit e1 itself: {lines:?}"
    );
    assert!(
        hairpins.iter().all(|l| !l.ends_with(E1)),
        "hairpin masqueraded: {hairpins:?}"
    );

    // UDP.
    let lines = lab.connect("podc", "udp", "10.96.0.10", 53, 10);
    assert_eq!(lines.len(), 10);
    assert!(
        lines
            .iter()
            .all(|l| [E1, E2, E3].iter().any(|e| l.starts_with(e))),
        "{lines:?}"
    );

    // Traffic from outside the pod network to a ClusterIP is masqueraded.
    let lines = lab.connect("ext", "tcp", "10.96.0.10", 80, 5);
    assert!(
        lines
            .iter()
            .all(|l| !l.ends_with(EXT_IN) && !l.starts_with("TIMEOUT")),
        "{lines:?}"
    );
}

#[test]
fn external_traffic_nodeports_external_ips_and_load_balancers() {
    require_lab!();
    let lab = lab();
    let mut proxy = Proxy::new(&lab, config());
    let local_two = "[{addresses: [10.244.1.10], nodeName: node-a}, {addresses: [10.244.2.10], nodeName: node-b}]";
    proxy
        .load(&manifest(&[
            service("np", "{type: NodePort, clusterIP: 10.96.0.20, ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30080}]}", ALL3),
            service_with_status(
                "lb",
                "{type: LoadBalancer, clusterIP: 10.96.0.21, externalIPs: [192.0.2.50], externalTrafficPolicy: Local, healthCheckNodePort: 32000, loadBalancerSourceRanges: [203.0.113.0/24], ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30081}]}",
                "{loadBalancer: {ingress: [{ip: 198.51.100.10}, {ip: 198.51.100.11, ipMode: Proxy}]}}",
                local_two,
            ),
            service(
                "nolocal",
                "{type: NodePort, clusterIP: 10.96.0.22, externalTrafficPolicy: Local, ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30082}]}",
                "[{addresses: [10.244.2.10], nodeName: node-b}]",
            ),
        ]))
        .expect("sync");
    settle();

    // NodePort with externalTrafficPolicy Cluster: every endpoint, and the
    // endpoint sees the node (masquerade), not the client.
    let lines = lab.connect("ext", "tcp", NODE_IP, 30080, 30);
    assert_eq!(
        endpoints(&lines),
        [E1, E2, E3].map(String::from).into(),
        "{lines:?}"
    );
    assert!(
        lines.iter().all(|l| !l.ends_with(EXT_IN)),
        "masqueraded: {lines:?}"
    );

    // externalTrafficPolicy Local: NodePort, externalIP and LB IP go only
    // to the local endpoint, with the client address kept.
    for (host, port) in [(NODE_IP, 30081), ("192.0.2.50", 80), ("198.51.100.10", 80)] {
        let lines = lab.connect("ext", "tcp", host, port, 10);
        assert!(
            lines.iter().all(|l| l == &format!("{E1} {EXT_IN}")),
            "{host}:{port}: {lines:?}"
        );
    }
    // loadBalancerSourceRanges: a client outside the ranges is dropped at
    // the LB IP, but not at the NodePort.
    assert_eq!(lab.once("ext2", "tcp", "198.51.100.10", 80), "TIMEOUT");
    assert_eq!(
        lab.once("ext2", "tcp", NODE_IP, 30081),
        format!("{E1} {EXT_OUT}")
    );
    // ipMode Proxy is not programmed.
    assert_eq!(lab.once("ext", "tcp", "198.51.100.11", 80), "TIMEOUT");
    // Local policy with no local endpoint: external traffic is DROPped
    // (not rejected), while ClusterIP traffic still works.
    assert_eq!(lab.once("ext", "tcp", NODE_IP, 30082), "TIMEOUT");
    assert!(lab.once("podc", "tcp", "10.96.0.22", 80).starts_with(E2));
    // Pods short-circuit external addresses to every endpoint, unmasqueraded.
    let lines = lab.connect("podc", "tcp", "192.0.2.50", 80, 30);
    assert_eq!(
        endpoints(&lines),
        [E1, E2].map(String::from).into(),
        "{lines:?}"
    );
    assert!(lines.iter().all(|l| l.ends_with(POD_CLIENT)), "{lines:?}");
}

#[test]
fn traffic_policies_fallback_hints_reject_and_drop() {
    require_lab!();
    let lab = lab();
    let mut proxy = Proxy::new(&lab, config());
    let port = "ports: [{name: http, port: 80, targetPort: 8080}]";
    proxy
        .load(&manifest(&[
            service("itp", &format!("{{clusterIP: 10.96.0.30, internalTrafficPolicy: Local, {port}}}"), ALL3),
            service(
                "term",
                &format!("{{clusterIP: 10.96.0.31, {port}}}"),
                "[{addresses: [10.244.2.10], nodeName: node-b, conditions: {ready: false, serving: true, terminating: true}}, {addresses: [10.244.3.10], nodeName: node-c, conditions: {ready: false, serving: false, terminating: true}}]",
            ),
            service(
                "hints",
                &format!("{{clusterIP: 10.96.0.32, {port}}}"),
                "[{addresses: [10.244.1.10], nodeName: node-a, hints: {forZones: [{name: zone-a}]}}, {addresses: [10.244.3.10], nodeName: node-c, hints: {forZones: [{name: zone-b}]}}]",
            ),
            service("empty", &format!("{{clusterIP: 10.96.0.33, {port}}}"), "[]"),
        ]))
        .expect("sync");
    settle();

    // internalTrafficPolicy Local: only this node's endpoint.
    let lines = lab.connect("podc", "tcp", "10.96.0.30", 80, 20);
    assert_eq!(endpoints(&lines), [E1.to_string()].into(), "{lines:?}");
    // No ready endpoint: the serving-and-terminating one, not the other.
    let lines = lab.connect("podc", "tcp", "10.96.0.31", 80, 20);
    assert_eq!(endpoints(&lines), [E2.to_string()].into(), "{lines:?}");
    // Zone hints: node-a is in zone-a.
    let lines = lab.connect("podc", "tcp", "10.96.0.32", 80, 20);
    assert_eq!(endpoints(&lines), [E1.to_string()].into(), "{lines:?}");
    // No endpoint at all: refused promptly, not timed out.
    let line = lab.once("podc", "tcp", "10.96.0.33", 80);
    let secs: f64 = line
        .strip_prefix("REFUSED ")
        .and_then(|s| s.parse().ok())
        .unwrap_or(99.0);
    assert!(secs < 1.0, "refused promptly: {line}");
    // An unknown port on a live ClusterIP is refused too.
    assert!(
        lab.once("podc", "tcp", "10.96.0.30", 81)
            .starts_with("REFUSED")
    );
    // An unallocated address in the Service CIDR is dropped.
    assert_eq!(lab.once("podc", "tcp", "10.96.0.99", 80), "TIMEOUT");
}

#[test]
fn updates_move_services_and_a_failed_transaction_keeps_the_old_rules() {
    require_lab!();
    let lab = lab();
    let mut proxy = Proxy::new(&lab, config());
    let port = "ports: [{name: http, port: 80, targetPort: 8080}]";
    let web = |eps: &str| service("web", &format!("{{clusterIP: 10.96.0.40, {port}}}"), eps);
    proxy.load(&manifest(&[web(ALL3)])).expect("sync");
    settle();
    assert_eq!(
        endpoints(&lab.connect("podc", "tcp", "10.96.0.40", 80, 30)).len(),
        3
    );

    // Move the Service to e3 only: an incremental transaction, and the old
    // endpoints are no longer reached.
    proxy
        .load(&manifest(&[web(
            "[{addresses: [10.244.3.10], nodeName: node-c}]",
        )]))
        .expect("sync");
    assert!(!proxy.backend.last_sync().full, "incremental");
    settle();
    let lines = lab.connect("podc", "tcp", "10.96.0.40", 80, 20);
    assert_eq!(endpoints(&lines), [E3.to_string()].into(), "{lines:?}");

    // Break the kernel's copy behind the backend's back, then make an
    // update that must delete that element: nft refuses the transaction,
    // and nothing of it is applied (the new Service is not added). The
    // newcomer has ClientIP affinity, whose own chains only nft can make
    // (element-only changes go through netlink: tested below).
    let node = lab.ns("node");
    let status = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &node,
            "nft",
            "delete",
            "element",
            "ip",
            "kpng",
            "service-ips",
            "{ 10.96.0.40 . tcp . 80 }",
        ])
        .status()
        .expect("nft");
    assert!(status.success());
    let newcomer = service(
        "new",
        &format!("{{clusterIP: 10.96.0.41, sessionAffinity: ClientIP, {port}}}"),
        ALL3,
    );
    let err = proxy
        .load(&manifest(std::slice::from_ref(&newcomer)))
        .expect_err("nft refuses");
    assert!(err.to_string().contains("nft transaction failed"), "{err}");
    assert!(
        !lab.ruleset().contains("10.96.0.41"),
        "nothing of the failed transaction applied"
    );
    // Still an unallocated Service address to the kernel: dropped.
    assert_eq!(lab.once("podc", "tcp", "10.96.0.41", 80), "TIMEOUT");

    // The next sync is a full one and converges (one endpoint: affinity).
    proxy.load(&manifest(&[newcomer])).expect("full resync");
    assert!(proxy.backend.last_sync().full);
    settle();
    assert_eq!(
        endpoints(&lab.connect("podc", "tcp", "10.96.0.41", 80, 30)).len(),
        1
    );
    assert!(
        !lab.ruleset().contains("10.96.0.40 . tcp . 80"),
        "stale Service removed"
    );

    // Two Services claiming one externalIP and port (the API allows it):
    // one wins, the transaction goes through, and when the winner goes the
    // other takes over.
    let claim = |name: &str, ip: &str, eps: &str| {
        service(
            name,
            &format!("{{clusterIP: {ip}, externalIPs: [192.0.2.60], {port}}}"),
            eps,
        )
    };
    let a = claim(
        "a",
        "10.96.0.42",
        "[{addresses: [10.244.1.10], nodeName: node-a}]",
    );
    let b = claim(
        "b",
        "10.96.0.43",
        "[{addresses: [10.244.3.10], nodeName: node-c}]",
    );
    proxy
        .load(&manifest(&[a.clone(), b.clone()]))
        .expect("conflict tolerated");
    settle();
    let first = lab.once("ext", "tcp", "192.0.2.60", 80);
    assert!(first.starts_with(E1) || first.starts_with(E3), "{first}");
    // Remove the winner: keep only the other claimant.
    let (loser, other) = if first.starts_with(E1) {
        (b, E3)
    } else {
        (a, E1)
    };
    proxy
        .load(&manifest(&[loser]))
        .expect("incremental takeover");
    assert!(!proxy.backend.last_sync().full);
    settle();
    assert!(lab.once("ext", "tcp", "192.0.2.60", 80).starts_with(other));
}

#[test]
fn endpoint_moves_go_as_one_netlink_batch_and_a_refused_batch_keeps_the_old_rules() {
    require_lab!();
    let lab = lab();
    let mut proxy = Proxy::new(&lab, config());
    let spec = "{type: NodePort, clusterIP: 10.96.0.60, externalIPs: [192.0.2.61], ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30060}]}";
    let web = |eps: &str| service("web", spec, eps);
    let e1_e2 = "[{addresses: [10.244.1.10], nodeName: node-a}, {addresses: [10.244.2.10], nodeName: node-b}]";
    let e1_e3 = "[{addresses: [10.244.1.10], nodeName: node-a}, {addresses: [10.244.3.10], nodeName: node-c}]";
    proxy.load(&manifest(&[web(e1_e2)])).expect("sync");
    assert!(proxy.backend.last_sync().full);

    // e2 is replaced by e3: same endpoint count, so only map elements
    // change, and they go as one netlink batch, no nft process.
    proxy.load(&manifest(&[web(e1_e3)])).expect("sync");
    let stats = proxy.backend.last_sync().clone();
    assert!(!stats.full && stats.netlink, "{stats:?}");
    // nft reads back what the batch wrote as the script says it.
    let ruleset = lab.ruleset();
    for element in [
        "10.96.0.60 . tcp . 80 . 1 : 10.244.3.10 . 8080",
        "192.0.2.61 . tcp . 80 . 1 : 10.244.3.10 . 8080",
        "tcp . 30060 . 1 : 10.244.3.10 . 8080",
    ] {
        assert!(ruleset.contains(element), "{element} in\n{ruleset}");
    }
    assert!(!ruleset.contains("10.244.2.10 . 8080"), "e2 gone");
    settle();
    for (client, addr, port) in [
        ("podc", "10.96.0.60", 80),
        ("ext", "192.0.2.61", 80),
        ("ext", NODE_IP, 30060),
    ] {
        let lines = lab.connect(client, "tcp", addr, port, 30);
        assert_eq!(
            endpoints(&lines),
            [E1, E3].map(String::from).into(),
            "{addr}:{port} {lines:?}"
        );
    }

    // Delete one of its elements behind the backend's back; the batch that
    // must delete it again is refused by the kernel as a whole: the other
    // maps keep e3 too.
    let status = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &lab.ns("node"),
            "nft",
            "delete",
            "element",
            "ip",
            "kpng",
            "np-cluster",
            "{ tcp . 30060 . 1 }",
        ])
        .status()
        .expect("nft");
    assert!(status.success());
    let err = proxy
        .load(&manifest(&[web(e1_e2)]))
        .expect_err("kernel refuses");
    assert!(err.to_string().contains("netlink"), "{err}");
    assert!(proxy.backend.last_sync().netlink);
    let ruleset = lab.ruleset();
    assert!(
        ruleset.contains("10.96.0.60 . tcp . 80 . 1 : 10.244.3.10 . 8080"),
        "nothing of the refused batch applied:\n{ruleset}"
    );
    assert!(!ruleset.contains("10.244.2.10 . 8080"));

    // The next sync is a full one, through nft, and converges.
    proxy.load(&manifest(&[web(e1_e2)])).expect("full resync");
    let stats = proxy.backend.last_sync().clone();
    assert!(stats.full && !stats.netlink, "{stats:?}");
    settle();
    let lines = lab.connect("podc", "tcp", "10.96.0.60", 80, 30);
    assert_eq!(
        endpoints(&lines),
        [E1, E2].map(String::from).into(),
        "{lines:?}"
    );
}

#[test]
fn dual_stack_families_are_programmed_each_on_their_own() {
    require_lab!();
    let mut lab = Lab::new();
    lab.upstream();
    lab.host("podc", &[POD_CLIENT, "fd00:244:1::99"], &[]);
    lab.host("e1", &[E1, "fd00:244:1::10"], &[]);
    lab.host("e2", &["fd00:244:2::10"], &[]);
    lab.host("e3", &["fd00:244:3::10"], &[]);
    lab.serve("e1", "e1");
    lab.serve("e2", "e2");
    lab.serve("e3", "e3");
    let mut config = config();
    config
        .cluster_cidrs
        .extend(Config::parse_cidrs("--cluster-cidr", "fd00:244::/32").expect("cidr"));
    config
        .service_cidrs
        .extend(Config::parse_cidrs("--service-cidr", "fd00:96::/112").expect("cidr"));
    let mut proxy = Proxy::new(&lab, config);
    let v6_slice = |other: &str| {
        format!(
            r#"
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {{namespace: t, name: ds-v6, labels: {{kubernetes.io/service-name: ds}}}}
  addressType: IPv6
  endpoints: [{{addresses: ["fd00:244:1::10"], nodeName: node-a}}, {{addresses: ["{other}"], nodeName: node-b}}]
  ports: [{{name: http, port: 8080, protocol: TCP}}]
"#
        )
    };
    let state = |other: &str| {
        manifest(&[
            service(
                "ds",
                r#"{clusterIP: 10.96.0.50, clusterIPs: [10.96.0.50, "fd00:96::50"], ports: [{name: http, port: 80, targetPort: 8080}]}"#,
                "[{addresses: [10.244.1.10], nodeName: node-a}]",
            ),
            v6_slice(other),
            service(
                "v4only",
                "{clusterIP: 10.96.0.51, ports: [{name: http, port: 80, targetPort: 8080}]}",
                "[{addresses: [10.244.1.10], nodeName: node-a}]",
            ),
        ])
    };
    proxy.load(&state("fd00:244:2::10")).expect("sync");
    settle();

    // IPv4 goes to the IPv4 endpoint only; IPv6 to both IPv6 endpoints.
    let v4 = lab.connect("podc", "tcp", "10.96.0.50", 80, 10);
    assert!(
        v4.iter().all(|l| l == &format!("e1 {POD_CLIENT}")),
        "{v4:?}"
    );
    let v6 = lab.connect("podc", "tcp", "fd00:96::50", 80, 30);
    assert_eq!(
        endpoints(&v6),
        ["e1", "e2"].map(String::from).into(),
        "{v6:?}"
    );
    assert!(
        v6.iter().all(|l| l.ends_with("fd00:244:1::99")),
        "pod address kept: {v6:?}"
    );
    // The IPv6 table holds only IPv6 addresses, and the IPv4-only Service
    // has no IPv6 rules.
    let ruleset = lab.ruleset();
    let v6_table = ruleset.split("table ip6 kpng").nth(1).unwrap_or_default();
    assert!(
        !v6_table.contains("10.96.0.5"),
        "no IPv4 address in the IPv6 table"
    );
    assert!(v6_table.contains("fd00:96::50"));
    // An unallocated IPv6 Service address is dropped, like an IPv4 one.
    assert_eq!(lab.once("podc", "tcp", "fd00:96::99", 80), "TIMEOUT");

    // An IPv6 endpoint moves (e2 to e3): one netlink batch of IPv6
    // elements.
    proxy.load(&state("fd00:244:3::10")).expect("sync");
    let stats = proxy.backend.last_sync().clone();
    assert!(!stats.full && stats.netlink, "{stats:?}");
    assert!(
        lab.ruleset()
            .contains("fd00:96::50 . tcp . 80 . 1 : fd00:244:3::10 . 8080"),
        "{}",
        lab.ruleset()
    );
    settle();
    let v6 = lab.connect("podc", "tcp", "fd00:96::50", 80, 30);
    assert_eq!(
        endpoints(&v6),
        ["e1", "e3"].map(String::from).into(),
        "{v6:?}"
    );
}

#[test]
fn nodeports_listen_only_on_the_nodeport_addresses_never_on_loopback() {
    require_lab!();
    let mut lab = Lab::new();
    lab.upstream();
    // The node holds two addresses on the external link.
    lab.host("ext", &[EXT_IN], &[NODE_IP, "192.168.50.2"]);
    lab.host("e1", &[E1], &[]);
    lab.serve("e1", E1);
    let mut config = config();
    config.nodeport_addresses =
        Some(Config::parse_cidrs("--nodeport-addresses", "192.168.50.1/32").expect("cidr"));
    let mut proxy = Proxy::new(&lab, config);
    proxy
        .load(&manifest(&[service(
            "np",
            "{type: NodePort, clusterIP: 10.96.0.60, ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30090}]}",
            "[{addresses: [10.244.1.10], nodeName: node-a}]",
        )]))
        .expect("sync");
    settle();
    assert!(
        lab.once("ext", "tcp", NODE_IP, 30090).starts_with(E1),
        "on the configured address"
    );
    assert!(
        lab.once("ext", "tcp", "192.168.50.2", 30090)
            .starts_with("REFUSED"),
        "not on the other one"
    );
    // Never on loopback, even from the node itself.
    assert!(
        lab.once("node", "tcp", "127.0.0.1", 30090)
            .starts_with("REFUSED")
    );
    assert!(
        lab.once("node", "tcp", NODE_IP, 30090).starts_with(E1),
        "the node reaches its own NodePort"
    );
}
