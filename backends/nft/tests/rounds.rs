//! Rounds applied one by one give the tables one full round gives: the
//! projector drives a dry-run backend through a random history of cluster
//! states (Services, endpoints, the node's addresses, ServiceCIDRs added,
//! changed and removed), and after each round the backend's desired tables
//! equal those of a fresh backend handed the same snapshot in one full
//! round. Incremental rendering (a Service's old objects rendered again
//! from the round's view before and taken out) is then never wrong.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use kpng_backend_nft::{NftBackend, NftConfig, TableContent};
use kpng_model::endpoint::Interner;
use kpng_model::v1::{
    ClientIpAffinity, IpSet, Node, Service, ServiceCidr, ServiceType, TrafficPolicy,
};
use kpng_model::{Key, ServiceName};
use kpng_sink::ProxyConfig;
use kpng_store::{Snapshot, Store};
use kpng_testkit::{Cluster, ClusterShape};
use kpng_view::NodeProjector;
use proptest::prelude::*;

/// The node the projector is for; the synthetic cluster has it.
const NODE: &str = "node-0";
/// How many Services a history may hold (the synthetic cluster starts
/// with fewer, so some are added).
const SERVICES: usize = 8;

/// What a Service looks like, beyond what [`Cluster::service`] makes.
#[derive(Clone, Copy, Debug)]
struct Shape {
    affinity: bool,
    external_local: bool,
    internal_local: bool,
    dual_stack: bool,
    external_ip: bool,
    /// Another ClusterIP than its own.
    moved: bool,
}

#[derive(Clone, Debug)]
enum Write {
    Service(usize, Shape),
    DeleteService(usize),
    /// Service, endpoint number, node number, (ready, serving,
    /// terminating), with an IPv6 address too.
    Endpoint(usize, u8, usize, (bool, bool, bool), bool),
    DeleteEndpoint(usize, u8),
    /// The node's addresses (by number), and its zone.
    Node(Vec<u8>, u8),
    DeleteNode,
    /// ServiceCIDR object number, with IPv6 too.
    ServiceCidr(u8, bool),
    DeleteServiceCidr(u8),
}

fn shape() -> impl Strategy<Value = Shape> {
    any::<[bool; 6]>().prop_map(|b| Shape {
        affinity: b[0],
        external_local: b[1],
        internal_local: b[2],
        dual_stack: b[3],
        external_ip: b[4],
        moved: b[5],
    })
}

fn write() -> impl Strategy<Value = Write> {
    prop_oneof![
        3 => (0..SERVICES, shape()).prop_map(|(i, s)| Write::Service(i, s)),
        1 => (0..SERVICES).prop_map(Write::DeleteService),
        6 => (0..SERVICES, 0..4u8, 0..3usize, any::<(bool, bool, bool)>(), any::<bool>())
            .prop_map(|(i, id, node, c, v6)| Write::Endpoint(i, id, node, c, v6)),
        3 => (0..SERVICES, 0..4u8).prop_map(|(i, id)| Write::DeleteEndpoint(i, id)),
        1 => (prop::collection::vec(0..4u8, 0..3), 0..2u8).prop_map(|(a, z)| Write::Node(a, z)),
        1 => Just(Write::DeleteNode),
        1 => (0..2u8, any::<bool>()).prop_map(|(n, v6)| Write::ServiceCidr(n, v6)),
        1 => (0..2u8).prop_map(Write::DeleteServiceCidr),
    ]
}

/// Service number `i`, as [`Cluster::service`] makes it, shaped.
fn service(i: usize, shape: Shape) -> Service {
    let mut svc = Cluster::service(i);
    let n = u8::try_from(i + 1).expect("few Services");
    // Cluster::service's own is 10.96.0.N.
    let mut cluster_ips = vec![IpAddr::V4(Ipv4Addr::new(10, 96, u8::from(shape.moved), n))];
    if shape.dual_stack {
        cluster_ips.push(IpAddr::V6(Ipv6Addr::new(
            0xfd00,
            0x96,
            0,
            0,
            0,
            0,
            0,
            n.into(),
        )));
    }
    svc.cluster_ips = Some(IpSet::from_addrs(cluster_ips));
    if shape.external_ip {
        svc.external_ips = Some(Box::new(IpSet::from_addrs([IpAddr::V4(Ipv4Addr::new(
            203, 0, 113, n,
        ))])));
    }
    svc.client_ip_affinity = shape.affinity.then_some(ClientIpAffinity {
        timeout_seconds: 600,
    });
    if shape.external_local && svc.r#type != ServiceType::ClusterIp as i32 {
        svc.external_traffic_policy = TrafficPolicy::Local as i32;
    }
    if shape.internal_local {
        svc.internal_traffic_policy = TrafficPolicy::Local as i32;
    }
    svc
}

fn name(i: usize) -> ServiceName {
    Cluster::service(i).service_name()
}

/// Endpoint `id` of Service `i`: the synthetic cluster's first two (its
/// endpoint `n` is 10.128.0.n+1, of Service `n % 5`), then others.
fn endpoint_ip(i: usize, id: u8) -> IpAddr {
    let i = u8::try_from(i).expect("few Services");
    if i < 5 && id < 2 {
        IpAddr::V4(Ipv4Addr::new(10, 128, 0, i + 1 + 5 * id))
    } else {
        IpAddr::V4(Ipv4Addr::new(10, 128, i + 1, id))
    }
}

fn node(addresses: &[u8], zone: u8) -> Node {
    let addresses = addresses.iter().map(|&a| match a {
        0 => IpAddr::V4(Ipv4Addr::new(192, 168, 0, 1)),
        1 => IpAddr::V4(Ipv4Addr::new(192, 168, 0, 9)),
        2 => IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1)),
        _ => IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 9)),
    });
    let mut addresses: Vec<IpAddr> = addresses.collect();
    addresses.sort_unstable();
    addresses.dedup();
    Node {
        name: NODE.into(),
        zone: format!("zone-{zone}"),
        region: "region-0".into(),
        addresses: (!addresses.is_empty()).then(|| IpSet::from_addrs(addresses)),
        terminating: false,
    }
}

fn service_cidr(n: u8, v6: bool) -> ServiceCidr {
    let mut cidrs = vec![if n == 0 {
        "10.96.0.0/24"
    } else {
        "10.96.1.0/24"
    }];
    if v6 {
        cidrs.push("fd00:96::/112");
    }
    ServiceCidr {
        name: format!("cidr-{n}"),
        cidrs: Some(IpSet::parse_cidrs("cidrs", cidrs).expect("cidrs")),
    }
}

/// The synthetic cluster, then one snapshot after each transaction.
fn history(txns: Vec<Vec<Write>>) -> Vec<Snapshot> {
    let cluster = Cluster::synthetic(ClusterShape {
        services: 5,
        endpoints: 10,
        nodes: 3,
        zones: 2,
    });
    let mut store = Store::new();
    cluster.load_into(&mut store);
    let mut interner = Interner::new();
    let mut snaps = vec![store.snapshot()];
    for writes in txns {
        let mut txn = store.begin();
        for w in writes {
            match w {
                Write::Service(i, shape) => {
                    txn.set_service(
                        kpng_model::ServiceInfo::new(service(i, shape)).expect("valid"),
                    );
                }
                Write::DeleteService(i) => {
                    txn.delete(&Key::Service(name(i)));
                }
                Write::Endpoint(i, id, n, (ready, serving, terminating), v6) => {
                    let ip = endpoint_ip(i, id);
                    let on = &cluster.nodes[n];
                    let mut endpoint =
                        Cluster::endpoint(ip, on, &Cluster::service(i), &mut interner)
                            .with_conditions(ready, serving, terminating);
                    if v6 {
                        let other = IpAddr::V6(Ipv6Addr::new(
                            0xfd00,
                            0x128,
                            0,
                            0,
                            0,
                            0,
                            i.try_into().expect("few"),
                            id.into(),
                        ));
                        endpoint = endpoint.to_builder().other_address(other).build();
                    }
                    txn.set_endpoint(name(i), endpoint);
                }
                Write::DeleteEndpoint(i, id) => {
                    txn.delete(&Key::Endpoint(name(i), endpoint_ip(i, id)));
                }
                Write::Node(addresses, zone) => {
                    txn.set_node(node(&addresses, zone));
                }
                Write::DeleteNode => {
                    txn.delete(&Key::Node(NODE.into()));
                }
                Write::ServiceCidr(n, v6) => {
                    txn.set_service_cidr(service_cidr(n, v6));
                }
                Write::DeleteServiceCidr(n) => {
                    txn.delete(&Key::ServiceCidr(format!("cidr-{n}").into()));
                }
            }
        }
        txn.commit();
        snaps.push(store.snapshot());
    }
    snaps
}

fn config() -> NftConfig {
    let proxy = ProxyConfig::default()
        .cluster_cidrs(["10.128.0.0/16", "fd00:128::/64"].map(|c| c.parse().expect("cidr")))
        .service_cidrs(["10.96.0.0/16".parse().expect("cidr")]);
    NftConfig::new(proxy)
}

/// The tables of a fresh dry-run backend after one full round of
/// `snapshot`.
fn fresh(snapshot: &Snapshot) -> Vec<TableContent> {
    let mut backend = NftBackend::new(config()).dry_run();
    let report = NodeProjector::new(NODE)
        .sync_into(snapshot, &mut backend)
        .expect("dry run")
        .expect("a first round");
    assert!(report.full && backend.last_sync().replaced);
    backend.tables()
}

/// `tables` without what only incremental rounds keep: a pick chain no
/// Service uses any more stays until the next full sync (binding the big
/// map again would cost the kernel a pass over its elements), and so does
/// a class no Service port is in (its chain, its empty set and its rule in
/// the classes chain: a count that comes back then adds no verdict), so
/// those absent from `expected` are left out. Nothing can name them once
/// the rest equals `expected`. The classes chains' rules are compared as
/// sets: a full sync orders them by use, incremental ones append.
fn without_idle(mut tables: Vec<TableContent>, expected: &mut [TableContent]) -> Vec<TableContent> {
    let classes = |name: &str| name == "service-classes" || name == "nodeport-classes";
    for (table, want) in tables.iter_mut().zip(expected.iter_mut()) {
        let idle: Vec<String> = table
            .chains
            .iter()
            .map(|(chain, _)| chain.name.clone())
            .filter(|name| {
                (name.starts_with("pick-") || table.sets.iter().any(|s| &s.name == name))
                    && !want.chains.iter().any(|(c, _)| &c.name == name)
            })
            .collect();
        table
            .chains
            .retain(|(chain, _)| !idle.contains(&chain.name));
        table.sets.retain(|set| !idle.contains(&set.name));
        // An idle class's set is empty: `elements` lists it only if not.
        for (chain, rules) in &mut table.chains {
            if classes(&chain.name) {
                rules.retain(|rule| {
                    let text = format!("{rule:?}");
                    !idle
                        .iter()
                        .any(|c| text.contains(&format!("Goto(\"{c}\")")))
                });
                rules.sort_by_key(|rule| format!("{rule:?}"));
            }
        }
        for (chain, rules) in &mut want.chains {
            if classes(&chain.name) {
                rules.sort_by_key(|rule| format!("{rule:?}"));
            }
        }
    }
    tables
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn rounds_one_by_one_give_the_tables_of_one_full_round(
        txns in prop::collection::vec(prop::collection::vec(write(), 1..5), 1..16),
        forced in prop::collection::vec(prop::bool::weighted(0.1), 16),
    ) {
        let snaps = history(txns);
        let mut projector = NodeProjector::new(NODE);
        let mut backend = NftBackend::new(config()).dry_run();
        for (step, snap) in snaps.iter().enumerate() {
            // The driver makes the full rounds: told to, its next round is.
            let forcing = step > 0 && forced[step - 1];
            if forcing {
                projector.force_full();
            }
            let generation = backend.generation();
            let report = projector.sync_into(snap, &mut backend).expect("dry run");
            let mut expected = fresh(snap);
            if let Some(report) = report {
                let stats = backend.last_sync().clone();
                prop_assert_eq!(report.full, step == 0 || forcing);
                prop_assert!(stats.replaced || !(report.full || forcing), "{:?}", stats);
                // A forced full round renders every Service of the view.
                let services = if forcing {
                    projector.view().services.len()
                } else {
                    report.services
                };
                prop_assert_eq!(stats.services, services);
                prop_assert_eq!(backend.generation(), generation + u64::from(stats.replaced));
                let tx = backend.last_transaction().expect("kept in dry-run mode");
                tx.verify_encoding().expect("round trip");
            }
            let tables = backend.tables();
            prop_assert_eq!(
                without_idle(tables, &mut expected),
                expected,
                "step {}, revision {}",
                step,
                snap.revision()
            );
        }
    }
}
