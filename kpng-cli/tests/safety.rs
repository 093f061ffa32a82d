//! Safe in an operator's hands (issue #25): a dry run writes nothing,
//! whatever its flags; a node name that names no Node is loud.

mod support;

use std::io::BufRead as _;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::Namespace;

const KPNG: &str = env!("CARGO_BIN_EXE_kpng");

impl Namespace {
    /// kpng run in the namespace until it exits: code, stdout, stderr.
    fn kpng(&self, args: &[&str]) -> (i32, String, String) {
        let out = self
            .command(&[KPNG])
            .args(args)
            .env("RUST_LOG", "info")
            .output()
            .expect("kpng");
        support::text(&out)
    }
}

/// A child process killed on drop (also when the test fails), with what
/// it wrote so far.
struct Running {
    child: std::process::Child,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
}

impl Running {
    fn spawn(mut command: Command) -> Self {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let collect = |pipe: Box<dyn std::io::Read + Send>| {
            let text = Arc::new(Mutex::new(String::new()));
            let shared = text.clone();
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    if let Ok(mut t) = shared.lock() {
                        t.push_str(&line);
                        t.push('\n');
                    }
                }
            });
            text
        };
        let stdout = collect(Box::new(child.stdout.take().expect("stdout")));
        let stderr = collect(Box::new(child.stderr.take().expect("stderr")));
        Self {
            child,
            stdout,
            stderr,
        }
    }

    fn stdout(&self) -> String {
        self.stdout.lock().map(|t| t.clone()).unwrap_or_default()
    }

    fn stderr(&self) -> String {
        self.stderr.lock().map(|t| t.clone()).unwrap_or_default()
    }

    /// Waits (10 s at most) until `ready` holds for (stdout, stderr).
    fn wait_for(&self, ready: impl Fn(&str, &str) -> bool) -> bool {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if ready(&self.stdout(), &self.stderr()) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const MANIFEST: &str = r#"apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: node-a}
  status: {addresses: [{type: InternalIP, address: 10.0.0.1}]}
- apiVersion: v1
  kind: Service
  metadata: {namespace: t, name: web}
  spec: {type: NodePort, clusterIP: 10.96.0.10, ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30080}]}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {namespace: t, name: web-1, labels: {kubernetes.io/service-name: web}}
  addressType: IPv4
  endpoints: [{addresses: [10.244.1.20], nodeName: node-a}]
  ports: [{name: http, port: 8080, protocol: TCP}]
"#;

/// The conntrack sysctls kpng's flags set, with values no flag below asks
/// for.
const SYSCTLS: [(&str, &str); 5] = [
    ("nf_conntrack_tcp_timeout_established", "4321"),
    ("nf_conntrack_tcp_timeout_close_wait", "1234"),
    ("nf_conntrack_tcp_be_liberal", "0"),
    ("nf_conntrack_udp_timeout", "31"),
    ("nf_conntrack_udp_timeout_stream", "121"),
];

fn sysctls(ns: &Namespace) -> String {
    let paths: Vec<String> = SYSCTLS
        .iter()
        .map(|(name, _)| format!("/proc/sys/net/netfilter/{name}"))
        .collect();
    ns.sh(&format!("cat {}", paths.join(" ")))
}

/// A namespace with kpng's state in place: its tables, programmed by
/// kpng for real from [`MANIFEST`] (in a directory of the test's own),
/// and distinctive conntrack sysctls.
struct Programmed {
    ns: Namespace,
    dir: std::path::PathBuf,
    manifest: String,
    ruleset: String,
}

impl Programmed {
    fn new(tag: &str) -> Option<Self> {
        let ns = Namespace::new(tag)?;
        let dir = std::env::temp_dir().join(format!("kpng-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let manifest = dir.join("cluster.yaml");
        std::fs::write(&manifest, MANIFEST).expect("manifest");
        let manifest = manifest.to_string_lossy().into_owned();
        let (code, _, stderr) = ns.kpng(&[
            "file",
            "--input",
            &manifest,
            "--node",
            "node-a",
            "to-nft",
            "--once",
            "--healthz-bind-address",
            "",
            "--metrics-bind-address",
            "",
            "--conntrack-max-per-core",
            "0",
        ]);
        assert_eq!(code, 0, "{stderr}");
        // `-s`: without what runs down between two listings (the time an
        // element with a timeout has left).
        let ruleset = ns.sh("nft -s list ruleset");
        assert!(ruleset.contains("table ip kpng"), "{ruleset}");
        assert!(ruleset.contains("table ip6 kpng"), "{ruleset}");
        for (name, value) in SYSCTLS {
            ns.sh(&format!("echo {value} > /proc/sys/net/netfilter/{name}"));
        }
        Some(Self {
            ns,
            dir,
            manifest,
            ruleset,
        })
    }

    /// `to-ebpf --cleanup` on this state, with `extra` flags.
    fn cleanup(&self, extra: &[&str]) -> (i32, String, String) {
        let pins = self.dir.join("pins").to_string_lossy().into_owned();
        let args = [
            "file",
            "--input",
            &self.manifest,
            "--node",
            "node-a",
            "to-ebpf",
            "--cleanup",
            "--bpf-pin-path",
            &pins,
        ];
        self.ns.kpng(&[&args[..], extra].concat())
    }
}

impl Drop for Programmed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// With kpng's tables programmed in a namespace, `to-ebpf --cleanup
/// --dry-run` prints the tables it would delete and deletes nothing; the
/// same `--cleanup` without `--dry-run` does delete them (the test sees
/// real state).
#[test]
fn cleanup_in_a_dry_run_says_what_it_would_remove_and_removes_nothing() {
    let Some(state) = Programmed::new("kpdryc") else {
        return;
    };
    let (code, stdout, stderr) = state.cleanup(&["--dry-run"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        state.ns.sh("nft -s list ruleset"),
        state.ruleset,
        "--cleanup --dry-run"
    );
    assert!(stdout.contains("would delete table ip kpng"), "{stdout}");
    assert!(stdout.contains("would delete table ip6 kpng"), "{stdout}");

    let (code, _, stderr) = state.cleanup(&[]);
    assert_eq!(code, 0, "{stderr}");
    let after = state.ns.sh("nft list ruleset");
    assert!(!after.contains("table ip kpng"), "{after}");
    let (code, stdout, stderr) = state.cleanup(&["--dry-run"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("nothing to remove"), "{stdout}");
}

/// With kpng's tables programmed in a namespace, distinctive conntrack
/// sysctls there, and free loopback ports: each backend's dry run —
/// `to-nft`, `to-iptables` (both with an aggregator socket), `to-ebpf` —
/// with the metrics and healthz addresses and the conntrack flags, left
/// running on a watched file, binds no port, creates no socket file, and
/// leaves the tables, the iptables rules and the sysctls as they were.
#[test]
fn a_dry_run_binds_no_port_and_sets_nothing_whatever_its_flags() {
    let Some(state) = Programmed::new("kpdryb") else {
        return;
    };
    let ns = &state.ns;
    let sysctls_before = sysctls(ns);
    let iptables_before = ns.sh("iptables-save 2>/dev/null | grep -v '^#' || true");
    let pins = state.dir.join("pins").to_string_lossy().into_owned();
    let metrics = "127.0.0.1:18249";
    let healthz = "127.0.0.1:18256";
    let socket = state
        .dir
        .join("aggregator.sock")
        .to_string_lossy()
        .into_owned();
    let flags = [
        "--dry-run",
        "--metrics-bind-address",
        metrics,
        "--healthz-bind-address",
        healthz,
        "--conntrack-tcp-timeout-established",
        "2h",
        "--conntrack-tcp-timeout-close-wait",
        "30m",
        "--conntrack-tcp-be-liberal",
        "--conntrack-udp-timeout",
        "10s",
        "--conntrack-udp-timeout-stream",
        "60s",
    ];
    let runs: [&[&str]; 4] = [
        &["to-nft", "--aggregator-socket", &socket],
        &["to-iptables", "--aggregator-socket", &socket],
        &["to-ebpf", "--bpf-pin-path", &pins],
        &["to-nft"],
    ];
    for sink in runs {
        let mut command = ns.command(&[KPNG]);
        command
            .args(["file", "--input", &state.manifest])
            .args(["--node", "node-a", "--watch"])
            .args(sink)
            .args(flags)
            .env("RUST_LOG", "info");
        let run = Running::spawn(command);
        // The first sync printed: what a real run binds is bound by then.
        assert!(
            run.wait_for(|out, _| !out.is_empty()),
            "{sink:?}: no dry run printed: {}",
            run.stderr()
        );
        std::thread::sleep(Duration::from_millis(300));
        let listening = ns.sh("ss -Htln");
        assert_eq!(listening.trim(), "", "{sink:?} listens");
        assert!(
            !std::path::Path::new(&socket).exists(),
            "{sink:?} made {socket}"
        );
        assert!(
            run.stderr().contains("dry run: /metrics not served"),
            "{sink:?} says so: {}",
            run.stderr()
        );
        drop(run);
        assert_eq!(ns.sh("nft -s list ruleset"), state.ruleset, "{sink:?}");
        assert_eq!(sysctls(ns), sysctls_before, "{sink:?}");
        assert_eq!(
            ns.sh("iptables-save 2>/dev/null | grep -v '^#' || true"),
            iptables_before,
            "{sink:?}"
        );
    }
}

/// Nodes `a` and `b` in the file, `--node c` (a typo, a short name for an
/// FQDN): a warning naming `c`, `a` and `b`, at start and again when the
/// watched file is rewritten and still names no `c`; `--node a`: none.
#[test]
fn a_node_name_matching_no_node_is_a_warning_naming_the_known_ones() {
    let dir = std::env::temp_dir().join(format!("kpng-node-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("cluster.yaml");
    let nodes = |names: &[&str]| -> String {
        let mut text = String::from("apiVersion: v1\nkind: List\nitems:\n");
        for name in names {
            text.push_str(&format!(
                "- apiVersion: v1\n  kind: Node\n  metadata: {{name: {name}}}\n"
            ));
        }
        text.push_str("- apiVersion: v1\n  kind: Service\n  metadata: {namespace: t, name: web}\n  spec: {type: NodePort, clusterIP: 10.96.0.10, ports: [{port: 80, nodePort: 30080}]}\n");
        text
    };
    std::fs::write(&path, nodes(&["a", "b"])).expect("file");
    let input = path.to_string_lossy().into_owned();
    let run = |node: &str| {
        let out = Command::new(KPNG)
            .args(["file", "--input", &input, "--node", node, "to-nft"])
            .args(["--dry-run", "--once"])
            .env("RUST_LOG", "warn")
            .output()
            .expect("kpng");
        (
            out.status,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (status, stderr) = run("c");
    assert!(status.success(), "{stderr}");
    let warning = stderr
        .lines()
        .find(|l| l.contains("WARN") && l.contains("no Node named \"c\""))
        .unwrap_or_else(|| panic!("no warning: {stderr}"));
    assert!(warning.contains("known nodes: a, b"), "{warning}");
    let (status, stderr) = run("a");
    assert!(status.success(), "{stderr}");
    assert!(!stderr.contains("no Node named"), "{stderr}");

    // Many nodes: the first few, and the count.
    let many: Vec<String> = (0..12).map(|i| format!("n{i:02}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    std::fs::write(&path, nodes(&many)).expect("file");
    let (_, stderr) = run("c");
    assert!(
        stderr.contains("known nodes: n00, n01, n02, n03, n04, … (12 in all)"),
        "{stderr}"
    );

    // Watched: warned at start, and again after a rewrite that still has
    // no `c`.
    std::fs::write(&path, nodes(&["a", "b"])).expect("file");
    let mut command = Command::new(KPNG);
    command
        .args(["file", "--input", &input, "--node", "c", "--watch"])
        .args(["to-nft", "--dry-run", "--metrics-bind-address", ""])
        .env("RUST_LOG", "warn");
    let watched = Running::spawn(command);
    assert!(
        watched.wait_for(|_, err| err.contains("known nodes: a, b)")),
        "{}",
        watched.stderr()
    );
    std::thread::sleep(Duration::from_millis(1100));
    std::fs::write(&path, nodes(&["a", "b", "d"])).expect("file");
    assert!(
        watched.wait_for(|_, err| err.contains("known nodes: a, b, d)")),
        "{}",
        watched.stderr()
    );
    drop(watched);
    let _ = std::fs::remove_dir_all(&dir);
}

/// How long after the Nodes' watch starts the test apiserver adds node-a.
const NODE_LATE: u64 = 5;

/// A test apiserver with no Node at first; node-a is added [`NODE_LATE`]
/// seconds after the Nodes' watch starts. Serves until stdin closes; its kubeconfig is
/// written to `kubeconfig`.
fn serve_late_node(kubeconfig: &std::path::Path) {
    use kpng_testkit::apiserver::{ApiServer, Reply, Resource, Script};
    use serde_json::json;
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let mut script = Script::default();
    script.push(Resource::Nodes, false, Reply::List("1".into(), vec![]));
    script.push(
        Resource::Nodes,
        true,
        Reply::Slow(
            Duration::from_secs(NODE_LATE),
            Box::new(Reply::Watch(vec![json!({"type": "ADDED", "object":
                {"metadata": {"name": "node-a", "resourceVersion": "2"},
                 "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}}})])),
        ),
    );
    let server = runtime.block_on(ApiServer::start(script));
    std::fs::write(kubeconfig, server.kubeconfig()).expect("kubeconfig");
    println!("ready");
    let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
}

/// Serves [`serve_late_node`] when a test runs this binary for it.
#[test]
#[ignore = "a helper process of other tests"]
fn serve_late_node_helper() {
    if let Some(kubeconfig) = std::env::var_os("KPNG_TEST_SERVE_LATE_NODE") {
        serve_late_node(std::path::Path::new(&kubeconfig));
    }
}

/// GET `url` in `ns`: `STATUS BODY`.
fn get_in(ns: &Namespace, url: &str) -> String {
    let out = ns
        .command(&["curl", "-s", "-m", "2", "-w", " %{http_code}", url])
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    match text.rsplit_once(' ') {
        Some((body, code)) => format!("{code} {body}"),
        None => text,
    }
}

/// `kpng kube --node node-a to-nft` in a namespace, against an apiserver
/// (in that namespace) that has no Node `node-a` yet: `/healthz` answers
/// 503 with a body naming the node and why, a warning says it; once the
/// Node is added, `/healthz` answers 200.
#[test]
fn healthz_is_503_until_the_node_appears_in_the_api() {
    let Some(ns) = Namespace::new("kpnode") else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("kpng-late-node-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let kubeconfig = dir.join("kubeconfig");
    let this = std::env::current_exe().expect("self");
    let mut server = ns.command(&[this.to_str().expect("path")]);
    server
        .args([
            "serve_late_node_helper",
            "--exact",
            "--nocapture",
            "--include-ignored",
        ])
        .env("KPNG_TEST_SERVE_LATE_NODE", &kubeconfig)
        .stdin(Stdio::piped());
    let server = Running::spawn(server);
    assert!(
        server.wait_for(|out, _| out.lines().any(|l| l.trim() == "ready")),
        "the apiserver did not start: {}",
        server.stderr()
    );
    let started = Instant::now();
    let mut command = ns.command(&[KPNG]);
    command
        .args(["kube", "--kubeconfig"])
        .arg(&kubeconfig)
        .args(["--node", "node-a", "to-nft"])
        .args(["--healthz-bind-address", "127.0.0.1:10256"])
        .args(["--metrics-bind-address", ""])
        .args(["--conntrack-max-per-core", "0"])
        .env("RUST_LOG", "info");
    let kpng = Running::spawn(command);
    assert!(
        kpng.wait_for(|_, err| err.contains("synced")),
        "{}",
        kpng.stderr()
    );
    let before = get_in(&ns, "http://127.0.0.1:10256/healthz");
    assert!(
        started.elapsed() < Duration::from_secs(NODE_LATE),
        "too slow to see the 503"
    );
    assert!(before.starts_with("503 "), "{before}");
    assert!(
        before.contains("no Node named \\\"node-a\\\""),
        "the body says why: {before}"
    );
    assert!(
        kpng.stderr().contains("WARN") && kpng.stderr().contains("no Node named \"node-a\""),
        "{}",
        kpng.stderr()
    );
    let mut after = String::new();
    for _ in 0..200 {
        after = get_in(&ns, "http://127.0.0.1:10256/healthz");
        if after.starts_with("200 ") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(after.starts_with("200 "), "{after}");
    assert!(
        started.elapsed() >= Duration::from_secs(NODE_LATE),
        "200 only once the Node is there"
    );
    drop(kpng);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// An agent (`kpng api --node c`) of a server whose input has nodes `a`
/// and `b`: the view has no Node, and the agent warns naming `c`; with
/// `--node a`, no warning.
#[test]
fn an_agent_whose_node_the_server_lacks_warns() {
    let dir = std::env::temp_dir().join(format!("kpng-agent-node-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let input = dir.join("cluster.yaml");
    std::fs::write(
        &input,
        "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Node, metadata: {name: a}}\n- {apiVersion: v1, kind: Node, metadata: {name: b}}\n",
    )
    .expect("file");
    let socket = format!("unix://{}", dir.join("kpng.sock").display());
    let mut command = Command::new(KPNG);
    command
        .arg("file")
        .arg("--input")
        .arg(&input)
        .args(["to-api", "--listen", &socket])
        .env("RUST_LOG", "kpng=info");
    let server = Running::spawn(command);
    assert!(
        server.wait_for(|_, err| err.contains("serving the ENLS")),
        "{}",
        server.stderr()
    );
    let agent = |node: &str| {
        let out = Command::new(KPNG)
            .args(["api", "--api", &socket, "--node", node])
            .args(["to-nft", "--dry-run", "--once"])
            .env("RUST_LOG", "warn")
            .output()
            .expect("kpng");
        (
            out.status,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (status, stderr) = agent("c");
    assert!(status.success(), "{stderr}");
    assert!(
        stderr.contains("WARN") && stderr.contains("the server has no Node named \"c\""),
        "{stderr}"
    );
    let (status, stderr) = agent("a");
    assert!(status.success(), "{stderr}");
    assert!(!stderr.contains("no Node named"), "{stderr}");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
