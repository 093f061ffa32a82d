//! The eBPF backend in the lab: the scenarios every backend passes, run
//! as `kpng … to-ebpf` runs it (socket-level load balancing for the
//! node's sockets, the nftables backend for traffic from outside), then
//! the eBPF backend alone, with no netfilter rule in the node. Run as
//! root with cgroup v2; otherwise each test prints SKIPPED and passes.

use kpng_backend_ebpf::EbpfBackend;
use kpng_lab::scenarios::{ALL3, E1, E2, E3, POD_CLIENT, dropped_locally, lab, manifest, service};
use kpng_lab::{
    EbpfWithNft, LabBackend, Proxy, Settings, ebpf_config, endpoints, require_lab, settle,
};

kpng_lab::scenario_tests!(EbpfWithNft);

/// With no nftables backend at all, a pod's connections to a ClusterIP
/// still reach every endpoint, across the lab's links, unmasqueraded, and
/// a UDP reply comes from the Service address; the node holds no
/// netfilter rule, so the eBPF programs did it all.
#[test]
fn the_ebpf_backend_alone_serves_the_node_s_sockets() {
    require_lab!(EbpfWithNft);
    let lab = lab();
    let config = ebpf_config(&lab, &Settings::lab(), false);
    let mut proxy = Proxy::with(EbpfBackend::attach(config).expect("attach"));
    let spec = "{clusterIP: 10.96.0.10, ports: [{name: http, port: 80, targetPort: 8080}, {name: dns, port: 53, protocol: UDP, targetPort: 5353}]}";
    proxy
        .load(&manifest(&[service("web", spec, ALL3)]))
        .expect("sync");
    settle();
    let lines = lab.connect("podc", "tcp", "10.96.0.10", 80, 40);
    assert_eq!(
        endpoints(&lines),
        [E1, E2, E3].map(String::from).into(),
        "{lines:?}"
    );
    assert!(lines.iter().all(|l| l.ends_with(POD_CLIENT)), "{lines:?}");
    let lines = lab.connect("podc", "udp", "10.96.0.10", 53, 10);
    assert!(lines.iter().all(|l| l.starts_with("10.244.")), "{lines:?}");
    assert_eq!(
        lab.once("podc", "tcp", "10.96.0.99", 80),
        dropped_locally::<EbpfWithNft>()
    );
    // Not the node's sockets: an external client is not served.
    assert_eq!(lab.once("ext", "tcp", "10.96.0.10", 80), "TIMEOUT");
    let rules = lab.in_node(&["nft", "list", "ruleset"]);
    assert!(rules.trim().is_empty(), "no netfilter rule: {rules}");
    let counters = proxy.backend.counters().expect("counters");
    assert!(counters.translated >= 50, "{counters:?}");
    assert_eq!(counters.missing, 0);
    EbpfWithNft::clear(&lab);
}

/// With no nftables backend, packets from outside are served by the tc
/// programs on the node's links. `externalTrafficPolicy: Local`: the
/// NodePort, external IP and LB IP reach the local endpoint with the
/// client address kept, the LB IP's source ranges drop other sources, and
/// replies come from the Service address (or the TCP handshake would
/// fail). `Cluster`: every endpoint, masqueraded towards other nodes'.
#[test]
fn tc_programs_serve_external_traffic() {
    use kpng_lab::scenarios::{EXT_IN, EXT_OUT, NODE_IP, service_with_status};
    require_lab!(EbpfWithNft);
    let lab = lab();
    let config = ebpf_config(&lab, &Settings::lab(), true);
    let mut proxy = Proxy::with(EbpfBackend::attach(config).expect("attach"));
    let local_two = "[{addresses: [10.244.1.10], nodeName: node-a}, {addresses: [10.244.2.10], nodeName: node-b}]";
    proxy
        .load(&manifest(&[
            service_with_status(
                "lb",
                "{type: LoadBalancer, clusterIP: 10.96.0.21, externalIPs: [192.0.2.50], externalTrafficPolicy: Local, loadBalancerSourceRanges: [203.0.113.0/24], ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30081}, {name: dns, port: 53, protocol: UDP, targetPort: 5353, nodePort: 30053}]}",
                "{loadBalancer: {ingress: [{ip: 198.51.100.10}]}}",
                local_two,
            ),
            service(
                "cluster",
                "{type: NodePort, clusterIP: 10.96.0.20, ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30080}, {name: dns, port: 53, protocol: UDP, targetPort: 5353, nodePort: 30054}]}",
                ALL3,
            ),
        ]))
        .expect("sync");
    settle();
    for (host, port) in [(NODE_IP, 30081), ("192.0.2.50", 80), ("198.51.100.10", 80)] {
        let lines = lab.connect("ext", "tcp", host, port, 10);
        assert!(
            lines.iter().all(|l| l == &format!("{E1} {EXT_IN}")),
            "{host}:{port}: {lines:?}"
        );
    }
    // UDP too, each datagram's flow to the local endpoint.
    let lines = lab.connect("ext", "udp", NODE_IP, 30053, 5);
    assert!(
        lines.len() == 5 && lines.iter().all(|l| l == &format!("{E1} {EXT_IN}")),
        "{lines:?}"
    );
    // Source ranges: outside them, the LB IP drops; the NodePort serves.
    assert_eq!(lab.once("ext2", "tcp", "198.51.100.10", 80), "TIMEOUT");
    assert_eq!(
        lab.once("ext2", "tcp", NODE_IP, 30081),
        format!("{E1} {EXT_OUT}")
    );
    // externalTrafficPolicy Cluster: every endpoint; those on other nodes
    // see the node's address (masqueraded, so their replies come back
    // through the node); by design the local one sees the client (its
    // replies leave through this node anyway).
    let lines = lab.connect("ext", "tcp", NODE_IP, 30080, 40);
    assert_eq!(
        endpoints(&lines),
        [E1, E2, E3].map(String::from).into(),
        "{lines:?}"
    );
    for line in &lines {
        let expected = if line.starts_with(E1) {
            EXT_IN
        } else {
            NODE_IP
        };
        assert!(line.ends_with(expected), "{line}");
    }
    let lines = lab.connect("ext", "udp", NODE_IP, 30054, 10);
    assert!(
        lines.len() == 10 && lines.iter().all(|l| l.starts_with("10.244.")),
        "{lines:?}"
    );
    let rules = lab.in_node(&["nft", "list", "ruleset"]);
    assert!(rules.trim().is_empty(), "no netfilter rule: {rules}");
    EbpfWithNft::clear(&lab);
}

/// IPv6 through the tc programs: an external client reaches a Service's
/// IPv6 external IP (`externalTrafficPolicy: Local`) on this node's pod,
/// with its address kept and the reply from the Service address.
#[test]
fn tc_programs_serve_ipv6_from_outside() {
    require_lab!(EbpfWithNft);
    let mut lab = kpng_lab::Lab::new();
    lab.upstream();
    lab.host("ext6", &["2001:db8:1::10"], &["2001:db8:1::1"]);
    lab.host("e1", &["fd00:244:1::10"], &[]);
    lab.serve("e1", "e1");
    let config = ebpf_config(&lab, &Settings::default(), true);
    let mut proxy = Proxy::with(EbpfBackend::attach(config).expect("attach"));
    let items = [r#"
- apiVersion: v1
  kind: Service
  metadata: {namespace: t, name: v6}
  spec: {clusterIP: "fd00:96::60", clusterIPs: ["fd00:96::60"], ipFamilies: [IPv6], externalIPs: ["2001:db8:5::50"], externalTrafficPolicy: Local, ports: [{name: http, port: 80, targetPort: 8080}]}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {namespace: t, name: v6-1, labels: {kubernetes.io/service-name: v6}}
  addressType: IPv6
  endpoints: [{addresses: ["fd00:244:1::10"], nodeName: node-a}]
  ports: [{name: http, port: 8080, protocol: TCP}]
"#
    .to_string()];
    proxy.load(&manifest(&items)).expect("sync");
    settle();
    let lines = lab.connect("ext6", "tcp", "2001:db8:5::50", 80, 5);
    assert!(
        lines.len() == 5 && lines.iter().all(|l| l == "e1 2001:db8:1::10"),
        "{lines:?}"
    );
    EbpfWithNft::clear(&lab);
}
