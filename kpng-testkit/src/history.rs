//! Random histories of a small cluster, for property tests of backends
//! (feature `history`): a synthetic cluster's Services set, changed and
//! removed, their endpoints coming and going, this node's addresses and
//! the Service CIDRs changing, in a few changes per transaction, each
//! state with a flag asking the backend to rewrite everything.
//!
//! ```
//! use kpng_model::endpoint::Interner;
//! use kpng_testkit::history::{Change, apply};
//!
//! let mut store = kpng_store::Store::new();
//! let mut interner = Interner::new();
//! apply(&mut store, &[Change::Service(0, 0), Change::Node(1)], &mut interner);
//! assert_eq!(store.snapshot().service_names().count(), 1);
//! ```

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use kpng_model::endpoint::Interner;
use kpng_model::v1::{
    ClientIpAffinity, IpSet, Node, Service, ServiceCidr, ServiceType, TrafficPolicy,
};
use kpng_model::{EndpointInfo, Key, ServiceName};
use kpng_store::Store;
use proptest::prelude::*;

use crate::Cluster;

pub mod writes;

/// The node the backend runs on: `node-0` of the synthetic cluster.
pub const NODE: &str = "node-0";
/// Services `svc-0` … `svc-7` come and go.
pub const SERVICES: usize = 8;

/// One change of the cluster.
#[derive(Clone, Debug)]
pub enum Change {
    /// Sets Service `i`, in variant `v` (see [`service`]).
    Service(usize, u8),
    /// Removes Service `i`.
    RemoveService(usize),
    /// Replaces Service `i`'s endpoints: (address, node, ready, serving,
    /// terminating) each.
    Endpoints(usize, Vec<(u8, u8, bool, bool, bool)>),
    /// Sets this node's addresses (variant; 0 deletes the node).
    Node(u8),
    /// Sets the cluster's ServiceCIDR (variant; 0 deletes it).
    Cidrs(u8),
}

/// Synthetic Service `i` (ClusterIP, NodePort or LoadBalancer by `i`),
/// changed by the bits of `v`: externalTrafficPolicy Local,
/// internalTrafficPolicy Local, ClientIP affinity, dual stack, an
/// external IP that Services share, LB source ranges, another port
/// number.
pub fn service(i: usize, v: u8) -> Service {
    let mut s = Cluster::service(i);
    if v & 1 != 0 && s.r#type != ServiceType::ClusterIp as i32 {
        s.external_traffic_policy = TrafficPolicy::Local as i32;
    }
    if v & 2 != 0 {
        s.internal_traffic_policy = TrafficPolicy::Local as i32;
    }
    if v & 4 != 0 {
        s.client_ip_affinity = Some(ClientIpAffinity {
            timeout_seconds: 60,
        });
    }
    if v & 8 != 0 {
        let v4: IpAddr = format!("10.96.0.{}", i + 1).parse().expect("address");
        let v6: IpAddr = format!("fd00:96::{}", i + 1).parse().expect("address");
        s.cluster_ips = Some(IpSet::from_addrs([v4, v6]));
    }
    if v & 16 != 0 {
        let ip: IpAddr = format!("203.0.113.{}", i % 3).parse().expect("address");
        s.external_ips = Some(Box::new(IpSet::from_addrs([ip])));
    }
    if v & 32 != 0 {
        s.load_balancer_source_ranges = Some(Box::new(
            IpSet::parse_cidrs("ranges", ["198.51.100.0/24"]).expect("cidr"),
        ));
    }
    if v & 64 != 0 {
        s.ports[0].port = 8080;
    }
    s
}

/// The name of Service `i`.
pub fn name(i: usize) -> ServiceName {
    Cluster::service(i).service_name()
}

/// Endpoint `id` of Service `i` on node `node` (`node-0` is this one);
/// ids 4 and up are IPv6.
pub fn endpoint(
    i: usize,
    (id, node, ready, serving, terminating): (u8, u8, bool, bool, bool),
    interner: &mut Interner,
) -> EndpointInfo {
    let ip: IpAddr = if id < 4 {
        format!("10.128.{i}.{id}").parse().expect("address")
    } else {
        format!("fd00:128::{i}:{id}").parse().expect("address")
    };
    let node = Node {
        name: format!("node-{node}"),
        zone: format!("zone-{}", node % 2),
        ..Default::default()
    };
    Cluster::endpoint(ip, &node, &service(i, 0), interner).with_conditions(
        ready,
        serving,
        terminating,
    )
}

/// One random change.
pub fn change() -> impl Strategy<Value = Change> {
    let endpoint = (0..8u8, 0..3u8, any::<bool>(), any::<bool>(), any::<bool>());
    prop_oneof![
        3 => (0..SERVICES, any::<u8>()).prop_map(|(i, v)| Change::Service(i, v)),
        1 => (0..SERVICES).prop_map(Change::RemoveService),
        4 => (0..SERVICES, prop::collection::vec(endpoint, 0..6))
            .prop_map(|(i, eps)| Change::Endpoints(i, eps)),
        1 => (0..4u8).prop_map(Change::Node),
        1 => (0..3u8).prop_map(Change::Cidrs),
    ]
}

/// A state: a few changes in one transaction, and whether the backend is
/// told to rewrite everything before its round.
pub fn steps() -> impl Strategy<Value = Vec<(Vec<Change>, bool)>> {
    prop::collection::vec(
        (
            prop::collection::vec(change(), 1..4),
            prop::bool::weighted(0.1),
        ),
        1..12,
    )
}

/// Writes `changes` to `store` in one transaction.
pub fn apply(store: &mut Store, changes: &[Change], interner: &mut Interner) {
    let mut txn = store.begin();
    for change in changes {
        match change {
            Change::Service(i, v) => {
                txn.set_service(
                    kpng_model::ServiceInfo::new(service(*i, *v)).expect("a valid Service"),
                );
            }
            Change::RemoveService(i) => {
                txn.delete(&Key::Service(name(*i)));
            }
            Change::Endpoints(i, eps) => {
                let mut list: BTreeMap<IpAddr, EndpointInfo> = BTreeMap::new();
                for ep in eps {
                    let ep = endpoint(*i, *ep, interner);
                    list.insert(ep.address(), ep);
                }
                let list = Arc::new(list.into_values().collect());
                txn.replace_endpoints(&name(*i), &list).expect("sorted");
            }
            Change::Node(0) => {
                txn.delete(&Key::Node(NODE.into()));
            }
            Change::Node(v) => {
                let addrs: &[&str] = match v {
                    1 => &["192.168.0.1"],
                    2 => &["192.168.0.1", "192.168.0.100"],
                    _ => &["192.168.0.2", "fd00:192::1"],
                };
                txn.set_node(Node {
                    name: NODE.into(),
                    zone: "zone-0".into(),
                    addresses: Some(
                        IpSet::parse_addrs("addresses", addrs.iter().copied()).expect("addresses"),
                    ),
                    ..Default::default()
                });
            }
            Change::Cidrs(0) => {
                txn.delete(&Key::ServiceCidr("kubernetes".into()));
            }
            Change::Cidrs(v) => {
                let cidrs: &[&str] = match v {
                    1 => &["10.96.0.0/16"],
                    _ => &["10.96.0.0/24", "fd00:96::/112"],
                };
                txn.set_service_cidr(ServiceCidr {
                    name: "kubernetes".into(),
                    cidrs: Some(IpSet::parse_cidrs("cidrs", cidrs.iter().copied()).expect("cidrs")),
                });
            }
        }
    }
    txn.commit();
}

/// A store of two nodes, `node-0` (this one, [`NODE`]) and `node-1`, and
/// the synthetic Services `svc-N` for each N of `services`, each with two
/// endpoints, one per node: a small, fixed state for backends' tests.
pub fn store_of(services: &[usize]) -> Store {
    let cluster = Cluster::synthetic(crate::ClusterShape {
        services: 0,
        endpoints: 0,
        nodes: 2,
        zones: 1,
    });
    let mut store = Store::new();
    let mut interner = Interner::new();
    let mut txn = store.begin();
    for node in &cluster.nodes {
        txn.set_node(node.clone());
    }
    for &i in services {
        let service = Cluster::service(i);
        let name = service.service_name();
        let endpoints: Vec<_> = (1..=2)
            .map(|n| {
                let ip = format!("10.128.{i}.{n}").parse().expect("address");
                Cluster::endpoint(ip, &cluster.nodes[n % 2], &service, &mut interner)
            })
            .collect();
        txn.set_service(kpng_model::ServiceInfo::new(service).expect("a valid Service"));
        txn.replace_endpoints(&name, &Arc::new(endpoints))
            .expect("sorted");
    }
    txn.commit();
    store
}
