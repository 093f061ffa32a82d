//! The watch service end to end over a real unix socket: full state,
//! resume, a restarted server, a killed agent, a slow watcher.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kpng_api::{Address, AgentConfig, Server, bind_unix, connect_unix, run_agent, serve};
use kpng_model::v1::{WatchRequest, watch_event::Event};
use kpng_model::view::NodeView;
use kpng_sink::{Round, Sink, SinkError};
use kpng_store::Store;
use kpng_testkit::{Cluster, ClusterShape};
use kpng_view::node_view;

mod common;
use common::pki;

fn cluster() -> Cluster {
    Cluster::synthetic(ClusterShape {
        services: 30,
        endpoints: 120,
        nodes: 4,
        zones: 2,
    })
}

fn store(cluster: &Cluster) -> Store {
    common::listed_store(cluster)
}

fn socket(test: &str) -> PathBuf {
    common::socket_path("api", test)
}

/// What the agent's sink saw: the views its rounds programmed, one by
/// one, and how many full rounds.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<(Vec<NodeView>, usize)>>);

impl Sink for Seen {
    fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
        let mut seen = self.0.lock().expect("lock");
        // Each round applied to what the previous left: the Services it
        // lists, set or removed.
        let mut programmed = match (round.is_full(), seen.0.last()) {
            (false, Some(last)) => last.clone(),
            _ => NodeView::default(),
        };
        for change in round.services() {
            assert_eq!(change.before, programmed.services.get(change.name));
            match change.after {
                Some(after) => programmed
                    .services
                    .insert(change.name.clone(), after.clone()),
                None => programmed.services.remove(change.name),
            };
        }
        programmed.revision = round.revision();
        assert!(programmed.services == round.view().services);
        seen.0.push(programmed);
        seen.1 += usize::from(round.is_full());
        Ok(())
    }
}

fn agent(path: PathBuf, node: &'static str) -> (Seen, tokio::task::JoinHandle<()>) {
    let seen = Seen::default();
    let mut sink = seen.clone();
    let mut config = AgentConfig::default();
    config.retry = Duration::from_millis(20);
    config.max_retry = Duration::from_millis(100);
    let task = tokio::spawn(async move {
        let _ = run_agent(&Address::Unix(path), node, &mut sink, &config).await;
    });
    (seen, task)
}

/// Waits until the agent's last view is the store's node view.
async fn converged(seen: &Seen, store: &Store, node: &str) -> usize {
    let want = node_view(&store.snapshot(), node);
    // Up to 10 s: the agent's reconnects back off (200 ms, doubling), and a
    // loaded machine is slow.
    for _ in 0..1000 {
        {
            let guard = seen.0.lock().expect("lock");
            if guard.0.last().is_some_and(|last| {
                last.services == want.services && last.revision == want.revision
            }) {
                return guard.1;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the agent did not converge to revision {}", want.revision);
}

fn flip(store: &mut Store, cluster: &Cluster, i: usize) {
    let (name, ep) = cluster.endpoints[i % cluster.endpoints.len()].clone();
    let ready = !ep.ready();
    let mut txn = store.begin();
    txn.set_endpoint(name, ep.with_conditions(ready, ready, false));
    txn.commit();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_resumes_and_a_restarted_server_sends_the_difference() {
    let cluster = cluster();
    let mut store = store(&cluster);
    let node = "node-1";
    let path = socket("resume");
    let server = Server::new(store.reader());
    let serving = tokio::spawn(serve(bind_unix(&path).expect("bind"), server.clone()));
    let (seen, agent_task) = agent(path.clone(), node);
    assert_eq!(converged(&seen, &store, node).await, 1, "one full round");

    // A change streams as a delta: no new full round.
    flip(&mut store, &cluster, 3);
    assert_eq!(converged(&seen, &store, node).await, 1);

    // The connection drops (same server); changes happen meanwhile; the
    // agent resumes from the revision it holds: still no full round.
    // The listener goes first, then the streams: closed the other way
    // round, an agent could reconnect to the old listener in between and
    // keep a stream of the old server through the change that follows.
    serving.abort();
    let _ = serving.await;
    server.close_streams();
    flip(&mut store, &cluster, 5);
    flip(&mut store, &cluster, 7);
    let serving = tokio::spawn(serve(bind_unix(&path).expect("bind"), server.clone()));
    assert_eq!(
        converged(&seen, &store, node).await,
        1,
        "resumed, not reset"
    );

    // A restarted server (another instance) knows neither the agent's
    // revisions nor its digest (the view changed meanwhile): it asks for
    // the summary of the agent's view and sends only what differs, no
    // reset.
    // The listener goes first, then the streams: closed the other way
    // round, an agent could reconnect to the old listener in between and
    // keep a stream of the old server through the change that follows.
    serving.abort();
    let _ = serving.await;
    server.close_streams();
    flip(&mut store, &cluster, 9);
    let restarted = Server::new(store.reader());
    let serving = tokio::spawn(serve(bind_unix(&path).expect("bind"), restarted.clone()));
    assert_eq!(
        converged(&seen, &store, node).await,
        1,
        "resumed by summary, not reset"
    );
    let stats = restarted.stats();
    assert_eq!(
        (
            stats.full_views,
            stats.summaries_wanted,
            stats.resumed_by_summary
        ),
        (0, 1, 1),
        "{stats:?}"
    );

    // A killed agent: a new one starts from a full view and converges.
    agent_task.abort();
    flip(&mut store, &cluster, 11);
    let (fresh, _task) = agent(path.clone(), node);
    assert_eq!(converged(&fresh, &store, node).await, 1);
    serving.abort();
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_of_distinct_nodes_get_their_views_from_shared_encodings() {
    // 30 Services × 4 endpoints on 4 nodes in 2 zones; agents of those
    // nodes (their own Services differ from the base) and of nodes named
    // nowhere (all base).
    let cluster = cluster();
    let mut store = store(&cluster);
    let path = socket("shared");
    let server = Server::new(store.reader());
    let serving = tokio::spawn(serve(bind_unix(&path).expect("bind"), server.clone()));
    let nodes = [
        "node-0", "node-1", "node-2", "node-3", "other-a", "other-b", "other-c", "other-d",
    ];
    let mut agents = Vec::new();
    for node in nodes {
        agents.push((node, agent(path.clone(), node)));
    }
    for (node, (seen, _)) in &agents {
        assert_eq!(converged(seen, &store, node).await, 1, "{node}");
    }
    // Each shared Service view was encoded once, not once per node: at
    // most the 30 of the zone-less base, 30 per zone, and each node's own.
    let stats = server.stats();
    assert_eq!(stats.full_views, 8);
    let own: usize = nodes
        .iter()
        .map(|n| {
            kpng_view::SharedViews::new()
                .project(n, &store.snapshot())
                .own_services()
        })
        .sum();
    assert!(
        stats.services_encoded as usize <= 3 * 30 + own,
        "{} Service views encoded for 8 nodes ({own} own)",
        stats.services_encoded
    );
    // Then changes stream as before, to every agent.
    flip(&mut store, &cluster, 3);
    for (node, (seen, _)) in &agents {
        assert_eq!(converged(seen, &store, node).await, 1, "{node}");
    }
    serving.abort();
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_asking_for_zstd_gets_its_view_compressed() {
    // The full view's shared pieces and the changes after it go through
    // the negotiated compression like any message.
    let cluster = cluster();
    let mut store = store(&cluster);
    let path = socket("zstd");
    let serving = tokio::spawn(serve(
        bind_unix(&path).expect("bind"),
        Server::new(store.reader()),
    ));
    let seen = Seen::default();
    let mut sink = seen.clone();
    let mut config = AgentConfig::default();
    config.compress = true;
    config.retry = Duration::from_millis(20);
    let address = Address::Unix(path.clone());
    let _agent = tokio::spawn(async move {
        let _ = run_agent(&address, "node-2", &mut sink, &config).await;
    });
    assert_eq!(converged(&seen, &store, "node-2").await, 1);
    flip(&mut store, &cluster, 2);
    assert_eq!(converged(&seen, &store, "node-2").await, 1);
    serving.abort();
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_watcher_gets_merged_revisions_not_a_queue() {
    let cluster = cluster();
    let mut store = store(&cluster);
    let path = socket("slow");
    let serving = tokio::spawn(serve(
        bind_unix(&path).expect("bind"),
        Server::new(store.reader()),
    ));
    let mut client = connect_unix(&path).await.expect("connect");
    let mut stream = client
        .watch(WatchRequest {
            node: "node-1".into(),
            ..Default::default()
        })
        .await
        .expect("watch")
        .into_inner();
    // The full view, up to its sync.
    loop {
        let message = stream.message().await.expect("message").expect("open");
        if matches!(message.event, Some(Event::Sync(_))) {
            break;
        }
    }
    // 2,000 revisions while the watcher reads nothing.
    for i in 0..2000 {
        flip(&mut store, &cluster, i);
    }
    let last = store.revision();
    let mut syncs = 0;
    loop {
        let message = stream.message().await.expect("message").expect("open");
        if let Some(Event::Sync(revision)) = message.event {
            syncs += 1;
            if revision == last {
                break;
            }
        }
    }
    // The server held a few messages for it (its 4-message queue, and
    // what fits in HTTP/2's flow-control window), never one per revision.
    assert!(syncs <= 50, "{syncs} syncs for 2,000 revisions");
    serving.abort();
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_takes_mutual_tls_and_refuses_a_client_without_a_certificate() {
    use kpng_api::{Tls, connect, serve_tcp};
    let cluster = cluster();
    let store = store(&cluster);
    let pki = pki();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server_tls = Tls {
        cert: pki.server.0.clone(),
        key: pki.server.1.clone(),
        ca: pki.ca.clone(),
    };
    let serving =
        tokio::spawn(
            async move { serve_tcp(listener, Server::new(store.reader()), &server_tls).await },
        );
    let address = |client: &(String, String)| Address::Tcp {
        addr: addr.to_string(),
        domain: "localhost".into(),
        tls: Tls {
            cert: client.0.clone(),
            key: client.1.clone(),
            ca: pki.ca.clone(),
        },
    };
    let request = || WatchRequest {
        node: "node-1".into(),
        ..Default::default()
    };

    // With a certificate from the CA: the view streams.
    let mut client = connect(&address(&pki.client)).await.expect("connect");
    let mut stream = client.watch(request()).await.expect("watch").into_inner();
    let first = stream.message().await.expect("message").expect("open");
    assert!(matches!(first.event, Some(Event::Instance(_))), "{first:?}");

    // With a certificate from another CA: refused.
    let refused = match connect(&address(&pki.stranger)).await {
        Err(e) => e.to_string(),
        Ok(mut client) => match client.watch(request()).await {
            Err(e) => e.to_string(),
            Ok(stream) => match stream.into_inner().message().await {
                Err(e) => e.to_string(),
                Ok(m) => panic!("a stranger was served: {m:?}"),
            },
        },
    };
    assert!(!refused.is_empty());

    // With no certificate at all (plain TLS client): refused.
    use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};
    let anonymous = Endpoint::from_shared(format!("https://{addr}"))
        .expect("uri")
        .tls_config(
            ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(&pki.ca))
                .domain_name("localhost"),
        )
        .expect("tls");
    let refused = match anonymous.connect().await {
        Err(_) => true,
        Ok(channel) => kpng_model::v1::enls_client::EnlsClient::new(channel)
            .watch(request())
            .await
            .is_err(),
    };
    assert!(refused, "a client without a certificate was served");
    serving.abort();
}

/// A chained server: a store mirrored from another server's global watch,
/// served in turn; an agent of the second server follows the first
/// server's store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chained_server_mirrors_the_whole_enls() {
    use kpng_api::run_mirror;
    let cluster = cluster();
    let mut upstream = store(&cluster);
    let (up_path, down_path) = (socket("chain-up"), socket("chain-down"));
    let _up = tokio::spawn(serve(
        bind_unix(&up_path).expect("bind"),
        Server::new(upstream.reader()),
    ));
    let mut mirror = Store::new();
    let down_server = Server::new(mirror.reader());
    let _down = tokio::spawn(serve(bind_unix(&down_path).expect("bind"), down_server));
    let mut config = AgentConfig::default();
    config.retry = Duration::from_millis(20);
    let up_address = Address::Unix(up_path.clone());
    let mirroring = tokio::spawn(async move {
        let _ = run_mirror(&up_address, &mut mirror, &config).await;
    });
    let (seen, _agent) = agent(down_path.clone(), "node-2");

    // The agent of the chained server sees what the upstream store holds.
    let converged_to_upstream = |seen: Seen, upstream: &Store| {
        let want = node_view(&upstream.snapshot(), "node-2");
        async move {
            for _ in 0..200 {
                let same = seen
                    .0
                    .lock()
                    .expect("lock")
                    .0
                    .last()
                    .is_some_and(|last| last.services == want.services);
                if same {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("the chained agent never matched upstream");
        }
    };
    converged_to_upstream(seen.clone(), &upstream).await;
    flip(&mut upstream, &cluster, 2);
    flip(&mut upstream, &cluster, 4);
    converged_to_upstream(seen, &upstream).await;
    mirroring.abort();
    let _ = std::fs::remove_file(&up_path);
    let _ = std::fs::remove_file(&down_path);
}

/// Reads a stream up to its first sync: the events, and their bytes.
async fn first_round(
    stream: &mut tonic::Streaming<kpng_model::v1::WatchEvent>,
) -> (Vec<kpng_model::v1::WatchEvent>, usize) {
    use prost::Message as _;
    let (mut events, mut bytes) = (Vec::new(), 0);
    loop {
        let message = stream.message().await.expect("message").expect("open");
        bytes += message.encoded_len();
        let sync = matches!(message.event, Some(Event::Sync(_)));
        events.push(message);
        if sync {
            return (events, bytes);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_with_the_same_view_sends_no_reset() {
    let cluster = cluster();
    let node = "node-2";
    let first = store(&cluster);
    let path = socket("digest");
    let server = Server::new(first.reader());
    let serving = tokio::spawn(serve(bind_unix(&path).expect("bind"), server.clone()));
    let (seen, _agent) = agent(path.clone(), node);
    assert_eq!(converged(&seen, &first, node).await, 1, "one full round");

    // The server restarts onto another store holding the same content at
    // other revision numbers (a change made and undone).
    // The listener goes first, then the streams: closed the other way
    // round, an agent could reconnect to the old listener in between and
    // keep a stream of the old server through the change that follows.
    serving.abort();
    let _ = serving.await;
    server.close_streams();
    let mut second = store(&cluster);
    flip(&mut second, &cluster, 1);
    let (name, endpoint) = cluster.endpoints[1].clone();
    let mut txn = second.begin();
    txn.set_endpoint(name, endpoint);
    txn.commit();
    assert_ne!(second.revision(), first.revision());
    let restarted = Server::new(second.reader());
    let serving = tokio::spawn(serve(bind_unix(&path).expect("bind"), restarted.clone()));
    assert_eq!(
        converged(&seen, &second, node).await,
        1,
        "resumed on the digest, not reset"
    );
    let stats = restarted.stats();
    assert_eq!(
        (stats.full_views, stats.resumed_by_digest),
        (0, 1),
        "{stats:?}"
    );

    // What such a resume costs on the wire: instance, digest, sync.
    let mut client = connect_unix(&path).await.expect("connect");
    let mut stream = client
        .watch(WatchRequest {
            node: node.into(),
            ..Default::default()
        })
        .await
        .expect("watch")
        .into_inner();
    let (events, full_bytes) = first_round(&mut stream).await;
    let digest = events
        .iter()
        .find_map(|e| match &e.event {
            Some(Event::Digest(d)) => Some(d.clone()),
            _ => None,
        })
        .expect("a digest before the sync");
    drop(stream);
    let mut stream = client
        .watch(WatchRequest {
            node: node.into(),
            since_digest: digest.clone(),
            ..Default::default()
        })
        .await
        .expect("watch")
        .into_inner();
    let (events, bytes) = first_round(&mut stream).await;
    assert_eq!(events.len(), 3, "{events:?}");
    assert!(
        bytes < 100,
        "{bytes} bytes to resume (the full view: {full_bytes})"
    );

    // A changed view does not match the digest: a reset and the view.
    flip(&mut second, &cluster, 2);
    let mut stream = client
        .watch(WatchRequest {
            node: node.into(),
            since_digest: digest,
            ..Default::default()
        })
        .await
        .expect("watch")
        .into_inner();
    let (events, _) = first_round(&mut stream).await;
    assert!(
        events
            .iter()
            .any(|e| matches!(e.event, Some(Event::Reset(_)))),
        "a stale digest resets"
    );
    serving.abort();
    let _ = std::fs::remove_file(&path);
}

/// A watcher that asks for endpoints in columns gets them so, a full
/// view and a change; one that does not (an older agent, another
/// client) gets a `CompactEndpoint` each; both decode to the node's
/// view.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_come_in_columns_only_to_a_watcher_that_asks() {
    use kpng_api::codec::compact::Decoder;
    use kpng_model::v1::view_change::Change;
    let cluster = cluster();
    let mut store = store(&cluster);
    let path = socket("columns");
    let serving = tokio::spawn(serve(
        bind_unix(&path).expect("bind"),
        Server::new(store.reader()),
    ));
    let mut client = connect_unix(&path).await.expect("connect");
    for (round, columns) in [true, false, true].into_iter().enumerate() {
        let mut stream = client
            .watch(WatchRequest {
                node: "node-1".into(),
                endpoint_columns: columns,
                ..Default::default()
            })
            .await
            .expect("watch")
            .into_inner();
        let (mut decoder, mut view) = (Decoder::new(), NodeView::default());
        let (mut in_columns, mut as_messages, mut syncs) = (0, 0, 0);
        while syncs < 2 {
            let message = tokio::time::timeout(Duration::from_secs(20), stream.message())
                .await
                .expect("a message within 20 s")
                .expect("message")
                .expect("open");
            match message.event {
                Some(Event::Changes(changes)) => {
                    for change in &changes.changes {
                        if let Some(Change::SetEndpoints(set)) = &change.change {
                            in_columns += set.columns.as_ref().map_or(0, |c| c.flags.len());
                            as_messages += set.endpoints.len();
                        }
                    }
                    decoder
                        .batch::<kpng_model::Error>(changes, |op| view.apply(&op))
                        .expect("decodes and fits");
                }
                Some(Event::Sync(revision)) => {
                    decoder.end_round();
                    view.revision = revision;
                    let want = node_view(&store.snapshot(), "node-1");
                    assert!(view.services == want.services, "columns {columns}");
                    syncs += 1;
                    if syncs == 1 {
                        // One endpoint changes (another each round): the
                        // change comes in the same form.
                        flip(&mut store, &cluster, round);
                    }
                }
                _ => {}
            }
        }
        if columns {
            assert!(
                in_columns > 0 && as_messages == 0,
                "{in_columns} / {as_messages}"
            );
        } else {
            assert!(
                as_messages > 0 && in_columns == 0,
                "{in_columns} / {as_messages}"
            );
        }
    }
    serving.abort();
    let _ = std::fs::remove_file(&path);
}
