//! Direct server return against SNAT ([`direct_return`]): from a client
//! outside to a NodePort of node-1 whose endpoint runs on node-2, in a
//! cluster of namespaces whose agents run the eBPF backend's tc programs.

use std::process::Command;
use std::time::Duration;

use super::median;
use crate::cluster::{AgentBackend, CLIENT_IP, Cluster, node_ip, pod_ip};

/// The client: `count` TCP connections one after the other (connect,
/// then the server's first line), then `count` UDP requests from
/// connected sockets. Prints: TCP connections answered, the seconds the
/// answered ones took (from connect to their last byte), the median
/// connect and first-byte times, the median UDP round trip (seconds), and
/// the failures (each waited 2 s: they are counted apart, not in the
/// rate).
const CLIENT: &str = r#"
import socket, statistics, sys, time
host, tport, uport, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
connect, first, udp, failed, busy = [], [], [], 0, 0.0
for i in range(count):
    t = time.monotonic()
    try:
        s = socket.socket(); s.settimeout(2); s.connect((host, tport)); c = time.monotonic()
        if s.recv(200):
            f = time.monotonic(); connect.append(c - t); first.append(f - t)
            s.close(); busy += time.monotonic() - t
        else:
            failed += 1; s.close()
    except OSError:
        failed += 1
for i in range(count):
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(2); u.connect((host, uport))
    t = time.monotonic()
    try:
        u.send(b"hi"); u.recv(200); udp.append(time.monotonic() - t)
    except OSError:
        failed += 1
    u.close()
med = lambda xs: statistics.median(xs) if xs else 0.0
print(len(first), busy, med(connect), med(first), med(udp), failed)
"#;

/// One mode's figures over the rounds.
#[derive(Default)]
struct Figures {
    answered: usize,
    seconds: f64,
    connect: Vec<f64>,
    first: Vec<f64>,
    udp: Vec<f64>,
    failed: usize,
    crossing: u64,
}

/// The modes, each a Service annotated with it: its name and node ports
/// (TCP, then UDP).
const MODES: [(&str, u16, u16); 3] = [
    ("snat", 30080, 30081),
    ("dsr", 30180, 30181),
    ("hybrid", 30280, 30281),
];

/// `kpng.io/load-balancer-mode` = `mode` on a NodePort Service (TCP 80 on
/// `tcp`, UDP 53 on `udp`) whose endpoint is pod `n` of node-2 (one each:
/// a mode's connections never meet another's in the endpoint's TIME_WAIT).
fn service(mode: &str, n: usize, tcp: u16, udp: u16) -> String {
    format!(
        r#"- apiVersion: v1
  kind: Service
  metadata: {{namespace: t, name: {mode}, annotations: {{kpng.io/load-balancer-mode: {mode}}}}}
  spec: {{type: NodePort, clusterIP: 10.96.0.{}, ports: [{{name: http, port: 80, targetPort: 8080, nodePort: {tcp}}}, {{name: dns, port: 53, protocol: UDP, targetPort: 5353, nodePort: {udp}}}]}}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {{namespace: t, name: {mode}-1, labels: {{kubernetes.io/service-name: {mode}}}}}
  addressType: IPv4
  endpoints: [{{addresses: [{}], nodeName: node-2}}]
  ports: [{{name: http, port: 8080, protocol: TCP}}, {{name: dns, port: 5353, protocol: UDP}}]
"#,
        20 + n,
        pod_ip(2, n)
    )
}

/// The client's run against `port` (TCP) and `udp` of node-1.
fn client(cluster: &Cluster, tcp: u16, udp: u16, count: usize) -> Option<Vec<f64>> {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &cluster.client_ns(),
            "python3",
            "-c",
            CLIENT,
        ])
        .args([
            node_ip(1),
            tcp.to_string(),
            udp.to_string(),
            count.to_string(),
        ])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(|w| w.parse().ok())
        .collect()
}

/// `cargo bench -p kpng-lab --bench backends -- dsr`: `rounds` rounds,
/// each running, for SNAT, DSR and hybrid in turn (the order rotating),
/// `connections` TCP connections and as many UDP requests from a client
/// outside to a NodePort on node-1 whose endpoint is on node-2. Prints
/// per mode: the TCP connection rate (of the answered connections, one
/// after the other; failures are counted apart), the median connect and first-byte
/// times (medians over the rounds of each round's median), the median
/// UDP round trip, and the packets per request that came back through
/// node-1 (counted in its prerouting hook: replies).
pub fn direct_return(rounds: usize, connections: usize) {
    if let Some(why) = crate::cluster::unavailable(AgentBackend::Ebpf) {
        println!("dsr: SKIPPED: {why}");
        return;
    }
    let mut cluster = Cluster::new(2, MODES.len(), AgentBackend::Ebpf);
    let items: Vec<String> = MODES
        .iter()
        .enumerate()
        .map(|(i, (mode, tcp, udp))| service(mode, i, *tcp, *udp))
        .collect();
    cluster.write_manifest(&cluster.manifest(&items));
    cluster.start_server();
    cluster.start_agents();
    cluster.wait_all_synced(Duration::from_secs(60));
    let crossing = cluster.count_from(1, &["10.244.2.0/24"]);
    // Warm: every path answers (neighbours resolved, flows first seen).
    for (mode, tcp, udp) in MODES {
        let warm = client(&cluster, tcp, udp, 3);
        assert!(
            warm.as_ref().is_some_and(|w| w[0] as usize == 3),
            "{mode}: {warm:?}"
        );
    }
    let mut figures: Vec<Figures> = MODES.iter().map(|_| Figures::default()).collect();
    for round in 0..rounds {
        for i in 0..MODES.len() {
            let m = (round + i) % MODES.len();
            let (_, tcp, udp) = MODES[m];
            let before = crossing.packets();
            let Some(run) = client(&cluster, tcp, udp, connections) else {
                continue;
            };
            let f = &mut figures[m];
            f.crossing += crossing.packets() - before;
            f.answered += run[0] as usize;
            f.seconds += run[1];
            f.connect.push(run[2]);
            f.first.push(run[3]);
            f.udp.push(run[4]);
            f.failed += run[5] as usize;
        }
    }
    println!(
        "dsr: a client outside ({CLIENT_IP}) to a NodePort of node-1, its endpoint on node-2 (eBPF tc programs, agents of a 2-node cluster), {rounds} rounds x {connections} TCP connections and {connections} UDP requests per mode, the modes in turn:"
    );
    let snat_rate = figures[0].answered as f64 / figures[0].seconds.max(1e-9);
    for (m, f) in figures.iter_mut().enumerate() {
        let rate = f.answered as f64 / f.seconds.max(1e-9);
        let requests = (2 * rounds * connections) as f64;
        println!(
            "  {:7} {:7.0} conn/s ({:.2}x SNAT's); connect {:6.0} us, first byte {:6.0} us; UDP round trip {:6.0} us; {:.2} packets per request back through node-1; {} failed",
            MODES[m].0,
            rate,
            rate / snat_rate,
            median(&mut f.connect) * 1e6,
            median(&mut f.first) * 1e6,
            median(&mut f.udp) * 1e6,
            f.crossing as f64 / requests,
            f.failed,
        );
    }
    println!(
        "  (the endpoint's node, {}, replies from node-1's address; under SNAT the replies return through node-1)",
        node_ip(2)
    );
}
