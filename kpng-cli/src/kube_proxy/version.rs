//! Where each version of `KubeProxyConfiguration` keeps what moved
//! between `v1alpha1` and `v1alpha2`: the one loader
//! ([`Settings::from_file`](super::settings::Settings::from_file)) reads
//! every version through these places, as kube-proxy converts each
//! version to its internal configuration.

use super::file::{V1alpha2, lenient_v1alpha1, typed};

/// A place that depends on the proxy mode.
#[derive(Debug)]
pub(super) struct ByMode {
    pub(super) iptables: &'static str,
    pub(super) nftables: &'static str,
    pub(super) ipvs: &'static str,
}

impl ByMode {
    /// One place for every mode.
    const fn all(place: &'static str) -> Self {
        Self {
            iptables: place,
            nftables: place,
            ipvs: place,
        }
    }

    /// The place in `mode` (kube-proxy's default, iptables, when unset or
    /// unknown).
    pub(super) fn of(&self, mode: &str) -> &'static str {
        match mode {
            "nftables" => self.nftables,
            "ipvs" => self.ipvs,
            _ => self.iptables,
        }
    }
}

/// One `apiVersion` of `KubeProxyConfiguration`: how kube-proxy decodes
/// it and where it keeps the settings that moved.
#[derive(Debug)]
pub(super) struct Version {
    /// The `apiVersion`.
    pub(super) api_version: &'static str,
    /// The document checked against the version's fields, as kube-proxy
    /// decodes it: strictly, or leniently with a warning per unknown
    /// field (which is then left out).
    pub(super) check:
        fn(&str, serde_json::Value, &mut Vec<String>) -> Result<serde_json::Value, String>,
    /// Whether a field of the other version (below) is an error rather
    /// than a warning.
    pub(super) strict: bool,
    /// `masqueradeAll`, by mode.
    pub(super) masquerade_all: ByMode,
    /// The section of `syncPeriod` and `minSyncPeriod` (`""`: the top),
    /// by mode.
    pub(super) sync_periods: ByMode,
    /// Each mode's masquerade bit: (mode, place).
    pub(super) masquerade_bits: [(&'static str, &'static str); 3],
    /// The pod CIDRs: a place, and whether it holds a comma-separated text
    /// rather than a list.
    pub(super) cluster_cidrs: (&'static str, bool),
    /// The conntrack section.
    pub(super) conntrack: &'static str,
    /// `oomScoreAdj`.
    pub(super) oom_score_adj: &'static str,
    /// Fields both versions' types accept but only the other version has,
    /// and what is said when one is set here.
    pub(super) misplaced: &'static [(&'static str, &'static str)],
}

/// `kubeproxy.config.k8s.io/v1alpha1`: the mode's section holds
/// `masqueradeAll` (nftables', else iptables') and the sync periods (ipvs
/// mode's in `ipvs`); ipvs mode takes iptables' masquerade bit
/// (kube-proxy's conversion: `IPVS.MasqueradeBit = IPTables.MasqueradeBit`).
pub(super) const V1ALPHA1: Version = Version {
    api_version: "kubeproxy.config.k8s.io/v1alpha1",
    check: |path, mut doc, warnings| {
        lenient_v1alpha1(path, &mut doc, warnings)?;
        Ok(doc)
    },
    strict: false,
    masquerade_all: ByMode {
        iptables: "iptables.masqueradeAll",
        nftables: "nftables.masqueradeAll",
        ipvs: "iptables.masqueradeAll",
    },
    sync_periods: ByMode {
        iptables: "iptables.",
        nftables: "nftables.",
        ipvs: "ipvs.",
    },
    masquerade_bits: [
        ("iptables", "iptables.masqueradeBit"),
        ("nftables", "nftables.masqueradeBit"),
        ("ipvs", "iptables.masqueradeBit"),
    ],
    cluster_cidrs: ("clusterCIDR", true),
    conntrack: "conntrack",
    oom_score_adj: "oomScoreAdj",
    misplaced: &[
        (
            "nftables.localhostNodePorts",
            "not a field of v1alpha1 (iptables' only); ignored: kpng's nftables backend, as kube-proxy's nftables mode, serves no NodePort on loopback; kpng's eBPF backend does (`kpng kube … to-ebpf`, --localhost-nodeports)",
        ),
        (
            "ipvs.masqueradeBit",
            "not a field of v1alpha1 (ipvs mode takes iptables.masqueradeBit); ignored",
        ),
        (
            "detectLocal.clusterCIDRs",
            "v1alpha2's field; v1alpha1's is clusterCIDR (ignored)",
        ),
    ],
};

/// `kubeproxy.config.k8s.io/v1alpha2`: `linux` holds `masqueradeAll`,
/// conntrack and `oomScoreAdj`; the sync periods are at the top; each
/// mode has its own masquerade bit; `detectLocal.clusterCIDRs` a list.
pub(super) const V1ALPHA2: Version = Version {
    api_version: "kubeproxy.config.k8s.io/v1alpha2",
    check: |path, doc, _| {
        typed::<V1alpha2>(path, doc.clone())?;
        Ok(doc)
    },
    strict: true,
    masquerade_all: ByMode::all("linux.masqueradeAll"),
    sync_periods: ByMode::all(""),
    masquerade_bits: [
        ("iptables", "iptables.masqueradeBit"),
        ("nftables", "nftables.masqueradeBit"),
        ("ipvs", "ipvs.masqueradeBit"),
    ],
    cluster_cidrs: ("detectLocal.clusterCIDRs", false),
    conntrack: "linux.conntrack",
    oom_score_adj: "linux.oomScoreAdj",
    misplaced: &[
        (
            "nftables.localhostNodePorts",
            "unknown field (iptables' only): kpng's nftables backend, as kube-proxy's nftables mode, serves no NodePort on loopback; kpng's eBPF backend does (`kpng kube … to-ebpf`, --localhost-nodeports)",
        ),
        (
            "ipvs.syncPeriod",
            "unknown field (v1alpha2's is `syncPeriod` at the top)",
        ),
        (
            "ipvs.minSyncPeriod",
            "unknown field (v1alpha2's is `minSyncPeriod` at the top)",
        ),
    ],
};

/// The versions read.
pub(super) const VERSIONS: [&Version; 2] = [&V1ALPHA1, &V1ALPHA2];

/// The value at `place` (`a.b.c`) of `doc`, if any and not null.
pub(super) fn at<'a>(doc: &'a serde_json::Value, place: &str) -> Option<&'a serde_json::Value> {
    place
        .split('.')
        .try_fold(doc, |node, key| node.get(key))
        .filter(|v| !v.is_null())
}

/// Whether `place` is set: present, not null, not an empty text or list.
pub(super) fn is_set(doc: &serde_json::Value, place: &str) -> bool {
    at(doc, place).is_some_and(|v| match v {
        serde_json::Value::String(s) => !s.is_empty(),
        serde_json::Value::Array(a) => !a.is_empty(),
        _ => true,
    })
}

/// The value at `place` as `T`; its default when absent or null.
pub(super) fn read<T: serde::de::DeserializeOwned + Default>(
    path: &str,
    doc: &serde_json::Value,
    place: &str,
) -> Result<T, String> {
    match at(doc, place) {
        None => Ok(T::default()),
        Some(value) => {
            serde_json::from_value(value.clone()).map_err(|e| format!("{path}: {place}: {e}"))
        }
    }
}
