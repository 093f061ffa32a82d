//! kube-proxy's own configuration file, `KubeProxyConfiguration`
//! (`kubeproxy.config.k8s.io/v1alpha1` and `v1alpha2`), as the kpng
//! command line it stands for, with kube-proxy's flags beside it: a
//! kubeadm cluster's kube-proxy DaemonSet (`--config=… --hostname-override=…`)
//! and ConfigMap run kpng unchanged. What kpng does not do is a warning
//! that names it; a field kube-proxy does not know is an error that names
//! it.

use std::collections::BTreeMap;

use serde::Deserialize;

/// The API versions read.
const VERSIONS: [&str; 2] = [
    "kubeproxy.config.k8s.io/v1alpha1",
    "kubeproxy.config.k8s.io/v1alpha2",
];

/// Whether a config file's document is a `KubeProxyConfiguration` (by
/// its `kind`).
pub(crate) fn is_kube_proxy_config(doc: &serde_json::Value) -> bool {
    doc.get("kind").and_then(serde_json::Value::as_str) == Some("KubeProxyConfiguration")
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Config {
    api_version: String,
    #[allow(dead_code)] // checked by is_kube_proxy_config
    kind: String,
    #[serde(default)]
    feature_gates: Option<BTreeMap<String, bool>>,
    #[serde(default)]
    client_connection: ClientConnection,
    #[serde(default)]
    logging: Option<serde_json::Value>,
    #[serde(default)]
    hostname_override: String,
    #[serde(default)]
    bind_address: String,
    #[serde(default)]
    healthz_bind_address: String,
    #[serde(default)]
    metrics_bind_address: String,
    #[serde(default)]
    bind_address_hard_fail: bool,
    #[serde(default)]
    enable_profiling: bool,
    #[serde(default)]
    show_hidden_metrics_for_version: String,
    #[serde(default)]
    mode: String,
    #[serde(default)]
    iptables: ModeSection,
    #[serde(default)]
    ipvs: Option<serde_json::Value>,
    #[serde(default)]
    nftables: ModeSection,
    #[serde(default)]
    winkernel: Option<serde_json::Value>,
    #[serde(default)]
    detect_local_mode: String,
    #[serde(default)]
    detect_local: DetectLocal,
    #[serde(default, rename = "clusterCIDR")]
    cluster_cidr: String,
    #[serde(default)]
    node_port_addresses: Option<Vec<String>>,
    #[serde(default)]
    oom_score_adj: Option<i32>,
    #[serde(default)]
    conntrack: Conntrack,
    #[serde(default)]
    config_sync_period: String,
    #[serde(default)]
    port_range: String,
    #[serde(default)]
    windows_run_as_service: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ClientConnection {
    #[serde(default)]
    kubeconfig: String,
    #[serde(default)]
    accept_content_types: String,
    #[serde(default)]
    content_type: String,
    #[serde(default)]
    qps: f64,
    #[serde(default)]
    burst: i64,
}

/// The `iptables` and `nftables` sections (`localhostNodePorts` is the
/// iptables one's only).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ModeSection {
    #[serde(default)]
    masquerade_all: bool,
    #[serde(default)]
    masquerade_bit: Option<i32>,
    #[serde(default)]
    localhost_node_ports: Option<bool>,
    #[serde(default)]
    sync_period: String,
    #[serde(default)]
    min_sync_period: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct DetectLocal {
    #[serde(default)]
    bridge_interface: String,
    #[serde(default)]
    interface_name_prefix: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Conntrack {
    #[serde(default)]
    max_per_core: Option<i32>,
    #[serde(default)]
    min: Option<i32>,
    #[serde(default)]
    tcp_established_timeout: Option<String>,
    #[serde(default)]
    tcp_close_wait_timeout: Option<String>,
    #[serde(default)]
    tcp_be_liberal: bool,
    #[serde(default)]
    udp_timeout: String,
    #[serde(default)]
    udp_stream_timeout: String,
}

/// kube-proxy's flags that are not kpng's, as the config fields they set.
const KUBE_PROXY_FLAGS: [(&str, &str); 2] = [
    ("hostname-override", "hostnameOverride"),
    ("proxy-mode", "mode"),
];

/// The kpng command line `doc` (a `KubeProxyConfiguration` read from
/// `path`) stands for, with `extra` (the flags after `--config`) applied:
/// kube-proxy's `--hostname-override` and `--proxy-mode` set those fields,
/// and kpng's flags (`--cluster-cidr`, `--dry-run`, …) override the
/// file's. Also returns the warnings, one per setting kpng does not honour.
///
/// # Errors
/// A field kube-proxy does not know, a value of the wrong type, an
/// unknown API version or a mode kpng has no backend for, each named.
pub(crate) fn command_line(
    path: &str,
    mut doc: serde_json::Value,
    extra: &[String],
) -> Result<(Vec<String>, Vec<String>), String> {
    let mut rest = Vec::new();
    let mut args = extra.iter();
    while let Some(arg) = args.next() {
        let flag = arg.strip_prefix("--").unwrap_or(arg);
        let (name, inline) = match flag.split_once('=') {
            Some((name, value)) => (name, Some(value.to_owned())),
            None => (flag, None),
        };
        match KUBE_PROXY_FLAGS.iter().find(|(f, _)| *f == name) {
            Some((_, field)) => {
                let value = inline
                    .or_else(|| args.next().cloned())
                    .ok_or_else(|| format!("--{name} needs a value"))?;
                if let Some(map) = doc.as_object_mut() {
                    map.insert((*field).to_owned(), serde_json::Value::String(value));
                }
            }
            None => rest.push(arg.clone()),
        }
    }
    let config: Config = serde_path_to_error::deserialize(doc).map_err(|e| {
        let at = e.path().to_string();
        format!("{path}: {at}: {}", e.into_inner())
    })?;
    if !VERSIONS.contains(&config.api_version.as_str()) {
        return Err(format!(
            "{path}: apiVersion {:?}: kpng reads {}",
            config.api_version,
            VERSIONS.join(" and ")
        ));
    }
    let mut warnings = Vec::new();
    let mut warn = |field: &str, why: &str| warnings.push(format!("{path}: {field}: {why}"));

    let mut source = vec!["kube".to_owned()];
    if !config.client_connection.kubeconfig.is_empty() {
        source.push(format!(
            "--kubeconfig={}",
            config.client_connection.kubeconfig
        ));
    }
    if !config.hostname_override.is_empty() {
        source.push(format!("--node={}", config.hostname_override));
    }
    let cc = &config.client_connection;
    if !cc.accept_content_types.is_empty() || !cc.content_type.is_empty() {
        warn("clientConnection.contentType", "kpng's client speaks JSON");
    }
    if cc.qps != 0.0 || cc.burst != 0 {
        warn(
            "clientConnection.qps",
            "kpng's client sets no rate limit of its own",
        );
    }

    // kube-proxy's default on Linux is iptables.
    let (sink, section, section_name) = match config.mode.as_str() {
        "nftables" => ("to-nft", &config.nftables, "nftables"),
        "iptables" | "" => ("to-iptables", &config.iptables, "iptables"),
        other => {
            return Err(format!(
                "{path}: mode {other:?}: kpng has nftables and iptables backends"
            ));
        }
    };
    let mut flags = Vec::new();
    if !config.cluster_cidr.is_empty() {
        flags.push(format!("--cluster-cidr={}", config.cluster_cidr));
    }
    if section.masquerade_all {
        flags.push("--masquerade-all".to_owned());
    }
    if let Some(bit) = section.masquerade_bit {
        flags.push(format!("--masquerade-bit={bit}"));
    }
    if !is_zero(&section.min_sync_period) {
        flags.push(format!("--min-sync-period={}", section.min_sync_period));
    }
    if !is_zero(&section.sync_period) {
        warn(
            &format!("{section_name}.syncPeriod"),
            "kpng syncs on changes and retries failures; it has no periodic full resync",
        );
    }
    if section_name == "iptables" && section.localhost_node_ports != Some(false) {
        warn(
            "iptables.localhostNodePorts",
            "kpng never serves NodePorts on loopback",
        );
    }
    if let Some(list) = &config.node_port_addresses {
        // `primary` is the node's own addresses: kpng's default.
        let cidrs: Vec<&str> = list
            .iter()
            .map(String::as_str)
            .filter(|a| *a != "primary")
            .collect();
        if !cidrs.is_empty() {
            if cidrs.len() < list.len() {
                warn(
                    "nodePortAddresses",
                    "`primary` beside CIDRs: the CIDRs are used",
                );
            }
            flags.push(format!("--nodeport-addresses={}", cidrs.join(",")));
        }
    }
    if !config.healthz_bind_address.is_empty() {
        flags.push(format!(
            "--healthz-bind-address={}",
            with_port(&config.healthz_bind_address, 10256)
        ));
    }
    if !config.metrics_bind_address.is_empty() {
        flags.push(format!(
            "--metrics-bind-address={}",
            with_port(&config.metrics_bind_address, 10249)
        ));
    }
    match config.detect_local_mode.as_str() {
        "" | "ClusterCIDR" => {}
        other => warn(
            "detectLocalMode",
            &format!("{other}: kpng tells local traffic by clusterCIDR only"),
        ),
    }
    let dl = &config.detect_local;
    if !dl.bridge_interface.is_empty() || !dl.interface_name_prefix.is_empty() {
        warn(
            "detectLocal",
            "kpng tells local traffic by clusterCIDR only",
        );
    }
    // The conntrack settings: a null is kube-proxy's default, which is
    // kpng's too.
    let ct = &config.conntrack;
    if let Some(v) = ct.max_per_core {
        flags.push(format!("--conntrack-max-per-core={v}"));
    }
    if let Some(v) = ct.min {
        flags.push(format!("--conntrack-min={v}"));
    }
    if let Some(v) = &ct.tcp_established_timeout {
        flags.push(format!("--conntrack-tcp-timeout-established={v}"));
    }
    if let Some(v) = &ct.tcp_close_wait_timeout {
        flags.push(format!("--conntrack-tcp-timeout-close-wait={v}"));
    }
    if ct.tcp_be_liberal {
        flags.push("--conntrack-tcp-be-liberal".to_owned());
    }
    if !is_zero(&ct.udp_timeout) {
        flags.push(format!("--conntrack-udp-timeout={}", ct.udp_timeout));
    }
    if !is_zero(&ct.udp_stream_timeout) {
        flags.push(format!(
            "--conntrack-udp-timeout-stream={}",
            ct.udp_stream_timeout
        ));
    }
    if config.feature_gates.as_ref().is_some_and(|g| !g.is_empty()) {
        warn("featureGates", "kpng has none");
    }
    if !config.bind_address.is_empty() && config.bind_address != "0.0.0.0" {
        warn(
            "bindAddress",
            "kpng takes the node's addresses from its Node object",
        );
    }
    if config.enable_profiling {
        warn("enableProfiling", "kpng serves no profiles");
    }
    if config.oom_score_adj.is_some_and(|v| v != 0) {
        warn("oomScoreAdj", "kpng leaves it to the pod spec");
    }
    if !config.port_range.is_empty() {
        warn("portRange", "kpng has no userspace proxy");
    }
    if !config.show_hidden_metrics_for_version.is_empty() {
        warn("showHiddenMetricsForVersion", "kpng has no hidden metrics");
    }
    let verbose = config
        .logging
        .as_ref()
        .and_then(|l| l.get("verbosity")?.as_u64())
        .is_some_and(|v| v > 0);
    if verbose {
        warn("logging.verbosity", "kpng's logs follow RUST_LOG");
    }
    // Ignored, as kube-proxy on Linux ignores them: ipvs and winkernel
    // (other modes), configSyncPeriod (deprecated), bindAddressHardFail
    // and windowsRunAsService.
    let _ = (
        &config.ipvs,
        &config.winkernel,
        &config.config_sync_period,
        config.bind_address_hard_fail,
        config.windows_run_as_service,
    );

    // kpng's own flags on the command line win over the file's.
    let (extra_source, extra_sink) = crate::config::split_extra("kube", sink, &rest);
    let given = crate::config::given_flags(&rest);
    let keep =
        |flag: &String| crate::config::flag_name(flag).is_none_or(|name| !given.contains(name));
    let mut argv = vec!["kpng".to_owned()];
    argv.push(source.remove(0));
    argv.extend(source.into_iter().filter(keep));
    argv.extend(extra_source);
    argv.push(sink.to_owned());
    argv.extend(flags.into_iter().filter(keep));
    argv.extend(extra_sink);
    Ok((argv, warnings))
}

/// Whether a Go duration is zero or unset (`""`, `0`, `0s`).
fn is_zero(duration: &str) -> bool {
    duration.is_empty()
        || duration
            .trim_end_matches(|c: char| c.is_ascii_alphabetic())
            .chars()
            .all(|c| c == '0' || c == '.')
}

/// `address` with `port` added when it has none (`0.0.0.0` →
/// `0.0.0.0:10256`).
fn with_port(address: &str, port: u16) -> String {
    if address.parse::<std::net::SocketAddr>().is_ok() {
        address.to_owned()
    } else if let Ok(ip) = address.parse::<std::net::IpAddr>() {
        std::net::SocketAddr::new(ip, port).to_string()
    } else {
        address.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::is_kube_proxy_config;

    /// The document `text` parses to.
    fn yaml(text: &str) -> serde_json::Value {
        serde_saphyr::from_str(text).expect("YAML")
    }

    /// [`super::command_line`] on `text`.
    fn command_line(
        path: &str,
        text: &str,
        extra: &[String],
    ) -> Result<(Vec<String>, Vec<String>), String> {
        super::command_line(path, yaml(text), extra)
    }

    /// The `config.conf` of the `kube-proxy` ConfigMap kubeadm writes
    /// (kubeadm 1.31, `podSubnet: 10.244.0.0/16`), with `mode: nftables`.
    const KUBEADM: &str = include_str!("../tests/kubeadm-config.conf");

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn kubeadms_config_map_is_a_kpng_command_line() {
        assert!(is_kube_proxy_config(&yaml(KUBEADM)));
        let (argv, warnings) = command_line(
            "config.conf",
            KUBEADM,
            &strings(&["--hostname-override=node-a"]),
        )
        .expect("kubeadm's config");
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

    #[test]
    fn settings_map_and_what_kpng_does_not_do_is_named() {
        let text = KUBEADM
            .replace("mode: nftables", "mode: \"\"")
            .replace("  masqueradeAll: false\n  masqueradeBit: null\n  minSyncPeriod: 0s\n  syncPeriod: 0s\nipvs", "  masqueradeAll: true\n  masqueradeBit: 12\n  minSyncPeriod: 1m30s\n  syncPeriod: 30s\nipvs")
            .replace("nodePortAddresses: null", "nodePortAddresses: [primary, 192.168.0.0/24]")
            .replace("healthzBindAddress: \"\"", "healthzBindAddress: 0.0.0.0")
            .replace("detectLocalMode: \"\"", "detectLocalMode: NodeCIDR")
            .replace("  tcpBeLiberal: false", "  tcpBeLiberal: true");
        let (argv, warnings) = command_line(
            "c.conf",
            &text,
            &strings(&[
                "--hostname-override",
                "n1",
                "--dry-run",
                "--cluster-cidr",
                "10.0.0.0/8",
            ]),
        )
        .expect("valid");
        assert_eq!(
            argv,
            strings(&[
                "kpng",
                "kube",
                "--kubeconfig=/var/lib/kube-proxy/kubeconfig.conf",
                "--node=n1",
                "to-iptables",
                "--masquerade-all",
                "--masquerade-bit=12",
                "--min-sync-period=1m30s",
                "--nodeport-addresses=192.168.0.0/24",
                "--healthz-bind-address=0.0.0.0:10256",
                "--conntrack-tcp-be-liberal",
                "--dry-run",
                "--cluster-cidr",
                "10.0.0.0/8",
            ])
        );
        for field in [
            "iptables.syncPeriod",
            "iptables.localhostNodePorts",
            "nodePortAddresses",
            "detectLocalMode",
        ] {
            assert!(
                warnings
                    .iter()
                    .any(|w| w.contains(&format!("c.conf: {field}: "))),
                "{field} in {warnings:?}"
            );
        }
    }

    #[test]
    fn unknown_fields_versions_and_modes_are_errors_by_name() {
        let typo = KUBEADM.replace("clusterCIDR:", "clustrCIDR:");
        let error = command_line("c.conf", &typo, &[]).expect_err("unknown field");
        assert!(error.contains("clustrCIDR"), "{error}");
        let nested = KUBEADM.replace("  masqueradeAll: false\n  masqueradeBit: null\n  minSyncPeriod: 0s\n  syncPeriod: 0s\nipvs", "  masqueradeAl: false\nipvs");
        let error = command_line("c.conf", &nested, &[]).expect_err("unknown field");
        assert!(
            error.contains("iptables") && error.contains("masqueradeAl"),
            "{error}"
        );
        let version = KUBEADM.replace("v1alpha1", "v9");
        let error = command_line("c.conf", &version, &[]).expect_err("version");
        assert!(error.contains("kubeproxy.config.k8s.io/v9"), "{error}");
        let ipvs = KUBEADM.replace("mode: nftables", "mode: ipvs");
        let error = command_line("c.conf", &ipvs, &[]).expect_err("mode");
        assert!(error.contains("\"ipvs\""), "{error}");
        let flag = command_line("c.conf", KUBEADM, &strings(&["--proxy-mode"]));
        assert!(flag.expect_err("no value").contains("--proxy-mode"));
    }
}
