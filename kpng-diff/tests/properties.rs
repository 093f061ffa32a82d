//! Property tests of the diff engine.

use std::sync::Arc;

use std::collections::BTreeMap;

use kpng_diff::{Op, apply, diff};
use kpng_model::EndpointInfo;
use kpng_model::v1::{Endpoint, IpSet, Node, Service, TrafficPolicy};
use kpng_model::{Key, ServiceName, Value};
use kpng_store::{Snapshot, Store, StoreConfig};
use proptest::prelude::*;

const NODE: &str = "node-a";

#[derive(Clone, Debug)]
enum Write {
    Set(Key, Value),
    Delete(Key),
}

fn service_name() -> impl Strategy<Value = ServiceName> {
    (0..2u8, 0..3u8).prop_map(|(ns, n)| ServiceName::new(format!("ns{ns}"), format!("s{n}")))
}

fn node_name() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just(NODE), Just("node-b"), Just("")]
}

fn zones() -> impl Strategy<Value = Vec<String>> {
    prop_oneof![
        Just(vec![]),
        Just(vec!["zone-1".to_string()]),
        Just(vec!["zone-2".to_string()]),
    ]
}

fn hint_nodes() -> impl Strategy<Value = Vec<String>> {
    prop_oneof![
        4 => Just(vec![]),
        1 => Just(vec![NODE.to_string()]),
        1 => Just(vec!["node-b".to_string()]),
    ]
}

fn write() -> impl Strategy<Value = Write> {
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
        Write::Set(Key::Service(name), Value::Service(Arc::new(svc)))
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

fn contents(snapshot: &Snapshot) -> BTreeMap<Key, Value> {
    snapshot.iter().collect()
}

/// Runs the transactions and returns the snapshot after each (revision 0
/// first). A small change log makes some spans fall back to the walk.
fn history(txns: Vec<Vec<Write>>, log_revisions: usize) -> Vec<Snapshot> {
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

fn txns() -> impl Strategy<Value = Vec<Vec<Write>>> {
    prop::collection::vec(prop::collection::vec(write(), 0..6), 1..16)
}

proptest! {
    #[test]
    fn apply_diff_a_b_to_a_gives_b(txns in txns(), log in 1..6usize) {
        // The same history twice: with a short change log (most spans fall
        // back to the structural walk) and with a long one (never).
        let short = history(txns.clone(), log);
        let long = history(txns, 1024);
        for (i, a) in short.iter().enumerate() {
            prop_assert!(diff(a, a).is_empty(), "diff(A, A) is empty");
            for (j, b) in short.iter().enumerate() {
                let ops = diff(a, b);
                // Replay A into a replica, apply the diff: it holds B.
                let mut replica = Store::new();
                let mut txn = replica.begin();
                for (k, v) in a.iter() {
                    txn.set(k, v).expect("kinds match");
                }
                apply(&mut txn, &ops).expect("kinds match");
                txn.commit();
                prop_assert_eq!(contents(&replica.snapshot()), contents(b));
                // Minimal: exactly one op per key whose value differs, in
                // key order; the log and the walk agree.
                let (ca, cb) = (contents(a), contents(b));
                let differing = ca.keys().chain(cb.keys()).filter(|k| ca.get(k) != cb.get(k)).collect::<std::collections::BTreeSet<_>>();
                let keys: Vec<&Key> = ops.iter().map(Op::key).collect();
                prop_assert_eq!(keys, differing.into_iter().collect::<Vec<_>>());
                prop_assert_eq!(&ops, &diff(&long[i], &long[j]));
            }
        }
    }
}
