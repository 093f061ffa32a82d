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

/// An object that could not be translated: the first field found wrong,
/// and every other one ([`more`](Self::more)), so that one pass names
/// all of an object's mistakes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{object}: {}", self.fields())]
#[non_exhaustive]
pub struct TranslateError {
    /// The object, as `Kind namespace/name`.
    pub object: String,
    /// The field path, e.g. `spec.clusterIPs[1]`.
    pub field: String,
    /// What is wrong, in the API server's words where it refuses the
    /// value (`Unsupported value: "LoadBalancr": supported values: …`).
    pub message: String,
    /// The API server's validation refuses the value (a Service port 0,
    /// an unknown type, two ports of one name): the API never serves such
    /// an object. Otherwise kpng cannot read it (a value kpng does not
    /// know). Either way the object is skipped, by the file source and
    /// the API source alike, with a warning naming it.
    pub refused: bool,
    /// The object's other wrong fields, in the order found.
    pub more: Vec<FieldProblem>,
}

/// One wrong field of an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldProblem {
    /// The field path, e.g. `spec.ports[1].name`.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl TranslateError {
    /// Every wrong field, `field: message`, joined by `; `.
    pub fn fields(&self) -> String {
        let mut text = format!("{}: {}", self.field, self.message);
        for problem in &self.more {
            text.push_str(&format!("; {}: {}", problem.field, problem.message));
        }
        text
    }

    /// How many fields are wrong.
    pub fn count(&self) -> usize {
        1 + self.more.len()
    }
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
            more: Vec::new(),
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
            0 => Err(self.refuse(field, invalid(0, PORT_RANGE))),
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
                invalid(
                    value,
                    &format!("must be greater than 0 and less than {MAX_AFFINITY_TIMEOUT}"),
                ),
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

// ---- The API server's validation of the fields kpng reads ----
//
// One home for what the API server refuses (k8s.io/kubernetes
// pkg/apis/core/validation `ValidateService`, `validateServicePort`,
// `ValidateServiceClusterIPsRelatedFields`; pkg/apis/discovery/validation
// `ValidateEndpointSlice`), for the fields kpng reads, after the API
// server's defaults (an unset protocol is TCP, an unset type ClusterIP,
// an unset affinity None). Messages are the API server's field errors'
// (`Unsupported value: …`, `Duplicate value: …`, `Required value`,
// `Invalid value: …`, `Forbidden: …`). The list of what is followed and
// what is not is in docs/operator/troubleshooting.md.

/// The Service types the API server accepts, in its order (sorted).
pub const SERVICE_TYPES: [&str; 4] = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];
/// The port protocols the API server accepts.
pub const PROTOCOLS: [&str; 3] = ["SCTP", "TCP", "UDP"];
/// The session affinities the API server accepts.
const AFFINITIES: [&str; 2] = ["ClientIP", "None"];
/// The traffic policies the API server accepts (external and internal).
const POLICIES: [&str; 2] = ["Cluster", "Local"];
/// The EndpointSlice address types the API server accepts.
const ADDRESS_TYPES: [&str; 3] = ["FQDN", "IPv4", "IPv6"];
/// A load-balancer ingress's IP modes.
const IP_MODES: [&str; 2] = ["Proxy", "VIP"];
/// The API server's limits of an EndpointSlice.
const MAX_SLICE_ENDPOINTS: usize = 1000;
const MAX_ENDPOINT_ADDRESSES: usize = 100;
const MAX_SLICE_PORTS: usize = 100;

const PORT_RANGE: &str = "must be between 1 and 65535, inclusive";
const VALID_IP: &str = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)";
const DNS_LABEL: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric \
     characters or '-', and must start and end with an alphanumeric character";

/// `Unsupported value: "x": supported values: "a", "b"`.
fn unsupported(value: &str, supported: &[&str]) -> String {
    let listed: Vec<String> = supported.iter().map(|v| format!("{v:?}")).collect();
    format!(
        "Unsupported value: {value:?}: supported values: {}",
        listed.join(", ")
    )
}

/// `Invalid value: <value>: <detail>`.
fn invalid(value: impl std::fmt::Display, detail: &str) -> String {
    format!("Invalid value: {value}: {detail}")
}

/// `Duplicate value: <value>`.
fn duplicate(value: impl std::fmt::Display) -> String {
    format!("Duplicate value: {value}")
}

/// `Required value` (with a detail).
fn required(detail: &str) -> String {
    match detail {
        "" => "Required value".to_owned(),
        detail => format!("Required value: {detail}"),
    }
}

/// `Forbidden: <detail>`.
fn forbidden(detail: &str) -> String {
    format!("Forbidden: {detail}")
}

/// `Too many: <n>: must have at most <max> items`.
fn too_many(n: usize, max: usize) -> String {
    format!("Too many: {n}: must have at most {max} items")
}

/// Whether `name` is an RFC 1123 label (a port's name).
fn is_dns_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    let edge = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes.first().is_some_and(edge)
        && bytes.last().is_some_and(edge)
        && bytes.iter().all(|b| edge(b) || *b == b'-')
}

/// Why `name` is no IANA service name (a named `targetPort`), if it is
/// not one: the API server's `IsValidPortName`.
fn port_name_problem(name: &str) -> Option<&'static str> {
    if name.len() > 15 {
        return Some("must be no more than 15 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Some("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)");
    }
    if !name.bytes().any(|b| b.is_ascii_lowercase()) {
        return Some("must contain at least one letter (a-z)");
    }
    if name.starts_with('-') || name.ends_with('-') {
        return Some("must not begin or end with a hyphen");
    }
    if name.contains("--") {
        return Some("must not contain consecutive hyphens");
    }
    None
}

/// Why the API server refuses `ip` where it refuses special addresses
/// (externalIPs, endpoint addresses: `ValidateNonSpecialIP`), if it does.
fn special_ip(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) if v4.is_unspecified() => Some("may not be unspecified (0.0.0.0)"),
        IpAddr::V6(v6) if v6.is_unspecified() => Some("may not be unspecified (::)"),
        ip if ip.is_loopback() => Some("may not be in the loopback range (127.0.0.0/8, ::1/128)"),
        IpAddr::V4(v4) if v4.is_link_local() => {
            Some("may not be in the link-local range (169.254.0.0/16, fe80::/10)")
        }
        IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80 => {
            Some("may not be in the link-local range (169.254.0.0/16, fe80::/10)")
        }
        IpAddr::V4(v4) if v4.octets()[..3] == [224, 0, 0] => {
            Some("may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)")
        }
        IpAddr::V6(v6) if (v6.segments()[0] & 0xff0f) == 0xff02 => {
            Some("may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)")
        }
        _ => None,
    }
}

/// What the API server would refuse in one object, gathered field by
/// field.
struct Checks<'c, 'a> {
    ctx: &'c Ctx<'a>,
    found: Vec<FieldProblem>,
}

impl<'c, 'a> Checks<'c, 'a> {
    fn new(ctx: &'c Ctx<'a>) -> Self {
        Self {
            ctx,
            found: Vec::new(),
        }
    }

    fn refuse(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.found.push(FieldProblem {
            field: field.into(),
            message: message.into(),
        });
    }

    /// A port number the API server accepts (1–65535).
    fn port(&mut self, field: impl FnOnce() -> String, value: i32) {
        if !(1..=65_535).contains(&value) {
            self.refuse(field(), invalid(value, PORT_RANGE));
        }
    }

    /// A protocol the API server accepts; unset is TCP.
    fn protocol(&mut self, field: impl FnOnce() -> String, value: Option<&str>) {
        if let Some(value) = value
            && !PROTOCOLS.contains(&value)
        {
            self.refuse(field(), unsupported(value, &PROTOCOLS));
        }
    }

    /// One of `supported`, when set.
    fn one_of(&mut self, field: &str, value: Option<&str>, supported: &[&str]) {
        if let Some(value) = value
            && !supported.contains(&value)
        {
            self.refuse(field, unsupported(value, supported));
        }
    }

    /// An IP address, not a special one when `special` says so.
    fn ip(&mut self, field: impl FnOnce() -> String, text: &str, special: bool) -> Option<IpAddr> {
        match text.parse::<IpAddr>() {
            Ok(ip) => {
                if special && let Some(why) = special_ip(ip) {
                    self.refuse(field(), invalid(format!("{text:?}"), why));
                }
                Some(ip)
            }
            Err(_) => {
                self.refuse(field(), invalid(format!("{text:?}"), VALID_IP));
                None
            }
        }
    }

    /// The object's error, if anything was found.
    fn done(self) -> Result<(), TranslateError> {
        let mut found = self.found.into_iter();
        let Some(first) = found.next() else {
            return Ok(());
        };
        Err(TranslateError {
            more: found.collect(),
            ..self.ctx.refuse(first.field, first.message)
        })
    }
}

/// Checks a Service as the API server validates it, for the fields kpng
/// reads: every field it would refuse, in one error.
///
/// # Errors
/// The fields the API server would refuse ([`TranslateError::refused`]).
pub fn validate_service(svc: &objects::Service) -> Result<(), TranslateError> {
    let ctx = Ctx {
        kind: "Service",
        meta: &svc.metadata,
    };
    let mut checks = Checks::new(&ctx);
    let Some(spec) = &svc.spec else {
        return Ok(());
    };
    let r#type = spec.type_.as_deref().unwrap_or("ClusterIP");
    checks.one_of("spec.type", Some(r#type), &SERVICE_TYPES);
    let external_name = r#type == "ExternalName";

    // ClusterIPs: at most two, one per family, "None" alone, the first
    // equal to clusterIP.
    let ips: &[String] = spec.cluster_ips.as_deref().unwrap_or_default();
    if let (Some(ip), Some(first)) = (&spec.cluster_ip, ips.first())
        && ip != first
        && !external_name
    {
        checks.refuse(
            "spec.clusterIPs[0]",
            invalid(
                format!("{first:?}"),
                "must match `clusterIP` when both are specified",
            ),
        );
    }
    let listed: Vec<&String> = match (ips.is_empty(), &spec.cluster_ip) {
        (false, _) => ips.iter().collect(),
        (true, Some(ip)) => vec![ip],
        (true, None) => Vec::new(),
    };
    let headless = listed.first().is_some_and(|ip| ip.as_str() == "None");
    if listed.len() > 2 {
        checks.refuse(
            "spec.clusterIPs",
            "Invalid value: may only hold up to 2 values",
        );
    }
    let mut families = Vec::new();
    for (i, ip) in listed.iter().enumerate() {
        let field = || format!("spec.clusterIPs[{i}]");
        match ip.as_str() {
            "" if i == 0 => {}
            "None" if i == 0 => {
                if matches!(r#type, "NodePort" | "LoadBalancer") {
                    checks.refuse(
                        field(),
                        invalid(
                            "\"None\"",
                            &format!("may not be set to 'None' for {type} services"),
                        ),
                    );
                }
            }
            "None" => checks.refuse(
                field(),
                invalid(
                    "\"None\"",
                    "must not be set to 'None' after the first value",
                ),
            ),
            text if !headless => {
                if let Some(ip) = checks.ip(field, text, false) {
                    if families.contains(&ip.is_ipv4()) {
                        checks.refuse(
                            format!("spec.clusterIPs[{i}]"),
                            invalid(
                                format!("{text:?}"),
                                "may specify no more than one IP for each IP family",
                            ),
                        );
                    }
                    families.push(ip.is_ipv4());
                }
            }
            text => checks.refuse(
                field(),
                invalid(
                    format!("{text:?}"),
                    "must be empty when the first value is 'None'",
                ),
            ),
        }
    }

    // Ports: named when several, names unique, numbers and protocols.
    // (No port at all, which the API server refuses unless headless, is
    // kept: such a Service programs nothing but its addresses.)
    let ports: &[k8s_openapi::api::core::v1::ServicePort] =
        spec.ports.as_deref().unwrap_or_default();
    let several = ports.len() > 1;
    for (i, p) in ports.iter().enumerate() {
        let field = |f: &str| format!("spec.ports[{i}].{f}");
        let name = p.name.as_deref().unwrap_or_default();
        if name.is_empty() {
            if several {
                checks.refuse(field("name"), required(""));
            }
        } else {
            if !is_dns_label(name) {
                checks.refuse(field("name"), invalid(format!("{name:?}"), DNS_LABEL));
            }
            if ports[..i].iter().any(|q| q.name.as_deref() == Some(name)) {
                checks.refuse(field("name"), duplicate(format!("{name:?}")));
            }
        }
        checks.port(|| field("port"), p.port);
        checks.protocol(|| field("protocol"), p.protocol.as_deref());
        match &p.target_port {
            // The API server's default: the port.
            None | Some(IntOrString::Int(0)) => {}
            Some(IntOrString::String(n)) if n.is_empty() => {}
            Some(IntOrString::Int(n)) => checks.port(|| field("targetPort"), *n),
            Some(IntOrString::String(n)) => {
                if let Some(why) = port_name_problem(n) {
                    checks.refuse(field("targetPort"), invalid(format!("{n:?}"), why));
                }
            }
        }
        let protocol = p.protocol.as_deref().unwrap_or("TCP");
        let same = |q: &k8s_openapi::api::core::v1::ServicePort| {
            q.protocol.as_deref().unwrap_or("TCP") == protocol
        };
        if ports[..i].iter().any(|q| same(q) && q.port == p.port) {
            checks.refuse(
                format!("spec.ports[{i}]"),
                duplicate(format!("\"{protocol}/{}\"", p.port)),
            );
        }
        match p.node_port {
            None | Some(0) => {}
            Some(n) => {
                checks.port(|| field("nodePort"), n);
                if r#type == "ClusterIP" {
                    checks.refuse(
                        field("nodePort"),
                        forbidden("may not be used when `type` is 'ClusterIP'"),
                    );
                }
                if ports[..i].iter().any(|q| same(q) && q.node_port == Some(n)) {
                    checks.refuse(field("nodePort"), duplicate(n));
                }
            }
        }
    }

    // Session affinity.
    let affinity = spec.session_affinity.as_deref().unwrap_or("None");
    checks.one_of("spec.sessionAffinity", Some(affinity), &AFFINITIES);
    let config = spec.session_affinity_config.as_ref();
    match affinity {
        "ClientIP" => {
            let timeout = config
                .and_then(|c| c.client_ip.as_ref())
                .and_then(|c| c.timeout_seconds);
            if let Some(t) = timeout
                && !(1..=i64::from(MAX_AFFINITY_TIMEOUT)).contains(&i64::from(t))
            {
                checks.refuse(
                    "spec.sessionAffinityConfig.clientIP.timeoutSeconds",
                    invalid(
                        t,
                        &format!("must be greater than 0 and less than {MAX_AFFINITY_TIMEOUT}"),
                    ),
                );
            }
        }
        "None" if config.is_some() => checks.refuse(
            "spec.sessionAffinityConfig",
            forbidden("must not be set when session affinity is None"),
        ),
        _ => {}
    }

    // Addresses from outside.
    for (i, ip) in spec.external_ips.iter().flatten().enumerate() {
        checks.ip(|| format!("spec.externalIPs[{i}]"), ip, true);
    }
    let ranges = spec
        .load_balancer_source_ranges
        .as_deref()
        .unwrap_or_default();
    if !ranges.is_empty() && r#type != "LoadBalancer" {
        checks.refuse(
            "spec.loadBalancerSourceRanges",
            forbidden("may only be used when `type` is 'LoadBalancer'"),
        );
    }
    for (i, range) in ranges.iter().enumerate() {
        let field = format!("spec.loadBalancerSourceRanges[{i}]");
        if kpng_model::addr::canonical_cidr(&field, range.trim()).is_err() {
            checks.refuse(
                field,
                invalid(
                    format!("{range:?}"),
                    "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
                ),
            );
        }
    }
    let ingress = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref());
    for (i, ing) in ingress.into_iter().flatten().enumerate() {
        if let Some(ip) = ing.ip.as_deref().filter(|ip| !ip.is_empty()) {
            checks.ip(|| format!("status.loadBalancer.ingress[{i}].ip"), ip, false);
        }
        checks.one_of(
            &format!("status.loadBalancer.ingress[{i}].ipMode"),
            ing.ip_mode.as_deref(),
            &IP_MODES,
        );
    }

    // Traffic policies and the health check port.
    checks.one_of(
        "spec.externalTrafficPolicy",
        spec.external_traffic_policy.as_deref(),
        &POLICIES,
    );
    checks.one_of(
        "spec.internalTrafficPolicy",
        spec.internal_traffic_policy.as_deref(),
        &POLICIES,
    );
    match spec.health_check_node_port {
        None | Some(0) => {}
        Some(port) => {
            checks.port(|| "spec.healthCheckNodePort".to_owned(), port);
            let local = spec.external_traffic_policy.as_deref() == Some("Local");
            if r#type != "LoadBalancer" || !local {
                checks.refuse(
                    "spec.healthCheckNodePort",
                    invalid(
                        port,
                        "may only be set when `type` is 'LoadBalancer' and \
                         `externalTrafficPolicy` is 'Local'",
                    ),
                );
            }
        }
    }
    checks.done()
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
    validate_service(svc)?;
    let r#type = match spec.type_.as_deref().unwrap_or("ClusterIP") {
        "ClusterIP" => ServiceType::ClusterIp,
        "NodePort" => ServiceType::NodePort,
        "LoadBalancer" => ServiceType::LoadBalancer,
        "ExternalName" => return Ok(None),
        other => return Err(ctx.refuse("spec.type", unsupported(other, &SERVICE_TYPES))),
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
            return Err(ctx.refuse("spec.sessionAffinity", unsupported(other, &AFFINITIES)));
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
    // What the API server would refuse, gathered as the slice is read
    // (each address is parsed once).
    let mut checks = Checks::new(&ctx);
    let family = match slice.address_type.as_str() {
        "FQDN" => return Ok(None),
        "IPv4" => Some(true),
        "IPv6" => Some(false),
        "" => {
            checks.refuse("addressType", required(""));
            None
        }
        other => {
            checks.refuse("addressType", unsupported(other, &ADDRESS_TYPES));
            None
        }
    };
    let namespace = slice.metadata.namespace.as_deref().unwrap_or_default();
    let service = ServiceName::new(namespace, service.as_str());

    let listed: &[k8s_openapi::api::discovery::v1::EndpointPort] =
        slice.ports.as_deref().unwrap_or_default();
    if listed.len() > MAX_SLICE_PORTS {
        checks.refuse("ports", too_many(listed.len(), MAX_SLICE_PORTS));
    }
    let mut ports = Vec::new();
    for (i, p) in listed.iter().enumerate() {
        let name = p.name.as_deref().unwrap_or_default();
        if !name.is_empty() && !is_dns_label(name) {
            checks.refuse(
                format!("ports[{i}].name"),
                invalid(format!("{name:?}"), DNS_LABEL),
            );
        }
        if listed[..i]
            .iter()
            .any(|q| q.name.as_deref().unwrap_or_default() == name)
        {
            checks.refuse(format!("ports[{i}].name"), duplicate(format!("{name:?}")));
        }
        checks.protocol(|| format!("ports[{i}].protocol"), p.protocol.as_deref());
        let (Some(name), Some(port)) = (&p.name, p.port) else {
            continue;
        };
        let Ok(port) = u16::try_from(port) else {
            checks.refuse(
                format!("ports[{i}].port"),
                invalid(port, "must be between 0 and 65535, inclusive"),
            );
            continue;
        };
        let protocol = match p.protocol.as_deref().unwrap_or("TCP") {
            "UDP" => Protocol::Udp,
            "SCTP" => Protocol::Sctp,
            _ => Protocol::Tcp,
        };
        ports.push(PortInfo::new(name, protocol, port));
    }
    let ports = interner.ports(PortList::new(ports));

    if slice.endpoints.len() > MAX_SLICE_ENDPOINTS {
        checks.refuse(
            "endpoints",
            too_many(slice.endpoints.len(), MAX_SLICE_ENDPOINTS),
        );
    }
    let mut endpoints = Vec::with_capacity(slice.endpoints.len());
    for (i, ep) in slice.endpoints.iter().enumerate() {
        if ep.addresses.len() > MAX_ENDPOINT_ADDRESSES {
            checks.refuse(
                format!("endpoints[{i}].addresses"),
                too_many(ep.addresses.len(), MAX_ENDPOINT_ADDRESSES),
            );
        }
        let mut first = None;
        for (j, text) in ep.addresses.iter().enumerate() {
            let field = || format!("endpoints[{i}].addresses[{j}]");
            let Some(ip) = checks.ip(field, text, true) else {
                continue;
            };
            if let Some(v4) = family
                && ip.is_ipv4() != v4
            {
                let detail = match v4 {
                    true => "must be a valid IPv4 address",
                    false => "must be a valid IPv6 address",
                };
                checks.refuse(field(), invalid(format!("{text:?}"), detail));
                continue;
            }
            if j == 0 {
                first = Some(ip);
            }
        }
        if ep.addresses.is_empty() {
            checks.refuse(
                format!("endpoints[{i}].addresses"),
                required("must contain at least 1 address"),
            );
        }
        // Only the first address is used (as kube-proxy does).
        let Some(ip) = first else {
            continue;
        };
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
    checks.done()?;
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
            "Service a/web: spec.ports[1].port: Invalid value: 0: must be between 1 and 65535, inclusive"
        );
        let e = refused(serde_json::json!({"ports": [{"port": 70000}]}));
        assert!(e.refused);
        assert_eq!(
            e.fields(),
            "spec.ports[0].port: Invalid value: 70000: must be between 1 and 65535, inclusive"
        );
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
                format!("Invalid value: {bad}: must be greater than 0 and less than 86400")
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

    /// The fields and messages of what a Service spec is refused for.
    fn problems(spec: serde_json::Value) -> Vec<String> {
        let e = refused(spec);
        assert!(e.refused, "{e}");
        let mut all = vec![format!("{}: {}", e.field, e.message)];
        all.extend(e.more.iter().map(|p| format!("{}: {}", p.field, p.message)));
        all
    }

    fn accepted(spec: serde_json::Value) {
        if let Err(e) = service(&web(spec), &TranslateConfig::default()) {
            panic!("refused: {e}");
        }
    }

    #[test]
    fn an_unknown_type_is_refused_with_the_supported_values() {
        assert_eq!(
            problems(serde_json::json!({"type": "LoadBalancr"})),
            [
                "spec.type: Unsupported value: \"LoadBalancr\": supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\""
            ]
        );
        for good in ["ClusterIP", "NodePort", "LoadBalancer"] {
            accepted(serde_json::json!({"type": good}));
        }
    }

    #[test]
    fn port_names_are_unique_required_when_several_and_labels() {
        assert_eq!(
            problems(
                serde_json::json!({"ports": [{"name": "http", "port": 80}, {"name": "http", "port": 81}]})
            ),
            ["spec.ports[1].name: Duplicate value: \"http\""]
        );
        assert_eq!(
            problems(serde_json::json!({"ports": [{"name": "http", "port": 80}, {"port": 81}]})),
            ["spec.ports[1].name: Required value"]
        );
        let bad = problems(serde_json::json!({"ports": [{"name": "HTTP", "port": 80}]}));
        assert!(
            bad[0].starts_with(
                "spec.ports[0].name: Invalid value: \"HTTP\": a lowercase RFC 1123 label"
            ),
            "{bad:?}"
        );
        // One port may go unnamed.
        accepted(serde_json::json!({"ports": [{"port": 80}]}));
    }

    #[test]
    fn ports_target_ports_and_node_ports_are_in_range_and_unique() {
        assert_eq!(
            problems(
                serde_json::json!({"ports": [{"name": "a", "port": 80, "targetPort": 70000}]})
            ),
            [
                "spec.ports[0].targetPort: Invalid value: 70000: must be between 1 and 65535, inclusive"
            ]
        );
        assert_eq!(
            problems(
                serde_json::json!({"ports": [{"name": "a", "port": 80, "targetPort": "http_web"}]})
            ),
            [
                "spec.ports[0].targetPort: Invalid value: \"http_web\": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"
            ]
        );
        assert_eq!(
            problems(
                serde_json::json!({"ports": [{"name": "a", "port": 80, "targetPort": "8080"}]})
            ),
            [
                "spec.ports[0].targetPort: Invalid value: \"8080\": must contain at least one letter (a-z)"
            ]
        );
        assert_eq!(
            problems(
                serde_json::json!({"ports": [{"name": "a", "port": 80}, {"name": "b", "port": 80}]})
            ),
            ["spec.ports[1]: Duplicate value: \"TCP/80\""]
        );
        // The same number in two protocols is two ports.
        accepted(
            serde_json::json!({"ports": [{"name": "a", "port": 53}, {"name": "b", "port": 53, "protocol": "UDP"}]}),
        );
        assert_eq!(
            problems(
                serde_json::json!({"type": "NodePort", "ports": [{"name": "a", "port": 80, "nodePort": 30001}, {"name": "b", "port": 81, "nodePort": 30001}]})
            ),
            ["spec.ports[1].nodePort: Duplicate value: 30001"]
        );
        assert_eq!(
            problems(serde_json::json!({"ports": [{"name": "a", "port": 80, "nodePort": 30001}]})),
            ["spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'"]
        );
        assert_eq!(
            problems(
                serde_json::json!({"type": "NodePort", "ports": [{"name": "a", "port": 80, "nodePort": -1}]})
            ),
            ["spec.ports[0].nodePort: Invalid value: -1: must be between 1 and 65535, inclusive"]
        );
    }

    #[test]
    fn protocols_are_the_api_servers() {
        assert_eq!(
            problems(serde_json::json!({"ports": [{"name": "a", "port": 80, "protocol": "tcp"}]})),
            [
                "spec.ports[0].protocol: Unsupported value: \"tcp\": supported values: \"SCTP\", \"TCP\", \"UDP\""
            ]
        );
        accepted(serde_json::json!({"ports": [{"name": "a", "port": 80, "protocol": "SCTP"}]}));
    }

    #[test]
    fn cluster_ips_are_addresses_one_per_family_none_alone_and_match_cluster_ip() {
        assert_eq!(
            problems(serde_json::json!({"clusterIP": "10.96.0.300"})),
            [
                "spec.clusterIPs[0]: Invalid value: \"10.96.0.300\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"
            ]
        );
        assert_eq!(
            problems(
                serde_json::json!({"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10", "10.96.0.11"]})
            ),
            [
                "spec.clusterIPs[1]: Invalid value: \"10.96.0.11\": may specify no more than one IP for each IP family"
            ]
        );
        assert_eq!(
            problems(serde_json::json!({"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.12"]})),
            [
                "spec.clusterIPs[0]: Invalid value: \"10.96.0.12\": must match `clusterIP` when both are specified"
            ]
        );
        assert_eq!(
            problems(serde_json::json!({"clusterIP": "None", "type": "NodePort"})),
            [
                "spec.clusterIPs[0]: Invalid value: \"None\": may not be set to 'None' for NodePort services"
            ]
        );
        assert_eq!(
            problems(
                serde_json::json!({"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10", "fd00::a", "fd00::b"]})
            )[0],
            "spec.clusterIPs: Invalid value: may only hold up to 2 values"
        );
        accepted(
            serde_json::json!({"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10", "fd00::a"]}),
        );
        accepted(serde_json::json!({"clusterIP": "None", "clusterIPs": ["None"]}));
    }

    #[test]
    fn policies_affinity_and_addresses_from_outside_are_the_api_servers() {
        assert_eq!(
            problems(serde_json::json!({"type": "NodePort", "externalTrafficPolicy": "local"})),
            [
                "spec.externalTrafficPolicy: Unsupported value: \"local\": supported values: \"Cluster\", \"Local\""
            ]
        );
        assert_eq!(
            problems(serde_json::json!({"internalTrafficPolicy": "Nearby"})),
            [
                "spec.internalTrafficPolicy: Unsupported value: \"Nearby\": supported values: \"Cluster\", \"Local\""
            ]
        );
        assert_eq!(
            problems(
                serde_json::json!({"sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}}})
            ),
            [
                "spec.sessionAffinityConfig: Forbidden: must not be set when session affinity is None"
            ]
        );
        assert_eq!(
            problems(serde_json::json!({"externalIPs": ["127.0.0.1"]})),
            [
                "spec.externalIPs[0]: Invalid value: \"127.0.0.1\": may not be in the loopback range (127.0.0.0/8, ::1/128)"
            ]
        );
        assert_eq!(
            problems(serde_json::json!({"loadBalancerSourceRanges": ["10.0.0.0/8"]})),
            [
                "spec.loadBalancerSourceRanges: Forbidden: may only be used when `type` is 'LoadBalancer'"
            ]
        );
        assert_eq!(
            problems(
                serde_json::json!({"type": "LoadBalancer", "loadBalancerSourceRanges": ["10.0.0.0/33"]})
            ),
            [
                "spec.loadBalancerSourceRanges[0]: Invalid value: \"10.0.0.0/33\": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"
            ]
        );
        assert_eq!(
            problems(serde_json::json!({"healthCheckNodePort": 30100})),
            [
                "spec.healthCheckNodePort: Invalid value: 30100: may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'"
            ]
        );
        accepted(
            serde_json::json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local", "healthCheckNodePort": 30100,
            "loadBalancerSourceRanges": ["10.0.0.0/8"], "ports": [{"name": "a", "port": 80, "nodePort": 30080}]}),
        );
    }

    #[test]
    fn every_wrong_field_of_a_service_is_named_at_once() {
        let e = refused(serde_json::json!({
            "type": "LoadBalancr",
            "ports": [{"name": "http", "port": 80}, {"name": "http", "port": 0}],
        }));
        assert_eq!(e.count(), 3, "{e}");
        assert_eq!(
            e.to_string(),
            "Service a/web: spec.type: Unsupported value: \"LoadBalancr\": supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\"; \
             spec.ports[1].name: Duplicate value: \"http\"; \
             spec.ports[1].port: Invalid value: 0: must be between 1 and 65535, inclusive"
        );
    }

    /// An EndpointSlice of `web` with `fields` over a valid one.
    fn slice_of(fields: serde_json::Value) -> objects::EndpointSlice {
        let mut base = serde_json::json!({
            "kind": "EndpointSlice",
            "metadata": {"namespace": "a", "name": "web-1", "labels": {SERVICE_NAME_LABEL: "web"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.1.2.3"]}],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        });
        if let (Some(base), Some(extra)) = (base.as_object_mut(), fields.as_object()) {
            base.extend(extra.clone());
        }
        serde_json::from_value(base).expect("an EndpointSlice")
    }

    fn slice_problems(fields: serde_json::Value) -> Vec<String> {
        match endpoint_slice(&slice_of(fields), &mut Interner::new()) {
            Ok(s) => panic!("accepted: {s:?}"),
            Err(e) => {
                assert!(e.refused, "{e}");
                assert_eq!(e.object, "EndpointSlice a/web-1");
                let mut all = vec![format!("{}: {}", e.field, e.message)];
                all.extend(e.more.iter().map(|p| format!("{}: {}", p.field, p.message)));
                all
            }
        }
    }

    #[test]
    fn slice_addresses_are_of_the_slices_family_and_not_special() {
        assert_eq!(
            slice_problems(serde_json::json!({"endpoints": [{"addresses": ["10.1.2.300"]}]})),
            [
                "endpoints[0].addresses[0]: Invalid value: \"10.1.2.300\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"
            ]
        );
        assert_eq!(
            slice_problems(serde_json::json!({"endpoints": [{"addresses": ["fd00::1"]}]})),
            ["endpoints[0].addresses[0]: Invalid value: \"fd00::1\": must be a valid IPv4 address"]
        );
        assert_eq!(
            slice_problems(
                serde_json::json!({"addressType": "IPv6", "endpoints": [{"addresses": ["10.1.2.3"]}]})
            ),
            [
                "endpoints[0].addresses[0]: Invalid value: \"10.1.2.3\": must be a valid IPv6 address"
            ]
        );
        assert_eq!(
            slice_problems(
                serde_json::json!({"endpoints": [{"addresses": ["169.254.1.1"]}, {"addresses": []}]})
            ),
            [
                "endpoints[0].addresses[0]: Invalid value: \"169.254.1.1\": may not be in the link-local range (169.254.0.0/16, fe80::/10)",
                "endpoints[1].addresses: Required value: must contain at least 1 address",
            ]
        );
        assert_eq!(
            slice_problems(serde_json::json!({"addressType": "IP"})),
            [
                "addressType: Unsupported value: \"IP\": supported values: \"FQDN\", \"IPv4\", \"IPv6\""
            ]
        );
        assert_eq!(
            slice_problems(serde_json::json!({"addressType": ""})),
            ["addressType: Required value"]
        );
    }

    #[test]
    fn slice_port_names_are_unique_labels_and_protocols_known() {
        assert_eq!(
            slice_problems(
                serde_json::json!({"ports": [{"name": "http", "port": 8080}, {"name": "http", "port": 8081}]})
            ),
            ["ports[1].name: Duplicate value: \"http\""]
        );
        assert_eq!(
            slice_problems(
                serde_json::json!({"ports": [{"name": "http", "port": 8080, "protocol": "QUIC"}]})
            ),
            [
                "ports[0].protocol: Unsupported value: \"QUIC\": supported values: \"SCTP\", \"TCP\", \"UDP\""
            ]
        );
        assert_eq!(
            slice_problems(serde_json::json!({"ports": [{"name": "Http", "port": 8080}]}))[0]
                .split(':')
                .take(3)
                .collect::<Vec<_>>()
                .join(":"),
            "ports[0].name: Invalid value: \"Http\""
        );
        let ok = endpoint_slice(&slice_of(serde_json::json!({})), &mut Interner::new());
        assert_eq!(ok.expect("valid").expect("read").endpoints.len(), 1);
    }
}
