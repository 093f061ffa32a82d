//! The eBPF backend in the lab: the scenarios every backend passes, run
//! as `kpng … to-ebpf` runs it (socket-level load balancing for the
//! node's sockets, the nftables backend for traffic from outside), then
//! the eBPF backend alone, with no netfilter rule in the node. Run as
//! root with cgroup v2; otherwise each test prints SKIPPED and passes.

use kpng_backend_ebpf::EbpfBackend;
use kpng_lab::scenarios::{ALL3, E1, E2, E3, POD_CLIENT, dropped_locally, lab, manifest, service};
use kpng_lab::{
    EbpfWithNft, LabBackend, Proxy, Settings, ebpf_config, endpoints, reached, require_lab, settle,
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
    let mut proxy = kpng_lab::ebpf_alone_proxy(&lab, &Settings::lab(), config);
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
    let mut proxy = kpng_lab::ebpf_alone_proxy(&lab, &Settings::lab(), config);
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
    // The tc programs are on every link: every endpoint is reached
    // through them.
    let unmasqueraded = proxy.backend.unmasqueraded();
    assert!(unmasqueraded.is_empty(), "{unmasqueraded:?}");
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
    for k in 1..=3 {
        let name = format!("e{k}");
        lab.host(&name, &[&format!("fd00:244:{k}::10")], &[]);
        lab.serve(&name, &name);
    }
    let config = ebpf_config(&lab, &Settings::default(), true);
    let mut proxy = kpng_lab::ebpf_alone_proxy(&lab, &Settings::default(), config);
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
- apiVersion: v1
  kind: Service
  metadata: {namespace: t, name: mg6, annotations: {kpng.io/balancing: maglev}}
  spec: {clusterIP: "fd00:96::61", clusterIPs: ["fd00:96::61"], ipFamilies: [IPv6], externalIPs: ["2001:db8:5::51"], externalTrafficPolicy: Local, ports: [{name: http, port: 80, targetPort: 8080}]}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {namespace: t, name: mg6-1, labels: {kubernetes.io/service-name: mg6}}
  addressType: IPv6
  endpoints: [{addresses: ["fd00:244:1::10"], nodeName: node-a}, {addresses: ["fd00:244:2::10"], nodeName: node-a}, {addresses: ["fd00:244:3::10"], nodeName: node-a}]
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
    // Maglev over IPv6: each flow where the nftables rule's hash (a
    // 20-byte key) puts it.
    let ports: Vec<u16> = (23_000..23_060).collect();
    let got = reached(&lab.connect_from_ports("ext6", "2001:db8:5::51", 80, &ports));
    let targets: Vec<(std::net::IpAddr, u16)> = (1..=3)
        .map(|k| (format!("fd00:244:{k}::10").parse().expect("ip"), 8080))
        .collect();
    let client: std::net::IpAddr = "2001:db8:1::10".parse().expect("ip");
    let predicted: Vec<String> = kpng_lab::maglev_picks(client, &ports, &targets)
        .into_iter()
        .map(|i| format!("e{}", i + 1))
        .collect();
    assert_eq!(got, predicted);
    EbpfWithNft::clear(&lab);
}

/// A ClusterIP Service `s<i>` (10.96.1.i) with TCP 80 and UDP 53 on e1,
/// e2 and e3.
fn numbered(count: usize) -> Vec<String> {
    (1..=count)
        .map(|i| {
            let spec = format!(
                "{{clusterIP: 10.96.1.{i}, ports: [{{name: http, port: 80, targetPort: 8080}}, {{name: dns, port: 53, protocol: UDP, targetPort: 5353}}]}}"
            );
            service(&format!("s{i}"), &spec, ALL3)
        })
        .collect()
}

/// A client that holds sockets across a swap: a connected UDP socket and
/// a TCP connection to s1, made before; after a line on its stdin, a
/// datagram on the UDP socket, whose reply must come from the Service
/// address, and the TCP socket's peer name (the Service address too).
const HELD: &str = r#"
import socket, sys
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(3)
u.connect(("10.96.1.1", 53)); u.send(b"a")
d, a = u.recvfrom(200)
t = socket.create_connection(("10.96.1.1", 80), timeout=3)
print("before", a[0], a[1], t.getpeername()[0], t.getpeername()[1], flush=True)
sys.stdin.readline()
u.send(b"b")
d, a = u.recvfrom(200)
print("after", a[0], a[1], t.getpeername()[0], t.getpeername()[1], flush=True)
"#;

/// New TCP connections to s1, one after the other, until told to stop
/// (a line on stdin after `ready`); one line each.
const LOOP: &str = r#"
import select, socket, sys
n = 0
while True:
    try:
        s = socket.create_connection(("10.96.1.1", 80), timeout=3)
        out = s.recv(200).decode().strip(); s.close()
    except OSError as e:
        out = "ERROR %s" % e
    print(out, flush=True)
    n += 1
    if n == 1: print("ready", flush=True)
    if select.select([sys.stdin], [], [], 0)[0]: break
"#;

/// The maps sized from the cluster start small (a floor of 4 entries
/// here) and grow by a planned swap when the cluster outgrows them: new
/// maps are filled and the programs switched to them, twice, while a
/// client keeps connecting (every connection answered), and sockets made
/// before the swaps keep their Service address (getpeername, a connected
/// UDP socket's replies): the connections' maps carried over.
#[test]
fn maps_grow_by_a_planned_swap_and_connections_keep_working() {
    use std::io::{BufRead, Write};
    use std::process::Stdio;
    require_lab!(EbpfWithNft);
    let lab = lab();
    let sizes = kpng_backend_ebpf::MapSizes::default().min_entries(4);
    let config = ebpf_config(&lab, &Settings::lab(), false).map_sizes(sizes);
    let mut proxy = kpng_lab::ebpf_alone_proxy(&lab, &Settings::lab(), config);
    proxy.load(&manifest(&numbered(1))).expect("sync");
    let fill = |proxy: &Proxy<EbpfBackend>, map: &str| {
        let fills = proxy.backend.map_fill();
        let f = fills
            .iter()
            .find(|f| f.map == map)
            .expect("a map of the cluster");
        (f.entries, f.max_entries)
    };
    // Two records (TCP 80, UDP 53) in four entries.
    assert_eq!(fill(&proxy, "kpng_services"), (2, 4));
    assert!(!proxy.backend.last_sync().grown);
    settle();

    let mut held = lab
        .client("podc", &["python3", "-u", "-c", HELD])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("client");
    let mut held_out = std::io::BufReader::new(held.stdout.take().expect("stdout"));
    let mut line = String::new();
    held_out.read_line(&mut line).expect("a line");
    assert_eq!(line.trim(), "before 10.96.1.1 53 10.96.1.1 80");

    let mut looping = lab
        .client("podc", &["python3", "-u", "-c", LOOP])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("client");
    let mut loop_out = std::io::BufReader::new(looping.stdout.take().expect("stdout"));
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        if loop_out.read_line(&mut line).expect("a line") == 0 || line.trim() == "ready" {
            break;
        }
        lines.push(line.trim().to_owned());
    }

    // 40 Services: 80 records, past 3/4 of 4: the maps grow.
    proxy.load(&manifest(&numbered(40))).expect("sync");
    let stats = proxy.backend.last_sync().clone();
    assert!(stats.grown && stats.replaced, "{stats:?}");
    let (entries, max) = fill(&proxy, "kpng_services");
    assert_eq!(entries, 80);
    assert!(max >= 120 && max.is_power_of_two(), "{max}");
    // And again, past 3/4 of that.
    proxy.load(&manifest(&numbered(200))).expect("sync");
    assert!(proxy.backend.last_sync().grown);
    assert_eq!(fill(&proxy, "kpng_services").0, 400);
    // A round that fits is incremental again.
    proxy.load(&manifest(&numbered(201))).expect("sync");
    let stats = proxy.backend.last_sync().clone();
    assert!(!stats.grown && !stats.replaced, "{stats:?}");

    looping
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"stop\n")
        .expect("stop");
    for line in loop_out.lines() {
        lines.push(line.expect("a line"));
    }
    let _ = looping.wait();
    assert!(lines.len() >= 2, "{lines:?}");
    assert!(
        lines.iter().all(|l| l.starts_with("10.244.")),
        "every connection through the swaps answered: {lines:?}"
    );

    let line = go_on(&mut held, &mut held_out);
    assert_eq!(line.trim(), "after 10.96.1.1 53 10.96.1.1 80");

    // New connections to the first and the last Service reach every
    // endpoint; nothing was counted missing.
    for ip in ["10.96.1.1", "10.96.1.201"] {
        let lines = lab.connect("podc", "tcp", ip, 80, 30);
        assert_eq!(
            endpoints(&lines),
            [E1, E2, E3].map(String::from).into(),
            "{ip}: {lines:?}"
        );
    }
    assert_eq!(proxy.backend.counters().expect("counters").missing, 0);
    // One generation of maps is pinned: the old ones went.
    let (_, pins) = lab.bpf_env();
    let generations: Vec<String> = std::fs::read_dir(&pins)
        .expect("pins")
        .flatten()
        .flat_map(|v| std::fs::read_dir(v.path()).into_iter().flatten().flatten())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("maps") || n == "next")
        .collect();
    assert_eq!(generations, ["maps-2"], "{generations:?}");

    // A restart opens the grown maps and adopts what they hold: nothing
    // written, and the programs serve on.
    let config = proxy.backend.config().clone();
    drop(proxy);
    let mut proxy = Proxy::with(EbpfBackend::attach(config).expect("attach again")).explained_in(
        &lab,
        &Settings::lab(),
        kpng_lab::ebpf_alone(false),
    );
    proxy.load(&manifest(&numbered(201))).expect("sync");
    let stats = proxy.backend.last_sync().clone();
    assert!(stats.adopted && stats.replaced && !stats.grown, "{stats:?}");
    assert_eq!(stats.writes, 0, "{stats:?}");
    assert_eq!(fill(&proxy, "kpng_services"), (402, 1024));
    let lines = lab.connect("podc", "tcp", "10.96.1.201", 80, 30);
    assert_eq!(
        endpoints(&lines),
        [E1, E2, E3].map(String::from).into(),
        "{lines:?}"
    );
    EbpfWithNft::clear(&lab);
}

/// A map of a size the operator fixed does not grow: a round that needs
/// more fails, naming the map, its size and the need, and writes nothing:
/// the previous state serves on.
#[test]
fn a_full_map_of_a_fixed_size_fails_the_round_and_keeps_the_previous_state() {
    require_lab!(EbpfWithNft);
    let lab = lab();
    let sizes = kpng_backend_ebpf::MapSizes::default()
        .fix("kpng_services", 4)
        .expect("a map");
    let config = ebpf_config(&lab, &Settings::lab(), false).map_sizes(sizes);
    let mut proxy = kpng_lab::ebpf_alone_proxy(&lab, &Settings::lab(), config);
    proxy.load(&manifest(&numbered(2))).expect("sync");
    settle();
    let error = proxy
        .load(&manifest(&numbered(3)))
        .expect_err("the map is full");
    let text = format!(
        "{error}: {}",
        std::error::Error::source(&error)
            .map(ToString::to_string)
            .unwrap_or_default()
    );
    assert!(
        text.contains("map kpng_services is full: it holds 4 entries and the round needs 6"),
        "{text}"
    );
    assert_eq!(proxy.backend.last_sync().writes, 0);
    // s1 and s2 as before; s3 not programmed (an address of the Service
    // CIDR no Service holds: dropped).
    let lines = lab.connect("podc", "tcp", "10.96.1.2", 80, 20);
    assert_eq!(
        endpoints(&lines),
        [E1, E2, E3].map(String::from).into(),
        "{lines:?}"
    );
    assert_eq!(
        lab.once("podc", "tcp", "10.96.1.3", 80),
        dropped_locally::<EbpfWithNft>()
    );
    // Fewer Services fit again.
    proxy.load(&manifest(&numbered(1))).expect("sync");
    assert_eq!(
        lab.once("podc", "tcp", "10.96.1.2", 80),
        dropped_locally::<EbpfWithNft>()
    );
    EbpfWithNft::clear(&lab);
}

/// The tc programs masquerade external traffic where they are: an
/// endpoint on another node whose route leaves by an interface without
/// them is named (with that interface) and warned about; the local one,
/// and a Service with the Local policy, are not.
#[test]
fn endpoints_reached_around_the_tc_programs_are_named() {
    use kpng_lab::scenarios::EXT_IN;
    require_lab!(EbpfWithNft);
    let lab = lab();
    let dev = |ip: &str| -> String {
        let route = lab.in_node(&["ip", "-o", "route", "get", ip]);
        let mut words = route.split_whitespace().skip_while(|w| *w != "dev");
        words.nth(1).expect("a dev").to_owned()
    };
    let outside = dev(EXT_IN);
    let (cgroup, pins) = lab.bpf_env();
    let config = kpng_backend_ebpf::EbpfConfig::new(Settings::lab().proxy())
        .cgroup(cgroup)
        .pin_path(pins)
        .tc_interfaces([outside.clone()])
        .tc_in_netns(&lab.ns("node"));
    let mut proxy = Proxy::with(EbpfBackend::attach(config).expect("attach"));
    let np = |policy: &str| {
        service(
            "np",
            &format!(
                "{{type: NodePort, clusterIP: 10.96.0.20, externalTrafficPolicy: {policy}, ports: [{{name: http, port: 80, targetPort: 8080, nodePort: 30080}}]}}"
            ),
            ALL3,
        )
    };
    proxy.load(&manifest(&[np("Cluster")])).expect("sync");
    let named: Vec<(String, String)> = proxy
        .backend
        .unmasqueraded()
        .iter()
        .map(|(ip, interface)| (ip.to_string(), interface.clone()))
        .collect();
    assert_eq!(
        named,
        [(E2.to_owned(), dev(E2)), (E3.to_owned(), dev(E3))],
        "outside is {outside}"
    );
    // What `explain --tc-interfaces` asks on the node says the same.
    let netns = std::path::PathBuf::from("/run/netns").join(lab.ns("node"));
    let routes = kpng_backend_ebpf::TcRoutes::new(Some(&netns), std::slice::from_ref(&outside))
        .expect("routes");
    let ips: Vec<std::net::IpAddr> = [E2, E3].iter().map(|ip| ip.parse().expect("ip")).collect();
    assert_eq!(
        routes.around(&ips).expect("asked"),
        [Some(dev(E2)), Some(dev(E3))],
        "outside is {outside}"
    );
    proxy.load(&manifest(&[np("Local")])).expect("sync");
    let unmasqueraded = proxy.backend.unmasqueraded();
    assert!(unmasqueraded.is_empty(), "{unmasqueraded:?}");
    EbpfWithNft::clear(&lab);
}

/// The programs' connection counters (`kpng_traffic`), read back from
/// the pinned map: each connection to a ClusterIP from a pod (socket
/// programs) and to a NodePort from outside (tc programs) counted for
/// its endpoint.
#[test]
fn counters_count_each_connection_per_service_port_and_endpoint() {
    require_lab!(EbpfWithNft);
    kpng_lab::scenarios::counters_count_each_connection_per_service_port_and_endpoint(
        true,
        |lab| {
            EbpfBackend::attach(ebpf_config(lab, &Settings::lab(), true).counters(true))
                .expect("attach")
        },
        |_, backend: &EbpfBackend| {
            kpng_backend_ebpf::TrafficReader::new(backend.config())
                .counts()
                .expect("counters read")
        },
    );
}

/// With counters off the programs count nothing.
#[test]
fn counters_off_count_nothing() {
    require_lab!(EbpfWithNft);
    let lab = lab();
    let config = ebpf_config(&lab, &Settings::lab(), false).counters(false);
    let mut proxy = Proxy::with(EbpfBackend::attach(config.clone()).expect("attach"));
    let spec = "{clusterIP: 10.96.0.71, ports: [{name: http, port: 80, targetPort: 8080}]}";
    proxy
        .load(&manifest(&[service("web", spec, ALL3)]))
        .expect("sync");
    settle();
    // (30 connections: each of 3 endpoints is missed with p < 1e-4.)
    let lines = lab.connect("podc", "tcp", "10.96.0.71", 80, 30);
    assert_eq!(endpoints(&lines).len(), 3, "{lines:?}");
    let rows = kpng_backend_ebpf::TrafficReader::new(&config)
        .counts()
        .expect("read");
    assert!(rows.is_empty(), "{rows:?}");
}

/// Balancing choices in the eBPF programs, with real packets. Maglev,
/// from outside (tc): each flow (a client's source port) reaches the
/// endpoint its slot names, the one the nftables rules would pick
/// (`kpng_model::maglev::flow_slot` is their hash), the same flows again
/// the same endpoints, and when one endpoint leaves the other flows stay
/// where they were (a random Service's move). Round robin: a pod's
/// connections to the ClusterIP, and outside clients' to the NodePort,
/// take the endpoints in turn.
#[test]
fn maglev_from_outside_and_round_robin_in_the_ebpf_programs() {
    use kpng_lab::scenarios::{EXT_IN, NODE_IP};
    require_lab!(EbpfWithNft);
    let lab = lab();
    let config = ebpf_config(&lab, &Settings::lab(), true);
    let mut proxy = kpng_lab::ebpf_alone_proxy(&lab, &Settings::lab(), config);
    let annotated = |name: &str, ip: &str, node_port: u16, how: Option<&str>, eps: &str| {
        let spec = format!(
            "{{type: NodePort, clusterIP: {ip}, ports: [{{name: http, port: 80, targetPort: 8080, nodePort: {node_port}}}]}}"
        );
        let text = service(name, &spec, eps);
        match how {
            Some(how) => text.replace(
                &format!("metadata: {{namespace: t, name: {name}}}"),
                &format!("metadata: {{namespace: t, name: {name}, annotations: {{kpng.io/balancing: {how}}}}}"),
            ),
            None => text,
        }
    };
    let two = "[{addresses: [10.244.1.10], nodeName: node-a}, {addresses: [10.244.2.10], nodeName: node-b}]";
    let world = |eps: &str| {
        manifest(&[
            annotated("mg", "10.96.0.60", 30060, Some("maglev"), eps),
            annotated("rnd", "10.96.0.61", 30061, None, eps),
            annotated("rr", "10.96.0.62", 30062, Some("round-robin"), ALL3),
        ])
    };
    proxy.load(&world(ALL3)).expect("sync");
    settle();

    let ports: Vec<u16> = (22_000..22_120).collect();
    let flows =
        |node_port: u16| reached(&lab.connect_from_ports("ext", NODE_IP, node_port, &ports));
    let first = flows(30060);
    assert_eq!(first.len(), ports.len(), "{first:?}");
    assert_eq!(flows(30060), first, "the same flows, the same endpoints");
    let all = [E1, E2, E3];
    let targets: Vec<(std::net::IpAddr, u16)> = all
        .iter()
        .map(|ip| (ip.parse().expect("ip"), 8080))
        .collect();
    let client: std::net::IpAddr = EXT_IN.parse().expect("ip");
    let predicted: Vec<String> = kpng_lab::maglev_picks(client, &ports, &targets)
        .into_iter()
        .map(|i| targets[i].0.to_string())
        .collect();
    assert_eq!(first, predicted, "each flow where its Maglev slot says");
    for ep in all {
        let n = first.iter().filter(|e| *e == ep).count();
        assert!(n >= 20, "{ep}: {n} of {} flows", ports.len());
    }
    let random_before = flows(30061);

    // Round robin: 15 connections, five to each endpoint, from a pod's
    // sockets and from outside through tc.
    for (from, host, port) in [("podc", "10.96.0.62", 80), ("ext", NODE_IP, 30062)] {
        let turns = reached(&lab.connect(from, "tcp", host, port, 15));
        for ep in all {
            let n = turns.iter().filter(|e| *e == ep).count();
            assert_eq!(n, 5, "{from} -> {host}:{port}: {turns:?}");
        }
    }

    // E3 leaves the Maglev and random Services.
    proxy.load(&world(two)).expect("sync");
    settle();
    let kept = |before: &[String], after: &[String]| {
        let stayed: Vec<(&String, &String)> =
            before.iter().zip(after).filter(|(b, _)| *b != E3).collect();
        let same = stayed.iter().filter(|(b, a)| b == a).count();
        (same, stayed.len())
    };
    let after = flows(30060);
    assert!(after.iter().all(|e| e == E1 || e == E2), "{after:?}");
    let (same, stayed) = kept(&first, &after);
    assert!(
        same * 100 >= stayed * 90,
        "maglev kept {same} of {stayed} flows"
    );
    let (random_same, random_stayed) = kept(&random_before, &flows(30061));
    assert!(
        random_same * 100 < random_stayed * 75,
        "random kept {random_same} of {random_stayed} flows"
    );
    EbpfWithNft::clear(&lab);
}

/// A client holding sockets to Service `svc` (`argv[1]`, UDP 53 and TCP
/// 80) and a UDP socket connected to an endpoint's own address
/// (`argv[2]`, 5353); after a line on its stdin: a receive and a send on
/// the Service's UDP socket, a datagram on it once connected again, one
/// on the direct socket, and the TCP socket's peer and error. Each
/// outcome is `ok`, the endpoint that answered or the error's name.
const HELD_UDP: &str = r#"
import errno, socket, sys
svc, direct_ip = sys.argv[1], sys.argv[2]
fam = socket.AF_INET6 if ":" in svc else socket.AF_INET
def err(f):
    try:
        return f()
    except socket.timeout:
        return "TIMEOUT"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def one(s):
    return err(lambda: (s.send(b"x"), s.recv(200).decode().split()[0])[1])
u = socket.socket(fam, socket.SOCK_DGRAM); u.settimeout(2); u.connect((svc, 53))
d = socket.socket(fam, socket.SOCK_DGRAM); d.settimeout(2); d.connect((direct_ip, 5353))
t = socket.create_connection((svc, 80), timeout=2); t.recv(200)
print("before", one(u), one(d), flush=True)
sys.stdin.readline()
received = err(lambda: u.recv(200) and "ok")
sent = err(lambda: u.send(b"x") and "ok")
u.connect((svc, 53))
again = one(u)
tcp = "%s/%s" % (t.getpeername()[0], t.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))
print("after", received, sent, again, one(d), tcp, flush=True)
"#;

/// The round that takes endpoint `a` from UDP Service `svc` (endpoints
/// `a`, then `b`) ends the connected UDP sockets a Service sent to `a`:
/// the client's next receive fails with ECONNABORTED (a send, with
/// EDESTADDRREQ: the socket is no longer connected), and once it
/// connects again it reaches `b`. A socket connected to `a`'s own
/// address still reaches `a`; the TCP connection to the Service is left
/// as it was.
fn a_removed_endpoint_ends_the_connected_udp_sockets_sent_to_it(
    lab: &kpng_lab::Lab,
    (svc, a, b): (&str, &str, &str),
    spec: &str,
    slice: &dyn Fn(&str) -> String,
) {
    use std::io::BufRead;
    use std::process::Stdio;
    let config = ebpf_config(lab, &Settings::lab(), false);
    let mut proxy = kpng_lab::ebpf_alone_proxy(lab, &Settings::lab(), config);
    let items = |ep: &str| [format!("{spec}{}", slice(ep))];
    proxy.load(&manifest(&items(a))).expect("sync");
    settle();
    let mut held = lab
        .client("podc", &["python3", "-u", "-c", HELD_UDP, svc, a])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("client");
    let mut out = std::io::BufReader::new(held.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("a line");
    assert_eq!(line.trim(), format!("before {a} {a}"));

    proxy.load(&manifest(&items(b))).expect("sync");
    let stats = proxy.backend.last_sync().clone();

    let line = go_on(&mut held, &mut out);
    assert_eq!(
        line.trim(),
        format!("after ECONNABORTED EDESTADDRREQ {b} {a} {svc}/0"),
        "the Service's socket ended, then balanced anew; the direct one \
         and the TCP connection untouched"
    );
    assert!(!stats.replaced, "{stats:?}");
    assert_eq!(stats.udp_sockets_ended, 1, "{stats:?}");
    EbpfWithNft::clear(lab);
}

#[test]
fn a_removed_endpoint_ends_the_connected_udp_sockets_sent_to_it_ipv4() {
    require_lab!(EbpfWithNft);
    let lab = lab();
    let spec = r#"
- apiVersion: v1
  kind: Service
  metadata: {namespace: t, name: u}
  spec: {clusterIP: 10.96.0.20, ports: [{name: http, port: 80, targetPort: 8080}, {name: dns, port: 53, protocol: UDP, targetPort: 5353}]}
"#;
    let slice = |ep: &str| {
        let node = if ep == E1 { "node-a" } else { "node-b" };
        format!(
            r#"- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {{namespace: t, name: u-1, labels: {{kubernetes.io/service-name: u}}}}
  addressType: IPv4
  endpoints: [{{addresses: [{ep}], nodeName: {node}}}]
  ports: [{{name: http, port: 8080, protocol: TCP}}, {{name: dns, port: 5353, protocol: UDP}}]
"#
        )
    };
    a_removed_endpoint_ends_the_connected_udp_sockets_sent_to_it(
        &lab,
        ("10.96.0.20", E1, E2),
        spec,
        &slice,
    );
}

#[test]
fn a_removed_endpoint_ends_the_connected_udp_sockets_sent_to_it_ipv6() {
    require_lab!(EbpfWithNft);
    let mut lab = kpng_lab::Lab::new();
    let (e1, e2) = ("fd00:244:1::10", "fd00:244:2::10");
    lab.host("podc", &["fd00:244:1::99"], &[]);
    lab.host("e1", &[e1], &[]);
    lab.serve("e1", e1);
    lab.host("e2", &[e2], &[]);
    lab.serve("e2", e2);
    let spec = r#"
- apiVersion: v1
  kind: Service
  metadata: {namespace: t, name: u}
  spec: {clusterIP: "fd00:96::20", clusterIPs: ["fd00:96::20"], ipFamilies: [IPv6], ports: [{name: http, port: 80, targetPort: 8080}, {name: dns, port: 53, protocol: UDP, targetPort: 5353}]}
"#;
    let slice = |ep: &str| {
        let node = if ep == e1 { "node-a" } else { "node-b" };
        format!(
            r#"- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {{namespace: t, name: u-1, labels: {{kubernetes.io/service-name: u}}}}
  addressType: IPv6
  endpoints: [{{addresses: ["{ep}"], nodeName: {node}}}]
  ports: [{{name: http, port: 8080, protocol: TCP}}, {{name: dns, port: 5353, protocol: UDP}}]
"#
        )
    };
    a_removed_endpoint_ends_the_connected_udp_sockets_sent_to_it(
        &lab,
        ("fd00:96::20", e1, e2),
        spec,
        &slice,
    );
}

/// A UDP socket connected through a Service, then a line on stdin: its
/// next receive's outcome (the error's name, or `ok`).
const HELD_UDP_RECV: &str = r#"
import errno, socket, sys
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(2); u.connect((sys.argv[1], 53))
u.send(b"x"); print("before", u.recv(200).decode().split()[0], flush=True)
sys.stdin.readline()
try:
    u.recv(200); out = "ok"
except socket.timeout:
    out = "TIMEOUT"
except OSError as e:
    out = errno.errorcode.get(e.errno, str(e.errno))
print("after", out, flush=True)
"#;

/// A Service deleted: the UDP sockets connected through it are ended
/// too (every endpoint of its UDP port left).
#[test]
fn a_deleted_service_ends_the_udp_sockets_connected_through_it() {
    use std::io::BufRead;
    use std::process::Stdio;
    require_lab!(EbpfWithNft);
    let lab = lab();
    let config = ebpf_config(&lab, &Settings::lab(), false);
    let mut proxy = kpng_lab::ebpf_alone_proxy(&lab, &Settings::lab(), config);
    let spec =
        "{clusterIP: 10.96.0.30, ports: [{name: dns, port: 53, protocol: UDP, targetPort: 5353}]}";
    let keep =
        "{clusterIP: 10.96.0.31, ports: [{name: dns, port: 53, protocol: UDP, targetPort: 5353}]}";
    proxy
        .load(&manifest(&[
            service("gone", spec, ALL3),
            service("kept", keep, ALL3),
        ]))
        .expect("sync");
    settle();
    let mut held = lab
        .client(
            "podc",
            &["python3", "-u", "-c", HELD_UDP_RECV, "10.96.0.30"],
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("client");
    let mut out = std::io::BufReader::new(held.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("a line");
    assert!(line.starts_with("before 10.244."), "{line}");

    proxy
        .load(&manifest(&[service("kept", keep, ALL3)]))
        .expect("sync");
    let stats = proxy.backend.last_sync().clone();
    let line = go_on(&mut held, &mut out);
    assert_eq!(line.trim(), "after ECONNABORTED");
    assert_eq!(stats.udp_sockets_ended, 1, "{stats:?}");
    EbpfWithNft::clear(&lab);
}

/// A UDP socket connected through a Service, then a line on stdin: a
/// datagram sent and its answer (the endpoint), or the error's name.
const HELD_UDP_AGAIN: &str = r#"
import errno, socket, sys
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(2); u.connect((sys.argv[1], 53))
u.send(b"x"); print("before", u.recv(200).decode().split()[0], flush=True)
sys.stdin.readline()
try:
    u.send(b"x"); out = u.recv(200).decode().split()[0]
except socket.timeout:
    out = "TIMEOUT"
except OSError as e:
    out = errno.errorcode.get(e.errno, str(e.errno))
print("after", out, flush=True)
"#;

/// kpng down while an endpoint leaves: the first sync of the next
/// process, which adopts the pinned programs and maps, ends the UDP
/// sockets connected through a Service to that endpoint (the pinned
/// connection map remembers where each was sent), and leaves those whose
/// endpoint is still there.
#[test]
fn the_first_sync_after_a_restart_ends_udp_sockets_to_endpoints_that_left_meanwhile() {
    use std::io::BufRead;
    use std::process::Stdio;
    require_lab!(EbpfWithNft);
    let lab = lab();
    let config = ebpf_config(&lab, &Settings::lab(), false);
    let mut proxy = kpng_lab::ebpf_alone_proxy(&lab, &Settings::lab(), config);
    let spec = |ip: &str| {
        format!(
            "{{clusterIP: {ip}, ports: [{{name: dns, port: 53, protocol: UDP, targetPort: 5353}}]}}"
        )
    };
    let (gone, kept) = (spec("10.96.0.40"), spec("10.96.0.41"));
    let one = |ip: &str, node: &str| format!("[{{addresses: [{ip}], nodeName: {node}}}]");
    let (e1, e2, e3) = (one(E1, "node-a"), one(E2, "node-b"), one(E3, "node-c"));
    proxy
        .load(&manifest(&[
            service("gone", &gone, &e2),
            service("kept", &kept, &e1),
        ]))
        .expect("sync");
    settle();
    let hold = |script: &str, ip: &str| {
        let mut held = lab
            .client("podc", &["python3", "-u", "-c", script, ip])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("client");
        let mut out = std::io::BufReader::new(held.stdout.take().expect("stdout"));
        let mut line = String::new();
        out.read_line(&mut line).expect("a line");
        (held, out, line)
    };
    let (mut to_gone, mut gone_out, line) = hold(HELD_UDP_RECV, "10.96.0.40");
    assert_eq!(line.trim(), format!("before {E2}"));
    let (mut to_kept, mut kept_out, line) = hold(HELD_UDP_AGAIN, "10.96.0.41");
    assert_eq!(line.trim(), format!("before {E1}"));

    // kpng stops; meanwhile E2 leaves "gone" for E3.
    let config = proxy.backend.config().clone();
    drop(proxy);
    let mut proxy = Proxy::with(EbpfBackend::attach(config).expect("attach again")).explained_in(
        &lab,
        &Settings::lab(),
        kpng_lab::ebpf_alone(false),
    );
    proxy
        .load(&manifest(&[
            service("gone", &gone, &e3),
            service("kept", &kept, &e1),
        ]))
        .expect("sync");
    let stats = proxy.backend.last_sync().clone();
    assert!(stats.adopted, "{stats:?}");
    assert_eq!(
        go_on(&mut to_gone, &mut gone_out).trim(),
        "after ECONNABORTED"
    );
    assert_eq!(
        go_on(&mut to_kept, &mut kept_out).trim(),
        format!("after {E1}")
    );
    assert_eq!(stats.udp_sockets_ended, 1, "{stats:?}");
    EbpfWithNft::clear(&lab);
}

/// Lets a held client (a process waiting for a line on its stdin) go on,
/// and waits for it: the line it printed then.
fn go_on(held: &mut std::process::Child, out: &mut impl std::io::BufRead) -> String {
    use std::io::Write;
    held.stdin
        .take()
        .expect("stdin")
        .write_all(b"\n")
        .expect("write");
    let mut line = String::new();
    out.read_line(&mut line).expect("a line");
    let _ = held.wait();
    line
}

/// A client holding two TCP connections through Service `svc`
/// (`argv[1]`, port `argv[2]`), one to endpoint `a` (`argv[3]`), one to
/// `b` (`argv[4]`), made by connecting until it has one to each (each
/// endpoint names itself once connected and echoes each line): prints
/// `before ok ok` (each connection echoed a line). Then, up to `argv[6]`
/// times, a receive on the connection to `a`, waiting `argv[5]` seconds:
/// `a <error>` when it fails (and no more), `a TIMEOUT ok` when it still
/// echoes a line. Then, after a line on its stdin, `b ok` (or the
/// error's name).
const HELD_TCP: &str = r#"
import errno, socket, sys
svc, port, a, b = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
wait, steps = float(sys.argv[5]), int(sys.argv[6])
def err(f):
    try:
        return f()
    except socket.timeout:
        return "TIMEOUT"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def answer(s):
    s.sendall(b"x\n"); return "ok" if s.recv(200).startswith(b"x") else "wrong"
held = {}
for _ in range(200):
    s = socket.create_connection((svc, port), timeout=2)
    who = s.recv(200).decode().split()[0]
    if who in (a, b) and who not in held:
        held[who] = s
        if len(held) == 2:
            break
    else:
        s.close()
print("before", answer(held[a]), answer(held[b]), flush=True)
held[a].settimeout(wait)
for _ in range(steps):
    got = err(lambda: held[a].recv(200) and "DATA" or "EOF")
    if got != "TIMEOUT":
        print("a", got, flush=True)
        break
    print("a TIMEOUT", err(lambda: answer(held[a])), flush=True)
sys.stdin.readline()
print("b", err(lambda: answer(held[b])), flush=True)
"#;

/// An endpoint's entry in an EndpointSlice: its address, node and
/// conditions (`ready` or `draining`: terminating, serving, not ready).
type SliceEntry<'a> = (&'a str, &'a str);

/// Each step: the endpoints after it, and whether the client's
/// connection to `a` ends with it.
type Step<'a> = (Vec<SliceEntry<'a>>, bool);

/// TCP connections through Service `svc` to endpoints `a` and `b` (both
/// ready), then `steps`, with `--end-tcp-connections` `on`: a step that
/// ends the connection to `a` makes the client's blocked receive fail
/// with ECONNABORTED (the time from the start of the sync to the failure
/// is printed); one that does not leaves it answering. The connection to
/// `b` answers after all of them. `restart`: kpng stops before the
/// first step, and the step is the first sync of the next process.
fn tcp_connections_to_endpoints_that_leave(
    lab: &kpng_lab::Lab,
    (svc, a, b): (&str, &str, &str),
    (on, restart): (bool, bool),
    service: &str,
    slice: &dyn Fn(&[SliceEntry<'_>]) -> String,
    steps: &[Step<'_>],
) {
    use std::process::Stdio;
    use std::time::{Duration, Instant};
    let config = ebpf_config(lab, &Settings::lab(), false).end_tcp_connections(on);
    let mut proxy = kpng_lab::ebpf_alone_proxy(lab, &Settings::lab(), config);
    let items = |eps: &[SliceEntry<'_>]| [format!("{service}{}", slice(eps))];
    proxy
        .load(&manifest(&items(&[(a, "ready"), (b, "ready")])))
        .expect("sync");
    settle();
    let (port, wait, count) = ("70", "3", steps.len().to_string());
    let mut held = lab
        .client(
            "podc",
            &[
                "python3", "-u", "-c", HELD_TCP, svc, port, a, b, wait, &count,
            ],
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("client");
    // Each line as it comes, with the time it came.
    let (lines, reader) = kpng_lab::held::timed_lines(held.stdout.take().expect("stdout"));
    let next = || lines.recv_timeout(Duration::from_secs(20)).expect("a line");
    let (_, line) = next();
    assert_eq!(line.trim(), "before ok ok");
    for (i, (eps, ends)) in steps.iter().enumerate() {
        let restarted = restart && i == 0;
        let start = Instant::now();
        if restarted {
            let config = proxy.backend.config().clone();
            drop(proxy);
            proxy = Proxy::with(EbpfBackend::attach(config).expect("attach again")).explained_in(
                lab,
                &Settings::lab(),
                kpng_lab::ebpf_alone(false),
            );
        }
        proxy.load(&manifest(&items(eps))).expect("sync");
        let stats = proxy.backend.last_sync().clone();
        let (at, line) = next();
        assert_eq!(stats.replaced, restarted, "{stats:?}");
        assert_eq!(stats.adopted, restart, "{stats:?}");
        if *ends {
            assert_eq!(line.trim(), "a ECONNABORTED", "{stats:?}");
            assert_eq!(stats.tcp_sockets_ended, 1, "{stats:?}");
            assert_eq!(
                held_at(lab, "e1"),
                0,
                "the endpoint was reset: it holds no connection"
            );
            println!(
                "sync to the failure of the connection to the gone endpoint: {:.1} ms (the sync itself: {:.1} ms)",
                at.duration_since(start).as_secs_f64() * 1e3,
                stats.micros as f64 / 1e3
            );
        } else {
            assert_eq!(line.trim(), "a TIMEOUT ok", "{stats:?}");
            assert_eq!(stats.tcp_sockets_ended, 0, "{stats:?}");
            assert_eq!(held_at(lab, "e1"), 1, "the endpoint holds it");
        }
    }
    {
        use std::io::Write;
        held.stdin
            .take()
            .expect("stdin")
            .write_all(b"\n")
            .expect("write");
    }
    let (_, line) = next();
    assert_eq!(line.trim(), "b ok", "the other connection answers");
    let _ = held.wait();
    let _ = reader.join();
    EbpfWithNft::clear(lab);
}

/// The established connections to the held port in host `host` (its
/// server holds each until the peer ends it), once none is closing: a
/// connection the client's side aborted is gone once its reset came.
fn held_at(lab: &kpng_lab::Lab, host: &str) -> usize {
    let count = || {
        let filter = format!("( sport = :{} )", kpng_lab::held::HELD_PORT);
        let out = std::process::Command::new("ip")
            .args(["netns", "exec", &lab.ns(host), "ss", "-Htn", "state"])
            .args(["established", &filter])
            .output()
            .expect("ss");
        String::from_utf8_lossy(&out.stdout).lines().count()
    };
    // (The client's other connections to it, closed as it looked for one
    // to each endpoint, may still be closing.)
    for _ in 0..20 {
        let n = count();
        if n <= 1 {
            return n;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    count()
}

/// Service `h` on 10.96.0.60: TCP 70 to the servers' held port
/// ([`kpng_lab::held::HELD_PORT`]).
const HELD_SERVICE: &str = r#"
- apiVersion: v1
  kind: Service
  metadata: {namespace: t, name: h}
  spec: {clusterIP: 10.96.0.60, ports: [{name: held, port: 70, targetPort: 9100}]}
"#;

/// Conditions as an EndpointSlice says them.
fn conditions(what: &str) -> &'static str {
    match what {
        "draining" => "{ready: false, serving: true, terminating: true}",
        _ => "{ready: true, serving: true, terminating: false}",
    }
}

/// Service `h`'s slice of `eps` (IPv4: E1 on node-a, others on node-b).
fn held_slice(eps: &[SliceEntry<'_>]) -> String {
    let entries: Vec<String> = eps
        .iter()
        .map(|(ip, what)| {
            let node = if *ip == E1 { "node-a" } else { "node-b" };
            format!(
                "{{addresses: [{ip}], nodeName: {node}, conditions: {}}}",
                conditions(what)
            )
        })
        .collect();
    format!(
        r#"- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {{namespace: t, name: h-1, labels: {{kubernetes.io/service-name: h}}}}
  addressType: IPv4
  endpoints: [{}]
  ports: [{{name: held, port: 9100, protocol: TCP}}]
"#,
        entries.join(", ")
    )
}

/// `--end-tcp-connections`: the sync that takes endpoint A from the
/// Service aborts the client's connection to it (its blocked receive
/// fails with ECONNABORTED); the connection to B is untouched.
#[test]
fn a_removed_endpoint_ends_the_tcp_connections_to_it_ipv4() {
    require_lab!(EbpfWithNft);
    let lab = lab();
    tcp_connections_to_endpoints_that_leave(
        &lab,
        ("10.96.0.60", E1, E2),
        (true, false),
        HELD_SERVICE,
        &held_slice,
        &[(vec![(E2, "ready")], true)],
    );
}

/// An endpoint that drains (terminating, still serving, while another
/// is ready: in the view, sent no new connection) keeps its connection;
/// the sync in which it leaves the slice ends it.
#[test]
fn a_draining_endpoint_keeps_its_tcp_connections_until_it_leaves() {
    require_lab!(EbpfWithNft);
    let lab = lab();
    tcp_connections_to_endpoints_that_leave(
        &lab,
        ("10.96.0.60", E1, E2),
        (true, false),
        HELD_SERVICE,
        &held_slice,
        &[
            (vec![(E1, "draining"), (E2, "ready")], false),
            (vec![(E2, "ready")], true),
        ],
    );
}

/// Without `--end-tcp-connections` (kube-proxy's behaviour), the
/// connection to a removed endpoint lives on.
#[test]
fn without_the_flag_tcp_connections_to_a_removed_endpoint_live_on() {
    require_lab!(EbpfWithNft);
    let lab = lab();
    tcp_connections_to_endpoints_that_leave(
        &lab,
        ("10.96.0.60", E1, E2),
        (false, false),
        HELD_SERVICE,
        &held_slice,
        &[(vec![(E2, "ready")], false)],
    );
}

#[test]
fn a_removed_endpoint_ends_the_tcp_connections_to_it_ipv6() {
    require_lab!(EbpfWithNft);
    let mut lab = kpng_lab::Lab::new();
    let (e1, e2) = ("fd00:244:1::10", "fd00:244:2::10");
    lab.host("podc", &["fd00:244:1::99"], &[]);
    lab.host("e1", &[e1], &[]);
    lab.serve("e1", e1);
    lab.host("e2", &[e2], &[]);
    lab.serve("e2", e2);
    let service = r#"
- apiVersion: v1
  kind: Service
  metadata: {namespace: t, name: h}
  spec: {clusterIP: "fd00:96::60", clusterIPs: ["fd00:96::60"], ipFamilies: [IPv6], ports: [{name: held, port: 70, targetPort: 9100}]}
"#;
    let slice = |eps: &[SliceEntry<'_>]| {
        let entries: Vec<String> = eps
            .iter()
            .map(|(ip, what)| {
                let node = if *ip == e1 { "node-a" } else { "node-b" };
                format!(
                    "{{addresses: [\"{ip}\"], nodeName: {node}, conditions: {}}}",
                    conditions(what)
                )
            })
            .collect();
        format!(
            r#"- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {{namespace: t, name: h-1, labels: {{kubernetes.io/service-name: h}}}}
  addressType: IPv6
  endpoints: [{}]
  ports: [{{name: held, port: 9100, protocol: TCP}}]
"#,
            entries.join(", ")
        )
    };
    tcp_connections_to_endpoints_that_leave(
        &lab,
        ("fd00:96::60", e1, e2),
        (true, false),
        service,
        &slice,
        &[(vec![(e2, "ready")], true)],
    );
}

/// kpng down while an endpoint leaves: the first sync of the next
/// process (it adopts the pinned programs and maps) ends the TCP
/// connections made through the Service to that endpoint (the pinned
/// connection map remembers where each socket was sent) and leaves the
/// others.
#[test]
fn the_first_sync_after_a_restart_ends_tcp_connections_to_endpoints_that_left_meanwhile() {
    require_lab!(EbpfWithNft);
    let lab = lab();
    tcp_connections_to_endpoints_that_leave(
        &lab,
        ("10.96.0.60", E1, E2),
        (true, true),
        HELD_SERVICE,
        &held_slice,
        &[(vec![(E2, "ready")], true)],
    );
}

/// After a restart, an endpoint that drains is still one the
/// connections may stay with: the first sync leaves its connection; the
/// sync in which it leaves ends it.
#[test]
fn the_first_sync_after_a_restart_keeps_tcp_connections_to_a_draining_endpoint() {
    require_lab!(EbpfWithNft);
    let lab = lab();
    tcp_connections_to_endpoints_that_leave(
        &lab,
        ("10.96.0.60", E1, E2),
        (true, true),
        HELD_SERVICE,
        &held_slice,
        &[
            (vec![(E1, "draining"), (E2, "ready")], false),
            (vec![(E2, "ready")], true),
        ],
    );
}

/// Prints the peer `getpeername` shows for a TCP connection to
/// `HOST PORT`, then the server's line.
const PEER_CLIENT: &str = r#"
import socket, sys
host, port = sys.argv[1], int(sys.argv[2])
fam = socket.AF_INET6 if ":" in host else socket.AF_INET
s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(2)
try:
    s.connect((host, port))
    peer = s.getpeername()
    print(peer[0], peer[1], s.recv(200).decode().strip(), flush=True)
except OSError as e:
    print("ERROR", e, flush=True)
"#;

/// Localhost NodePorts with the eBPF programs alone (on by default,
/// `--nodeport-addresses` unset): the node's own TCP connections and UDP
/// datagrams to `127.0.0.1:NODEPORT` and `[::1]:NODEPORT` reach the
/// endpoints in the other namespaces, and `getpeername` shows the
/// loopback address and the node port. A pod's connection to its own
/// loopback is left alone (refused: nothing listens there). With
/// `localhost_nodeports(false)`, the node's connection is refused too.
#[test]
fn localhost_nodeports_serve_the_node_s_own_sockets_on_both_families() {
    use kpng_lab::scenarios::NODE_IP;
    require_lab!(EbpfWithNft);
    let mut lab = kpng_lab::Lab::new();
    lab.upstream();
    lab.host("ext", &[], &[NODE_IP]);
    lab.host("podc", &[POD_CLIENT], &[]);
    let six = ["fd00:244:1::10", "fd00:244:2::10", "fd00:244:3::10"];
    for (k, (name, ip)) in [("e1", E1), ("e2", E2), ("e3", E3)].into_iter().enumerate() {
        lab.host(name, &[ip, six[k]], &[]);
        lab.serve(name, ip);
    }
    let items = [r#"
- apiVersion: v1
  kind: Service
  metadata: {namespace: t, name: np}
  spec: {type: NodePort, clusterIP: 10.96.0.70, clusterIPs: [10.96.0.70, "fd00:96::70"], ipFamilies: [IPv4, IPv6], ipFamilyPolicy: RequireDualStack, ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30070}, {name: dns, port: 53, protocol: UDP, targetPort: 5353, nodePort: 30053}]}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {namespace: t, name: np-4, labels: {kubernetes.io/service-name: np}}
  addressType: IPv4
  endpoints: [{addresses: [10.244.1.10], nodeName: node-a}, {addresses: [10.244.2.10], nodeName: node-b}, {addresses: [10.244.3.10], nodeName: node-c}]
  ports: [{name: http, port: 8080, protocol: TCP}, {name: dns, port: 5353, protocol: UDP}]
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {namespace: t, name: np-6, labels: {kubernetes.io/service-name: np}}
  addressType: IPv6
  endpoints: [{addresses: ["fd00:244:1::10"], nodeName: node-a}, {addresses: ["fd00:244:2::10"], nodeName: node-b}, {addresses: ["fd00:244:3::10"], nodeName: node-c}]
  ports: [{name: http, port: 8080, protocol: TCP}, {name: dns, port: 5353, protocol: UDP}]
"#
    .to_string()];
    let all3: std::collections::BTreeSet<String> = [E1, E2, E3].map(String::from).into();
    {
        let config = ebpf_config(&lab, &Settings::lab(), false);
        assert!(config.localhost_nodeports, "on by default");
        let mut proxy = kpng_lab::ebpf_alone_proxy(&lab, &Settings::lab(), config);
        proxy.load(&manifest(&items)).expect("sync");
        settle();
        for host in ["127.0.0.1", "::1"] {
            let lines = lab.connect("node", "tcp", host, 30070, 30);
            assert_eq!(endpoints(&lines), all3, "{host}: {lines:?}");
            let lines = lab.connect("node", "udp", host, 30053, 10);
            assert!(
                lines.len() == 10
                    && lines
                        .iter()
                        .all(|l| all3.contains(l.split(' ').next().unwrap_or(""))),
                "{host} UDP: {lines:?}"
            );
            // What the client sees: the loopback address and node port.
            let out = lab
                .client("node", &["python3", "-c", PEER_CLIENT, host, "30070"])
                .output()
                .expect("client");
            let line = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            assert!(
                line.starts_with(&format!("{host} 30070 10.244.")),
                "getpeername: {line}"
            );
            // A pod's loopback is its own.
            let pod = lab.once("podc", "tcp", host, 30070);
            assert!(pod.starts_with("REFUSED"), "pod to {host}: {pod}");
        }
        let counters = proxy.backend.counters().expect("counters");
        assert_eq!(counters.missing, 0);
    }
    EbpfWithNft::clear(&lab);

    // Off: the node's loopback is its own too.
    let config = ebpf_config(&lab, &Settings::lab(), false).localhost_nodeports(false);
    let mut proxy = kpng_lab::ebpf_alone_proxy(&lab, &Settings::lab(), config);
    proxy.load(&manifest(&items)).expect("sync");
    settle();
    for host in ["127.0.0.1", "::1"] {
        let line = lab.once("node", "tcp", host, 30070);
        assert!(line.starts_with("REFUSED"), "{host}: {line}");
    }
    assert!(
        lab.once("node", "tcp", NODE_IP, 30070)
            .starts_with("10.244."),
        "the node's address still serves"
    );
    EbpfWithNft::clear(&lab);
}
