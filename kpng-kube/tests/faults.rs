//! The API source against an apiserver that blinks: watches dropped,
//! objects changed while the client is away, a resume answered `410 Gone`
//! (as an HTTP status and as an ERROR event), the apiserver down and back
//! with or without its history, and bookmarks. After each fault the store
//! must hold exactly the apiserver's state (no stale endpoint, no lost or
//! leftover Service), with exactly the revisions the changes make: a
//! resume one per event that changes something, a relist one per kind.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use kpng_kube::watch::{self, WatchConfig};
use kpng_kube::{Ingest, IngestConfig};
use kpng_model::{Key, Kind};
use kpng_store::{Reader, Snapshot, Store};
use kpng_testkit::apiserver::{ApiServer, GoneForm, Outage, Resource, Script};
use serde_json::{Value, json};

fn service(name: &str, ip: &str) -> Value {
    json!({
        "metadata": {"namespace": "ns", "name": name},
        "spec": {"clusterIP": ip, "clusterIPs": [ip], "ports": [{"name": "http", "port": 80}]}
    })
}

fn slice(service: &str, addresses: &[&str]) -> Value {
    let endpoints: Vec<Value> = addresses
        .iter()
        .map(|a| json!({"addresses": [a], "conditions": {"ready": true}}))
        .collect();
    json!({
        "metadata": {"namespace": "ns", "name": format!("{service}-1"),
                     "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]
    })
}

/// What the store holds of Services and endpoints, as lines: `service
/// ns/NAME CLUSTER-IP`, `endpoint ns/NAME ADDRESS`.
fn held(s: &Snapshot) -> BTreeSet<String> {
    s.iter()
        .filter_map(|(key, _)| match key {
            Key::Service(name) => {
                let ip = s
                    .service(&name)
                    .and_then(|svc| svc.cluster_ips(kpng_model::IpFamily::V4).first().copied())
                    .map(|ip| ip.to_string())
                    .unwrap_or_default();
                Some(format!("service {name} {ip}"))
            }
            Key::Endpoint(name, address) => Some(format!("endpoint {name} {address}")),
            _ => None,
        })
        .collect()
}

/// The same lines from the apiserver's live objects: the store must
/// equal this.
fn served(server: &ApiServer) -> BTreeSet<String> {
    let mut lines = BTreeSet::new();
    for svc in server.objects(Resource::Services) {
        let name = svc["metadata"]["name"].as_str().unwrap_or_default();
        let ip = svc["spec"]["clusterIP"].as_str().unwrap_or_default();
        lines.insert(format!("service ns/{name} {ip}"));
    }
    for slice in server.objects(Resource::EndpointSlices) {
        let name = slice["metadata"]["labels"]["kubernetes.io/service-name"]
            .as_str()
            .unwrap_or_default();
        for endpoint in slice["endpoints"].as_array().into_iter().flatten() {
            for address in endpoint["addresses"].as_array().into_iter().flatten() {
                let address = address.as_str().unwrap_or_default();
                lines.insert(format!("endpoint ns/{name} {address}"));
            }
        }
    }
    lines
}

/// A live apiserver with Services a, b, c and their endpoints, and the
/// API source feeding a store from it.
struct Blinking {
    server: ApiServer,
    reader: Reader,
    task: tokio::task::JoinHandle<kpng_kube::Result<()>>,
    /// When the store last held the apiserver's state.
    at: Instant,
}

impl Blinking {
    async fn start() -> Self {
        let server = ApiServer::start(Script::default()).await;
        for (name, ip, eps) in [
            ("a", "10.96.0.1", ["10.244.1.1", "10.244.1.2"]),
            ("b", "10.96.0.2", ["10.244.2.1", "10.244.2.2"]),
            ("c", "10.96.0.3", ["10.244.3.1", "10.244.3.2"]),
        ] {
            server.apply(Resource::Services, service(name, ip));
            server.apply(Resource::EndpointSlices, slice(name, &eps));
        }
        let ingest = Ingest::new(Store::new(), IngestConfig::default());
        let reader = ingest.reader();
        let client = kube::Client::try_from(kube::Config::new(server.url.parse().expect("url")))
            .expect("client");
        let task = tokio::spawn(watch::run(client, ingest, WatchConfig::default()));
        let mut blinking = Self {
            server,
            reader,
            task,
            at: Instant::now(),
        };
        let first = blinking.converged().await;
        // The Services' list, then the EndpointSlices': two revisions (the
        // empty lists of Nodes and ServiceCIDRs make none).
        assert_eq!(first.revision(), 2);
        blinking
    }

    /// Waits until the store holds exactly the apiserver's state, every
    /// kind listed; then checks that nothing more comes.
    async fn converged(&mut self) -> Snapshot {
        let want = served(&self.server);
        let snapshot = tokio::time::timeout(
            Duration::from_secs(30),
            self.reader
                .wait(|s| s.listed().contains_all(&Kind::ALL) && held(s) == want),
        )
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the store never held the apiserver's state:\nwant {want:#?}\nheld {:#?}",
                held(&self.reader.snapshot())
            )
        })
        .expect("store open");
        self.at = Instant::now();
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            self.reader.snapshot().revision(),
            snapshot.revision(),
            "no revision after convergence"
        );
        snapshot
    }

    /// How many lists of `resource` the apiserver answered.
    fn lists(&self, resource: &str) -> usize {
        self.server
            .requests()
            .iter()
            .filter(|r| r.starts_with(resource) && !r.contains("watch=true"))
            .count()
    }

    /// What changes while the client is away: an endpoint of a removed
    /// (the stale backend to rule out), Service d added with its
    /// endpoints, Service c deleted with its EndpointSlice. Five events,
    /// each a change of the store.
    fn change_while_away(&self) {
        self.server
            .apply(Resource::EndpointSlices, slice("a", &["10.244.1.1"]));
        self.server
            .apply(Resource::Services, service("d", "10.96.0.4"));
        self.server
            .apply(Resource::EndpointSlices, slice("d", &["10.244.4.1"]));
        self.server.delete(Resource::Services, "ns", "c");
        self.server.delete(Resource::EndpointSlices, "ns", "c-1");
    }
}

impl Drop for Blinking {
    fn drop(&mut self) {
        self.task.abort();
    }
}

const SERVICES: &str = "/api/v1/services";
const SLICES: &str = "/apis/discovery.k8s.io/v1/endpointslices";

/// Every open watch dropped, and objects changed before the client
/// watches again: it resumes from its resourceVersion and the apiserver
/// sends what changed meanwhile; no list, one revision per change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_watch_resumes_and_sees_what_changed_while_it_was_away() {
    let mut api = Blinking::start().await;
    api.server.hold_watches(true);
    api.server.drop_watches();
    api.change_while_away();
    api.server.hold_watches(false);
    let snapshot = api.converged().await;
    assert_eq!(snapshot.revision(), 2 + 5, "one revision per change");
    assert_eq!(
        (api.lists(SERVICES), api.lists(SLICES)),
        (1, 1),
        "resumed, not listed"
    );
}

/// The apiserver down (connections refused) while objects change, then
/// back with its history: the watches resume and see every change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_while_the_apiserver_is_down_are_seen_when_it_comes_back() {
    let mut api = Blinking::start().await;
    api.server.go_down(Outage::Refuse);
    api.change_while_away();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let back = Instant::now();
    api.server.come_back();
    let snapshot = api.converged().await;
    println!(
        "down 2 s (refused), history kept: store converged {:.2} s after the apiserver came back",
        (api.at - back).as_secs_f64()
    );
    assert_eq!(snapshot.revision(), 2 + 5, "one revision per change");
    assert_eq!(
        (api.lists(SERVICES), api.lists(SLICES)),
        (1, 1),
        "resumed, not listed"
    );
}

/// Objects changed while the client is away, and the history compacted:
/// the resume is answered with an HTTP `410 Gone`. The client must list
/// again, and the relist is one revision per kind that changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_answered_410_as_a_status_lists_again() {
    let mut api = Blinking::start().await;
    api.server.answer_gone_as(GoneForm::Status);
    api.server.hold_watches(true);
    api.server.drop_watches();
    api.change_while_away();
    api.server.compact();
    api.server.hold_watches(false);
    let snapshot = api.converged().await;
    assert_eq!(snapshot.revision(), 2 + 2, "one revision per kind relisted");
    assert_eq!(
        (api.lists(SERVICES), api.lists(SLICES)),
        (2, 2),
        "listed again"
    );
}

/// The same, the `410` sent as an ERROR event in a `200 OK` stream (the
/// watch cache's form).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_answered_410_as_an_event_lists_again() {
    let mut api = Blinking::start().await;
    api.server.answer_gone_as(GoneForm::Event);
    api.server.hold_watches(true);
    api.server.drop_watches();
    api.change_while_away();
    api.server.compact();
    api.server.hold_watches(false);
    let snapshot = api.converged().await;
    assert_eq!(snapshot.revision(), 2 + 2, "one revision per kind relisted");
    assert_eq!(
        (api.lists(SERVICES), api.lists(SLICES)),
        (2, 2),
        "listed again"
    );
}

/// The apiserver down (connections accepted and closed unanswered) while objects
/// change, and back with its history compacted (a restarted apiserver
/// whose watch cache starts anew), answering the resume `410` in each
/// form in turn: only a relist brings the store to its state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apiserver_back_with_compacted_history_is_listed_again() {
    let mut api = Blinking::start().await;
    let mut revision = 2;
    for (round, form) in [GoneForm::Status, GoneForm::Event].into_iter().enumerate() {
        api.server.answer_gone_as(form);
        api.server.go_down(Outage::Close);
        if round == 0 {
            api.change_while_away();
        } else {
            // Every endpoint replaced, Service e added.
            for (name, eps) in [
                ("a", "10.244.1.9"),
                ("b", "10.244.2.9"),
                ("d", "10.244.4.9"),
            ] {
                api.server
                    .apply(Resource::EndpointSlices, slice(name, &[eps]));
            }
            api.server
                .apply(Resource::Services, service("e", "10.96.0.5"));
        }
        api.server.compact();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let back = Instant::now();
        api.server.come_back();
        let snapshot = api.converged().await;
        println!(
            "down 2 s (closed), history compacted, 410 as {form:?}: store converged {:.2} s after \
             the apiserver came back",
            (api.at - back).as_secs_f64()
        );
        revision += 2;
        assert_eq!(
            snapshot.revision(),
            revision,
            "one revision per kind relisted"
        );
        assert_eq!(
            (api.lists(SERVICES), api.lists(SLICES)),
            (2 + round, 2 + round),
            "listed again"
        );
    }
}

/// Bookmarks: the client asks for them, and a watch that has seen none of
/// its own kind's events for a while resumes from the bookmark's
/// resourceVersion, past a compaction, with no relist; without the
/// bookmark the same resume is answered `410` and lists again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bookmark_lets_a_quiet_watch_resume_past_a_compaction() {
    let mut api = Blinking::start().await;
    assert!(
        api.server
            .requests()
            .iter()
            .any(|r| r.starts_with(SERVICES) && r.contains("allowWatchBookmarks=true")),
        "the client asks for bookmarks: {:?}",
        api.server.requests()
    );
    // EndpointSlices change; Services do not: their watch's version stays
    // behind, until the bookmark moves it on.
    api.server
        .apply(Resource::EndpointSlices, slice("a", &["10.244.1.7"]));
    api.converged().await;
    api.server.bookmark();
    tokio::time::sleep(Duration::from_millis(300)).await;
    api.server.compact();
    api.server.drop_watches();
    api.server
        .apply(Resource::EndpointSlices, slice("b", &["10.244.2.7"]));
    let snapshot = api.converged().await;
    assert_eq!(snapshot.revision(), 2 + 2);
    assert_eq!(
        (api.lists(SERVICES), api.lists(SLICES)),
        (1, 1),
        "both resumed: Services from the bookmark"
    );
    // No bookmark this time: the Services' watch resumes from the last
    // bookmark's version, compacted away since: 410, and a list.
    api.server
        .apply(Resource::EndpointSlices, slice("a", &["10.244.1.8"]));
    api.converged().await;
    api.server.compact();
    api.server.drop_watches();
    let deadline = Instant::now() + Duration::from_secs(30);
    while api.lists(SERVICES) < 2 {
        assert!(Instant::now() < deadline, "Services never listed again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let snapshot = api.converged().await;
    assert_eq!(
        snapshot.revision(),
        2 + 3,
        "the relist of unchanged Services makes none"
    );
    assert_eq!(api.lists(SERVICES), 2, "Services listed again, once");
}
