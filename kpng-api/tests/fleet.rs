//! The fleet view end to end over a real unix socket: agents report each
//! round, the server's `Fleet` call shows who applied what, a failing
//! sink's error, a watcher that does not report (an older agent), and a
//! restarted server that ignores the previous instance's revisions.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use kpng_api::{Address, AgentConfig, Server, bind_unix, connect_unix, run_agent, serve};
use kpng_model::Kind;
use kpng_model::v1::{FleetReply, FleetRequest, NodeReport, WatchRequest};
use kpng_sink::{Round, Sink, SinkError};
use kpng_store::Store;
use kpng_testkit::{Cluster, ClusterShape};

fn cluster() -> Cluster {
    Cluster::synthetic(ClusterShape {
        services: 20,
        endpoints: 60,
        nodes: 3,
        zones: 1,
    })
}

fn socket(test: &str) -> PathBuf {
    std::env::temp_dir().join(format!("kpng-api-fleet-{test}-{}.sock", std::process::id()))
}

/// A sink that applies every round, or fails each while `fail` is set;
/// the revision of its last applied round.
#[derive(Clone, Default)]
struct Switch {
    fail: Arc<AtomicBool>,
    applied: Arc<AtomicU64>,
}

impl Sink for Switch {
    fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
        if self.fail.load(Ordering::Relaxed) {
            return Err(SinkError::backend("test", "the kernel refused the batch"));
        }
        self.applied.store(round.revision(), Ordering::Relaxed);
        Ok(())
    }
}

fn agent(path: PathBuf, node: &'static str) -> (Switch, tokio::task::JoinHandle<()>) {
    let switch = Switch::default();
    let mut sink = switch.clone();
    let mut config = AgentConfig::default();
    config.retry = Duration::from_millis(20);
    config.max_retry = Duration::from_millis(100);
    let task = tokio::spawn(async move {
        let _ = run_agent(&Address::Unix(path), node, &mut sink, &config).await;
    });
    (switch, task)
}

async fn fleet(path: &std::path::Path, all: bool) -> FleetReply {
    let mut client = connect_unix(path).await.expect("connect");
    client
        .fleet(FleetRequest {
            all,
            ..FleetRequest::default()
        })
        .await
        .expect("fleet")
        .into_inner()
}

/// Waits (up to 10 s) until the fleet satisfies `ok`.
async fn until(path: &std::path::Path, what: &str, ok: impl Fn(&FleetReply) -> bool) -> FleetReply {
    let mut last = FleetReply::default();
    for _ in 0..1000 {
        last = fleet(path, true).await;
        if ok(&last) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the fleet never showed {what}: {last:?}");
}

fn flip(store: &mut Store, cluster: &Cluster, i: usize) {
    let (name, ep) = cluster.endpoints[i % cluster.endpoints.len()].clone();
    let ready = !ep.ready();
    let mut txn = store.begin();
    txn.set_endpoint(name, ep.with_conditions(ready, ready, false));
    txn.commit();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_report_what_they_applied_and_a_failing_sink_is_listed_with_its_error() {
    let cluster = cluster();
    let mut store = Store::new();
    cluster.load_into(&mut store);
    store.mark_listed(Kind::Service);
    store.mark_listed(Kind::Endpoint);
    let path = socket("report");
    let server = Server::new(store.reader());
    let serving = tokio::spawn(serve(bind_unix(&path).expect("bind"), server.clone()));
    let (one, _a) = agent(path.clone(), "node-1");
    let (two, _b) = agent(path.clone(), "node-2");
    // A watcher that reports nothing, as an older agent: listed, never
    // counted behind.
    let mut old = connect_unix(&path).await.expect("connect");
    let _old_stream = old
        .watch(WatchRequest {
            node: "node-3".into(),
            ..WatchRequest::default()
        })
        .await
        .expect("watch")
        .into_inner();

    let head = store.revision();
    let reply = until(&path, "two agents up to date", |f| {
        f.nodes == 3 && f.reporting == 2 && f.up_to_date == 2
    })
    .await;
    assert_eq!((reply.behind, reply.failing, reply.revision), (0, 0, head));
    let silent = reply
        .listed
        .iter()
        .find(|n| n.node == "node-3")
        .expect("node-3");
    assert!(!silent.reporting && silent.streams == 1, "{silent:?}");
    // Whole views are no programming latency.
    assert_eq!(reply.latency_counts.iter().sum::<u64>(), 0);
    // Listed by default: nobody (nobody behind, failing or away).
    assert!(fleet(&path, false).await.listed.is_empty());

    // A change: both apply it; its latency is measured on both.
    flip(&mut store, &cluster, 1);
    let reply = until(&path, "the change applied by both", |f| {
        f.last_change_revision == head + 1 && f.last_change_applied == 2 && f.up_to_date == 2
    })
    .await;
    assert_eq!(one.applied.load(Ordering::Relaxed), head + 1);
    assert!(reply.latency_counts.iter().sum::<u64>() >= 2);
    assert!(reply.last_change_p99_seconds >= reply.last_change_p50_seconds);

    // node-2's sink fails: it is behind, with its error, still at the
    // revision it applied; node-1 is not.
    two.fail.store(true, Ordering::Relaxed);
    flip(&mut store, &cluster, 2);
    let reply = until(&path, "node-2 failing", |f| f.failing == 1 && f.behind == 1).await;
    let listed = fleet(&path, false).await.listed;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].node, "node-2");
    assert_eq!(listed[0].applied_revision, head + 1);
    assert!(
        listed[0].error.contains("the kernel refused the batch"),
        "{listed:?}"
    );
    assert!(listed[0].revisions_behind >= 1);
    assert_eq!(reply.up_to_date, 1);
    // It recovers (its agent asks for a whole view again): up to date,
    // the error gone.
    two.fail.store(false, Ordering::Relaxed);
    until(&path, "node-2 recovered", |f| {
        f.failing == 0 && f.up_to_date == 2
    })
    .await;

    // The agents' reports came on one stream per connection, not one call
    // each: two connections each (node-2 started over after its sink
    // failed), and on a loaded machine an agent that timed out waiting may
    // have connected once more (6 streams were seen with the whole
    // workspace's tests running on two cores): no storm.
    let stats = server.stats();
    assert_eq!(stats.report_calls, 0, "{stats:?}");
    assert!((2..=8).contains(&stats.report_streams), "{stats:?}");
    assert!(stats.streamed_reports >= 5, "{stats:?}");

    // A report of another server instance changes nothing.
    let mut client = connect_unix(&path).await.expect("connect");
    client
        .report(NodeReport {
            node: "node-1".into(),
            instance: server.instance() + 1,
            revision: 1,
            error: "stale".into(),
            held_ms: 0,
        })
        .await
        .expect("report");
    let reply = fleet(&path, true).await;
    let n1 = reply
        .listed
        .iter()
        .find(|n| n.node == "node-1")
        .expect("node-1");
    assert_eq!((n1.applied_revision, n1.error.as_str()), (head + 2, ""));

    // A bad query is an error naming the field.
    let bad = client
        .fleet(FleetRequest {
            min_seconds_behind: -1.0,
            all: false,
        })
        .await
        .expect_err("refused");
    assert!(bad.message().contains("min_seconds_behind"), "{bad:?}");

    // A restarted server: a new instance whose fleet is filled by the
    // agents' resumed streams, not by the old revisions.
    serving.abort();
    let _ = serving.await;
    server.close_streams();
    let restarted = Server::new(store.reader());
    let serving = tokio::spawn(serve(bind_unix(&path).expect("bind"), restarted.clone()));
    let reply = until(&path, "the agents reporting to the new instance", |f| {
        f.reporting == 2 && f.up_to_date == 2
    })
    .await;
    assert_eq!(reply.instance, restarted.instance());
    assert_eq!(reply.behind, 0);
    // Each agent opened its report stream again on its new connection.
    let stats = restarted.stats();
    assert_eq!(stats.report_calls, 0, "{stats:?}");
    assert_eq!(stats.report_streams, 2, "{stats:?}");
    serving.abort();
    let _ = std::fs::remove_file(&path);
}
