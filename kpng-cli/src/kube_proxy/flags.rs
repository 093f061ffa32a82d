//! kube-proxy's flags, 1.34–1.37 on Linux (`cmd/kube-proxy/app/options.go`
//! and the logging flags of `k8s.io/component-base/logs/api/v1`), and what
//! kpng does with each.

/// What kpng does with one of kube-proxy's flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Does {
    /// Taken with kube-proxy's meaning, under the same name.
    Takes,
    /// Taken as kpng's flag of this name.
    Alias(&'static str),
    /// Accepted; a warning says why it changes nothing.
    Ignored(&'static str),
    /// Refused, for this reason.
    Refused(&'static str),
}

/// One of kube-proxy's flags.
#[derive(Debug)]
pub(crate) struct Flag {
    /// The name, without `--`.
    pub(crate) name: &'static str,
    /// Whether it takes a value (`false`: a boolean, `--flag` or
    /// `--flag=false`).
    pub(crate) value: bool,
    /// What kpng does with it.
    pub(crate) does: Does,
}

const fn flag(name: &'static str, value: bool, does: Does) -> Flag {
    Flag { name, value, does }
}

const IPVS: &str = "an IPVS setting: kpng serves `mode: ipvs` with nftables, and this has no counterpart there (see docs/operator/install-and-swap.md)";
const LOG_OUTPUT: &str = "kpng writes each log line to stderr as it comes";
const LOCAL: &str = "kpng tells local traffic by --cluster-cidr only";

/// Every flag of kube-proxy 1.34–1.37 on Linux.
pub(crate) static FLAGS: &[Flag] = &[
    flag("config", true, Does::Takes),
    flag(
        "write-config-to",
        true,
        Does::Refused(
            "kpng writes no configuration file (`kpng ... to-file --output -` prints what a node is given)",
        ),
    ),
    flag(
        "cleanup",
        false,
        Does::Refused(
            "kpng's own tables are `ip kpng` and `ip6 kpng` (`nft delete table ip kpng`); `to-ebpf --cleanup` removes the eBPF programs",
        ),
    ),
    flag(
        "feature-gates",
        true,
        Does::Ignored("kpng has no feature gates"),
    ),
    flag("kubeconfig", true, Does::Takes),
    flag(
        "master",
        true,
        Does::Refused(
            "kpng takes the API server from the kubeconfig (or the in-cluster config): put it there",
        ),
    ),
    flag(
        "kube-api-content-type",
        true,
        Does::Ignored("kpng's client speaks JSON"),
    ),
    flag(
        "kube-api-burst",
        true,
        Does::Ignored("kpng's client sets no rate limit of its own"),
    ),
    flag(
        "kube-api-qps",
        true,
        Does::Ignored("kpng's client sets no rate limit of its own"),
    ),
    flag("hostname-override", true, Does::Alias("node")),
    flag(
        "bind-address",
        true,
        Does::Ignored("kpng takes the node's addresses from its Node object"),
    ),
    flag("healthz-bind-address", true, Does::Takes),
    flag("metrics-bind-address", true, Does::Takes),
    flag(
        "bind-address-hard-fail",
        false,
        Does::Ignored("kpng always exits when it cannot bind a port"),
    ),
    flag(
        "profiling",
        false,
        Does::Ignored("kpng serves no /debug/pprof"),
    ),
    flag(
        "show-hidden-metrics-for-version",
        true,
        Does::Ignored("kpng has no hidden metrics"),
    ),
    flag(
        "init-only",
        false,
        Does::Refused("kpng has no separate privileged step: it sets its sysctls when it starts"),
    ),
    flag("proxy-mode", true, Does::Takes),
    flag(
        "iptables-masquerade-bit",
        true,
        Does::Alias("masquerade-bit"),
    ),
    flag("masquerade-all", false, Does::Takes),
    flag(
        "iptables-localhost-nodeports",
        false,
        Does::Alias("localhost-nodeports"),
    ),
    flag(
        "iptables-sync-period",
        true,
        Does::Ignored("kpng syncs on changes and retries failures; it has no periodic full resync"),
    ),
    flag(
        "iptables-min-sync-period",
        true,
        Does::Alias("min-sync-period"),
    ),
    flag(
        "ipvs-sync-period",
        true,
        Does::Ignored("kpng syncs on changes and retries failures; it has no periodic full resync"),
    ),
    flag(
        "ipvs-min-sync-period",
        true,
        Does::Ignored(
            "it applies to `--proxy-mode ipvs` only, as in kube-proxy; there it is --min-sync-period",
        ),
    ),
    flag("ipvs-scheduler", true, Does::Ignored(IPVS)),
    flag("ipvs-exclude-cidrs", true, Does::Ignored(IPVS)),
    flag("ipvs-strict-arp", false, Does::Ignored(IPVS)),
    flag("ipvs-tcp-timeout", true, Does::Ignored(IPVS)),
    flag("ipvs-tcpfin-timeout", true, Does::Ignored(IPVS)),
    flag("ipvs-udp-timeout", true, Does::Ignored(IPVS)),
    flag("detect-local-mode", true, Does::Ignored(LOCAL)),
    flag("pod-bridge-interface", true, Does::Ignored(LOCAL)),
    flag("pod-interface-name-prefix", true, Does::Ignored(LOCAL)),
    flag("cluster-cidr", true, Does::Takes),
    flag("nodeport-addresses", true, Does::Takes),
    flag(
        "oom-score-adj",
        true,
        Does::Ignored("kpng leaves it to the pod spec"),
    ),
    flag("conntrack-max-per-core", true, Does::Takes),
    flag("conntrack-min", true, Does::Takes),
    flag("conntrack-tcp-timeout-established", true, Does::Takes),
    flag("conntrack-tcp-timeout-close-wait", true, Does::Takes),
    flag("conntrack-tcp-be-liberal", false, Does::Takes),
    flag("conntrack-udp-timeout", true, Does::Takes),
    flag("conntrack-udp-timeout-stream", true, Does::Takes),
    flag(
        "config-sync-period",
        true,
        Does::Ignored("kpng watches the API; it does not relist on a timer"),
    ),
    flag(
        "healthz-port",
        true,
        Does::Refused("deprecated in kube-proxy: give --healthz-bind-address IP:PORT"),
    ),
    flag(
        "metrics-port",
        true,
        Does::Refused("deprecated in kube-proxy: give --metrics-bind-address IP:PORT"),
    ),
    flag("v", true, Does::Takes),
    flag(
        "vmodule",
        true,
        Does::Ignored("per-module levels are RUST_LOG's (e.g. RUST_LOG=kpng_backend_nft=debug)"),
    ),
    flag("logging-format", true, Does::Ignored("kpng logs text")),
    flag("log-flush-frequency", true, Does::Ignored(LOG_OUTPUT)),
    flag("log-text-split-stream", false, Does::Ignored(LOG_OUTPUT)),
    flag("log-text-info-buffer-size", true, Does::Ignored(LOG_OUTPUT)),
    flag("log-json-split-stream", false, Does::Ignored(LOG_OUTPUT)),
    flag("log-json-info-buffer-size", true, Does::Ignored(LOG_OUTPUT)),
    flag("version", false, Does::Takes),
    flag("help", false, Does::Takes),
];

/// kube-proxy's flag `name`, if it is one.
pub(crate) fn find(name: &str) -> Option<&'static Flag> {
    FLAGS.iter().find(|f| f.name == name)
}

/// What `--help` says after kpng's own flags: every flag of kube-proxy's,
/// and what kpng does with it.
pub(crate) fn help() -> String {
    let mut text = String::from(
        "kube-proxy's flags (1.34-1.37) are taken by their own names, on kube-proxy's\n\
         command line (no SOURCE) and beside kpng's flags:\n",
    );
    for f in FLAGS {
        let what = match f.does {
            Does::Takes => "taken".to_owned(),
            Does::Alias(kpng) => format!("taken as --{kpng}"),
            Does::Ignored(why) => format!("accepted, with a warning: {why}"),
            Does::Refused(why) => format!("refused: {why}"),
        };
        text.push_str(&format!("  --{}: {what}\n", f.name));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::{Does, FLAGS, find};

    #[test]
    fn every_flag_is_listed_once_and_says_what_kpng_does() {
        for f in FLAGS {
            assert!(
                std::ptr::eq(find(f.name).expect("found"), f),
                "--{} twice",
                f.name
            );
            if let Does::Ignored(why) | Does::Refused(why) = f.does {
                assert!(!why.is_empty(), "--{}", f.name);
            }
        }
        let help = super::help();
        for name in ["iptables-masquerade-bit", "ipvs-scheduler", "master", "v"] {
            assert!(help.contains(&format!("--{name}: ")), "{name} in {help}");
        }
    }
}
