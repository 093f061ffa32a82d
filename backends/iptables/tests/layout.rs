//! The compact layout and how `auto` picks it: rendering only
//! (`publishing`, dry runs), no root. Real packets in both layouts, and a
//! switch between syncs in the kernel, are kpng-lab's `tests/iptables.rs`.

use std::collections::BTreeMap;
use std::sync::Arc;

use kpng_backend_iptables::{
    AUTO_COMPACT_ENDPOINTS, AUTO_KUBE_PROXY_ENDPOINTS, ChainKey, IptablesBackend, IptablesConfig,
    Layout,
};
use kpng_model::IpFamily;
use kpng_model::endpoint::Interner;
use kpng_model::view::NodeView;
use kpng_sink::{ProxyConfig, Round, Sink};
use kpng_store::Store;
use kpng_testkit::{Cluster, ClusterShape};
use kpng_view::node_view;

const NODE: &str = "node-0";
/// Endpoints per Service.
const EPS: usize = 25;

fn backend(layout: Layout) -> IptablesBackend {
    let proxy = ProxyConfig::default().cluster_cidrs(["10.244.0.0/16".parse().expect("cidr")]);
    IptablesBackend::new(IptablesConfig::new(proxy).layout(layout)).publishing()
}

/// The synthetic Services `0..n`, each with [`EPS`] endpoints alternating
/// between `node-0` (this one) and `node-1`; with the endpoints the
/// renders count (summed over ports).
fn view(n: usize) -> (NodeView, usize) {
    let nodes = Cluster::synthetic(ClusterShape {
        services: 0,
        endpoints: 0,
        nodes: 2,
        zones: 1,
    })
    .nodes;
    let mut store = Store::new();
    let mut interner = Interner::new();
    let mut txn = store.begin();
    for node in &nodes {
        txn.set_node(node.clone());
    }
    let mut counted = 0;
    for i in 0..n {
        let service = Cluster::service(i);
        counted += EPS * service.ports.len();
        let name = service.service_name();
        let endpoints: Vec<_> = (0..EPS)
            .map(|j| {
                let k = i * EPS + j;
                let ip =
                    std::net::Ipv4Addr::new(10, 128 + (k >> 16) as u8, (k >> 8) as u8, k as u8);
                Cluster::endpoint(ip.into(), &nodes[j % 2], &service, &mut interner)
            })
            .collect();
        txn.set_service(kpng_model::ServiceInfo::new(service).expect("valid"));
        txn.replace_endpoints(&name, &Arc::new(endpoints))
            .expect("sorted");
    }
    txn.commit();
    (node_view(&store.snapshot(), NODE), counted)
}

fn chains(backend: &IptablesBackend) -> BTreeMap<(IpFamily, ChainKey), Vec<String>> {
    backend
        .chains()
        .map(|(family, key, rules)| ((family, key.clone()), rules.to_vec()))
        .collect()
}

/// What a fresh backend forced to `layout` wants for `view`.
fn fresh(view: &NodeView, layout: Layout) -> BTreeMap<(IpFamily, ChainKey), Vec<String>> {
    let mut b = backend(layout);
    b.sync(&Round::full(view)).expect("full round");
    chains(&b)
}

fn endpoint_chains(backend: &IptablesBackend) -> usize {
    backend
        .chains()
        .filter(|(_, (_, name), _)| name.starts_with("KUBE-SEP-"))
        .count()
}

/// The compact layout: endpoints on other nodes are DNATed from the
/// Service's chain, with the same probabilities; this node's keep their
/// chain (hairpin), as do endpoints on no node; a Service with ClientIP
/// affinity keeps every chain.
#[test]
fn the_compact_layout_dnats_remote_endpoints_from_the_service_chain() {
    let manifest = format!(
        "{}{}",
        kpng_testkit::semantics::BASELINE,
        r#"
- apiVersion: v1
  kind: Service
  metadata: {namespace: ns, name: web}
  spec: {clusterIP: 10.96.0.10, ports: [{name: http, port: 80, targetPort: 8080}]}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {namespace: ns, name: web-1, labels: {kubernetes.io/service-name: web}}
  addressType: IPv4
  endpoints: [{addresses: [10.244.1.10], nodeName: node-a}, {addresses: [10.244.2.10], nodeName: node-b}, {addresses: [10.244.3.10], nodeName: node-c}]
  ports: [{name: http, port: 8080, protocol: TCP}]
- apiVersion: v1
  kind: Service
  metadata: {namespace: ns, name: sticky}
  spec: {clusterIP: 10.96.0.11, sessionAffinity: ClientIP, ports: [{name: dns, port: 53, targetPort: 5353, protocol: UDP}]}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {namespace: ns, name: sticky-1, labels: {kubernetes.io/service-name: sticky}}
  addressType: IPv4
  endpoints: [{addresses: [10.244.2.20], nodeName: node-b}, {addresses: [10.244.3.20], nodeName: node-c}]
  ports: [{name: dns, port: 5353, protocol: UDP}]
- apiVersion: v1
  kind: Service
  metadata: {namespace: ns, name: outside}
  spec: {clusterIP: 10.96.0.12, ports: [{name: db, port: 5432}]}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {namespace: ns, name: outside-1, labels: {kubernetes.io/service-name: outside}}
  addressType: IPv4
  endpoints: [{addresses: [192.0.2.50]}]
  ports: [{name: db, port: 5432, protocol: TCP}]
"#
    );
    let dry_run = |layout: Layout| {
        let objects = kpng_kube::file::parse_str("t.yaml", &manifest).expect("manifest");
        let mut ingest = kpng_kube::Ingest::new(Store::new(), kpng_kube::IngestConfig::default());
        ingest.load(&objects);
        let proxy = ProxyConfig::default().cluster_cidrs(["10.244.0.0/16".parse().expect("cidr")]);
        let mut b = IptablesBackend::new(IptablesConfig::new(proxy).layout(layout)).dry_run();
        let view = node_view(&ingest.reader().snapshot(), kpng_testkit::semantics::NODE);
        b.sync(&Round::full(&view)).expect("dry run");
        assert_eq!(b.last_sync().compact, layout == Layout::Compact);
        b.last_script().to_owned()
    };
    let (compact, kube_proxy) = (dry_run(Layout::Compact), dry_run(Layout::KubeProxy));
    let lines = |text: &str, part: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.contains(part))
            .map(String::from)
            .collect()
    };
    // web, in kube-proxy's layout: three endpoint chains.
    assert_eq!(
        lines(&kube_proxy, ":KUBE-SEP-").len(),
        3 + 2 + 1,
        "{kube_proxy}"
    );
    // Compact: E1 (node-a, this node) keeps its chain and hairpin rule;
    // E2 and E3 are DNATed from KUBE-SVC with the same probabilities.
    let svc = lines(&compact, "-A KUBE-SVC-");
    let web: Vec<&String> = svc
        .iter()
        .filter(|l| l.contains(":8080") || l.contains("-j KUBE-SEP-") && !l.contains("recent"))
        .collect();
    assert!(
        web.iter().any(|l| l.ends_with(
            "-m statistic --mode random --probability 0.5000000000 -p tcp -j DNAT --to-destination 10.244.2.10:8080"
        )),
        "{compact}"
    );
    assert!(
        web.iter().any(
            |l| l.ends_with(" -p tcp -j DNAT --to-destination 10.244.3.10:8080")
                && !l.contains("statistic")
        ),
        "{compact}"
    );
    assert!(
        web.iter()
            .any(|l| l.contains("--probability 0.3333333333 -j KUBE-SEP-")),
        "{compact}"
    );
    assert!(
        compact.contains("-s 10.244.1.10/32 -j KUBE-MARK-MASQ"),
        "{compact}"
    );
    assert!(!compact.contains("-s 10.244.2.10/32"), "{compact}");
    assert!(!compact.contains("-s 10.244.3.10/32"), "{compact}");
    // sticky: ClientIP affinity keeps a chain per endpoint (recent needs it).
    assert!(
        compact.contains("-s 10.244.2.20/32 -j KUBE-MARK-MASQ"),
        "{compact}"
    );
    assert!(
        compact.contains("-s 10.244.3.20/32 -j KUBE-MARK-MASQ"),
        "{compact}"
    );
    // outside: an endpoint on no node keeps its chain (its own traffic
    // may come through this node).
    assert!(
        compact.contains("-s 192.0.2.50/32 -j KUBE-MARK-MASQ"),
        "{compact}"
    );
    assert_eq!(lines(&compact, ":KUBE-SEP-").len(), 1 + 2 + 1, "{compact}");
    // Everything else is the same.
    let others = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| !l.contains("KUBE-SEP-") && !l.starts_with("-A KUBE-SVC-"))
            .map(String::from)
            .collect()
    };
    assert_eq!(others(&compact), others(&kube_proxy));
}

/// `auto`: compact above AUTO_COMPACT_ENDPOINTS, kube-proxy's again below
/// AUTO_KUBE_PROXY_ENDPOINTS, nothing in between; crossing a threshold in
/// an incremental round rewrites everything, and the backend then wants
/// what a fresh one forced to the new layout wants (the other layout's
/// KUBE-SEP chains are gone).
#[test]
fn auto_switches_layout_past_its_thresholds_with_a_full_rewrite() {
    let (small, small_n) = view(500);
    let (large, large_n) = view(2_000);
    let (middle, middle_n) = view(1_400);
    assert!(small_n < AUTO_KUBE_PROXY_ENDPOINTS, "{small_n}");
    assert!(large_n > AUTO_COMPACT_ENDPOINTS, "{large_n}");
    assert!(
        (AUTO_KUBE_PROXY_ENDPOINTS..=AUTO_COMPACT_ENDPOINTS).contains(&middle_n),
        "{middle_n}"
    );

    let mut b = backend(Layout::Auto);
    b.sync(&Round::full(&small)).expect("sync");
    assert!(!b.last_sync().compact);
    assert_eq!(b.layout_in_use(), Layout::KubeProxy);
    assert_eq!(endpoint_chains(&b), small_n);

    b.sync(&Round::between(&small, &large)).expect("sync");
    let stats = b.last_sync().clone();
    assert!(stats.replaced && stats.compact, "{stats:?}");
    assert_eq!(chains(&b), fresh(&large, Layout::Compact));
    // Only this node's endpoints (13 of each Service's 25) keep a chain.
    assert_eq!(endpoint_chains(&b), large_n / EPS * EPS.div_ceil(2));

    // In between: stays compact, incremental.
    b.sync(&Round::between(&large, &middle)).expect("sync");
    let stats = b.last_sync().clone();
    assert!(!stats.replaced && stats.compact, "{stats:?}");
    assert_eq!(chains(&b), fresh(&middle, Layout::Compact));

    b.sync(&Round::between(&middle, &small)).expect("sync");
    let stats = b.last_sync().clone();
    assert!(stats.replaced && !stats.compact, "{stats:?}");
    assert_eq!(chains(&b), fresh(&small, Layout::KubeProxy));

    // A first sync of a large cluster is compact at once.
    let mut b = backend(Layout::Auto);
    b.sync(&Round::full(&large)).expect("sync");
    assert!(b.last_sync().compact);
    assert_eq!(chains(&b), fresh(&large, Layout::Compact));
}

/// A forced layout holds whatever the size, and set_layout makes the next
/// round, incremental or not, a full rewrite in the new layout.
#[test]
fn a_forced_layout_holds_and_set_layout_rewrites_everything() {
    let (large, _) = view(2_000);
    let mut b = backend(Layout::KubeProxy);
    b.sync(&Round::full(&large)).expect("sync");
    assert!(!b.last_sync().compact);
    let (small, _) = view(10);
    let mut b = backend(Layout::Compact);
    b.sync(&Round::full(&small)).expect("sync");
    assert!(b.last_sync().compact);
    let (small2, _) = view(11);
    b.set_layout(Layout::KubeProxy);
    b.sync(&Round::between(&small, &small2)).expect("sync");
    let stats = b.last_sync().clone();
    assert!(stats.replaced && !stats.compact, "{stats:?}");
    assert_eq!(chains(&b), fresh(&small2, Layout::KubeProxy));
    b.set_layout(Layout::Compact);
    b.sync(&Round::between(&small2, &small)).expect("sync");
    let stats = b.last_sync().clone();
    assert!(stats.replaced && stats.compact, "{stats:?}");
    assert_eq!(chains(&b), fresh(&small, Layout::Compact));
}
