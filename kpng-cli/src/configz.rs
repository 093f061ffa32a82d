//! What kube-proxy serves beside `/metrics`: `/configz`, the effective
//! configuration in the shape of kube-proxy's (`{"kubeproxy.config.k8s.io":
//! {…}}`, with its field names and Go's durations), and `/proxyMode`.
//!
//! The configuration is read from the command line kpng runs with: a
//! kube-proxy config file and kube-proxy's flags have become kpng's flags
//! by then ([`crate::kube_proxy`]), so what is shown is what kpng does.

use std::time::Duration;

use serde_json::{Value, json};

use crate::args::{Action, BackendArgs};

/// The mode `/proxyMode` answers for `sink`: `nftables`, `iptables`, or
/// kpng's own `ebpf` (`mode: ipvs` runs as `nftables`); `None` for a sink
/// that programs nothing.
pub(crate) fn proxy_mode(sink: &Action) -> Option<&'static str> {
    match sink {
        Action::ToNft(_) => Some("nftables"),
        Action::ToIptables(_) => Some("iptables"),
        Action::ToEbpf(_) => Some("ebpf"),
        Action::ToApi(_) | Action::ToFile(_) | Action::Explain(_) | Action::Fleet(_) => None,
    }
}

/// A duration as Go prints it (`1s`, `500ms`, `1h0m0s`, `24h0m0s`), as
/// kube-proxy's configuration holds them.
pub(crate) fn go_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0s".into();
    }
    if d < Duration::from_secs(1) {
        let micros = d.as_micros();
        return if micros.is_multiple_of(1000) {
            format!("{}ms", micros / 1000)
        } else {
            format!("{micros}µs")
        };
    }
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let nanos = d.subsec_nanos();
    let seconds = if nanos == 0 {
        format!("{s}s")
    } else {
        let frac = format!("{nanos:09}");
        format!("{s}.{}s", frac.trim_end_matches('0'))
    };
    match (h, m) {
        (0, 0) => seconds,
        (0, m) => format!("{m}m{seconds}"),
        (h, m) => format!("{h}h{m}m{seconds}"),
    }
}

/// A comma-separated flag as a list (empty: none).
fn list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The effective configuration of a proxy for `node` with `sink`'s flags,
/// in kube-proxy's shape. `None` for a sink that programs nothing.
pub(crate) fn configz(sink: &Action, node: &str) -> Option<Value> {
    let mode = proxy_mode(sink)?;
    let args: &BackendArgs = sink.args()?;
    let clusters = list(&args.proxy.cluster_cidr);
    let node_ports = match args.proxy.nodeport_addresses.as_deref() {
        None => json!(["primary"]),
        Some(text) if text.trim() == "primary" => json!(["primary"]),
        Some(text) => json!(list(text)),
    };
    let (iptables_mode, local_mode) = match sink {
        Action::ToIptables(ipt) => (Some(ipt.iptables_mode.as_str()), true),
        _ => (None, false),
    };
    let sync = json!({
        "masqueradeBit": args.proxy.masquerade_bit,
        "masqueradeAll": args.proxy.masquerade_all,
        "minSyncPeriod": go_duration(args.min_sync_period),
    });
    let mut iptables = sync.clone();
    // Served by the eBPF backend's socket programs alone.
    iptables["localhostNodePorts"] =
        json!(matches!(sink, Action::ToEbpf(_)) && args.proxy.localhost_nodeports());
    let mut config = json!({
        "hostnameOverride": node,
        "bindAddress": "0.0.0.0",
        "healthzBindAddress": args.healthz_bind_address,
        "metricsBindAddress": args.metrics_bind_address,
        "bindAddressHardFail": false,
        "enableProfiling": false,
        "mode": mode,
        "iptables": iptables,
        "nftables": sync,
        "detectLocalMode": if clusters.is_empty() { "" } else { "ClusterCIDR" },
        "detectLocal": {"clusterCIDRs": clusters},
        "clusterCIDR": clusters.join(","),
        "nodePortAddresses": node_ports,
        "conntrack": {
            "maxPerCore": args.conntrack_max_per_core,
            "min": args.conntrack_min,
            "tcpEstablishedTimeout": go_duration(args.conntrack_tcp_timeout_established),
            "tcpCloseWaitTimeout": go_duration(args.conntrack_tcp_timeout_close_wait),
            "tcpBeLiberal": args.conntrack_tcp_be_liberal,
            "udpTimeout": go_duration(args.conntrack_udp_timeout),
            "udpStreamTimeout": go_duration(args.conntrack_udp_timeout_stream),
        },
    });
    if let Some(which) = iptables_mode.filter(|_| local_mode) {
        // kpng's own choice of iptables, beside kube-proxy's fields.
        config["iptables"]["kpngIptablesMode"] = json!(which);
    }
    Some(json!({ "kubeproxy.config.k8s.io": config }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_as_go_prints_them() {
        for (d, text) in [
            (Duration::ZERO, "0s"),
            (Duration::from_millis(500), "500ms"),
            (Duration::from_secs(1), "1s"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(3600), "1h0m0s"),
            (Duration::from_secs(86_400), "24h0m0s"),
        ] {
            assert_eq!(go_duration(d), text);
        }
    }
}
