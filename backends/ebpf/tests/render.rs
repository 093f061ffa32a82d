//! What the backend makes of each Service behaviour of docs/reference/semantics.md:
//! the dry run's map writes for one small cluster per behaviour
//! (`kpng_testkit::semantics`), less what the node alone gives, as insta
//! snapshots. A change of what the maps hold shows as a diff to review,
//! and no root is needed.
//! `INSTA_UPDATE=always cargo test -p kpng-backend-ebpf --test render`
//! writes new snapshots (then review them with `git diff`).

use std::collections::HashSet;

use kpng_backend_ebpf::{EbpfBackend, EbpfConfig};
use kpng_kube::{Ingest, IngestConfig, file};
use kpng_sink::ProxyConfig;
use kpng_store::Store;
use kpng_testkit::semantics;
use kpng_view::NodeProjector;

/// The dry run's writes for `manifest`, the first (full) sync.
fn render(manifest: &str) -> Vec<String> {
    let proxy = ProxyConfig::default()
        .cluster_cidrs(["10.244.0.0/16", "fd00:10:244::/48"].map(|c| c.parse().expect("cidr")));
    // With a tc interface: the records of external traffic too.
    render_with(manifest, EbpfConfig::new(proxy).tc_interfaces(["eth0"]))
}

/// The dry run's writes for `manifest` with `config`, the first sync.
fn render_with(manifest: &str, config: EbpfConfig) -> Vec<String> {
    let objects = file::parse_str("case.yaml", manifest).expect("valid manifest");
    let mut ingest = Ingest::new(Store::new(), IngestConfig::default());
    ingest.load(&objects);
    let mut backend = EbpfBackend::dry_run(config);
    let mut projector = NodeProjector::new(semantics::NODE);
    projector
        .sync_into(&ingest.reader().snapshot(), &mut backend)
        .expect("dry run");
    backend.last_writes().to_vec()
}

#[test]
fn each_service_behaviour_renders_as_its_snapshot() {
    let baseline: HashSet<String> = render(semantics::BASELINE).into_iter().collect();
    for (name, manifest) in semantics::cases() {
        let added: Vec<String> = render(&manifest)
            .into_iter()
            .filter(|l| !baseline.contains(l))
            .collect();
        insta::assert_snapshot!(name, added.join("\n"));
    }
}

/// A dual-stack NodePort Service (30080) with `externalTrafficPolicy:
/// Local`, one endpoint of each family here and one on node-b.
fn dual_stack_node_port() -> String {
    let slice = |name: &str, family: &str, here: &str, there: &str| {
        format!(
            r#"
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {{namespace: ns, name: {name}, labels: {{kubernetes.io/service-name: web}}}}
  addressType: {family}
  endpoints: [{{addresses: ["{here}"], nodeName: node-a}}, {{addresses: ["{there}"], nodeName: node-b}}]
  ports: [{{name: http, port: 8080, protocol: TCP}}]
"#
        )
    };
    format!(
        r#"{}
- apiVersion: v1
  kind: Service
  metadata: {{namespace: ns, name: web}}
  spec: {{type: NodePort, externalTrafficPolicy: Local, clusterIP: 10.96.0.10, clusterIPs: [10.96.0.10, "fd00:96::10"], ipFamilies: [IPv4, IPv6], ipFamilyPolicy: RequireDualStack, ports: [{{name: http, port: 80, targetPort: 8080, nodePort: 30080}}]}}
{}{}"#,
        semantics::BASELINE,
        slice("web-4", "IPv4", "10.244.1.10", "10.244.2.10"),
        slice("web-6", "IPv6", "fd00:10:244:1::10", "fd00:10:244:2::10"),
    )
}

/// The records of `writes` (`set services …`, `set external …`) on
/// loopback.
fn loopback(writes: &[String]) -> Vec<String> {
    writes
        .iter()
        .filter(|w| w.contains(" 127.") || w.contains(" ::1 "))
        .cloned()
        .collect()
}

/// Localhost NodePorts (on by default, as kube-proxy's iptables mode): a
/// NodePort gets a socket record on 127.0.0.1 and on ::1, for the node's
/// own network namespace only ("node only"), leading to the set a node
/// address's socket record leads to (every endpoint, under
/// `externalTrafficPolicy: Local` too, as kube-proxy treats the node's
/// own traffic), and no record for packets from outside. Off, none; with
/// `--nodeport-addresses`, each loopback address only when inside it.
#[test]
fn localhost_nodeports_are_socket_records_of_the_node_alone() {
    let manifest = dual_stack_node_port();
    let tc = |proxy: ProxyConfig| EbpfConfig::new(proxy).tc_interfaces(["eth0"]);
    let writes = render_with(&manifest, tc(ProxyConfig::default()));
    let node_record = |ip: &str| {
        writes
            .iter()
            .find(|w| w.starts_with(&format!("set services {ip} tcp 30080 : ")))
            .cloned()
            .unwrap_or_else(|| panic!("no socket record on {ip}: {writes:#?}"))
    };
    // The same set and flags as the node address's record, marked for the
    // node alone.
    for (node, lo) in [("192.168.1.11", "127.0.0.1"), ("fd00:192:168:1::11", "::1")] {
        let record = node_record(node);
        let expected = format!(
            "{} node only",
            record.replacen(&format!(" {node} "), &format!(" {lo} "), 1)
        );
        assert_eq!(node_record(lo), expected);
    }
    assert_eq!(loopback(&writes).len(), 2, "{:#?}", loopback(&writes));
    assert!(
        !writes
            .iter()
            .any(|w| w.starts_with("set external 127.") || w.starts_with("set external ::1 ")),
        "no record for packets from outside: {writes:#?}"
    );

    let off = render_with(
        &manifest,
        tc(ProxyConfig::default()).localhost_nodeports(false),
    );
    assert_eq!(loopback(&off), Vec::<String>::new());
    let nets = |list: &[&str]| {
        list.iter()
            .map(|c| c.parse().expect("cidr"))
            .collect::<Vec<_>>()
    };
    let only_v4 = render_with(
        &manifest,
        tc(ProxyConfig::default().nodeport_addresses(nets(&["127.0.0.0/8"]))),
    );
    let lo = loopback(&only_v4);
    assert!(
        lo.len() == 1 && lo[0].starts_with("set services 127.0.0.1 tcp 30080"),
        "{lo:#?}"
    );
    assert!(
        !only_v4.iter().any(|w| w.contains("192.168.1.11 tcp 30080")),
        "the node's address is outside --nodeport-addresses"
    );
    let elsewhere = render_with(
        &manifest,
        tc(ProxyConfig::default().nodeport_addresses(nets(&["192.168.0.0/16", "::1/128"]))),
    );
    let lo = loopback(&elsewhere);
    assert!(
        lo.len() == 1 && lo[0].starts_with("set services ::1 tcp 30080"),
        "{lo:#?}"
    );
}

/// Direct server return: under `externalTrafficPolicy: Cluster` a
/// record from outside is marked "direct return" instead of
/// "masquerade", as `--load-balancer-mode` and the Service's
/// `kpng.io/load-balancer-mode` say (hybrid: TCP only); a ClusterIP from
/// outside is masqueraded whatever the mode; socket records never change.
#[test]
fn direct_server_return_marks_the_records_from_outside() {
    use kpng_sink::LoadBalancerMode;
    let manifest = |annotation: &str| {
        format!(
            r#"{}
- apiVersion: v1
  kind: Service
  metadata: {{namespace: ns, name: web{annotation}}}
  spec: {{type: NodePort, clusterIP: 10.96.0.10, ports: [{{name: http, port: 80, targetPort: 8080, nodePort: 30080}}, {{name: dns, port: 53, protocol: UDP, targetPort: 5353, nodePort: 30053}}]}}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {{namespace: ns, name: web-1, labels: {{kubernetes.io/service-name: web}}}}
  addressType: IPv4
  endpoints: [{{addresses: ["10.244.2.10"], nodeName: node-b}}]
  ports: [{{name: http, port: 8080, protocol: TCP}}, {{name: dns, port: 5353, protocol: UDP}}]
"#,
            semantics::BASELINE
        )
    };
    let external = |annotation: &str, mode: LoadBalancerMode| -> Vec<String> {
        let proxy = ProxyConfig::default()
            .cluster_cidrs(["10.244.0.0/16".parse().expect("cidr")])
            .load_balancer_mode(mode);
        let config = EbpfConfig::new(proxy).tc_interfaces(["eth0"]);
        let mut lines: Vec<String> = render_with(&manifest(annotation), config)
            .into_iter()
            .filter(|w| w.starts_with("set external "))
            .map(|w| {
                let (frontend, record) = w.split_once(" : ").expect("a record");
                let kind = if record.contains("direct return") {
                    "direct return"
                } else if record.contains("masquerade to every endpoint") {
                    "masquerade to every endpoint"
                } else {
                    "masquerade"
                };
                format!("{} {kind}", frontend.trim_start_matches("set external "))
            })
            .collect();
        lines.sort();
        lines
    };
    let node = "192.168.1.11";
    let want = |tcp: &str, udp: &str| {
        let mut lines = vec![
            format!("10.96.0.10 tcp 80 masquerade to every endpoint"),
            format!("10.96.0.10 udp 53 masquerade to every endpoint"),
            format!("{node} tcp 30080 {tcp}"),
            format!("{node} udp 30053 {udp}"),
        ];
        lines.sort();
        lines
    };
    let (d, m) = ("direct return", "masquerade");
    assert_eq!(external("", LoadBalancerMode::Snat), want(m, m));
    assert_eq!(external("", LoadBalancerMode::Dsr), want(d, d));
    assert_eq!(external("", LoadBalancerMode::Hybrid), want(d, m));
    let annotated = |mode: &str| format!(", annotations: {{kpng.io/load-balancer-mode: {mode}}}");
    assert_eq!(
        external(&annotated("dsr"), LoadBalancerMode::Snat),
        want(d, d)
    );
    assert_eq!(
        external(&annotated("snat"), LoadBalancerMode::Dsr),
        want(m, m)
    );
    assert_eq!(
        external(&annotated("hybrid"), LoadBalancerMode::Snat),
        want(d, m)
    );
    // An unknown value is the flag's mode.
    assert_eq!(
        external(&annotated("direct"), LoadBalancerMode::Dsr),
        want(d, d)
    );
}
