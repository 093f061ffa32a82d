//! A lab of network namespaces for real-packet tests: a node namespace that
//! runs the backend's rules and routes, endpoint namespaces with small
//! servers, and client namespaces. Everything is created by the test, named
//! uniquely, and deleted on drop (also when the test fails).

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kpng_testkit::bpf::{BpfFs, TestCgroup, in_cgroup_and_netns};

static NEXT: AtomicUsize = AtomicUsize::new(0);

pub(crate) const SERVER: &str = r#"
import socket, sys, threading
me = sys.argv[1]
me6 = sys.argv[2] if len(sys.argv) > 2 else me
def who(addr):
    a = addr[0]
    return a[7:] if a.startswith("::ffff:") else a
def name(addr):
    return me6 if ":" in who(addr) else me
def tcp(port):
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("::", port)); s.listen(256)
    while True:
        c, a = s.accept()
        try: c.sendall(("%s %s\n" % (name(a), who(a))).encode())
        finally: c.close()
def udp(port):
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.bind(("::", port))
    while True:
        d, a = s.recvfrom(2048)
        s.sendto(("%s %s\n" % (name(a), who(a))).encode(), a)
def held(c, a):
    try:
        c.sendall(("%s %s\n" % (name(a), who(a))).encode())
        while True:
            d = c.recv(2048)
            if not d: break
            c.sendall(d)
    except OSError: pass
    finally: c.close()
def hold(port):
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("::", port)); s.listen(256)
    while True:
        c, a = s.accept()
        threading.Thread(target=held, args=(c, a), daemon=True).start()
for p in (8080, 8081, 9000):
    threading.Thread(target=tcp, args=(p,), daemon=True).start()
threading.Thread(target=hold, args=(9100,), daemon=True).start()
for p in (5353, 8125):
    threading.Thread(target=udp, args=(p,), daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
"#;

/// `count` connections (or datagrams: `udp` unconnected, `udpc` from a
/// connected socket, which takes replies from the address it sent to
/// only); with source ports after the
/// count, one TCP connection each, bound to its port (so that the same
/// flows can be made again) and closed by a reset (no TIME_WAIT keeps
/// the port from the next round). One line each.
pub(crate) const CLIENT: &str = r#"
import socket, struct, sys, time
proto, host, port, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sports = [int(p) for p in sys.argv[5:]] or [None] * count
fam = socket.AF_INET6 if ":" in host else socket.AF_INET
for sport in sports:
    t = time.monotonic()
    try:
        if proto == "tcp":
            s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(2)
            if sport is not None:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.bind(("", sport))
            s.connect((host, port)); out = s.recv(200).decode().strip()
        elif proto == "udpc":
            s = socket.socket(fam, socket.SOCK_DGRAM); s.settimeout(2)
            s.connect((host, port)); s.send(b"hi"); out = s.recv(200).decode().strip()
        else:
            s = socket.socket(fam, socket.SOCK_DGRAM); s.settimeout(2)
            s.sendto(b"hi", (host, port)); out = s.recv(200).decode().strip()
        s.close()
    except ConnectionRefusedError:
        out = "REFUSED %.2f" % (time.monotonic() - t)
    except (socket.timeout, TimeoutError):
        out = "TIMEOUT"
    except OSError as e:
        out = "ERROR %s" % e
    print(out, flush=True)
"#;

/// `count` pairs of TCP connections, one to each of two destinations,
/// alternating connection by connection (so that whatever the machine
/// does meanwhile hits both alike); the time of each connection is added
/// to its destination's total. Prints, per destination, how many were
/// answered and the seconds they took.
const PAIRED_RATE_CLIENT: &str = r#"
import socket, sys, time
a = (sys.argv[1], int(sys.argv[2]))
b = (sys.argv[3], int(sys.argv[4]))
count = int(sys.argv[5])
fam = socket.AF_INET6 if ":" in a[0] else socket.AF_INET
ok = [0, 0]
spent = [0.0, 0.0]
for i in range(2 * count):
    k = (i + i // 2) % 2  # a b b a a b b a ...: neither always goes first
    t = time.monotonic()
    try:
        s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(2)
        s.connect(a if k == 0 else b)
        if s.recv(200): ok[k] += 1
        s.close()
    except OSError:
        pass
    spent[k] += time.monotonic() - t
print(ok[0], spent[0], ok[1], spent[1], flush=True)
"#;

/// Why the lab cannot run here with `tools`, if it cannot.
pub fn unavailable(tools: &[&str]) -> Option<String> {
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Some("not root: network namespaces need root".into());
    }
    for tool in ["ip", "python3"].iter().chain(tools) {
        let found = Command::new("sh")
            .args([
                "-c",
                &format!("command -v {tool} || test -x /usr/sbin/{tool}"),
            ])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            return Some(format!("{tool} not found"));
        }
    }
    None
}

/// Runs a command that must succeed.
pub fn run(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .expect("spawn");
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One lab. Dropping it kills its servers and deletes its namespaces.
pub struct Lab {
    /// The prefix of its namespace names (unique per process and lab).
    pub prefix: String,
    namespaces: Vec<String>,
    servers: Vec<Child>,
    links: usize,
    /// A bpffs and a cgroup for eBPF backends, made on first use; removed
    /// after the namespaces (field order), detaching whatever is left.
    bpf: std::sync::OnceLock<(BpfFs, TestCgroup)>,
    /// Each host's addresses, for explaining its probes.
    addresses: std::collections::HashMap<String, Vec<std::net::IpAddr>>,
    /// The node's own addresses (its links' `node_addrs`).
    node_addresses: Vec<std::net::IpAddr>,
    /// What the probes are checked against: `kpng explain`.
    pub(crate) witness: crate::witness::Shared,
}

/// The hosts whose sockets are this node's: the node itself, the pod
/// client and e1 (the endpoint pod on this node). An eBPF backend serves
/// their sockets; the other hosts stand for other machines.
pub const LOCAL_HOSTS: [&str; 3] = ["node", "podc", "e1"];

impl Drop for Lab {
    fn drop(&mut self) {
        let report = crate::witness::report(&self.witness);
        self.clean_up();
        if let Some(report) = report.filter(|_| !std::thread::panicking()) {
            panic!("{report}");
        }
    }
}

impl Lab {
    fn clean_up(&mut self) {
        if std::env::var_os("KPNG_KEEP_LAB").is_some() {
            eprintln!("KPNG_KEEP_LAB: kept namespaces {}-*", self.prefix);
            return;
        }
        for child in &mut self.servers {
            let _ = child.kill();
            let _ = child.wait();
        }
        for ns in &self.namespaces {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

impl Default for Lab {
    fn default() -> Self {
        Self::new()
    }
}

impl Lab {
    /// A lab with a node namespace (`node`) that forwards.
    pub fn new() -> Self {
        let prefix = format!(
            "kpt{}x{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut lab = Lab {
            prefix,
            namespaces: Vec::new(),
            servers: Vec::new(),
            links: 0,
            bpf: std::sync::OnceLock::new(),
            addresses: std::collections::HashMap::new(),
            node_addresses: Vec::new(),
            witness: crate::witness::Shared::default(),
        };
        lab.namespace("node");
        for s in ["net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"] {
            run(&["ip", "netns", "exec", &lab.ns("node"), "sysctl", "-qw", s]);
        }
        lab
    }

    /// The full name of a namespace of this lab.
    pub fn ns(&self, name: &str) -> String {
        format!("{}-{name}", self.prefix)
    }

    fn namespace(&mut self, name: &str) -> String {
        let ns = self.ns(name);
        run(&["ip", "netns", "add", &ns]);
        self.namespaces.push(ns.clone());
        run(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
        ns
    }

    /// A host namespace `name`, linked to the node by a veth pair, holding
    /// `addrs` (one per family at most). The node routes those addresses to
    /// it; it routes everything through the node. `node_addrs` are extra
    /// addresses the node holds on its side of the link (its node IPs).
    pub fn host(&mut self, name: &str, addrs: &[&str], node_addrs: &[&str]) {
        let parsed = |list: &[&str]| -> Vec<std::net::IpAddr> {
            list.iter().filter_map(|a| a.parse().ok()).collect()
        };
        self.addresses.insert(name.to_owned(), parsed(addrs));
        self.node_addresses.extend(parsed(node_addrs));
        let ns = self.namespace(name);
        let node = self.ns("node");
        self.links += 1;
        let (a, b) = (format!("k{}", self.links), "eth0");
        run(&[
            "ip", "link", "add", &a, "netns", &node, "type", "veth", "peer", "name", b, "netns",
            &ns,
        ]);
        run(&["ip", "-n", &node, "link", "set", &a, "up"]);
        run(&["ip", "-n", &ns, "link", "set", b, "up"]);
        let gw4 = format!("169.254.{}.1", self.links);
        let gw6 = format!("fe80::{}:1", self.links);
        run(&[
            "ip",
            "-n",
            &node,
            "addr",
            "add",
            &format!("{gw4}/32"),
            "dev",
            &a,
        ]);
        run(&[
            "ip",
            "-n",
            &node,
            "-6",
            "addr",
            "add",
            &format!("{gw6}/64"),
            "dev",
            &a,
            "nodad",
        ]);
        for addr in node_addrs {
            let len = if addr.contains(':') { 128 } else { 32 };
            run(&[
                "ip",
                "-n",
                &node,
                "addr",
                "add",
                &format!("{addr}/{len}"),
                "dev",
                &a,
                "nodad",
            ]);
        }
        for addr in addrs {
            let v6 = addr.contains(':');
            let len = if v6 { 128 } else { 32 };
            let family = if v6 { "-6" } else { "-4" };
            run(&[
                "ip",
                "-n",
                &ns,
                family,
                "addr",
                "add",
                &format!("{addr}/{len}"),
                "dev",
                b,
                "nodad",
            ]);
            run(&[
                "ip",
                "-n",
                &node,
                family,
                "route",
                "add",
                &format!("{addr}/{len}"),
                "dev",
                &a,
            ]);
            let gw = if v6 { &gw6 } else { &gw4 };
            if v6 {
                run(&[
                    "ip", "-n", &ns, "-6", "route", "add", "default", "via", gw, "dev", b,
                ]);
            } else {
                run(&["ip", "-n", &ns, "route", "add", gw, "dev", b]);
                run(&[
                    "ip", "-n", &ns, "route", "add", "default", "via", gw, "dev", b,
                ]);
            }
        }
    }

    /// An upstream host holding every address the node does not route:
    /// the node's default route points at it, and it accepts every
    /// destination as its own, refusing connections (nothing listens).
    pub fn upstream(&mut self) {
        self.host("up", &[], &[]);
        let (node, up) = (self.ns("node"), self.ns("up"));
        let link = format!("k{}", self.links);
        for cmd in [
            vec!["-n", &node, "route", "add", "default", "dev", &link],
            vec!["-n", &node, "-6", "route", "add", "default", "dev", &link],
            vec!["-n", &up, "route", "add", "default", "dev", "eth0"],
            vec!["-n", &up, "-6", "route", "add", "default", "dev", "eth0"],
            vec![
                "-n",
                &up,
                "route",
                "add",
                "local",
                "0.0.0.0/0",
                "dev",
                "lo",
                "table",
                "local",
            ],
            vec![
                "-n", &up, "-6", "route", "add", "local", "::/0", "dev", "lo", "table", "local",
            ],
        ] {
            let mut args = vec!["ip"];
            args.extend(cmd);
            run(&args);
        }
    }

    /// Starts the echo servers (TCP 8080, 8081, 9000; UDP 5353, 8125) in
    /// host `name`, answering with `me` and the peer address they saw;
    /// on TCP 9100 ([`held::HELD_PORT`](crate::held::HELD_PORT)) the
    /// same line, then the connection is held open and echoes.
    pub fn serve(&mut self, name: &str, me: &str) {
        let (child, line) = echo_server(&self.ns(name), me, None);
        self.servers.push(child);
        assert_eq!(line.trim(), "ready", "server in {name} did not start");
    }

    /// `count` connections (or datagrams) from host `from`; one line each:
    /// `<endpoint> <peer seen>`, `REFUSED <seconds>`, `TIMEOUT` or `ERROR`.
    pub fn connect(
        &self,
        from: &str,
        proto: &str,
        host: &str,
        port: u16,
        count: usize,
    ) -> Vec<String> {
        let (port_text, count) = (port.to_string(), count.to_string());
        let args = ["python3", "-c", CLIENT, proto, host, &port_text, &count];
        let out = self.client(from, &args).output().expect("client");
        let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect();
        self.witness(from, self.packet(from, proto, host, port), &lines);
        lines
    }

    /// One TCP connection from host `from` to `host:port` per source port
    /// of `ports`, each bound to its port: one line each, in order (as
    /// [`connect`](Self::connect)'s). The same ports make the same flows
    /// again.
    pub fn connect_from_ports(
        &self,
        from: &str,
        host: &str,
        port: u16,
        ports: &[u16],
    ) -> Vec<String> {
        let (port_text, count) = (port.to_string(), ports.len().to_string());
        let sports: Vec<String> = ports.iter().map(ToString::to_string).collect();
        let mut args = vec!["python3", "-c", CLIENT, "tcp", host, &port_text, &count];
        args.extend(sports.iter().map(String::as_str));
        let out = self.client(from, &args).output().expect("client");
        let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect();
        // Each flow on its own: a Maglev Service's endpoint is then named
        // exactly.
        for (sport, line) in ports.iter().zip(&lines) {
            let packet = self
                .packet(from, "tcp", host, port)
                .map(|p| p.from_port(*sport));
            self.witness(from, packet, std::slice::from_ref(line));
        }
        lines
    }

    /// Checks what a probe's packets did against `kpng explain`.
    fn witness(&self, from: &str, packet: Option<kpng_explain::Packet>, lines: &[String]) {
        if let (Some(packet), Ok(mut witness)) = (packet, self.witness.lock()) {
            let v4 = packet.destination.is_ipv4();
            let resolve = |name: &str| {
                let addresses = self.addresses.get(name)?;
                addresses.iter().find(|a| a.is_ipv4() == v4).copied()
            };
            witness.probe(from, &packet, lines, &resolve);
        }
    }

    /// The packet a probe from host `from` sends, for explaining it:
    /// `None` when the lab does not know its source in that family.
    fn packet(
        &self,
        from: &str,
        proto: &str,
        host: &str,
        port: u16,
    ) -> Option<kpng_explain::Packet> {
        let destination: std::net::IpAddr = host.parse().ok()?;
        let family = |ip: &&std::net::IpAddr| ip.is_ipv4() == destination.is_ipv4();
        let source = if from == "node" {
            self.node_addresses.iter().find(family)
        } else {
            self.addresses.get(from)?.iter().find(family)
        };
        Some(kpng_explain::Packet::new(
            crate::witness::origin(from),
            crate::witness::protocol(proto)?,
            *source?,
            destination,
            port,
        ))
    }

    /// `args` run as a client in host `from`: in the lab's cgroup too
    /// when an eBPF backend made one and `from` is one of this node's
    /// hosts ([`LOCAL_HOSTS`]).
    pub fn client(&self, from: &str, args: &[&str]) -> Command {
        match self.bpf.get() {
            Some((_, cgroup)) if LOCAL_HOSTS.contains(&from) => {
                in_cgroup_and_netns(&cgroup.path, &self.ns(from), args)
            }
            _ => {
                let mut command = Command::new("ip");
                command.args(["netns", "exec", &self.ns(from)]).args(args);
                command
            }
        }
    }

    /// `count` TCP connections from host `from` to each of `a` and `b`,
    /// alternating: connections per second to each (over those answered),
    /// and how many of each were answered.
    pub fn paired_rates(
        &self,
        from: &str,
        a: (&str, u16),
        b: (&str, u16),
        count: usize,
    ) -> ((f64, usize), (f64, usize)) {
        let (pa, pb, n) = (a.1.to_string(), b.1.to_string(), count.to_string());
        let args = ["python3", "-c", PAIRED_RATE_CLIENT, a.0, &pa, b.0, &pb, &n];
        let out = self.client(from, &args).output().expect("client");
        let text = String::from_utf8_lossy(&out.stdout);
        let words: Vec<f64> = text
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        let rate = |ok: f64, secs: f64| if secs > 0.0 { ok / secs } else { 0.0 };
        match words.as_slice() {
            [ok_a, secs_a, ok_b, secs_b] => (
                (rate(*ok_a, *secs_a), *ok_a as usize),
                (rate(*ok_b, *secs_b), *ok_b as usize),
            ),
            _ => ((0.0, 0), (0.0, 0)),
        }
    }

    /// One connection; its line.
    pub fn once(&self, from: &str, proto: &str, host: &str, port: u16) -> String {
        self.connect(from, proto, host, port, 1)
            .pop()
            .unwrap_or_default()
    }

    /// The nftables ruleset of namespace `name` (a full name), made
    /// comparable: nft's JSON listing with handles and the time left of
    /// elements with a timeout dropped, and set
    /// elements and objects sorted. Two namespaces holding the same rules
    /// give equal lists, whatever order the rules were written in.
    pub fn nft_state(ns: &str) -> Vec<String> {
        let out = Command::new("ip")
            .args(["netns", "exec", ns, "nft", "-j", "list", "ruleset"])
            .output()
            .expect("nft");
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("nft JSON");
        fn canonical(v: &mut serde_json::Value) {
            match v {
                serde_json::Value::Object(map) => {
                    map.remove("handle");
                    // The time an element with a timeout has left runs
                    // down between two listings.
                    map.remove("expires");
                    for (key, value) in map.iter_mut() {
                        canonical(value);
                        if let (true, serde_json::Value::Array(items)) = (key == "elem", value) {
                            items.sort_by_key(|i| i.to_string());
                        }
                    }
                }
                serde_json::Value::Array(items) => items.iter_mut().for_each(canonical),
                _ => {}
            }
        }
        let mut objects: Vec<String> = json["nftables"]
            .as_array()
            .map(|a| a.as_slice())
            .unwrap_or_default()
            .iter()
            .filter(|o| o.get("metainfo").is_none())
            .map(|o| {
                let mut o = o.clone();
                canonical(&mut o);
                o.to_string()
            })
            .collect();
        objects.sort();
        objects
    }

    /// A bare namespace `name` of this lab (loopback up, no links),
    /// deleted with the lab: a scratch kernel to compare rulesets in.
    pub fn scratch(&mut self, name: &str) -> String {
        self.namespace(name)
    }

    /// The node's ends of the lab's links (`k1`, `k2`, …), in the node
    /// namespace.
    pub fn node_links(&self) -> Vec<String> {
        (1..=self.links).map(|i| format!("k{i}")).collect()
    }

    /// The lab's cgroup and bpffs pin directory, for an eBPF backend:
    /// made on first use; from then on the sockets of [`LOCAL_HOSTS`] are
    /// made in that cgroup.
    ///
    /// # Panics
    /// When they cannot be made (see `kpng_testkit::bpf::unavailable`).
    pub fn bpf_env(&self) -> (std::path::PathBuf, std::path::PathBuf) {
        let (fs, cgroup) = self.bpf.get_or_init(|| {
            let fs = BpfFs::new(&format!("{}-bpf", self.prefix)).expect("a bpffs");
            let cgroup = TestCgroup::new(&format!("{}-cg", self.prefix)).expect("a cgroup");
            (fs, cgroup)
        });
        (cgroup.path.clone(), fs.path.join("kpng"))
    }

    /// Runs `args` in the node namespace; its standard output.
    pub fn in_node(&self, args: &[&str]) -> String {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.ns("node")])
            .args(args)
            .output()
            .expect("spawn in the node namespace");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// Starts the lab's echo servers ([`SERVER`]) in network namespace `ns`,
/// answering with `me` (`me6`, when given, to IPv6 peers); returns the process and the first line it
/// printed (`ready` once it listens), for the caller to keep the process
/// (so that it is killed with the lab) before checking the line.
pub(crate) fn echo_server(ns: &str, me: &str, me6: Option<&str>) -> (std::process::Child, String) {
    use std::io::BufRead;
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, "python3", "-u", "-c", SERVER, me])
        .args(me6)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("echo server");
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        let _ = std::io::BufReader::new(out).read_line(&mut line);
    }
    (child, line)
}

/// Waits a little for conntrack and routes to settle.
pub fn settle() {
    std::thread::sleep(Duration::from_millis(50));
}

/// For each source port of `client`, the index in `targets` of the
/// endpoint a Maglev Service over `targets` sends that flow to: the
/// kernel's hash (`kpng_model::maglev::flow_slot`) into the Service's
/// table, as the nftables rules and the eBPF tc programs pick it.
pub fn maglev_picks(
    client: std::net::IpAddr,
    ports: &[u16],
    targets: &[(std::net::IpAddr, u16)],
) -> Vec<usize> {
    use kpng_model::maglev::{SLOTS, flow_slot, table};
    let table = table(targets, SLOTS);
    ports
        .iter()
        .map(|p| table[flow_slot(client, *p, SLOTS) as usize] as usize)
        .collect()
}

/// The endpoint part of each reply line, in order (a failure's word as it
/// is: `REFUSED`, `TIMEOUT`, `ERROR`).
pub fn reached(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .map(|l| l.split_whitespace().next().unwrap_or_default().to_owned())
        .collect()
}

/// The endpoint part of each reply line.
pub fn endpoints(lines: &[String]) -> std::collections::BTreeSet<String> {
    lines
        .iter()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .filter(|e| !["REFUSED", "TIMEOUT", "ERROR"].contains(&e.as_str()))
        .collect()
}
