//! kube-proxy's words taken by `kpng`: its flags, its configuration
//! files (v1alpha1 and v1alpha2), `mode: ipvs`, `--v`, and the log as a
//! file sees it. Each test here failed on the command before issue #25.

mod support;

use std::path::PathBuf;
use std::process::Command;

/// `kpng ARGS…` with `env` (`RUST_LOG` unset unless given).
fn kpng_env(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kpng"));
    command.args(args).env_remove("RUST_LOG");
    for (k, v) in env {
        command.env(k, v);
    }
    let out = command.output().expect("run kpng");
    support::text(&out)
}

/// `kpng ARGS…` with `RUST_LOG=error`.
fn kpng(args: &[&str]) -> (i32, String, String) {
    kpng_env(args, &[("RUST_LOG", "error")])
}

/// A directory of the test's own, removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("kpng-words-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        Self(dir)
    }

    /// Writes `text` to file `name` here; its path as text.
    fn file(&self, name: &str, text: &str) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, text).expect("write");
        path.to_str().expect("utf-8").to_owned()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The bundled sample's dry run for node-a, nothing served.
fn sample_dry_run(extra: &[&str]) -> String {
    let mut args = vec![
        "file",
        "--node",
        "node-a",
        "to-nft",
        "--dry-run",
        "--once",
        "--healthz-bind-address=",
        "--metrics-bind-address=",
    ];
    args.extend(extra);
    let (code, stdout, stderr) = kpng(&args);
    assert_eq!(code, 0, "{stderr}");
    stdout
}

/// `--config`, `--hostname-override`, `--proxy-mode` and `--v` were
/// missing from `--help`, and so were kube-proxy's other flags.
#[test]
fn help_shows_kube_proxys_command_line() {
    let (code, stdout, _) = kpng(&["--help"]);
    assert_eq!(code, 0);
    for shown in [
        "--config <FILE>",
        "--hostname-override <NODE>",
        "--proxy-mode <MODE>",
        "-v, --v <LEVEL>",
        "--iptables-masquerade-bit: taken as --masquerade-bit",
        "--ipvs-scheduler: accepted, with a warning",
        "--master: refused: ",
    ] {
        assert!(stdout.contains(shown), "{shown} in {stdout}");
    }
    let (_, stdout, _) = kpng(&["file", "to-nft", "--help"]);
    for shown in [
        "[alias: --iptables-masquerade-bit]",
        "[alias: --iptables-min-sync-period]",
    ] {
        assert!(stdout.contains(shown), "{shown} in {stdout}");
    }
}

/// `--iptables-masquerade-bit`, `--iptables-min-sync-period` and `--v=2`
/// were refused, and so was `--nodeport-addresses primary` (accepted in
/// the file).
#[test]
fn kube_proxys_flag_names_are_taken_beside_kpngs() {
    let plain = sample_dry_run(&[]);
    let worded = sample_dry_run(&[
        "--iptables-masquerade-bit",
        "14",
        "--iptables-min-sync-period=1s",
        "--v=2",
        "--nodeport-addresses",
        "primary",
    ]);
    assert_eq!(worded, plain);
    let (code, _, stderr) = kpng(&["file", "to-nft", "--dry-run", "--master=https://x"]);
    assert_ne!(code, 0);
    assert_eq!(
        stderr.trim(),
        "error: --master (kube-proxy's) is not supported: kpng takes the API server from the kubeconfig (or the in-cluster config): put it there"
    );
}

/// `--metrics-bind-address 0.0.0.0` (a bare IP) was "not host:port": a
/// warning in dry runs, fatal in real runs. It takes kube-proxy's port,
/// 10249, as kube-proxy's flag does (on an address of loopback's own, in
/// a network namespace of the test's own: a real run, since a dry run
/// binds no port).
#[test]
fn a_bare_ip_bind_address_takes_kube_proxys_port() {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if !root {
        eprintln!("SKIPPED: not root");
        return;
    }
    let ns = kpng_testkit::bpf::TestNetns::new("kpbare").expect("netns");
    let dir = Dir::new("bare");
    let input = dir.file("cluster.yaml", kpng_kube::file::SAMPLE_CLUSTER);
    let mut child = Command::new("ip")
        .args(["netns", "exec", &ns.name, env!("CARGO_BIN_EXE_kpng")])
        .args(["file", "--input", &input, "--node", "node-a", "--watch"])
        .args(["to-nft", "--healthz-bind-address="])
        .args(["--conntrack-max-per-core", "0"])
        .args(["--metrics-bind-address", "127.0.0.149"])
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run kpng");
    let mut served = None;
    for _ in 0..100 {
        served = ns
            .sh("curl -s -m 2 -i http://127.0.0.149:10249/metrics")
            .ok()
            .filter(|text| !text.is_empty());
        if served.is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = child.kill();
    let out = child.wait_with_output().expect("kpng");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let served = served.unwrap_or_else(|| panic!("not served on 127.0.0.149:10249: {stderr}"));
    assert!(served.starts_with("HTTP/1.1 200"), "{served}");
}

/// The log went to a file with colour escape codes.
#[test]
fn no_colour_when_stderr_is_not_a_terminal() {
    let (code, _, stderr) = kpng_env(
        &[
            "file",
            "to-nft",
            "--dry-run",
            "--once",
            "--metrics-bind-address=",
        ],
        &[("RUST_LOG", "info")],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("INFO"), "{stderr}");
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
}

/// `--v` sets the log level (klog's verbosity mapped to tracing's, see
/// docs/operator/flags-and-config.md); `RUST_LOG`, when set, wins.
#[test]
fn v_sets_the_log_level_and_rust_log_wins() {
    let args = [
        "file",
        "to-nft",
        "--dry-run",
        "--once",
        "--metrics-bind-address=",
    ];
    let (code, _, quiet) = kpng_env(&args, &[]);
    assert_eq!(code, 0, "{quiet}");
    assert!(quiet.contains(" INFO "), "{quiet}");
    assert!(!quiet.contains("DEBUG"), "{quiet}");
    let mut verbose_args = args.to_vec();
    verbose_args.push("--v=2");
    let (code, _, verbose) = kpng_env(&verbose_args, &[]);
    assert_eq!(code, 0, "{verbose}");
    assert!(verbose.contains("DEBUG"), "{verbose}");
    let (code, _, env_wins) = kpng_env(&verbose_args, &[("RUST_LOG", "error")]);
    assert_eq!(code, 0, "{env_wins}");
    assert!(env_wins.is_empty(), "{env_wins}");
}

/// `--hostname-override` before `--config` was refused: flags and the
/// file go in any order.
#[test]
fn flags_and_config_go_in_any_order() {
    let dir = Dir::new("order");
    let config = dir.file(
        "kpng.yaml",
        "source: file\nsink: to-nft\nflags:\n  dry-run: true\n  once: true\n  healthz-bind-address: \"\"\n  metrics-bind-address: \"\"\n",
    );
    let want = sample_dry_run(&[]);
    let config_flag = format!("--config={config}");
    for args in [
        vec!["--hostname-override=node-a", config_flag.as_str()],
        vec![config_flag.as_str(), "--hostname-override", "node-a"],
        vec!["--hostname-override", "node-a", "--config", config.as_str()],
    ] {
        let (code, stdout, stderr) = kpng(&args);
        assert_eq!(code, 0, "{args:?}: {stderr}");
        assert_eq!(stdout, want, "{args:?}");
    }
}

/// A YAML list in kpng's own file gave `invalid --cluster-cidr:
/// "[\"10.244.0.0/16\""`, and its errors named a generated flag.
#[test]
fn a_list_in_kpngs_file_is_a_list_and_errors_name_the_field() {
    let dir = Dir::new("list");
    let config = dir.file(
        "kpng.yaml",
        "source: file\nnode: node-a\nsink: to-nft\nflags:\n  dry-run: true\n  once: true\n  metrics-bind-address: \"\"\n  healthz-bind-address: \"\"\n  cluster-cidr: [10.244.0.0/16, fd00:10:244::/56]\n",
    );
    let (code, stdout, stderr) = kpng(&["--config", &config]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout,
        sample_dry_run(&["--cluster-cidr=10.244.0.0/16,fd00:10:244::/56"])
    );
    let bad = dir.file(
        "bad.yaml",
        "source: file\nnode: node-a\nsink: to-nft\nflags:\n  dry-run: true\n  cluster-cidr: [10.244.0.0/16, 10.0.0.0/33]\n",
    );
    let (code, _, stderr) = kpng(&["--config", &bad]);
    assert_ne!(code, 0);
    assert_eq!(
        stderr.trim(),
        format!("error: {bad}: flags.cluster-cidr[1]: \"10.0.0.0/33\" is not a CIDR")
    );
}

/// kubeadm's `config.conf`, its kubeconfig at `kubeconfig`, changed by
/// `edit`, written into `dir`; its path.
fn kubeadm_config(dir: &Dir, kubeconfig: &str, edit: &dyn Fn(String) -> String) -> String {
    let text = include_str!("kubeadm-config.conf")
        .replace("/var/lib/kube-proxy/kubeconfig.conf", kubeconfig);
    dir.file("config.conf", &edit(text))
}

/// A bad value in a `KubeProxyConfiguration` named a generated flag
/// (`invalid --nodeport-addresses: "10.0.0.0/33"`) and came after the
/// metrics port was bound: now it names the file's field, and nothing is
/// bound first (the metrics address is held by the test: a bind would
/// fail first).
#[test]
fn kube_proxy_config_errors_name_the_field_before_anything_is_bound() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let address = held.local_addr().expect("address").to_string();
    let dir = Dir::new("field");
    let config = kubeadm_config(&dir, "/nonexistent/kubeconfig", &|text| {
        text.replace(
            "nodePortAddresses: null",
            "nodePortAddresses: [10.0.0.0/33]",
        )
        .replace(
            "metricsBindAddress: \"\"",
            &format!("metricsBindAddress: \"{address}\""),
        )
    });
    let (code, stdout, stderr) =
        kpng(&[&format!("--config={config}"), "--hostname-override=node-a"]);
    assert_ne!(code, 0);
    assert!(stdout.is_empty());
    assert_eq!(
        stderr.trim(),
        format!("error: {config}: nodePortAddresses[0]: \"10.0.0.0/33\" is not a CIDR")
    );
    drop(held);
}

/// A test apiserver (in this process) serving one Service, `shop/cart`
/// (10.96.7.7:80), with one endpoint (10.244.3.9:8080 on node-b) and
/// node-a; its kubeconfig is written to `dir`. It serves on the runtime's
/// threads until both are dropped.
fn serve_cart(
    dir: &Dir,
) -> (
    tokio::runtime::Runtime,
    kpng_testkit::apiserver::ApiServer,
    String,
) {
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
    let kubeconfig = dir.file("kubeconfig.conf", &server.kubeconfig());
    (runtime, server, kubeconfig)
}

/// `v1alpha2` as kube-proxy's KEP-784 defines it (`detectLocal.clusterCIDRs`,
/// a `linux` section, top-level `minSyncPeriod`): "unknown field" before.
/// With `mode: ipvs` (refused before), the nftables backend serves it and
/// each IPVS setting gets a warning: an IPVS cluster moves by swapping the
/// image.
#[test]
fn v1alpha2_and_ipvs_mode_run_kpng() {
    let dir = Dir::new("v1alpha2");
    let (runtime, server, kubeconfig) = serve_cart(&dir);
    let config = dir.file(
        "config.conf",
        &format!(
            "apiVersion: kubeproxy.config.k8s.io/v1alpha2
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: {kubeconfig}
detectLocal:
  clusterCIDRs: [10.244.0.0/16]
linux:
  masqueradeAll: false
  conntrack:
    maxPerCore: 0
metricsBindAddresses: [127.0.0.0/8]
metricsBindPort: 0
healthzBindAddresses: [127.0.0.0/8]
healthzBindPort: 0
minSyncPeriod: 1s
mode: ipvs
ipvs:
  scheduler: rr
  strictARP: true
"
        ),
    );
    let out = Command::new(env!("CARGO_BIN_EXE_kpng"))
        .args([
            "--hostname-override=node-a",
            &format!("--config={config}"),
            "--dry-run",
            "--once",
        ])
        .env("RUST_LOG", "warn")
        .output()
        .expect("kpng");
    drop(server);
    drop(runtime);
    let (code, stdout, stderr) = support::text(&out);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("add table ip kpng"), "{stdout}");
    assert!(stdout.contains("10.96.7.7 . tcp . 80"), "{stdout}");
    assert!(stdout.contains("10.244.3.9 . 8080"), "{stdout}");
    // IPVS's rr: in turn.
    assert!(stdout.contains("numgen inc mod"), "{stdout}");
    for warned in [
        "mode: ipvs: served by kpng's nftables backend",
        "ipvs.scheduler: rr: served as --balancing round-robin",
        "ipvs.strictARP: ",
    ] {
        assert!(stderr.contains(warned), "{warned} in {stderr}");
    }
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
}
