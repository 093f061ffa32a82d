//! A cluster lab: the distributed design (one server, one agent per node)
//! run as real `kpng` processes over N nodes, each a network namespace.
//!
//! ```text
//!                 fabric namespace: bridge br0 (192.168.0.0/16)
//!      ┌──────────────┬──────────────┬──── … ───┬────────────────┐
//!   node-1          node-2         node-3     node-N       client (outside)
//!   192.168.1.1     192.168.1.2    …          192.168.1.N  192.168.0.10
//!   cbr0 10.244.1.1/24  …                                  
//!    ├ pod 10.244.1.10 (echo)      each node routes 10.244.K.0/24
//!    └ pod 10.244.1.11 (echo)      via 192.168.1.K (K ≠ itself)
//! ```
//!
//! * **Nodes** are namespaces on the fabric bridge (a namespace of its
//!   own), each forwarding, with a bridge `cbr0` for its pods, a route to
//!   every other node's pod CIDR through that node's address, and a
//!   default route to the fabric ([`GATEWAY_IP`], which forwards nothing).
//! * **Pods** are namespaces behind their node's bridge, each holding a
//!   /32 and routing everything (same-node pods included) through the
//!   node, so that the node's conntrack sees both directions; each runs
//!   the lab's echo server, which answers with its own address and the
//!   peer it saw.
//! * **The client** is a namespace on the fabric outside every pod CIDR.
//! * **The control plane** is the `kpng` binary: one server
//!   (`kpng file --input M --watch to-api --listen unix://S`, outside the
//!   nodes: it programs no kernel) and one agent per node
//!   (`ip netns exec NODE kpng api --api unix://S --node node-K to-nft …`,
//!   or `to-iptables`, or `to-ebpf` with a cgroup and a bpffs per node),
//!   each programming its own node's kernel. Their logs are read line by
//!   line with their timestamps: the server's `manifest reloaded
//!   revision=…` and each agent's `synced revision=…` (logged once the
//!   backend's batch is in the kernel) tell when each node applied which
//!   revision. Their log filter is `kpng=info,warn`, or `KPNG_LAB_LOG`'s.
//! * **From the API** instead of a file: [`ApiSource`] serves the
//!   manifest from a test apiserver in this process (list and watch, as
//!   `kpng_testkit::apiserver` speaks them), [`Cluster::start_kube_server`]
//!   runs `kpng kube --kubeconfig K to-api` against it, and a change is a
//!   watch event sent when asked: its time is the source's.
//!
//! Every namespace name starts with a prefix unique to the process and
//! the cluster; dropping the [`Cluster`] (also on a failed assertion)
//! kills its processes and deletes its namespaces.
//!
//! The `kpng` binary must be built first (`cargo build -p kpng-cli`, with
//! `--release` for the benchmark): [`kpng_binary`] says where it is looked
//! for, and `KPNG_BIN` overrides it.
//!
//! ```no_run
//! use kpng_lab::cluster::{AgentBackend, Cluster};
//!
//! let mut cluster = Cluster::new(3, 2, AgentBackend::Nft);
//! cluster.write_manifest(&cluster.manifest(&[]));
//! cluster.start_server();
//! cluster.start_agents();
//! cluster.wait_all_synced(std::time::Duration::from_secs(30));
//! ```

mod api_source;
mod counter;
mod fabric;
mod faults;
mod process;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant, SystemTime};

use kpng_testkit::bpf::{BpfFs, TestCgroup, in_cgroup_and_netns};

use crate::lab::CLIENT;

pub use api_source::ApiSource;
pub use counter::PacketCount;
pub use faults::{API_PORT, RELAY_PORT, SERVER_IP};
pub use process::{LogLine, Process};

/// The client's address on the fabric (outside every pod CIDR).
pub const CLIENT_IP: &str = "192.168.0.10";
/// The fabric's own address, every node's default gateway: it forwards
/// nothing, so what a node routes there (an address no rule took) is
/// dropped, as by a router that has no route for it.
pub const GATEWAY_IP: &str = "192.168.0.1";
/// The pod CIDR of the whole cluster (`--cluster-cidr`).
pub const CLUSTER_CIDR: &str = "10.244.0.0/16";
/// The Service CIDR (`--service-cidr`).
pub const SERVICE_CIDR: &str = "10.96.0.0/16";
/// The most nodes a cluster may have (node addresses are 192.168.1.K,
/// pod CIDRs 10.244.K.0/24).
pub const MAX_NODES: usize = 250;

/// A dual-stack cluster's ([`Cluster::dual_stack`]) IPv6 fabric: the
/// client's address.
pub const CLIENT_IP6: &str = "fd00:f::10";
/// The IPv6 fabric's own address (every node's IPv6 default gateway).
pub const GATEWAY_IP6: &str = "fd00:f::1";
/// The IPv6 pod CIDR of a dual-stack cluster (node K's pods in
/// `fd00:244:0:K::/64`, K in hex).
pub const CLUSTER_CIDR6: &str = "fd00:244::/48";
/// The IPv6 Service CIDR of a dual-stack cluster.
pub const SERVICE_CIDR6: &str = "fd00:96::/112";

/// Node `k`'s address (nodes count from 1).
pub fn node_ip(k: usize) -> String {
    format!("192.168.1.{k}")
}

/// Node `k`'s IPv6 address, in a dual-stack cluster.
pub fn node_ip6(k: usize) -> String {
    format!("fd00:f::1:{k:x}")
}

/// The IPv6 address of pod `j` on node `k`, in a dual-stack cluster.
pub fn pod_ip6(k: usize, j: usize) -> String {
    format!("fd00:244:0:{k:x}::{:x}", 10 + j)
}

/// Node `k`'s name in manifests.
pub fn node_name(k: usize) -> String {
    format!("node-{k}")
}

/// The address of pod `j` (from 0) on node `k`.
pub fn pod_ip(k: usize, j: usize) -> String {
    format!("10.244.{k}.{}", 10 + j)
}

/// The backend each agent runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentBackend {
    /// `to-nft`.
    Nft,
    /// `to-iptables --iptables-mode nft`.
    Iptables,
    /// `to-ebpf --cgroup-path CG --bpf-pin-path DIR --tc-interfaces eth0`
    /// (`--north-south nft`): a cgroup and a bpffs per node; the sockets
    /// of that node's pods' clients ([`Cluster::connect`] from a pod) are
    /// made in its cgroup, and balanced by its socket programs.
    Ebpf,
}

impl AgentBackend {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            AgentBackend::Nft => "nftables",
            AgentBackend::Iptables => "iptables",
            AgentBackend::Ebpf => "ebpf+nftables",
        }
    }

    /// The commands it needs besides `ip` and `python3`.
    pub fn tools(self) -> &'static [&'static str] {
        match self {
            AgentBackend::Nft => &["nft"],
            AgentBackend::Iptables => &["iptables-nft-restore", "iptables-nft-save"],
            AgentBackend::Ebpf => &["nft", "nsenter"],
        }
    }

    fn sink(self) -> &'static [&'static str] {
        match self {
            AgentBackend::Nft => &["to-nft"],
            AgentBackend::Iptables => &["to-iptables", "--iptables-mode", "nft"],
            AgentBackend::Ebpf => &["to-ebpf", "--tc-interfaces", "eth0"],
        }
    }

    /// Whether it balances sockets before any packet is sent: then a
    /// connection a rule drops fails at once with EPERM in the client
    /// instead of timing out (see [`crate::scenarios::dropped_locally`]).
    pub fn sockets(self) -> bool {
        self == AgentBackend::Ebpf
    }
}

/// Where the `kpng` binary is: `KPNG_BIN` when set, else `kpng` in the
/// profile directory of the running test or bench (`target/debug/kpng`
/// for tests, `target/release/kpng` for benches).
///
/// # Panics
/// When it is not there: build it first (`cargo build -p kpng-cli`, with
/// `--release` for a bench).
pub fn kpng_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("KPNG_BIN") {
        return path.into();
    }
    let exe = std::env::current_exe().expect("the running executable");
    // target/<profile>/deps/<test-binary>
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .expect("a target/<profile>/deps directory");
    let binary = profile.join("kpng");
    assert!(
        binary.exists(),
        "{} not found: build it first (`cargo build -p kpng-cli`, `--release` for benches) or set KPNG_BIN",
        binary.display()
    );
    binary
}

/// Why the cluster lab cannot run here with `backend`, if it cannot.
pub fn unavailable(backend: AgentBackend) -> Option<String> {
    crate::unavailable(backend.tools()).or_else(|| match backend {
        AgentBackend::Ebpf => kpng_testkit::bpf::unavailable(),
        _ => None,
    })
}

/// Skips the calling test, with a clear message, when the cluster lab
/// cannot run `$backend` here (not root, or a tool missing).
#[macro_export]
macro_rules! require_cluster {
    ($backend:expr) => {
        if let Some(why) = $crate::cluster::unavailable($backend) {
            eprintln!("SKIPPED: {why}");
            return;
        }
    };
}

/// The HTTP GET a client makes to a health-check node port: prints the
/// status code, then the body.
const HTTP_GET: &str = r#"
import sys, urllib.request, urllib.error
try:
    r = urllib.request.urlopen(sys.argv[1], timeout=2)
    print(r.status); print(r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code); print(e.read().decode())
except Exception as e:
    print("ERROR %s" % e)
"#;

/// A cluster lab; see the [module](self) documentation.
pub struct Cluster {
    /// The prefix of its namespace names (unique per process and cluster).
    pub prefix: String,
    /// How many nodes (named `node-1` … `node-N`).
    pub nodes: usize,
    /// How many pods each node has.
    pub pods_per_node: usize,
    /// The backend every agent runs.
    pub backend: AgentBackend,
    /// More flags for every agent started from now on (after the
    /// backend's), e.g. `--no-conntrack-cleanup`.
    pub agent_flags: Vec<String>,
    /// Dual stack ([`Cluster::dual_stack`]): IPv6 beside IPv4 on the
    /// fabric, the nodes and the pods.
    pub ipv6: bool,
    binary: PathBuf,
    dir: PathBuf,
    namespaces: Vec<String>,
    echo: Vec<Child>,
    server: Option<Process>,
    /// A second server replica ([`Cluster::start_replica`]), and whether
    /// agents are given both addresses.
    replica: Option<Process>,
    replicated: bool,
    agents: Vec<Option<Process>>,
    /// Per node, for [`AgentBackend::Ebpf`]: its bpffs and cgroup,
    /// removed after the namespaces (field order), which detaches what
    /// the agent left.
    bpf: Vec<(BpfFs, TestCgroup)>,
    /// What the probes are checked against: `kpng explain` of the node
    /// that handles each, once its agent has the manifest's state.
    witness: crate::witness::Shared,
    /// When the manifest was last written, and when the file server was
    /// started; `None` for a server that reads the API (not checked).
    file_times: std::sync::Mutex<Option<(SystemTime, SystemTime)>>,
    /// The server's path across the fabric
    /// ([`Cluster::serve_over_fabric`]), if it is served there.
    fabric_api: Option<faults::FabricApi>,
}

/// What node handles a probe, how it comes to it and from where, and the
/// syncs its agent had logged: see `Cluster::held`.
#[derive(Debug, PartialEq)]
struct Held {
    node: usize,
    origin: kpng_explain::Origin,
    source: String,
    syncs: usize,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let report = crate::witness::report(&self.witness);
        self.clean_up();
        if let Some(report) = report.filter(|_| !std::thread::panicking()) {
            panic!("{report}");
        }
    }
}

impl Cluster {
    /// The manifest file the server watches.
    pub fn manifest_path(&self) -> PathBuf {
        self.dir.join("cluster.yaml")
    }

    /// The server's unix socket.
    pub fn socket_path(&self) -> PathBuf {
        self.dir.join("api.sock")
    }

    /// A List of every Node (`node-K`, InternalIP 192.168.1.K, zone
    /// `zone-K`) and `items` (YAML list items, each starting with `- `).
    pub fn manifest(&self, items: &[String]) -> String {
        let mut out = String::from("apiVersion: v1\nkind: List\nitems:\n");
        for k in 1..=self.nodes {
            let v6 = if self.ipv6 {
                format!(", {{type: InternalIP, address: \"{}\"}}", node_ip6(k))
            } else {
                String::new()
            };
            out.push_str(&format!(
                "- apiVersion: v1\n  kind: Node\n  metadata: {{name: {}, labels: {{topology.kubernetes.io/zone: zone-{k}}}}}\n  status: {{addresses: [{{type: InternalIP, address: {}}}{v6}]}}\n",
                node_name(k),
                node_ip(k)
            ));
        }
        for item in items {
            out.push_str(item.trim_start_matches('\n'));
            if !item.ends_with('\n') {
                out.push('\n');
            }
        }
        out
    }

    /// Replaces the manifest whole (written aside, then renamed into
    /// place, as the file source expects); the time just before.
    pub fn write_manifest(&self, yaml: &str) -> SystemTime {
        let at = SystemTime::now();
        let aside = self.dir.join("cluster.yaml.new");
        std::fs::write(&aside, yaml).expect("write the manifest");
        std::fs::rename(&aside, self.manifest_path()).expect("rename the manifest");
        if let Ok(mut times) = self.file_times.lock()
            && let Some((written, _)) = times.as_mut()
        {
            *written = SystemTime::now();
        }
        at
    }

    /// Starts the server: `kpng file --input M --watch to-api --listen
    /// unix://S`, in the test's own namespace (it programs no kernel).
    ///
    /// # Panics
    /// When one runs already.
    pub fn start_server(&mut self) {
        assert!(self.server.is_none(), "the server runs already");
        if let Ok(mut times) = self.file_times.lock() {
            let written = std::fs::metadata(self.manifest_path())
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            *times = Some((written, SystemTime::now()));
        }
        let mut command = self.in_server_ns(&self.binary);
        command
            .args(["file", "--input"])
            .arg(self.manifest_path())
            .args(["--watch", "to-api"])
            .args(self.listen_args());
        self.server = Some(Process::spawn(command));
    }

    /// Starts the server from the API instead of a file: `kpng kube
    /// --kubeconfig K to-api --listen unix://S`, against `source`, in the
    /// test's own namespace.
    ///
    /// # Panics
    /// When one runs already.
    pub fn start_kube_server(&mut self, source: &ApiSource) {
        assert!(self.server.is_none(), "the server runs already");
        assert!(
            self.fabric_api.is_none(),
            "a server from the API is not served over the fabric"
        );
        if let Ok(mut times) = self.file_times.lock() {
            *times = None;
        }
        let mut command = Command::new(&self.binary);
        command
            .args(["kube", "--kubeconfig"])
            .arg(&source.kubeconfig)
            .args(["to-api", "--listen"])
            .arg(format!("unix://{}", self.socket_path().display()));
        self.server = Some(Process::spawn(command));
    }

    /// The highest revision every running agent has synced.
    pub fn synced_revision(&self) -> u64 {
        self.agents
            .iter()
            .flatten()
            .map(|a| a.synced().iter().map(|(_, r)| *r).max().unwrap_or(0))
            .min()
            .unwrap_or(0)
    }

    /// Kills the server (SIGKILL: no goodbye to its agents).
    pub fn kill_server(&mut self) {
        self.server = None;
    }

    /// The server, while it runs.
    pub fn server(&self) -> Option<&Process> {
        self.server.as_ref()
    }

    /// Starts a second server replica on the same manifest, `kpng file
    /// --input M --watch to-api --listen unix://S2` ([`Self::replica_socket_path`]):
    /// agents started from now on are given both addresses, the server's
    /// first (`--api unix://S,unix://S2`).
    ///
    /// # Panics
    /// When one runs already.
    pub fn start_replica(&mut self) {
        assert!(self.replica.is_none(), "the replica runs already");
        let mut command = Command::new(&self.binary);
        command
            .args(["file", "--input"])
            .arg(self.manifest_path())
            .args(["--watch", "to-api", "--listen"])
            .arg(format!("unix://{}", self.replica_socket_path().display()));
        self.replica = Some(Process::spawn(command));
        self.replicated = true;
    }

    /// The second replica's unix socket.
    pub fn replica_socket_path(&self) -> PathBuf {
        self.dir.join("api-2.sock")
    }

    /// Kills the server (SIGKILL) and makes the replica the server: what
    /// reads the server's log ([`Self::wait_reload`]) reads the
    /// replica's from now on.
    pub fn kill_server_for_replica(&mut self) {
        self.server = self.replica.take();
    }

    /// The `--api` of an agent: the server's address, and the replica's
    /// after [`Self::start_replica`].
    pub(super) fn api_addresses(&self) -> String {
        let server = format!("unix://{}", self.socket_path().display());
        if self.replicated {
            format!("{server},unix://{}", self.replica_socket_path().display())
        } else {
            server
        }
    }

    /// Starts `count` connections (or datagrams) from namespace `ns` in
    /// the background, as [`Self::connect`] makes them (one line each on
    /// its stdout, piped); nothing is checked against `kpng explain`.
    pub fn spawn_connect(
        &self,
        ns: &str,
        proto: &str,
        host: &str,
        port: u16,
        count: usize,
    ) -> Child {
        Command::new("ip")
            .args(["netns", "exec", ns, "python3", "-c", CLIENT, proto, host])
            .args([port.to_string(), count.to_string()])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("client")
    }

    /// Starts node `k`'s agent inside its namespace: `kpng api --api
    /// unix://S --node node-K` and the backend's sink, with the cluster's
    /// CIDRs, `/healthz` and the health-check node ports on their usual
    /// addresses, no metrics.
    ///
    /// # Panics
    /// When it runs already.
    pub fn start_agent(&mut self, k: usize) {
        assert!(self.agents[k - 1].is_none(), "agent {k} runs already");
        let mut command = if self.backend == AgentBackend::Ebpf {
            // `ip netns exec` mounts a /sys of its own, which hides the
            // cgroup tree; nsenter enters the network namespace alone.
            let mut command = Command::new("nsenter");
            command.arg(format!("--net=/run/netns/{}", self.node_ns(k)));
            command
        } else {
            let mut command = Command::new("ip");
            command.args(["netns", "exec", &self.node_ns(k)]);
            command
        };
        command
            .arg(&self.binary)
            .arg("api")
            .args(self.api_args(true))
            .args(["--node", &node_name(k)])
            .args(self.backend.sink());
        if self.backend == AgentBackend::Ebpf {
            let (fs, cgroup) = &self.bpf[k - 1];
            command
                .arg("--cgroup-path")
                .arg(&cgroup.path)
                .arg("--bpf-pin-path")
                .arg(fs.path.join("kpng"));
        }
        let (clusters, services) = if self.ipv6 {
            (
                format!("{CLUSTER_CIDR},{CLUSTER_CIDR6}"),
                format!("{SERVICE_CIDR},{SERVICE_CIDR6}"),
            )
        } else {
            (CLUSTER_CIDR.to_owned(), SERVICE_CIDR.to_owned())
        };
        command
            .args(["--cluster-cidr", &clusters, "--service-cidr", &services])
            .args(["--metrics-bind-address", ""]);
        command.args(&self.agent_flags);
        self.agents[k - 1] = Some(Process::spawn(command));
    }

    /// Node `k`'s cgroup, with [`AgentBackend::Ebpf`].
    pub fn cgroup(&self, k: usize) -> Option<&Path> {
        self.bpf.get(k - 1).map(|(_, cgroup)| cgroup.path.as_path())
    }

    /// Starts every node's agent.
    pub fn start_agents(&mut self) {
        for k in 1..=self.nodes {
            self.start_agent(k);
        }
    }

    /// Kills node `k`'s agent (SIGKILL: its rules stay in the kernel).
    pub fn kill_agent(&mut self, k: usize) {
        self.agents[k - 1] = None;
    }

    /// Stops node `k`'s agent (SIGSTOP): it reads, applies and reports
    /// nothing until [`Cluster::continue_agent`]; its stream stays open.
    ///
    /// # Panics
    /// When it does not run.
    pub fn stop_agent(&self, k: usize) {
        self.signal_agent(k, "-STOP");
    }

    /// Lets node `k`'s stopped agent go on (SIGCONT).
    ///
    /// # Panics
    /// When it does not run.
    pub fn continue_agent(&self, k: usize) {
        self.signal_agent(k, "-CONT");
    }

    fn signal_agent(&self, k: usize, signal: &str) {
        let pid = self.agent(k).expect("the agent runs").pid();
        let status = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} {pid}: {status}");
    }

    /// The server's fleet view, as `kpng api --api unix://S fleet --all
    /// --output json` prints it (over the fabric: `--api
    /// tcp://192.168.0.2:7443`, from the server's namespace).
    ///
    /// # Panics
    /// When the command fails or prints something else.
    pub fn fleet(&self) -> kpng_model::v1::FleetReply {
        let json = self.fleet_command(&["--all", "--output", "json"]);
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("fleet JSON: {e}:\n{json}"))
    }

    /// What `kpng api --api unix://S fleet ARGS` prints.
    ///
    /// # Panics
    /// When the command fails.
    pub fn fleet_command(&self, args: &[&str]) -> String {
        let (ok, stdout, stderr) = self.fleet_status(args);
        assert!(ok, "kpng api fleet {args:?}: {stderr}");
        stdout
    }

    /// Whether `kpng api --api unix://S fleet ARGS` succeeded, and what it
    /// printed (stdout, stderr).
    ///
    /// # Panics
    /// When the command cannot be run.
    pub fn fleet_status(&self, args: &[&str]) -> (bool, String, String) {
        let out = self
            .in_server_ns(&self.binary)
            .arg("api")
            .args(self.api_args(false))
            .arg("fleet")
            .args(args)
            .output()
            .expect("run kpng api fleet");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Node `k`'s agent, while it runs.
    pub fn agent(&self, k: usize) -> Option<&Process> {
        self.agents[k - 1].as_ref()
    }

    /// The running processes (server and agents).
    pub fn processes(&self) -> impl Iterator<Item = &Process> {
        self.server.iter().chain(self.agents.iter().flatten())
    }

    /// Waits until every running agent has synced at least once; the
    /// time each did (its first `synced`), by node.
    ///
    /// # Panics
    /// After `timeout`, naming the nodes that did not, with their logs;
    /// or when a process exited.
    pub fn wait_all_synced(&mut self, timeout: Duration) -> Vec<SystemTime> {
        self.wait_revision(0, timeout)
    }

    /// Waits until every running agent has synced revision `revision` or
    /// a later one; the time of the first such sync, by node (running
    /// agents only).
    ///
    /// # Panics
    /// As [`Cluster::wait_all_synced`].
    pub fn wait_revision(&mut self, revision: u64, timeout: Duration) -> Vec<SystemTime> {
        let deadline = Instant::now() + timeout;
        loop {
            self.check_alive();
            let times: Vec<Option<SystemTime>> = self
                .agents
                .iter()
                .flatten()
                .map(|a| {
                    a.synced()
                        .into_iter()
                        .find(|(_, r)| *r >= revision)
                        .map(|(at, _)| at)
                })
                .collect();
            if times.iter().all(Option::is_some) {
                return times.into_iter().flatten().collect();
            }
            if Instant::now() > deadline {
                let missing: Vec<String> = self
                    .agents
                    .iter()
                    .enumerate()
                    .filter_map(|(i, a)| a.as_ref().map(|a| (i + 1, a)))
                    .filter(|(_, a)| !a.synced().iter().any(|(_, r)| *r >= revision))
                    .take(3)
                    .map(|(k, a)| format!("node-{k}:\n{}", a.log_text()))
                    .collect();
                panic!(
                    "agents did not sync revision {revision} within {timeout:?}; first ones:\n{}",
                    missing.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits for the server's next reload after `after` (its `manifest
    /// reloaded` line): its time and revision.
    ///
    /// # Panics
    /// After `timeout`, or without a server.
    pub fn wait_reload(&mut self, after: SystemTime, timeout: Duration) -> (SystemTime, u64) {
        let deadline = Instant::now() + timeout;
        loop {
            self.check_alive();
            let server = self.server.as_ref().expect("a server");
            if let Some(found) = server.reloads().into_iter().find(|(at, _)| *at >= after) {
                return found;
            }
            assert!(
                Instant::now() < deadline,
                "the server did not reload the manifest within {timeout:?}:\n{}",
                server.log_text()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn check_alive(&mut self) {
        if let Some(server) = self.server.as_mut()
            && let Some(status) = server.exited()
        {
            panic!("the server exited ({status}):\n{}", server.log_text());
        }
        for (i, agent) in self.agents.iter_mut().enumerate() {
            if let Some(agent) = agent
                && let Some(status) = agent.exited()
            {
                panic!("agent {} exited ({status}):\n{}", i + 1, agent.log_text());
            }
        }
    }

    /// `count` connections (or datagrams) from namespace `ns`; one line
    /// each: `<endpoint> <peer seen>`, `REFUSED <seconds>`, `TIMEOUT` or
    /// `ERROR …` (as [`Lab::connect`](crate::Lab::connect)). With
    /// [`AgentBackend::Ebpf`], a client in a pod of node K runs in node
    /// K's cgroup.
    pub fn connect(
        &self,
        ns: &str,
        proto: &str,
        host: &str,
        port: u16,
        count: usize,
    ) -> Vec<String> {
        let (port_text, count) = (port.to_string(), count.to_string());
        let args = ["python3", "-c", CLIENT, proto, host, &port_text, &count];
        let node = (1..=self.nodes).find(|&k| ns.starts_with(&format!("{}p", self.node_ns(k))));
        // What the handling node held as the probe began: a probe that
        // spans one of its syncs saw two states, and is not checked.
        let held = self.held(ns, host);
        let mut command = match node.and_then(|k| self.cgroup(k)) {
            Some(cgroup) => in_cgroup_and_netns(cgroup, ns, &args),
            None => {
                let mut command = Command::new("ip");
                command.args(["netns", "exec", ns]).args(args);
                command
            }
        };
        let out = command.output().expect("client");
        let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect();
        if let Some(held) = held.filter(|h| Some(h) == self.held(ns, host).as_ref()) {
            self.witness(held, ns, proto, host, port, &lines);
        }
        lines
    }

    /// The node that handles a probe from `ns` to `host` (see
    /// `handler`), when its agent holds the manifest's state (see
    /// `holds_the_manifest`), with the syncs its agent has logged.
    fn held(&self, ns: &str, host: &str) -> Option<Held> {
        let (node, origin, source) = self.handler(ns, host)?;
        let syncs = self.agent(node)?.synced().len();
        self.holds_the_manifest(node).then_some(Held {
            node,
            origin,
            source,
            syncs,
        })
    }

    /// The node that handles a probe from `ns` to `host` (a pod's or the
    /// node's own; the NodePort's node for the client), how the packet
    /// comes to it, and its source address.
    fn handler(&self, ns: &str, host: &str) -> Option<(usize, kpng_explain::Origin, String)> {
        use kpng_explain::Origin;
        // The source of the destination's family.
        let v6 = host.contains(':');
        let pod = (1..=self.nodes).find_map(|k| {
            (0..self.pods_per_node)
                .find(|&j| self.pod_ns(k, j) == ns)
                .map(|j| {
                    (
                        k,
                        Origin::Pod,
                        if v6 { pod_ip6(k, j) } else { pod_ip(k, j) },
                    )
                })
        });
        pod.or_else(|| {
            (1..=self.nodes)
                .find(|&k| self.node_ns(k) == ns)
                .map(|k| (k, Origin::Host, if v6 { node_ip6(k) } else { node_ip(k) }))
        })
        .or_else(|| {
            let client = if v6 { CLIENT_IP6 } else { CLIENT_IP };
            (ns == self.client_ns())
                .then(|| (1..=self.nodes).find(|&k| node_ip(k) == host || node_ip6(k) == host))
                .flatten()
                .map(|k| (k, Origin::Outside, client.to_owned()))
        })
    }

    /// Checks a probe against `kpng explain` of the node that handled
    /// it, which held the manifest's state throughout (`held`).
    fn witness(&self, held: Held, ns: &str, proto: &str, host: &str, port: u16, lines: &[String]) {
        use kpng_explain::Packet;
        let Some(destination) = host.parse::<std::net::IpAddr>().ok() else {
            return;
        };
        let Some(protocol) = crate::witness::protocol(proto) else {
            return;
        };
        let Held {
            node: k,
            origin,
            source,
            ..
        } = held;
        let Ok(source) = source.parse() else {
            return;
        };
        let Ok(text) = std::fs::read_to_string(self.manifest_path()) else {
            return;
        };
        let Ok(objects) = kpng_kube::file::parse_str("cluster.yaml", &text) else {
            return;
        };
        let mut ingest =
            kpng_kube::Ingest::new(kpng_store::Store::new(), kpng_kube::IngestConfig::default());
        ingest.load(&objects);
        let snapshot = ingest.reader().snapshot();
        let mode = self
            .agent_flags
            .iter()
            .position(|f| f == "--load-balancer-mode")
            .and_then(|i| self.agent_flags.get(i + 1));
        let settings = crate::Settings {
            cluster_cidr: format!("{CLUSTER_CIDR},{CLUSTER_CIDR6}"),
            service_cidr: format!("{SERVICE_CIDR},{SERVICE_CIDR6}"),
            load_balancer_mode: match mode.map(String::as_str) {
                Some("dsr") => kpng_sink::LoadBalancerMode::Dsr,
                Some("hybrid") => kpng_sink::LoadBalancerMode::Hybrid,
                _ => kpng_sink::LoadBalancerMode::Snat,
            },
            ..crate::Settings::default()
        };
        let data_path = match self.backend {
            AgentBackend::Nft => kpng_explain::DataPath::Nftables,
            AgentBackend::Iptables => kpng_explain::DataPath::Iptables,
            AgentBackend::Ebpf => kpng_explain::DataPath::Ebpf {
                tc: true,
                netfilter: true,
            },
        };
        let setup = kpng_explain::Setup::new(settings.proxy(), data_path);
        let packet = Packet::new(origin, protocol, source, destination, port);
        if let Ok(mut witness) = self.witness.lock() {
            witness.check(
                &snapshot,
                &setup,
                &node_name(k),
                ns,
                &packet,
                lines,
                &|_| None,
            );
        }
    }

    /// Whether node `k`'s agent runs and has synced the state of the
    /// manifest as it is (loaded by the file server, not written since).
    fn holds_the_manifest(&self, k: usize) -> bool {
        let Some((written, started)) = self.file_times.lock().ok().and_then(|t| *t) else {
            return false;
        };
        let untaken = ["--masquerade-all", "--nodeport-addresses", "--balancing"];
        if self
            .agent_flags
            .iter()
            .any(|f| untaken.iter().any(|u| f.starts_with(u)))
        {
            // Flags the explanation here does not take.
            return false;
        }
        let (Some(server), Some(agent)) = (&self.server, self.agent(k)) else {
            return false;
        };
        let loaded = match server.reloads().last() {
            Some((at, revision)) => (*at, Some(*revision)),
            None => (started, None),
        };
        if written > loaded.0 {
            return false;
        }
        // A sync since: from this server (a restarted one numbers its
        // revisions anew), of the revision it loaded or a later one.
        agent
            .synced()
            .iter()
            .any(|(at, r)| *at >= loaded.0 && loaded.1.is_none_or(|revision| *r >= revision))
    }

    /// An HTTP GET of `url` from namespace `ns`: the status code (0 when
    /// there was no answer) and the body.
    pub fn http_get(&self, ns: &str, url: &str) -> (u16, String) {
        let out = Command::new("ip")
            .args(["netns", "exec", ns, "python3", "-c", HTTP_GET, url])
            .output()
            .expect("http client");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (status, body) = text.split_once('\n').unwrap_or((&text, ""));
        (status.trim().parse().unwrap_or(0), body.trim().to_owned())
    }

    /// The rules node `k`'s kernel holds, as the backend's tool lists
    /// them (`nft list ruleset`, `iptables-nft-save`).
    pub fn rules(&self, k: usize) -> String {
        let tool: &[&str] = match self.backend {
            AgentBackend::Nft => &["nft", "list", "ruleset"],
            AgentBackend::Iptables => &["iptables-nft-save"],
            // The socket programs' maps are not listed: the north-south
            // nftables backend's rules are.
            AgentBackend::Ebpf => &["nft", "list", "ruleset"],
        };
        let out = Command::new("ip")
            .args(["netns", "exec", &self.node_ns(k)])
            .args(tool)
            .output()
            .expect("list the rules");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The CPU time (user and system) the server and the agents have
    /// used so far, in ms: `(server, every agent summed)`. The kernel
    /// counts it in ticks (10 ms at 100 Hz); summed over many agents it
    /// says what a change costs them all.
    pub fn cpu_ms(&self) -> (f64, f64) {
        let ticks = |pid: u32| -> f64 {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // `pid (comm) state …`: utime and stime are the 12th and 13th
            // fields after the command.
            let fields: Vec<&str> = stat
                .rsplit_once(')')
                .map(|(_, rest)| rest.split_whitespace().collect())
                .unwrap_or_default();
            let field = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok());
            field(11).unwrap_or(0.0) + field(12).unwrap_or(0.0)
        };
        // USER_HZ, what /proc counts in, is 100 on Linux.
        let ms = |t: f64| t * 10.0;
        let server = self.server.as_ref().map_or(0.0, |s| ms(ticks(s.pid())));
        let agents = self
            .agents
            .iter()
            .flatten()
            .map(|a| ms(ticks(a.pid())))
            .sum();
        (server, agents)
    }

    /// The resident memory of the whole process tree (the server, every
    /// agent and anything they started), summed: RSS (each process's
    /// pages, shared ones counted in each) and PSS (shared pages divided
    /// among their sharers), both in KiB; and how many processes were
    /// counted.
    pub fn memory(&self) -> (u64, u64, usize) {
        let roots: Vec<u32> = self.processes().map(Process::pid).collect();
        let (mut rss, mut pss, mut count) = (0, 0, 0);
        for pid in crate::bench::descendants(&roots) {
            let field = |file: &str, name: &str| -> u64 {
                std::fs::read_to_string(format!("/proc/{pid}/{file}"))
                    .unwrap_or_default()
                    .lines()
                    .find(|l| l.starts_with(name))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0)
            };
            rss += field("status", "VmRSS:");
            pss += field("smaps_rollup", "Pss:");
            count += 1;
        }
        (rss, pss, count)
    }
}

/// The endpoint part of each reply line (as [`crate::endpoints`]).
pub use crate::lab::endpoints;
