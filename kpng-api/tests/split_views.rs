//! A split deployment (a server that ingests the cluster for every node,
//! and each node's agent streaming its view from it) and a node-local
//! proxy (one process that ingests and projects for its own node) must
//! give a node the same view. Random clusters whose EndpointSlices list
//! one address several times (on different nodes, with different
//! conditions, ports and hints, or without `nodeName`) go through both
//! paths, and every node's two views are compared.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use kpng_api::{Address, AgentConfig, Server, bind_unix, run_agent, serve};
use kpng_kube::{Ingest, IngestConfig};
use kpng_model::view::NodeView;
use kpng_sink::{Round, Sink, SinkError};
use kpng_store::Store;
use kpng_view::node_view;
use proptest::prelude::*;
use serde_json::{Value, json};

const NODES: [&str; 3] = ["node-a", "node-b", "node-c"];
const ZONES: [&str; 2] = ["zone-1", "zone-2"];
/// The ports a slice may list: two numbers for `http`, so that copies of
/// one address can disagree on it.
const SLICE_PORTS: [(&str, &str, u16); 4] = [
    ("http", "TCP", 8080),
    ("http", "TCP", 8081),
    ("metrics", "TCP", 9090),
    ("dns", "UDP", 53),
];

/// One endpoint of a slice.
#[derive(Clone, Debug)]
struct Ep {
    /// Index into the Service's four addresses: few, so that copies are
    /// common.
    address: u8,
    /// `nodeName`: one of [`NODES`], or none.
    node: Option<usize>,
    zone: Option<usize>,
    ready: Option<bool>,
    serving: Option<bool>,
    terminating: Option<bool>,
    hint_zone: Option<usize>,
    hint_node: Option<usize>,
}

#[derive(Clone, Debug)]
struct Slice {
    /// A bit per [`SLICE_PORTS`] entry.
    ports: u8,
    endpoints: Vec<Ep>,
}

#[derive(Clone, Debug)]
struct Svc {
    internal_local: bool,
    external_local: bool,
    slices: Vec<Slice>,
}

fn ep() -> impl Strategy<Value = Ep> {
    let node = prop::option::weighted(0.8, 0..NODES.len());
    let zone = prop::option::of(0..ZONES.len());
    let condition = || prop::option::of(any::<bool>());
    let hint = |n: usize| prop::option::weighted(0.3, 0..n);
    (
        0u8..4,
        node,
        zone,
        (condition(), condition(), condition()),
        hint(ZONES.len()),
        hint(NODES.len()),
    )
        .prop_map(
            |(address, node, zone, (ready, serving, terminating), hint_zone, hint_node)| Ep {
                address,
                node,
                zone,
                ready,
                serving,
                terminating,
                hint_zone,
                hint_node,
            },
        )
}

fn slice() -> impl Strategy<Value = Slice> {
    (1u8..16, prop::collection::vec(ep(), 0..4))
        .prop_map(|(ports, endpoints)| Slice { ports, endpoints })
}

fn service() -> impl Strategy<Value = Svc> {
    (
        any::<bool>(),
        any::<bool>(),
        prop::collection::vec(slice(), 1..4),
    )
        .prop_map(|(internal_local, external_local, slices)| Svc {
            internal_local,
            external_local,
            slices,
        })
}

/// The cluster as a Kubernetes `List`: three Nodes, and per Service a
/// NodePort Service and its slices.
fn manifest(services: &[Svc]) -> String {
    let mut items: Vec<Value> = NODES
        .iter()
        .enumerate()
        .map(|(i, name)| {
            json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": ZONES[i % 2]}},
                "status": {"addresses": [{"type": "InternalIP", "address": format!("192.168.0.{}", i + 1)}]}
            })
        })
        .collect();
    for (s, svc) in services.iter().enumerate() {
        let name = format!("svc-{s}");
        items.push(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"namespace": "default", "name": name},
            "spec": {
                "type": "NodePort",
                "clusterIP": format!("10.96.0.{}", s + 1),
                "internalTrafficPolicy": if svc.internal_local { "Local" } else { "Cluster" },
                "externalTrafficPolicy": if svc.external_local { "Local" } else { "Cluster" },
                "ports": [
                    {"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080 + s},
                    {"name": "metrics", "port": 90, "protocol": "TCP", "nodePort": 30180 + s},
                    {"name": "dns", "port": 53, "protocol": "UDP", "nodePort": 30280 + s},
                ]
            }
        }));
        for (k, slice) in svc.slices.iter().enumerate() {
            let ports: Vec<Value> = SLICE_PORTS
                .iter()
                .enumerate()
                .filter(|(i, _)| slice.ports & (1 << i) != 0)
                .map(|(_, (name, protocol, port))| {
                    json!({"name": name, "protocol": protocol, "port": port})
                })
                .collect();
            let endpoints: Vec<Value> = slice
                .endpoints
                .iter()
                .map(|e| {
                    let mut endpoint = json!({
                        "addresses": [format!("10.1.{s}.{}", e.address + 1)],
                        "conditions": {},
                    });
                    if let Some(node) = e.node {
                        endpoint["nodeName"] = json!(NODES[node]);
                    }
                    if let Some(zone) = e.zone {
                        endpoint["zone"] = json!(ZONES[zone]);
                    }
                    for (field, value) in [
                        ("ready", e.ready),
                        ("serving", e.serving),
                        ("terminating", e.terminating),
                    ] {
                        if let Some(value) = value {
                            endpoint["conditions"][field] = json!(value);
                        }
                    }
                    if let Some(zone) = e.hint_zone {
                        endpoint["hints"]["forZones"] = json!([{"name": ZONES[zone]}]);
                    }
                    if let Some(node) = e.hint_node {
                        endpoint["hints"]["forNodes"] = json!([{"name": NODES[node]}]);
                    }
                    endpoint
                })
                .collect();
            items.push(json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {
                    "namespace": "default", "name": format!("{name}-{k}"),
                    "labels": {"kubernetes.io/service-name": name}
                },
                "addressType": "IPv4",
                "ports": ports,
                "endpoints": endpoints,
            }));
        }
    }
    json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string()
}

/// The store a proxy ingests `text` into.
fn ingested(text: &str) -> Ingest {
    let mut ingest = Ingest::new(Store::new(), IngestConfig::default());
    ingest
        .load_str("cluster.json", text)
        .expect("the manifest loads");
    ingest
}

/// A sink that keeps the view of the last round.
#[derive(Default)]
struct Keep(Option<NodeView>);

impl Sink for Keep {
    fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
        self.0 = Some(round.view().clone());
        Ok(())
    }
}

fn socket() -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    std::env::temp_dir().join(format!(
        "kpng-split-views-{}-{}.sock",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Each node's view as its agent builds it from a server over `text`.
async fn agent_views(text: &str) -> Vec<NodeView> {
    let ingest = ingested(text);
    let path = socket();
    let listener = bind_unix(&path).expect("socket");
    let serving = tokio::spawn(serve(listener, Server::new(ingest.reader())));
    let mut config = AgentConfig::default();
    config.once = true;
    let mut views = Vec::new();
    for node in NODES {
        let mut keep = Keep::default();
        run_agent(&Address::Unix(path.clone()), node, &mut keep, &config)
            .await
            .expect("the agent syncs");
        views.push(keep.0.expect("a round"));
    }
    serving.abort();
    let _ = std::fs::remove_file(&path);
    drop(ingest);
    views
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn a_split_agent_and_a_node_local_proxy_compute_the_same_view(
        services in prop::collection::vec(service(), 1..4)
    ) {
        let text = manifest(&services);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let from_server = runtime.block_on(agent_views(&text));
        for (node, agent) in NODES.iter().zip(from_server) {
            let local = node_view(&ingested(&text).store().snapshot(), node);
            prop_assert_eq!(&agent, &local, "node {}", node);
        }
    }
}

/// The two cases that went wrong when the node's copy of a duplicated
/// address was chosen at ingest: a pod moving from node-a (terminating)
/// to node-b (ready), and an `internalTrafficPolicy: Local` Service whose
/// address is listed once with `nodeName: node-c` and once without.
#[test]
fn a_moving_pod_and_a_copy_without_node_name_are_local_where_they_run() {
    let ep = |address, node, ready, terminating| Ep {
        address,
        node,
        zone: None,
        ready: Some(ready),
        serving: Some(true),
        terminating: Some(terminating),
        hint_zone: None,
        hint_node: None,
    };
    let moving = Svc {
        internal_local: false,
        external_local: false,
        slices: vec![
            Slice {
                ports: 1,
                endpoints: vec![ep(0, Some(0), false, true)],
            },
            Slice {
                ports: 1,
                endpoints: vec![ep(0, Some(1), true, false)],
            },
        ],
    };
    let local = Svc {
        internal_local: true,
        external_local: false,
        slices: vec![
            Slice {
                ports: 1,
                endpoints: vec![ep(1, None, true, false)],
            },
            Slice {
                ports: 1,
                endpoints: vec![ep(1, Some(2), true, false)],
            },
        ],
    };
    let text = manifest(&[moving, local]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let from_server = runtime.block_on(agent_views(&text));
    let endpoint = |view: &NodeView, service: &str| {
        let service = view
            .services
            .values()
            .find(|s| s.service.name == service)
            .expect("the Service")
            .clone();
        service.endpoints.first().cloned().expect("an endpoint")
    };
    for (node, agent) in NODES.iter().zip(&from_server) {
        let local = node_view(&ingested(&text).store().snapshot(), node);
        assert_eq!(agent, &local, "node {node}");
    }
    // node-b: the ready copy on node-b, local there.
    let b = endpoint(&from_server[1], "svc-0");
    assert!(b.is_local() && b.endpoint().ready(), "{b:?}");
    assert_eq!(b.endpoint().node_name(), "node-b");
    // node-a: its own terminating copy.
    let a = endpoint(&from_server[0], "svc-0");
    assert!(a.is_local() && a.endpoint().terminating(), "{a:?}");
    // node-c: the Local Service has its local endpoint.
    let c = endpoint(&from_server[2], "svc-1");
    assert!(c.is_local() && c.local(), "{c:?}");
}
