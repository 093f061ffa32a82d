//! The metrics endpoint, scraped over a real socket and parsed.

use std::collections::BTreeMap;
use std::sync::Arc;

use kpng_health::metrics::{Measure, MeasuredExt, Metrics, serve_metrics};
use kpng_model::EndpointInfo;
use kpng_model::v1::Service;
use kpng_model::view::{EndpointView, NodeView, ServiceView};
use kpng_sink::{Round, Sink, SinkExt};
use kpng_store::Store;
use kpng_testkit::RecordingSink;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Every sample of an OpenMetrics text, by its name and labels.
fn parse(text: &str) -> BTreeMap<String, f64> {
    let mut samples = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (name, value) = line.rsplit_once(' ').expect("name and value");
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("a number in {line:?}"));
        samples.insert(name.to_owned(), value);
    }
    assert!(
        text.trim_end().ends_with("# EOF"),
        "OpenMetrics ends with # EOF"
    );
    samples
}

/// A view of revision `revision` with `svc` and its `endpoints`.
fn view_of(
    revision: u64,
    svc: &Arc<kpng_model::ServiceInfo>,
    endpoints: Vec<EndpointView>,
) -> NodeView {
    let mut view = NodeView {
        revision,
        ..Default::default()
    };
    view.services.insert(
        svc.service_name(),
        Arc::new(ServiceView {
            service: svc.clone(),
            endpoints,
        }),
    );
    view
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn syncs_failures_and_ingest_counts_are_scraped() {
    let metrics = Metrics::new();
    let mut sink = RecordingSink {
        fail_syncs: 0,
        ..Default::default()
    }
    .measured(metrics.clone());
    let svc = Arc::new(
        kpng_model::ServiceInfo::new(Service {
            namespace: "shop".into(),
            name: "front".into(),
            ..Default::default()
        })
        .expect("valid"),
    );
    let endpoint = EndpointView::at(
        EndpointInfo::new("10.244.1.10".parse().expect("ip")),
        "10.244.1.10".parse().expect("ip"),
    )
    .expect("its address")
    .with_is_local(true)
    .with_cluster(true)
    .with_local(true);
    let view = view_of(1, &svc, vec![endpoint]);
    sink.sync(&Round::full(&view)).expect("sync");

    // A store with two revisions and a no-op write.
    let mut store = Store::new();
    for _ in 0..2 {
        let mut txn = store.begin();
        txn.set_service((*svc).clone());
        txn.commit();
    }
    let mut txn = store.begin();
    txn.set_service(kpng_model::ServiceInfo::new(Service::new("shop", "back")).expect("valid"));
    txn.commit();
    metrics.observe_aggregator(3);

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(serve_metrics(listener, metrics, Some(store.reader())));
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        .await
        .expect("write");
    let mut text = String::new();
    stream.read_to_string(&mut text).await.expect("read");
    let (head, body) = text.split_once("\r\n\r\n").expect("head and body");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("openmetrics-text"), "{head}");
    let samples = parse(body);
    let get = |name: &str| {
        *samples
            .get(name)
            .unwrap_or_else(|| panic!("{name} in {body}"))
    };
    assert_eq!(
        get("kubeproxy_sync_proxy_rules_duration_seconds_count"),
        1.0
    );
    assert_eq!(
        get("kubeproxy_sync_full_proxy_rules_duration_seconds_count"),
        1.0
    );
    assert_eq!(
        get("kubeproxy_network_programming_duration_seconds_count"),
        1.0
    );
    assert!(get("kubeproxy_sync_proxy_rules_last_timestamp_seconds") > 1.7e9);
    assert_eq!(get("kpng_sync_failures_total"), 0.0);
    assert_eq!(get("kpng_services"), 1.0);
    assert_eq!(get("kpng_endpoints"), 1.0);
    assert_eq!(get("kpng_store_writes_total"), 3.0);
    assert_eq!(get("kpng_store_noop_writes_total"), 1.0);
    assert_eq!(get("kpng_revisions_total"), 2.0);
    assert_eq!(get("kpng_aggregator_transactions_total"), 3.0);
}

#[test]
fn a_failed_sync_is_counted() {
    let metrics = Metrics::new();
    let mut sink = RecordingSink {
        fail_syncs: 1,
        ..Default::default()
    }
    .with(Measure::new(metrics.clone()));
    let view = |revision| NodeView {
        revision,
        ..Default::default()
    };
    assert!(sink.sync(&Round::full(&view(1))).is_err());
    // After a failure, the next round is full.
    sink.sync(&Round::full(&view(2))).expect("the second works");
    let samples = parse(&metrics.encode());
    assert_eq!(samples["kpng_sync_failures_total"], 1.0);
    assert_eq!(
        samples["kubeproxy_sync_proxy_rules_duration_seconds_count"],
        2.0
    );
    assert_eq!(
        samples["kubeproxy_sync_partial_proxy_rules_duration_seconds_count"],
        0.0
    );
}

/// Network programming latency runs from the trigger time an
/// EndpointSlice change carries (kept by the store for the revision it
/// made) to the sync that applied that revision, once per revision.
#[test]
fn programming_latency_runs_from_the_trigger_time() {
    let mut store = Store::new();
    let reader = store.reader();
    let metrics = Metrics::new();
    let mut sink = RecordingSink::default().with(Measure::new(metrics.clone()).with_store(reader));
    let svc = Arc::new(
        kpng_model::ServiceInfo::new(Service {
            namespace: "shop".into(),
            name: "front".into(),
            ..Default::default()
        })
        .expect("valid"),
    );
    // A change triggered two seconds ago.
    let mut txn = store.begin();
    txn.set_service((*svc).clone());
    txn.note_trigger(std::time::SystemTime::now() - std::time::Duration::from_secs(2));
    let revision = txn.commit().revision.expect("a change");
    let view = view_of(revision, &svc, Vec::new());
    sink.sync(&Round::full(&view)).expect("sync");
    let samples = parse(&metrics.encode());
    let count = "kubeproxy_network_programming_duration_seconds_count";
    let sum = "kubeproxy_network_programming_duration_seconds_sum";
    assert_eq!(samples[count], 1.0);
    assert!(samples[sum] >= 2.0, "{}", samples[sum]);
    // Taken once: a later sync of the same revision adds nothing.
    let again = view_of(revision, &svc, Vec::new());
    sink.sync(&Round::between(&view, &again)).expect("sync");
    assert_eq!(parse(&metrics.encode())[count], 1.0);
}

/// A held-back mass deletion shows: the gauge is 1 while it lasts, and
/// each hold is counted once however often it is reported.
#[test]
fn a_held_back_deletion_shows() {
    let metrics = Metrics::new();
    let samples = parse(&metrics.encode());
    assert_eq!(samples["kpng_sync_held_back"], 0.0);
    assert_eq!(samples["kpng_mass_deletions_held_total"], 0.0);
    metrics.held_back(true);
    metrics.held_back(true);
    let samples = parse(&metrics.encode());
    assert_eq!(samples["kpng_sync_held_back"], 1.0);
    assert_eq!(samples["kpng_mass_deletions_held_total"], 1.0);
    metrics.held_back(false);
    let samples = parse(&metrics.encode());
    assert_eq!(samples["kpng_sync_held_back"], 0.0);
    assert_eq!(samples["kpng_mass_deletions_held_total"], 1.0);
}

/// The objects the input's last read skipped: a gauge, 0 until told,
/// back to 0 once a read skips none.
#[test]
fn skipped_input_objects_show() {
    let metrics = Metrics::new();
    assert_eq!(parse(&metrics.encode())["kpng_input_objects_skipped"], 0.0);
    metrics.input_objects_skipped(3);
    assert_eq!(parse(&metrics.encode())["kpng_input_objects_skipped"], 3.0);
    metrics.input_objects_skipped(0);
    assert_eq!(parse(&metrics.encode())["kpng_input_objects_skipped"], 0.0);
}

/// GET `path` from a server on `port`: the status line and the body.
async fn get(port: u16, path: &str) -> (String, String) {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut text = String::new();
    stream.read_to_string(&mut text).await.expect("read");
    let (head, body) = text.split_once("\r\n\r\n").expect("head and body");
    (head.to_owned(), body.to_owned())
}

/// A Service whose policies are Local (internal and external), with a
/// ClusterIP and an externalIP of each family.
fn local_service() -> Arc<kpng_model::ServiceInfo> {
    use kpng_model::v1::{IpSet, ServicePort, TrafficPolicy};
    Arc::new(
        kpng_model::ServiceInfo::new(Service {
            namespace: "shop".into(),
            name: "local".into(),
            cluster_ips: Some(IpSet::parse_addrs("c", ["10.96.0.7", "fd00::7"]).expect("ips")),
            external_ips: Some(Box::new(
                IpSet::parse_addrs("e", ["192.0.2.7"]).expect("ip"),
            )),
            internal_traffic_policy: TrafficPolicy::Local as i32,
            external_traffic_policy: TrafficPolicy::Local as i32,
            ports: vec![ServicePort {
                name: "http".into(),
                protocol: 1,
                port: 80,
                ..Default::default()
            }],
            ..Default::default()
        })
        .expect("valid"),
    )
}

/// kube-proxy's metric names beyond the sync timings are all scraped:
/// changes pending and their totals (which move with a change, and the
/// pending ones fall back to 0 once synced), the last queued sync, the
/// mode's failure counter, Service ports with a Local policy and no local
/// endpoint, and the process collector's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_proxys_metric_names_are_all_scraped_and_changes_are_counted() {
    use kpng_health::metrics::ProxyMode;
    let metrics = Metrics::for_mode(ProxyMode::Nftables);
    let mut sink = RecordingSink {
        fail_syncs: 1,
        ..Default::default()
    }
    .measured(metrics.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(serve_metrics(listener, metrics.clone(), None));
    let scrape = || async {
        let (head, body) = get(port, "/metrics").await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        parse(&body)
    };

    let before = scrape().await;
    for name in [
        "kubeproxy_sync_proxy_rules_duration_seconds_count",
        "kubeproxy_sync_full_proxy_rules_duration_seconds_count",
        "kubeproxy_sync_partial_proxy_rules_duration_seconds_count",
        "kubeproxy_network_programming_duration_seconds_count",
        "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
        "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
        "kubeproxy_sync_proxy_rules_service_changes_pending",
        "kubeproxy_sync_proxy_rules_service_changes_total",
        "kubeproxy_sync_proxy_rules_endpoint_changes_pending",
        "kubeproxy_sync_proxy_rules_endpoint_changes_total",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_virtual_memory_bytes",
        "process_open_fds",
        "process_max_fds",
        "process_start_time_seconds",
    ] {
        assert!(before.contains_key(name), "{name} in {before:?}");
    }
    assert!(before["process_resident_memory_bytes"] > 1e6);
    assert!(before["process_open_fds"] >= 3.0);
    assert!(before["process_max_fds"] >= before["process_open_fds"]);
    let started = before["process_start_time_seconds"];
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("time")
        .as_secs_f64();
    assert!(started > 1.7e9 && started <= now + 1.0, "{started}");
    assert_eq!(
        before["kubeproxy_sync_proxy_rules_service_changes_total"],
        0.0
    );

    // A Service and an endpoint reach the backend, whose first round
    // fails: pending, queued.
    let svc = local_service();
    let endpoint = EndpointView::at(
        EndpointInfo::new("10.244.1.10".parse().expect("ip")),
        "10.244.1.10".parse().expect("ip"),
    )
    .expect("its address")
    .with_cluster(true);
    let view = view_of(1, &svc, vec![endpoint]);
    assert!(sink.sync(&Round::full(&view)).is_err());
    let pending = scrape().await;
    assert_eq!(
        pending["kubeproxy_sync_proxy_rules_service_changes_total"],
        1.0
    );
    assert_eq!(
        pending["kubeproxy_sync_proxy_rules_service_changes_pending"],
        1.0
    );
    assert_eq!(
        pending["kubeproxy_sync_proxy_rules_endpoint_changes_total"],
        1.0
    );
    assert_eq!(
        pending["kubeproxy_sync_proxy_rules_endpoint_changes_pending"],
        1.0
    );
    assert!(pending["kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds"] > 1.7e9);

    // The failure is counted per family; the full round that retries it
    // applies the changes, counted once.
    let view = NodeView {
        revision: 2,
        ..view
    };
    sink.sync(&Round::full(&view)).expect("sync");
    let after = scrape().await;
    let failures = "kubeproxy_sync_proxy_rules_nftables_sync_failures_total";
    assert_eq!(after[&format!("{failures}{{ip_family=\"IPv4\"}}")], 1.0);
    assert_eq!(after[&format!("{failures}{{ip_family=\"IPv6\"}}")], 1.0);
    assert!(
        after
            .keys()
            .any(|k| k.starts_with("kubeproxy_sync_proxy_rules_nftables_cleanup_failures")),
        "{after:?}"
    );
    assert!(
        !after.keys().any(|k| k.contains("iptables")),
        "iptables' counter only in iptables mode: {after:?}"
    );
    assert_eq!(
        after["kubeproxy_sync_proxy_rules_service_changes_total"],
        1.0
    );
    assert_eq!(
        after["kubeproxy_sync_proxy_rules_service_changes_pending"],
        0.0
    );
    assert_eq!(
        after["kubeproxy_sync_proxy_rules_endpoint_changes_pending"],
        0.0
    );
    // Its one port, Local both ways, has no local endpoint: internal in
    // both families (a ClusterIP in each), external in IPv4 only.
    let no_local = |policy: &str, family: &str| {
        after[&format!(
            "kubeproxy_sync_proxy_rules_no_local_endpoints_total{{traffic_policy=\"{policy}\",ip_family=\"{family}\"}}"
        )]
    };
    assert_eq!(no_local("internal", "IPv4"), 1.0);
    assert_eq!(no_local("internal", "IPv6"), 1.0);
    assert_eq!(no_local("external", "IPv4"), 1.0);
    assert_eq!(no_local("external", "IPv6"), 0.0);

    // A change after the sync (its round failing, so it stays pending):
    // the totals move again.
    sink.get_mut().fail_syncs = 1;
    let gone = NodeView {
        revision: 3,
        ..Default::default()
    };
    assert!(sink.sync(&Round::between(&view, &gone)).is_err());
    let moved = scrape().await;
    assert_eq!(
        moved["kubeproxy_sync_proxy_rules_service_changes_total"],
        2.0
    );
    assert_eq!(
        moved["kubeproxy_sync_proxy_rules_service_changes_pending"],
        1.0
    );
}

/// `/configz` answers the configuration set, as JSON, and `/proxyMode`
/// the mode, as text; unset, both are 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configz_and_proxy_mode_are_served_beside_metrics() {
    use kpng_health::metrics::ProxyMode;
    let metrics = Metrics::for_mode(ProxyMode::Iptables);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(serve_metrics(listener, metrics.clone(), None));
    assert!(get(port, "/configz").await.0.starts_with("HTTP/1.1 404"));
    assert!(get(port, "/proxyMode").await.0.starts_with("HTTP/1.1 404"));

    metrics.set_proxy_mode("iptables");
    metrics.set_configz(serde_json::json!({"kubeproxy.config.k8s.io": {"mode": "iptables"}}));
    let (head, body) = get(port, "/proxyMode").await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("text/plain"), "{head}");
    assert_eq!(body, "iptables");
    let (head, body) = get(port, "/configz").await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("application/json"), "{head}");
    let json: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(json["kubeproxy.config.k8s.io"]["mode"], "iptables");
    let (_, text) = get(port, "/metrics").await;
    assert!(
        text.contains("kubeproxy_sync_proxy_rules_iptables_restore_failures_total"),
        "{text}"
    );
}

/// Incremental rounds count what they change: a Service whose definition
/// changed (or that left) once, each endpoint set or removed once; the
/// gauges and the Local counts they leave are those a full round of the
/// same view gives.
#[test]
fn incremental_rounds_count_what_changed() {
    let metrics = Metrics::new();
    let mut sink = RecordingSink::default().measured(metrics.clone());
    let svc = local_service();
    let ip = |text: &str| text.parse::<std::net::IpAddr>().expect("ip");
    let remote = EndpointView::at(EndpointInfo::new(ip("10.244.2.10")), ip("10.244.2.10"))
        .expect("its address")
        .with_cluster(true);
    let local = EndpointView::at(EndpointInfo::new(ip("10.244.1.11")), ip("10.244.1.11"))
        .expect("its address")
        .with_is_local(true)
        .with_cluster(true)
        .with_local(true);
    let v1 = view_of(1, &svc, vec![remote.clone()]);
    let v2 = view_of(2, &svc, vec![local, remote]);
    let mut v3 = v2.clone();
    v3.revision = 3;
    v3.services.remove(&svc.service_name());
    // What the view's gauges and Local counts are, by a full round.
    let fresh = |view: &NodeView| {
        let metrics = Metrics::new();
        RecordingSink::default()
            .measured(metrics.clone())
            .sync(&Round::full(view))
            .expect("sync");
        parse(&metrics.encode())
    };
    let same_view_metrics = |view: &NodeView| {
        let (ours, theirs) = (parse(&metrics.encode()), fresh(view));
        for (name, value) in &theirs {
            if name.starts_with("kpng_services")
                || name.starts_with("kpng_endpoints")
                || name.starts_with("kubeproxy_sync_proxy_rules_no_local_endpoints_total")
            {
                assert_eq!(ours.get(name), Some(value), "{name} at {}", view.revision);
            }
        }
    };
    let changes = || {
        let samples = parse(&metrics.encode());
        (
            samples["kubeproxy_sync_proxy_rules_service_changes_total"],
            samples["kubeproxy_sync_proxy_rules_endpoint_changes_total"],
            samples["kpng_endpoints"],
        )
    };

    sink.sync(&Round::full(&v1)).expect("sync");
    assert_eq!(changes(), (1.0, 1.0, 1.0));
    same_view_metrics(&v1);
    // A local endpoint joins: no Service change, one endpoint change.
    sink.sync(&Round::between(&v1, &v2)).expect("sync");
    assert_eq!(changes(), (1.0, 2.0, 2.0));
    same_view_metrics(&v2);
    // The Service leaves, its endpoints with it.
    sink.sync(&Round::between(&v2, &v3)).expect("sync");
    assert_eq!(changes(), (2.0, 2.0, 0.0));
    same_view_metrics(&v3);
    let samples = parse(&metrics.encode());
    assert_eq!(samples["kpng_services"], 0.0);
    assert!(
        samples
            .iter()
            .filter(|(k, _)| k.starts_with("kubeproxy_sync_proxy_rules_no_local_endpoints_total"))
            .all(|(_, v)| *v == 0.0),
        "{samples:?}"
    );
}

#[test]
fn texts_of_other_crates_are_served_before_the_eof() {
    let metrics = Metrics::new();
    let scrapes = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = scrapes.clone();
    metrics.add_text(move || {
        let n = counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        format!(
            "# HELP kpng_fleet_nodes Nodes.\n# TYPE kpng_fleet_nodes gauge\nkpng_fleet_nodes {n}\n"
        )
    });
    // Read at each scrape.
    let _ = metrics.encode();
    let samples = parse(&metrics.encode());
    assert_eq!(samples.get("kpng_fleet_nodes"), Some(&2.0));
}
