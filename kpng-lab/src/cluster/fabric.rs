//! The fabric: the namespaces of the nodes, their pods and the client,
//! the links and routes between them, and their removal.

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;
use crate::lab::echo_server;

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// Sets TX checksum offload of interface `argv[1]` to `argv[2]` (0, 1).
const TXCSUM: &str = r#"
import ctypes, fcntl, socket, struct, sys
b = ctypes.create_string_buffer(struct.pack("II", 0x17, int(sys.argv[2])), 8)
ifr = struct.pack("16sP", sys.argv[1].encode(), ctypes.addressof(b)) + b"\0" * 16
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
fcntl.ioctl(s.fileno(), 0x8946, ifr)
"#;

/// Runs `ip [-n ns] -batch -` with `lines` on its standard input.
pub(super) fn batch(ns: Option<&str>, lines: &[String]) {
    if lines.is_empty() {
        return;
    }
    let mut command = Command::new("ip");
    if let Some(ns) = ns {
        command.args(["-n", ns]);
    }
    let mut child = command
        .args(["-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ip -batch");
    {
        let mut stdin = child.stdin.take().expect("stdin");
        stdin
            .write_all(lines.join("\n").as_bytes())
            .expect("ip -batch input");
    }
    let out = child.wait_with_output().expect("ip -batch");
    assert!(
        out.status.success(),
        "ip {ns:?} -batch failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Cluster {
    pub(super) fn clean_up(&mut self) {
        self.server = None;
        self.replica = None;
        self.agents.clear();
        if let Some(api) = self.fabric_api.as_mut()
            && let Some(mut relay) = api.relay.take()
        {
            let _ = relay.kill();
            let _ = relay.wait();
        }
        for child in &mut self.echo {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::env::var_os("KPNG_KEEP_LAB").is_some() {
            eprintln!("KPNG_KEEP_LAB: kept namespaces {}-*", self.prefix);
            return;
        }
        let lines: Vec<String> = self
            .namespaces
            .iter()
            .map(|ns| format!("netns del {ns}"))
            .collect();
        let mut child = match Command::new("ip")
            .args(["-force", "-batch", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(child) => child,
            Err(_) => return,
        };
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(lines.join("\n").as_bytes());
        }
        let _ = child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Cluster {
    /// Builds `nodes` nodes with `pods_per_node` pods each (every pod
    /// serving the echo server), the fabric and the client; no kpng
    /// process yet.
    ///
    /// # Panics
    /// When a namespace, link, address or route cannot be made, or with
    /// more than [`MAX_NODES`] nodes.
    pub fn new(nodes: usize, pods_per_node: usize, backend: AgentBackend) -> Self {
        Self::build(nodes, pods_per_node, backend, true, false)
    }

    /// [`Cluster::new`], dual stack: IPv6 beside IPv4 on the fabric
    /// ([`CLIENT_IP6`], [`node_ip6`]), the nodes (in their Node objects
    /// too) and the pods ([`pod_ip6`], routed as the IPv4 ones), and the
    /// agents given both families' CIDRs.
    ///
    /// # Panics
    /// As [`Cluster::new`].
    pub fn dual_stack(nodes: usize, pods_per_node: usize, backend: AgentBackend) -> Self {
        Self::build(nodes, pods_per_node, backend, true, true)
    }

    /// [`Cluster::new`] with pods that run nothing (their addresses
    /// exist, nothing answers): for benchmarks of the control plane.
    pub fn without_servers(nodes: usize, pods_per_node: usize, backend: AgentBackend) -> Self {
        Self::build(nodes, pods_per_node, backend, false, false)
    }

    fn build(
        nodes: usize,
        pods_per_node: usize,
        backend: AgentBackend,
        serve: bool,
        ipv6: bool,
    ) -> Self {
        assert!(
            (1..=MAX_NODES).contains(&nodes),
            "1 to {MAX_NODES} nodes, not {nodes}"
        );
        assert!(pods_per_node <= 200, "at most 200 pods a node");
        let prefix = format!(
            "kpc{}x{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let dir = std::env::temp_dir().join(&prefix);
        std::fs::create_dir_all(&dir).expect("the cluster's directory");
        let mut cluster = Cluster {
            prefix,
            nodes,
            pods_per_node,
            backend,
            binary: kpng_binary(),
            dir,
            namespaces: Vec::new(),
            echo: Vec::new(),
            server: None,
            replica: None,
            replicated: false,
            agents: (0..nodes).map(|_| None).collect(),
            bpf: Vec::new(),
            agent_flags: Vec::new(),
            ipv6,
            witness: crate::witness::Shared::default(),
            file_times: std::sync::Mutex::new(None),
            fabric_api: None,
        };
        let (fab, client) = (cluster.fabric_ns(), cluster.client_ns());
        let mut all = vec![fab.clone(), client.clone()];
        for k in 1..=nodes {
            all.push(cluster.node_ns(k));
            all.extend((0..pods_per_node).map(|j| cluster.pod_ns(k, j)));
        }
        // Recorded first: a failure from here on deletes whatever exists.
        cluster.namespaces = all.clone();
        if backend == AgentBackend::Ebpf {
            for k in 1..=nodes {
                let tag = format!("{}-n{k}", cluster.prefix);
                let fs = BpfFs::new(&format!("{tag}-bpf")).expect("a bpffs");
                let cgroup = TestCgroup::new(&format!("{tag}-cg")).expect("a cgroup");
                cluster.bpf.push((fs, cgroup));
            }
        }
        let mut host: Vec<String> = all.iter().map(|ns| format!("netns add {ns}")).collect();
        host.push(format!(
            "link add fc netns {fab} type veth peer name eth0 netns {client}"
        ));
        for k in 1..=nodes {
            let node = cluster.node_ns(k);
            host.push(format!(
                "link add f{k} netns {fab} type veth peer name eth0 netns {node}"
            ));
            for j in 0..pods_per_node {
                let pod = cluster.pod_ns(k, j);
                host.push(format!(
                    "link add p{j} netns {node} type veth peer name eth0 netns {pod}"
                ));
            }
        }
        batch(None, &host);

        // The fabric: one bridge, every node and the client on it.
        let mut lines = vec![
            "link set lo up".to_owned(),
            "link add br0 type bridge".to_owned(),
            "link set br0 up".to_owned(),
            format!("addr add {GATEWAY_IP}/16 dev br0"),
            "link set fc master br0".to_owned(),
            "link set fc up".to_owned(),
        ];
        for k in 1..=nodes {
            lines.push(format!("link set f{k} master br0"));
            lines.push(format!("link set f{k} up"));
        }
        if ipv6 {
            lines.push(format!("addr add {GATEWAY_IP6}/64 dev br0 nodad"));
        }
        batch(Some(&fab), &lines);
        let mut lines = vec![
            "link set lo up".to_owned(),
            format!("addr add {CLIENT_IP}/16 dev eth0"),
            "link set eth0 up".to_owned(),
        ];
        if ipv6 {
            lines.push(format!("addr add {CLIENT_IP6}/64 dev eth0 nodad"));
        }
        batch(Some(&client), &lines);

        // Each node: its address, its pods' bridge, routes to the others'.
        for k in 1..=nodes {
            let node = cluster.node_ns(k);
            let mut lines = vec![
                "link set lo up".to_owned(),
                format!("addr add {}/16 dev eth0", node_ip(k)),
                "link set eth0 up".to_owned(),
                "link add cbr0 type bridge".to_owned(),
                format!("addr add 10.244.{k}.1/24 dev cbr0"),
                "link set cbr0 up".to_owned(),
            ];
            for j in 0..pods_per_node {
                lines.push(format!("link set p{j} master cbr0"));
                lines.push(format!("link set p{j} up"));
            }
            lines.push(format!("route add default via {GATEWAY_IP}"));
            for other in (1..=nodes).filter(|&o| o != k) {
                lines.push(format!(
                    "route add 10.244.{other}.0/24 via {}",
                    node_ip(other)
                ));
            }
            if ipv6 {
                lines.push(format!("addr add {}/64 dev eth0 nodad", node_ip6(k)));
                lines.push(format!("addr add fd00:244:0:{k:x}::1/64 dev cbr0 nodad"));
                lines.push(format!("route add default via {GATEWAY_IP6}"));
                for other in (1..=nodes).filter(|&o| o != k) {
                    lines.push(format!(
                        "route add fd00:244:0:{other:x}::/64 via {}",
                        node_ip6(other)
                    ));
                }
            }
            batch(Some(&node), &lines);
            crate::run(&[
                "ip",
                "netns",
                "exec",
                &node,
                "sysctl",
                "-qw",
                "net.ipv4.ip_forward=1",
                "net.ipv4.conf.all.send_redirects=0",
                "net.ipv4.conf.default.send_redirects=0",
                "net.ipv4.conf.cbr0.send_redirects=0",
                "net.ipv6.conf.all.forwarding=1",
            ]);
            for j in 0..pods_per_node {
                let ip = pod_ip(k, j);
                let mut lines = vec![
                    "link set lo up".to_owned(),
                    format!("addr add {ip}/32 dev eth0"),
                    "link set eth0 up".to_owned(),
                    format!("route add 10.244.{k}.1 dev eth0"),
                    format!("route add default via 10.244.{k}.1 dev eth0"),
                ];
                if ipv6 {
                    lines.push(format!("addr add {}/128 dev eth0 nodad", pod_ip6(k, j)));
                    lines.push(format!("route add fd00:244:0:{k:x}::1 dev eth0"));
                    lines.push(format!(
                        "route add default via fd00:244:0:{k:x}::1 dev eth0"
                    ));
                }
                batch(Some(&cluster.pod_ns(k, j)), &lines);
                if serve {
                    cluster.serve(k, j);
                }
            }
        }
        if ipv6 {
            cluster.wait_dad();
        }
        cluster
    }

    /// Waits until no IPv6 address is tentative in any of the cluster's
    /// namespaces: until an interface's link-local address has passed
    /// duplicate address detection (about a second), the node cannot
    /// solicit a neighbour for a packet it forwards, and drops it.
    fn wait_dad(&self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        for ns in &self.namespaces {
            loop {
                let out = Command::new("ip")
                    .args(["-n", ns, "-6", "-o", "addr", "show", "tentative"])
                    .output()
                    .expect("ip addr");
                if out.stdout.is_empty() {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "IPv6 addresses of {ns} still tentative: {}",
                    String::from_utf8_lossy(&out.stdout)
                );
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
    }

    /// Routes `prefix` (of either family) from the client to node `k`:
    /// external or LB IPs outside the fabric reached through that node.
    ///
    /// # Panics
    /// When `ip route add` fails.
    pub fn route_client_to(&self, prefix: &str, k: usize) {
        let via = if prefix.contains(':') {
            node_ip6(k)
        } else {
            node_ip(k)
        };
        crate::run(&[
            "ip",
            "-n",
            &self.client_ns(),
            "route",
            "add",
            prefix,
            "via",
            &via,
        ]);
    }

    /// Turns the client's TX checksum offload on or off (`SIOCETHTOOL`,
    /// `ETHTOOL_STXCSUM`; no `ip link` switch exists). On, a packet it
    /// sends over its veth carries only the pseudo-header's sum in its
    /// checksum (the receiver takes it as good); off, a full checksum,
    /// which the endpoint's stack checks, as from across a wire.
    ///
    /// # Panics
    /// When the ioctl fails.
    pub fn client_checksum_offload(&self, on: bool) {
        crate::run(&[
            "ip",
            "netns",
            "exec",
            &self.client_ns(),
            "python3",
            "-c",
            TXCSUM,
            "eth0",
            if on { "1" } else { "0" },
        ]);
    }

    fn serve(&mut self, k: usize, j: usize) {
        let ip = pod_ip(k, j);
        let ip6 = self.ipv6.then(|| pod_ip6(k, j));
        let (child, line) = echo_server(&self.pod_ns(k, j), &ip, ip6.as_deref());
        self.echo.push(child);
        assert_eq!(line.trim(), "ready", "the echo server of pod {ip}");
    }

    /// The fabric's namespace (the bridge).
    pub fn fabric_ns(&self) -> String {
        format!("{}-fab", self.prefix)
    }

    /// The client's namespace.
    pub fn client_ns(&self) -> String {
        format!("{}-cl", self.prefix)
    }

    /// Node `k`'s namespace.
    pub fn node_ns(&self, k: usize) -> String {
        format!("{}-n{k}", self.prefix)
    }

    /// The namespace of pod `j` on node `k`.
    pub fn pod_ns(&self, k: usize, j: usize) -> String {
        format!("{}-n{k}p{j}", self.prefix)
    }
}
