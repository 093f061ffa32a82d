//! Property tests of the store's invariants, against a `BTreeMap` model.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kpng_model::endpoint::{Interner, PortInfo, PortList};
use kpng_model::v1::{Protocol, Service, ServicePort};
use kpng_model::{EndpointInfo, Key, ServiceName, Value};
use kpng_store::{Store, StoreConfig};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Set(Key, Value),
    Delete(Key),
    /// Replace a Service's endpoints with these (ids, sorted and unique).
    Replace(ServiceName, Vec<(u8, bool, u8)>),
}

/// An endpoint at 10.0.0.`id`, with a node and ports from small sets: two
/// endpoints built apart (fresh or interned copies) are often equal.
fn endpoint(id: u8, ready: bool, variant: u8, interner: Option<&mut Interner>) -> EndpointInfo {
    let node = ["", "node-a", "node-b"][usize::from(variant % 3)];
    let port = 8080 + u16::from(variant / 3 % 2);
    let builder = EndpointInfo::builder([10, 0, 0, id].into())
        .conditions(ready, true, false)
        .node(node, "zone-1")
        .ports(PortList::new([PortInfo::new("http", Protocol::Tcp, port)]));
    match interner {
        Some(interner) => builder.intern(interner),
        None => builder.build(),
    }
}

fn service_name() -> impl Strategy<Value = ServiceName> {
    (0..2u8, 0..3u8).prop_map(|(ns, n)| ServiceName::new(format!("ns{ns}"), format!("svc{n}")))
}

fn op() -> impl Strategy<Value = Op> {
    let service = (service_name(), 0..3u32).prop_map(|(name, port)| {
        let svc = Service {
            namespace: name.namespace().to_string(),
            name: name.name().to_string(),
            ports: vec![ServicePort {
                port,
                ..Default::default()
            }],
            ..Default::default()
        };
        (
            Key::Service(name),
            Value::Service(Arc::new(kpng_model::ServiceInfo::new(svc).expect("valid"))),
        )
    });
    let endpoint =
        (service_name(), 0..4u8, any::<bool>(), 0..6u8).prop_map(|(name, id, ready, variant)| {
            (
                Key::Endpoint(name, [10, 0, 0, id].into()),
                Value::Endpoint(endpoint(id, ready, variant, None)),
            )
        });
    let replace = (
        service_name(),
        prop::collection::btree_map(0..4u8, (any::<bool>(), 0..6u8), 0..4),
    )
        .prop_map(|(name, eps)| {
            Op::Replace(
                name,
                eps.into_iter().map(|(id, (r, v))| (id, r, v)).collect(),
            )
        });
    prop_oneof![
        3 => prop_oneof![service, endpoint].prop_map(|(k, v)| Op::Set(k, v)),
        1 => replace,
        1 => service_name().prop_map(|n| Op::Delete(Key::Service(n))),
        1 => (service_name(), 0..4u8)
            .prop_map(|(n, id)| Op::Delete(Key::Endpoint(n, [10, 0, 0, id].into()))),
    ]
}

fn contents(snapshot: &kpng_store::Snapshot) -> BTreeMap<Key, Value> {
    let map: BTreeMap<Key, Value> = snapshot.iter().collect();
    assert_eq!(map.len(), snapshot.len(), "iter yields each entry once");
    map
}

proptest! {
    #[test]
    fn store_matches_model(
        txns in prop::collection::vec(prop::collection::vec(op(), 0..8), 1..24),
        log_keys in prop_oneof![Just(65_536usize), 1..6usize],
    ) {
        // A small log: transactions that touch more keys than it keeps
        // commit without their keys.
        let mut config = StoreConfig::default();
        config.log_keys = log_keys;
        let mut store = Store::with_config(config);
        let reader = store.reader();
        let mut model: BTreeMap<Key, Value> = BTreeMap::new();
        let mut history = vec![(store.snapshot(), model.clone())];
        let mut interner = Interner::new();

        for ops in txns {
            let before = model.clone();
            let revision_before = store.revision();
            let mut expected_noops = 0u64;
            let mut txn = store.begin();
            for op in ops {
                match op {
                    Op::Set(k, v) => {
                        if model.get(&k) == Some(&v) { expected_noops += 1; }
                        model.insert(k.clone(), v.clone());
                        txn.set(k, v).expect("kinds match");
                    }
                    Op::Delete(k) => {
                        if model.remove(&k).is_none() { expected_noops += 1; }
                        txn.delete(&k);
                    }
                    Op::Replace(name, eps) => {
                        let list: Vec<EndpointInfo> = eps
                            .iter()
                            .map(|(id, ready, v)| endpoint(*id, *ready, *v, Some(&mut interner)))
                            .collect();
                        let old: BTreeMap<Key, Value> = model
                            .iter()
                            .filter(|(k, _)| matches!(k, Key::Endpoint(n, _) if *n == name))
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect();
                        let new: BTreeMap<Key, Value> = list
                            .iter()
                            .map(|e| (Key::Endpoint(name.clone(), e.address()), Value::Endpoint(e.clone())))
                            .collect();
                        let keys: BTreeSet<&Key> = old.keys().chain(new.keys()).collect();
                        let differ = keys.into_iter().filter(|k| old.get(*k) != new.get(*k)).count();
                        if differ == 0 { expected_noops += 1; }
                        for k in old.keys() { model.remove(k); }
                        model.extend(new);
                        let count = txn.replace_endpoints(&name, &Arc::new(list)).expect("sorted");
                        prop_assert_eq!(count, differ);
                    }
                }
            }
            let commit = txn.commit();
            prop_assert_eq!(commit.noop_writes, expected_noops);

            // The revision moves exactly when the contents changed.
            if model == before {
                prop_assert_eq!(commit.revision, None);
                prop_assert_eq!(store.revision(), revision_before);
            } else {
                prop_assert_eq!(commit.revision, Some(revision_before + 1));
            }
            let snapshot = reader.snapshot();
            prop_assert_eq!(snapshot.revision(), store.revision());
            prop_assert_eq!(&contents(&snapshot), &model);

            // The change log names exactly the keys whose value differs.
            let (old, old_model) = history.last().expect("non-empty");
            let mut expected: BTreeSet<Key> = before.keys().chain(model.keys()).cloned().collect();
            expected.retain(|k| before.get(k) != model.get(k));
            // (A small log may have dropped it: then it says so.)
            let logged = snapshot.changed_since(old);
            if log_keys >= 65_536 || logged.is_some() {
                prop_assert_eq!(logged, Some(expected));
            }
            prop_assert_eq!(&contents(old), old_model);

            history.push((snapshot, model.clone()));
        }

        // Snapshots are immutable: every one still holds what it held.
        for (snapshot, model) in &history {
            prop_assert_eq!(&contents(snapshot), model);
        }
        // The default log covers any span back to revision 0 here.
        let first = &history[0].0;
        let last = &history[history.len() - 1].0;
        let all: BTreeSet<Key> = last.iter().map(|(k, _)| k).collect();
        if log_keys >= 65_536 {
            let changed = last.changed_since(first).expect("in log");
            prop_assert!(all.is_subset(&changed));
        }
    }
}

/// A history of a generic revisioned map: transactions of sets (`Some`)
/// and deletes (`None`) over a small key space.
fn map_history(txns: &[Vec<(u8, Option<u8>)>]) -> Vec<kpng_store::MapSnapshot<u8, u8>> {
    let mut map = kpng_store::RevMap::new();
    let mut snaps = vec![map.snapshot()];
    for txn in txns {
        let mut t = map.begin();
        for (k, v) in txn {
            match v {
                Some(v) => t.set(*k, *v),
                None => t.delete(k),
            };
        }
        if t.commit().is_some() {
            snaps.push(map.snapshot());
        }
    }
    snaps
}

proptest! {
    #[test]
    fn map_diffs_are_minimal_and_replay(
        txns in prop::collection::vec(
            prop::collection::vec((0..12u8, prop::option::of(0..3u8)), 0..6),
            1..12,
        )
    ) {
        let snaps = map_history(&txns);
        // Revisions are made only by real changes: consecutive ones differ.
        for pair in snaps.windows(2) {
            prop_assert_ne!(pair[0].entries(), pair[1].entries());
            prop_assert_eq!(pair[0].revision() + 1, pair[1].revision());
        }
        for a in &snaps {
            prop_assert!(a.diff(a).is_empty());
            for b in &snaps {
                let ops = a.diff(b);
                let mut replay = a.entries().clone();
                for op in &ops {
                    match op {
                        kpng_store::MapOp::Set(k, v) => {
                            // Minimal: never a set to the value already held.
                            prop_assert_ne!(replay.get(k), Some(v));
                            replay.insert(*k, *v);
                        }
                        kpng_store::MapOp::Delete(k) => {
                            prop_assert!(replay.remove(k).is_some());
                        }
                    }
                }
                prop_assert_eq!(&replay, b.entries());
            }
        }
    }
}
