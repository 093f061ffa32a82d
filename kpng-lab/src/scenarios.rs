//! The scenarios every backend must pass, with real packets.
//!
//! Each function builds its own [`Lab`] (a node, three endpoint pods: e1
//! on this node, e2 and e3 elsewhere; a pod client on this node; two
//! external clients; an upstream router that answers for every other
//! address, so that a DROP shows as a timeout and a missing DROP as a
//! refusal), loads manifests through the real ingest and node view, and
//! checks what the packets do. Each test file calls them for its backend;
//! a scenario prints SKIPPED and returns when the lab cannot run here.

use crate::{Lab, LabBackend, Proxy, Settings, endpoints, settle};

/// Endpoint pod e1, on this node.
pub const E1: &str = "10.244.1.10";
/// Endpoint pod e2, on node-b.
pub const E2: &str = "10.244.2.10";
/// Endpoint pod e3, on node-c.
pub const E3: &str = "10.244.3.10";
/// A pod on this node that acts as a client.
pub const POD_CLIENT: &str = "10.244.1.99";
/// The node's IP on the external link.
pub const NODE_IP: &str = "192.168.50.1";
/// An external client inside the LB source ranges.
pub const EXT_IN: &str = "203.0.113.10";
/// An external client outside them.
pub const EXT_OUT: &str = "198.51.100.77";

/// The usual lab: the node, three endpoint pods, a pod client, two
/// external clients and the upstream router.
pub fn lab() -> Lab {
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
pub fn service(name: &str, spec: &str, eps: &str) -> String {
    service_with_status(name, spec, "{}", eps)
}

/// [`service`] with a status (load-balancer ingress).
pub fn service_with_status(name: &str, spec: &str, status: &str, eps: &str) -> String {
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

/// A List of the test node and `items`.
pub fn manifest(items: &[String]) -> String {
    format!(
        "apiVersion: v1\nkind: List\nitems:{NODES}{}",
        items.concat()
    )
}

/// What a local client (one of [`LOCAL_HOSTS`](crate::LOCAL_HOSTS)) gets
/// for a dropped connection: a timeout where a packet path drops it. By
/// design, socket-level load balancing (`B::SOCKETS`) fails the connect at
/// once with EPERM: no packet is ever sent.
pub fn dropped_locally<B: LabBackend>() -> &'static str {
    if B::SOCKETS {
        "ERROR [Errno 1] Operation not permitted"
    } else {
        "TIMEOUT"
    }
}

/// e1, e2 and e3, ready.
pub const ALL3: &str = "[{addresses: [10.244.1.10], nodeName: node-a}, {addresses: [10.244.2.10], nodeName: node-b}, {addresses: [10.244.3.10], nodeName: node-c}]";

/// ClusterIP: balancing over every endpoint, ClientIP affinity, no
/// masquerade for pods, hairpin, UDP, masquerade from outside.
pub fn cluster_ip_balancing_affinity_masquerade_hairpin_and_udp<B: LabBackend>() {
    crate::require_lab!(B);
    let lab = lab();
    let mut proxy = Proxy::<B>::new(&lab, &Settings::lab());
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

    // Hairpin: an endpoint reaching itself through its Service works. A
    // packet path masquerades it, so the reply comes back through the node.
    // By design, socket-level load balancing (`B::SOCKETS`) connects the
    // socket to its own address: nothing is translated, so nothing needs
    // masquerading, and e1 sees itself.
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
    if B::SOCKETS {
        assert!(
            hairpins.iter().all(|l| l.ends_with(E1)),
            "hairpin straight to itself: {hairpins:?}"
        );
    } else {
        assert!(
            hairpins.iter().all(|l| !l.ends_with(E1)),
            "hairpin masqueraded: {hairpins:?}"
        );
    }

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

/// NodePort, externalIPs and LB IPs: eTP Cluster and Local, source
/// ranges, ipMode Proxy, DROP with no local endpoint, pod short-circuit.
pub fn external_traffic_nodeports_external_ips_and_load_balancers<B: LabBackend>() {
    crate::require_lab!(B);
    let lab = lab();
    let mut proxy = Proxy::<B>::new(&lab, &Settings::lab());
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
    // endpoint sees the node (masquerade), not the client. By design, a
    // backend that translates at the node's interfaces (`B::TC`)
    // masquerades only towards endpoints on other nodes: the local one's
    // replies leave through this node anyway, and it sees the client.
    let lines = lab.connect("ext", "tcp", NODE_IP, 30080, 30);
    assert_eq!(
        endpoints(&lines),
        [E1, E2, E3].map(String::from).into(),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .all(|l| !l.ends_with(EXT_IN) || (B::TC && l.starts_with(E1))),
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

/// iTP Local, terminating fallback, zone hints, REJECT with no endpoint
/// or an unknown port, DROP of an unallocated Service address.
pub fn traffic_policies_fallback_hints_reject_and_drop<B: LabBackend>() {
    crate::require_lab!(B);
    let lab = lab();
    let mut proxy = Proxy::<B>::new(&lab, &Settings::lab());
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
    assert_eq!(
        lab.once("podc", "tcp", "10.96.0.99", 80),
        dropped_locally::<B>()
    );
    // From outside the node alike: refused promptly (no endpoint; an
    // unknown port on a live ClusterIP), and dropped (where the upstream
    // router would refuse it).
    for (host, port) in [("10.96.0.33", 80), ("10.96.0.30", 81)] {
        let line = lab.once("ext", "tcp", host, port);
        let secs: f64 = line
            .strip_prefix("REFUSED ")
            .and_then(|s| s.parse().ok())
            .unwrap_or(99.0);
        assert!(secs < 1.0, "{host}:{port} from outside refused: {line}");
    }
    assert_eq!(lab.once("ext", "tcp", "10.96.0.99", 80), "TIMEOUT");
}

/// A ServiceCIDR object (`networking.k8s.io/v1`).
pub fn service_cidr(name: &str, cidrs: &[&str]) -> String {
    format!(
        r#"
- apiVersion: networking.k8s.io/v1
  kind: ServiceCIDR
  metadata: {{name: {name}}}
  spec: {{cidrs: [{}]}}
"#,
        cidrs.join(", ")
    )
}

/// The cluster's ServiceCIDR objects set what is dropped, beside
/// `--service-cidr` (10.96.0.0/16 in the lab): a range added is dropped
/// from the next sync on, one removed is not, and a range that contains
/// the flag's merges with it. Two hosts hold addresses in those ranges, so
/// a connection reaches them unless the proxy drops it.
pub fn service_cidrs_added_and_removed_change_what_is_dropped<B: LabBackend>() {
    crate::require_lab!(B);
    let mut lab = lab();
    let (far, near) = ("10.200.0.7", "10.97.0.5");
    for (name, ip) in [("far", far), ("near", near)] {
        lab.host(name, &[ip], &[]);
        lab.serve(name, ip);
    }
    let mut proxy = Proxy::<B>::new(&lab, &Settings::lab());
    let live = service(
        "live",
        "{clusterIP: 10.96.0.50, ports: [{name: http, port: 80, targetPort: 8080}]}",
        ALL3,
    );
    let reached = |ip: &str| lab.once("podc", "tcp", ip, 8080).starts_with(ip);
    let dropped = |ip: &str| lab.once("podc", "tcp", ip, 8080) == dropped_locally::<B>();

    proxy
        .load(&manifest(std::slice::from_ref(&live)))
        .expect("sync");
    settle();
    assert!(dropped("10.96.0.99"), "the flag's range");
    assert!(reached(far) && reached(near), "no ServiceCIDR yet");

    // Added: one new range, and one containing the flag's.
    let kubernetes = service_cidr("kubernetes", &["10.96.0.0/12"]);
    let extra = service_cidr("extra", &["10.200.0.0/16"]);
    proxy
        .load(&manifest(&[live.clone(), kubernetes.clone(), extra]))
        .expect("sync with ServiceCIDRs");
    settle();
    assert!(dropped(far) && dropped(near) && dropped("10.96.0.99"));
    let lines = lab.connect("podc", "tcp", "10.96.0.50", 80, 10);
    // The live Service (its ClusterIP is in the ranges) is still served.
    assert!(
        lines.len() == 10 && lines.iter().all(|l| l.starts_with("10.244.")),
        "every connection reached an endpoint: {lines:?}"
    );
    assert!(
        !proxy.backend.last_full(),
        "a ServiceCIDR change is incremental"
    );

    // Removed: "extra" goes, "kubernetes" stays.
    proxy
        .load(&manifest(&[live, kubernetes]))
        .expect("sync without extra");
    settle();
    assert!(reached(far), "extra's range no longer dropped");
    assert!(dropped(near) && dropped("10.96.0.99"));
}

/// NodePorts only on `--nodeport-addresses`: not on the node's other
/// address, nor on loopback (outside them), even from the node itself.
pub fn nodeports_listen_only_on_the_nodeport_addresses_never_on_loopback<B: LabBackend>() {
    crate::require_lab!(B);
    let mut lab = Lab::new();
    lab.upstream();
    // The node holds two addresses on the external link.
    lab.host("ext", &[EXT_IN], &[NODE_IP, "192.168.50.2"]);
    lab.host("e1", &[E1], &[]);
    lab.serve("e1", E1);
    let settings = Settings {
        nodeport_addresses: Some("192.168.50.1/32".into()),
        ..Settings::lab()
    };
    let mut proxy = Proxy::<B>::new(&lab, &settings);
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
    // Not on loopback (outside --nodeport-addresses), even from the node
    // itself.
    assert!(
        lab.once("node", "tcp", "127.0.0.1", 30090)
            .starts_with("REFUSED")
    );
    assert!(
        lab.once("node", "tcp", NODE_IP, 30090).starts_with(E1),
        "the node reaches its own NodePort"
    );
}

/// Localhost NodePorts, asked for by `--nodeport-addresses` holding
/// `127.0.0.0/8`: the eBPF socket programs serve the node's own
/// connections to `127.0.0.1:NODEPORT` (as kube-proxy's iptables mode with
/// `--iptables-localhost-nodeports`), to every endpoint whatever the
/// external policy (as kube-proxy sends the node's own traffic). The
/// netfilter backends serve none (as kube-proxy's nftables mode) and
/// translate no packet to loopback (the kernel would lose it, its source
/// being loopback: the connection would time out): it is refused at once,
/// nothing listening there. A pod's loopback is its own with every
/// backend; the node's address still serves.
pub fn localhost_nodeports_where_a_backend_serves_them<B: LabBackend>() {
    crate::require_lab!(B);
    let lab = lab();
    let settings = Settings {
        nodeport_addresses: Some("127.0.0.0/8,192.168.50.1/32".into()),
        ..Settings::lab()
    };
    let mut proxy = Proxy::<B>::new(&lab, &settings);
    proxy
        .load(&manifest(&[
            service(
                "np",
                "{type: NodePort, clusterIP: 10.96.0.60, ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30090}]}",
                ALL3,
            ),
            service(
                "local",
                "{type: NodePort, externalTrafficPolicy: Local, clusterIP: 10.96.0.61, ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30091}]}",
                "[{addresses: [10.244.2.10], nodeName: node-b}]",
            ),
        ]))
        .expect("sync");
    settle();
    let lines = lab.connect("node", "tcp", "127.0.0.1", 30090, 30);
    let local = lab.connect("node", "tcp", "127.0.0.1", 30091, 5);
    if B::SOCKETS {
        assert_eq!(
            endpoints(&lines),
            [E1, E2, E3].map(String::from).into(),
            "{lines:?}"
        );
        assert!(local.iter().all(|l| l.starts_with(E2)), "{local:?}");
    } else {
        for line in &lines {
            assert!(line.starts_with("REFUSED"), "{line}");
        }
        // No local endpoint under the Local policy: the filter rule that
        // drops such a NodePort matches every local address, loopback
        // too, as kube-proxy's (`--dst-type LOCAL`).
        assert!(!local.iter().any(|l| l.starts_with("10.244.")), "{local:?}");
    }
    assert!(
        lab.once("node", "tcp", NODE_IP, 30090)
            .starts_with("10.244."),
        "the node's address serves"
    );
    assert!(
        lab.once("podc", "tcp", "127.0.0.1", 30090)
            .starts_with("REFUSED"),
        "a pod's loopback is its own"
    );
}

/// Updates: a Service moves to other endpoints in an incremental sync, a
/// removed Service's address stops answering, a new one answers; two
/// Services claiming one externalIP and port (the API allows it): one wins,
/// the sync goes through, and the other takes over when the winner goes.
pub fn updates_move_services_and_claims_take_over<B: LabBackend>() {
    crate::require_lab!(B);
    let lab = lab();
    let mut proxy = Proxy::<B>::new(&lab, &Settings::lab());
    let port = "ports: [{name: http, port: 80, targetPort: 8080}]";
    let web = |eps: &str| service("web", &format!("{{clusterIP: 10.96.0.40, {port}}}"), eps);
    proxy.load(&manifest(&[web(ALL3)])).expect("sync");
    assert!(proxy.backend.last_full(), "the first sync is full");
    settle();
    let lines = lab.connect("podc", "tcp", "10.96.0.40", 80, 30);
    assert_eq!(endpoints(&lines).len(), 3, "{lines:?}");

    // Move the Service to e3 only: incremental, old endpoints unreached.
    proxy
        .load(&manifest(&[web(
            "[{addresses: [10.244.3.10], nodeName: node-c}]",
        )]))
        .expect("sync");
    assert!(!proxy.backend.last_full(), "incremental");
    settle();
    let lines = lab.connect("podc", "tcp", "10.96.0.40", 80, 20);
    assert_eq!(endpoints(&lines), [E3.to_string()].into(), "{lines:?}");

    // Replace it by another Service: the old address becomes unallocated
    // (dropped), the new one answers.
    let other = service(
        "other",
        &format!("{{clusterIP: 10.96.0.41, {port}}}"),
        "[{addresses: [10.244.2.10], nodeName: node-b}]",
    );
    proxy.load(&manifest(&[other])).expect("sync");
    assert!(!proxy.backend.last_full(), "incremental");
    settle();
    assert_eq!(
        lab.once("podc", "tcp", "10.96.0.40", 80),
        dropped_locally::<B>()
    );
    assert!(lab.once("podc", "tcp", "10.96.0.41", 80).starts_with(E2));

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
    assert!(!proxy.backend.last_full());
    settle();
    assert!(lab.once("ext", "tcp", "192.0.2.60", 80).starts_with(other));
}

/// Dual stack: each family programs only its own addresses; an IPv6
/// endpoint move is incremental. `check` is called with the lab and the
/// backend after the first sync (`"synced"`) and after the move
/// (`"moved"`), for backend-specific assertions.
pub fn dual_stack_families_are_programmed_each_on_their_own<B: LabBackend>(
    check: impl Fn(&str, &Lab, &B),
) {
    crate::require_lab!(B);
    let mut lab = Lab::new();
    lab.upstream();
    lab.host("podc", &[POD_CLIENT, "fd00:244:1::99"], &[]);
    lab.host("e1", &[E1, "fd00:244:1::10"], &[]);
    lab.host("e2", &["fd00:244:2::10"], &[]);
    lab.host("e3", &["fd00:244:3::10"], &[]);
    lab.serve("e1", "e1");
    lab.serve("e2", "e2");
    lab.serve("e3", "e3");
    let settings = Settings {
        cluster_cidr: "10.244.0.0/16,fd00:244::/32".into(),
        service_cidr: "10.96.0.0/16,fd00:96::/112".into(),
        ..Settings::default()
    };
    let mut proxy = Proxy::<B>::new(&lab, &settings);
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
    // An unallocated IPv6 Service address is dropped, like an IPv4 one.
    assert_eq!(
        lab.once("podc", "tcp", "fd00:96::99", 80),
        dropped_locally::<B>()
    );
    check("synced", &lab, &proxy.backend);

    // An IPv6 endpoint moves (e2 to e3): an incremental sync.
    proxy.load(&state("fd00:244:3::10")).expect("sync");
    assert!(!proxy.backend.last_full());
    check("moved", &lab, &proxy.backend);
    settle();
    let v6 = lab.connect("podc", "tcp", "fd00:96::50", 80, 30);
    assert_eq!(
        endpoints(&v6),
        ["e1", "e3"].map(String::from).into(),
        "{v6:?}"
    );
}

/// Per-Service counters (issue #28): `count` connections to a ClusterIP
/// from a pod and, with `node_port`, as many to a NodePort from outside;
/// the backend's counters, read back by `read`, hold exactly as many for
/// the Service port's destination, split over the endpoints as the
/// replies say the connections went, and name the Service port in the
/// node view.
///
/// The caller checks the lab can run (`require_lab!`); `make` makes the
/// backend in the lab.
pub fn counters_count_each_connection_per_service_port_and_endpoint<B: kpng_sink::Sink>(
    node_port: bool,
    make: impl FnOnce(&Lab) -> B,
    read: impl Fn(&Lab, &B) -> Vec<kpng_sink::traffic::ConnectionCount>,
) {
    use kpng_sink::traffic::{Destination, ServicePorts};
    use std::collections::BTreeMap;
    use std::net::SocketAddr;

    let lab = lab();
    let mut proxy = Proxy::with(make(&lab));
    let spec = "{type: NodePort, clusterIP: 10.96.0.70, ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30070}, {name: dns, port: 53, protocol: UDP, targetPort: 5353, nodePort: 30071}]}";
    let sticky = "{clusterIP: 10.96.0.71, sessionAffinity: ClientIP, ports: [{name: http, port: 80, targetPort: 8080}]}";
    proxy
        .load(&manifest(&[
            service("web", spec, ALL3),
            service("sticky", sticky, ALL3),
        ]))
        .expect("sync");
    settle();
    let before = read(&lab, &proxy.backend);
    assert!(
        before.iter().all(|r| r.connections == 0),
        "nothing counted yet: {before:?}"
    );

    // What the replies say: connections per endpoint address.
    let replied = |lines: &[String]| -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for line in lines {
            let endpoint = line.split_whitespace().next().unwrap_or_default();
            assert!([E1, E2, E3].contains(&endpoint), "{lines:?}");
            *out.entry(endpoint.to_owned()).or_default() += 1;
        }
        out
    };
    // What the counters say, for one destination.
    let counted = |rows: &[kpng_sink::traffic::ConnectionCount], to: &[Destination]| {
        let mut out: BTreeMap<String, u64> = BTreeMap::new();
        for row in rows.iter().filter(|r| to.contains(&r.destination)) {
            let want = if row.protocol == kpng_model::v1::Protocol::Udp {
                5353
            } else {
                8080
            };
            assert_eq!(row.endpoint.port(), want, "{row:?}");
            *out.entry(row.endpoint.ip().to_string()).or_default() += row.connections;
        }
        out
    };
    let count = 40;
    let vip = Destination::Address(SocketAddr::from(([10, 96, 0, 70], 80)));
    let lines = lab.connect("podc", "tcp", "10.96.0.70", 80, count);
    let want = replied(&lines);
    assert_eq!(want.values().sum::<u64>(), count as u64, "{lines:?}");
    assert!(want.len() > 1, "spread over endpoints: {want:?}");
    let rows = read(&lab, &proxy.backend);
    assert_eq!(counted(&rows, &[vip]), want, "ClusterIP counters: {rows:?}");

    // Each row names the Service port in the view.
    let view = proxy.projector.view();
    let ports = ServicePorts::of(view);
    for row in rows.iter().filter(|r| r.connections > 0) {
        let (name, port) = ports.find(row).expect("a Service port of the view");
        assert_eq!((name.name(), port.name.as_str()), ("web", "http"));
    }

    // UDP: each probe a socket of its own, so a flow of its own, counted
    // once (its first datagram), on the Service's UDP port only.
    let dns = Destination::Address(SocketAddr::from(([10, 96, 0, 70], 53)));
    let lines = lab.connect("podc", "udp", "10.96.0.70", 53, 10);
    let want = replied(&lines);
    assert_eq!(want.values().sum::<u64>(), 10, "{lines:?}");
    let rows = read(&lab, &proxy.backend);
    assert_eq!(counted(&rows, &[dns]), want, "UDP counters: {rows:?}");
    assert!(
        rows.iter()
            .filter(|r| r.destination == dns)
            .all(|r| r.protocol == kpng_model::v1::Protocol::Udp),
        "{rows:?}"
    );
    assert_eq!(
        counted(&rows, &[vip]).values().sum::<u64>(),
        count as u64,
        "the TCP port's did not move: {rows:?}"
    );

    if node_port {
        let lines = lab.connect("ext", "tcp", NODE_IP, 30070, count);
        let want = replied(&lines);
        assert_eq!(want.values().sum::<u64>(), count as u64, "{lines:?}");
        let rows = read(&lab, &proxy.backend);
        // A node port, or (the eBPF tc programs) the node's address and
        // the node port.
        let node_ip: std::net::IpAddr = NODE_IP.parse().expect("an address");
        let to = [
            Destination::NodePort(30070),
            Destination::Address(SocketAddr::new(node_ip, 30070)),
        ];
        assert_eq!(counted(&rows, &to), want, "NodePort counters: {rows:?}");
        for row in rows.iter().filter(|r| to.contains(&r.destination)) {
            let (name, port) = ports.find(row).expect("a Service port of the view");
            assert_eq!((name.name(), port.name.as_str()), ("web", "http"));
        }
        // The ClusterIP's did not move.
        assert_eq!(
            counted(&rows, &[vip]).values().sum::<u64>(),
            count as u64,
            "{rows:?}"
        );
    }

    // ClientIP affinity (the nftables backend's own chains, not its pick
    // maps): the client's connections, all to its endpoint, counted there.
    let sticky = Destination::Address(SocketAddr::from(([10, 96, 0, 71], 80)));
    let lines = lab.connect("podc", "tcp", "10.96.0.71", 80, 10);
    let want = replied(&lines);
    assert_eq!(want.len(), 1, "one endpoint, by affinity: {lines:?}");
    let rows = read(&lab, &proxy.backend);
    assert_eq!(
        counted(&rows, &[sticky]),
        want,
        "affinity counters: {rows:?}"
    );
    for row in rows.iter().filter(|r| r.destination == sticky) {
        let (name, port) = ports.find(row).expect("a Service port of the view");
        assert_eq!((name.name(), port.name.as_str()), ("sticky", "http"));
    }
}
