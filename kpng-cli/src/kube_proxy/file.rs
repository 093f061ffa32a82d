//! `KubeProxyConfiguration` as kube-proxy defines it: `v1alpha1` and
//! `v1alpha2`, read strictly, `v1alpha1` leniently as kube-proxy does.

use std::collections::BTreeMap;

use serde::Deserialize;

/// The `ipvs` settings, each a warning in `mode: ipvs`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct IpvsSettings {
    #[serde(default)]
    pub(super) scheduler: String,
    #[serde(default, rename = "excludeCIDRs")]
    pub(super) exclude_cidrs: Option<Vec<String>>,
    #[serde(default, rename = "strictARP")]
    pub(super) strict_arp: bool,
    #[serde(default)]
    pub(super) tcp_timeout: String,
    #[serde(default)]
    pub(super) tcp_fin_timeout: String,
    #[serde(default)]
    pub(super) udp_timeout: String,
    // v1alpha1's (the mode's sync periods) and v1alpha2's (its own bit).
    #[serde(default)]
    pub(super) sync_period: String,
    #[serde(default)]
    pub(super) min_sync_period: String,
    #[serde(default)]
    pub(super) masquerade_bit: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct ClientConnection {
    #[serde(default)]
    pub(super) kubeconfig: String,
    #[serde(default)]
    pub(super) accept_content_types: String,
    #[serde(default)]
    pub(super) content_type: String,
    #[serde(default)]
    pub(super) qps: f64,
    #[serde(default)]
    pub(super) burst: i64,
}

/// `v1alpha1`'s `iptables` and `nftables` sections (`localhostNodePorts`
/// is iptables' only); `v1alpha2` keeps only the bits and
/// `localhostNodePorts` there.
// A version's schema: checked, then read through `version.rs`'s places.
#[allow(dead_code)]
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct ModeSection {
    #[serde(default)]
    pub(super) masquerade_all: bool,
    #[serde(default)]
    pub(super) masquerade_bit: Option<i64>,
    #[serde(default)]
    pub(super) localhost_node_ports: Option<bool>,
    #[serde(default)]
    pub(super) sync_period: String,
    #[serde(default)]
    pub(super) min_sync_period: String,
}

// A version's schema: checked, then read through `version.rs`'s places.
#[allow(dead_code)]
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct V2ModeSection {
    #[serde(default)]
    pub(super) masquerade_bit: Option<i64>,
    #[serde(default)]
    pub(super) localhost_node_ports: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct DetectLocal {
    #[serde(default)]
    pub(super) bridge_interface: String,
    #[serde(default)]
    pub(super) interface_name_prefix: String,
    /// v1alpha2's (read through `version.rs`'s places).
    #[allow(dead_code)]
    #[serde(default, rename = "clusterCIDRs")]
    pub(super) cluster_cidrs: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Conntrack {
    #[serde(default)]
    pub(super) max_per_core: Option<i64>,
    #[serde(default)]
    pub(super) min: Option<i64>,
    #[serde(default)]
    pub(super) tcp_established_timeout: Option<String>,
    #[serde(default)]
    pub(super) tcp_close_wait_timeout: Option<String>,
    #[serde(default)]
    pub(super) tcp_be_liberal: bool,
    #[serde(default)]
    pub(super) udp_timeout: String,
    #[serde(default)]
    pub(super) udp_stream_timeout: String,
}

/// `kubeproxy.config.k8s.io/v1alpha1`, as kube-proxy 1.34–1.37 define it.
// A version's schema: checked, then read through `version.rs`'s places.
#[allow(dead_code)]
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct V1alpha1 {
    pub(super) api_version: String,
    pub(super) kind: String,
    #[serde(default)]
    pub(super) feature_gates: Option<BTreeMap<String, bool>>,
    #[serde(default)]
    pub(super) client_connection: ClientConnection,
    #[serde(default)]
    pub(super) logging: Option<serde_json::Value>,
    #[serde(default)]
    pub(super) hostname_override: String,
    #[serde(default)]
    pub(super) bind_address: String,
    #[serde(default)]
    pub(super) healthz_bind_address: String,
    #[serde(default)]
    pub(super) metrics_bind_address: String,
    #[serde(default)]
    pub(super) bind_address_hard_fail: bool,
    #[serde(default)]
    pub(super) enable_profiling: bool,
    #[serde(default)]
    pub(super) show_hidden_metrics_for_version: String,
    #[serde(default)]
    pub(super) mode: String,
    #[serde(default)]
    pub(super) iptables: ModeSection,
    #[serde(default)]
    pub(super) ipvs: IpvsSettings,
    #[serde(default)]
    pub(super) nftables: ModeSection,
    #[serde(default)]
    pub(super) winkernel: Option<serde_json::Value>,
    #[serde(default)]
    pub(super) detect_local_mode: String,
    #[serde(default)]
    pub(super) detect_local: DetectLocal,
    #[serde(default, rename = "clusterCIDR")]
    pub(super) cluster_cidr: String,
    #[serde(default)]
    pub(super) node_port_addresses: Option<Vec<String>>,
    #[serde(default)]
    pub(super) oom_score_adj: Option<i64>,
    #[serde(default)]
    pub(super) conntrack: Conntrack,
    #[serde(default)]
    pub(super) config_sync_period: String,
    #[serde(default)]
    pub(super) port_range: String,
    #[serde(default)]
    pub(super) windows_run_as_service: bool,
}

/// `v1alpha2`'s `linux` section.
// A version's schema: checked, then read through `version.rs`'s places.
#[allow(dead_code)]
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Linux {
    #[serde(default)]
    pub(super) conntrack: Conntrack,
    #[serde(default)]
    pub(super) masquerade_all: bool,
    #[serde(default)]
    pub(super) oom_score_adj: Option<i64>,
}

/// `kubeproxy.config.k8s.io/v1alpha2`, as KEP-784 designs it (kube-proxy's
/// internal configuration, with the KEP's additions: bind address lists
/// and ports, `configHardFail`, `nodeIPOverride`, `ipFamilyPolicy`).
// A version's schema: checked, then read through `version.rs`'s places.
#[allow(dead_code)]
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct V1alpha2 {
    pub(super) api_version: String,
    pub(super) kind: String,
    #[serde(default)]
    pub(super) feature_gates: Option<BTreeMap<String, bool>>,
    #[serde(default)]
    pub(super) client_connection: ClientConnection,
    #[serde(default)]
    pub(super) logging: Option<serde_json::Value>,
    #[serde(default)]
    pub(super) hostname_override: String,
    #[serde(default)]
    pub(super) bind_address: String,
    #[serde(default, rename = "nodeIPOverride")]
    pub(super) node_ip_override: Option<Vec<String>>,
    #[serde(default)]
    pub(super) ip_family_policy: String,
    #[serde(default)]
    pub(super) healthz_bind_address: String,
    #[serde(default)]
    pub(super) metrics_bind_address: String,
    #[serde(default)]
    pub(super) healthz_bind_addresses: Option<Vec<String>>,
    #[serde(default)]
    pub(super) healthz_bind_port: Option<u16>,
    #[serde(default)]
    pub(super) metrics_bind_addresses: Option<Vec<String>>,
    #[serde(default)]
    pub(super) metrics_bind_port: Option<u16>,
    #[serde(default)]
    pub(super) bind_address_hard_fail: Option<bool>,
    #[serde(default)]
    pub(super) config_hard_fail: Option<bool>,
    #[serde(default)]
    pub(super) enable_profiling: bool,
    #[serde(default)]
    pub(super) show_hidden_metrics_for_version: String,
    #[serde(default)]
    pub(super) mode: String,
    #[serde(default)]
    pub(super) iptables: V2ModeSection,
    #[serde(default)]
    pub(super) ipvs: IpvsSettings,
    #[serde(default)]
    pub(super) nftables: V2ModeSection,
    #[serde(default)]
    pub(super) winkernel: Option<serde_json::Value>,
    #[serde(default)]
    pub(super) windows: Option<serde_json::Value>,
    #[serde(default)]
    pub(super) linux: Linux,
    #[serde(default)]
    pub(super) detect_local_mode: String,
    #[serde(default)]
    pub(super) detect_local: DetectLocal,
    #[serde(default)]
    pub(super) node_port_addresses: Option<Vec<String>>,
    #[serde(default)]
    pub(super) sync_period: String,
    #[serde(default)]
    pub(super) min_sync_period: String,
    #[serde(default)]
    pub(super) config_sync_period: String,
}

/// `doc` as `T`, an error naming the file's field.
pub(super) fn typed<T: serde::de::DeserializeOwned>(
    path: &str,
    doc: serde_json::Value,
) -> Result<T, String> {
    serde_path_to_error::deserialize(doc).map_err(|e| {
        let at = e.path().to_string();
        format!("{path}: {at}: {}", e.into_inner())
    })
}

/// `v1alpha1` checked as kube-proxy reads it: strictly, and when only
/// unknown fields stand in the way, leniently, with a warning per field,
/// which is taken out of `doc` (kube-proxy logs "Using lenient decoding as
/// strict decoding failed" and goes on).
pub(super) fn lenient_v1alpha1(
    path: &str,
    doc: &mut serde_json::Value,
    warnings: &mut Vec<String>,
) -> Result<(), String> {
    // Each round removes one unknown field; a document has finitely many.
    loop {
        let error = match serde_path_to_error::deserialize::<_, V1alpha1>(doc.clone()) {
            Ok(_) => return Ok(()),
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
        let mut node = &mut *doc;
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
