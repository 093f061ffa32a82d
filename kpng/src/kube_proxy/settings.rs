//! kube-proxy's settings, from its file or its flags, checked and turned
//! into kpng's command line.

use std::collections::BTreeMap;

use super::file::*;
use super::flags::{Does, Flag};
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

    /// A `KubeProxyConfiguration` read from `path`.
    pub(super) fn from_file(
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

    pub(super) fn from_v1alpha1(path: &str, c: V1alpha1, warnings: &mut Vec<String>) -> Self {
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

    pub(super) fn from_v1alpha2(
        path: &str,
        c: V1alpha2,
        warnings: &mut Vec<String>,
    ) -> Result<Self, String> {
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
    pub(super) fn common(
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

    /// The kpng command line these settings stand for, with `kpng` (kpng's
    /// own flags from the command line, which win over the settings'), and
    /// a warning per setting kpng does not honour.
    pub(super) fn command_line(
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
        if mode == "ipvs" {
            flags.push(format!(
                "--balancing={}",
                scheduler_balancing(&self.ipvs.scheduler).0
            ));
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
    pub(super) fn ipvs_warnings(
        &self,
        warn: &mut dyn FnMut(&str, &str),
        file: &dyn Fn(&str) -> String,
    ) {
        warn(
            &file("mode"),
            "ipvs: served by kpng's nftables backend (`to-nft`; KEP-5495 removes IPVS); no IPVS virtual servers and no kube-ipvs0 interface are made",
        );
        let ipvs = &self.ipvs;
        let (balancing, why) = scheduler_balancing(&ipvs.scheduler);
        let scheduler = if ipvs.scheduler.is_empty() {
            "(unset: IPVS's rr)"
        } else {
            ipvs.scheduler.as_str()
        };
        warn(
            &file("ipvs.scheduler"),
            &format!("{scheduler}: served as --balancing {balancing}: {why}"),
        );
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

/// The nearest of kpng's balancing choices to an IPVS scheduler, and
/// what differs.
pub(super) fn scheduler_balancing(scheduler: &str) -> (&'static str, &'static str) {
    match scheduler.trim() {
        "" | "rr" => (
            "round-robin",
            "each new connection goes to the next endpoint in turn",
        ),
        "wrr" => (
            "round-robin",
            "in turn; endpoints have no weights in Kubernetes, so all weigh the same",
        ),
        "mh" => (
            "maglev",
            "Maglev hashing of the flow (source address and port), on every node alike",
        ),
        "sh" | "dh" => (
            "maglev",
            "consistent hashing of the flow (source address and port), not of one address alone; sessionAffinity: ClientIP keeps a client on one endpoint",
        ),
        _ => (
            "random",
            "kpng's data path keeps no connection counts (lc, wlc, sed, nq and the like): each new connection's endpoint is picked at random",
        ),
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

/// Whether a Go duration is zero or unset (`""`, `0`, `0s`).
pub(super) fn is_zero(duration: &str) -> bool {
    duration.is_empty()
        || duration
            .trim_end_matches(|c: char| c.is_ascii_alphabetic())
            .chars()
            .all(|c| c == '0' || c == '.')
}
