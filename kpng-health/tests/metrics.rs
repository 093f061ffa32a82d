//! The metrics endpoint, scraped over a real socket and parsed.

use std::collections::BTreeMap;
use std::sync::Arc;

use kpng_health::metrics::{Measured, Metrics, serve_metrics};
use kpng_model::EndpointInfo;
use kpng_model::v1::Service;
use kpng_model::view::{EndpointView, ViewOp};
use kpng_sink::IncrementalSink;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn syncs_failures_and_ingest_counts_are_scraped() {
    let metrics = Metrics::new();
    let mut sink = Measured::new(
        RecordingSink {
            fail_syncs: 0,
            ..Default::default()
        },
        metrics.clone(),
    );
    let svc = Arc::new(Service {
        namespace: "shop".into(),
        name: "front".into(),
        ..Default::default()
    });
    let name = svc.service_name();
    sink.reset();
    sink.apply(&ViewOp::SetService(svc.clone())).expect("op");
    sink.apply(&ViewOp::SetEndpoint(
        name.clone(),
        EndpointView::at(
            EndpointInfo::new("10.244.1.10".parse().expect("ip")),
            "10.244.1.10".parse().expect("ip"),
        )
        .expect("its address")
        .with_is_local(true)
        .with_cluster(true)
        .with_local(true),
    ))
    .expect("op");
    sink.sync(1).expect("sync");

    // A store with two revisions and a no-op write.
    let mut store = Store::new();
    for _ in 0..2 {
        let mut txn = store.begin();
        txn.set_service((*svc).clone());
        txn.commit();
    }
    let mut txn = store.begin();
    txn.set_service(Service {
        namespace: "shop".into(),
        name: "back".into(),
        ..Default::default()
    });
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
    let mut sink = Measured::new(
        RecordingSink {
            fail_syncs: 1,
            ..Default::default()
        },
        metrics.clone(),
    );
    sink.reset();
    assert!(sink.sync(1).is_err());
    sink.sync(2).expect("the second works");
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
    let mut sink = Measured::new(RecordingSink::default(), metrics.clone()).with_store(reader);
    let svc = Arc::new(Service {
        namespace: "shop".into(),
        name: "front".into(),
        ..Default::default()
    });
    // A change triggered two seconds ago.
    let mut txn = store.begin();
    txn.set_service((*svc).clone());
    txn.note_trigger(std::time::SystemTime::now() - std::time::Duration::from_secs(2));
    let revision = txn.commit().revision.expect("a change");
    sink.apply(&ViewOp::SetService(svc.clone())).expect("op");
    sink.sync(revision).expect("sync");
    let samples = parse(&metrics.encode());
    let count = "kubeproxy_network_programming_duration_seconds_count";
    let sum = "kubeproxy_network_programming_duration_seconds_sum";
    assert_eq!(samples[count], 1.0);
    assert!(samples[sum] >= 2.0, "{}", samples[sum]);
    // Taken once: a later sync of the same revision adds nothing.
    sink.apply(&ViewOp::SetService(svc)).expect("op");
    sink.sync(revision).expect("sync");
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
