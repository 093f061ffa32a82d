//! kube-proxy's words read as kube-proxy reads them.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::{is_kube_proxy_config, words};

/// The document `text` parses to.
fn yaml(text: &str) -> serde_json::Value {
    serde_saphyr::from_str(text).expect("YAML")
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// [`words`] on `kpng ARGS…`.
fn run(args: &[&str]) -> Result<(Vec<String>, Vec<String>), String> {
    let mut argv = vec!["kpng".to_owned()];
    argv.extend(strings(args));
    words(&argv).map(|w| (w.argv, w.warnings))
}

/// [`words`] on `kpng --config=FILE ARGS…`, FILE holding `text`.
fn with_file(text: &str, args: &[&str]) -> Result<(Vec<String>, Vec<String>), String> {
    static N: AtomicUsize = AtomicUsize::new(0);
    let path = std::env::temp_dir().join(format!(
        "kpng-kube-proxy-{}-{}.conf",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&path, text).expect("write");
    let mut all = vec![format!("--config={}", path.display())];
    all.extend(strings(args));
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    let result = run(&refs);
    let _ = std::fs::remove_file(&path);
    result
}

/// The `config.conf` of the `kube-proxy` ConfigMap kubeadm writes
/// (kubeadm 1.31, `podSubnet: 10.244.0.0/16`), with `mode: nftables`.
const KUBEADM: &str = include_str!("../../tests/kubeadm-config.conf");

/// kube-proxy's internal configuration as KEP-784's `v1alpha2` writes
/// it, kube-proxy's defaults filled in (its scheme's round-trip test
/// data), with a pod CIDR pair and a kubeconfig.
const V1ALPHA2: &str = "apiVersion: kubeproxy.config.k8s.io/v1alpha2
bindAddressHardFail: false
clientConnection:
  acceptContentTypes: \"\"
  burst: 0
  contentType: \"\"
  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf
  qps: 0
configHardFail: true
configSyncPeriod: 15m0s
detectLocal:
  clusterCIDRs: [10.244.0.0/16, fd00:10:244::/56]
detectLocalMode: ClusterCIDR
enableProfiling: false
healthzBindAddresses:
- 0.0.0.0/0
- ::/0
healthzBindPort: 10256
iptables:
  localhostNodePorts: false
  masqueradeBit: 14
ipvs:
  masqueradeBit: 14
  strictARP: false
  tcpFinTimeout: 0s
  tcpTimeout: 0s
  udpTimeout: 0s
kind: KubeProxyConfiguration
linux:
  conntrack:
    maxPerCore: 32768
    min: 131072
    tcpBeLiberal: false
    tcpCloseWaitTimeout: 1h0m0s
    tcpEstablishedTimeout: 24h0m0s
    udpStreamTimeout: 0s
    udpTimeout: 0s
  masqueradeAll: false
  oomScoreAdj: 0
logging:
  flushFrequency: 5s
  format: text
  verbosity: 0
metricsBindAddresses:
- 127.0.0.0/8
- ::1/128
metricsBindPort: 10249
minSyncPeriod: 1s
mode: nftables
nftables:
  masqueradeBit: 14
syncPeriod: 0s
windows:
  runAsService: false
winkernel:
  enableDSR: false
  forwardHealthCheckVip: false
";

#[test]
fn kubeadms_config_map_is_a_kpng_command_line() {
    assert!(is_kube_proxy_config(&yaml(KUBEADM)));
    let (argv, warnings) =
        with_file(KUBEADM, &["--hostname-override=node-a"]).expect("kubeadm's config");
    assert_eq!(
        argv,
        strings(&[
            "kpng",
            "kube",
            "--kubeconfig=/var/lib/kube-proxy/kubeconfig.conf",
            "--node=node-a",
            "to-nft",
            "--cluster-cidr=10.244.0.0/16",
        ])
    );
    assert!(warnings.is_empty(), "{warnings:?}");
}

/// `detectLocal.clusterCIDRs` and `linux` were "unknown field".
#[test]
fn v1alpha2_is_read_as_kube_proxy_defines_it() {
    let (argv, warnings) = with_file(V1ALPHA2, &["--hostname-override=node-a"]).expect("v1alpha2");
    assert_eq!(
        argv,
        strings(&[
            "kpng",
            "kube",
            "--kubeconfig=/var/lib/kube-proxy/kubeconfig.conf",
            "--node=node-a",
            "to-nft",
            "--cluster-cidr=10.244.0.0/16,fd00:10:244::/56",
            "--masquerade-bit=14",
            "--min-sync-period=1s",
            "--healthz-bind-address=[::]:10256",
            "--metrics-bind-address=127.0.0.1:10249",
            "--conntrack-max-per-core=32768",
            "--conntrack-min=131072",
            "--conntrack-tcp-timeout-established=24h0m0s",
            "--conntrack-tcp-timeout-close-wait=1h0m0s",
        ])
    );
    assert!(warnings.is_empty(), "{warnings:?}");
    // v1alpha2's moved fields, set.
    let moved = V1ALPHA2
        .replace("  masqueradeAll: false", "  masqueradeAll: true")
        .replace("  tcpBeLiberal: false", "  tcpBeLiberal: true")
        .replace("minSyncPeriod: 1s", "minSyncPeriod: 2s")
        .replace("syncPeriod: 0s", "syncPeriod: 30s")
        .replace(
            "nftables:\n  masqueradeBit: 14",
            "nftables:\n  masqueradeBit: 12",
        );
    let (argv, warnings) = with_file(&moved, &[]).expect("v1alpha2");
    for flag in [
        "--masquerade-all",
        "--conntrack-tcp-be-liberal",
        "--min-sync-period=2s",
        "--masquerade-bit=12",
    ] {
        assert!(argv.contains(&flag.to_owned()), "{flag} in {argv:?}");
    }
    assert!(
        warnings.iter().any(|w| w.contains(": syncPeriod: ")),
        "{warnings:?}"
    );
    // v1alpha2 is strict, as kube-proxy's decoder is.
    let typo = V1ALPHA2.replace("  masqueradeAll: false", "  masqueradeAl: false");
    let error = with_file(&typo, &[]).expect_err("unknown field");
    assert!(
        error.contains("linux") && error.contains("masqueradeAl"),
        "{error}"
    );
    // v1alpha1's places are not v1alpha2's.
    let moved_away = V1ALPHA2.replace(
        "  strictARP: false",
        "  strictARP: false\n  minSyncPeriod: 1s",
    );
    let error = with_file(&moved_away, &[]).expect_err("v1alpha1's field");
    assert!(
        error.contains("ipvs.minSyncPeriod: unknown field"),
        "{error}"
    );
    let old = V1ALPHA2.replace("detectLocal:\n", "clusterCIDR: 10.0.0.0/8\ndetectLocal:\n");
    let error = with_file(&old, &[]).expect_err("v1alpha1's field");
    assert!(error.contains("clusterCIDR"), "{error}");
}

/// Errors named a generated flag (`invalid --nodeport-addresses:
/// "10.0.0.0/33"`); a list was not read as a list.
#[test]
fn bad_values_are_named_by_the_files_field_or_the_flag() {
    let cases = [
        (
            KUBEADM.replace(
                "nodePortAddresses: null",
                "nodePortAddresses: [10.0.0.0/33]",
            ),
            "nodePortAddresses[0]: \"10.0.0.0/33\" is not a CIDR",
        ),
        (
            KUBEADM.replace(
                "nodePortAddresses: null",
                "nodePortAddresses: [primary, 192.168.0.0/24]",
            ),
            "nodePortAddresses[0]: \"primary\" goes alone",
        ),
        (
            KUBEADM.replace(
                "clusterCIDR: 10.244.0.0/16",
                "clusterCIDR: 10.244.0.0/16,10.300.0.0/16",
            ),
            "clusterCIDR: \"10.300.0.0/16\" is not a CIDR",
        ),
        (
            KUBEADM
                .replace(
                    "udpTimeout: 0s\n  udpStreamTimeout",
                    "udpTimeout: 5x\n  udpStreamTimeout",
                )
                .replace(
                    "  udpTimeout: 0s\ndetectLocal",
                    "  udpTimeout: 5x\ndetectLocal",
                ),
            "conntrack.udpTimeout: \"5x\" is not a duration",
        ),
        (
            KUBEADM.replace(
                "metricsBindAddress: \"\"",
                "metricsBindAddress: localhost:x",
            ),
            "metricsBindAddress: \"localhost:x\" is not IP:PORT or an IP",
        ),
        (
            KUBEADM.replace(
                "  masqueradeBit: null\n  minSyncPeriod: 0s\n  syncPeriod: 0s\nnodePort",
                "  masqueradeBit: 40\n  minSyncPeriod: 0s\n  syncPeriod: 0s\nnodePort",
            ),
            "nftables.masqueradeBit: 40 is not in 0-31",
        ),
        (
            KUBEADM.replace("mode: nftables", "mode: userspace"),
            "mode: \"userspace\"",
        ),
        (
            V1ALPHA2.replace("fd00:10:244::/56", "fd00:10:244::/129"),
            "detectLocal.clusterCIDRs[1]: \"fd00:10:244::/129\" is not a CIDR",
        ),
        (
            V1ALPHA2.replace("clusterCIDRs: [", "clusterCIDRs: 10.0.0.0/8 #["),
            "detectLocal.clusterCIDRs: invalid type",
        ),
    ];
    for (text, want) in cases {
        let error = with_file(&text, &[]).expect_err(want);
        assert!(error.contains(want), "{want:?} in {error}");
    }
    let error = with_file(KUBEADM, &["--nodeport-addresses=10.0.0.0/33"]).expect_err("flag");
    assert_eq!(error, "--nodeport-addresses: \"10.0.0.0/33\" is not a CIDR");
}

/// A field kube-proxy v1alpha1 does not know is ignored with a warning
/// (kube-proxy's lenient decoding of v1alpha1).
#[test]
fn v1alpha1_unknown_fields_are_warnings_as_in_kube_proxy() {
    let typo = KUBEADM.replace("  masqueradeAll: false\n  masqueradeBit: null\n  minSyncPeriod: 0s\n  syncPeriod: 0s\nipvs", "  masqueradeAl: false\nipvs");
    let (_, warnings) = with_file(&typo, &[]).expect("lenient");
    assert!(
        warnings
            .iter()
            .any(|w| w.contains(": iptables.masqueradeAl: not a field")),
        "{warnings:?}"
    );
    let version = KUBEADM.replace("v1alpha1", "v9");
    let error = with_file(&version, &[]).expect_err("version");
    assert!(error.contains("kubeproxy.config.k8s.io/v9"), "{error}");
    let wrong_type = KUBEADM.replace("clusterCIDR: 10.244.0.0/16", "clusterCIDR: [10.244.0.0/16]");
    let error = with_file(&wrong_type, &[]).expect_err("type");
    assert!(error.contains("clusterCIDR: invalid type"), "{error}");
}

/// `--hostname-override` before `--config` was refused.
#[test]
fn flags_and_config_go_in_any_order() {
    let after = with_file(KUBEADM, &["--hostname-override=node-a"]).expect("after");
    // The file's path goes last here.
    let path =
        std::env::temp_dir().join(format!("kpng-kube-proxy-order-{}.conf", std::process::id()));
    std::fs::write(&path, KUBEADM).expect("write");
    let config = format!("--config={}", path.display());
    let before = run(&["--hostname-override", "node-a", "--config", &config[9..]]);
    let _ = std::fs::remove_file(&path);
    assert_eq!(before.expect("before"), after);
}

/// kube-proxy's flags alone, as a DaemonSet without a ConfigMap runs
/// it; `--iptables-masquerade-bit`, `--iptables-min-sync-period` and
/// `--v` were refused.
#[test]
fn kube_proxys_flags_alone_are_a_command_line() {
    let (argv, warnings) = run(&[
        "--kubeconfig=/k",
        "--v=2",
        "--hostname-override=Node-A",
        "--cluster-cidr",
        "10.244.0.0/16",
        "--iptables-masquerade-bit=12",
        "--iptables-min-sync-period",
        "2s",
        "--nodeport-addresses",
        "primary",
        "--metrics-bind-address=0.0.0.0",
        "--iptables-localhost-nodeports=false",
        "--oom-score-adj=-999",
        "--dry-run",
    ])
    .expect("flags");
    assert_eq!(
        argv,
        strings(&[
            "kpng",
            "--v=2",
            "kube",
            "--kubeconfig=/k",
            "--node=node-a",
            "to-iptables",
            "--cluster-cidr=10.244.0.0/16",
            "--masquerade-bit=12",
            "--min-sync-period=2s",
            "--metrics-bind-address=0.0.0.0:10249",
            "--dry-run",
        ])
    );
    assert!(
        warnings.iter().any(|w| w.starts_with("oomScoreAdj: ")),
        "{warnings:?}"
    );
    for (flag, why) in [
        (
            "--master=https://x",
            "--master (kube-proxy's) is not supported: kpng takes the API server",
        ),
        ("--cleanup", "--cleanup (kube-proxy's) is not supported"),
        ("--healthz-port=1", "deprecated in kube-proxy"),
        ("--proxy-mode=kernelspace", "Windows' mode"),
        ("--v=x", "--v: \"x\" is not a level"),
    ] {
        let error = run(&["--hostname-override=n", flag]).expect_err(flag);
        assert!(error.contains(why), "{why:?} in {error}");
    }
    let error = run(&["--hostname-override=n", "kube"]).expect_err("positional");
    assert!(error.contains("takes flags only"), "{error}");
}

/// kube-proxy's words after a SOURCE: aliases are clap's, ignored
/// flags a warning, refused ones an error that says why.
#[test]
fn kube_proxys_words_beside_kpngs_grammar() {
    let (argv, warnings) = run(&[
        "file",
        "to-nft",
        "-v",
        "4",
        "--ipvs-scheduler",
        "rr",
        "--profiling=false",
        "--dry-run",
    ])
    .expect("kpng's grammar");
    assert_eq!(
        argv,
        strings(&["kpng", "--v=4", "file", "to-nft", "--dry-run"])
    );
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].starts_with("--ipvs-scheduler (kube-proxy's): "));
    let error = run(&["file", "to-nft", "--proxy-mode=ipvs"]).expect_err("proxy-mode");
    assert!(error.contains("the SINK word chooses"), "{error}");
    let error = run(&["kube", "--master", "x", "to-nft"]).expect_err("master");
    assert!(error.contains("not supported"), "{error}");
}

/// `mode: ipvs` was refused: now the nftables backend serves it, and
/// each IPVS-only setting gets a warning saying what happens to it.
#[test]
fn ipvs_mode_is_served_by_nftables_with_a_warning_per_ipvs_setting() {
    let text = KUBEADM
        .replace("mode: nftables", "mode: ipvs")
        .replace("  excludeCIDRs: null", "  excludeCIDRs: [10.1.0.0/16]")
        .replace(
            "  minSyncPeriod: 0s\n  scheduler: \"\"",
            "  minSyncPeriod: 5s\n  scheduler: wrr",
        )
        .replace("  strictARP: false", "  strictARP: true")
        .replace(
            "  tcpFinTimeout: 0s\n  tcpTimeout: 0s\n  udpTimeout: 0s",
            "  tcpFinTimeout: 30s\n  tcpTimeout: 900s\n  udpTimeout: 300s",
        )
        .replace(
            "  masqueradeBit: null\n  minSyncPeriod: 0s\n  syncPeriod: 0s\nipvs",
            "  masqueradeBit: 13\n  minSyncPeriod: 0s\n  syncPeriod: 0s\nipvs",
        );
    let (argv, warnings) = with_file(&text, &["--hostname-override=n"]).expect("ipvs");
    assert_eq!(argv[4], "to-nft", "{argv:?}");
    for flag in [
        "--min-sync-period=5s",
        "--masquerade-bit=13",
        "--balancing=round-robin",
    ] {
        assert!(argv.contains(&flag.to_owned()), "{flag} in {argv:?}");
    }
    for (field, says) in [
        ("mode", "ipvs: served by kpng's nftables backend"),
        ("ipvs.scheduler", "wrr: served as --balancing round-robin"),
        ("ipvs.excludeCIDRs", "none"),
        (
            "ipvs.strictARP",
            "kpng puts no Service address on an interface",
        ),
        ("ipvs.tcpTimeout", "no IPVS connection table"),
        ("ipvs.tcpFinTimeout", "no IPVS connection table"),
        ("ipvs.udpTimeout", "no IPVS connection table"),
    ] {
        assert!(
            warnings
                .iter()
                .any(|w| w.contains(&format!(": {field}: {says}"))),
            "{field}: {says} in {warnings:?}"
        );
    }
    // From the flags, the same.
    let (argv, warnings) = run(&[
        "--proxy-mode=ipvs",
        "--ipvs-scheduler=sh",
        "--ipvs-min-sync-period=3s",
        "--hostname-override=n",
    ])
    .expect("ipvs flags");
    assert!(argv.contains(&"to-nft".to_owned()), "{argv:?}");
    assert!(
        argv.contains(&"--min-sync-period=3s".to_owned()),
        "{argv:?}"
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.starts_with("ipvs.scheduler: sh: served as --balancing maglev")),
        "{warnings:?}"
    );
    assert!(argv.contains(&"--balancing=maglev".to_owned()), "{argv:?}");
    // Least connections has no counterpart: random, said so.
    let (argv, warnings) = run(&[
        "--proxy-mode=ipvs",
        "--ipvs-scheduler=lc",
        "--hostname-override=n",
    ])
    .expect("ipvs flags");
    assert!(argv.contains(&"--balancing=random".to_owned()), "{argv:?}");
    assert!(
        warnings.iter().any(|w| w.contains(
            "lc: served as --balancing random: kpng's data path keeps no connection counts"
        )),
        "{warnings:?}"
    );
}

#[test]
fn settings_map_and_what_kpng_does_not_do_is_named() {
    let text = KUBEADM
            .replace("mode: nftables", "mode: \"\"")
            .replace("  masqueradeAll: false\n  masqueradeBit: null\n  minSyncPeriod: 0s\n  syncPeriod: 0s\nipvs", "  masqueradeAll: true\n  masqueradeBit: 12\n  minSyncPeriod: 1m30s\n  syncPeriod: 30s\nipvs")
            .replace("nodePortAddresses: null", "nodePortAddresses: [192.168.0.0/24]")
            .replace("healthzBindAddress: \"\"", "healthzBindAddress: 0.0.0.0")
            .replace("detectLocalMode: \"\"", "detectLocalMode: NodeCIDR")
            .replace("  tcpBeLiberal: false", "  tcpBeLiberal: true")
            .replace("  verbosity: 0", "  verbosity: 3");
    let (argv, warnings) = with_file(
        &text,
        &[
            "--hostname-override",
            "n1",
            "--dry-run",
            "--cluster-cidr",
            "10.0.0.0/8",
        ],
    )
    .expect("valid");
    assert_eq!(
        argv,
        strings(&[
            "kpng",
            "--v=3",
            "kube",
            "--kubeconfig=/var/lib/kube-proxy/kubeconfig.conf",
            "--node=n1",
            "to-iptables",
            "--cluster-cidr=10.0.0.0/8",
            "--masquerade-all",
            "--masquerade-bit=12",
            "--min-sync-period=1m30s",
            "--nodeport-addresses=192.168.0.0/24",
            "--healthz-bind-address=0.0.0.0:10256",
            "--conntrack-tcp-be-liberal",
            "--dry-run",
        ])
    );
    for field in [
        "iptables.syncPeriod",
        "iptables.localhostNodePorts",
        "detectLocalMode",
    ] {
        assert!(
            warnings.iter().any(|w| w.contains(&format!(": {field}: "))),
            "{field} in {warnings:?}"
        );
    }
}

/// One loader reads both versions: a `v1alpha1` file and the `v1alpha2`
/// file kube-proxy converts it to load the same settings in every mode
/// (only where each came from differs). In ipvs mode `v1alpha1`'s bit is
/// iptables', `v1alpha2`'s its own `ipvs.masqueradeBit`.
#[test]
fn equivalent_v1alpha1_and_v1alpha2_files_load_the_same_settings() {
    use super::settings::Settings;
    let load = |text: &str| {
        let mut warnings = Vec::new();
        let mut settings = Settings::from_file("f", yaml(text), &mut warnings).expect(text);
        settings.origin.clear();
        settings.path = None;
        (format!("{settings:?}"), warnings)
    };
    for mode in ["iptables", "nftables", "ipvs"] {
        let own = |section: &str| {
            let all = match mode {
                "nftables" => "nftables",
                _ => "iptables",
            };
            let mut text = String::new();
            if section == all {
                text.push_str("  masqueradeAll: true\n");
            }
            if section == mode {
                text.push_str("  syncPeriod: 30s\n  minSyncPeriod: 2s\n");
            }
            text
        };
        let v1alpha1 = format!(
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: {mode}
clientConnection:
  kubeconfig: /k
hostnameOverride: node-a
healthzBindAddress: 0.0.0.0:10256
metricsBindAddress: 127.0.0.1:10249
clusterCIDR: 10.244.0.0/16,fd00:10:244::/56
iptables:
  masqueradeBit: 12
  localhostNodePorts: false
{}nftables:
  masqueradeBit: 13
{}ipvs:
  scheduler: sh
{}conntrack:
  maxPerCore: 32768
  tcpEstablishedTimeout: 24h0m0s
oomScoreAdj: -999
",
            own("iptables"),
            own("nftables"),
            own("ipvs"),
        );
        let v1alpha2 = format!(
            "apiVersion: kubeproxy.config.k8s.io/v1alpha2
kind: KubeProxyConfiguration
mode: {mode}
clientConnection:
  kubeconfig: /k
hostnameOverride: node-a
healthzBindAddress: 0.0.0.0:10256
metricsBindAddress: 127.0.0.1:10249
detectLocal:
  clusterCIDRs: [10.244.0.0/16, fd00:10:244::/56]
iptables:
  masqueradeBit: 12
  localhostNodePorts: false
nftables:
  masqueradeBit: 13
ipvs:
  masqueradeBit: 12
  scheduler: sh
linux:
  masqueradeAll: true
  conntrack:
    maxPerCore: 32768
    tcpEstablishedTimeout: 24h0m0s
  oomScoreAdj: -999
syncPeriod: 30s
minSyncPeriod: 2s
"
        );
        let (one, warnings_one) = load(&v1alpha1);
        let (two, warnings_two) = load(&v1alpha2);
        assert_eq!(one, two, "mode {mode}");
        assert_eq!(warnings_one, warnings_two, "mode {mode}");
        assert!(one.contains("masquerade_all: true"), "{one}");
    }
}

/// `--iptables-localhost-nodeports` (and `iptables.localhostNodePorts`):
/// taken by `to-ebpf` as `--localhost-nodeports` beside kpng's grammar;
/// in iptables mode (on by default, as kube-proxy's) and, when asked, in
/// nftables mode, a warning naming the setting and the eBPF backend, as
/// the netfilter backends serve no NodePort on loopback.
#[test]
fn localhost_nodeports_reach_the_ebpf_backend_and_are_named_elsewhere() {
    let (argv, warnings) =
        run(&["kube", "to-ebpf", "--iptables-localhost-nodeports=false"]).expect("kpng grammar");
    assert_eq!(
        argv,
        strings(&[
            "kpng",
            "kube",
            "to-ebpf",
            "--iptables-localhost-nodeports=false"
        ])
    );
    assert!(warnings.is_empty(), "{warnings:?}");

    let (_, warnings) = run(&["--proxy-mode=iptables"]).expect("flags");
    let said: Vec<&String> = warnings
        .iter()
        .filter(|w| w.starts_with("iptables.localhostNodePorts: "))
        .collect();
    assert!(
        said.len() == 1 && said[0].contains("route_localnet") && said[0].contains("to-ebpf"),
        "{warnings:?}"
    );
    let (_, warnings) = run(&[
        "--proxy-mode=iptables",
        "--iptables-localhost-nodeports=false",
    ])
    .expect("flags");
    assert!(
        !warnings.iter().any(|w| w.contains("localhost")),
        "{warnings:?}"
    );
    let (argv, warnings) = run(&[
        "--proxy-mode=nftables",
        "--iptables-localhost-nodeports=true",
    ])
    .expect("flags");
    assert!(argv.contains(&"to-nft".to_owned()), "{argv:?}");
    assert!(
        warnings.iter().any(
            |w| w.starts_with("--iptables-localhost-nodeports: mode nftables: ")
                && w.contains("serves no NodePort on loopback")
                && w.contains("to-ebpf")
        ),
        "{warnings:?}"
    );
    let (_, warnings) = run(&["--proxy-mode=nftables"]).expect("flags");
    assert!(
        !warnings.iter().any(|w| w.contains("localhost")),
        "{warnings:?}"
    );
    let (_, warnings) = with_file(
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: nftables\nnftables:\n  localhostNodePorts: true\n",
        &[],
    )
    .expect("lenient");
    assert!(
        warnings
            .iter()
            .any(|w| w.contains(": nftables.localhostNodePorts: ")
                && w.contains("serves no NodePort on loopback")),
        "{warnings:?}"
    );
}
