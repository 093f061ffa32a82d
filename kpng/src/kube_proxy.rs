//! kube-proxy's words: its command line (`kpng --config=FILE
//! --hostname-override=NODE`, or its flags alone, in any order) and its
//! configuration file, `KubeProxyConfiguration` (`kubeproxy.config.k8s.io`
//! `v1alpha1` and `v1alpha2`), turned into the kpng command line they
//! stand for. A kubeadm cluster's kube-proxy DaemonSet and ConfigMap run
//! kpng unchanged. What kpng does not do is a warning that names it; a
//! bad value is an error that names the file's field (or the flag), found
//! before anything is bound or started.
//!
//! kube-proxy 1.34–1.37 (`k8s.io/kube-proxy` v0.34–v0.37) publishes
//! `v1alpha1` only. `v1alpha2` is KEP-784's design, the shape of
//! kube-proxy's internal configuration since 1.31: `linux` (conntrack,
//! masqueradeAll, oomScoreAdj), top-level `syncPeriod` and
//! `minSyncPeriod`, `detectLocal.clusterCIDRs`, a `masqueradeBit` per mode.

pub(crate) mod flags;

use std::collections::BTreeMap;

use serde::Deserialize;

use self::flags::{Does, Flag};

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

/// A command line read: the kpng command line it stands for, and the
/// warnings to log once the log is set up.
#[derive(Debug)]
pub(crate) struct Words {
    /// kpng's command line, for clap.
    pub(crate) argv: Vec<String>,
    /// One per setting kpng does not honour.
    pub(crate) warnings: Vec<String>,
}

/// Reads a command line in kpng's grammar (`kpng SOURCE … SINK …`, where
/// kube-proxy's flag names are taken too) or in kube-proxy's (flags only:
/// `--config`, `--hostname-override`, `--proxy-mode`, … in any order, with
/// kpng's own flags beside them).
///
/// # Errors
/// A flag kpng refuses, a file it cannot read, or a bad value, each named.
pub(crate) fn words(args: &[String]) -> Result<Words, String> {
    let mut warnings = Vec::new();
    let (verbosity, args) = take_verbosity(args)?;
    let program = args.first().cloned().unwrap_or_else(|| "kpng".to_owned());
    let rest = args.get(1..).unwrap_or_default();
    let kpng_grammar = rest.first().is_none_or(|first| {
        !first.starts_with('-') || ["-h", "--help", "-V", "--version"].contains(&first.as_str())
    });
    let (mut argv, file_verbosity) = if kpng_grammar {
        let mut argv = vec![program];
        argv.extend(kpng_flags(rest, &mut warnings)?);
        (argv, None)
    } else {
        kube_proxy_command_line(rest, &mut warnings)?
    };
    if let Some(v) = verbosity.or(file_verbosity) {
        argv.insert(1, format!("--v={v}"));
    }
    Ok(Words { argv, warnings })
}

/// Takes klog's `-v N`, `-v=N`, `--v N`, `--v=N` (and `-vN`) out of the
/// command line, wherever they are.
fn take_verbosity(args: &[String]) -> Result<(Option<u8>, Vec<String>), String> {
    let mut verbosity = None;
    let mut rest = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let value = match arg.as_str() {
            "-v" | "--v" => Some(it.next().cloned().ok_or("--v needs a level")?),
            other => other
                .strip_prefix("--v=")
                .or_else(|| other.strip_prefix("-v="))
                .or_else(|| {
                    other
                        .strip_prefix("-v")
                        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                })
                .map(str::to_owned),
        };
        match value {
            Some(level) => {
                let n: u64 = level
                    .trim()
                    .parse()
                    .map_err(|_| format!("--v: {level:?} is not a level (0, 1, 2, …)"))?;
                verbosity = Some(u8::try_from(n).unwrap_or(u8::MAX));
            }
            None => rest.push(arg.clone()),
        }
    }
    Ok((verbosity, rest))
}

/// Whether clap knows `--name` anywhere in kpng's commands (by name or
/// alias), and whether it takes a value. The top-level kube-proxy words
/// (`--config`, `--hostname-override`, `--proxy-mode`) are read here, not
/// by clap, so they do not count.
fn clap_flag(name: &str) -> Option<bool> {
    use clap::CommandFactory as _;
    fn walk(cmd: &clap::Command, name: &str) -> Option<bool> {
        cmd.get_arguments()
            .find(|a| {
                a.get_long() == Some(name)
                    || a.get_all_aliases().is_some_and(|al| al.contains(&name))
            })
            .map(|a| a.get_action().takes_values())
            .or_else(|| cmd.get_subcommands().find_map(|c| walk(c, name)))
    }
    let cli = crate::args::Cli::command();
    cli.get_subcommands().find_map(|c| walk(c, name))
}

/// A flag's name and its value given inline (`--name=value`).
fn split_flag(arg: &str) -> Option<(&str, Option<&str>)> {
    let long = arg.strip_prefix("--")?;
    Some(match long.split_once('=') {
        Some((name, value)) => (name, Some(value)),
        None => (long, None),
    })
}

/// Whether a boolean flag's value is true (`--flag`, `--flag=true`).
fn truthy(value: &str) -> Result<bool, String> {
    match value {
        "true" | "1" | "t" | "T" | "TRUE" | "True" => Ok(true),
        "false" | "0" | "f" | "F" | "FALSE" | "False" => Ok(false),
        other => Err(format!("{other:?} is not true or false")),
    }
}

/// kpng's grammar, with kube-proxy's flags that kpng has no flag for
/// handled: ignored ones dropped with a warning, refused ones an error
/// that says why. kpng's own flags (and kube-proxy's that clap knows as
/// aliases) are left to clap.
fn kpng_flags(args: &[String], warnings: &mut Vec<String>) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let Some((name, inline)) = split_flag(arg) else {
            out.push(arg.clone());
            continue;
        };
        let Some(flag) = flags::find(name)
            .filter(|f| !["help", "version"].contains(&f.name) && clap_flag(name).is_none())
        else {
            out.push(arg.clone());
            continue;
        };
        let value = match (flag.value, inline) {
            (_, Some(v)) => v.to_owned(),
            (true, None) => it
                .next()
                .cloned()
                .ok_or_else(|| format!("--{name} needs a value"))?,
            (false, None) => "true".to_owned(),
        };
        match flag.does {
            Does::Ignored(why) => {
                let default = match name {
                    "detect-local-mode" => value == "ClusterCIDR",
                    _ => !flag.value && !truthy(&value).unwrap_or(true),
                };
                if !default {
                    warnings.push(format!("--{name} (kube-proxy's): {why}"));
                }
            }
            Does::Refused(why) => {
                return Err(format!("--{name} (kube-proxy's) is not supported: {why}"));
            }
            Does::Takes | Does::Alias(_) => {
                return Err(format!(
                    "--{name} is kube-proxy's command line (`kpng --config=FILE …` or kube-proxy's flags, with no SOURCE); after a SOURCE, the SINK word chooses the backend and kpng's flags follow it (kpng --help)"
                ));
            }
        }
    }
    Ok(out)
}

/// kube-proxy's command line: flags only, in any order. `--config` names
/// a `KubeProxyConfiguration` (or kpng's own YAML); kube-proxy's flags
/// set its fields (the command line wins over the file), and kpng's own
/// flags (`--dry-run`, `--once`, …) go to the kpng command line. Returns
/// that command line and the file's `logging.verbosity`.
fn kube_proxy_command_line(
    args: &[String],
    warnings: &mut Vec<String>,
) -> Result<(Vec<String>, Option<u8>), String> {
    let mut config_path = None;
    let mut given: Vec<(&'static Flag, String)> = Vec::new();
    let mut kpng = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if arg == "-h" {
            return Ok((vec!["kpng".to_owned(), "--help".to_owned()], None));
        }
        let Some((name, inline)) = split_flag(arg) else {
            return Err(format!(
                "{arg:?}: kube-proxy's command line takes flags only (kpng's starts with a SOURCE: file, kube or api)"
            ));
        };
        match flags::find(name) {
            Some(flag) => {
                let value = match (flag.value, inline) {
                    (_, Some(v)) => v.to_owned(),
                    (true, None) => it
                        .next()
                        .cloned()
                        .ok_or_else(|| format!("--{name} needs a value"))?,
                    (false, None) => "true".to_owned(),
                };
                match name {
                    "help" => return Ok((vec!["kpng".to_owned(), "--help".to_owned()], None)),
                    "version" => {
                        return Ok((vec!["kpng".to_owned(), "--version".to_owned()], None));
                    }
                    "config" => config_path = Some(value),
                    _ => given.push((flag, value)),
                }
            }
            None => {
                kpng.push(arg.clone());
                if inline.is_none() && clap_flag(name) == Some(true) {
                    kpng.extend(it.next().cloned());
                }
            }
        }
    }
    // The mode first: other flags depend on it, as in kube-proxy.
    given.sort_by_key(|(flag, _)| flag.name != "proxy-mode");
    let mut settings = match &config_path {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
            let doc: serde_json::Value =
                serde_saphyr::from_str(&text).map_err(|e| format!("{path}: {e}"))?;
            if !is_kube_proxy_config(&doc) {
                let extra = kpng_words_beside_kpng_file(&given, kpng, warnings)?;
                return Ok((crate::config::config_args(path, &doc, &extra)?, None));
            }
            Settings::from_file(path, doc, warnings)?
        }
        None => Settings::default(),
    };
    for (flag, value) in &given {
        settings.set_flag(flag, value, warnings)?;
    }
    settings.validate()?;
    let verbosity = settings
        .verbosity
        .filter(|v| *v > 0)
        .map(|v| u8::try_from(v).unwrap_or(u8::MAX));
    Ok((settings.command_line(&kpng, warnings)?, verbosity))
}

/// kube-proxy's flags beside kpng's own YAML: taken by kpng's names
/// (`--hostname-override` is `--node`), ignored with a warning, or
/// refused. kpng's file names its sink, so `--proxy-mode` is refused.
fn kpng_words_beside_kpng_file(
    given: &[(&'static Flag, String)],
    mut kpng: Vec<String>,
    warnings: &mut Vec<String>,
) -> Result<Vec<String>, String> {
    let mut extra = Vec::new();
    for (flag, value) in given {
        let name = flag.name;
        match flag.does {
            Does::Alias(to) => extra.push(format!("--{to}={value}")),
            Does::Takes if name != "proxy-mode" && clap_flag(name).is_some() => {
                if !flag.value {
                    if truthy(value).map_err(|e| format!("--{name}: {e}"))? {
                        extra.push(format!("--{name}"));
                    }
                } else {
                    extra.push(format!("--{name}={value}"));
                }
            }
            Does::Ignored(why) => warnings.push(format!("--{name} (kube-proxy's): {why}")),
            Does::Refused(why) => {
                return Err(format!("--{name} (kube-proxy's) is not supported: {why}"));
            }
            Does::Takes => {
                return Err(format!(
                    "--{name} goes with a KubeProxyConfiguration or kube-proxy's flags; kpng's own file names its sink"
                ));
            }
        }
    }
    extra.append(&mut kpng);
    Ok(extra)
}

/// Where a setting came from: a file's field (`config.conf:
/// nodePortAddresses`) or a flag (`--nodeport-addresses`), and whether it
/// is a list (its errors then name the entry: `nodePortAddresses[0]`).
#[derive(Debug, Clone)]
struct Origin {
    name: String,
    list: bool,
}

/// kube-proxy's settings, as its internal configuration holds them (the
/// shape of `v1alpha2`), read from either version and from its flags.
#[derive(Debug, Default)]
struct Settings {
    /// Where each setting checked or warned about came from, by the
    /// `v1alpha2` field path.
    origin: BTreeMap<&'static str, Origin>,
    /// The file read, if any, for messages.
    path: Option<String>,
    kubeconfig: String,
    content_type: bool,
    rate_limit: bool,
    hostname_override: String,
    bind_address: String,
    healthz_bind_address: String,
    metrics_bind_address: String,
    enable_profiling: bool,
    show_hidden_metrics: bool,
    mode: String,
    masquerade_all: bool,
    /// `iptables`', `nftables`' and `ipvs`' masquerade bits; `v1alpha1`'s
    /// ipvs mode uses iptables'.
    masquerade_bit: BTreeMap<&'static str, i64>,
    localhost_node_ports: Option<bool>,
    sync_period: String,
    min_sync_period: String,
    ipvs: IpvsSettings,
    detect_local_mode: String,
    detect_local_interface: bool,
    cluster_cidrs: Vec<String>,
    node_port_addresses: Option<Vec<String>>,
    conntrack: Conntrack,
    oom_score_adj: Option<i64>,
    feature_gates: bool,
    verbosity: Option<u64>,
    port_range: String,
}

/// The `ipvs` settings, each a warning in `mode: ipvs`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct IpvsSettings {
    #[serde(default)]
    scheduler: String,
    #[serde(default, rename = "excludeCIDRs")]
    exclude_cidrs: Option<Vec<String>>,
    #[serde(default, rename = "strictARP")]
    strict_arp: bool,
    #[serde(default)]
    tcp_timeout: String,
    #[serde(default)]
    tcp_fin_timeout: String,
    #[serde(default)]
    udp_timeout: String,
    // v1alpha1's (the mode's sync periods) and v1alpha2's (its own bit).
    #[serde(default)]
    sync_period: String,
    #[serde(default)]
    min_sync_period: String,
    #[serde(default)]
    masquerade_bit: Option<i64>,
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

/// `v1alpha1`'s `iptables` and `nftables` sections (`localhostNodePorts`
/// is iptables' only); `v1alpha2` keeps only the bits and
/// `localhostNodePorts` there.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ModeSection {
    #[serde(default)]
    masquerade_all: bool,
    #[serde(default)]
    masquerade_bit: Option<i64>,
    #[serde(default)]
    localhost_node_ports: Option<bool>,
    #[serde(default)]
    sync_period: String,
    #[serde(default)]
    min_sync_period: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct V2ModeSection {
    #[serde(default)]
    masquerade_bit: Option<i64>,
    #[serde(default)]
    localhost_node_ports: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct DetectLocal {
    #[serde(default)]
    bridge_interface: String,
    #[serde(default)]
    interface_name_prefix: String,
    /// v1alpha2's.
    #[serde(default, rename = "clusterCIDRs")]
    cluster_cidrs: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Conntrack {
    #[serde(default)]
    max_per_core: Option<i64>,
    #[serde(default)]
    min: Option<i64>,
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

/// `kubeproxy.config.k8s.io/v1alpha1`, as kube-proxy 1.34–1.37 define it.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct V1alpha1 {
    #[allow(dead_code)] // checked before
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
    ipvs: IpvsSettings,
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
    oom_score_adj: Option<i64>,
    #[serde(default)]
    conntrack: Conntrack,
    #[serde(default)]
    config_sync_period: String,
    #[serde(default)]
    port_range: String,
    #[serde(default)]
    windows_run_as_service: bool,
}

/// `v1alpha2`'s `linux` section.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Linux {
    #[serde(default)]
    conntrack: Conntrack,
    #[serde(default)]
    masquerade_all: bool,
    #[serde(default)]
    oom_score_adj: Option<i64>,
}

/// `kubeproxy.config.k8s.io/v1alpha2`, as KEP-784 designs it (kube-proxy's
/// internal configuration, with the KEP's additions: bind address lists
/// and ports, `configHardFail`, `nodeIPOverride`, `ipFamilyPolicy`).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct V1alpha2 {
    #[allow(dead_code)] // checked before
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
    #[serde(default, rename = "nodeIPOverride")]
    node_ip_override: Option<Vec<String>>,
    #[serde(default)]
    ip_family_policy: String,
    #[serde(default)]
    healthz_bind_address: String,
    #[serde(default)]
    metrics_bind_address: String,
    #[serde(default)]
    healthz_bind_addresses: Option<Vec<String>>,
    #[serde(default)]
    healthz_bind_port: Option<u16>,
    #[serde(default)]
    metrics_bind_addresses: Option<Vec<String>>,
    #[serde(default)]
    metrics_bind_port: Option<u16>,
    #[serde(default)]
    bind_address_hard_fail: Option<bool>,
    #[serde(default)]
    config_hard_fail: Option<bool>,
    #[serde(default)]
    enable_profiling: bool,
    #[serde(default)]
    show_hidden_metrics_for_version: String,
    #[serde(default)]
    mode: String,
    #[serde(default)]
    iptables: V2ModeSection,
    #[serde(default)]
    ipvs: IpvsSettings,
    #[serde(default)]
    nftables: V2ModeSection,
    #[serde(default)]
    winkernel: Option<serde_json::Value>,
    #[serde(default)]
    windows: Option<serde_json::Value>,
    #[serde(default)]
    linux: Linux,
    #[serde(default)]
    detect_local_mode: String,
    #[serde(default)]
    detect_local: DetectLocal,
    #[serde(default)]
    node_port_addresses: Option<Vec<String>>,
    #[serde(default)]
    sync_period: String,
    #[serde(default)]
    min_sync_period: String,
    #[serde(default)]
    config_sync_period: String,
}

/// `doc` as `T`, an error naming the file's field.
fn typed<T: serde::de::DeserializeOwned>(path: &str, doc: serde_json::Value) -> Result<T, String> {
    serde_path_to_error::deserialize(doc).map_err(|e| {
        let at = e.path().to_string();
        format!("{path}: {at}: {}", e.into_inner())
    })
}

/// `v1alpha1` as kube-proxy reads it: strictly, and when only unknown
/// fields stand in the way, leniently, with a warning per field (kube-proxy
/// logs "Using lenient decoding as strict decoding failed" and goes on).
fn lenient_v1alpha1(
    path: &str,
    mut doc: serde_json::Value,
    warnings: &mut Vec<String>,
) -> Result<V1alpha1, String> {
    // Each round removes one unknown field; a document has finitely many.
    loop {
        let error = match serde_path_to_error::deserialize::<_, V1alpha1>(doc.clone()) {
            Ok(config) => return Ok(config),
            Err(error) => error,
        };
        let message = error.inner().to_string();
        let unknown = message
            .strip_prefix("unknown field `")
            .and_then(|m| m.split_once('`'))
            .map(|(field, _)| field.to_owned());
        let segments: Vec<String> = error
            .path()
            .iter()
            .map(|s| match s {
                serde_path_to_error::Segment::Map { key } => key.clone(),
                other => other.to_string(),
            })
            .collect();
        let Some(field) = unknown else {
            return Err(format!("{path}: {}: {message}", error.path()));
        };
        let parent = match segments.split_last() {
            Some((last, parent)) if *last == field => parent.to_vec(),
            _ => segments,
        };
        let mut node = &mut doc;
        for key in &parent {
            node = match node.get_mut(key.as_str()) {
                Some(next) => next,
                None => return Err(format!("{path}: {}: {message}", error.path())),
            };
        }
        let removed = node.as_object_mut().and_then(|map| map.remove(&field));
        if removed.is_none() {
            return Err(format!("{path}: {}: {message}", error.path()));
        }
        let at = parent
            .iter()
            .chain(std::iter::once(&field))
            .cloned()
            .collect::<Vec<_>>()
            .join(".");
        warnings.push(format!(
            "{path}: {at}: not a field of v1alpha1; ignored, as kube-proxy ignores it (lenient decoding)"
        ));
    }
}

impl Settings {
    fn set_origin(&mut self, key: &'static str, name: String, list: bool) {
        self.origin.insert(key, Origin { name, list });
    }

    /// Where setting `key` came from, for messages.
    fn at(&self, key: &'static str) -> Origin {
        self.origin.get(key).cloned().unwrap_or(Origin {
            name: key.to_owned(),
            list: false,
        })
    }

    /// A `KubeProxyConfiguration` read from `path`.
    fn from_file(
        path: &str,
        doc: serde_json::Value,
        warnings: &mut Vec<String>,
    ) -> Result<Self, String> {
        let version = doc
            .get("apiVersion")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let mut settings = match version.as_str() {
            "kubeproxy.config.k8s.io/v1alpha1" => {
                Self::from_v1alpha1(path, lenient_v1alpha1(path, doc, warnings)?, warnings)
            }
            "kubeproxy.config.k8s.io/v1alpha2" => {
                Self::from_v1alpha2(path, typed(path, doc)?, warnings)?
            }
            _ => {
                return Err(format!(
                    "{path}: apiVersion {version:?}: kpng reads {}",
                    VERSIONS.join(" and ")
                ));
            }
        };
        settings.path = Some(path.to_owned());
        Ok(settings)
    }

    fn from_v1alpha1(path: &str, c: V1alpha1, warnings: &mut Vec<String>) -> Self {
        let mut s = Settings::default();
        let field = |name: &str| format!("{path}: {name}");
        // The mode's section holds masqueradeAll and the sync periods;
        // ipvs mode takes iptables' masquerade settings.
        let (section, name) = match c.mode.as_str() {
            "nftables" => (&c.nftables, "nftables"),
            _ => (&c.iptables, "iptables"),
        };
        s.masquerade_all = section.masquerade_all;
        s.set_origin(
            "linux.masqueradeAll",
            field(&format!("{name}.masqueradeAll")),
            false,
        );
        if c.mode == "ipvs" {
            s.sync_period.clone_from(&c.ipvs.sync_period);
            s.min_sync_period.clone_from(&c.ipvs.min_sync_period);
            s.set_origin("minSyncPeriod", field("ipvs.minSyncPeriod"), false);
            s.set_origin("syncPeriod", field("ipvs.syncPeriod"), false);
        } else {
            s.sync_period.clone_from(&section.sync_period);
            s.min_sync_period.clone_from(&section.min_sync_period);
            s.set_origin(
                "minSyncPeriod",
                field(&format!("{name}.minSyncPeriod")),
                false,
            );
            s.set_origin("syncPeriod", field(&format!("{name}.syncPeriod")), false);
        }
        for (mode, bit) in [
            ("iptables", c.iptables.masquerade_bit),
            ("nftables", c.nftables.masquerade_bit),
            ("ipvs", c.iptables.masquerade_bit),
        ] {
            if let Some(bit) = bit {
                s.masquerade_bit.insert(mode, bit);
            }
        }
        s.set_origin(
            "iptables.masqueradeBit",
            field("iptables.masqueradeBit"),
            false,
        );
        s.set_origin(
            "nftables.masqueradeBit",
            field("nftables.masqueradeBit"),
            false,
        );
        s.set_origin("ipvs.masqueradeBit", field("iptables.masqueradeBit"), false);
        s.localhost_node_ports = c.iptables.localhost_node_ports;
        if !c.cluster_cidr.is_empty() {
            s.cluster_cidrs = c.cluster_cidr.split(',').map(str::to_owned).collect();
        }
        s.set_origin("detectLocal.clusterCIDRs", field("clusterCIDR"), false);
        if c.nftables.localhost_node_ports.is_some() {
            warnings.push(format!(
                "{path}: nftables.localhostNodePorts: not a field of v1alpha1 (iptables' only); ignored"
            ));
        }
        if c.ipvs.masquerade_bit.is_some() {
            warnings.push(format!(
                "{path}: ipvs.masqueradeBit: not a field of v1alpha1 (ipvs mode takes iptables.masqueradeBit); ignored"
            ));
        }
        if c.detect_local.cluster_cidrs.is_some() {
            warnings.push(format!(
                "{path}: detectLocal.clusterCIDRs: v1alpha2's field; v1alpha1's is clusterCIDR (ignored)"
            ));
        }
        s.kubeconfig = c.client_connection.kubeconfig.clone();
        s.common(
            path,
            &c.client_connection,
            c.hostname_override,
            c.bind_address,
            c.healthz_bind_address,
            c.metrics_bind_address,
            c.mode,
            c.node_port_addresses,
            c.detect_local_mode,
            &c.detect_local,
            c.conntrack,
            "conntrack",
        );
        s.ipvs = c.ipvs;
        s.oom_score_adj = c.oom_score_adj;
        s.enable_profiling = c.enable_profiling;
        s.show_hidden_metrics = !c.show_hidden_metrics_for_version.is_empty();
        s.feature_gates = c.feature_gates.is_some_and(|g| !g.is_empty());
        s.verbosity = verbosity_of(c.logging.as_ref());
        s.port_range = c.port_range;
        // Ignored, as kube-proxy on Linux ignores them: winkernel (Windows'
        // mode), configSyncPeriod (kpng watches), bindAddressHardFail
        // (kpng always exits when it cannot bind) and windowsRunAsService.
        let _ = (
            c.winkernel,
            c.config_sync_period,
            c.bind_address_hard_fail,
            c.windows_run_as_service,
        );
        s
    }

    fn from_v1alpha2(path: &str, c: V1alpha2, warnings: &mut Vec<String>) -> Result<Self, String> {
        let mut s = Settings::default();
        let field = |name: &str| format!("{path}: {name}");
        s.masquerade_all = c.linux.masquerade_all;
        s.set_origin("linux.masqueradeAll", field("linux.masqueradeAll"), false);
        s.sync_period = c.sync_period;
        s.min_sync_period = c.min_sync_period;
        s.set_origin("minSyncPeriod", field("minSyncPeriod"), false);
        s.set_origin("syncPeriod", field("syncPeriod"), false);
        for (mode, bit) in [
            ("iptables", c.iptables.masquerade_bit),
            ("nftables", c.nftables.masquerade_bit),
            ("ipvs", c.ipvs.masquerade_bit),
        ] {
            if let Some(bit) = bit {
                s.masquerade_bit.insert(mode, bit);
            }
        }
        s.set_origin(
            "iptables.masqueradeBit",
            field("iptables.masqueradeBit"),
            false,
        );
        s.set_origin(
            "nftables.masqueradeBit",
            field("nftables.masqueradeBit"),
            false,
        );
        s.set_origin("ipvs.masqueradeBit", field("ipvs.masqueradeBit"), false);
        s.localhost_node_ports = c.iptables.localhost_node_ports;
        if c.nftables.localhost_node_ports.is_some() {
            return Err(format!(
                "{path}: nftables.localhostNodePorts: unknown field (iptables' only)"
            ));
        }
        for (field, value) in [
            ("syncPeriod", &c.ipvs.sync_period),
            ("minSyncPeriod", &c.ipvs.min_sync_period),
        ] {
            if !value.is_empty() {
                return Err(format!(
                    "{path}: ipvs.{field}: unknown field (v1alpha2's is `{field}` at the top)"
                ));
            }
        }
        s.cluster_cidrs = c.detect_local.cluster_cidrs.clone().unwrap_or_default();
        s.set_origin(
            "detectLocal.clusterCIDRs",
            field("detectLocal.clusterCIDRs"),
            true,
        );
        // The KEP's lists of bind addresses with one port.
        let healthz = bind_from_list(
            path,
            "healthzBindAddresses",
            c.healthz_bind_addresses.as_deref(),
            c.healthz_bind_port,
            10256,
            warnings,
        )?;
        let metrics = bind_from_list(
            path,
            "metricsBindAddresses",
            c.metrics_bind_addresses.as_deref(),
            c.metrics_bind_port,
            10249,
            warnings,
        )?;
        s.kubeconfig = c.client_connection.kubeconfig.clone();
        s.common(
            path,
            &c.client_connection,
            c.hostname_override,
            c.bind_address,
            healthz.unwrap_or(c.healthz_bind_address),
            metrics.unwrap_or(c.metrics_bind_address),
            c.mode,
            c.node_port_addresses,
            c.detect_local_mode,
            &c.detect_local,
            c.linux.conntrack,
            "linux.conntrack",
        );
        s.ipvs = c.ipvs;
        s.oom_score_adj = c.linux.oom_score_adj;
        s.enable_profiling = c.enable_profiling;
        s.show_hidden_metrics = !c.show_hidden_metrics_for_version.is_empty();
        s.feature_gates = c.feature_gates.is_some_and(|g| !g.is_empty());
        s.verbosity = verbosity_of(c.logging.as_ref());
        if c.node_ip_override.as_ref().is_some_and(|l| !l.is_empty()) {
            warnings.push(format!(
                "{path}: nodeIPOverride: kpng takes the node's addresses from its Node object"
            ));
        }
        if !c.ip_family_policy.is_empty() {
            warnings.push(format!(
                "{path}: ipFamilyPolicy: kpng serves each family the Services have"
            ));
        }
        // configHardFail: kpng always refuses a bad config.
        let _ = (
            c.winkernel,
            c.windows,
            c.config_sync_period,
            c.bind_address_hard_fail,
            c.config_hard_fail,
        );
        Ok(s)
    }

    /// The settings both versions hold in the same place.
    #[allow(clippy::too_many_arguments)]
    fn common(
        &mut self,
        path: &str,
        cc: &ClientConnection,
        hostname_override: String,
        bind_address: String,
        healthz: String,
        metrics: String,
        mode: String,
        node_port_addresses: Option<Vec<String>>,
        detect_local_mode: String,
        detect_local: &DetectLocal,
        conntrack: Conntrack,
        conntrack_at: &str,
    ) {
        let field = |name: &str| format!("{path}: {name}");
        self.content_type = !cc.accept_content_types.is_empty() || !cc.content_type.is_empty();
        self.rate_limit = cc.qps != 0.0 || cc.burst != 0;
        self.hostname_override = hostname_override;
        self.bind_address = bind_address;
        self.healthz_bind_address = healthz;
        self.set_origin("healthzBindAddress", field("healthzBindAddress"), false);
        self.metrics_bind_address = metrics;
        self.set_origin("metricsBindAddress", field("metricsBindAddress"), false);
        self.mode = mode;
        self.set_origin("mode", field("mode"), false);
        self.node_port_addresses = node_port_addresses;
        self.set_origin("nodePortAddresses", field("nodePortAddresses"), true);
        self.detect_local_mode = detect_local_mode;
        self.set_origin("detectLocalMode", field("detectLocalMode"), false);
        self.detect_local_interface = !detect_local.bridge_interface.is_empty()
            || !detect_local.interface_name_prefix.is_empty();
        self.conntrack = conntrack;
        for (key, name) in [
            ("conntrack.tcpEstablishedTimeout", "tcpEstablishedTimeout"),
            ("conntrack.tcpCloseWaitTimeout", "tcpCloseWaitTimeout"),
            ("conntrack.udpTimeout", "udpTimeout"),
            ("conntrack.udpStreamTimeout", "udpStreamTimeout"),
            ("conntrack.maxPerCore", "maxPerCore"),
            ("conntrack.min", "min"),
        ] {
            self.set_origin(key, field(&format!("{conntrack_at}.{name}")), false);
        }
        for (key, name) in [
            ("ipvs.tcpTimeout", "ipvs.tcpTimeout"),
            ("ipvs.tcpFinTimeout", "ipvs.tcpFinTimeout"),
            ("ipvs.udpTimeout", "ipvs.udpTimeout"),
        ] {
            self.set_origin(key, field(name), false);
        }
        self.set_origin("ipvs.excludeCIDRs", field("ipvs.excludeCIDRs"), true);
    }

    /// One of kube-proxy's flags, over the file's setting.
    fn set_flag(
        &mut self,
        flag: &'static Flag,
        value: &str,
        warnings: &mut Vec<String>,
    ) -> Result<(), String> {
        let name = flag.name;
        let here = format!("--{name}");
        let bad = |e: String| format!("--{name}: {e}");
        let number = || -> Result<i64, String> {
            value
                .trim()
                .parse()
                .map_err(|_| bad(format!("{value:?} is not a number")))
        };
        let boolean = || truthy(value).map_err(bad);
        let list = || -> Vec<String> {
            value
                .split(',')
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
                .collect()
        };
        match name {
            "kubeconfig" => self.kubeconfig = value.to_owned(),
            "hostname-override" => {
                // As kube-proxy: trimmed, lower case, never empty.
                let host = value.trim();
                if host.is_empty() {
                    return Err("--hostname-override: an empty name is invalid".to_owned());
                }
                self.hostname_override = host.to_lowercase();
            }
            "healthz-bind-address" => {
                self.healthz_bind_address = value.to_owned();
                self.set_origin("healthzBindAddress", here, false);
            }
            "metrics-bind-address" => {
                self.metrics_bind_address = value.to_owned();
                self.set_origin("metricsBindAddress", here, false);
            }
            "proxy-mode" => {
                self.mode = value.to_owned();
                self.set_origin("mode", here, false);
            }
            "iptables-masquerade-bit" => {
                // kube-proxy's flag sets iptables' bit, which ipvs mode
                // uses too; nftables mode has its own (set in the file).
                let bit = number()?;
                self.masquerade_bit.insert("iptables", bit);
                self.set_origin("iptables.masqueradeBit", here.clone(), false);
                if self.mode == "ipvs" {
                    self.masquerade_bit.insert("ipvs", bit);
                    self.set_origin("ipvs.masqueradeBit", here, false);
                }
                if self.mode == "nftables" {
                    warnings.push(format!(
                        "--{name}: nftables mode takes nftables.masqueradeBit, as in kube-proxy; the flag is ignored"
                    ));
                }
            }
            "masquerade-all" => {
                self.masquerade_all = boolean()?;
                self.set_origin("linux.masqueradeAll", here, false);
            }
            "iptables-localhost-nodeports" => self.localhost_node_ports = Some(boolean()?),
            "iptables-min-sync-period" | "ipvs-min-sync-period" => {
                if (name == "ipvs-min-sync-period") == (self.mode == "ipvs") {
                    self.min_sync_period = value.to_owned();
                    self.set_origin("minSyncPeriod", here, false);
                } else {
                    warnings.push(format!(
                        "--{name}: ignored in mode {:?}, as kube-proxy ignores it",
                        self.mode
                    ));
                }
            }
            "iptables-sync-period" | "ipvs-sync-period" => {
                if (name == "ipvs-sync-period") == (self.mode == "ipvs") {
                    self.sync_period = value.to_owned();
                    self.set_origin("syncPeriod", here, false);
                }
            }
            "ipvs-scheduler" => self.ipvs.scheduler = value.to_owned(),
            "ipvs-exclude-cidrs" => {
                self.ipvs.exclude_cidrs = Some(list());
                self.set_origin("ipvs.excludeCIDRs", here, false);
            }
            "ipvs-strict-arp" => self.ipvs.strict_arp = boolean()?,
            "ipvs-tcp-timeout" => {
                self.ipvs.tcp_timeout = value.to_owned();
                self.set_origin("ipvs.tcpTimeout", here, false);
            }
            "ipvs-tcpfin-timeout" => {
                self.ipvs.tcp_fin_timeout = value.to_owned();
                self.set_origin("ipvs.tcpFinTimeout", here, false);
            }
            "ipvs-udp-timeout" => {
                self.ipvs.udp_timeout = value.to_owned();
                self.set_origin("ipvs.udpTimeout", here, false);
            }
            "detect-local-mode" => {
                self.detect_local_mode = value.to_owned();
                self.set_origin("detectLocalMode", here, false);
            }
            "pod-bridge-interface" | "pod-interface-name-prefix" => {
                self.detect_local_interface = !value.is_empty();
            }
            "cluster-cidr" => {
                self.cluster_cidrs = list();
                self.set_origin("detectLocal.clusterCIDRs", here, false);
            }
            "nodeport-addresses" => {
                self.node_port_addresses = Some(list());
                self.set_origin("nodePortAddresses", here, false);
            }
            "oom-score-adj" => self.oom_score_adj = Some(number()?),
            "conntrack-max-per-core" => {
                self.conntrack.max_per_core = Some(number()?);
                self.set_origin("conntrack.maxPerCore", here, false);
            }
            "conntrack-min" => {
                self.conntrack.min = Some(number()?);
                self.set_origin("conntrack.min", here, false);
            }
            "conntrack-tcp-timeout-established" => {
                self.conntrack.tcp_established_timeout = Some(value.to_owned());
                self.set_origin("conntrack.tcpEstablishedTimeout", here, false);
            }
            "conntrack-tcp-timeout-close-wait" => {
                self.conntrack.tcp_close_wait_timeout = Some(value.to_owned());
                self.set_origin("conntrack.tcpCloseWaitTimeout", here, false);
            }
            "conntrack-tcp-be-liberal" => self.conntrack.tcp_be_liberal = boolean()?,
            "conntrack-udp-timeout" => {
                self.conntrack.udp_timeout = value.to_owned();
                self.set_origin("conntrack.udpTimeout", here, false);
            }
            "conntrack-udp-timeout-stream" => {
                self.conntrack.udp_stream_timeout = value.to_owned();
                self.set_origin("conntrack.udpStreamTimeout", here, false);
            }
            "feature-gates" => self.feature_gates = !value.is_empty(),
            "kube-api-content-type" => self.content_type = !value.is_empty(),
            "kube-api-qps" | "kube-api-burst" => self.rate_limit = value.trim() != "0",
            "bind-address" => self.bind_address = value.to_owned(),
            "profiling" => self.enable_profiling = boolean()?,
            "show-hidden-metrics-for-version" => self.show_hidden_metrics = !value.is_empty(),
            "bind-address-hard-fail" | "config-sync-period" => {}
            _ => match flag.does {
                Does::Ignored(why) => {
                    if flag.value || truthy(value).unwrap_or(true) {
                        warnings.push(format!("--{name} (kube-proxy's): {why}"));
                    }
                }
                Does::Refused(why) => {
                    return Err(format!("--{name} (kube-proxy's) is not supported: {why}"));
                }
                Does::Takes | Does::Alias(_) => {
                    return Err(format!("--{name}: not taken on kube-proxy's command line"));
                }
            },
        }
        Ok(())
    }

    /// Checks every value kpng uses, naming the file's field (or the flag)
    /// of the first bad one: before anything is bound or started.
    fn validate(&self) -> Result<(), String> {
        let cidr = |key: &'static str, i: usize, text: &str| -> Result<(), String> {
            kpng_model::addr::canonical_cidr(key, text)
                .map(|_| ())
                .map_err(|_| {
                    let at = self.at(key);
                    let index = if at.list {
                        format!("[{i}]")
                    } else {
                        String::new()
                    };
                    format!("{}{index}: {text:?} is not a CIDR", at.name)
                })
        };
        for (i, c) in self.cluster_cidrs.iter().enumerate() {
            cidr("detectLocal.clusterCIDRs", i, c.trim())?;
        }
        if let Some(list) = &self.node_port_addresses {
            for (i, a) in list.iter().enumerate() {
                if a == "primary" {
                    if list.len() > 1 {
                        let at = self.at("nodePortAddresses");
                        let index = if at.list {
                            format!("[{i}]")
                        } else {
                            String::new()
                        };
                        return Err(format!(
                            "{}{index}: \"primary\" goes alone, not beside CIDRs (as kube-proxy says)",
                            at.name
                        ));
                    }
                    continue;
                }
                cidr("nodePortAddresses", i, a.trim())?;
            }
        }
        for (i, c) in self.ipvs.exclude_cidrs.iter().flatten().enumerate() {
            cidr("ipvs.excludeCIDRs", i, c.trim())?;
        }
        for (key, text, port) in [
            ("healthzBindAddress", &self.healthz_bind_address, 10256),
            ("metricsBindAddress", &self.metrics_bind_address, 10249),
        ] {
            crate::args::bind_address(text, port)
                .map_err(|e| format!("{}: {e}", self.at(key).name))?;
        }
        let ct = &self.conntrack;
        let durations = [
            ("minSyncPeriod", Some(&self.min_sync_period)),
            ("syncPeriod", Some(&self.sync_period)),
            (
                "conntrack.tcpEstablishedTimeout",
                ct.tcp_established_timeout.as_ref(),
            ),
            (
                "conntrack.tcpCloseWaitTimeout",
                ct.tcp_close_wait_timeout.as_ref(),
            ),
            ("conntrack.udpTimeout", Some(&ct.udp_timeout)),
            ("conntrack.udpStreamTimeout", Some(&ct.udp_stream_timeout)),
            ("ipvs.tcpTimeout", Some(&self.ipvs.tcp_timeout)),
            ("ipvs.tcpFinTimeout", Some(&self.ipvs.tcp_fin_timeout)),
            ("ipvs.udpTimeout", Some(&self.ipvs.udp_timeout)),
        ];
        for (key, text) in durations {
            if let Some(text) = text.filter(|t| !t.is_empty()) {
                crate::args::parse_duration(text)
                    .map_err(|e| format!("{}: {e}", self.at(key).name))?;
            }
        }
        for (key, value) in [
            ("conntrack.maxPerCore", ct.max_per_core),
            ("conntrack.min", ct.min),
        ] {
            if let Some(v) = value.filter(|v| *v < 0) {
                return Err(format!("{}: {v} is negative", self.at(key).name));
            }
        }
        for (mode, bit) in &self.masquerade_bit {
            if !(0..=31).contains(bit) {
                let key = match *mode {
                    "nftables" => "nftables.masqueradeBit",
                    "ipvs" => "ipvs.masqueradeBit",
                    _ => "iptables.masqueradeBit",
                };
                return Err(format!("{}: {bit} is not in 0-31", self.at(key).name));
            }
        }
        match self.mode.as_str() {
            "" | "iptables" | "nftables" | "ipvs" => {}
            "kernelspace" => {
                return Err(format!(
                    "{}: \"kernelspace\" is Windows' mode; kpng runs on Linux",
                    self.at("mode").name
                ));
            }
            other => {
                return Err(format!(
                    "{}: {other:?}: kube-proxy's modes are iptables, nftables and ipvs",
                    self.at("mode").name
                ));
            }
        }
        match self.detect_local_mode.as_str() {
            "" | "ClusterCIDR" | "NodeCIDR" | "BridgeInterface" | "InterfaceNamePrefix" => {}
            other => {
                return Err(format!(
                    "{}: {other:?}: kube-proxy's modes are ClusterCIDR, NodeCIDR, BridgeInterface and InterfaceNamePrefix",
                    self.at("detectLocalMode").name
                ));
            }
        }
        Ok(())
    }

    /// The kpng command line these settings stand for, with `kpng` (kpng's
    /// own flags from the command line, which win over the settings'), and
    /// a warning per setting kpng does not honour.
    fn command_line(
        &self,
        kpng: &[String],
        warnings: &mut Vec<String>,
    ) -> Result<Vec<String>, String> {
        let mut warn = |key: &str, why: &str| warnings.push(format!("{key}: {why}"));
        let field = |key: &'static str| self.at(key).name;
        let file = |name: &str| match &self.path {
            Some(path) => format!("{path}: {name}"),
            None => name.to_owned(),
        };

        let mut source = vec!["kube".to_owned()];
        if !self.kubeconfig.is_empty() {
            source.push(format!("--kubeconfig={}", self.kubeconfig));
        }
        if !self.hostname_override.is_empty() {
            source.push(format!("--node={}", self.hostname_override));
        }
        if self.content_type {
            warn(
                &file("clientConnection.contentType"),
                "kpng's client speaks JSON",
            );
        }
        if self.rate_limit {
            warn(
                &file("clientConnection.qps"),
                "kpng's client sets no rate limit of its own",
            );
        }

        // kube-proxy's default on Linux is iptables; ipvs is served by
        // the nftables backend (KEP-5495 removes IPVS).
        let sink = match self.mode.as_str() {
            "nftables" | "ipvs" => "to-nft",
            _ => "to-iptables",
        };
        let mode = match self.mode.as_str() {
            "" => "iptables",
            other => other,
        };
        let mut flags = Vec::new();
        if !self.cluster_cidrs.is_empty() {
            let cidrs: Vec<&str> = self.cluster_cidrs.iter().map(|c| c.trim()).collect();
            flags.push(format!("--cluster-cidr={}", cidrs.join(",")));
        }
        if self.masquerade_all {
            flags.push("--masquerade-all".to_owned());
        }
        if let Some(bit) = self.masquerade_bit.get(mode) {
            flags.push(format!("--masquerade-bit={bit}"));
        }
        if !is_zero(&self.min_sync_period) {
            flags.push(format!("--min-sync-period={}", self.min_sync_period));
        }
        if !is_zero(&self.sync_period) {
            warn(
                &field("syncPeriod"),
                "kpng syncs on changes and retries failures; it has no periodic full resync",
            );
        }
        if mode == "iptables" && self.localhost_node_ports != Some(false) {
            warn(
                &file("iptables.localhostNodePorts"),
                "kpng never serves NodePorts on loopback",
            );
        }
        if let Some(list) = &self.node_port_addresses {
            // `primary` is the node's own addresses: kpng's default.
            if !list.is_empty() && list.iter().all(|a| a != "primary") {
                let cidrs: Vec<&str> = list.iter().map(|a| a.trim()).collect();
                flags.push(format!("--nodeport-addresses={}", cidrs.join(",")));
            }
        }
        for (flag, address, port) in [
            ("healthz-bind-address", &self.healthz_bind_address, 10256),
            ("metrics-bind-address", &self.metrics_bind_address, 10249),
        ] {
            if !address.is_empty() {
                let address = crate::args::bind_address(address, port)?;
                flags.push(format!("--{flag}={address}"));
            }
        }
        match self.detect_local_mode.as_str() {
            "" | "ClusterCIDR" => {}
            other => warn(
                &field("detectLocalMode"),
                &format!("{other}: kpng tells local traffic by clusterCIDR only"),
            ),
        }
        if self.detect_local_interface {
            warn(
                &file("detectLocal"),
                "kpng tells local traffic by clusterCIDR only",
            );
        }
        // The conntrack settings: a null is kube-proxy's default, which is
        // kpng's too.
        let ct = &self.conntrack;
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
        if mode == "ipvs" {
            self.ipvs_warnings(&mut warn, &file);
        }
        if self.feature_gates {
            warn(&file("featureGates"), "kpng has none");
        }
        if !self.bind_address.is_empty()
            && self.bind_address != "0.0.0.0"
            && self.bind_address != "::"
        {
            warn(
                &file("bindAddress"),
                "kpng takes the node's addresses from its Node object",
            );
        }
        if self.enable_profiling {
            warn(&file("enableProfiling"), "kpng serves no profiles");
        }
        if self.oom_score_adj.is_some_and(|v| v != 0) {
            warn(&file("oomScoreAdj"), "kpng leaves it to the pod spec");
        }
        if !self.port_range.is_empty() {
            warn(&file("portRange"), "kpng has no userspace proxy");
        }
        if self.show_hidden_metrics {
            warn(
                &file("showHiddenMetricsForVersion"),
                "kpng has no hidden metrics",
            );
        }

        // kpng's own flags on the command line win over the settings'.
        let (extra_source, extra_sink) = crate::config::split_extra("kube", sink, kpng);
        let given = crate::config::given_flags(kpng);
        let keep =
            |flag: &String| crate::config::flag_name(flag).is_none_or(|name| !given.contains(name));
        let mut argv = vec!["kpng".to_owned()];
        argv.push(source.remove(0));
        argv.extend(source.into_iter().filter(keep));
        argv.extend(extra_source);
        argv.push(sink.to_owned());
        argv.extend(flags.into_iter().filter(keep));
        argv.extend(extra_sink);
        Ok(argv)
    }

    /// `mode: ipvs`, served by the nftables backend: what happens to each
    /// IPVS-only setting.
    fn ipvs_warnings(&self, warn: &mut dyn FnMut(&str, &str), file: &dyn Fn(&str) -> String) {
        warn(
            &file("mode"),
            "ipvs: served by kpng's nftables backend (`to-nft`; KEP-5495 removes IPVS); no IPVS virtual servers and no kube-ipvs0 interface are made",
        );
        let ipvs = &self.ipvs;
        if !ipvs.scheduler.is_empty() {
            warn(
                &file("ipvs.scheduler"),
                &format!(
                    "{}: kpng picks each new connection's endpoint at random, as kube-proxy's nftables and iptables modes do",
                    ipvs.scheduler
                ),
            );
        }
        if ipvs.exclude_cidrs.as_ref().is_some_and(|l| !l.is_empty()) {
            warn(
                &self.at("ipvs.excludeCIDRs").name,
                "none: kpng makes no IPVS virtual servers; those kube-proxy left are all removed once kpng has synced, as kube-proxy's own cleanup flushes them (--keep-kube-proxy-rules keeps them)",
            );
        }
        if ipvs.strict_arp {
            warn(
                &file("ipvs.strictARP"),
                "kpng puts no Service address on an interface, so there is no ARP to restrict; arp_ignore and arp_announce are left as they are",
            );
        }
        for (key, value) in [
            ("ipvs.tcpTimeout", &ipvs.tcp_timeout),
            ("ipvs.tcpFinTimeout", &ipvs.tcp_fin_timeout),
            ("ipvs.udpTimeout", &ipvs.udp_timeout),
        ] {
            if !is_zero(value) {
                warn(
                    &self.at(key).name,
                    "no IPVS connection table: connections follow conntrack's timeouts (conntrack.tcpEstablishedTimeout, conntrack.udpTimeout, …)",
                );
            }
        }
    }
}

/// A `v1alpha2` list of bind CIDRs with one port, as the one address kpng
/// binds: a `/0` of a family is every address (`[::]` when `::/0` is
/// there, a dual-stack socket), a loopback range its first address, a
/// host prefix its address. Other addresses in the list get a warning.
fn bind_from_list(
    path: &str,
    field: &str,
    list: Option<&[String]>,
    port: Option<u16>,
    default_port: u16,
    warnings: &mut Vec<String>,
) -> Result<Option<String>, String> {
    let Some(list) = list.filter(|l| !l.is_empty()) else {
        return Ok(port.map(|p| format!("0.0.0.0:{p}")));
    };
    let port = port.unwrap_or(default_port);
    let mut prefixes = Vec::new();
    for (i, text) in list.iter().enumerate() {
        let prefix = kpng_model::addr::canonical_cidr(field, text)
            .map_err(|_| format!("{path}: {field}[{i}]: {text:?} is not a CIDR"))?;
        prefixes.push(prefix);
    }
    if prefixes
        .iter()
        .any(|p| p.prefix_len() == 0 && p.network().is_ipv6())
    {
        return Ok(Some(format!("[::]:{port}")));
    }
    if prefixes.iter().any(|p| p.prefix_len() == 0) {
        return Ok(Some(format!("0.0.0.0:{port}")));
    }
    let (ip, len) = (prefixes[0].network(), prefixes[0].prefix_len());
    let ip = match ip {
        std::net::IpAddr::V4(v4) if v4.is_loopback() => {
            std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)
        }
        ip if ip.is_loopback() || len == 32 && ip.is_ipv4() || len == 128 => ip,
        _ => {
            return Err(format!(
                "{path}: {field}[0]: {:?}: kpng binds one address: give a host address, a loopback range or a /0",
                list[0]
            ));
        }
    };
    if list.len() > 1
        && !prefixes[1..]
            .iter()
            .all(|other| other.network().is_loopback() && ip.is_loopback())
    {
        warnings.push(format!(
            "{path}: {field}: kpng binds one address: {ip} (the first); the others are not served"
        ));
    }
    Ok(Some(std::net::SocketAddr::new(ip, port).to_string()))
}

/// `logging.verbosity`, if set.
fn verbosity_of(logging: Option<&serde_json::Value>) -> Option<u64> {
    logging?.get("verbosity")?.as_u64()
}

/// Whether a Go duration is zero or unset (`""`, `0`, `0s`).
fn is_zero(duration: &str) -> bool {
    duration.is_empty()
        || duration
            .trim_end_matches(|c: char| c.is_ascii_alphabetic())
            .chars()
            .all(|c| c == '0' || c == '.')
}

#[cfg(test)]
mod tests {
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
    const KUBEADM: &str = include_str!("../tests/kubeadm-config.conf");

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
        let (argv, warnings) =
            with_file(V1ALPHA2, &["--hostname-override=node-a"]).expect("v1alpha2");
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
        let wrong_type =
            KUBEADM.replace("clusterCIDR: 10.244.0.0/16", "clusterCIDR: [10.244.0.0/16]");
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
        for flag in ["--min-sync-period=5s", "--masquerade-bit=13"] {
            assert!(argv.contains(&flag.to_owned()), "{flag} in {argv:?}");
        }
        for (field, says) in [
            ("mode", "ipvs: served by kpng's nftables backend"),
            (
                "ipvs.scheduler",
                "wrr: kpng picks each new connection's endpoint at random",
            ),
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
                .any(|w| w.starts_with("ipvs.scheduler: sh: ")),
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
}
