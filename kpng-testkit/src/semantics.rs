//! One small cluster per Service behaviour of `docs/reference/semantics.md`, as
//! manifests (the YAML `kubectl get -o yaml` prints), for snapshot tests
//! of a backend's render: what a backend makes of each case is reviewed
//! as a diff when it changes, without root.
//!
//! Every case runs on node `node-a` (zone `zone-a`, 192.168.1.11 and
//! fd00:192:168:1::11); endpoints named `node-a` are local.

/// The node every case runs on.
pub const NODE: &str = "node-a";

/// A manifest of node `node-a` alone: what every case has, so a test can
/// take its render away and keep what each case adds. Cases append their
/// objects to its list.
pub const BASELINE: &str = r#"apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: node-a, labels: {topology.kubernetes.io/zone: zone-a}}
  status: {addresses: [{type: InternalIP, address: 192.168.1.11}, {type: InternalIP, address: "fd00:192:168:1::11"}]}
"#;

/// A Service `ns/NAME` with `spec`, and one EndpointSlice with
/// `endpoints` and `ports` (YAML flow lists).
fn service(name: &str, spec: &str, endpoints: &str, ports: &str) -> String {
    load_balancer(name, spec, "[]", endpoints, ports)
}

/// [`service`] with these load-balancer `ingress` entries in its status.
fn load_balancer(name: &str, spec: &str, ingress: &str, endpoints: &str, ports: &str) -> String {
    format!(
        r#"
- apiVersion: v1
  kind: Service
  metadata: {{namespace: ns, name: {name}}}
  spec: {spec}
  status: {{loadBalancer: {{ingress: {ingress}}}}}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {{namespace: ns, name: {name}-1, labels: {{kubernetes.io/service-name: {name}}}}}
  addressType: IPv4
  endpoints: {endpoints}
  ports: {ports}
"#
    )
}

const HTTP: &str = "[{name: http, port: 8080, protocol: TCP}]";
const HTTP_PORT: &str = "ports: [{name: http, port: 80, targetPort: 8080}]";
/// One endpoint here, one on node-b.
const TWO: &str = "[{addresses: [10.244.1.10], nodeName: node-a, zone: zone-a}, {addresses: [10.244.2.10], nodeName: node-b, zone: zone-b}]";

/// The cases: a name (the snapshot's) and a manifest, `BASELINE` included.
pub fn cases() -> Vec<(&'static str, String)> {
    let with = |items: &[String]| format!("{BASELINE}{}", items.concat());
    let spec = |extra: &str| format!("{{clusterIP: 10.96.0.10, {extra}{HTTP_PORT}}}");
    let lb = |extra: &str| {
        format!(
            "{{type: LoadBalancer, {extra}clusterIP: 10.96.0.10, \
             ports: [{{name: http, port: 80, targetPort: 8080, nodePort: 30080}}]}}"
        )
    };
    vec![
        (
            "cluster_ip_balances_over_ready_endpoints",
            with(&[service("web", &spec(""), TWO, HTTP)]),
        ),
        (
            "internal_traffic_policy_local_uses_local_endpoints",
            with(&[service(
                "web",
                &spec("internalTrafficPolicy: Local, "),
                TWO,
                HTTP,
            )]),
        ),
        (
            "node_port_with_cluster_policy_masquerades",
            with(&[service(
                "web",
                "{type: NodePort, clusterIP: 10.96.0.10, ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30080}]}",
                TWO,
                HTTP,
            )]),
        ),
        (
            "load_balancer_with_local_policy_keeps_the_client_address",
            with(&[load_balancer(
                "web",
                &lb("externalTrafficPolicy: Local, healthCheckNodePort: 32000, "),
                "[{ip: 203.0.113.7}]",
                TWO,
                HTTP,
            )]),
        ),
        (
            "external_ips_are_served",
            with(&[service(
                "web",
                &spec("externalIPs: [198.51.100.5], "),
                TWO,
                HTTP,
            )]),
        ),
        (
            "load_balancer_source_ranges_drop_other_sources",
            with(&[load_balancer(
                "web",
                &lb("loadBalancerSourceRanges: [203.0.113.0/24], "),
                "[{ip: 198.51.100.9}]",
                TWO,
                HTTP,
            )]),
        ),
        (
            "load_balancer_ip_mode_proxy_is_left_alone",
            with(&[load_balancer(
                "web",
                &lb(""),
                "[{ip: 198.51.100.9, ipMode: Proxy}]",
                TWO,
                HTTP,
            )]),
        ),
        (
            "no_endpoint_rejects",
            with(&[service("web", &spec(""), "[]", HTTP)]),
        ),
        (
            "local_policy_without_local_endpoint_drops",
            with(&[service(
                "web",
                &spec("internalTrafficPolicy: Local, "),
                "[{addresses: [10.244.2.10], nodeName: node-b}]",
                HTTP,
            )]),
        ),
        (
            "client_ip_affinity_pins_a_client",
            with(&[service(
                "web",
                &spec(
                    "sessionAffinity: ClientIP, sessionAffinityConfig: {clientIP: {timeoutSeconds: 600}}, ",
                ),
                TWO,
                HTTP,
            )]),
        ),
        (
            "terminating_endpoints_serve_when_none_is_ready",
            with(&[service(
                "web",
                &spec(""),
                "[{addresses: [10.244.1.10], nodeName: node-a, conditions: {ready: false, serving: true, terminating: true}}, {addresses: [10.244.2.10], nodeName: node-b, conditions: {ready: false, serving: false, terminating: true}}]",
                HTTP,
            )]),
        ),
        (
            "zone_hints_keep_traffic_in_the_zone",
            with(&[service(
                "web",
                &spec(""),
                "[{addresses: [10.244.1.10], nodeName: node-a, zone: zone-a, hints: {forZones: [{name: zone-a}]}}, {addresses: [10.244.2.10], nodeName: node-b, zone: zone-b, hints: {forZones: [{name: zone-b}]}}]",
                HTTP,
            )]),
        ),
        (
            "dual_stack_families_each_on_their_own",
            with(&[
                service(
                    "web",
                    "{ipFamilyPolicy: RequireDualStack, ipFamilies: [IPv4, IPv6], clusterIP: 10.96.0.10, clusterIPs: [10.96.0.10, \"fd00:10:96::10\"], ports: [{name: http, port: 80, targetPort: 8080}]}",
                    TWO,
                    HTTP,
                ),
                r#"
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {namespace: ns, name: web-6, labels: {kubernetes.io/service-name: web}}
  addressType: IPv6
  endpoints: [{addresses: ["fd00:10:244:1::10"], nodeName: node-a}]
  ports: [{name: http, port: 8080, protocol: TCP}]
"#
                .to_string(),
            ]),
        ),
        (
            "udp_and_sctp_ports",
            with(&[service(
                "dns",
                "{clusterIP: 10.96.0.10, ports: [{name: dns, port: 53, protocol: UDP, targetPort: 5353}, {name: sig, port: 3868, protocol: SCTP, targetPort: 3868}]}",
                TWO,
                "[{name: dns, port: 5353, protocol: UDP}, {name: sig, port: 3868, protocol: SCTP}]",
            )]),
        ),
        (
            "headless_and_external_name_services_make_nothing",
            with(&[
                service(
                    "headless",
                    "{clusterIP: None, ports: [{name: http, port: 80}]}",
                    TWO,
                    HTTP,
                ),
                service(
                    "alias",
                    "{type: ExternalName, externalName: example.com}",
                    "[]",
                    HTTP,
                ),
            ]),
        ),
        (
            "service_cidrs_drop_unallocated_addresses",
            with(&[r#"
- apiVersion: networking.k8s.io/v1
  kind: ServiceCIDR
  metadata: {name: kubernetes}
  spec: {cidrs: [10.96.0.0/12, "fd00:10:96::/112"]}
"#
            .to_string()]),
        ),
    ]
}
