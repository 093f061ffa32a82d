//! Replicas of the server: an agent given several addresses moves to
//! another when its server dies or is not synced, and resumes there from
//! the view it holds, receiving only what differs.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use kpng_api::codec::compact::Decoder;
use kpng_api::{Address, AgentConfig, Limits, Server, bind_unix, connect_unix, run_agent, serve};
use kpng_model::v1::{Node, Service, WatchEvent, WatchRequest, watch_event::Event};
use kpng_model::view::{NodeView, ViewDigest, ViewOp, ViewSummary};
use kpng_model::{EndpointInfo, Kind, ServiceInfo, ServiceName};
use kpng_sink::{Round, Sink, SinkError};
use kpng_store::Store;
use kpng_testkit::{Cluster, ClusterShape};
use kpng_view::node_view;
use proptest::prelude::*;
use tonic::Request;

mod common;

fn cluster() -> Cluster {
    Cluster::synthetic(ClusterShape {
        services: 200,
        endpoints: 2000,
        nodes: 4,
        zones: 2,
    })
}

fn store(cluster: &Cluster) -> Store {
    common::listed_store(cluster)
}

fn socket(test: &str) -> PathBuf {
    common::socket_path("replicas", test)
}

/// Endpoint `i`'s readiness flipped.
fn flip(store: &mut Store, cluster: &Cluster, i: usize) {
    let (name, ep) = cluster.endpoints[i % cluster.endpoints.len()].clone();
    let ready = !store
        .snapshot()
        .endpoints(&name)
        .iter()
        .find(|e| e.address() == ep.address())
        .is_some_and(EndpointInfo::ready);
    let mut txn = store.begin();
    txn.set_endpoint(name, ep.with_conditions(ready, ready, false));
    txn.commit();
}

/// The second replica's store: the first's content, then `changed`
/// endpoints flipped, reached by another path (a change made and undone
/// first, the flips in one transaction each): its revisions are not the
/// first's.
fn replica(cluster: &Cluster, changed: &[usize]) -> Store {
    let mut store = store(cluster);
    flip(&mut store, cluster, 7);
    flip(&mut store, cluster, 7);
    for &i in changed {
        flip(&mut store, cluster, i);
    }
    store
}

/// What the agent's sink saw: per round, whether it was full and the
/// Services it listed; and the last view.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<SeenInner>>);

#[derive(Default)]
struct SeenInner {
    rounds: Vec<(bool, BTreeSet<ServiceName>)>,
    view: Option<NodeView>,
}

impl Sink for Seen {
    fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
        let mut seen = self.0.lock().expect("lock");
        let listed = round.services().map(|c| c.name.clone()).collect();
        seen.rounds.push((round.is_full(), listed));
        seen.view = Some(round.view().clone());
        Ok(())
    }
}

impl Seen {
    fn full_rounds(&self) -> usize {
        let seen = self.0.lock().expect("lock");
        seen.rounds.iter().filter(|(full, _)| *full).count()
    }
}

fn agent(addresses: &[PathBuf], node: &'static str) -> (Seen, tokio::task::JoinHandle<()>) {
    let seen = Seen::default();
    let mut sink = seen.clone();
    let mut config = AgentConfig::default();
    config.retry = Duration::from_millis(20);
    config.max_retry = Duration::from_millis(100);
    config.replicas = addresses[1..]
        .iter()
        .map(|p| Address::Unix(p.clone()))
        .collect();
    let first = Address::Unix(addresses[0].clone());
    let task = tokio::spawn(async move {
        let _ = run_agent(&first, node, &mut sink, &config).await;
    });
    (seen, task)
}

/// Waits until the agent's view is `store`'s view of `node` (compared
/// whole: node, Service CIDRs, Services) at its revision.
async fn converged(seen: &Seen, store: &Store, node: &str) {
    let want = node_view(&store.snapshot(), node);
    for _ in 0..1000 {
        {
            let guard = seen.0.lock().expect("lock");
            if guard.view.as_ref().is_some_and(|v| *v == want) {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the agent did not converge to revision {}", want.revision);
}

/// The Services whose views differ between two views.
fn differing(a: &NodeView, b: &NodeView) -> BTreeSet<ServiceName> {
    let names: BTreeSet<&ServiceName> = a.services.keys().chain(b.services.keys()).collect();
    names
        .into_iter()
        .filter(|n| a.services.get(*n) != b.services.get(*n))
        .cloned()
        .collect()
}

/// Ends a server: its listener first, then its streams (the agents'
/// connections go as a killed server's do).
async fn kill(serving: tokio::task::JoinHandle<Result<(), kpng_api::Error>>, server: &Server) {
    serving.abort();
    let _ = serving.await;
    server.close_streams();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_moves_to_the_other_replica_and_receives_only_the_difference() {
    let cluster = cluster();
    let node = "node-1";
    let first = store(&cluster);
    // Four endpoints (of 2,000) differ on the second replica.
    let mut second = replica(&cluster, &[3, 501, 1002, 1503]);
    let (pa, pb) = (socket("move-a"), socket("move-b"));
    let a = Server::new(first.reader());
    let b = Server::new(second.reader());
    let serving_a = tokio::spawn(serve(bind_unix(&pa).expect("bind"), a.clone()));
    let serving_b = tokio::spawn(serve(bind_unix(&pb).expect("bind"), b.clone()));
    let (seen, _agent) = agent(&[pa.clone(), pb.clone()], node);
    converged(&seen, &first, node).await;
    assert_eq!(seen.full_rounds(), 1);
    assert_eq!(b.stats().open_streams, 0, "the agent stays on the first");

    // The first replica dies: the agent moves to the second, which sends
    // the Services that differ, and one incremental round lists exactly
    // them.
    kill(serving_a, &a).await;
    converged(&seen, &second, node).await;
    let want = differing(
        &node_view(&first.snapshot(), node),
        &node_view(&second.snapshot(), node),
    );
    assert!(!want.is_empty());
    {
        let guard = seen.0.lock().expect("lock");
        let (full, listed) = guard.rounds.last().expect("a round");
        assert!(!full, "no full resync");
        assert_eq!(*listed, want);
    }
    let stats = b.stats();
    assert_eq!(
        (stats.full_views, stats.resumed_by_summary),
        (0, 1),
        "{stats:?}"
    );

    // A change made on the second after the move reaches the agent.
    flip(&mut second, &cluster, 11);
    converged(&seen, &second, node).await;
    assert_eq!(seen.full_rounds(), 1);
    serving_b.abort();
    let _ = std::fs::remove_file(&pa);
    let _ = std::fs::remove_file(&pb);
}

/// Reads a stream to its first sync, or to its end: the events, and
/// their bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_refuses_the_summary_gets_a_full_view_asked_instead() {
    let cluster = cluster();
    let node = "node-1";
    let first = store(&cluster);
    let second = replica(&cluster, &[3, 501]);
    let (pa, pb) = (socket("refused-a"), socket("refused-b"));
    let a = Server::new(first.reader());
    // The summary of 200 Services is 3.2 KB: more than this replica takes.
    let mut limits = Limits::default();
    limits.max_watch_request_size = 1024;
    let b = Server::new(second.reader()).with_limits(limits);
    let serving_a = tokio::spawn(serve(bind_unix(&pa).expect("bind"), a.clone()));
    let serving_b = tokio::spawn(serve(bind_unix(&pb).expect("bind"), b.clone()));
    let (seen, _agent) = agent(&[pa.clone(), pb.clone()], node);
    converged(&seen, &first, node).await;

    // The first dies; the second refuses the summary; the agent asks for
    // a full view instead and converges, rather than sending the summary
    // again and again.
    kill(serving_a, &a).await;
    converged(&seen, &second, node).await;
    assert_eq!(seen.full_rounds(), 2);
    let stats = b.stats();
    assert_eq!(
        (stats.full_views, stats.resumed_by_summary),
        (1, 0),
        "{stats:?}"
    );
    serving_b.abort();
    let _ = std::fs::remove_file(&pa);
    let _ = std::fs::remove_file(&pb);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_where_most_services_differ_sends_the_whole_view() {
    let cluster = cluster();
    let node = "node-1";
    let first = store(&cluster);
    // Every endpoint flipped: every Service differs.
    let all: Vec<usize> = (0..cluster.endpoints.len()).collect();
    let second = replica(&cluster, &all);
    let (pa, pb) = (socket("most-a"), socket("most-b"));
    let a = Server::new(first.reader());
    let b = Server::new(second.reader());
    let serving_a = tokio::spawn(serve(bind_unix(&pa).expect("bind"), a.clone()));
    let serving_b = tokio::spawn(serve(bind_unix(&pb).expect("bind"), b.clone()));
    let (seen, _agent) = agent(&[pa.clone(), pb.clone()], node);
    converged(&seen, &first, node).await;
    kill(serving_a, &a).await;
    converged(&seen, &second, node).await;
    let stats = b.stats();
    assert_eq!(
        (stats.full_views, stats.resumed_by_summary),
        (1, 0),
        "{stats:?}"
    );
    assert_eq!(seen.full_rounds(), 2);
    serving_b.abort();
    let _ = std::fs::remove_file(&pa);
    let _ = std::fs::remove_file(&pb);
}

async fn first_round(stream: &mut tonic::Streaming<WatchEvent>) -> (Vec<WatchEvent>, usize) {
    use prost::Message as _;
    let (mut events, mut bytes) = (Vec::new(), 0);
    while let Some(message) = stream.message().await.expect("message") {
        bytes += message.encoded_len();
        let sync = matches!(message.event, Some(Event::Sync(_)));
        events.push(message);
        if sync {
            break;
        }
    }
    (events, bytes)
}

/// Applies a round's events to `view` (dropped Services, changes); the
/// digest sent.
fn apply(events: Vec<WatchEvent>, view: &mut NodeView) -> Vec<u8> {
    let mut decoder = Decoder::new();
    let mut digest = Vec::new();
    for event in events {
        match event.event {
            // Most Services differ: the whole view follows the reset.
            Some(Event::Reset(_)) => *view = NodeView::default(),
            Some(Event::Dropped(dropped)) => {
                for name in ViewSummary::names(view, &dropped.services) {
                    view.apply(&ViewOp::DeleteService(name)).expect("fits");
                }
            }
            Some(Event::Changes(changes)) => decoder
                .batch::<kpng_model::Error>(changes, |op| view.apply(&op))
                .expect("decodes and fits"),
            Some(Event::Digest(d)) => digest = d,
            _ => {}
        }
    }
    digest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_by_summary_sends_only_what_differs() {
    let cluster = cluster();
    let node = "node-2";
    let first = store(&cluster);
    let second = replica(&cluster, &[3, 501, 1002]);
    assert_ne!(first.revision(), second.revision());
    let (pa, pb) = (socket("bytes-a"), socket("bytes-b"));
    let serving_a = tokio::spawn(serve(
        bind_unix(&pa).expect("bind"),
        Server::new(first.reader()),
    ));
    let b = Server::new(second.reader());
    let serving_b = tokio::spawn(serve(bind_unix(&pb).expect("bind"), b.clone()));

    // The agent's view, from the first replica: a full view.
    let request = |summary: Option<&NodeView>| WatchRequest {
        node: node.into(),
        since_revision: 5,
        since_instance: 1,
        summarizes: true,
        since_summary: summary.map(|v| ViewSummary::of(v).to_wire()),
        endpoint_columns: true,
        unavailable_unless_synced: true,
        ..Default::default()
    };
    let mut client = connect_unix(&pa).await.expect("connect");
    let mut stream = client
        .watch(WatchRequest {
            node: node.into(),
            endpoint_columns: true,
            ..Default::default()
        })
        .await
        .expect("watch")
        .into_inner();
    let (mut events, full_bytes) = first_round(&mut stream).await;
    events.retain(|e| !matches!(e.event, Some(Event::Reset(_))));
    let mut held = NodeView::default();
    apply(events, &mut held);
    assert!(held.services == node_view(&first.snapshot(), node).services);
    drop(stream);

    // The second replica knows neither revision nor digest: it asks for
    // the summary and ends the stream.
    let mut client = connect_unix(&pb).await.expect("connect");
    let mut stream = client
        .watch(request(None))
        .await
        .expect("watch")
        .into_inner();
    let (events, _) = first_round(&mut stream).await;
    assert!(
        matches!(
            events.as_slice(),
            [
                WatchEvent {
                    event: Some(Event::Instance(_))
                },
                WatchEvent {
                    event: Some(Event::SummaryWanted(true))
                }
            ]
        ),
        "{events:?}"
    );

    // With the summary: the Services that differ, nothing else.
    let mut stream = client
        .watch(request(Some(&held)))
        .await
        .expect("watch")
        .into_inner();
    let (events, bytes) = first_round(&mut stream).await;
    let want = node_view(&second.snapshot(), node);
    let differ = differing(&held, &want);
    let sets = events
        .iter()
        .filter_map(|e| match &e.event {
            Some(Event::Changes(c)) => Some(c.changes.iter()),
            _ => None,
        })
        .flatten()
        .filter(|c| {
            matches!(
                c.change,
                Some(kpng_model::v1::view_change::Change::SetService(_))
            )
        })
        .count();
    assert_eq!(
        sets,
        differ.len(),
        "one SetService per Service that differs"
    );
    let digest = apply(events, &mut held);
    assert!(held.services == want.services);
    assert_eq!(held.node, want.node);
    assert_eq!(ViewDigest::from_bytes(&digest), Some(ViewDigest::of(&held)));
    // The differing Services' endpoints, their names and the framing:
    // a small share of the full view.
    println!(
        "{} of {} Services differ: {bytes} bytes on the resume, {full_bytes} for the full view",
        differ.len(),
        want.services.len()
    );
    assert!(bytes * 10 < full_bytes, "{bytes} vs {full_bytes}");
    let stats = b.stats();
    assert_eq!((stats.full_views, stats.resumed_by_summary), (0, 1));
    serving_a.abort();
    serving_b.abort();
    let _ = std::fs::remove_file(&pa);
    let _ = std::fs::remove_file(&pb);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsynced_replica_is_skipped_and_never_serves_a_partial_view() {
    let cluster = cluster();
    let node = "node-3";
    let synced = store(&cluster);
    // A replica still listing: Services in its store, endpoints not yet
    // listed (a restart mid-list).
    let mut listing = Store::new();
    let mut txn = listing.begin();
    for service in &cluster.services {
        txn.set_service(ServiceInfo::new(service.clone()).expect("valid"));
    }
    txn.commit();
    listing.mark_listed(Kind::Service);
    let (pu, ps) = (socket("unsynced-u"), socket("unsynced-s"));
    let u = Server::new(listing.reader());
    let serving_u = tokio::spawn(serve(bind_unix(&pu).expect("bind"), u.clone()));
    let serving_s = tokio::spawn(serve(
        bind_unix(&ps).expect("bind"),
        Server::new(synced.reader()),
    ));
    // The unsynced one first: refused, the agent goes on to the next.
    let (seen, _agent) = agent(&[pu.clone(), ps.clone()], node);
    converged(&seen, &synced, node).await;
    assert!(u.stats().refused_unsynced >= 1, "{:?}", u.stats());
    {
        let guard = seen.0.lock().expect("lock");
        assert_eq!(guard.rounds.len(), 1, "one round, of the synced replica");
    }
    serving_u.abort();
    serving_s.abort();
    let _ = std::fs::remove_file(&pu);
    let _ = std::fs::remove_file(&ps);
}

/// A random state of a small cluster: per Service (of 12 names), whether
/// it exists, its ClusterIP, and its endpoints (address, node, ready);
/// node-0's zone.
#[derive(Clone, Debug)]
struct State {
    services: Vec<Option<ServiceState>>,
    zone: u8,
}

/// A Service's ClusterIP (its last byte) and endpoints (address, node,
/// ready).
type ServiceState = (u8, Vec<(u8, u8, bool)>);

fn state() -> impl Strategy<Value = State> {
    let endpoints = prop::collection::vec((0..8u8, 0..3u8, any::<bool>()), 0..5);
    let service = prop::option::weighted(0.8, (0..3u8, endpoints));
    (prop::collection::vec(service, 12), 0..2u8)
        .prop_map(|(services, zone)| State { services, zone })
}

fn build(state: &State) -> Store {
    let mut store = Store::new();
    let mut txn = store.begin();
    txn.set_node(Node {
        name: "node-0".into(),
        zone: format!("zone-{}", state.zone),
        ..Default::default()
    });
    for (i, service) in state.services.iter().enumerate() {
        let Some((version, endpoints)) = service else {
            continue;
        };
        let name = ServiceName::new("ns", format!("s{i}"));
        let cluster_ip = IpAddr::V4(Ipv4Addr::new(10, 96, i as u8, *version));
        txn.set_service(
            ServiceInfo::new(Service::new("ns", format!("s{i}")).with_cluster_ips([cluster_ip]))
                .expect("valid"),
        );
        for (e, node, ready) in endpoints {
            let ip = IpAddr::V4(Ipv4Addr::new(10, 1, i as u8, *e));
            let node = format!("node-{node}");
            let endpoint = EndpointInfo::builder(ip)
                .node(&node, "zone-0")
                .conditions(*ready, *ready, false)
                .build();
            txn.set_endpoint(name.clone(), endpoint);
        }
    }
    txn.commit();
    store.mark_listed(Kind::Service);
    store.mark_listed(Kind::Endpoint);
    store
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// For any view A the agent holds and any state B of the replica, the
    /// resume from A's summary gives exactly B's view: when at most half
    /// of the Services differ, with no reset and setting only those.
    #[test]
    fn a_resume_from_any_view_gives_exactly_the_replicas_view(a in state(), b in state()) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let (agent_store, replica_store) = (build(&a), build(&b));
        let held = node_view(&agent_store.snapshot(), "node-0");
        let want = node_view(&replica_store.snapshot(), "node-0");
        let server = Server::new(replica_store.reader());
        let events: Vec<WatchEvent> = runtime.block_on(async {
            use kpng_model::v1::enls_server::Enls as _;
            let request = WatchRequest {
                node: "node-0".into(),
                since_revision: 9,
                since_instance: 3,
                summarizes: true,
                since_summary: Some(ViewSummary::of(&held).to_wire()),
                endpoint_columns: true,
                ..Default::default()
            };
            let mut stream = server.watch(Request::new(request)).await.expect("watch").into_inner();
            let mut events = Vec::new();
            while let Some(event) = stream.next().await {
                let event = event.expect("event");
                let sync = matches!(event.event, Some(Event::Sync(_)));
                events.push(event);
                if sync {
                    break;
                }
            }
            events
        });
        let sets = events
            .iter()
            .filter_map(|e| match &e.event {
                Some(Event::Changes(c)) => Some(c.changes.iter()),
                _ => None,
            })
            .flatten()
            .filter(|c| matches!(c.change, Some(kpng_model::v1::view_change::Change::SetService(_))))
            .count();
        let differ = differing(&held, &want);
        let added_or_changed = differ.iter().filter(|n| want.services.contains_key(*n)).count();
        let reset = events.iter().any(|e| matches!(e.event, Some(Event::Reset(_))));
        // A difference, Service by Service; or, when it would set or drop
        // most of them, the whole view after a reset.
        let changed_or_removed = differ.iter().filter(|n| held.services.contains_key(*n)).count();
        let most = added_or_changed.max(changed_or_removed) * 2
            > held.services.len().max(want.services.len());
        prop_assert_eq!(reset, most);
        let want_sets = if reset { want.services.len() } else { added_or_changed };
        prop_assert_eq!(sets, want_sets);
        let mut resumed = held.clone();
        let digest = apply(events, &mut resumed);
        prop_assert!(resumed.services == want.services);
        prop_assert_eq!(&resumed.node, &want.node);
        prop_assert_eq!(&resumed.service_cidrs, &want.service_cidrs);
        prop_assert_eq!(ViewDigest::from_bytes(&digest), Some(ViewDigest::of(&want)));
    }
}
