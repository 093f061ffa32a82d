//! Random transactions of raw store writes (Services, endpoints with
//! conditions and hints, Nodes, ServiceCIDRs), for the property tests of
//! the store's diff and of the node view (feature `history`).
//!
//! ```
//! use kpng_testkit::history::writes::{Write, history};
//!
//! let snapshots = history(vec![vec![]], 1024);
//! assert_eq!(snapshots.len(), 2, "revision 0, then one per transaction");
//! # let _: Option<Write> = None;
//! ```

use std::sync::Arc;

use kpng_model::EndpointInfo;
use kpng_model::v1::{Endpoint, IpSet, Node, Service, TrafficPolicy};
use kpng_model::{Key, ServiceName, Value};
use kpng_store::{Snapshot, Store, StoreConfig};
use proptest::prelude::*;

/// The node the views are of.
pub const NODE: &str = "node-a";

/// One write of a transaction.
#[derive(Clone, Debug)]
pub enum Write {
    /// Sets a key.
    Set(Key, Value),
    /// Deletes a key.
    Delete(Key),
}

/// A Service name of a small set.
pub fn service_name() -> impl Strategy<Value = ServiceName> {
    (0..2u8, 0..3u8).prop_map(|(ns, n)| ServiceName::new(format!("ns{ns}"), format!("s{n}")))
}

/// A node name: this one, another, or none.
pub fn node_name() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just(NODE), Just("node-b"), Just("")]
}

/// Zone hints.
pub fn zones() -> impl Strategy<Value = Vec<String>> {
    prop_oneof![
        Just(vec![]),
        Just(vec!["zone-1".to_string()]),
        Just(vec!["zone-2".to_string()]),
    ]
}

/// Node hints.
pub fn hint_nodes() -> impl Strategy<Value = Vec<String>> {
    prop_oneof![
        4 => Just(vec![]),
        1 => Just(vec![NODE.to_string()]),
        1 => Just(vec!["node-b".to_string()]),
    ]
}

/// One random write: a Service, an endpoint, a Node or a ServiceCIDR, set or deleted.
pub fn write() -> impl Strategy<Value = Write> {
    let service = (service_name(), any::<bool>(), 0..2u32).prop_map(|(name, local, port)| {
        let svc = Service {
            namespace: name.namespace().to_string(),
            name: name.name().to_string(),
            internal_traffic_policy: if local {
                TrafficPolicy::Local as i32
            } else {
                0
            },
            health_check_node_port: port,
            ..Default::default()
        };
        Write::Set(
            Key::Service(name),
            Value::Service(Arc::new(
                kpng_model::ServiceInfo::new(svc).expect("a valid Service"),
            )),
        )
    });
    let endpoint = (
        service_name(),
        0..4u8,
        any::<bool>(),
        node_name(),
        any::<(bool, bool, bool)>(),
        zones(),
        hint_nodes(),
    )
        .prop_map(
            |(name, id, v6, node, (ready, serving, terminating), hint_zones, hint_nodes)| {
                let ip = if v6 {
                    format!("fd00::{id}")
                } else {
                    format!("10.0.0.{id}")
                };
                let ep = Endpoint {
                    addresses: Some(IpSet::parse_addrs("ip", [ip.as_str()]).expect("ip")),
                    node_name: node.into(),
                    ready,
                    serving,
                    terminating,
                    hint_zones,
                    hint_nodes,
                    ..Default::default()
                };
                Write::Set(
                    Key::Endpoint(name, ip.parse().expect("ip")),
                    Value::Endpoint(EndpointInfo::from_proto(&ep).expect("valid")),
                )
            },
        );
    let node =
        (node_name(), prop_oneof![Just("zone-1"), Just("zone-2")]).prop_map(|(name, zone)| {
            let node = Node {
                name: name.into(),
                zone: zone.into(),
                ..Default::default()
            };
            Write::Set(Key::Node(name.into()), Value::Node(Arc::new(node)))
        });
    // Two ServiceCIDR objects whose ranges overlap: deleting one keeps
    // the ranges the other has.
    let service_cidr = (
        prop_oneof![Just("kubernetes"), Just("extra")],
        prop_oneof![Just("10.96.0.0/16"), Just("10.97.0.0/16")],
        proptest::bool::ANY,
    )
        .prop_map(|(name, cidr, v6)| {
            let mut cidrs = vec![cidr];
            if v6 {
                cidrs.push("fd00:96::/112");
            }
            let cidr = kpng_model::v1::ServiceCidr {
                name: name.into(),
                cidrs: Some(kpng_model::v1::IpSet::parse_cidrs("cidrs", cidrs).expect("cidrs")),
            };
            Write::Set(
                Key::ServiceCidr(name.into()),
                Value::ServiceCidr(Arc::new(cidr)),
            )
        });
    prop_oneof![
        2 => service,
        5 => endpoint,
        1 => node,
        1 => service_cidr,
        1 => prop_oneof![Just("kubernetes"), Just("extra")]
            .prop_map(|n| Write::Delete(Key::ServiceCidr(n.into()))),
        1 => service_name().prop_map(|n| Write::Delete(Key::Service(n))),
        2 => (service_name(), 0..4u8).prop_map(|(n, id)| Write::Delete(Key::Endpoint(n, [10, 0, 0, id].into()))),
        1 => Just(Write::Delete(Key::Node(NODE.into()))),
    ]
}

/// Runs the transactions and returns the snapshot after each (revision 0
/// first). A small change log makes some spans fall back to the walk.
pub fn history(txns: Vec<Vec<Write>>, log_revisions: usize) -> Vec<Snapshot> {
    let mut config = StoreConfig::default();
    config.log_revisions = log_revisions;
    let mut store = Store::with_config(config);
    let mut snaps = vec![store.snapshot()];
    for writes in txns {
        let mut txn = store.begin();
        for w in writes {
            match w {
                Write::Set(k, v) => {
                    txn.set(k, v).expect("kinds match");
                }
                Write::Delete(k) => {
                    txn.delete(&k);
                }
            }
        }
        txn.commit();
        snaps.push(store.snapshot());
    }
    snaps
}

/// Random transactions of random writes.
pub fn txns() -> impl Strategy<Value = Vec<Vec<Write>>> {
    prop::collection::vec(prop::collection::vec(write(), 0..6), 1..16)
}
