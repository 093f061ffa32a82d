//! The API source against a small in-test apiserver, over a real socket:
//! the real kube client and kube-runtime watchers speak the Kubernetes
//! list/watch protocol to it.

use std::time::Duration;

use kpng_kube::watch::{self, WatchConfig};
use kpng_kube::{Ingest, IngestConfig};
use kpng_model::{Kind, ServiceName};
use kpng_store::{Reader, Snapshot, Store};
use kpng_testkit::apiserver::{ApiServer, Reply, Resource, Script};
use serde_json::{Value, json};

fn service(name: &str, rv: &str, ip: &str, port: u16) -> Value {
    json!({
        "metadata": {"namespace": "ns", "name": name, "resourceVersion": rv},
        "spec": {"clusterIP": ip, "clusterIPs": [ip], "ports": [{"name": "http", "port": port}]}
    })
}

fn event(kind: &str, object: Value) -> Value {
    json!({"type": kind, "object": object})
}

fn bookmark(rv: &str) -> Value {
    json!({"type": "BOOKMARK", "object": {"kind": "Service", "apiVersion": "v1", "metadata": {"resourceVersion": rv}}})
}

fn gone() -> Value {
    json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": "too old resource version: 10 (15)", "reason": "Expired", "code": 410}})
}

fn script(services: Vec<Reply>) -> Script {
    let mut script = Script::default();
    for reply in services {
        let watch = !matches!(reply, Reply::List(..));
        script.push(Resource::Services, watch, reply);
    }
    script
}

/// Runs the API source against `server` and waits until every kind is
/// synced and `done` holds.
async fn run_until(server: &ApiServer, done: impl Fn(&Snapshot) -> bool) -> Snapshot {
    run_until_listed(server, &Kind::ALL, done).await
}

/// Runs the API source against `server` and waits until `kinds` are
/// synced and `done` holds.
async fn run_until_listed(
    server: &ApiServer,
    kinds: &[Kind],
    done: impl Fn(&Snapshot) -> bool,
) -> Snapshot {
    let ingest = Ingest::new(Store::new(), IngestConfig::default());
    let mut reader: Reader = ingest.reader();
    let client = kube::Client::try_from(kube::Config::new(server.url.parse().expect("url")))
        .expect("client");
    let task = tokio::spawn(watch::run(client, ingest, WatchConfig::default()));
    let snapshot = tokio::time::timeout(
        Duration::from_secs(30),
        reader.wait(|s| s.listed().contains_all(kinds) && done(s)),
    )
    .await
    .expect("converged within 30 s")
    .expect("store open");
    // Let anything still in flight land, then check nothing more came.
    tokio::time::sleep(Duration::from_millis(300)).await;
    task.abort();
    assert_eq!(
        reader.snapshot().revision(),
        snapshot.revision(),
        "no revision after convergence"
    );
    snapshot
}

fn names(s: &Snapshot) -> Vec<String> {
    let mut n: Vec<String> = s.services().map(|(n, _)| n.name().to_string()).collect();
    n.sort();
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_then_watch_with_bookmarks_and_suppressed_updates() {
    let mut metadata_only = service("a", "13", "10.96.0.1", 80);
    metadata_only["metadata"]["annotations"] = json!({"touched": "yes"});
    let server = ApiServer::start(script(vec![
        Reply::List("10".into(), vec![service("a", "10", "10.96.0.1", 80)]),
        Reply::Watch(vec![
            event("ADDED", service("b", "11", "10.96.0.2", 80)),
            bookmark("12"),
            event("MODIFIED", metadata_only),
            event("MODIFIED", service("a", "14", "10.96.0.1", 8080)),
            event("DELETED", service("b", "15", "10.96.0.2", 80)),
        ]),
    ]))
    .await;
    let snap = run_until(&server, |s| {
        s.service(&ServiceName::new("ns", "a"))
            .is_some_and(|a| a.ports[0].port == 8080)
            && s.service(&ServiceName::new("ns", "b")).is_none()
    })
    .await;
    assert_eq!(names(&snap), ["a"]);
    // list(a) = 1, ADDED b = 2, metadata-only = none, port change = 3,
    // DELETED b = 4. Empty EndpointSlice and Node lists make none.
    assert_eq!(snap.revision(), 4);
    let requests = server.requests();
    assert!(
        requests.iter().any(|r| r.starts_with("/api/v1/services?")
            && r.contains("watch=true")
            && r.contains("resourceVersion=10")),
        "{requests:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gone_forces_a_relist_that_swaps_contents_in_one_revision() {
    let server = ApiServer::start(script(vec![
        Reply::List(
            "10".into(),
            vec![
                service("a", "10", "10.96.0.1", 80),
                service("b", "10", "10.96.0.2", 80),
            ],
        ),
        Reply::Watch(vec![gone()]),
        // The relist: a unchanged, b gone during the outage, c new.
        Reply::List(
            "20".into(),
            vec![
                service("a", "10", "10.96.0.1", 80),
                service("c", "19", "10.96.0.3", 80),
            ],
        ),
    ]))
    .await;
    let snap = run_until(&server, |s| {
        s.service(&ServiceName::new("ns", "c")).is_some()
    })
    .await;
    assert_eq!(names(&snap), ["a", "c"]);
    // First list = 1; the relist deletes b and adds c in one revision = 2;
    // the unchanged a makes none.
    assert_eq!(snap.revision(), 2);
    let lists = server
        .requests()
        .iter()
        .filter(|r| r.starts_with("/api/v1/services") && !r.contains("watch=true"))
        .count();
    assert_eq!(lists, 2, "410 Gone made the watcher list again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_connection_resumes_the_watch_from_the_last_version() {
    let server = ApiServer::start(script(vec![
        Reply::List("10".into(), vec![service("a", "10", "10.96.0.1", 80)]),
        Reply::WatchThenDrop(vec![event("ADDED", service("b", "11", "10.96.0.2", 80))]),
        Reply::Watch(vec![event("ADDED", service("c", "12", "10.96.0.3", 80))]),
    ]))
    .await;
    let snap = run_until(&server, |s| {
        s.service(&ServiceName::new("ns", "c")).is_some()
    })
    .await;
    assert_eq!(names(&snap), ["a", "b", "c"]);
    assert_eq!(snap.revision(), 3);
    let requests = server.requests();
    assert!(
        requests
            .iter()
            .any(|r| r.contains("watch=true") && r.contains("resourceVersion=11")),
        "re-watched from the last version seen: {requests:?}"
    );
}

/// Faults at the wire: a storm of 410 Gone, garbage bodies where watch
/// streams should be, and a watch dropped again and again. The store ends right, and the relists
/// of unchanged objects make no revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gone_storms_and_garbage_converge_without_spurious_revisions() {
    let a = || service("a", "10", "10.96.0.1", 80);
    let server = ApiServer::start(script(vec![
        Reply::List("10".into(), vec![a()]),
        Reply::Watch(vec![gone()]),
        Reply::List("11".into(), vec![a()]),
        Reply::Watch(vec![gone()]),
        Reply::Garbage,
        Reply::List("12".into(), vec![a()]),
        Reply::Watch(vec![gone()]),
        Reply::List("13".into(), vec![a()]),
        Reply::Garbage,
        Reply::List("14".into(), vec![a()]),
        // The watch drops again and again before b arrives.
        Reply::WatchThenDrop(vec![]),
        Reply::WatchThenDrop(vec![bookmark("14")]),
        Reply::WatchThenDrop(vec![]),
        Reply::WatchThenDrop(vec![]),
        Reply::Watch(vec![event("ADDED", service("b", "15", "10.96.0.2", 80))]),
    ]))
    .await;
    let snap = run_until(&server, |s| {
        s.service(&ServiceName::new("ns", "b")).is_some()
    })
    .await;
    assert_eq!(names(&snap), ["a", "b"]);
    // The first list, then b: two revisions. Every relist of the
    // unchanged a made none.
    assert_eq!(snap.revision(), 2);
    let lists = server
        .requests()
        .iter()
        .filter(|r| r.starts_with("/api/v1/services") && !r.contains("watch=true"))
        .count();
    // The first list, then one after each 410: the watcher listed again.
    assert!(lists >= 4, "lists: {lists}");
}

/// A slow apiserver: a list and a watch that answer seconds late. Nothing
/// is programmed before the list arrives, and the store ends right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_responses_are_waited_for() {
    let delay = Duration::from_secs(2);
    let mut script = Script::default();
    script.push(
        Resource::Services,
        false,
        Reply::Slow(
            delay,
            Box::new(Reply::List(
                "10".into(),
                vec![service("a", "10", "10.96.0.1", 80)],
            )),
        ),
    );
    script.push(
        Resource::Services,
        true,
        Reply::Slow(
            delay,
            Box::new(Reply::Watch(vec![event(
                "ADDED",
                service("b", "11", "10.96.0.2", 80),
            )])),
        ),
    );
    let server = ApiServer::start(script).await;
    let started = std::time::Instant::now();
    let snap = run_until(&server, |s| {
        s.service(&ServiceName::new("ns", "b")).is_some()
    })
    .await;
    assert!(started.elapsed() >= delay * 2, "both replies were late");
    assert_eq!(names(&snap), ["a", "b"]);
    assert_eq!(snap.revision(), 2);
}

fn service_cidr(name: &str, rv: &str, cidrs: &[&str]) -> Value {
    json!({"metadata": {"name": name, "resourceVersion": rv}, "spec": {"cidrs": cidrs}})
}

fn merged(s: &Snapshot) -> Vec<String> {
    let merged = s.merged_service_cidrs();
    merged.v4.into_iter().chain(merged.v6).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_cidrs_are_listed_and_watched_into_the_enls() {
    let mut script = Script::default();
    script.push(
        Resource::ServiceCidrs,
        false,
        Reply::List(
            "20".into(),
            vec![service_cidr(
                "kubernetes",
                "20",
                &["10.96.0.0/12", "fd00:96::/108"],
            )],
        ),
    );
    script.push(
        Resource::ServiceCidrs,
        true,
        Reply::Watch(vec![
            event("ADDED", service_cidr("extra", "21", &["10.200.0.0/16"])),
            event("MODIFIED", service_cidr("extra", "22", &["10.201.0.0/16"])),
            event(
                "DELETED",
                service_cidr("kubernetes", "23", &["10.96.0.0/12", "fd00:96::/108"]),
            ),
        ]),
    );
    let server = ApiServer::start(script).await;
    let snap = run_until(&server, |s| merged(s) == ["10.201.0.0/16"]).await;
    // The list = 1, ADDED = 2, MODIFIED = 3, DELETED = 4; the other
    // kinds' empty lists make none.
    assert_eq!(snap.revision(), 4);
    assert!(
        server.requests().iter().any(
            |r| r.starts_with("/apis/networking.k8s.io/v1/servicecidrs?")
                && r.contains("watch=true")
        ),
        "{:?}",
        server.requests()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_that_does_not_serve_service_cidrs_still_syncs() {
    let mut script = script(vec![Reply::List(
        "10".into(),
        vec![service("a", "10", "10.96.0.1", 80)],
    )]);
    script.unserve(Resource::ServiceCidrs);
    let server = ApiServer::start(script).await;
    let snap = run_until_listed(&server, &[Kind::Node, Kind::Service, Kind::Endpoint], |s| {
        s.service(&ServiceName::new("ns", "a")).is_some()
    })
    .await;
    assert!(!snap.is_listed(Kind::ServiceCidr), "never listed");
    assert!(merged(&snap).is_empty());
    assert!(
        server
            .requests()
            .iter()
            .any(|r| r.starts_with("/apis/networking.k8s.io/v1/servicecidrs?")),
        "asked for: {:?}",
        server.requests()
    );
}
