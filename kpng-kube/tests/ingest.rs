//! Translation rules, event suppression and relists, against the real
//! store, with objects decoded from JSON as the apiserver sends them.

use kube::runtime::watcher::Event;
use std::net::IpAddr;

use kpng_kube::objects::{EndpointSlice, Node, Service};
use kpng_kube::{Ingest, IngestConfig, file};
use kpng_model::v1::{Protocol, ServiceType, TrafficPolicy};
use kpng_model::{IpFamily, Kind, ServiceName};
use kpng_store::Store;
use kpng_view::node_view;
use serde_json::json;

fn svc(v: serde_json::Value) -> Service {
    serde_json::from_value(v).expect("valid Service")
}
fn slice(v: serde_json::Value) -> EndpointSlice {
    serde_json::from_value(v).expect("valid EndpointSlice")
}
fn node(v: serde_json::Value) -> Node {
    serde_json::from_value(v).expect("valid Node")
}

fn web(rv: &str) -> serde_json::Value {
    json!({
        "metadata": {"namespace": "ns", "name": "web", "resourceVersion": rv},
        "spec": {"clusterIP": "10.96.0.5", "clusterIPs": ["10.96.0.5"],
                 "ports": [{"name": "http", "port": 80, "targetPort": "http-web"}]}
    })
}

fn web_slice(name: &str, rv: &str, eps: serde_json::Value, port: i32) -> serde_json::Value {
    json!({
        "metadata": {"namespace": "ns", "name": name, "resourceVersion": rv,
                     "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "endpoints": eps,
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}]
    })
}

fn ingest() -> Ingest {
    Ingest::new(Store::new(), IngestConfig::default())
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("ip")
}

#[test]
fn metadata_only_changes_make_no_revision() {
    let mut ingest = ingest();
    assert_eq!(
        ingest.apply_watcher_event(&Event::Apply(svc(web("1")))),
        Some(1)
    );
    // New resourceVersion, labels, annotations and managedFields: no-op.
    let mut changed = web("2");
    changed["metadata"]["labels"] = json!({"app": "web"});
    changed["metadata"]["annotations"] =
        json!({"control-plane.alpha.kubernetes.io/leader": "{\"holderIdentity\":\"x\"}"});
    changed["metadata"]["managedFields"] = json!([{"manager": "kubectl", "operation": "Update"}]);
    assert_eq!(
        ingest.apply_watcher_event(&Event::Apply(svc(changed))),
        None
    );

    let eps = json!([{"addresses": ["10.1.0.1"], "nodeName": "node-a",
                      "targetRef": {"kind": "Pod", "name": "web-1", "resourceVersion": "5"}}]);
    assert_eq!(
        ingest.apply_watcher_event(&Event::Apply(slice(web_slice("web-1", "1", eps, 8080)))),
        Some(2)
    );
    // targetRef details and resourceVersion change: no-op.
    let eps = json!([{"addresses": ["10.1.0.1"], "nodeName": "node-a",
                      "targetRef": {"kind": "Pod", "name": "web-1", "resourceVersion": "9", "uid": "u"}}]);
    assert_eq!(
        ingest.apply_watcher_event(&Event::Apply(slice(web_slice("web-1", "2", eps, 8080)))),
        None
    );

    // A node status heartbeat: no-op.
    let n = |hb: &str| {
        node(json!({
            "metadata": {"name": "node-a", "labels": {"topology.kubernetes.io/zone": "z1"}},
            "status": {"addresses": [{"type": "InternalIP", "address": "192.168.0.1"}],
                       "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": hb}]}
        }))
    };
    assert_eq!(
        ingest.apply_watcher_event(&Event::Apply(n("2026-11-22T00:00:00Z"))),
        Some(3)
    );
    assert_eq!(
        ingest.apply_watcher_event(&Event::Apply(n("2026-11-22T00:00:10Z"))),
        None
    );

    let stats = ingest.stats();
    assert_eq!((stats.events, stats.revisions), (6, 3));
    assert_eq!(ingest.store().stats().noop_writes, 3);
}

#[test]
fn readiness_change_is_a_revision_and_reaches_the_node_view() {
    let mut ingest = ingest();
    ingest.apply_watcher_event(&Event::Apply(svc(web("1"))));
    let eps = |ready: bool| json!([{"addresses": ["10.1.0.1"], "nodeName": "node-b", "conditions": {"ready": ready}}]);
    ingest.apply_watcher_event(&Event::Apply(slice(web_slice(
        "web-1",
        "1",
        eps(true),
        8080,
    ))));
    let name = ServiceName::new("ns", "web");
    let view = node_view(&ingest.reader().snapshot(), "node-a");
    assert!(view.services[&name].has_endpoints(IpFamily::V4));
    assert!(
        ingest
            .apply_watcher_event(&Event::Apply(slice(web_slice(
                "web-1",
                "2",
                eps(false),
                8080
            ))))
            .is_some()
    );
    let view = node_view(&ingest.reader().snapshot(), "node-a");
    assert!(!view.services[&name].has_endpoints(IpFamily::V4));
}

#[test]
fn an_address_in_two_slices_is_one_endpoint_whose_copies_each_node_resolves() {
    let mut ingest = ingest();
    ingest.apply_watcher_event(&Event::Apply(svc(web("1"))));
    // The same address in two slices: the store keeps the first slice's
    // copy (node-b) with node-a's as a copy; which one a node uses is its
    // view's choice, not the ingest's.
    let remote = json!([{"addresses": ["10.1.0.1"], "nodeName": "node-b"}]);
    let local =
        json!([{"addresses": ["10.1.0.1"], "nodeName": "node-a"}, {"addresses": ["10.1.0.2"]}]);
    ingest.apply_watcher_event(&Event::Apply(slice(web_slice(
        "a-slice", "1", remote, 8080,
    ))));
    ingest.apply_watcher_event(&Event::Apply(slice(web_slice("b-slice", "1", local, 8080))));
    let snap = ingest.reader().snapshot();
    let name = ServiceName::new("ns", "web");
    let stored = |snap: &kpng_store::Snapshot| -> Vec<_> {
        snap.endpoints(&name)
            .iter()
            .map(|e| {
                let copies: Vec<String> = e
                    .copies()
                    .iter()
                    .map(|c| c.node_name().to_owned())
                    .collect();
                (e.address(), e.node_name().to_owned(), copies)
            })
            .collect()
    };
    assert_eq!(
        stored(&snap),
        [
            (
                ip("10.1.0.1"),
                "node-b".to_string(),
                vec!["node-a".to_string()]
            ),
            (ip("10.1.0.2"), String::new(), vec![])
        ]
    );
    // Each node's view: its own copy, local; any other node: the first.
    for (node, copy_on, local) in [
        ("node-a", "node-a", true),
        ("node-b", "node-b", true),
        ("node-c", "node-b", false),
    ] {
        let view = node_view(&snap, node);
        let endpoint = view.services[&name]
            .endpoints
            .iter()
            .find(|e| e.ip() == ip("10.1.0.1"))
            .expect("10.1.0.1");
        assert_eq!(endpoint.endpoint().node_name(), copy_on, "{node}");
        assert_eq!(endpoint.is_local(), local, "{node}");
        assert!(endpoint.endpoint().copies().is_empty());
    }

    // Deleting the second slice: its copy goes, and 10.1.0.2.
    ingest.apply_watcher_event(&Event::Delete(slice(web_slice(
        "b-slice",
        "2",
        json!([]),
        8080,
    ))));
    let snap = ingest.reader().snapshot();
    assert_eq!(
        stored(&snap),
        [(ip("10.1.0.1"), "node-b".to_string(), vec![])]
    );
}

#[test]
fn slices_that_kube_proxy_ignores_are_ignored() {
    let mut ingest = ingest();
    // No service-name label.
    let mut unowned = web_slice("x", "1", json!([{"addresses": ["10.1.0.1"]}]), 80);
    unowned["metadata"]["labels"] = json!({});
    assert_eq!(
        ingest.apply_watcher_event(&Event::Apply(slice(unowned))),
        None
    );
    // FQDN.
    let mut fqdn = web_slice("y", "1", json!([{"addresses": ["web.example.com"]}]), 80);
    fqdn["addressType"] = json!("FQDN");
    assert_eq!(ingest.apply_watcher_event(&Event::Apply(slice(fqdn))), None);
    // Ports without a name or a port are dropped; only the first address
    // of an endpoint is used; unset conditions resolve as kube-proxy does.
    let mut s = web_slice(
        "z",
        "1",
        json!([{"addresses": ["10.1.0.1", "10.1.0.99"]}]),
        80,
    );
    s["ports"] = json!([{"port": 80}, {"name": "noport"}, {"name": "http", "port": 8080}]);
    assert!(
        ingest
            .apply_watcher_event(&Event::Apply(slice(s)))
            .is_some()
    );
    let snap = ingest.reader().snapshot();
    let eps = snap.endpoints(&ServiceName::new("ns", "web"));
    assert_eq!(eps.len(), 1);
    let ep = &eps[0];
    assert_eq!(ep.address(), ip("10.1.0.1"));
    assert_eq!(
        (ep.ready(), ep.serving(), ep.terminating()),
        (true, true, false)
    );
    let ports = ep.ports().as_slice();
    assert_eq!(ports.len(), 1);
    assert_eq!((ports[0].name(), ports[0].port()), ("http", 8080));
}

#[test]
fn services_that_produce_no_state_are_skipped_or_removed() {
    let mut ingest = Ingest::new(
        Store::new(),
        IngestConfig::default().with_proxy_name("kpng"),
    );
    let headless =
        json!({"metadata": {"namespace": "ns", "name": "h"}, "spec": {"clusterIP": "None"}});
    let external = json!({"metadata": {"namespace": "ns", "name": "e"}, "spec": {"type": "ExternalName", "externalName": "x.example"}});
    let mine = json!({"metadata": {"namespace": "ns", "name": "m", "labels": {"service.kubernetes.io/service-proxy-name": "kpng"}},
                      "spec": {"clusterIP": "10.96.0.7"}});
    let other = json!({"metadata": {"namespace": "ns", "name": "o", "labels": {"service.kubernetes.io/service-proxy-name": "other"}},
                       "spec": {"clusterIP": "10.96.0.8"}});
    assert_eq!(
        ingest.apply_watcher_event(&Event::Apply(svc(headless))),
        None
    );
    assert_eq!(
        ingest.apply_watcher_event(&Event::Apply(svc(external))),
        None
    );
    assert_eq!(
        ingest.apply_watcher_event(&Event::Apply(svc(mine))),
        Some(1),
        "labelled with our proxy name"
    );
    assert_eq!(ingest.apply_watcher_event(&Event::Apply(svc(other))), None);
    // A Service that becomes headless leaves the store.
    assert!(
        ingest
            .apply_watcher_event(&Event::Apply(svc(web("1"))))
            .is_some()
    );
    let became =
        json!({"metadata": {"namespace": "ns", "name": "web"}, "spec": {"clusterIP": "None"}});
    assert!(
        ingest
            .apply_watcher_event(&Event::Apply(svc(became)))
            .is_some()
    );
    assert_eq!(ingest.reader().snapshot().services().count(), 1);
}

#[test]
fn relists_swap_contents_and_unchanged_ones_make_no_revision() {
    let mut ingest = ingest();
    let a = svc(web("1"));
    let mut b = web("1");
    b["metadata"]["name"] = json!("other");
    b["spec"]["clusterIP"] = json!("10.96.0.6");
    b["spec"]["clusterIPs"] = json!(["10.96.0.6"]);
    let b = svc(b);
    assert!(!ingest.reader().snapshot().is_listed(Kind::Service));
    assert_eq!(ingest.relist([&a, &b]), Some(1));
    assert!(ingest.reader().snapshot().is_listed(Kind::Service));
    // The same list again (after a reconnect): no revision.
    assert_eq!(ingest.relist([&a, &b]), None);
    // `other` vanished during an outage: deleted, in one revision.
    assert_eq!(ingest.relist([&a]), Some(2));
    assert_eq!(ingest.reader().snapshot().services().count(), 1);

    let s1 = slice(web_slice(
        "s1",
        "1",
        json!([{"addresses": ["10.1.0.1"]}]),
        80,
    ));
    let s2 = slice(web_slice(
        "s2",
        "1",
        json!([{"addresses": ["10.1.0.2"]}]),
        80,
    ));
    assert_eq!(ingest.relist([&s1, &s2]), Some(3));
    assert_eq!(ingest.relist([&s1, &s2]), None);
    assert_eq!(ingest.relist([&s2]), Some(4));
    let snap = ingest.reader().snapshot();
    let eps: Vec<_> = snap
        .endpoints(&ServiceName::new("ns", "web"))
        .iter()
        .map(|e| e.address())
        .collect();
    assert_eq!(eps, [ip("10.1.0.2")]);
    assert!(snap.is_listed(Kind::Endpoint));
}

#[test]
fn bundled_sample_translates_every_feature() {
    let mut ingest = ingest();
    let objects =
        file::parse_str(file::SAMPLE_CLUSTER_NAME, file::SAMPLE_CLUSTER).expect("sample parses");
    assert_eq!(
        ingest.load(&objects),
        Some(1),
        "a whole file is one revision"
    );
    let snap = ingest.reader().snapshot();
    let mut names: Vec<String> = snap.services().map(|(n, _)| n.to_string()).collect();
    names.sort();
    // Headless db, ExternalName legacy and mesh-only are skipped.
    assert_eq!(
        names,
        [
            "batch/queue",
            "default/kubernetes",
            "kube-system/kube-dns",
            "shop/cart",
            "shop/checkout",
            "web/api",
            "web/frontend"
        ]
    );
    assert_eq!(snap.nodes().count(), 3);
    assert!(Kind::ALL.iter().all(|k| snap.is_listed(*k)));

    let api = snap.service(&ServiceName::new("web", "api")).expect("api");
    assert_eq!(api.r#type, ServiceType::LoadBalancer as i32);
    assert_eq!(api.external_traffic_policy, TrafficPolicy::Local as i32);
    assert_eq!(api.health_check_node_port, 32000);
    assert_eq!(
        api.client_ip_affinity.as_ref().map(|a| a.timeout_seconds),
        Some(600)
    );
    assert_eq!(
        api.load_balancer_ips.as_ref().map(|s| s.v4.clone()),
        Some(vec!["198.51.100.10".into()])
    );
    assert_eq!(
        api.load_balancer_proxy_ips.as_ref().map(|s| s.v4.clone()),
        Some(vec!["198.51.100.11".into()])
    );
    assert_eq!(
        api.load_balancer_source_ranges
            .as_ref()
            .map(|s| s.v4.clone()),
        Some(vec!["198.51.100.128/25".into(), "203.0.113.0/24".into()])
    );
    assert_eq!(
        api.external_ips.as_ref().map(|s| s.v4.clone()),
        Some(vec!["192.0.2.50".into()])
    );

    let frontend = ServiceName::new("web", "frontend");
    let svc = snap.service(&frontend).expect("frontend");
    assert_eq!(
        svc.cluster_ips.as_ref().map(|s| s.v6.clone()),
        Some(vec!["fd00:10:96::20".into()])
    );
    // Named target port resolved per endpoint: the canary slice's 8081.
    let ports: Vec<_> = snap
        .endpoints(&frontend)
        .iter()
        .map(|e| (e.address().to_string(), e.ports().as_slice()[0].port()))
        .collect();
    assert!(ports.contains(&("10.244.1.21".into(), 8081)));
    assert!(ports.contains(&("10.244.1.20".into(), 8080)));
    assert!(ports.contains(&("fd00:10:244:1::20".into(), 8080)));

    let dns = snap
        .service(&ServiceName::new("kube-system", "kube-dns"))
        .expect("dns");
    assert_eq!(
        dns.ports
            .iter()
            .filter(|p| p.protocol == Protocol::Udp as i32)
            .count(),
        1
    );

    // The node view: zone hints on node-c (zone-b) keep only the zone-b
    // endpoint; the all-terminating queue falls back to its serving one;
    // checkout has no endpoint at all.
    let view = node_view(&snap, "node-c");
    let fe = &view.services[&frontend];
    let v4: Vec<_> = fe
        .cluster_endpoints(IpFamily::V4)
        .map(|e| e.ip().to_string())
        .collect();
    assert_eq!(v4, ["10.244.3.20"]);
    assert_eq!(
        fe.cluster_endpoints(IpFamily::V6).count(),
        2,
        "no hints in the IPv6 slice"
    );
    let queue = &view.services[&ServiceName::new("batch", "queue")];
    let q: Vec<_> = queue
        .cluster_endpoints(IpFamily::V4)
        .map(|e| e.ip().to_string())
        .collect();
    assert_eq!(q, ["10.244.1.60"]);
    assert!(!view.services[&ServiceName::new("shop", "checkout")].has_endpoints(IpFamily::V4));

    // Loading the same file again changes nothing, whole or streamed.
    assert_eq!(ingest.load(&objects), None);
    assert_eq!(
        ingest
            .load_str(file::SAMPLE_CLUSTER_NAME, file::SAMPLE_CLUSTER)
            .expect("sample loads"),
        None
    );
}

/// An object that does not decode or that the API server would refuse is
/// skipped, named with its document, line, field and reason; the rest of
/// the file is applied. A file that does not parse applies nothing.
#[test]
fn bad_objects_are_named_and_skipped_and_a_file_that_does_not_parse_applies_nothing() {
    let bad_ip = r#"
apiVersion: v1
kind: Service
metadata: {namespace: ns, name: ok}
spec: {clusterIP: 10.96.0.1}
---
apiVersion: v1
kind: Service
metadata: {namespace: ns, name: broken}
spec:
  clusterIP: 10.96.0.2
  clusterIPs: [10.96.0.2, 10.96.0.300]
"#;
    let config = kpng_kube::translate::TranslateConfig::default();
    let (objects, skipped) =
        file::parse_reporting("cluster.yaml", bad_ip, &config).expect("the good one is read");
    assert_eq!(objects.len(), 1);
    let named: Vec<String> = skipped.iter().map(ToString::to_string).collect();
    assert_eq!(
        named,
        [
            "document 1 (line 7): Service ns/broken: spec.clusterIPs[1]: Invalid value: \"10.96.0.300\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"
        ]
    );

    let bad_type = r#"{"apiVersion": "v1", "kind": "List", "items": [
        {"kind": "Node", "metadata": {"name": "n"}},
        {"kind": "Service", "metadata": {"namespace": "ns", "name": "s"}, "spec": {"ports": [{"port": "eighty"}]}}]}"#;
    let (objects, skipped) =
        file::parse_reporting("state.json", bad_type, &config).expect("the Node is read");
    assert_eq!(objects.len(), 1);
    assert_eq!(skipped.len(), 1);
    let named = skipped[0].to_string();
    assert!(
        named.starts_with("document 0 (List item 1): Service ns/s: spec.ports[0].port: "),
        "{named}"
    );

    let err = file::parse_str("x.yaml", "kind: [unclosed").expect_err("bad YAML");
    assert!(
        err.to_string()
            .starts_with("x.yaml: document 0 (line 1): invalid YAML"),
        "{err}"
    );

    // Loaded, the good objects are applied, the bad ones not.
    let mut ingest = ingest();
    assert_eq!(
        ingest.load_str("cluster.yaml", bad_ip).expect("applied"),
        Some(1)
    );
    let snap = ingest.reader().snapshot();
    let names: Vec<String> = snap.services().map(|(n, _)| n.to_string()).collect();
    assert_eq!(names, ["ns/ok"]);
    assert!(snap.is_listed(Kind::Service) && snap.is_listed(Kind::Endpoint));

    // A file that does not parse changes nothing.
    let cut = &bad_ip[..bad_ip.len() - 6];
    let cut = format!("{cut}\n  ports: [{{port: 80\n");
    ingest.load_str("cut.yaml", &cut).expect_err("cut short");
    assert_eq!(ingest.reader().snapshot().revision(), 1);
}

/// A file whose every object is skipped applies nothing, even where an
/// empty input is allowed: it would delete every Service.
#[test]
fn a_file_whose_every_object_is_bad_applies_nothing_even_allowed_empty() {
    let good = "apiVersion: v1\nkind: Service\nmetadata: {namespace: ns, name: ok}\nspec: {clusterIP: 10.96.0.1}\n";
    let bad = "apiVersion: v1\nkind: Service\nmetadata: {namespace: ns, name: lb}\nspec: {type: LoadBalancr, clusterIP: 10.96.0.1}\n";
    for allow in [false, true] {
        let mut ingest = Ingest::new(
            Store::new(),
            IngestConfig::default().allow_empty_input(allow),
        );
        ingest.load_str("good.yaml", good).expect("good");
        let err = ingest.load_str("bad.yaml", bad).expect_err("all bad");
        assert_eq!(
            err.to_string(),
            "bad.yaml: nothing applied, every object is skipped (1 object skipped: Service ns/lb, \
             document 0 (line 1): spec.type: Unsupported value: \"LoadBalancr\": supported values: \
             \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\")"
        );
        assert_eq!(ingest.reader().snapshot().services().count(), 1, "{allow}");
    }
}

/// Watched, an edit that adds a good Service and a bad one applies the
/// good one, and the report names the bad one; a file cut short keeps
/// the state as it was; a file renamed into place is read because of the
/// rename (inotify), not after a settle.
#[tokio::test]
async fn watched_edits_apply_good_objects_keep_state_when_cut_and_read_renames_at_once() {
    let dir = std::env::temp_dir().join(format!("kpng-kube-badobj-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("cluster.yaml");
    let service = |name: &str, ip: &str, spec: &str| {
        format!(
            "---\napiVersion: v1\nkind: Service\nmetadata: {{namespace: ns, name: {name}}}\nspec: {{clusterIP: {ip}, ports: [{{name: http, port: 80}}]{spec}}}\n"
        )
    };
    std::fs::write(&path, service("a", "10.96.0.1", "")).expect("write");
    let (send, mut reports) = tokio::sync::mpsc::unbounded_channel();
    let config = IngestConfig::default().on_input_report(move |report| {
        let _ = send.send(report.clone());
    });
    let mut ingest = Ingest::new(Store::new(), config);
    let reader = ingest.reader();
    let watched = path.clone();
    let task = tokio::spawn(async move {
        // Polling rarely: what is read comes from inotify.
        let poll = Some(std::time::Duration::from_secs(3600));
        file::run(&watched, &mut ingest, poll).await
    });
    let next = async |reports: &mut tokio::sync::mpsc::UnboundedReceiver<file::InputReport>| {
        tokio::time::timeout(std::time::Duration::from_secs(20), reports.recv())
            .await
            .expect("a read in time")
            .expect("a report")
    };
    let first = next(&mut reports).await;
    assert_eq!(
        (first.cause, first.applied, first.skipped.len()),
        (file::ReadCause::Asked, 1, 0)
    );

    // An edit in place with a good Service and a bad one.
    let edit = [
        service("a", "10.96.0.1", ""),
        service("b", "10.96.0.2", ""),
        service("lb", "10.96.0.3", ", type: LoadBalancr"),
    ]
    .concat();
    std::fs::write(&path, &edit).expect("edit");
    let report = next(&mut reports).await;
    assert_eq!(report.cause, file::ReadCause::Written);
    assert_eq!(report.applied, 2);
    assert_eq!(
        report.summary().expect("skipped"),
        "1 object skipped: Service ns/lb, document 2 (line 12): spec.type: Unsupported value: \
         \"LoadBalancr\": supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\""
    );
    let names = |reader: &kpng_store::Reader| -> Vec<String> {
        let snap = reader.snapshot();
        let mut names: Vec<String> = snap.services().map(|(n, _)| n.to_string()).collect();
        names.sort();
        names
    };
    assert_eq!(names(&reader), ["ns/a", "ns/b"]);

    // Cut short: not applied, no report, the state kept.
    let cut = &edit[..edit.len() - 20];
    std::fs::write(&path, cut).expect("cut");
    // Renamed into place: read because of the rename.
    let staged = dir.join("cluster.yaml.new");
    std::fs::write(&staged, service("c", "10.96.0.4", "")).expect("staged");
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    assert_eq!(
        names(&reader),
        ["ns/a", "ns/b"],
        "a file cut short keeps the state"
    );
    std::fs::rename(&staged, &path).expect("rename");
    let report = next(&mut reports).await;
    assert_eq!(report.cause, file::ReadCause::Renamed);
    assert_eq!(names(&reader), ["ns/c"]);
    task.abort();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn watched_file_is_reread_and_diffed_and_a_broken_one_is_not_applied() {
    let dir = std::env::temp_dir().join(format!("kpng-kube-watch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("cluster.yaml");
    let manifest = |port: u16| {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{namespace: ns, name: web}}\nspec: {{clusterIP: 10.96.0.5, ports: [{{port: {port}}}]}}\n"
        )
    };
    std::fs::write(&path, manifest(80)).expect("write");
    let mut ingest = ingest();
    let mut reader = ingest.reader();
    let watched = path.clone();
    let task = tokio::spawn(async move {
        let poll = Some(std::time::Duration::from_millis(20));
        file::run(&watched, &mut ingest, poll).await
    });
    let wait = |reader: &mut kpng_store::Reader, rev: u64| {
        let mut reader = reader.clone();
        async move {
            tokio::time::timeout(
                std::time::Duration::from_secs(10),
                reader.wait(|s| s.revision() >= rev),
            )
            .await
            .expect("in time")
            .expect("open")
        }
    };
    wait(&mut reader, 1).await;

    // Modification times can be coarse: step them explicitly.
    let touch = |text: String, secs: u64| {
        std::fs::write(&path, text).expect("write");
        let when = std::time::SystemTime::UNIX_EPOCH
            + std::time::Duration::from_secs(1_700_000_000 + secs);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .expect("open")
            .set_modified(when)
            .expect("mtime");
    };
    touch(manifest(8080), 1);
    let snap = wait(&mut reader, 2).await;
    assert_eq!(
        snap.service(&ServiceName::new("ns", "web"))
            .expect("web")
            .ports[0]
            .port,
        8080
    );

    // A broken file is logged and not applied; the previous state stays.
    touch(
        "kind: Service\nmetadata: {namespace: ns, name: web}\nspec: {clusterIP: 10.96.0.999}\n"
            .into(),
        2,
    );
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(reader.snapshot().revision(), 2);

    // Rewriting the same content (new mtime) is diffed to nothing.
    touch(manifest(8080), 3);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(reader.snapshot().revision(), 2);

    touch(manifest(9090), 4);
    let snap = wait(&mut reader, 3).await;
    assert_eq!(
        snap.service(&ServiceName::new("ns", "web"))
            .expect("web")
            .ports[0]
            .port,
        9090
    );
    task.abort();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn full_k8s_openapi_objects_convert_to_the_lean_ones() {
    let full: k8s_openapi::api::core::v1::Service =
        serde_json::from_value(web("1")).expect("full Service");
    let mut ingest = ingest();
    assert_eq!(
        ingest.apply_watcher_event(&Event::Apply(Service::from(&full))),
        Some(1)
    );
    // Decoding the lean type straight from the same JSON gives the same
    // ENLS value: a no-op.
    assert_eq!(
        ingest.apply_watcher_event(&Event::Apply(svc(web("1")))),
        None
    );
}

/// KEP-3836: a node being deleted, or tainted by the cluster autoscaler,
/// is `terminating`; other taints and labels change nothing.
#[test]
fn nodes_going_away_are_terminating() {
    use kpng_kube::translate;
    let plain = node(json!({"metadata": {"name": "n1"},
        "spec": {"taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]}}));
    assert!(!translate::node(&plain).expect("valid").terminating);
    let tainted = node(json!({"metadata": {"name": "n1"},
        "spec": {"taints": [{"key": "ToBeDeletedByClusterAutoscaler", "value": "1700000000", "effect": "NoSchedule"}]}}));
    assert!(translate::node(&tainted).expect("valid").terminating);
    let deleted =
        node(json!({"metadata": {"name": "n1", "deletionTimestamp": "2026-11-24T06:00:00Z"}}));
    assert!(translate::node(&deleted).expect("valid").terminating);
}

/// An EndpointSlice's `last-change-trigger-time` is kept for the revision
/// its change makes (a proxy measures network programming latency from
/// it); one from before the ingest started is not.
#[test]
fn slice_trigger_times_reach_the_store() {
    let mut ingest = ingest();
    let reader = ingest.reader();
    let at = |time: &str, ip: &str| {
        slice(json!({
            "metadata": {"namespace": "ns", "name": "web-1", "resourceVersion": "1",
                "labels": {"kubernetes.io/service-name": "web"},
                "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": time, "other": "x"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [ip], "conditions": {"ready": true}}],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]
        }))
    };
    let old = ingest
        .apply_watcher_event(&Event::Apply(at("2001-01-01T00:00:00Z", "10.1.0.1")))
        .expect("a change");
    assert!(
        reader.take_triggers(old).is_empty(),
        "before the ingest started"
    );
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let revision = ingest
        .apply_watcher_event(&Event::Apply(at(&now, "10.1.0.2")))
        .expect("a change");
    let taken = reader.take_triggers(revision);
    assert_eq!(taken.len(), 1);
    assert!(taken[0] <= std::time::SystemTime::now());
    assert!(reader.take_triggers(revision).is_empty(), "taken once");
}

fn cidr(v: serde_json::Value) -> kpng_kube::objects::ServiceCidr {
    serde_json::from_value(v).expect("valid ServiceCIDR")
}

#[test]
fn service_cidrs_make_revisions_only_when_their_ranges_change() {
    let mut ingest = ingest();
    let kubernetes = |rv: &str, cidrs: serde_json::Value| {
        cidr(
            json!({"metadata": {"name": "kubernetes", "resourceVersion": rv},
                    "spec": {"cidrs": cidrs}, "status": {"conditions": []}}),
        )
    };
    let first = ingest.apply_watcher_event(&Event::Apply(kubernetes("1", json!(["10.96.0.0/12"]))));
    assert!(first.is_some());
    // A status or resourceVersion change alone makes no revision.
    assert_eq!(
        ingest.apply_watcher_event(&Event::Apply(kubernetes("2", json!(["10.96.0.0/12"])))),
        None
    );
    // A second range (dual stack) does; every node view carries the merge.
    assert!(
        ingest
            .apply_watcher_event(&Event::Apply(kubernetes(
                "3",
                json!(["10.96.0.0/12", "fd00::/108"])
            )))
            .is_some()
    );
    let snapshot = ingest.reader().snapshot();
    let view = node_view(&snapshot, "node-a");
    assert_eq!(view.service_cidrs.v4, ["10.96.0.0/12"]);
    assert_eq!(view.service_cidrs.v6, ["fd00::/108"]);
    // A relist without it deletes it, in one revision.
    let none: [kpng_kube::objects::ServiceCidr; 0] = [];
    assert!(ingest.relist(&none).is_some());
    assert!(ingest.reader().snapshot().is_listed(Kind::ServiceCidr));
    assert!(
        node_view(&ingest.reader().snapshot(), "node-a")
            .service_cidrs
            .v4
            .is_empty()
    );

    // A range that is not a CIDR is refused by name, and nothing changes.
    let bad = cidr(json!({"metadata": {"name": "bad"}, "spec": {"cidrs": ["10.0.0.0/33"]}}));
    assert_eq!(ingest.apply_watcher_event(&Event::Apply(bad.clone())), None);
    assert_eq!(ingest.stats().errors, 1);
    let err = kpng_kube::translate::service_cidr(&bad).expect_err("refused");
    assert!(err.to_string().contains("spec.cidrs[0]"), "{err}");
}

/// An empty file, one of only comments, or one of only kinds the proxy
/// does not read would delete every Service: refused by name, nothing
/// applied; allowed when the config says so (an empty cluster).
#[test]
fn a_manifest_with_nothing_to_read_is_refused() {
    let svc = "apiVersion: v1\nkind: Service\nmetadata: {namespace: ns, name: ok}\nspec: {clusterIP: 10.96.0.1}\n";
    for (name, text) in [
        ("empty.yaml", ""),
        ("comments.yaml", "# nothing here\n---\n# nor here\n"),
        (
            "others.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {namespace: ns, name: c}\n---\napiVersion: v1\nkind: Pod\nmetadata: {namespace: ns, name: p}\n",
        ),
        ("empty-list.json", r#"{"kind": "List", "items": []}"#),
    ] {
        let mut ingest = ingest();
        assert_eq!(ingest.load_str("first.yaml", svc).expect("good"), Some(1));
        let error = ingest.load_str(name, text).expect_err(name);
        assert_eq!(
            error.to_string(),
            format!("no Services, EndpointSlices or Nodes in {name}")
        );
        assert_eq!(ingest.reader().snapshot().services().count(), 1, "{name}");
        let mut allowed = Ingest::new(
            Store::new(),
            IngestConfig::default().allow_empty_input(true),
        );
        allowed.load_str(name, text).expect("allowed");
        assert!(allowed.reader().snapshot().is_listed(Kind::Service));
    }
}

/// A watched file rewritten in two writes 0.3 s apart (as `>` then a slow
/// writer does) is read once whole: no revision holds the first half.
#[tokio::test]
async fn a_watched_file_is_read_once_whole() {
    let dir = std::env::temp_dir().join(format!("kpng-kube-settle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("cluster.yaml");
    let service = |name: &str| {
        format!(
            "---\napiVersion: v1\nkind: Service\nmetadata: {{namespace: ns, name: {name}}}\nspec: {{clusterIP: 10.96.0.5}}\n"
        )
    };
    std::fs::write(&path, [service("a"), service("b"), service("c")].concat()).expect("write");
    let mut ingest = ingest();
    let reader = ingest.reader();
    let watched = path.clone();
    let task = tokio::spawn(async move {
        let poll = Some(std::time::Duration::from_millis(20));
        file::run(&watched, &mut ingest, poll).await
    });
    // Every revision's Service count, as the driver would see it.
    let (send, mut counts) = tokio::sync::mpsc::unbounded_channel();
    let mut watcher = reader.clone();
    let recorder = tokio::spawn(async move {
        let mut revision = 0;
        while let Ok(snap) = watcher.newer_than(revision).await {
            revision = snap.revision();
            let _ = send.send(snap.services().count());
        }
    });
    let mut seen = Vec::new();
    while seen.last() != Some(&3) {
        seen.push(counts.recv().await.expect("a revision"));
    }
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    std::fs::write(&path, service("a")).expect("first half");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    std::fs::write(&path, [service("a"), service("b"), service("d")].concat()).expect("whole");
    tokio::time::timeout(std::time::Duration::from_secs(5), async {
        loop {
            seen.push(counts.recv().await.expect("a revision"));
            let snap = reader.snapshot();
            if snap.service(&ServiceName::new("ns", "d")).is_some() {
                break;
            }
        }
    })
    .await
    .expect("the whole file is read");
    assert!(
        seen.iter().all(|&n| n == 3),
        "revisions' Services: {seen:?}"
    );
    task.abort();
    recorder.abort();
    let _ = std::fs::remove_dir_all(&dir);
}
