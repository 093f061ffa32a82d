//! Moving to another server replica: what the resume costs, against a full
//! view, in one run.
//!
//! Two stores hold the same cluster (`--services`, 10 endpoints each, 100
//! nodes over 3 zones); the replica's has `--changed` Services (1 % by
//! default) with an endpoint's readiness flipped, at other revision
//! numbers. An agent of node-1 holds the first store's view and moves to
//! the replica, over a unix socket, as `run_agent` does: it asks with its
//! revision and digest, is asked for its summary, asks again with it, and
//! applies what comes (decoded into its view) up to the sync. Printed: the
//! time and the bytes of that resume (the summary sent, the answer
//! received), of a resume onto a replica in the same state (digests
//! equal), and of a full view; medians of `--runs` (5).
//!
//! `cargo bench -p kpng-api --bench resume [-- --services N --changed N --runs N]`

use std::time::{Duration, Instant};

use kpng_api::codec::compact::Decoder;
use kpng_api::{Server, bind_unix, connect_unix, serve};
use kpng_model::Kind;
use kpng_model::v1::{WatchRequest, watch_event::Event};
use kpng_model::view::{NodeView, ViewDigest, ViewOp, ViewSummary};
use kpng_store::Store;
use kpng_testkit::{Cluster, ClusterShape};
use prost::Message as _;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn store(cluster: &Cluster, flips: &[usize]) -> Store {
    let mut store = Store::new();
    cluster.load_into(&mut store);
    store.mark_listed(Kind::Service);
    store.mark_listed(Kind::Endpoint);
    for &i in flips {
        let (name, ep) = cluster.endpoints[i].clone();
        let ready = !store
            .snapshot()
            .endpoints(&name)
            .iter()
            .find(|e| e.address() == ep.address())
            .is_some_and(kpng_model::EndpointInfo::ready);
        let mut txn = store.begin();
        txn.set_endpoint(name, ep.with_conditions(ready, ready, false));
        txn.commit();
    }
    store
}

/// One round of a watch: the time to its sync, the bytes received, the
/// view it leads to (from `view`), whether the server asked for a summary.
struct Round {
    time: Duration,
    bytes: usize,
    view: NodeView,
    summary_wanted: bool,
}

async fn round(
    client: &mut kpng_model::v1::enls_client::EnlsClient<tonic::transport::Channel>,
    request: WatchRequest,
    mut view: NodeView,
) -> Round {
    let start = Instant::now();
    let mut stream = client.watch(request).await.expect("watch").into_inner();
    let (mut bytes, mut summary_wanted) = (0, false);
    let mut decoder = Decoder::new();
    while let Some(message) = stream.message().await.expect("message") {
        bytes += message.encoded_len();
        match message.event {
            Some(Event::Reset(_)) => view = NodeView::default(),
            Some(Event::SummaryWanted(_)) => summary_wanted = true,
            Some(Event::Dropped(dropped)) => {
                for name in ViewSummary::names(&view, &dropped.services) {
                    view.apply(&ViewOp::DeleteService(name)).expect("fits");
                }
            }
            Some(Event::Changes(changes)) => decoder
                .batch::<kpng_model::Error>(changes, |op| view.apply(&op))
                .expect("decodes and fits"),
            Some(Event::Sync(_)) => break,
            _ => {}
        }
    }
    Round {
        time: start.elapsed(),
        bytes,
        view,
        summary_wanted,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let services = arg("--services", 10_000);
    let changed = arg("--changed", services / 100);
    let runs = arg("--runs", 5).max(1);
    let cluster = Cluster::synthetic(ClusterShape {
        services,
        endpoints: services * 10,
        nodes: 100,
        zones: 3,
    });
    // Endpoint i belongs to Service i % services: the first `changed`
    // endpoints change as many Services.
    let flips: Vec<usize> = (0..changed).collect();
    let (first, replica, same) = (
        store(&cluster, &[]),
        store(&cluster, &flips),
        store(&cluster, &[0, 0]),
    );
    let node = "node-1";
    let dir = std::env::temp_dir();
    let path = |n: &str| dir.join(format!("kpng-bench-resume-{n}-{}.sock", std::process::id()));
    let (pa, pb, pc) = (path("a"), path("b"), path("c"));
    for (p, s) in [(&pa, &first), (&pb, &replica), (&pc, &same)] {
        let listener = bind_unix(p).expect("bind");
        tokio::spawn(serve(listener, Server::new(s.reader())));
    }
    let base = |since: &WatchRequest| WatchRequest {
        node: node.into(),
        endpoint_columns: true,
        ..since.clone()
    };
    // The agent's view, its revision and digest, from the first replica.
    let mut a = connect_unix(&pa).await.expect("connect");
    let held = round(&mut a, base(&WatchRequest::default()), NodeView::default()).await;
    let digest = ViewDigest::of(&held.view).to_bytes().to_vec();
    let since = WatchRequest {
        since_revision: first.revision(),
        since_instance: 1,
        since_digest: digest,
        summarizes: true,
        unavailable_unless_synced: true,
        ..Default::default()
    };
    let mut b = connect_unix(&pb).await.expect("connect");
    let mut c = connect_unix(&pc).await.expect("connect");
    let want = kpng_view::node_view(&replica.snapshot(), node);
    let (mut full, mut resume, mut same_view, mut summarize) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut full_bytes, mut resume_bytes, mut summary_bytes, mut same_bytes) = (0, 0, 0, 0);
    for _ in 0..runs {
        // A full view from the replica.
        let r = round(&mut b, base(&WatchRequest::default()), NodeView::default()).await;
        assert!(r.view.services == want.services);
        full.push(r.time.as_secs_f64());
        full_bytes = r.bytes;
        // The resume: asked for the summary, then the difference.
        let start = Instant::now();
        let asked = round(&mut b, base(&since), held.view.clone()).await;
        assert!(asked.summary_wanted);
        let made = Instant::now();
        let summary = ViewSummary::of(&held.view).to_wire();
        summarize.push(made.elapsed().as_secs_f64());
        summary_bytes = summary.encoded_len();
        let request = WatchRequest {
            since_summary: Some(summary),
            ..base(&since)
        };
        let r = round(&mut b, request, held.view.clone()).await;
        assert!(r.view.services == want.services, "the resume made the view");
        resume.push(start.elapsed().as_secs_f64());
        resume_bytes = asked.bytes + r.bytes;
        // A replica in the same state: its digest.
        let r = round(&mut c, base(&since), held.view.clone()).await;
        assert!(!r.summary_wanted);
        same_view.push(r.time.as_secs_f64());
        same_bytes = r.bytes;
    }
    let ms = |v: Vec<f64>| median(v) * 1e3;
    println!(
        "node-1 of {services} Services x 10 endpoints, {changed} Services changed on the replica ({} in the node's view)",
        want.services.len()
    );
    println!(
        "full view:                 {:8.1} ms  {:>10} bytes received",
        ms(full),
        full_bytes
    );
    println!(
        "resume by summary:         {:8.1} ms  {:>10} bytes received, {} bytes of summary sent ({:.1} ms to make it)",
        ms(resume),
        resume_bytes,
        summary_bytes,
        ms(summarize)
    );
    println!(
        "resume, same state:        {:8.1} ms  {:>10} bytes received",
        ms(same_view),
        same_bytes
    );
    for p in [pa, pb, pc] {
        let _ = std::fs::remove_file(p);
    }
}
