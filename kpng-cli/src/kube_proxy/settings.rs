//! kube-proxy's settings, from its file or its flags, checked and turned
//! into kpng's command line.

use std::collections::BTreeMap;

use super::file::*;
use super::flags::{Does, Flag};
use super::version::{VERSIONS, Version, at, is_set, read};
use super::*;

/// Where a setting came from: a file's field (`config.conf:
/// nodePortAddresses`) or a flag (`--nodeport-addresses`), and whether it
/// is a list (its errors then name the entry: `nodePortAddresses[0]`).
#[derive(Debug, Clone)]
pub(super) struct Origin {
    pub(super) name: String,
    pub(super) list: bool,
}

/// kube-proxy's settings, as its internal configuration holds them (the
/// shape of `v1alpha2`), read from either version and from its flags.
#[derive(Debug, Default)]
pub(super) struct Settings {
    /// Where each setting checked or warned about came from, by the
    /// `v1alpha2` field path.
    pub(super) origin: BTreeMap<&'static str, Origin>,
    /// The file read, if any, for messages.
    pub(super) path: Option<String>,
    pub(super) kubeconfig: String,
    pub(super) content_type: bool,
    pub(super) rate_limit: bool,
    pub(super) hostname_override: String,
    pub(super) bind_address: String,
    pub(super) healthz_bind_address: String,
    pub(super) metrics_bind_address: String,
    pub(super) enable_profiling: bool,
    pub(super) show_hidden_metrics: bool,
    pub(super) mode: String,
    pub(super) masquerade_all: bool,
    /// `iptables`', `nftables`' and `ipvs`' masquerade bits; `v1alpha1`'s
    /// ipvs mode uses iptables'.
    pub(super) masquerade_bit: BTreeMap<&'static str, i64>,
    pub(super) localhost_node_ports: Option<bool>,
    pub(super) sync_period: String,
    pub(super) min_sync_period: String,
    pub(super) ipvs: IpvsSettings,
    pub(super) detect_local_mode: String,
    pub(super) detect_local_interface: bool,
    pub(super) cluster_cidrs: Vec<String>,
    pub(super) node_port_addresses: Option<Vec<String>>,
    pub(super) conntrack: Conntrack,
    pub(super) oom_score_adj: Option<i64>,
    pub(super) feature_gates: bool,
    pub(super) verbosity: Option<u64>,
    pub(super) port_range: String,
}

impl Settings {
    pub(super) fn set_origin(&mut self, key: &'static str, name: String, list: bool) {
        self.origin.insert(key, Origin { name, list });
    }

    /// Where setting `key` came from, for messages.
    pub(super) fn at(&self, key: &'static str) -> Origin {
        self.origin.get(key).cloned().unwrap_or(Origin {
            name: key.to_owned(),
            list: false,
        })
    }

    /// A `KubeProxyConfiguration` read from `path`: every version by the
    /// one loader, through the places its [`Version`] names.
    pub(super) fn from_file(
        path: &str,
        doc: serde_json::Value,
        warnings: &mut Vec<String>,
    ) -> Result<Self, String> {
        let api_version = doc
            .get("apiVersion")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let Some(version) = VERSIONS.iter().find(|v| v.api_version == api_version) else {
            let names: Vec<&str> = VERSIONS.iter().map(|v| v.api_version).collect();
            return Err(format!(
                "{path}: apiVersion {api_version:?}: kpng reads {}",
                names.join(" and ")
            ));
        };
        let doc = (version.check)(path, doc, warnings)?;
        let mut settings = Self::from_version(path, &doc, version, warnings)?;
        settings.path = Some(path.to_owned());
        Ok(settings)
    }

    /// The settings of `doc`, checked as `version`.
    fn from_version(
        path: &str,
        doc: &serde_json::Value,
        version: &Version,
        warnings: &mut Vec<String>,
    ) -> Result<Self, String> {
        let mut s = Settings::default();
        let field = |name: &str| format!("{path}: {name}");
        let read_text = |place: &str| read::<String>(path, doc, place);
        for (place, why) in version.misplaced {
            if is_set(doc, place) {
                let said = format!("{path}: {place}: {why}");
                if version.strict {
                    return Err(said);
                }
                warnings.push(said);
            }
        }
        s.mode = read_text("mode")?;
        s.set_origin("mode", field("mode"), false);
        let mode = s.mode.clone();

        let place = version.masquerade_all.of(&mode);
        s.masquerade_all = read(path, doc, place)?;
        s.set_origin("linux.masqueradeAll", field(place), false);
        let section = version.sync_periods.of(&mode);
        let (sync, min_sync) = (
            format!("{section}syncPeriod"),
            format!("{section}minSyncPeriod"),
        );
        s.sync_period = read_text(&sync)?;
        s.min_sync_period = read_text(&min_sync)?;
        s.set_origin("syncPeriod", field(&sync), false);
        s.set_origin("minSyncPeriod", field(&min_sync), false);
        for (mode, place) in version.masquerade_bits {
            if let Some(bit) = read::<Option<i64>>(path, doc, place)? {
                s.masquerade_bit.insert(mode, bit);
            }
            let key = match mode {
                "nftables" => "nftables.masqueradeBit",
                "ipvs" => "ipvs.masqueradeBit",
                _ => "iptables.masqueradeBit",
            };
            s.set_origin(key, field(place), false);
        }
        s.localhost_node_ports = read(path, doc, "iptables.localhostNodePorts")?;
        s.set_origin(
            "iptables.localhostNodePorts",
            field("iptables.localhostNodePorts"),
            false,
        );

        let (place, text) = version.cluster_cidrs;
        s.cluster_cidrs = if text {
            let cidrs = read_text(place)?;
            match cidrs.is_empty() {
                true => Vec::new(),
                false => cidrs.split(',').map(str::to_owned).collect(),
            }
        } else {
            read(path, doc, place)?
        };
        s.set_origin("detectLocal.clusterCIDRs", field(place), !text);

        // v1alpha2's lists of bind addresses with one port (KEP-784), else
        // the address.
        for (key, list, port, default_port) in [
            (
                "healthzBindAddress",
                "healthzBindAddresses",
                "healthzBindPort",
                10256,
            ),
            (
                "metricsBindAddress",
                "metricsBindAddresses",
                "metricsBindPort",
                10249,
            ),
        ] {
            let addresses: Option<Vec<String>> = read(path, doc, list)?;
            let port: Option<u16> = read(path, doc, port)?;
            let bound = bind_from_list(
                path,
                list,
                addresses.as_deref(),
                port,
                default_port,
                warnings,
            )?;
            let address = match bound {
                Some(address) => address,
                None => read_text(key)?,
            };
            if key == "healthzBindAddress" {
                s.healthz_bind_address = address;
            } else {
                s.metrics_bind_address = address;
            }
            s.set_origin(key, field(key), false);
        }

        let cc: ClientConnection = read(path, doc, "clientConnection")?;
        s.kubeconfig.clone_from(&cc.kubeconfig);
        s.content_type = !cc.accept_content_types.is_empty() || !cc.content_type.is_empty();
        s.rate_limit = cc.qps != 0.0 || cc.burst != 0;
        s.hostname_override = read_text("hostnameOverride")?;
        s.bind_address = read_text("bindAddress")?;
        s.node_port_addresses = read(path, doc, "nodePortAddresses")?;
        s.set_origin("nodePortAddresses", field("nodePortAddresses"), true);
        s.detect_local_mode = read_text("detectLocalMode")?;
        s.set_origin("detectLocalMode", field("detectLocalMode"), false);
        let detect_local: DetectLocal = read(path, doc, "detectLocal")?;
        s.detect_local_interface = !detect_local.bridge_interface.is_empty()
            || !detect_local.interface_name_prefix.is_empty();
        s.conntrack = read(path, doc, version.conntrack)?;
        for (key, name) in [
            ("conntrack.tcpEstablishedTimeout", "tcpEstablishedTimeout"),
            ("conntrack.tcpCloseWaitTimeout", "tcpCloseWaitTimeout"),
            ("conntrack.udpTimeout", "udpTimeout"),
            ("conntrack.udpStreamTimeout", "udpStreamTimeout"),
            ("conntrack.maxPerCore", "maxPerCore"),
            ("conntrack.min", "min"),
        ] {
            s.set_origin(key, field(&format!("{}.{name}", version.conntrack)), false);
        }
        s.ipvs = read(path, doc, "ipvs")?;
        // Read through their places above, by mode.
        s.ipvs.sync_period.clear();
        s.ipvs.min_sync_period.clear();
        s.ipvs.masquerade_bit = None;
        for key in ["ipvs.tcpTimeout", "ipvs.tcpFinTimeout", "ipvs.udpTimeout"] {
            s.set_origin(key, field(key), false);
        }
        s.set_origin("ipvs.excludeCIDRs", field("ipvs.excludeCIDRs"), true);
        s.oom_score_adj = read(path, doc, version.oom_score_adj)?;
        s.enable_profiling = read(path, doc, "enableProfiling")?;
        s.show_hidden_metrics = is_set(doc, "showHiddenMetricsForVersion");
        s.feature_gates = at(doc, "featureGates")
            .and_then(serde_json::Value::as_object)
            .is_some_and(|gates| !gates.is_empty());
        s.verbosity = verbosity_of(at(doc, "logging"));
        s.port_range = read_text("portRange")?;
        // Read and said to change nothing (v1alpha2's; a v1alpha1 file
        // has had them taken out as unknown fields).
        for (place, why) in [
            (
                "nodeIPOverride",
                "kpng takes the node's addresses from its Node object",
            ),
            (
                "ipFamilyPolicy",
                "kpng serves each family the Services have",
            ),
        ] {
            if is_set(doc, place) {
                warnings.push(format!("{path}: {place}: {why}"));
            }
        }
        // Ignored, as kube-proxy on Linux ignores them: winkernel and
        // windows (Windows' settings), configSyncPeriod (kpng watches),
        // bindAddressHardFail (kpng always exits when it cannot bind),
        // configHardFail (kpng always refuses a bad config).
        Ok(s)
    }

    /// One of kube-proxy's flags, over the file's setting.
    pub(super) fn set_flag(
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
            "iptables-localhost-nodeports" => {
                self.localhost_node_ports = Some(boolean()?);
                self.set_origin("iptables.localhostNodePorts", here, false);
            }
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
    pub(super) fn validate(&self) -> Result<(), String> {
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
}

/// A `v1alpha2` list of bind CIDRs with one port, as the one address kpng
/// binds: a `/0` of a family is every address (`[::]` when `::/0` is
/// there, a dual-stack socket), a loopback range its first address, a
/// host prefix its address. Other addresses in the list get a warning.
pub(super) fn bind_from_list(
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
pub(super) fn verbosity_of(logging: Option<&serde_json::Value>) -> Option<u64> {
    logging?.get("verbosity")?.as_u64()
}
