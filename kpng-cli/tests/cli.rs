//! The `kpng` command as a user runs it.

mod support;

use std::process::Command;
use support::Namespace;

fn kpng(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kpng"))
        .args(args)
        .env("RUST_LOG", "error")
        .output()
        .expect("run kpng");
    support::text(&out)
}

/// The bundled sample's dry run for node-a with the pod CIDR, from flags:
/// what the config-file tests must print too.
fn sample_dry_run() -> String {
    let (code, stdout, stderr) = kpng(&[
        "file",
        "--node",
        "node-a",
        "to-nft",
        "--dry-run",
        "--once",
        "--cluster-cidr",
        "10.244.0.0/16",
    ]);
    assert_eq!(code, 0, "{stderr}");
    stdout
}

#[test]
fn dry_run_on_the_bundled_sample_prints_the_ruleset_and_changes_nothing() {
    let (code, stdout, stderr) = kpng(&[
        "file",
        "to-nft",
        "--dry-run",
        "--cluster-cidr",
        "10.244.0.0/16",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.starts_with("add table ip kpng\ndelete table ip kpng\n"),
        "{stdout}"
    );
    // The sample's Services, as node-a sees them: kube-dns dispatched, the
    // endpoint-less checkout rejected, the Proxy-mode LB IP absent.
    assert!(
        stdout.contains(
            "add element ip kpng svc-c2 { 10.96.0.10 . tcp . 53 comment \"kube-system/kube-dns:dns-tcp/tcp\", 10.96.0.10 . tcp . 9153 comment \"kube-system/kube-dns:metrics/tcp\", 10.96.0.10 . udp . 53 comment \"kube-system/kube-dns:dns/udp\" }"
        ),
        "kube-dns UDP on node-a, named"
    );
    assert!(
        stdout.contains(
            "add element ip kpng no-endpoint-services { 10.96.20.20 . tcp . 443 comment \"shop/checkout:443/tcp\" }"
        )
    );
    assert!(
        !stdout.contains("198.51.100.11"),
        "ipMode Proxy is not programmed"
    );
    assert!(stdout.contains("add table ip6 kpng"));
}

#[test]
fn to_iptables_dry_run_prints_restore_batches_in_kube_proxy_layout() {
    let (code, stdout, stderr) = kpng(&[
        "file",
        "to-iptables",
        "--dry-run",
        "--cluster-cidr",
        "10.244.0.0/16",
        "--service-cidr",
        "10.96.0.0/16",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("*filter\n"), "{stdout}");
    // kube-dns is dispatched to a KUBE-SVC chain; the endpoint-less
    // checkout port is rejected in the filter table; the Proxy-mode LB IP
    // is absent; both families are written.
    assert!(
        stdout.lines().any(|l| l.starts_with(
            "-A KUBE-SERVICES -d 10.96.0.10/32 -p udp -m udp --dport 53 -j KUBE-SVC-"
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains("-A KUBE-SERVICES -d 10.96.20.20/32 -p tcp -m tcp --dport 443 -j REJECT")
    );
    assert!(stdout.contains("-m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-"));
    assert!(
        !stdout.contains("198.51.100.11"),
        "ipMode Proxy is not programmed"
    );
    assert_eq!(stdout.matches("*nat\n").count(), 2, "IPv4 and IPv6");

    let (code, _, stderr) = kpng(&["file", "to-iptables", "--iptables-mode", "nope"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("--iptables-mode"), "{stderr}");
}

/// `--iptables-layout compact`: the Service chains DNAT to endpoints of
/// other nodes themselves; `auto` on a small cluster is kube-proxy's.
#[test]
fn to_iptables_layout_is_a_flag() {
    let dry_run = |layout: &str| {
        let (code, stdout, stderr) = kpng(&[
            "file",
            "to-iptables",
            "--dry-run",
            "--cluster-cidr",
            "10.244.0.0/16",
            "--iptables-layout",
            layout,
        ]);
        assert_eq!(code, 0, "{stderr}");
        stdout
    };
    let direct = |text: &str| {
        text.lines()
            .filter(|l| l.starts_with("-A KUBE-SVC-") && l.contains(" -j DNAT --to-destination "))
            .count()
    };
    let (compact, kube_proxy) = (dry_run("compact"), dry_run("kube-proxy"));
    assert!(direct(&compact) > 0, "{compact}");
    assert!(
        compact.matches("\n:KUBE-SEP-").count() < kube_proxy.matches("\n:KUBE-SEP-").count(),
        "{compact}"
    );
    assert_eq!(direct(&kube_proxy), 0, "{kube_proxy}");
    assert_eq!(dry_run("auto"), kube_proxy);

    let (code, _, stderr) = kpng(&["file", "to-iptables", "--iptables-layout", "sparse"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("--iptables-layout"), "{stderr}");
}

#[test]
fn errors_are_one_clear_line() {
    let (code, stdout, stderr) = kpng(&[
        "file",
        "--input",
        "/nonexistent/cluster.yaml",
        "to-nft",
        "--dry-run",
    ]);
    assert_ne!(code, 0);
    assert!(stdout.is_empty());
    assert_eq!(
        stderr.trim(),
        "error: /nonexistent/cluster.yaml: No such file or directory (os error 2)"
    );

    let (code, _, stderr) = kpng(&[
        "file",
        "to-nft",
        "--dry-run",
        "--service-cidr",
        "10.96.0.0/99",
    ]);
    assert_ne!(code, 0);
    assert_eq!(
        stderr.trim(),
        "error: invalid --service-cidr: \"10.96.0.0/99\""
    );

    let dir = std::env::temp_dir().join(format!("kpng-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let bad = dir.join("bad.yaml");
    std::fs::write(&bad, "kind: Service\nmetadata: {namespace: a, name: b}\nspec: {clusterIP: 10.96.0.1, ports: [{port: 99999}]}\n").expect("write");
    let (code, _, stderr) = kpng(&[
        "file",
        "--input",
        bad.to_str().expect("utf-8"),
        "to-nft",
        "--dry-run",
    ]);
    assert_ne!(code, 0);
    assert!(
        stderr.trim().ends_with(
            "bad.yaml: nothing applied, every object is skipped (1 object skipped: Service a/b, \
             document 0 (line 1): spec.ports[0].port: Invalid value: 99999: must be between 1 and 65535, inclusive)"
        ),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// As root: `--aggregator-socket` runs each backend through an aggregator
/// served on a private socket, in a network namespace of the test's own.
#[test]
fn to_nft_and_to_iptables_run_through_an_aggregator_socket() {
    use std::os::unix::fs::PermissionsExt;
    let Some(namespace) = Namespace::new("kpcli") else {
        return;
    };
    let ns = namespace.name.clone();
    let dir = std::env::temp_dir();
    for (sink, listing) in [
        ("to-nft", ["nft", "list", "tables"]),
        ("to-iptables", ["iptables-save", "-t", "nat"]),
    ] {
        let socket = dir.join(format!("{ns}-{sink}.sock"));
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns,
                env!("CARGO_BIN_EXE_kpng"),
                "file",
                sink,
                "--once",
                "--aggregator-socket",
            ])
            .arg(&socket)
            .env("RUST_LOG", "error")
            .output()
            .expect("kpng");
        assert!(
            out.status.success(),
            "{sink}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mode = std::fs::metadata(&socket)
            .expect("socket")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{sink}");
        let _ = std::fs::remove_file(&socket);
        let shown = Command::new("ip")
            .args(["netns", "exec", &ns])
            .args(listing)
            .output()
            .expect("listing");
        let shown = String::from_utf8_lossy(&shown.stdout);
        let want = if sink == "to-nft" {
            "table ip kpng"
        } else {
            ":KUBE-SERVICES"
        };
        assert!(shown.contains(want), "{sink}: {shown}");
    }
}

/// `kpng file to-api` serving the bundled sample on a unix socket named
/// after `name`, once it serves: the process and the socket's path.
fn sample_server(name: &str) -> (std::process::Child, std::path::PathBuf) {
    use std::io::BufRead;
    let socket = std::env::temp_dir().join(format!("{name}-{}.sock", std::process::id()));
    let mut server = Command::new(env!("CARGO_BIN_EXE_kpng"))
        .args(["file", "to-api", "--listen"])
        .arg(format!("unix://{}", socket.display()))
        .env("RUST_LOG", "kpng=info")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("server");
    // It logs once it serves.
    let stderr = server.stderr.take().expect("stderr");
    let mut lines = std::io::BufReader::new(stderr).lines();
    assert!(
        lines.any(|l| l.is_ok_and(|l| l.contains("serving the ENLS"))),
        "the server started"
    );
    (server, socket)
}

/// The server/agent split from the command line: `kpng file to-api`
/// serves the bundled sample; `kpng api ... to-file --output - --format
/// json --once` answers "what does node-a think" in one command.
#[test]
fn what_a_node_thinks_in_one_command() {
    let (mut server, socket) = sample_server("kpng-cli");
    let (code, stdout, stderr) = kpng(&[
        "api",
        "--api",
        &format!("unix://{}", socket.display()),
        "--node",
        "node-a",
        "to-file",
        "--output",
        "-",
        "--format",
        "json",
        "--once",
    ]);
    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_file(&socket);
    assert_eq!(code, 0, "{stderr}");
    let view: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(view["revision"], 1, "{stdout}");
    assert_eq!(view["node"]["name"], "node-a");
    assert!(
        view["services"]["kube-system/kube-dns"].is_object(),
        "{stdout}"
    );
}

/// As root, in a namespace of the test's own: `kpng … to-nft` serves
/// `/healthz`, the health-check node port of a Service with
/// `externalTrafficPolicy: Local` (200 with one local endpoint), and
/// Prometheus metrics.
/// A manifest (its path) with node-a and a LoadBalancer Service with
/// `externalTrafficPolicy: Local`, its health check on `hc_port`, and one
/// endpoint on node-a.
fn front_manifest(tag: &str, hc_port: u16) -> std::path::PathBuf {
    let manifest = std::env::temp_dir().join(format!("{tag}.yaml"));
    std::fs::write(
        &manifest,
        format!(
            r#"apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {{name: node-a}}
  status: {{addresses: [{{type: InternalIP, address: 192.168.50.1}}]}}
- apiVersion: v1
  kind: Service
  metadata: {{namespace: t, name: front}}
  spec: {{type: LoadBalancer, clusterIP: 10.96.0.5, externalTrafficPolicy: Local, healthCheckNodePort: {hc_port}, ports: [{{name: http, port: 80, targetPort: 8080, nodePort: 30123}}]}}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {{namespace: t, name: front-1, labels: {{kubernetes.io/service-name: front}}}}
  addressType: IPv4
  endpoints: [{{addresses: [10.244.1.10], nodeName: node-a}}]
  ports: [{{name: http, port: 8080, protocol: TCP}}]
"#
        ),
    )
    .expect("manifest");
    manifest
}

/// GET `url` from namespace `ns`: `STATUS BODY`, or `ERROR …`.
fn get_in(ns: &str, url: &str) -> String {
    let script = format!(
        "import urllib.request, urllib.error\ntry:\n  r = urllib.request.urlopen('{url}', timeout=2); print(r.status, r.read().decode())\nexcept urllib.error.HTTPError as e: print(e.code, e.read().decode())\nexcept Exception as e: print('ERROR', e)"
    );
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "python3", "-c", &script])
        .output()
        .expect("python3");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// `get_in(ns, url)` until it answers `200` (5 s at most); the last answer.
fn get_200_in(ns: &str, url: &str) -> String {
    let mut answer = String::new();
    for _ in 0..50 {
        answer = get_in(ns, url);
        if answer.starts_with("200") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    answer
}

#[test]
fn to_nft_serves_healthz_and_health_check_node_ports() {
    let Some(mut namespace) = Namespace::new("kphc") else {
        return;
    };
    let ns = namespace.name.clone();
    let manifest = front_manifest(&ns, 32123);
    let child = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns,
            env!("CARGO_BIN_EXE_kpng"),
            "file",
            "--input",
        ])
        .arg(&manifest)
        .args([
            "--node",
            "node-a",
            "--watch",
            "to-nft",
            "--healthz-bind-address",
            "127.0.0.1:10256",
        ])
        .env("RUST_LOG", "error")
        .spawn()
        .expect("kpng");
    namespace.children.push(child);
    let probe = |port: u16, path: &str| get_in(&ns, &format!("http://127.0.0.1:{port}{path}"));
    let healthz = get_200_in(&ns, "http://127.0.0.1:10256/healthz");
    assert!(healthz.starts_with("200"), "{healthz}");
    let check = probe(32123, "/");
    assert!(check.starts_with("200"), "{check}");
    // Metrics: the sync, the view, and the ingest's counters.
    let metrics = probe(10249, "/metrics");
    for sample in [
        "kubeproxy_sync_proxy_rules_duration_seconds_count 1",
        "kubeproxy_sync_full_proxy_rules_duration_seconds_count 1",
        "kpng_services 1",
        "kpng_endpoints 1",
        "kpng_revisions_total 1",
        "kpng_sync_failures_total 0",
    ] {
        assert!(metrics.contains(sample), "{sample} in {metrics}");
    }
    assert!(
        check.contains(r#""localEndpoints":1"#) && check.contains(r#""name":"front""#),
        "{check}"
    );
    let _ = std::fs::remove_file(&manifest);
}

/// A config file stands for the same command line (deploy/ uses one).
#[test]
fn a_config_file_is_the_command_line() {
    let config = std::env::temp_dir().join(format!("kpng-config-{}.yaml", std::process::id()));
    std::fs::write(
        &config,
        "source: file\nnode: ${KPNG_TEST_NODE}\nsink: to-nft\nflags:\n  dry-run: true\n  once: true\n  cluster-cidr: 10.244.0.0/16\n  masquerade-all: false\n",
    )
    .expect("config");
    let from_file = Command::new(env!("CARGO_BIN_EXE_kpng"))
        .args(["--config"])
        .arg(&config)
        .env("KPNG_TEST_NODE", "node-a")
        .env("RUST_LOG", "error")
        .output()
        .expect("kpng");
    let _ = std::fs::remove_file(&config);
    let from_flags = sample_dry_run();
    assert!(
        from_file.status.success(),
        "{}",
        String::from_utf8_lossy(&from_file.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&from_file.stdout), from_flags);
}

/// Hostile text in a Service's name, its slice's label and an annotation
/// (a hostile port name is refused as no RFC 1123 label: its object is
/// skipped), and a port's name, never reaches a rule: chain names are hashes, addresses and ports are parsed
/// numbers, and comments name only valid Kubernetes names (none here). The nft script passes `nft -c` (as root, in a namespace of the
/// test's own) and the iptables batch carries none of it either.
#[test]
fn hostile_names_never_reach_a_ruleset() {
    let hostile_name = r#"evil\"; flush ruleset; #"#;
    // A port name is an RFC 1123 label (the API server's check, followed:
    // a hostile one skips its object), so only a plain one reaches here;
    // it must not reach a ruleset either.
    let hostile_port = "webport";
    let manifest = format!(
        r#"apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {{name: node-a}}
  status: {{addresses: [{{type: InternalIP, address: 192.168.50.1}}]}}
- apiVersion: v1
  kind: Service
  metadata:
    namespace: t
    name: "{hostile_name}"
    annotations: {{"x": "}}; delete table ip kpng; {{"}}
  spec: {{type: NodePort, clusterIP: 10.96.0.7, sessionAffinity: ClientIP, ports: [{{name: "{hostile_port}", port: 80, targetPort: 8080, nodePort: 30007}}]}}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {{namespace: t, name: evil-1, labels: {{kubernetes.io/service-name: "{hostile_name}"}}}}
  addressType: IPv4
  endpoints: [{{addresses: [10.244.1.10], nodeName: node-a}}]
  ports: [{{name: "{hostile_port}", port: 8080, protocol: TCP}}]
"#
    );
    let path = std::env::temp_dir().join(format!("kpng-hostile-{}.yaml", std::process::id()));
    std::fs::write(&path, manifest).expect("manifest");
    let path_text = path.to_str().expect("path");
    let mut scripts = Vec::new();
    for sink in ["to-nft", "to-iptables"] {
        let (code, stdout, stderr) = kpng(&[
            "file",
            "--input",
            path_text,
            "--node",
            "node-a",
            sink,
            "--dry-run",
        ]);
        assert_eq!(code, 0, "{sink}: {stderr}");
        // The Service is programmed (its ClusterIP and NodePort are there)…
        assert!(stdout.contains("10.96.0.7"), "{sink}: {stdout}");
        assert!(stdout.contains("30007"), "{sink}");
        // …and none of the text.
        for needle in ["evil", "flush", "}; delete", "webport"] {
            assert!(!stdout.contains(needle), "{sink} script carries {needle:?}");
        }
        scripts.push(stdout);
    }
    let _ = std::fs::remove_file(&path);

    let Some(namespace) = Namespace::new("kpevil") else {
        return;
    };
    let mut check = namespace
        .command(&["nft", "-c", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("nft");
    use std::io::Write as _;
    check
        .stdin
        .take()
        .expect("stdin")
        .write_all(scripts[0].as_bytes())
        .expect("write");
    let out = check.wait_with_output().expect("nft");
    assert!(
        out.status.success(),
        "nft -c: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A config file's `${VAR}`s are expanded per value, after parsing: an
/// unset one is refused by name, and a value with `#` or `: ` in it stays
/// one value. Flags after `--config FILE` override the file's, whether
/// they are the source's (`--node`) or the sink's; durations take Go's
/// format.
#[test]
fn config_variables_are_values_and_the_command_line_overrides_the_file() {
    let config = std::env::temp_dir().join(format!("kpng-config-vars-{}.yaml", std::process::id()));
    let run = |text: &str, extra: &[&str], env: &[(&str, &str)]| {
        std::fs::write(&config, text).expect("config");
        let mut command = Command::new(env!("CARGO_BIN_EXE_kpng"));
        command.arg("--config").arg(&config).args(extra);
        command.env("RUST_LOG", "error");
        for (k, v) in env {
            command.env(k, v);
        }
        let out = command.output().expect("kpng");
        support::text(&out)
    };
    let base = "source: file\nnode: ${KPNG_TEST_NODE_X}\nsink: to-nft\nflags:\n  dry-run: true\n  once: true\n  cluster-cidr: ${KPNG_TEST_CIDR_X}\n";

    let (code, _, stderr) = run(base, &[], &[("KPNG_TEST_NODE_X", "node-a")]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("cluster-cidr: ${KPNG_TEST_CIDR_X} is not set"),
        "{stderr}"
    );

    // A value that YAML would have cut at `#` stays whole, and is refused.
    let (code, _, stderr) = run(
        base,
        &[],
        &[
            ("KPNG_TEST_NODE_X", "node-a"),
            ("KPNG_TEST_CIDR_X", "10.244.0.0/16 #x"),
        ],
    );
    assert_ne!(code, 0);
    assert!(stderr.contains("10.244.0.0/16 #x"), "{stderr}");

    // The command line wins: a source flag and a sink flag, apart and
    // joined, and a Go duration.
    let (code, from_file, stderr) = run(
        base,
        &[
            "--node",
            "node-a",
            "--cluster-cidr=10.244.0.0/16",
            "--min-sync-period",
            "1m30s",
        ],
        &[
            ("KPNG_TEST_NODE_X", "node-b"),
            ("KPNG_TEST_CIDR_X", "10.0.0.0/8"),
        ],
    );
    let _ = std::fs::remove_file(&config);
    assert_eq!(code, 0, "{stderr}");
    let from_flags = sample_dry_run();
    assert_eq!(from_file, from_flags);
}

/// `--nodeport-addresses` as a CIDR (as kube-proxy users write it): the
/// health-check port listens on the node's addresses in it, not on
/// loopback. It was not served at all (issue #16).
#[test]
fn health_check_ports_listen_on_a_nodeport_cidr() {
    let Some(mut namespace) = Namespace::new("kphcidr") else {
        return;
    };
    let ns = namespace.name.clone();
    let ip = |args: &[&str]| {
        let ok = Command::new("ip").args(["-n", &ns]).args(args).status();
        assert!(ok.is_ok_and(|s| s.success()), "ip {args:?}");
    };
    // No dummy driver on every machine: a veth pair, both ends here.
    ip(&["link", "add", "hc0", "type", "veth", "peer", "name", "hc1"]);
    ip(&["addr", "add", "192.168.51.7/24", "dev", "hc0"]);
    ip(&["link", "set", "hc0", "up"]);
    ip(&["link", "set", "hc1", "up"]);
    let manifest = front_manifest(&ns, 32124);
    let child = namespace
        .command(&[env!("CARGO_BIN_EXE_kpng"), "file", "--input"])
        .arg(&manifest)
        .args([
            "--node",
            "node-a",
            "--watch",
            "to-nft",
            "--nodeport-addresses",
            "192.168.51.0/24",
            "--healthz-bind-address",
            "127.0.0.1:10256",
            "--metrics-bind-address",
            "",
        ])
        .env("RUST_LOG", "error")
        .spawn()
        .expect("kpng");
    namespace.children.push(child);
    let check = get_200_in(&ns, "http://192.168.51.7:32124/");
    assert!(check.starts_with("200"), "{check}");
    assert!(check.contains(r#""localEndpoints":1"#), "{check}");
    let loopback = get_in(&ns, "http://127.0.0.1:32124/");
    assert!(loopback.starts_with("ERROR"), "not on loopback: {loopback}");

    // The listeners follow the node's addresses between syncs (nothing in
    // the manifest changes, so no sync comes): an address added in the
    // CIDR is served.
    ip(&["addr", "add", "192.168.51.8/24", "dev", "hc0"]);
    let added = get_200_in(&ns, "http://192.168.51.8:32124/");
    assert!(added.starts_with("200"), "on the added address: {added}");
    let _ = std::fs::remove_file(&manifest);
}

/// A test apiserver serving one Service (`shop/cart`, 10.96.7.7:80) with
/// one endpoint (10.244.3.9:8080 on node-b) and node-a, until stdin
/// closes; its kubeconfig is written to `kubeconfig`.
fn serve_cart(kubeconfig: &std::path::Path) {
    use kpng_testkit::apiserver::{ApiServer, Reply, Resource, Script};
    use serde_json::json;
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let mut script = Script::default();
    script.push(
        Resource::Services,
        false,
        Reply::List("1".into(), vec![json!({"metadata": {"namespace": "shop", "name": "cart", "resourceVersion": "1"},
            "spec": {"clusterIP": "10.96.7.7", "clusterIPs": ["10.96.7.7"], "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}})]),
    );
    script.push(
        Resource::EndpointSlices,
        false,
        Reply::List("1".into(), vec![json!({"metadata": {"namespace": "shop", "name": "cart-x", "resourceVersion": "1",
                "labels": {"kubernetes.io/service-name": "cart"}},
            "addressType": "IPv4", "endpoints": [{"addresses": ["10.244.3.9"], "conditions": {"ready": true}, "nodeName": "node-b"}],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]})]),
    );
    script.push(
        Resource::Nodes,
        false,
        Reply::List("1".into(), vec![json!({"metadata": {"name": "node-a"}})]),
    );
    let server = runtime.block_on(ApiServer::start(script));
    std::fs::write(kubeconfig, server.kubeconfig()).expect("kubeconfig");
    println!("ready");
    let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
}

/// kubeadm's `config.conf` with its kubeconfig at `kubeconfig`, written
/// into `dir`; its path.
fn kubeadm_config(dir: &std::path::Path, kubeconfig: &std::path::Path) -> std::path::PathBuf {
    let config = dir.join("config.conf");
    let text = include_str!("kubeadm-config.conf").replace(
        "/var/lib/kube-proxy/kubeconfig.conf",
        kubeconfig.to_str().expect("path"),
    );
    std::fs::write(&config, text).expect("config");
    config
}

/// kubeadm's kube-proxy configuration, unchanged but for where its
/// kubeconfig is, with the DaemonSet's flags (`--config=…
/// --hostname-override=…`): kpng reads the cluster from the API (a test
/// apiserver speaking the list protocol) and prints its nftables ruleset
/// (a dry run; the next test applies it).
#[test]
fn kubeadms_kube_proxy_configuration_runs_kpng() {
    let out = run_kubeadm(None, &["--dry-run"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("add table ip kpng"), "{stdout}");
    assert!(stdout.contains("10.96.7.7 . tcp . 80"), "{stdout}");
    assert!(stdout.contains("10.244.3.9 . 8080"), "{stdout}");
    // The ConfigMap asks nothing kpng leaves undone.
    assert!(!stderr.contains("not done by kpng"), "{stderr}");
}

/// kpng as kubeadm's DaemonSet runs it (`--config=… --hostname-override=…`)
/// with `extra` flags, once, in network namespace `netns` or here, against
/// the cart apiserver running beside it; its output.
fn run_kubeadm(netns: Option<&str>, extra: &[&str]) -> std::process::Output {
    let tag = netns.unwrap_or("here");
    let dir = std::env::temp_dir().join(format!("kpng-kubeadm-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let kubeconfig = dir.join("kubeconfig.conf");
    let mut server = start_cart(netns, &kubeconfig);
    let config = kubeadm_config(&dir, &kubeconfig);
    let kpng = env!("CARGO_BIN_EXE_kpng");
    let mut command = match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, kpng]);
            c
        }
        None => Command::new(kpng),
    };
    let out = command
        .arg(format!("--config={}", config.display()))
        .args([
            "--hostname-override=node-a",
            "--once",
            "--metrics-bind-address=",
        ])
        .args(extra)
        .env("RUST_LOG", "warn")
        .output()
        .expect("kpng");
    drop(server.stdin.take());
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&dir);
    out
}

/// Serves the cart cluster (see [`serve_cart`]) when a test runs this
/// binary for it, in whatever namespace it runs in; otherwise nothing.
#[test]
#[ignore = "a helper process of other tests"]
fn serve_cart_helper() {
    if let Some(kubeconfig) = std::env::var_os("KPNG_TEST_SERVE_CART") {
        serve_cart(std::path::Path::new(&kubeconfig));
    }
}

/// This test binary as the cart apiserver (see [`serve_cart_helper`]), in
/// network namespace `netns` or here, once it is ready.
fn start_cart(netns: Option<&str>, kubeconfig: &std::path::Path) -> std::process::Child {
    let this = std::env::current_exe().expect("self");
    let mut command = match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]).arg(this);
            c
        }
        None => Command::new(this),
    };
    let mut server = command
        .args([
            "serve_cart_helper",
            "--exact",
            "--nocapture",
            "--include-ignored",
        ])
        .env("KPNG_TEST_SERVE_CART", kubeconfig)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("apiserver");
    wait_ready(&mut server);
    server
}

/// Waits for a helper's `ready` line (the test harness prints its own
/// lines first).
fn wait_ready(child: &mut std::process::Child) {
    use std::io::BufRead as _;
    let out = child.stdout.take().expect("stdout");
    let mut lines = std::io::BufReader::new(out).lines();
    loop {
        match lines.next() {
            Some(Ok(line)) if line.trim() == "ready" => break,
            Some(Ok(_)) => {}
            _ => panic!("the helper did not start"),
        }
    }
    // Keep draining, so the helper never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
}

/// The same kubeadm configuration applied for real, in a lab: kpng runs in
/// the node's namespace with the DaemonSet's flags, reads a test apiserver
/// there, programs nftables, and a pod's connection to the ClusterIP
/// reaches the endpoint in another namespace.
#[test]
fn kubeadms_kube_proxy_configuration_programs_a_node() {
    if let Some(missing) = kpng_lab::unavailable(&[]) {
        eprintln!("SKIPPED: {missing}");
        return;
    }
    let mut lab = kpng_lab::Lab::new();
    lab.host("podc", &["10.244.1.99"], &[]);
    lab.host("e1", &["10.244.3.9"], &[]);
    lab.serve("e1", "10.244.3.9");
    let node = lab.ns("node");
    let out = run_kubeadm(Some(&node), &["--healthz-bind-address="]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reply = lab.once("podc", "tcp", "10.96.7.7", 80);
    assert!(reply.starts_with("10.244.3.9 "), "{reply}");
    // kube-proxy's conntrack settings, applied in the node's namespace (a
    // fresh one holds 5 days; the ConfigMap's null means kube-proxy's 24 h).
    let established = Command::new("ip")
        .args([
            "netns",
            "exec",
            &node,
            "cat",
            "/proc/sys/net/netfilter/nf_conntrack_tcp_timeout_established",
        ])
        .output()
        .expect("cat");
    assert_eq!(String::from_utf8_lossy(&established.stdout).trim(), "86400");
}

#[test]
fn to_ebpf_dry_run_prints_the_map_writes_and_the_nft_rules_beside_them() {
    let args = ["file", "to-ebpf", "--dry-run", "--metrics-bind-address", ""];
    let (code, stdout, stderr) = kpng(&args);
    assert_eq!(code, 0, "{stderr}");
    // kube-dns on node-a: a record per ClusterIP port, each leading to a
    // set of its two endpoints; the endpoint-less checkout refuses.
    assert!(
        stdout.contains("set services 10.96.0.10 udp 53 : set "),
        "{stdout}"
    );
    assert!(stdout.contains("2 endpoints: 10.244.1.5:53 (local), 10.244.2.7:53"));
    assert!(stdout.contains("set services 10.96.20.20 tcp 443 : set 1 empty: reject"));
    assert!(stdout.contains("set live 10.96.0.10"));
    // ipMode Proxy is not programmed.
    assert!(!stdout.contains("198.51.100.11"));
    // Traffic from outside the node: the nftables backend's transaction.
    assert!(stdout.contains("add table ip kpng"), "{stdout}");
    let (code, alone, stderr) = kpng(&[&args[..], &["--north-south", "none"]].concat());
    assert_eq!(code, 0, "{stderr}");
    assert!(!alone.contains("add table"), "{alone}");
    // With the tc programs, a ClusterIP reached from outside has a record
    // of theirs too, and still no nftables rule.
    let with_tc = [
        &args[..],
        &["--north-south", "none", "--tc-interfaces", "eth0"],
    ]
    .concat();
    let (code, tc, stderr) = kpng(&with_tc);
    assert_eq!(code, 0, "{stderr}");
    assert!(tc.contains("set external 10.96.0.10 udp 53 : set "), "{tc}");
    assert!(!tc.contains("add table"), "{tc}");
}

/// `--bpf-map-sizes` takes `NAME=ENTRIES` of the backend's maps; an
/// unknown map or a size of 0 is refused before anything runs, naming
/// it.
#[test]
fn to_ebpf_map_sizes_name_known_maps() {
    let base = ["file", "to-ebpf", "--dry-run", "--metrics-bind-address", ""];
    let sized = [
        &base[..],
        &[
            "--bpf-map-sizes",
            "kpng_services=4096,kpng_affinity=65536",
            "--bpf-map-min-entries",
            "64",
        ],
    ]
    .concat();
    let (code, _, stderr) = kpng(&sized);
    assert_eq!(code, 0, "{stderr}");
    for (flag, wrong) in [
        ("kpng_nothing=5", "kpng_nothing=5: no such map"),
        ("kpng_live=0", "kpng_live=0: a size is at least 1"),
    ] {
        let (code, _, stderr) = kpng(&[&base[..], &["--bpf-map-sizes", flag]].concat());
        assert_ne!(code, 0);
        assert!(stderr.contains(wrong), "{stderr}");
    }
}

/// As root with cgroup v2: `to-ebpf --once` attaches to a test cgroup and
/// pins in a test bpffs, and exits (it runs in the machine's namespace,
/// since `ip netns exec` hides the cgroup tree: the conntrack sysctl flags
/// are 0, which leaves the machine's sysctls alone); its programs stay attached and serve
/// a client in that cgroup; `--cleanup` detaches them. A pin path off
/// bpffs is refused with a clear error.
#[test]
fn to_ebpf_programs_a_cgroup_that_outlives_the_command_and_cleanup_removes_it() {
    use kpng_testkit::bpf::{BpfFs, TestCgroup, TestNetns, unavailable};
    if let Some(why) = unavailable() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let fs = BpfFs::new("kpng-cli-bpf").expect("bpffs");
    let cgroup = TestCgroup::new("kpng-cli-cg").expect("cgroup");
    let ns = TestNetns::new("kpc").expect("netns");
    ns.sh("ip addr add 10.244.1.20/32 dev lo").expect("addr");
    let manifest = std::env::temp_dir().join(format!("kpng-ebpf-{}.yaml", std::process::id()));
    std::fs::write(
        &manifest,
        r#"apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Service
  metadata: {namespace: t, name: web}
  spec: {clusterIP: 10.96.0.10, ports: [{name: http, port: 80, targetPort: 8080}]}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {namespace: t, name: web-1, labels: {kubernetes.io/service-name: web}}
  addressType: IPv4
  endpoints: [{addresses: [10.244.1.20], nodeName: node-a}]
  ports: [{name: http, port: 8080, protocol: TCP}]
"#,
    )
    .expect("manifest");
    let pins = fs.path.join("kpng");
    let cgroup_path = cgroup.path.to_string_lossy().into_owned();
    let pin_path = pins.to_string_lossy().into_owned();
    let manifest_path = manifest.to_string_lossy().into_owned();
    let mut args = vec![
        "file",
        "--input",
        &manifest_path,
        "--node",
        "node-a",
        "to-ebpf",
        "--once",
        "--cgroup-path",
        &cgroup_path,
        "--bpf-pin-path",
        &pin_path,
        "--north-south",
        "none",
        "--healthz-bind-address",
        "",
        "--metrics-bind-address",
        "",
        "--no-conntrack-cleanup",
        "--conntrack-max-per-core",
        "0",
        "--conntrack-tcp-timeout-established",
        "0",
        "--conntrack-tcp-timeout-close-wait",
        "0",
    ];
    let (code, _, stderr) = kpng(&args);
    assert_eq!(code, 0, "{stderr}");
    assert!(pins.exists());

    // The command is gone; its programs serve the cgroup's sockets.
    let serve = "import socket; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((\"10.244.1.20\", 8080)); s.listen(8); print(\"ready\", flush=True)\nwhile True:\n    c, a = s.accept(); c.sendall(b\"web\\n\"); c.close()";
    let mut server = Command::new("ip")
        .args(["netns", "exec", &ns.name, "python3", "-u", "-c", serve])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("server");
    let mut ready = String::new();
    if let Some(out) = server.stdout.take() {
        use std::io::BufRead;
        let _ = std::io::BufReader::new(out).read_line(&mut ready);
    }
    assert_eq!(ready.trim(), "ready");
    let client = "import socket\ntry:\n    s = socket.create_connection((\"10.96.0.10\", 80), timeout=2); print(s.recv(10).decode().strip())\nexcept OSError as e:\n    print(type(e).__name__)";
    let connect = || {
        let out = cgroup
            .command(&ns.name, &["python3", "-c", client])
            .output()
            .expect("client");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    assert_eq!(connect(), "web");

    // --cleanup --dry-run: says which pins it would remove, removes none.
    args.retain(|a| *a != "--once");
    args.push("--cleanup");
    let dry = [&args[..], &["--dry-run"]].concat();
    let (code, stdout, stderr) = kpng(&dry);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains(&format!("would remove the pins {pin_path}/v-")),
        "{stdout}"
    );
    assert!(pins.exists());
    assert_eq!(connect(), "web", "still attached after a dry run");

    // --cleanup: detached, unpinned.
    let (code, _, stderr) = kpng(&args);
    assert_eq!(code, 0, "{stderr}");
    assert!(!pins.exists());
    assert_ne!(connect(), "web");
    let _ = server.kill();
    let _ = server.wait();

    // A pin path that is not on a bpf file system: one clear line.
    let off = std::env::temp_dir().to_string_lossy().into_owned();
    let bad: Vec<&str> = args
        .iter()
        .map(|a| {
            if *a == pin_path.as_str() {
                off.as_str()
            } else {
                a
            }
        })
        .filter(|a| *a != "--cleanup")
        .collect();
    let (code, _, stderr) = kpng(&bad);
    assert_ne!(code, 0);
    assert!(stderr.contains("is not on a bpf file system"), "{stderr}");
    let _ = std::fs::remove_file(&manifest);
}

/// `count` Services `svc-0`… (names from `first`), as multi-document YAML.
fn services_yaml(first: usize, count: usize) -> String {
    (first..first + count)
        .map(|i| {
            format!(
                "---\napiVersion: v1\nkind: Service\nmetadata: {{namespace: t, name: svc-{i}}}\nspec: {{clusterIP: 10.96.1.{}, ports: [{{port: 80}}]}}\n",
                i + 1
            )
        })
        .collect()
}

/// An empty input file, one of only comments, or one of only kinds kpng
/// does not read was taken as a cluster with no Services (exit 0, a
/// ruleset deleting every Service): now an error naming the file, unless
/// `--allow-mass-delete` says the cluster is empty.
#[test]
fn an_input_with_nothing_to_read_is_an_error_naming_the_file() {
    let dir = std::env::temp_dir().join(format!("kpng-nothing-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    for (name, text) in [
        ("empty.yaml", ""),
        (
            "comments.yaml",
            "# kubectl get ... > this file failed\n---\n# nothing\n",
        ),
        (
            "unknown.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {namespace: t, name: c}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {namespace: t, name: d}\n",
        ),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write");
        let path = path.to_str().expect("utf-8");
        let args = [
            "file",
            "--input",
            path,
            "--node",
            "n",
            "to-nft",
            "--dry-run",
        ];
        let (code, stdout, stderr) = kpng(&[&args[..], &["--once"]].concat());
        assert_ne!(code, 0, "{name}: {stdout}");
        assert_eq!(
            stderr.trim(),
            format!("error: no Services, EndpointSlices or Nodes in {path}"),
            "{name}"
        );
        assert!(stdout.is_empty(), "{name}: nothing printed: {stdout}");
        let (code, _, stderr) = kpng(&[&args[..], &["--once", "--allow-mass-delete"]].concat());
        assert_eq!(code, 0, "{name} allowed: {stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--watch` on a file rewritten with `>` and written slowly: it was read
/// while empty (one sync deleted every Service) or half-written. Now an
/// empty file is not applied and a file is read once whole: every view
/// kpng syncs (printed by `to-file`) has all the Services.
#[test]
fn a_watched_file_rewritten_slowly_never_syncs_an_empty_view() {
    use std::io::Read as _;
    let path = std::env::temp_dir().join(format!("kpng-rewrite-{}.yaml", std::process::id()));
    std::fs::write(&path, services_yaml(0, 3)).expect("write");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kpng"))
        .args(["file", "--input"])
        .arg(&path)
        .args(["--node", "node-a", "--watch", "to-file", "--output", "-"])
        .args(["--format", "json"])
        .env("RUST_LOG", "error")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run kpng");
    let mut stdout = child.stdout.take().expect("stdout");
    let (send, receive) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buffer = [0u8; 65536];
        while let Ok(n) = stdout.read(&mut buffer) {
            if n == 0 || send.send(buffer[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut output = Vec::new();
    let read_until = |needle: &str, output: &mut Vec<u8>| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !String::from_utf8_lossy(output).contains(needle) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match receive.recv_timeout(left) {
                Ok(bytes) => output.extend(bytes),
                Err(_) => return false,
            }
        }
        true
    };
    assert!(read_until("t/svc-2", &mut output), "first sync");
    std::thread::sleep(std::time::Duration::from_millis(1_200));
    // `>` and a slow writer: truncated now (and long enough that a poll
    // sees it), then the first Service, then 0.3 s later the rest.
    std::fs::File::create(&path).expect("truncate");
    std::thread::sleep(std::time::Duration::from_millis(1_200));
    std::fs::write(&path, services_yaml(1, 1)).expect("first part");
    std::thread::sleep(std::time::Duration::from_millis(300));
    {
        use std::io::Write as _;
        let mut file = std::fs::File::options()
            .append(true)
            .open(&path)
            .expect("append");
        file.write_all(services_yaml(2, 2).as_bytes())
            .expect("the rest");
    }
    let rewritten = read_until("t/svc-3", &mut output);
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_file(&path);
    let text = String::from_utf8_lossy(&output);
    assert!(rewritten, "the rewritten file is read: {text}");
    let views: Vec<serde_json::Value> = serde_json::Deserializer::from_str(&text)
        .into_iter()
        .collect::<Result<_, _>>()
        .expect("JSON views");
    let counts: Vec<usize> = views
        .iter()
        .map(|v| v["services"].as_object().map_or(0, |s| s.len()))
        .collect();
    assert!(counts.len() >= 2, "{counts:?}");
    assert!(
        counts.iter().all(|&n| n == 3),
        "every synced view has the 3 Services: {counts:?}"
    );
}

/// A watched file rewritten (whole, renamed into place) with 2 of its 12
/// Services: a mass deletion. It is held back: no new ruleset, a warning
/// with the counts and the reason. (A dry run serves no metrics: the
/// gauge and `/healthz` are shown by the netns test below.)
#[test]
fn a_mass_deletion_is_held_back_and_shows() {
    let path = std::env::temp_dir().join(format!("kpng-mass-{}.yaml", std::process::id()));
    std::fs::write(&path, services_yaml(0, 12)).expect("write");
    let stderr_path = std::env::temp_dir().join(format!("kpng-mass-{}.err", std::process::id()));
    let stdout_path = std::env::temp_dir().join(format!("kpng-mass-{}.out", std::process::id()));
    let mut child = Command::new(env!("CARGO_BIN_EXE_kpng"))
        .args(["file", "--input"])
        .arg(&path)
        .args(["--node", "node-a", "--watch", "to-nft", "--dry-run"])
        .env("RUST_LOG", "warn")
        .stdout(std::fs::File::create(&stdout_path).expect("stdout file"))
        .stderr(std::fs::File::create(&stderr_path).expect("stderr file"))
        .spawn()
        .expect("run kpng");
    let wait_for = |file: &std::path::Path, text: &str| {
        for _ in 0..150 {
            if std::fs::read_to_string(file).is_ok_and(|t| t.contains(text)) {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        false
    };
    let first = wait_for(&stdout_path, "10.96.1.12");
    let staged = path.with_extension("new");
    std::fs::write(&staged, services_yaml(0, 2)).expect("write");
    std::fs::rename(&staged, &path).expect("rename into place");
    let held = wait_for(&stderr_path, "mass deletion held back");
    // Room for a (wrong) sync of the held round to be printed.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let _ = child.kill();
    let _ = child.wait();
    let stdout = std::fs::read_to_string(&stdout_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(&stderr_path);
    let _ = std::fs::remove_file(&stdout_path);
    assert!(first, "no first ruleset: {stdout}\n{stderr}");
    assert!(held, "{stderr}");
    assert!(
        stderr.contains("before=12") && stderr.contains("after=2") && stderr.contains("deleted=10"),
        "{stderr}"
    );
    assert!(
        stderr.contains("would delete 10 of 12 Services"),
        "{stderr}"
    );
    // The first ruleset alone is printed: nothing of the held round is.
    let deletions: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("delete") && !l.starts_with("delete table"))
        .collect();
    assert!(deletions.is_empty(), "{deletions:?}");
    assert_eq!(
        stdout.matches("delete table ip kpng").count(),
        1,
        "{stdout}"
    );
}

/// As root, in a namespace of the test's own: the input loses its only
/// Service (the file rewritten with the Node alone). The deletion is held
/// back: the Service stays programmed in nftables, `/healthz` answers 503
/// saying why (`/livez` 200), and the metric shows it; once the input has
/// lasted `--mass-delete-confirm-after`, it is applied and `/healthz` is
/// 200 again.
#[test]
fn a_held_mass_deletion_keeps_the_kernel_state_and_healthz_says_why() {
    let Some(mut namespace) = Namespace::new("kpgd") else {
        return;
    };
    let ns = namespace.name.clone();
    let manifest = front_manifest(&ns, 32124);
    let child = Command::new("ip")
        .args(["netns", "exec", &ns, env!("CARGO_BIN_EXE_kpng"), "file"])
        .arg("--input")
        .arg(&manifest)
        .args(["--node", "node-a", "--watch", "to-nft"])
        .args(["--healthz-bind-address", "127.0.0.1:10256"])
        .args(["--mass-delete-confirm-after", "4s"])
        .env("RUST_LOG", "error")
        .spawn()
        .expect("kpng");
    namespace.children.push(child);
    let healthz = get_200_in(&ns, "http://127.0.0.1:10256/healthz");
    assert!(healthz.starts_with("200"), "{healthz}");
    let programmed = || {
        let out = namespace
            .command(&["nft", "list", "table", "ip", "kpng"])
            .output()
            .expect("nft");
        String::from_utf8_lossy(&out.stdout).contains("10.96.0.5")
    };
    assert!(programmed());
    // The Node alone: every Service deleted.
    let text = std::fs::read_to_string(&manifest).expect("manifest");
    let node_only: String = text
        .split("- apiVersion: v1\n  kind: Service")
        .next()
        .unwrap_or("")
        .to_owned();
    assert!(node_only.contains("kind: Node") && !node_only.contains("kind: Service"));
    let staged = manifest.with_extension("new");
    std::fs::write(&staged, node_only).expect("write");
    std::fs::rename(&staged, &manifest).expect("rename");
    let mut answer = String::new();
    for _ in 0..40 {
        answer = get_in(&ns, "http://127.0.0.1:10256/healthz");
        if answer.starts_with("503") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(answer.starts_with("503"), "{answer}");
    assert!(
        answer.contains(r#""heldBack":"the input would delete every Service (1 -> 0)"#),
        "{answer}"
    );
    assert!(programmed(), "held: the Service stays programmed");
    let livez = get_in(&ns, "http://127.0.0.1:10256/livez");
    assert!(livez.starts_with("200"), "{livez}");
    let metrics = get_in(&ns, "http://127.0.0.1:10249/metrics");
    assert!(metrics.contains("\nkpng_sync_held_back 1\n"), "{metrics}");
    // Confirmed once it lasted 4 s: applied.
    let healthz = get_200_in(&ns, "http://127.0.0.1:10256/healthz");
    let healthz = if healthz.starts_with("200") {
        healthz
    } else {
        get_200_in(&ns, "http://127.0.0.1:10256/healthz")
    };
    assert!(healthz.starts_with("200"), "{healthz}");
    // (the sync that applies the confirmed deletion may follow /healthz's
    // turn by a moment on a loaded machine)
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while programmed() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(!programmed(), "confirmed: the Service is deleted");
    let metrics = get_in(&ns, "http://127.0.0.1:10249/metrics");
    assert!(metrics.contains("\nkpng_sync_held_back 0\n"), "{metrics}");
    let _ = std::fs::remove_file(&manifest);
}

/// Beside `/metrics`, as kube-proxy: `/configz` (the effective
/// configuration, in kube-proxy's shape), `/proxyMode` (`nftables`), and
/// kube-proxy's metric names; a change to the watched file moves
/// `kubeproxy_sync_proxy_rules_service_changes_total`. A real run in a
/// namespace of its own (a dry run binds no port).
#[test]
fn configz_proxy_mode_and_kube_proxys_metrics_are_served() {
    let Some(mut namespace) = Namespace::new("kpcz") else {
        return;
    };
    let ns = namespace.name.clone();
    let bind = "127.0.0.1:10249".to_owned();
    // "STATUS BODY", as `get_in` answers.
    let http_get = |bind: &str, path: &str| Some(get_in(&ns, &format!("http://{bind}{path}")));
    let input = std::env::temp_dir().join(format!("kpng-configz-{}.yaml", std::process::id()));
    let manifest = |services: &[&str]| {
        let mut text = String::from(
            "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Node\n  metadata: {name: node-a}\n  status: {addresses: [{type: InternalIP, address: 192.168.50.1}]}\n",
        );
        for (i, name) in services.iter().enumerate() {
            text.push_str(&format!(
                "- apiVersion: v1\n  kind: Service\n  metadata: {{namespace: t, name: {name}}}\n  spec: {{clusterIP: 10.96.0.{}, ports: [{{name: http, port: 80}}]}}\n",
                i + 10
            ));
        }
        text
    };
    std::fs::write(&input, manifest(&["one"])).expect("manifest");
    let child = Command::new("ip")
        .args(["netns", "exec", &ns, env!("CARGO_BIN_EXE_kpng")])
        .args(["file", "--watch", "--node", "node-a", "--input"])
        .arg(&input)
        .args(["to-nft", "--cluster-cidr", "10.244.0.0/16"])
        .args(["--metrics-bind-address", &bind])
        .env("RUST_LOG", "error")
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("run kpng");
    namespace.children.push(child);
    let value = |text: &str, name: &str| -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
    };
    let wait_for = |what: &dyn Fn(&str) -> bool| -> String {
        let mut last = String::new();
        for _ in 0..100 {
            last = http_get(&bind, "/metrics").unwrap_or_default();
            if what(&last) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        last
    };
    let changes = "kubeproxy_sync_proxy_rules_service_changes_total";
    let first = wait_for(&|t| value(t, changes).is_some_and(|v| v >= 1.0));
    let configz = http_get(&bind, "/configz");
    let mode = http_get(&bind, "/proxyMode");
    // One more Service in the file: counted.
    std::fs::write(&input, manifest(&["one", "two"])).expect("manifest");
    let second = wait_for(&|t| value(t, changes).is_some_and(|v| v >= 2.0));
    drop(namespace);
    let _ = std::fs::remove_file(&input);

    for name in [
        "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
        "kubeproxy_sync_proxy_rules_service_changes_pending",
        "kubeproxy_sync_proxy_rules_endpoint_changes_total",
        "kubeproxy_sync_proxy_rules_nftables_sync_failures_total{ip_family=\"IPv4\"}",
        "process_resident_memory_bytes",
        "process_start_time_seconds",
    ] {
        assert!(value(&first, name).is_some(), "{name} in {first}");
    }
    assert_eq!(value(&first, changes), Some(1.0), "{first}");
    assert_eq!(value(&second, changes), Some(2.0), "{second}");

    let mode = mode.expect("/proxyMode served");
    assert_eq!(mode, "200 nftables");
    let configz = configz.expect("/configz served");
    let body = configz.strip_prefix("200 ").expect("200");
    let json: serde_json::Value = serde_json::from_str(body).expect("JSON");
    let config = &json["kubeproxy.config.k8s.io"];
    assert_eq!(config["mode"], "nftables", "{json}");
    assert_eq!(config["hostnameOverride"], "node-a", "{json}");
    assert_eq!(config["clusterCIDR"], "10.244.0.0/16", "{json}");
    assert_eq!(config["metricsBindAddress"], bind.as_str(), "{json}");
    assert_eq!(config["nftables"]["masqueradeBit"], 14, "{json}");
    assert_eq!(
        config["conntrack"]["tcpEstablishedTimeout"], "24h0m0s",
        "{json}"
    );
}

/// `--nft-comments=false` leaves the comments naming the Services out of
/// the ruleset; they are there by default.
#[test]
fn nft_comments_can_be_turned_off() {
    let (code, with, stderr) = kpng(&["file", "to-nft", "--dry-run"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(with.contains(" comment \"web/api:http/tcp\""), "{with}");
    let (code, without, stderr) = kpng(&["file", "to-nft", "--dry-run", "--nft-comments=false"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!without.contains("comment"), "{without}");
    assert!(
        without.contains("add element ip kpng service-keys"),
        "{without}"
    );
}

/// The explain arguments of one packet: a pod on node-a to web/frontend's
/// ClusterIP in the bundled sample.
const EXPLAIN_FRONTEND: [&str; 14] = [
    "explain",
    "--from",
    "pod",
    "--source",
    "10.244.1.99",
    "--destination",
    "10.96.10.20",
    "--port",
    "80",
    "--cluster-cidr",
    "10.244.0.0/16",
    "--output",
    "json",
    "--protocol=tcp",
];

/// `kpng file … explain`: what node-a does with a packet, offline, as
/// JSON; a mistyped node or protocol is an error naming it, and nothing is
/// programmed (no flag asks for it: explain writes nothing).
#[test]
fn explain_answers_offline_and_names_a_mistyped_node() {
    let mut args = vec!["file", "--node", "node-a"];
    args.extend(EXPLAIN_FRONTEND);
    let (code, stdout, stderr) = kpng(&args);
    assert_eq!(code, 0, "{stderr}");
    let explained: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    let outcome = &explained["outcome"];
    assert_eq!(outcome["verdict"], "translated", "{stdout}");
    assert_eq!(outcome["service"], "web/frontend");
    assert_eq!(outcome["masquerade"], "no");
    // The sample's zone hints: node-c's endpoint is for zone-b.
    let why: Vec<&str> = explained["endpoints"]
        .as_array()
        .expect("endpoints")
        .iter()
        .filter_map(|e| e["why"].as_str())
        .collect();
    assert!(why.iter().any(|w| w.contains("zone-b")), "{why:?}");

    // Text.
    let (code, stdout, stderr) = kpng(&[
        "file",
        "--node",
        "node-a",
        "explain",
        "--from",
        "outside",
        "--source",
        "203.0.113.9",
        "--destination",
        "10.96.10.20",
        "--port",
        "80",
        "--cluster-cidr",
        "10.244.0.0/16",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("masquerade: yes"), "{stdout}");
    assert!(stdout.contains("verdict: web/frontend"), "{stdout}");

    let mut args = vec!["file", "--node", "node-x"];
    args.extend(EXPLAIN_FRONTEND);
    let (code, _, stderr) = kpng(&args);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("node-x") && stderr.contains("node-a"),
        "{stderr}"
    );
    let (code, _, stderr) = kpng(&[
        "file",
        "--node",
        "node-a",
        "explain",
        "--source",
        "10.244.1.99",
        "--destination",
        "10.96.10.20",
        "--port",
        "80",
        "--protocol",
        "icmp",
    ]);
    assert_ne!(code, 0);
    assert!(stderr.contains("icmp"), "{stderr}");
}

/// `explain --backend ebpf --tc-interfaces`: the node's routes are asked
/// (read, never changed) whether each endpoint on another node is reached
/// through the tc programs. Here only `lo` has them, so node-b's and
/// node-c's endpoints of the NodePort are named with the interface their
/// route takes (or `no route`); node-a's own is not. An interface the node
/// does not have is an error naming it.
#[test]
fn explain_names_endpoints_reached_around_the_tc_programs() {
    let args = |interfaces: &'static str| {
        vec![
            "file",
            "--node",
            "node-a",
            "explain",
            "--from",
            "outside",
            "--source",
            "203.0.113.9",
            "--destination",
            "192.168.1.11",
            "--port",
            "30080",
            "--backend",
            "ebpf",
            "--tc-interfaces",
            interfaces,
            "--output",
            "json",
        ]
    };
    let (code, stdout, stderr) = kpng(&args("lo"));
    assert_eq!(code, 0, "{stderr}");
    let explained: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    let outcome = &explained["outcome"];
    assert_eq!(outcome["mechanism"], "tc", "{stdout}");
    let around: Vec<(String, bool)> = outcome["endpoints"]
        .as_array()
        .expect("endpoints")
        .iter()
        .map(|e| {
            (
                e["node"].as_str().unwrap_or_default().to_owned(),
                e["reached_around"].is_string(),
            )
        })
        .collect();
    assert!(around.contains(&("node-a".to_owned(), false)), "{stdout}");
    assert!(around.contains(&("node-b".to_owned(), true)), "{stdout}");
    let (code, _, stderr) = kpng(&args("lo,nosuch0"));
    assert_ne!(code, 0);
    assert!(stderr.contains("nosuch0"), "{stderr}");
}

/// `kpng api … explain`: the same answer from a server's state as from
/// the file it serves.
#[test]
fn explain_answers_from_a_server_as_from_its_file() {
    let (mut server, socket) = sample_server("kpng-cli-explain");
    let address = format!("unix://{}", socket.display());
    let mut args = vec!["api", "--api", &address, "--node", "node-a"];
    args.extend(EXPLAIN_FRONTEND);
    let (code, from_server, stderr) = kpng(&args);
    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_file(&socket);
    assert_eq!(code, 0, "{stderr}");
    let mut args = vec!["file", "--node", "node-a"];
    args.extend(EXPLAIN_FRONTEND);
    let (_, from_file, _) = kpng(&args);
    assert_eq!(from_server, from_file);
}

/// Per-Service counters on /metrics (issue #28): `kpng file … to-nft`
/// in a namespace of its own, a Service whose endpoint listens in the
/// namespace, real connections to its ClusterIP; the scrape shows them
/// per Service port and per endpoint. With `--counters=false`, neither
/// series.
#[test]
fn connection_counters_are_served_per_service_port_and_endpoint() {
    for counters in [true, false] {
        let Some(mut namespace) = Namespace::new("kpcn") else {
            return;
        };
        let ns = namespace.name.clone();
        namespace.run(&["ip", "addr", "add", "10.244.1.10/32", "dev", "lo"], None);
        namespace.run(&["ip", "route", "add", "10.96.0.0/16", "dev", "lo"], None);
        let listener = namespace
            .command(&[
                "python3",
                "-c",
                "import socket,time\ns=socket.socket()\ns.bind(('10.244.1.10',8080))\ns.listen(128)\nprint('ready',flush=True)\nwhile True:\n  c,_=s.accept(); c.close()",
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("listener");
        namespace.children.push(listener);
        let input = std::env::temp_dir().join(format!(
            "kpng-counters-{}-{counters}.yaml",
            std::process::id()
        ));
        std::fs::write(
            &input,
            "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Node\n  metadata: {name: node-a}\n  status: {addresses: [{type: InternalIP, address: 192.168.50.1}]}\n- apiVersion: v1\n  kind: Service\n  metadata: {namespace: t, name: web}\n  spec: {clusterIP: 10.96.0.10, ports: [{name: http, port: 80, targetPort: 8080}]}\n- apiVersion: discovery.k8s.io/v1\n  kind: EndpointSlice\n  metadata: {namespace: t, name: web-1, labels: {kubernetes.io/service-name: web}}\n  addressType: IPv4\n  endpoints: [{addresses: [10.244.1.10], nodeName: node-a}]\n  ports: [{name: http, port: 8080, protocol: TCP}]\n",
        )
        .expect("manifest");
        let bind = "127.0.0.1:10249";
        let child = Command::new("ip")
            .args(["netns", "exec", &ns, env!("CARGO_BIN_EXE_kpng")])
            .args(["file", "--watch", "--node", "node-a", "--input"])
            .arg(&input)
            .args(["to-nft", "--cluster-cidr", "10.244.0.0/16"])
            .arg(format!("--counters={counters}"))
            .args(["--metrics-bind-address", bind])
            .env("RUST_LOG", "error")
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("run kpng");
        namespace.children.push(child);
        let url = format!("http://{bind}/metrics");
        let mut synced = String::new();
        for _ in 0..100 {
            synced = get_in(&ns, &url);
            if synced.contains("kpng_services 1") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        assert!(synced.contains("kpng_services 1"), "{synced}");
        let connect = "import socket\nok=0\nfor _ in range(7):\n  socket.create_connection(('10.96.0.10',80),2).close(); ok+=1\nprint(ok)";
        assert_eq!(namespace.run(&["python3", "-c", connect], None).trim(), "7");
        let metrics = get_in(&ns, &url);
        drop(namespace);
        let _ = std::fs::remove_file(&input);
        let port = "kpng_service_connections_total{namespace=\"t\",service=\"web\",port=\"http\",protocol=\"TCP\"} 7";
        let endpoint = "kpng_endpoint_connections_total{namespace=\"t\",service=\"web\",port=\"http\",protocol=\"TCP\",endpoint=\"10.244.1.10:8080\"} 7";
        if counters {
            assert!(metrics.contains(port), "{metrics}");
            assert!(metrics.contains(endpoint), "{metrics}");
        } else {
            assert!(!metrics.contains("connections_total"), "{metrics}");
        }
    }
}

/// `--load-balancer-mode dsr` or `hybrid` where nothing returns directly
/// (the netfilter backends, or `to-ebpf` without its tc programs) is
/// refused at once, naming the flag, its value and what does it: the
/// operator asked for something the node would not do. `snat` is
/// kube-proxy's way everywhere; `to-ebpf --tc-interfaces` takes all
/// three (a dry run here).
#[test]
fn load_balancer_modes_a_backend_cannot_do_are_refused_naming_the_flag() {
    for (sink, mode) in [
        (&["to-nft"][..], "dsr"),
        (&["to-iptables"][..], "hybrid"),
        (&["to-ebpf"][..], "dsr"),
    ] {
        let args = [
            &["file", "--node", "node-a"][..],
            sink,
            &["--dry-run", "--once", "--load-balancer-mode", mode],
        ]
        .concat();
        let (code, _, stderr) = kpng(&args);
        assert_ne!(code, 0, "{sink:?} {mode}: accepted");
        assert!(
            stderr.contains(&format!("--load-balancer-mode {mode}"))
                && stderr.contains("to-ebpf --tc-interfaces"),
            "{sink:?}: {stderr}"
        );
    }
    let (code, _, stderr) = kpng(&[
        "file",
        "--node",
        "node-a",
        "to-nft",
        "--dry-run",
        "--once",
        "--load-balancer-mode",
        "snat",
    ]);
    assert_eq!(code, 0, "{stderr}");
    for mode in ["snat", "dsr", "hybrid"] {
        let (code, stdout, stderr) = kpng(&[
            "file",
            "--node",
            "node-a",
            "to-ebpf",
            "--tc-interfaces",
            "eth0",
            "--dry-run",
            "--once",
            "--load-balancer-mode",
            mode,
        ]);
        assert_eq!(code, 0, "{mode}: {stderr}");
        assert_eq!(
            stdout.contains(" direct return"),
            mode != "snat",
            "{mode}: {stdout}"
        );
    }
    let (code, _, stderr) = kpng(&[
        "file",
        "to-ebpf",
        "--load-balancer-mode",
        "dssr",
        "--dry-run",
    ]);
    assert_ne!(code, 0);
    assert!(stderr.contains("dssr"), "{stderr}");
}

/// `--xdp` goes on the tc interfaces: without them it is refused, naming
/// the flag; with them a dry run takes every mode, and a mode it does not
/// know is refused naming the value.
#[test]
fn xdp_needs_the_tc_interfaces() {
    let (code, _, stderr) = kpng(&[
        "file",
        "--node",
        "node-a",
        "to-ebpf",
        "--dry-run",
        "--once",
        "--xdp",
    ]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("--xdp auto") && stderr.contains("--tc-interfaces"),
        "{stderr}"
    );
    for mode in ["auto", "native", "generic"] {
        let (code, _, stderr) = kpng(&[
            "file",
            "--node",
            "node-a",
            "to-ebpf",
            "--tc-interfaces",
            "eth0",
            "--dry-run",
            "--once",
            &format!("--xdp={mode}"),
        ]);
        assert_eq!(code, 0, "{mode}: {stderr}");
    }
    let (code, _, stderr) = kpng(&["file", "to-ebpf", "--tc-interfaces", "eth0", "--xdp=driver"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("driver"), "{stderr}");
}
