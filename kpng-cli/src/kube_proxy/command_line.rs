//! The kpng command line kube-proxy's settings stand for, with a warning
//! per setting kpng does not honour.

use super::settings::Settings;

impl Settings {
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
        // Localhost NodePorts: kpng's eBPF backend serves them; the
        // netfilter backends these modes run serve none.
        let localhost = || self.at("iptables.localhostNodePorts").name;
        if mode == "iptables" && self.localhost_node_ports != Some(false) {
            warn(
                &localhost(),
                "kpng's iptables backend serves no NodePort on loopback: kube-proxy's iptables mode does, by setting route_localnet=1, which kpng does not set; kpng's eBPF backend serves 127.0.0.1 and [::1] to the node's own processes with no sysctl (`kpng kube … to-ebpf`, --localhost-nodeports on by default)",
            );
        }
        if mode != "iptables" && self.localhost_node_ports == Some(true) {
            warn(
                &localhost(),
                &format!(
                    "mode {mode}: kube-proxy ignores it there, and kpng's nftables backend, as kube-proxy's nftables mode, serves no NodePort on loopback; kpng's eBPF backend does (`kpng kube … to-ebpf`, --localhost-nodeports on by default)"
                ),
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

/// Whether a Go duration is zero or unset (`""`, `0`, `0s`).
pub(super) fn is_zero(duration: &str) -> bool {
    duration.is_empty()
        || duration
            .trim_end_matches(|c: char| c.is_ascii_alphabetic())
            .chars()
            .all(|c| c == '0' || c == '.')
}
