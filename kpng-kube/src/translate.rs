//! Translation of Kubernetes objects into ENLS values, with kube-proxy's
//! rules. Pure functions: the API source and the file source share them.

use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kpng_model::addr::canonical_ip;
use kpng_model::endpoint::{Interner, PortInfo, PortList};
use kpng_model::v1::{
    ClientIpAffinity, Endpoint, IpSet, Node, Protocol, Service, ServiceCidr, ServicePort,
    ServiceType, TrafficPolicy, service_port::TargetPort,
};
use kpng_model::{Addresses, EndpointInfo, ServiceInfo, ServiceName};

use crate::objects;

/// The label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The label that hands a Service to a non-default proxy.
pub const SERVICE_PROXY_NAME_LABEL: &str = "service.kubernetes.io/service-proxy-name";
/// The zone label of nodes.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// The region label of nodes.
pub const REGION_LABEL: &str = "topology.kubernetes.io/region";
/// The taint the cluster autoscaler puts on a node it is removing.
pub const AUTOSCALER_DELETE_TAINT: &str = "ToBeDeletedByClusterAutoscaler";
/// kube-proxy's default ClientIP affinity timeout, in seconds.
pub const DEFAULT_AFFINITY_TIMEOUT: u32 = 10_800;
/// The longest ClientIP affinity timeout the API server accepts, in
/// seconds (a day).
pub const MAX_AFFINITY_TIMEOUT: u32 = 86_400;

/// A field of an object that could not be translated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{object}: {field}: {message}")]
pub struct TranslateError {
    /// The object, as `Kind namespace/name`.
    pub object: String,
    /// The field path, e.g. `spec.clusterIPs[1]`.
    pub field: String,
    /// What is wrong.
    pub message: String,
    /// The value is well-formed, but the API server's validation refuses
    /// it (a Service port 0, an affinity timeout outside 1–86400): the
    /// API never serves such an object, and the file source skips it with
    /// a warning instead of refusing the whole file.
    pub refused: bool,
}

/// Settings that change what translation produces.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct TranslateConfig {
    /// This proxy's name: Services labelled
    /// `service.kubernetes.io/service-proxy-name` are skipped unless the
    /// label equals it.
    pub proxy_name: Option<String>,
}

fn object_name(
    kind: &str,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> String {
    match &meta.namespace {
        Some(ns) => format!("{kind} {ns}/{}", meta.name.as_deref().unwrap_or("")),
        None => format!("{kind} {}", meta.name.as_deref().unwrap_or("")),
    }
}

/// The object being translated, named only when an error needs it (most
/// events translate without one, and a name is an allocation).
struct Ctx<'a> {
    kind: &'static str,
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
}

impl Ctx<'_> {
    fn err(&self, field: impl Into<String>, message: impl Into<String>) -> TranslateError {
        TranslateError {
            object: object_name(self.kind, self.meta),
            field: field.into(),
            message: message.into(),
            refused: false,
        }
    }

    /// A value the API server's validation refuses.
    fn refuse(&self, field: impl Into<String>, message: impl Into<String>) -> TranslateError {
        TranslateError {
            refused: true,
            ..self.err(field, message)
        }
    }

    fn ips<'a>(
        &self,
        field: &str,
        texts: impl IntoIterator<Item = &'a String>,
    ) -> Result<Vec<IpAddr>, TranslateError> {
        let mut addrs = Vec::new();
        for (i, text) in texts.into_iter().enumerate() {
            let ip = canonical_ip(field, text).map_err(|_| {
                self.err(
                    format!("{field}[{i}]"),
                    format!("invalid IP address {text:?}"),
                )
            })?;
            addrs.push(ip);
        }
        Ok(addrs)
    }

    fn port(&self, field: &str, value: i32) -> Result<u32, TranslateError> {
        u32::try_from(value)
            .ok()
            .filter(|p| *p <= 65_535)
            .ok_or_else(|| self.err(field, format!("port {value} out of range")))
    }

    /// A port that must be set: 0 is refused, as the API server does.
    fn port_set(&self, field: &str, value: i32) -> Result<u32, TranslateError> {
        match self.port(field, value)? {
            0 => Err(self.refuse(field, "port 0: the API server refuses it (must be 1-65535)")),
            port => Ok(port),
        }
    }
}

/// A ClientIP affinity timeout: unset is kube-proxy's default (10800 s,
/// as the API server fills it in); outside 1–86400 the API server refuses
/// the Service, and so is it here.
fn affinity_timeout(ctx: &Ctx<'_>, value: Option<i32>) -> Result<u32, TranslateError> {
    let Some(value) = value else {
        return Ok(DEFAULT_AFFINITY_TIMEOUT);
    };
    u32::try_from(value)
        .ok()
        .filter(|t| (1..=MAX_AFFINITY_TIMEOUT).contains(t))
        .ok_or_else(|| {
            ctx.refuse(
                "spec.sessionAffinityConfig.clientIP.timeoutSeconds",
                format!("{value}: the API server refuses it (must be 1-{MAX_AFFINITY_TIMEOUT})"),
            )
        })
}

/// A port's protocol (unset: TCP). The field is named only for an error.
fn protocol(
    ctx: &Ctx<'_>,
    field: impl FnOnce() -> String,
    value: Option<&str>,
) -> Result<Protocol, TranslateError> {
    match value.unwrap_or("TCP") {
        "TCP" => Ok(Protocol::Tcp),
        "UDP" => Ok(Protocol::Udp),
        "SCTP" => Ok(Protocol::Sctp),
        other => Err(ctx.err(field(), format!("unknown protocol {other:?}"))),
    }
}

fn policy(value: Option<&str>) -> TrafficPolicy {
    match value {
        Some("Local") => TrafficPolicy::Local,
        _ => TrafficPolicy::Cluster,
    }
}

/// Translates a Service. `Ok(None)` when it produces no proxy state:
/// headless (clusterIP `None` or empty), `type: ExternalName`, or handed to
/// another proxy by the `service-proxy-name` label.
///
/// # Errors
/// A field that cannot be read (an invalid IP, CIDR, port or protocol),
/// named in the error.
pub fn service(
    svc: &objects::Service,
    config: &TranslateConfig,
) -> Result<Option<ServiceInfo>, TranslateError> {
    let ctx = Ctx {
        kind: "Service",
        meta: &svc.metadata,
    };
    if let Some(proxy) = svc
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(SERVICE_PROXY_NAME_LABEL))
        && config.proxy_name.as_deref() != Some(proxy.as_str())
    {
        return Ok(None);
    }
    let Some(spec) = &svc.spec else {
        return Ok(None);
    };
    let r#type = match spec.type_.as_deref().unwrap_or("ClusterIP") {
        "ClusterIP" => ServiceType::ClusterIp,
        "NodePort" => ServiceType::NodePort,
        "LoadBalancer" => ServiceType::LoadBalancer,
        "ExternalName" => return Ok(None),
        other => return Err(ctx.err("spec.type", format!("unknown type {other:?}"))),
    };
    let cluster_ips: Vec<&String> = match (&spec.cluster_ips, &spec.cluster_ip) {
        (Some(ips), _) if !ips.is_empty() => ips.iter().collect(),
        (_, Some(ip)) => vec![ip],
        _ => Vec::new(),
    };
    if cluster_ips.is_empty()
        || cluster_ips
            .iter()
            .any(|ip| ip.as_str() == "None" || ip.is_empty())
    {
        return Ok(None);
    }
    let cluster_ips = ctx.ips("spec.clusterIPs", cluster_ips)?;
    let external_ips = ctx.ips("spec.externalIPs", spec.external_ips.iter().flatten())?;

    let mut vips = Vec::new();
    let mut proxied = Vec::new();
    let ingress = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref());
    for (i, ing) in ingress.into_iter().flatten().enumerate() {
        let Some(ip) = ing.ip.as_deref().filter(|ip| !ip.is_empty()) else {
            continue;
        };
        let field = format!("status.loadBalancer.ingress[{i}].ip");
        let addr = canonical_ip(&field, ip)
            .map_err(|_| ctx.err(field, format!("invalid IP address {ip:?}")))?;
        match ing.ip_mode.as_deref() {
            Some("Proxy") => proxied.push(addr),
            _ => vips.push(addr),
        }
    }

    let mut ports = Vec::new();
    for (i, p) in spec.ports.iter().flatten().enumerate() {
        let field = |f: &str| format!("spec.ports[{i}].{f}");
        ports.push(ServicePort {
            name: p.name.clone().unwrap_or_default(),
            protocol: protocol(&ctx, || field("protocol"), p.protocol.as_deref())? as i32,
            port: ctx.port_set(&field("port"), p.port)?,
            node_port: match p.node_port {
                Some(n) => ctx.port(&field("nodePort"), n)?,
                None => 0,
            },
            target_port: match &p.target_port {
                Some(IntOrString::Int(n)) => Some(TargetPort::TargetPortNumber(
                    ctx.port(&field("targetPort"), *n)?,
                )),
                Some(IntOrString::String(name)) => Some(TargetPort::TargetPortName(name.clone())),
                None => Some(TargetPort::TargetPortNumber(
                    ctx.port(&field("port"), p.port)?,
                )),
            },
        });
    }
    ports.sort_by(|a, b| (&a.name, a.protocol, a.port).cmp(&(&b.name, b.protocol, b.port)));
    // Kept as long as the Service: no growth slack (a Vec grown by pushes
    // holds room for four; at 10k Services that was 1.9 MB).
    ports.shrink_to_fit();

    let client_ip_affinity = match spec.session_affinity.as_deref() {
        None | Some("None") => None,
        Some("ClientIP") => {
            let timeout = spec
                .session_affinity_config
                .as_ref()
                .and_then(|c| c.client_ip.as_ref())
                .and_then(|c| c.timeout_seconds);
            Some(ClientIpAffinity {
                timeout_seconds: affinity_timeout(&ctx, timeout)?,
            })
        }
        Some(other) => {
            return Err(ctx.refuse(
                "spec.sessionAffinity",
                format!("{other:?}: the API server refuses it (must be \"None\" or \"ClientIP\")"),
            ));
        }
    };

    let source_ranges = spec.load_balancer_source_ranges.iter().flatten();
    let mut ranges = Vec::new();
    for (i, text) in source_ranges.enumerate() {
        let field = format!("spec.loadBalancerSourceRanges[{i}]");
        ranges.push(
            kpng_model::addr::canonical_cidr(&field, text)
                .map_err(|_| ctx.err(field, format!("invalid CIDR {text:?}")))?,
        );
    }

    let service = Service {
        namespace: svc.metadata.namespace.clone().unwrap_or_default(),
        name: svc.metadata.name.clone().unwrap_or_default(),
        r#type: r#type as i32,
        ports,
        client_ip_affinity,
        external_traffic_policy: policy(spec.external_traffic_policy.as_deref()) as i32,
        internal_traffic_policy: policy(spec.internal_traffic_policy.as_deref()) as i32,
        health_check_node_port: match spec.health_check_node_port {
            Some(p) => ctx.port("spec.healthCheckNodePort", p)?,
            None => 0,
        },
        traffic_distribution: spec.traffic_distribution.clone().unwrap_or_default(),
        balancing: balancing(svc) as i32,
        load_balancer_mode: load_balancer_mode(svc) as i32,
        ..Service::default()
    };
    // Typed here, where they were parsed: the text fields are made from
    // them, and nothing parses them again.
    let addresses = Addresses {
        cluster_ips,
        external_ips,
        load_balancer_ips: vips,
        load_balancer_proxy_ips: proxied,
        source_ranges: ranges,
    };
    Ok(Some(ServiceInfo::with_addresses(service, addresses)))
}

/// The balancing a Service's `kpng.io/balancing` annotation asks for:
/// `random`, `maglev` or `round-robin`.
fn balancing(svc: &objects::Service) -> kpng_model::v1::Balancing {
    use kpng_model::v1::Balancing;
    choice(
        svc,
        objects::BALANCING,
        &[
            ("random", Balancing::Random),
            ("maglev", Balancing::Maglev),
            ("round-robin", Balancing::RoundRobin),
            ("roundrobin", Balancing::RoundRobin),
            ("rr", Balancing::RoundRobin),
        ],
        Balancing::Unspecified,
    )
}

/// The load balancer mode a Service's `kpng.io/load-balancer-mode`
/// annotation asks for: `snat`, `dsr` or `hybrid`.
fn load_balancer_mode(svc: &objects::Service) -> kpng_model::v1::LoadBalancerMode {
    use kpng_model::v1::LoadBalancerMode;
    choice(
        svc,
        objects::LOAD_BALANCER_MODE,
        &[
            ("snat", LoadBalancerMode::Snat),
            ("dsr", LoadBalancerMode::Dsr),
            ("hybrid", LoadBalancerMode::Hybrid),
        ],
        LoadBalancerMode::Unspecified,
    )
}

/// The choice annotation `key` of a Service names among `choices`;
/// without it, `default` (the proxy's). Any other value is `default` too,
/// with a warning naming the Service, the annotation and the value (the
/// Service itself is served).
fn choice<T: Copy>(svc: &objects::Service, key: &str, choices: &[(&str, T)], default: T) -> T {
    let Some(value) = svc.metadata.annotations.as_ref().and_then(|a| a.get(key)) else {
        return default;
    };
    let value = value.trim();
    if let Some((_, choice)) = choices.iter().find(|(name, _)| *name == value) {
        return *choice;
    }
    let names: Vec<&str> = choices.iter().map(|(name, _)| *name).collect();
    tracing::warn!(
        service = %format!(
            "{}/{}",
            svc.metadata.namespace.as_deref().unwrap_or_default(),
            svc.metadata.name.as_deref().unwrap_or_default()
        ),
        annotation = key,
        value,
        "unknown value (known: {}): the proxy's default is used",
        names.join(", ")
    );
    default
}

/// What one EndpointSlice contributes to its Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SliceContribution {
    /// The Service the slice belongs to.
    pub service: ServiceName,
    /// Its endpoints, in address order, one per address: shared with the
    /// store when the slice is its Service's only one.
    pub endpoints: Arc<Vec<EndpointInfo>>,
}

/// Translates an EndpointSlice. `Ok(None)` when kube-proxy ignores it: no
/// `kubernetes.io/service-name` label, or `addressType: FQDN`.
///
/// Only the first address of each endpoint is used; slice ports without a
/// name or a port are ignored; unset `ready`/`serving` mean true and unset
/// `terminating` false. Every endpoint of the slice shares one port list,
/// and `interner` shares node and zone names, port lists and hints with
/// what it made before.
///
/// # Errors
/// A field that cannot be read, named in the error.
pub fn endpoint_slice(
    slice: &objects::EndpointSlice,
    interner: &mut Interner,
) -> Result<Option<SliceContribution>, TranslateError> {
    let ctx = Ctx {
        kind: "EndpointSlice",
        meta: &slice.metadata,
    };
    let Some(service) = slice
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(SERVICE_NAME_LABEL))
    else {
        return Ok(None);
    };
    if slice.address_type == "FQDN" {
        return Ok(None);
    }
    let namespace = slice.metadata.namespace.as_deref().unwrap_or_default();
    let service = ServiceName::new(namespace, service.as_str());

    let mut ports = Vec::new();
    for (i, p) in slice.ports.iter().flatten().enumerate() {
        let (Some(name), Some(port)) = (&p.name, p.port) else {
            continue;
        };
        let protocol = protocol(
            &ctx,
            || format!("ports[{i}].protocol"),
            p.protocol.as_deref(),
        )?;
        let port = u16::try_from(port).map_err(|_| {
            ctx.err(
                format!("ports[{i}].port"),
                format!("port {port} out of range"),
            )
        })?;
        ports.push(PortInfo::new(name, protocol, port));
    }
    let ports = interner.ports(PortList::new(ports));

    let mut endpoints = Vec::with_capacity(slice.endpoints.len());
    for (i, ep) in slice.endpoints.iter().enumerate() {
        let Some(first) = ep.addresses.first() else {
            continue;
        };
        let ip = first.trim().parse().map_err(|_| {
            ctx.err(
                format!("endpoints[{i}].addresses[0]"),
                format!("invalid IP address {first:?}"),
            )
        })?;
        let conditions = ep.conditions.as_ref();
        let (ready, serving, terminating) = Endpoint::resolve_conditions(
            conditions.and_then(|c| c.ready),
            conditions.and_then(|c| c.serving),
            conditions.and_then(|c| c.terminating),
        );
        let hints = ep.hints.as_ref();
        let hint_zones = hints
            .and_then(|h| h.for_zones.as_ref())
            .into_iter()
            .flatten();
        let hint_nodes = hints
            .and_then(|h| h.for_nodes.as_ref())
            .into_iter()
            .flatten();
        let endpoint = EndpointInfo::builder(ip)
            .conditions(ready, serving, terminating)
            .node(
                ep.node_name.as_deref().unwrap_or_default(),
                ep.zone.as_deref().unwrap_or_default(),
            )
            .hint_zones(hint_zones.map(|z| z.name.as_str()))
            .hint_nodes(hint_nodes.map(|n| n.name.as_str()))
            .ports(ports.clone())
            .intern(interner);
        endpoints.push(endpoint);
    }
    // Sorted by address (the sort is stable); an address listed twice is
    // one endpoint with its copies, as across slices.
    endpoints.sort_by_key(EndpointInfo::address);
    let endpoints = fold_copies(endpoints);
    Ok(Some(SliceContribution {
        service,
        endpoints: Arc::new(endpoints),
    }))
}

/// Endpoints sorted by address, one per address: the copies of an address
/// listed more than once, in their order, folded into one
/// ([`EndpointInfo::fold`]: every node's view picks its own copy later).
pub(crate) fn fold_copies(sorted: Vec<EndpointInfo>) -> Vec<EndpointInfo> {
    if sorted.windows(2).all(|w| w[0].address() != w[1].address()) {
        return sorted;
    }
    let mut folded: Vec<EndpointInfo> = Vec::with_capacity(sorted.len());
    let mut run: Vec<EndpointInfo> = Vec::new();
    for endpoint in sorted {
        if run
            .last()
            .is_some_and(|last| last.address() != endpoint.address())
        {
            folded.extend(EndpointInfo::fold(run.drain(..)));
        }
        run.push(endpoint);
    }
    folded.extend(EndpointInfo::fold(run));
    folded
}

/// Translates a Node: its name, zone and region labels, and its InternalIP
/// addresses (its primary addresses, where NodePorts listen by default;
/// ExternalIPs are usually NAT addresses that the host does not hold).
///
/// # Errors
/// An address that is not an IP, named in the error.
pub fn node(node: &objects::Node) -> Result<Node, TranslateError> {
    let ctx = Ctx {
        kind: "Node",
        meta: &node.metadata,
    };
    let labels = node.metadata.labels.as_ref();
    let label = |key: &str| labels.and_then(|l| l.get(key)).cloned().unwrap_or_default();
    let mut addrs = Vec::new();
    let listed = node.status.as_ref().and_then(|s| s.addresses.as_ref());
    for (i, a) in listed.into_iter().flatten().enumerate() {
        if a.type_ == "InternalIP" {
            let field = format!("status.addresses[{i}].address");
            let ip = canonical_ip(&field, &a.address)
                .map_err(|_| ctx.err(field, format!("invalid IP address {:?}", a.address)))?;
            addrs.push(ip);
        }
    }
    // KEP-3836: a node being deleted, or marked for deletion by the
    // cluster autoscaler, is not a good target for new connections.
    let tainted = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == AUTOSCALER_DELETE_TAINT));
    Ok(Node {
        name: node.metadata.name.clone().unwrap_or_default(),
        zone: label(ZONE_LABEL),
        region: label(REGION_LABEL),
        addresses: (!addrs.is_empty()).then(|| IpSet::from_addrs(addrs)),
        terminating: node.metadata.deletion_timestamp.is_some() || tainted,
    })
}

/// Translates a ServiceCIDR: its name and ranges.
///
/// # Errors
/// A range that is not a CIDR, named in the error.
pub fn service_cidr(cidr: &objects::ServiceCidr) -> Result<ServiceCidr, TranslateError> {
    let ctx = Ctx {
        kind: "ServiceCIDR",
        meta: &cidr.metadata,
    };
    let listed = cidr.spec.as_ref().and_then(|s| s.cidrs.as_ref());
    let mut prefixes = Vec::new();
    for (i, text) in listed.into_iter().flatten().enumerate() {
        let field = format!("spec.cidrs[{i}]");
        let prefix = kpng_model::addr::canonical_cidr(&field, text)
            .map_err(|_| ctx.err(field, format!("invalid CIDR {text:?}")))?;
        prefixes.push(prefix);
    }
    Ok(ServiceCidr {
        name: cidr.metadata.name.clone().unwrap_or_default(),
        cidrs: (!prefixes.is_empty()).then(|| IpSet::from_cidrs(prefixes)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClusterIP Service `a/web` with `spec` merged over a valid one.
    fn web(spec: serde_json::Value) -> objects::Service {
        let mut base = serde_json::json!({
            "clusterIP": "10.96.0.10",
            "ports": [{"name": "http", "port": 80}],
        });
        if let (Some(base), Some(extra)) = (base.as_object_mut(), spec.as_object()) {
            base.extend(extra.clone());
        }
        serde_json::from_value(serde_json::json!({
            "kind": "Service",
            "metadata": {"namespace": "a", "name": "web"},
            "spec": base,
        }))
        .expect("a Service")
    }

    fn refused(spec: serde_json::Value) -> TranslateError {
        match service(&web(spec), &TranslateConfig::default()) {
            Err(e) => e,
            Ok(s) => panic!("accepted: {s:?}"),
        }
    }

    fn timeout(spec: serde_json::Value) -> Option<u32> {
        let translated = service(&web(spec), &TranslateConfig::default()).expect("accepted");
        translated
            .expect("proxied")
            .client_ip_affinity
            .map(|a| a.timeout_seconds)
    }

    #[test]
    fn a_service_port_0_refuses_the_service_naming_the_port() {
        let e = refused(serde_json::json!({
            "ports": [{"name": "http", "port": 80}, {"name": "none", "port": 0}],
        }));
        assert!(e.refused);
        assert_eq!(e.object, "Service a/web");
        assert_eq!(e.field, "spec.ports[1].port");
        assert_eq!(
            e.to_string(),
            "Service a/web: spec.ports[1].port: port 0: the API server refuses it (must be 1-65535)"
        );
        // Out of range stays a plain error (the file is refused).
        assert!(!refused(serde_json::json!({"ports": [{"port": 70000}]})).refused);
    }

    #[test]
    fn affinity_timeouts_outside_a_day_are_refused_never_defaulted() {
        for bad in [-1, 0, 86_401] {
            let e = refused(serde_json::json!({
                "sessionAffinity": "ClientIP",
                "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": bad}},
            }));
            assert!(e.refused, "{bad}");
            assert_eq!(
                e.field,
                "spec.sessionAffinityConfig.clientIP.timeoutSeconds"
            );
            assert_eq!(
                e.message,
                format!("{bad}: the API server refuses it (must be 1-86400)")
            );
        }
        for good in [1, 86_400] {
            let set = timeout(serde_json::json!({
                "sessionAffinity": "ClientIP",
                "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": good}},
            }));
            assert_eq!(set, Some(u32::try_from(good).expect("positive")));
        }
        // Unset: the API server's default, kube-proxy's 10800 s.
        let unset = timeout(serde_json::json!({"sessionAffinity": "ClientIP"}));
        assert_eq!(unset, Some(DEFAULT_AFFINITY_TIMEOUT));
        assert_eq!(
            timeout(serde_json::json!({"sessionAffinity": "None"})),
            None
        );
        let e = refused(serde_json::json!({"sessionAffinity": "clientip"}));
        assert!(e.refused);
        assert_eq!(e.field, "spec.sessionAffinity");
    }
}
