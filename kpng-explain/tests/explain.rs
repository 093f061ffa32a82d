//! `explain` on a small cluster: each kind of answer, for netfilter and
//! for the eBPF programs. (`kpng-lab` checks the answers against real
//! packets; these check the reasons given.)

use kpng_explain::{
    DataPath, Masquerade, Mechanism, Origin, Outcome, Packet, Protocol, Role, Setup, explain,
};
use kpng_kube::{Ingest, IngestConfig, file};
use kpng_store::{Snapshot, Store};

const CLUSTER: &str = r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: node-a, labels: {topology.kubernetes.io/zone: zone-a}}
  status: {addresses: [{type: InternalIP, address: 192.168.50.1}]}
- apiVersion: networking.k8s.io/v1
  kind: ServiceCIDR
  metadata: {name: kubernetes}
  spec: {cidrs: [10.96.0.0/16]}
- apiVersion: v1
  kind: Service
  metadata: {namespace: t, name: web}
  spec: {type: NodePort, clusterIP: 10.96.0.10, sessionAffinity: ClientIP, ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30080}]}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {namespace: t, name: web-1, labels: {kubernetes.io/service-name: web}}
  addressType: IPv4
  endpoints:
  - {addresses: [10.244.1.10], nodeName: node-a}
  - {addresses: [10.244.2.10], nodeName: node-b}
  - {addresses: [10.244.3.10], nodeName: node-c, conditions: {ready: false, serving: false}}
  ports: [{name: http, port: 8080, protocol: TCP}]
- apiVersion: v1
  kind: Service
  metadata: {namespace: t, name: lb}
  spec: {type: LoadBalancer, clusterIP: 10.96.0.21, externalIPs: [192.0.2.50], externalTrafficPolicy: Local, loadBalancerSourceRanges: [203.0.113.0/24], ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30081}]}
  status: {loadBalancer: {ingress: [{ip: 198.51.100.10}, {ip: 198.51.100.11, ipMode: Proxy}]}}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {namespace: t, name: lb-1, labels: {kubernetes.io/service-name: lb}}
  addressType: IPv4
  endpoints: [{addresses: [10.244.2.20], nodeName: node-b}]
  ports: [{name: http, port: 8080, protocol: TCP}]
- apiVersion: v1
  kind: Service
  metadata: {namespace: t, name: term}
  spec: {clusterIP: 10.96.0.31, ports: [{name: http, port: 80, targetPort: 8080}]}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {namespace: t, name: term-1, labels: {kubernetes.io/service-name: term}}
  addressType: IPv4
  endpoints:
  - {addresses: [10.244.2.30], nodeName: node-b, conditions: {ready: false, serving: true, terminating: true}}
  ports: [{name: http, port: 8080, protocol: TCP}]
- apiVersion: v1
  kind: Service
  metadata: {namespace: t, name: mg, annotations: {kpng.io/balancing: maglev}}
  spec: {clusterIP: 10.96.0.60, ports: [{name: http, port: 80, targetPort: 8080}]}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {namespace: t, name: mg-1, labels: {kubernetes.io/service-name: mg}}
  addressType: IPv4
  endpoints: [{addresses: [10.244.2.60], nodeName: node-b}]
  ports: [{name: http, port: 8080, protocol: TCP}]
- apiVersion: v1
  kind: Service
  metadata: {namespace: t, name: empty}
  spec: {clusterIP: 10.96.0.33, ports: [{name: http, port: 80, targetPort: 8080}]}
"#;

fn snapshot() -> Snapshot {
    snapshot_of(CLUSTER)
}

/// The state of the manifest `yaml`.
fn snapshot_of(yaml: &str) -> Snapshot {
    let mut ingest = Ingest::new(Store::new(), IngestConfig::default());
    ingest.load(&file::parse_str("cluster.yaml", yaml).expect("manifest"));
    ingest.reader().snapshot()
}

fn setup(data_path: DataPath) -> Setup {
    let proxy =
        kpng_sink::ProxyConfig::default().cluster_cidrs(["10.244.0.0/16".parse().expect("cidr")]);
    Setup::new(proxy, data_path)
}

fn ask(data_path: DataPath, origin: Origin, src: &str, dst: &str, port: u16) -> Outcome {
    let packet = Packet::new(
        origin,
        Protocol::Tcp,
        src.parse().expect("ip"),
        dst.parse().expect("ip"),
        port,
    );
    let explained = explain(&snapshot(), "node-a", &setup(data_path), &packet).expect("explained");
    // Every answer prints, and as JSON too.
    assert!(explained.to_string().contains("verdict: "), "{explained}");
    serde_json::to_string(&explained).expect("json");
    explained.outcome
}

fn netfilter(origin: Origin, src: &str, dst: &str, port: u16) -> Outcome {
    ask(DataPath::Nftables, origin, src, dst, port)
}

fn ips(outcome: &Outcome) -> Vec<String> {
    match outcome {
        Outcome::Translated { endpoints, .. } => {
            endpoints.iter().map(|t| t.ip.to_string()).collect()
        }
        other => panic!("not translated: {other:?}"),
    }
}

fn masquerade(outcome: &Outcome) -> Masquerade {
    match outcome {
        Outcome::Translated { masquerade, .. } => *masquerade,
        other => panic!("not translated: {other:?}"),
    }
}

#[test]
fn a_cluster_ip_goes_to_the_ready_endpoints_with_affinity_and_masquerades_outsiders() {
    let from_pod = netfilter(Origin::Pod, "10.244.1.99", "10.96.0.10", 80);
    assert_eq!(ips(&from_pod), ["10.244.1.10", "10.244.2.10"]);
    assert_eq!(masquerade(&from_pod), Masquerade::No);
    let Outcome::Translated {
        role,
        affinity_seconds,
        service,
        port,
        ..
    } = &from_pod
    else {
        unreachable!()
    };
    assert_eq!(
        (role, service.as_str(), port.as_str()),
        (&Role::ClusterIp, "t/web", "http")
    );
    assert_eq!(
        *affinity_seconds,
        Some(10800),
        "kube-proxy's default timeout"
    );

    let from_outside = netfilter(Origin::Outside, "203.0.113.5", "10.96.0.10", 80);
    assert_eq!(masquerade(&from_outside), Masquerade::Yes);
    // The local endpoint reaching itself: hairpin.
    let hairpin = netfilter(Origin::Pod, "10.244.1.10", "10.96.0.10", 80);
    assert_eq!(masquerade(&hairpin), Masquerade::Hairpin);
}

#[test]
fn every_candidate_has_its_reason() {
    let packet = Packet::new(
        Origin::Pod,
        Protocol::Tcp,
        "10.244.1.99".parse().expect("ip"),
        "10.96.0.10".parse().expect("ip"),
        80,
    );
    let explained =
        explain(&snapshot(), "node-a", &setup(DataPath::Nftables), &packet).expect("ok");
    let reasons: Vec<(String, bool, &str)> = explained
        .endpoints
        .iter()
        .map(|e| (e.ip.to_string(), e.cluster, e.why.as_str()))
        .collect();
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert!(
        reasons[0].1 && reasons[0].2.contains("on this node"),
        "{reasons:?}"
    );
    assert!(reasons[1].1 && reasons[1].2 == "ready", "{reasons:?}");
    assert!(
        !reasons[2].1 && reasons[2].2.contains("not serving"),
        "{reasons:?}"
    );

    // The terminating fallback is named.
    let packet = Packet::new(
        Origin::Pod,
        Protocol::Tcp,
        "10.244.1.99".parse().expect("ip"),
        "10.96.0.31".parse().expect("ip"),
        80,
    );
    let explained =
        explain(&snapshot(), "node-a", &setup(DataPath::Nftables), &packet).expect("ok");
    assert!(
        explained.endpoints[0].why.contains("fallback"),
        "{explained}"
    );
    assert_eq!(ips(&explained.outcome), ["10.244.2.30"]);
}

#[test]
fn rejects_drops_and_what_the_proxy_leaves_alone() {
    let reject = |o: &Outcome, what: &str| match o {
        Outcome::Rejected { reason } => assert!(reason.contains(what), "{reason}"),
        other => panic!("not rejected: {other:?}"),
    };
    let drop = |o: &Outcome, what: &str| match o {
        Outcome::Dropped { reason } => assert!(reason.contains(what), "{reason}"),
        other => panic!("not dropped: {other:?}"),
    };
    reject(
        &netfilter(Origin::Pod, "10.244.1.99", "10.96.0.33", 80),
        "no usable endpoint",
    );
    reject(
        &netfilter(Origin::Pod, "10.244.1.99", "10.96.0.10", 81),
        "unknown port",
    );
    drop(
        &netfilter(Origin::Pod, "10.244.1.99", "10.96.0.99", 80),
        "unallocated",
    );
    // LB IP: sources outside the ranges are dropped, inside reach the
    // local endpoints, of which this node has none: dropped too.
    drop(
        &netfilter(Origin::Outside, "198.51.100.77", "198.51.100.10", 80),
        "loadBalancerSourceRanges",
    );
    drop(
        &netfilter(Origin::Outside, "203.0.113.10", "198.51.100.10", 80),
        "Local",
    );
    // The ranges do not apply to the NodePort; pods short-circuit.
    drop(
        &netfilter(Origin::Outside, "198.51.100.77", "192.168.50.1", 30081),
        "Local",
    );
    // A pod is a source like any other to the ranges.
    drop(
        &netfilter(Origin::Pod, "10.244.1.99", "198.51.100.10", 80),
        "loadBalancerSourceRanges",
    );
    let from_pod = netfilter(Origin::Pod, "10.244.1.99", "192.0.2.50", 80);
    assert_eq!(ips(&from_pod), ["10.244.2.20"]);
    assert_eq!(masquerade(&from_pod), Masquerade::No);
    // The node itself: every endpoint, masqueraded.
    assert_eq!(
        masquerade(&netfilter(
            Origin::Host,
            "192.168.50.1",
            "198.51.100.10",
            80
        )),
        Masquerade::Yes
    );
    // ipMode Proxy, and an address no Service has.
    assert!(matches!(
        netfilter(Origin::Outside, "203.0.113.10", "198.51.100.11", 80),
        Outcome::Untouched { .. }
    ));
    assert!(matches!(
        netfilter(Origin::Pod, "10.244.1.99", "8.8.8.8", 53),
        Outcome::Untouched { .. }
    ));
}

#[test]
fn node_ports_listen_on_the_node_s_addresses_only() {
    let np = netfilter(Origin::Outside, "203.0.113.10", "192.168.50.1", 30080);
    assert_eq!(ips(&np), ["10.244.1.10", "10.244.2.10"]);
    assert_eq!(
        masquerade(&np),
        Masquerade::Yes,
        "externalTrafficPolicy Cluster"
    );
    assert!(matches!(
        netfilter(Origin::Host, "127.0.0.1", "127.0.0.1", 30080),
        Outcome::Untouched { .. }
    ));
}

/// Localhost NodePorts: the eBPF socket programs serve the node's own
/// sockets on 127.0.0.1 and ::1 (to every endpoint, the Local policy's
/// NodePort too), not a pod's (its loopback is its own), not when off and
/// not outside `--nodeport-addresses`; the netfilter rules serve none.
#[test]
fn localhost_node_ports_are_the_ebpf_programs_for_the_node_alone() {
    let ebpf = DataPath::Ebpf {
        tc: false,
        netfilter: true,
    };
    let at = |setup: &Setup, origin: Origin, dst: &str, port: u16| {
        let packet = Packet::new(
            origin,
            Protocol::Tcp,
            dst.parse().expect("ip"),
            dst.parse().expect("ip"),
            port,
        );
        explain(&snapshot(), "node-a", setup, &packet).expect("explained")
    };
    let on = setup(ebpf);
    let host = at(&on, Origin::Host, "127.0.0.1", 30080);
    assert_eq!(ips(&host.outcome), ["10.244.1.10", "10.244.2.10"], "{host}");
    assert!(host.to_string().contains("localhost NodePorts"), "{host}");
    // externalTrafficPolicy Local: the node's own traffic goes to every
    // endpoint, as kube-proxy sends it.
    let local = at(&on, Origin::Host, "127.0.0.1", 30081);
    assert_eq!(ips(&local.outcome), ["10.244.2.20"], "{local}");
    let pod = at(&on, Origin::Pod, "127.0.0.1", 30080);
    assert!(matches!(pod.outcome, Outcome::Untouched { .. }), "{pod}");
    assert!(pod.to_string().contains("the pod's own loopback"), "{pod}");
    let off = at(
        &setup(ebpf).localhost_nodeports(false),
        Origin::Host,
        "127.0.0.1",
        30080,
    );
    assert!(matches!(off.outcome, Outcome::Untouched { .. }), "{off}");
    let mut elsewhere = setup(ebpf);
    elsewhere.proxy = elsewhere
        .proxy
        .nodeport_addresses(["192.168.50.0/24".parse().expect("cidr")]);
    let outside = at(&elsewhere, Origin::Host, "127.0.0.1", 30080);
    assert!(
        matches!(outside.outcome, Outcome::Untouched { .. }),
        "{outside}"
    );
    let nft = at(&setup(DataPath::Nftables), Origin::Host, "127.0.0.1", 30080);
    assert!(matches!(nft.outcome, Outcome::Untouched { .. }), "{nft}");
    assert!(nft.to_string().contains("no NodePort on loopback"), "{nft}");
}

#[test]
fn the_ebpf_programs_translate_at_connect_and_at_the_interface() {
    let ebpf = DataPath::Ebpf {
        tc: true,
        netfilter: true,
    };
    let pod = ask(ebpf, Origin::Pod, "10.244.1.10", "10.96.0.10", 80);
    assert!(
        matches!(
            pod,
            Outcome::Translated {
                mechanism: Mechanism::Sockets,
                masquerade: Masquerade::No,
                ..
            }
        ),
        "{pod:?}"
    );
    // From a pod, an external IP is the cluster's endpoints whatever the
    // policy; an LB IP with source ranges is left to the nftables rules.
    assert_eq!(
        ips(&ask(ebpf, Origin::Pod, "10.244.1.99", "192.0.2.50", 80)),
        ["10.244.2.20"]
    );
    assert!(matches!(
        ask(ebpf, Origin::Pod, "10.244.1.99", "198.51.100.10", 80),
        Outcome::Dropped { .. }
    ));
    // From outside, at the tc programs: Cluster masquerades towards other
    // nodes only.
    let np = ask(ebpf, Origin::Outside, "203.0.113.10", "192.168.50.1", 30080);
    assert!(
        matches!(
            np,
            Outcome::Translated {
                mechanism: Mechanism::Tc,
                masquerade: Masquerade::RemoteEndpoints,
                ..
            }
        ),
        "{np:?}"
    );
    // A ClusterIP from outside: the tc programs too, masqueraded as the
    // netfilter rules do (the source is no pod).
    let cip = ask(ebpf, Origin::Outside, "203.0.113.10", "10.96.0.10", 80);
    assert!(
        matches!(
            cip,
            Outcome::Translated {
                mechanism: Mechanism::Tc,
                masquerade: Masquerade::Yes,
                ..
            }
        ),
        "{cip:?}"
    );
    // The tc programs refuse what has no endpoint and drop an
    // unallocated Service address, from outside too.
    for (dst, dropped) in [("10.96.0.33", false), ("10.96.0.99", true)] {
        let outcome = ask(ebpf, Origin::Outside, "203.0.113.10", dst, 80);
        let ok = if dropped {
            matches!(outcome, Outcome::Dropped { .. })
        } else {
            matches!(&outcome, Outcome::Rejected { reason } if reason.contains("tc programs"))
        };
        assert!(ok, "{dst}: {outcome:?}");
    }
    // Without the tc programs and with no netfilter backend, nothing
    // serves it.
    let alone = DataPath::Ebpf {
        tc: false,
        netfilter: false,
    };
    assert!(matches!(
        ask(alone, Origin::Outside, "203.0.113.10", "10.96.0.10", 80),
        Outcome::Untouched { .. }
    ));
    // The socket programs' drop and reject.
    assert!(matches!(
        ask(alone, Origin::Pod, "10.244.1.99", "10.96.0.99", 80),
        Outcome::Dropped { .. }
    ));
    assert!(matches!(
        ask(alone, Origin::Pod, "10.244.1.99", "10.96.0.33", 80),
        Outcome::Rejected { .. }
    ));
}

#[test]
fn a_mistyped_node_or_mixed_families_are_errors_naming_them() {
    let packet = Packet::new(
        Origin::Pod,
        Protocol::Tcp,
        "10.244.1.99".parse().expect("ip"),
        "10.96.0.10".parse().expect("ip"),
        80,
    );
    let error = explain(&snapshot(), "node-x", &setup(DataPath::Nftables), &packet)
        .expect_err("no such node")
        .to_string();
    assert!(
        error.contains("node-x") && error.contains("node-a"),
        "{error}"
    );
    let mixed = Packet::new(
        Origin::Pod,
        Protocol::Tcp,
        "fd00::1".parse().expect("ip"),
        "10.96.0.10".parse().expect("ip"),
        80,
    );
    let error = explain(&snapshot(), "node-a", &setup(DataPath::Nftables), &mixed)
        .expect_err("mixed")
        .to_string();
    assert!(error.contains("fd00::1"), "{error}");
    assert!("icmp".parse::<Protocol>().is_err());
    assert!("elsewhere".parse::<Origin>().is_err());
}

#[test]
fn the_balancing_is_the_service_s_on_nftables_and_random_elsewhere() {
    use kpng_explain::Balancing;
    let how = |data_path| match ask(data_path, Origin::Pod, "10.244.1.99", "10.96.0.60", 80) {
        Outcome::Translated { balancing, .. } => balancing,
        other => panic!("{other:?}"),
    };
    assert_eq!(how(DataPath::Nftables), Balancing::Maglev);
    assert_eq!(how(DataPath::Iptables), Balancing::Random);
    let sockets = DataPath::Ebpf {
        tc: false,
        netfilter: true,
    };
    assert_eq!(how(sockets), Balancing::Random);
    // The default, for a Service without the annotation.
    let packet = Packet::new(
        Origin::Pod,
        Protocol::Tcp,
        "10.244.1.99".parse().expect("ip"),
        "10.96.0.31".parse().expect("ip"),
        80,
    );
    let proxy = kpng_sink::ProxyConfig::default().balancing(kpng_sink::Balancing::RoundRobin);
    let explained = explain(
        &snapshot(),
        "node-a",
        &Setup::new(proxy, DataPath::Nftables),
        &packet,
    )
    .expect("explained");
    assert!(matches!(
        explained.outcome,
        Outcome::Translated {
            balancing: Balancing::RoundRobin,
            ..
        }
    ));
    assert!(explained.to_string().contains("in turn"), "{explained}");
}

/// The tc programs masquerade at the interface a packet leaves by: with
/// the node's routes asked (`Setup::with_tc_routes`), an endpoint on
/// another node reached around them is named with its interface; without,
/// the explanation says it cannot know.
#[test]
fn the_tc_programs_name_endpoints_reached_around_them() {
    let ebpf = DataPath::Ebpf {
        tc: true,
        netfilter: true,
    };
    let packet = Packet::new(
        Origin::Outside,
        Protocol::Tcp,
        "203.0.113.10".parse().expect("ip"),
        "192.168.50.1".parse().expect("ip"),
        30080,
    );
    // node-b's endpoint is routed by eth9, which has no programs.
    let routes = setup(ebpf)
        .with_tc_routes(|ip| (ip.to_string() == "10.244.2.10").then(|| "eth9".to_owned()));
    let explained = explain(&snapshot(), "node-a", &routes, &packet).expect("explained");
    let Outcome::Translated { endpoints, .. } = &explained.outcome else {
        panic!("not translated: {explained}");
    };
    let around: Vec<(String, Option<&str>)> = endpoints
        .iter()
        .map(|t| (t.ip.to_string(), t.reached_around.as_deref()))
        .collect();
    assert_eq!(
        around,
        [
            ("10.244.1.10".to_owned(), None),
            ("10.244.2.10".to_owned(), Some("eth9"))
        ]
    );
    let text = explained.to_string();
    assert!(
        text.contains(
            "10.244.2.10:8080 (node-b): its route leaves by eth9, which has no tc programs"
        ),
        "{text}"
    );
    assert!(
        serde_json::to_string(&explained)
            .expect("json")
            .contains(r#""reached_around":"eth9""#)
    );
    // Every route through the programs: said so.
    let through = setup(ebpf).with_tc_routes(|_| None);
    let text = explain(&snapshot(), "node-a", &through, &packet)
        .expect("explained")
        .to_string();
    assert!(
        text.contains("every endpoint on another node is reached through"),
        "{text}"
    );
    // Routes not asked: the explanation says it cannot know.
    let text = explain(&snapshot(), "node-a", &setup(ebpf), &packet)
        .expect("explained")
        .to_string();
    assert!(text.contains("the routes were not asked here"), "{text}");
}

/// With no netfilter rules (`--north-south none`), the socket programs
/// decide an LB IP with loadBalancerSourceRanges by whose socket it is:
/// the node's when a node address is in the ranges, a pod's when every pod
/// network is (dropped when none is, left alone when some are).
#[test]
fn lb_source_ranges_at_connect_without_netfilter() {
    let cluster = r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: node-a}
  status: {addresses: [{type: InternalIP, address: 192.168.50.1}]}
- apiVersion: v1
  kind: Service
  metadata: {namespace: t, name: lb}
  spec: {type: LoadBalancer, clusterIP: 10.96.0.21, loadBalancerSourceRanges: [192.168.50.0/24, 10.244.1.0/24], ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30081}]}
  status: {loadBalancer: {ingress: [{ip: 198.51.100.10}]}}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {namespace: t, name: lb-1, labels: {kubernetes.io/service-name: lb}}
  addressType: IPv4
  endpoints: [{addresses: [10.244.2.20], nodeName: node-b}]
  ports: [{name: http, port: 8080, protocol: TCP}]
"#;
    let snapshot = snapshot_of(cluster);
    let alone = DataPath::Ebpf {
        tc: true,
        netfilter: false,
    };
    let verdict = |origin: Origin, src: &str, pods: &str| {
        let proxy = kpng_sink::ProxyConfig::default().cluster_cidrs([pods.parse().expect("cidr")]);
        let packet = Packet::new(
            origin,
            Protocol::Tcp,
            src.parse().expect("ip"),
            "198.51.100.10".parse().expect("ip"),
            80,
        );
        let explained =
            explain(&snapshot, "node-a", &Setup::new(proxy, alone), &packet).expect("explained");
        let text = explained.to_string();
        (explained.outcome, text)
    };
    // The node's address is in the ranges: its sockets are served.
    let (outcome, text) = verdict(Origin::Host, "192.168.50.1", "10.244.0.0/16");
    assert!(
        matches!(
            outcome,
            Outcome::Translated {
                mechanism: Mechanism::Sockets,
                ..
            }
        ),
        "{text}"
    );
    assert!(
        text.contains("the node's address 192.168.50.1 is in them"),
        "{text}"
    );
    // Every pod network in the ranges: pods are served; none: dropped;
    // some: left alone.
    let (outcome, text) = verdict(Origin::Pod, "10.244.1.99", "10.244.1.0/24");
    assert!(matches!(outcome, Outcome::Translated { .. }), "{text}");
    let (outcome, text) = verdict(Origin::Pod, "10.245.1.99", "10.245.0.0/16");
    assert!(
        matches!(&outcome, Outcome::Dropped { reason } if reason.contains("EPERM")),
        "{text}"
    );
    let (outcome, text) = verdict(Origin::Pod, "10.244.1.99", "10.244.0.0/16");
    assert!(matches!(outcome, Outcome::Untouched { .. }), "{text}");
    assert!(text.contains("partly in them"), "{text}");
}

/// Direct server return (`--load-balancer-mode`, or the Service's
/// `kpng.io/load-balancer-mode`): the tc programs keep the client's
/// address and say how the Service's address rides; hybrid returns TCP
/// directly and masquerades UDP; a ClusterIP from outside, a Local
/// policy and the netfilter backends are as ever.
#[test]
fn direct_server_return_follows_the_mode_and_the_annotation() {
    use kpng_sink::LoadBalancerMode;
    let yaml = r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: node-a}
  status: {addresses: [{type: InternalIP, address: 192.168.50.1}]}
- apiVersion: v1
  kind: Service
  metadata: {namespace: t, name: web}
  spec: {type: NodePort, clusterIP: 10.96.0.10, ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30080}, {name: dns, port: 53, protocol: UDP, targetPort: 5353, nodePort: 30053}]}
- apiVersion: v1
  kind: Service
  metadata: {namespace: t, name: kept, annotations: {kpng.io/load-balancer-mode: snat}}
  spec: {type: NodePort, clusterIP: 10.96.0.11, ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30081}]}
- apiVersion: v1
  kind: Service
  metadata: {namespace: t, name: hy, annotations: {kpng.io/load-balancer-mode: hybrid}}
  spec: {type: NodePort, clusterIP: 10.96.0.12, ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30082}, {name: dns, port: 53, protocol: UDP, targetPort: 5353, nodePort: 30083}]}
"#
    .to_owned();
    let mut yaml = yaml;
    for name in ["web", "kept", "hy"] {
        yaml.push_str(&format!(
            r#"- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {{namespace: t, name: {name}-1, labels: {{kubernetes.io/service-name: {name}}}}}
  addressType: IPv4
  endpoints: [{{addresses: [10.244.2.10], nodeName: node-b}}]
  ports: [{{name: http, port: 8080, protocol: TCP}}, {{name: dns, port: 5353, protocol: UDP}}]
"#
        ));
    }
    let snapshot = snapshot_of(&yaml);
    let ebpf = DataPath::Ebpf {
        tc: true,
        netfilter: true,
    };
    let explained = |data_path, mode, protocol, dst: &str, port| {
        let proxy = kpng_sink::ProxyConfig::default()
            .cluster_cidrs(["10.244.0.0/16".parse().expect("cidr")])
            .load_balancer_mode(mode);
        let packet = Packet::new(
            Origin::Outside,
            protocol,
            "203.0.113.10".parse().expect("ip"),
            dst.parse().expect("ip"),
            port,
        );
        explain(&snapshot, "node-a", &Setup::new(proxy, data_path), &packet).expect("explained")
    };
    let mode = |data_path, mode, protocol, dst, port| {
        masquerade(&explained(data_path, mode, protocol, dst, port).outcome)
    };
    let node = "192.168.50.1";
    let (dsr, snat, hybrid) = (
        LoadBalancerMode::Dsr,
        LoadBalancerMode::Snat,
        LoadBalancerMode::Hybrid,
    );
    // The flag, for TCP and UDP.
    assert_eq!(
        mode(ebpf, dsr, Protocol::Tcp, node, 30080),
        Masquerade::DirectReturn
    );
    assert_eq!(
        mode(ebpf, dsr, Protocol::Udp, node, 30053),
        Masquerade::DirectReturn
    );
    assert_eq!(
        mode(ebpf, snat, Protocol::Tcp, node, 30080),
        Masquerade::RemoteEndpoints
    );
    assert_eq!(
        mode(ebpf, hybrid, Protocol::Tcp, node, 30080),
        Masquerade::DirectReturn
    );
    assert_eq!(
        mode(ebpf, hybrid, Protocol::Udp, node, 30053),
        Masquerade::RemoteEndpoints
    );
    // The annotation over the flag.
    assert_eq!(
        mode(ebpf, dsr, Protocol::Tcp, node, 30081),
        Masquerade::RemoteEndpoints
    );
    assert_eq!(
        mode(ebpf, snat, Protocol::Tcp, node, 30082),
        Masquerade::DirectReturn
    );
    assert_eq!(
        mode(ebpf, snat, Protocol::Udp, node, 30083),
        Masquerade::RemoteEndpoints
    );
    // A ClusterIP from outside is masqueraded whatever the mode, and the
    // netfilter backends masquerade.
    assert_eq!(
        mode(ebpf, dsr, Protocol::Tcp, "10.96.0.10", 80),
        Masquerade::Yes
    );
    assert_eq!(
        mode(DataPath::Nftables, dsr, Protocol::Tcp, node, 30080),
        Masquerade::Yes
    );
    // The text says what rides where.
    let text = explained(ebpf, dsr, Protocol::Tcp, node, 30080).to_string();
    assert!(
        text.contains("load balancer mode dsr: direct server return")
            && text.contains("an IPv4 option (8 bytes) on the first packet")
            && text.contains("reply to the client directly (DSR)"),
        "{text}"
    );
}
