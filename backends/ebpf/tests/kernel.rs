//! The backend in a real kernel: its programs attached to a test cgroup,
//! its maps pinned in a test bpffs, clients in that cgroup and in a test
//! network namespace whose loopback holds the endpoints' addresses.
//! Everything is removed on drop, also when a test fails. Each test prints
//! SKIPPED and passes where it cannot run (not root, no cgroup v2).

use std::process::{Child, Command, Stdio};

use kpng_backend_ebpf::{EbpfBackend, EbpfConfig, XdpMode, cleanup};
use kpng_kube::{Ingest, IngestConfig, file};
use kpng_sink::ProxyConfig;
use kpng_store::Store;
use kpng_testkit::bpf::{BpfFs, TestCgroup, TestNetns, unavailable};
use kpng_view::NodeProjector;

const NODE: &str = "node-a";
/// The endpoints: on loopback in the test namespace.
const E1: &str = "10.244.1.10";
const E2: &str = "10.244.2.10";
const E3: &str = "10.244.3.10";
const E6: &str = "fd00:10:244::10";
/// The node's address (NodePorts).
const NODE_IP: &str = "192.168.50.1";

/// One server per address: TCP 8080 and UDP 5353, answering with the
/// address it was reached on and the peer it saw.
const SERVER: &str = r#"
import socket, sys, threading
def tcp(addr):
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, 8080)); s.listen(256)
    while True:
        c, a = s.accept()
        threading.Thread(target=serve, args=(c, addr, a), daemon=True).start()
def serve(c, addr, a):
    try:
        c.sendall(("%s %s\n" % (addr, a[0])).encode())
        while True:
            d = c.recv(100)
            if not d: break
            c.sendall(d)
    except OSError: pass
    finally: c.close()
def udp(addr):
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM)
    s.bind((addr, 5353))
    while True:
        d, a = s.recvfrom(2048)
        s.sendto(("%s %s\n" % (addr, a[0])).encode(), a)
for a in sys.argv[1:]:
    threading.Thread(target=tcp, args=(a,), daemon=True).start()
    threading.Thread(target=udp, args=(a,), daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
"#;

/// `count` attempts; one line each: `<endpoint reached> <peer it saw>
/// <address the client saw>` or the error's name.
const CLIENT: &str = r#"
import errno, socket, sys
proto, host, port, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
fam = socket.AF_INET6 if ":" in host else socket.AF_INET
for _ in range(count):
    try:
        if proto == "tcp":
            s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(2)
            s.connect((host, port)); out = s.recv(200).decode().strip()
            out += " %s:%d" % s.getpeername()[:2]
        else:
            s = socket.socket(fam, socket.SOCK_DGRAM); s.settimeout(2)
            s.sendto(b"hi", (host, port)); d, a = s.recvfrom(200)
            out = d.decode().strip() + " %s:%d" % a[:2]
        s.close()
    except socket.timeout:
        out = "TIMEOUT"
    except OSError as e:
        out = errno.errorcode.get(e.errno, str(e.errno))
    print(out, flush=True)
"#;

/// A node: a bpffs, a cgroup, a namespace with the endpoints and their
/// servers, and the backend attached.
struct Node {
    // Dropped in this order: the backend's maps, the servers, then the
    // namespace, the cgroup and the bpffs (which detaches what is left).
    proxy: Proxy,
    server: Child,
    ns: TestNetns,
    cgroup: TestCgroup,
    fs: BpfFs,
}

struct Proxy {
    ingest: Ingest,
    projector: NodeProjector,
    backend: EbpfBackend,
}

impl Proxy {
    fn new(backend: EbpfBackend) -> Self {
        Proxy {
            ingest: Ingest::new(Store::new(), IngestConfig::default()),
            projector: NodeProjector::new(NODE),
            backend,
        }
    }

    /// Loads `items` (with the node) as the whole state and syncs.
    fn load(&mut self, items: &[String]) {
        let yaml = manifest(items);
        let objects = file::parse_str("test.yaml", &yaml).expect("valid manifest");
        self.ingest.load(&objects);
        let snapshot = self.ingest.reader().snapshot();
        self.projector
            .sync_into(&snapshot, &mut self.backend)
            .expect("sync");
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

fn config(fs: &BpfFs, cgroup: &TestCgroup) -> EbpfConfig {
    let proxy = ProxyConfig::default().service_cidrs(["10.96.0.0/16".parse().expect("cidr")]);
    EbpfConfig::new(proxy)
        .cgroup(&cgroup.path)
        .pin_path(fs.path.join("kpng"))
}

fn node() -> Option<Node> {
    if let Some(why) = unavailable() {
        eprintln!("SKIPPED: {why}");
        return None;
    }
    let fs = BpfFs::new("kpng-bpf").expect("bpffs");
    let cgroup = TestCgroup::new("kpng-cg").expect("cgroup");
    let ns = TestNetns::new("kpe").expect("netns");
    for addr in [E1, E2, E3] {
        ns.sh(&format!("ip addr add {addr}/32 dev lo"))
            .expect("addr");
    }
    ns.sh(&format!("ip -6 addr add {E6}/128 dev lo nodad"))
        .expect("addr");
    ns.sh(&format!("ip addr add {NODE_IP}/32 dev lo"))
        .expect("addr");
    let mut server = Command::new("ip")
        .args(["netns", "exec", &ns.name, "python3", "-u", "-c", SERVER])
        .args([E1, E2, E3, E6])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("server");
    let mut line = String::new();
    if let Some(out) = server.stdout.take() {
        use std::io::BufRead;
        let _ = std::io::BufReader::new(out).read_line(&mut line);
    }
    assert_eq!(line.trim(), "ready");
    let backend = EbpfBackend::attach(config(&fs, &cgroup)).expect("attach");
    Some(Node {
        proxy: Proxy::new(backend),
        server,
        ns,
        cgroup,
        fs,
    })
}

impl Node {
    /// `count` attempts from a client in the cgroup.
    fn connect(&self, proto: &str, host: &str, port: u16, count: usize) -> Vec<String> {
        self.client(true, proto, host, port, count)
    }

    fn client(
        &self,
        in_cgroup: bool,
        proto: &str,
        host: &str,
        port: u16,
        count: usize,
    ) -> Vec<String> {
        let (port, count) = (port.to_string(), count.to_string());
        let args = ["python3", "-c", CLIENT, proto, host, &port, &count];
        let mut command = if in_cgroup {
            self.cgroup.command(&self.ns.name, &args)
        } else {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", &self.ns.name]).args(args);
            c
        };
        let out = command.output().expect("client");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn once(&self, proto: &str, host: &str, port: u16) -> String {
        self.connect(proto, host, port, 1).pop().unwrap_or_default()
    }
}

const NODES: &str = r#"
- apiVersion: v1
  kind: Node
  metadata: {name: node-a, labels: {topology.kubernetes.io/zone: zone-a}}
  status: {addresses: [{type: InternalIP, address: 192.168.50.1}]}
"#;

fn manifest(items: &[String]) -> String {
    format!(
        "apiVersion: v1\nkind: List\nitems:{NODES}{}",
        items.concat()
    )
}

/// A Service `name` with `spec`, and one EndpointSlice (`eps`: YAML).
fn service(name: &str, spec: &str, eps: &str) -> String {
    service_in(name, spec, "IPv4", eps)
}

fn service_in(name: &str, spec: &str, family: &str, eps: &str) -> String {
    format!(
        r#"
- apiVersion: v1
  kind: Service
  metadata: {{namespace: t, name: {name}}}
  spec: {spec}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {{namespace: t, name: {name}-1, labels: {{kubernetes.io/service-name: {name}}}}}
  addressType: {family}
  endpoints: {eps}
  ports: [{{name: http, port: 8080, protocol: TCP}}, {{name: dns, port: 5353, protocol: UDP}}]
"#
    )
}

/// A ready endpoint `ip` on `node`.
fn ep(ip: &str, node: &str) -> String {
    format!("{{addresses: [{ip}], nodeName: {node}, conditions: {{ready: true}}}}")
}

fn eps(list: &[(&str, &str)]) -> String {
    let items: Vec<String> = list.iter().map(|(ip, node)| ep(ip, node)).collect();
    format!("[{}]", items.join(", "))
}

const PORTS: &str = "[{name: http, port: 80, protocol: TCP}, {name: dns, port: 53, protocol: UDP}]";

fn cluster_ip(ip: &str) -> String {
    format!("{{clusterIP: {ip}, clusterIPs: [{ip}], ports: {PORTS}}}")
}

fn reached(lines: &[String]) -> std::collections::BTreeSet<String> {
    lines
        .iter()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.contains('.') || w.contains(':'))
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_cluster_ip_sends_sockets_straight_to_every_endpoint() {
    let Some(mut node) = node() else { return };
    let all = eps(&[(E1, NODE), (E2, "node-b"), (E3, "node-c")]);
    node.proxy
        .load(&[service("web", &cluster_ip("10.96.0.10"), &all)]);
    let lines = node.connect("tcp", "10.96.0.10", 80, 40);
    assert_eq!(
        reached(&lines),
        [E1, E2, E3].map(String::from).into(),
        "{lines:?}"
    );
    for line in &lines {
        // The endpoint saw the client itself (no masquerade), and the
        // client sees the Service as its peer (getpeername).
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words.len(), 3, "{line}");
        assert_eq!(words[2], "10.96.0.10:80", "{line}");
    }
    let counters = node.proxy.backend.counters().expect("counters");
    assert!(counters.translated >= 40, "{counters:?}");
    assert_eq!(counters.missing, 0);
}

#[test]
fn udp_replies_come_from_the_service_address() {
    let Some(mut node) = node() else { return };
    node.proxy.load(&[service(
        "dns",
        &cluster_ip("10.96.0.53"),
        &eps(&[(E1, NODE), (E2, "node-b")]),
    )]);
    let lines = node.connect("udp", "10.96.0.53", 53, 20);
    assert_eq!(
        reached(&lines),
        [E1, E2].map(String::from).into(),
        "{lines:?}"
    );
    for line in &lines {
        // recvfrom shows the Service address: a resolver that checks the
        // reply's source accepts it.
        assert!(line.ends_with(" 10.96.0.53:53"), "{line}");
    }
}

#[test]
fn no_endpoint_refuses_and_an_unknown_port_on_a_live_cluster_ip_refuses() {
    let Some(mut node) = node() else { return };
    node.proxy.load(&[
        service("empty", &cluster_ip("10.96.0.20"), "[]"),
        service("web", &cluster_ip("10.96.0.21"), &eps(&[(E1, NODE)])),
    ]);
    assert_eq!(node.once("tcp", "10.96.0.20", 80), "ECONNREFUSED");
    assert_eq!(node.once("tcp", "10.96.0.21", 81), "ECONNREFUSED");
    assert!(node.once("tcp", "10.96.0.21", 80).starts_with(E1));
    let counters = node.proxy.backend.counters().expect("counters");
    assert_eq!(counters.refused, 2, "{counters:?}");
}

#[test]
fn unallocated_service_addresses_are_dropped_and_others_left_alone() {
    let Some(mut node) = node() else { return };
    node.proxy.load(&[service(
        "web",
        &cluster_ip("10.96.0.10"),
        &eps(&[(E1, NODE)]),
    )]);
    // In the Service CIDR, held by no Service: dropped, at once.
    assert_eq!(node.once("tcp", "10.96.5.5", 80), "EPERM");
    // Outside it: the socket goes on unchanged (no route here).
    assert_eq!(node.once("tcp", "10.97.5.5", 80), "ENETUNREACH");
    // A real address is not touched.
    assert!(node.once("tcp", E2, 8080).starts_with(E2));
}

#[test]
fn a_local_policy_without_a_local_endpoint_drops_and_with_one_keeps_to_it() {
    let Some(mut node) = node() else { return };
    let spec = "{clusterIP: 10.96.0.30, clusterIPs: [10.96.0.30], internalTrafficPolicy: Local, ports: [{name: http, port: 80, protocol: TCP}]}";
    node.proxy
        .load(&[service("local", spec, &eps(&[(E2, "node-b")]))]);
    assert_eq!(node.once("tcp", "10.96.0.30", 80), "EPERM");
    node.proxy
        .load(&[service("local", spec, &eps(&[(E1, NODE), (E2, "node-b")]))]);
    let lines = node.connect("tcp", "10.96.0.30", 80, 10);
    assert_eq!(reached(&lines), [E1.to_string()].into(), "{lines:?}");
}

#[test]
fn client_ip_affinity_keeps_a_client_on_one_endpoint() {
    let Some(mut node) = node() else { return };
    let spec = format!(
        "{{clusterIP: 10.96.0.40, clusterIPs: [10.96.0.40], sessionAffinity: ClientIP, sessionAffinityConfig: {{clientIP: {{timeoutSeconds: 60}}}}, ports: {PORTS}}}"
    );
    let all = eps(&[(E1, NODE), (E2, "node-b"), (E3, "node-c")]);
    node.proxy.load(&[service("sticky", &spec, &all)]);
    let lines = node.connect("tcp", "10.96.0.40", 80, 20);
    let first = reached(&lines);
    assert_eq!(first.len(), 1, "{lines:?}");
    // The endpoint goes: the client moves to another, and stays there.
    let gone = first.iter().next().cloned().unwrap_or_default();
    let left: Vec<(&str, &str)> = [(E1, NODE), (E2, "node-b"), (E3, "node-c")]
        .into_iter()
        .filter(|(ip, _)| *ip != gone)
        .collect();
    node.proxy.load(&[service("sticky", &spec, &eps(&left))]);
    let lines = node.connect("tcp", "10.96.0.40", 80, 20);
    let second = reached(&lines);
    assert_eq!(second.len(), 1, "{lines:?}");
    assert!(!second.contains(&gone));
}

#[test]
fn an_endpoint_change_writes_only_the_change() {
    let Some(mut node) = node() else { return };
    let spec = cluster_ip("10.96.0.50");
    node.proxy
        .load(&[service("web", &spec, &eps(&[(E1, NODE), (E2, "node-b")]))]);
    // One endpoint replaced: its member and its slot, no count.
    node.proxy
        .load(&[service("web", &spec, &eps(&[(E1, NODE), (E3, "node-c")]))]);
    let stats = node.proxy.backend.last_sync().clone();
    assert!(!stats.replaced);
    // Two sets (TCP, UDP): one page each, rewritten with the new endpoint
    // in the gone one's slot.
    assert_eq!(stats.writes, 2, "{stats:?}");
    let lines = node.connect("tcp", "10.96.0.50", 80, 30);
    assert_eq!(
        reached(&lines),
        [E1, E3].map(String::from).into(),
        "{lines:?}"
    );
    // One gone: the set shrinks in place.
    node.proxy
        .load(&[service("web", &spec, &eps(&[(E3, "node-c")]))]);
    let lines = node.connect("tcp", "10.96.0.50", 80, 10);
    assert_eq!(reached(&lines), [E3.to_string()].into(), "{lines:?}");
    assert_eq!(node.proxy.backend.counters().expect("counters").missing, 0);
}

#[test]
fn ipv6_cluster_ips_are_served() {
    let Some(mut node) = node() else { return };
    let spec = format!(
        "{{clusterIP: 'fd00:96::10', clusterIPs: ['fd00:96::10'], ipFamilies: [IPv6], ports: {PORTS}}}"
    );
    node.proxy.load(&[service_in(
        "v6",
        &spec,
        "IPv6",
        &format!("[{}]", ep(E6, NODE)),
    )]);
    let line = node.once("tcp", "fd00:96::10", 80);
    assert!(line.starts_with(E6), "{line}");
    assert!(line.ends_with("fd00:96::10:80"), "{line}");
    let line = node.once("udp", "fd00:96::10", 53);
    assert!(line.starts_with(E6), "{line}");
}

#[test]
fn node_ports_are_served_on_the_node_address_to_local_sockets() {
    let Some(mut node) = node() else { return };
    let spec = "{type: NodePort, clusterIP: 10.96.0.60, clusterIPs: [10.96.0.60], externalTrafficPolicy: Local, ports: [{name: http, port: 80, nodePort: 30080, protocol: TCP}]}";
    node.proxy
        .load(&[service("np", spec, &eps(&[(E2, "node-b")]))]);
    // eTP=Local, but the node's own sockets use every endpoint, as
    // kube-proxy sends the node's own traffic.
    let line = node.once("tcp", NODE_IP, 30080);
    assert!(line.starts_with(E2), "{line}");
    // Not on loopback.
    assert_eq!(node.once("tcp", "127.0.0.1", 30080), "ECONNREFUSED");
}

#[test]
fn sockets_outside_the_cgroup_are_not_touched() {
    let Some(mut node) = node() else { return };
    node.proxy.load(&[service(
        "web",
        &cluster_ip("10.96.0.10"),
        &eps(&[(E1, NODE)]),
    )]);
    assert!(node.once("tcp", "10.96.0.10", 80).starts_with(E1));
    let outside = node.client(false, "tcp", "10.96.0.10", 80, 1);
    assert_eq!(outside, ["ENETUNREACH"], "{outside:?}");
}

#[test]
fn a_restart_adopts_the_pins_and_open_connections_keep_working() {
    let Some(mut node) = node() else { return };
    let spec = cluster_ip("10.96.0.70");
    let items = [service("web", &spec, &eps(&[(E1, NODE), (E2, "node-b")]))];
    node.proxy.load(&items);
    // A client that holds its connection across the restart.
    let script = r#"
import socket, sys
s = socket.create_connection(("10.96.0.70", 80), timeout=5)
print(s.recv(100).decode().strip(), flush=True)
sys.stdin.readline()
s.sendall(b"still here\n")
print(s.recv(100).decode().strip(), flush=True)
"#;
    let mut held = node
        .cgroup
        .command(&node.ns.name, &["python3", "-u", "-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("client");
    let mut out = std::io::BufReader::new(held.stdout.take().expect("stdout"));
    let mut first = String::new();
    std::io::BufRead::read_line(&mut out, &mut first).expect("first line");
    assert!(first.starts_with("10.244."), "{first}");

    // kpng goes away and comes back: the programs stayed attached.
    let config = node.proxy.backend.config().clone();
    node.proxy = Proxy::new(EbpfBackend::dry_run(config.clone()));
    let line = node.once("tcp", "10.96.0.70", 80);
    assert!(line.starts_with("10.244."), "{line}");
    node.proxy = Proxy::new(EbpfBackend::attach(config).expect("attach again"));
    node.proxy.load(&items);
    let stats = node.proxy.backend.last_sync().clone();
    assert!(stats.adopted && stats.replaced, "{stats:?}");
    // Onto the same state: the maps were read back and nothing written.
    assert_eq!(stats.writes, 0, "{stats:?}");

    use std::io::Write;
    held.stdin
        .take()
        .expect("stdin")
        .write_all(b"\n")
        .expect("write");
    let mut echo = String::new();
    std::io::BufRead::read_line(&mut out, &mut echo).expect("echo");
    assert_eq!(echo.trim(), "still here");
    let _ = held.wait();
    let lines = node.connect("tcp", "10.96.0.70", 80, 20);
    assert_eq!(
        reached(&lines),
        [E1, E2].map(String::from).into(),
        "{lines:?}"
    );
}

#[test]
fn cleanup_detaches_everything() {
    let Some(mut node) = node() else { return };
    node.proxy.load(&[service(
        "web",
        &cluster_ip("10.96.0.10"),
        &eps(&[(E1, NODE)]),
    )]);
    assert!(node.once("tcp", "10.96.0.10", 80).starts_with(E1));
    let pins = node.proxy.backend.config().pin_path.clone();
    // The backend's map handles go first; then the pins.
    node.proxy = Proxy::new(EbpfBackend::dry_run(node.proxy.backend.config().clone()));
    assert!(cleanup(&pins).expect("cleanup"));
    assert!(!pins.exists());
    assert_eq!(node.once("tcp", "10.96.0.10", 80), "ENETUNREACH");
    let attached = Command::new("bpftool")
        .args(["cgroup", "show"])
        .arg(&node.cgroup.path)
        .output();
    if let Ok(out) = attached {
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("kpng"),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    // Nothing left to clean.
    assert!(!cleanup(&pins).expect("cleanup again"));
    let _ = &node.fs;
}

/// One unconnected UDP socket sending `count` datagrams to `host:port`;
/// the endpoint of each reply.
const DATAGRAMS: &str = r#"
import socket, sys
host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2)
for _ in range(count):
    s.sendto(b"hi", (host, port))
    print(s.recvfrom(200)[0].decode().split()[0], flush=True)
"#;

#[test]
fn an_unconnected_udp_socket_stays_with_one_endpoint_while_it_is_one() {
    let Some(mut node) = node() else { return };
    let all = [(E1, NODE), (E2, "node-b"), (E3, "node-c")];
    node.proxy
        .load(&[service("dns", &cluster_ip("10.96.0.53"), &eps(&all))]);
    let run = |node: &Node| -> Vec<String> {
        let out = node
            .cgroup
            .command(
                &node.ns.name,
                &["python3", "-c", DATAGRAMS, "10.96.0.53", "53", "20"],
            )
            .output()
            .expect("client");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    };
    // As a conntrack flow would: every datagram of the socket to one
    // endpoint.
    let replies = run(&node);
    assert_eq!(replies.len(), 20, "{replies:?}");
    let first: std::collections::BTreeSet<&String> = replies.iter().collect();
    assert_eq!(first.len(), 1, "{replies:?}");
    // Over many sockets, every endpoint.
    let lines = node.connect("udp", "10.96.0.53", 53, 30);
    assert_eq!(reached(&lines).len(), 3, "{lines:?}");
    // A socket that lives on while its endpoint goes: its next datagrams
    // go to another endpoint, and stay there.
    let script = format!(
        "{DATAGRAMS}\nsys.stdin.readline()\nfor _ in range(count):\n    s.sendto(b'hi', (host, port))\n    print(s.recvfrom(200)[0].decode().split()[0], flush=True)\n"
    );
    let mut held = node
        .cgroup
        .command(
            &node.ns.name,
            &["python3", "-u", "-c", &script, "10.96.0.53", "53", "10"],
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("client");
    let mut out = std::io::BufReader::new(held.stdout.take().expect("stdout"));
    let mut read = |n: usize| -> Vec<String> {
        (0..n)
            .map(|_| {
                let mut line = String::new();
                std::io::BufRead::read_line(&mut out, &mut line).expect("a reply");
                line.trim().to_owned()
            })
            .collect()
    };
    let before = read(10);
    let gone = before[0].clone();
    assert!(before.iter().all(|e| *e == gone), "{before:?}");
    let left: Vec<(&str, &str)> = all.into_iter().filter(|(ip, _)| *ip != gone).collect();
    node.proxy
        .load(&[service("dns", &cluster_ip("10.96.0.53"), &eps(&left))]);
    use std::io::Write;
    held.stdin
        .take()
        .expect("stdin")
        .write_all(b"\n")
        .expect("write");
    let after = read(10);
    let _ = held.wait();
    assert!(!after.contains(&gone), "{after:?}");
    assert!(after.iter().all(|e| *e == after[0]), "{after:?}");
}

#[test]
fn turning_tc_on_replaces_the_pins_and_keeps_serving() {
    let Some(mut node) = node() else { return };
    let items = [service(
        "web",
        &cluster_ip("10.96.0.80"),
        &eps(&[(E1, NODE)]),
    )];
    node.proxy.load(&items);
    assert!(node.once("tcp", "10.96.0.80", 80).starts_with(E1));
    let pins = node.proxy.backend.config().pin_path.clone();
    let versions = || -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&pins)
            .expect("pins")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let before = versions();
    assert_eq!(before.len(), 1, "{before:?}");
    let without_tc = node.proxy.backend.kernel_memory();

    // A restart with a tc interface (the test namespace's loopback): the
    // maps are made again at their tc sizes, the old pins go, and the
    // Service is served throughout.
    let config = node
        .proxy
        .backend
        .config()
        .clone()
        .tc_interfaces(["lo"])
        .tc_in_netns(&node.ns.name);
    node.proxy = Proxy::new(EbpfBackend::attach(config).expect("attach with tc"));
    node.proxy.load(&items);
    let after = versions();
    assert_eq!(after.len(), 1, "{after:?}");
    assert_ne!(after, before);
    assert!(after[0].ends_with("-tc"), "{after:?}");
    assert!(node.once("tcp", "10.96.0.80", 80).starts_with(E1));
    let with_tc = node.proxy.backend.kernel_memory();
    assert!(with_tc > without_tc, "{with_tc} > {without_tc}");
}

/// `--xdp native` on an interface whose driver has no XDP (a bridge) is an
/// error naming the interface, with why each mode asked failed; `auto`
/// falls back to generic there and attaches; turned off on the next
/// attach, the program is detached.
#[test]
fn xdp_that_attaches_in_no_mode_asked_names_the_interface() {
    if let Some(why) = unavailable() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let fs = BpfFs::new("kpng-bpf-xdp").expect("bpffs");
    let cgroup = TestCgroup::new("kpng-cg-xdp").expect("cgroup");
    let ns = TestNetns::new("kpx").expect("netns");
    // (a bridge: its driver has no XDP of its own)
    ns.sh("ip link add xdp0 type bridge && ip link set xdp0 up")
        .expect("bridge");
    let with = |mode| {
        config(&fs, &cgroup)
            .tc_interfaces(["xdp0"])
            .tc_in_netns(&ns.name)
            .xdp(mode)
    };
    let error = EbpfBackend::attach(with(Some(XdpMode::Native))).expect_err("no native XDP");
    let text = error.to_string();
    assert!(
        text.starts_with("interface xdp0: the XDP program attaches neither in the driver (")
            && text.contains("nor generic (not tried)"),
        "{text}"
    );
    let xdp_on = || {
        ns.sh("ip -d link show xdp0")
            .expect("ip")
            .contains("prog/xdp")
    };
    let backend = EbpfBackend::attach(with(Some(XdpMode::Auto))).expect("generic");
    assert!(xdp_on(), "attached generic");
    drop(backend);
    let _backend = EbpfBackend::attach(with(None)).expect("attach");
    assert!(!xdp_on(), "detached once --xdp is off");
}
