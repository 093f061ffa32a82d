//! Property tests of the store's invariants, against a `BTreeMap` model.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kpng_model::v1::{Endpoint, Service, ServicePort};
use kpng_model::{Key, ServiceName, Value};
use kpng_store::Store;
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Set(Key, Value),
    Delete(Key),
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
        (Key::Service(name), Value::Service(Arc::new(svc)))
    });
    let endpoint = (service_name(), 0..4u8, any::<bool>()).prop_map(|(name, id, ready)| {
        let ep = Endpoint {
            ready,
            ..Default::default()
        };
        (
            Key::Endpoint(name, [10, 0, 0, id].into()),
            Value::Endpoint(Arc::new(ep)),
        )
    });
    prop_oneof![
        3 => prop_oneof![service, endpoint].prop_map(|(k, v)| Op::Set(k, v)),
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
    fn store_matches_model(txns in prop::collection::vec(prop::collection::vec(op(), 0..8), 1..24)) {
        let mut store = Store::new();
        let reader = store.reader();
        let mut model: BTreeMap<Key, Value> = BTreeMap::new();
        let mut history = vec![(store.snapshot(), model.clone())];

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
            prop_assert_eq!(snapshot.changed_since(old), Some(expected));
            prop_assert_eq!(&contents(old), old_model);

            history.push((snapshot, model.clone()));
        }

        // Snapshots are immutable: every one still holds what it held.
        for (snapshot, model) in &history {
            prop_assert_eq!(&contents(snapshot), model);
        }
        // The log covers any span back to revision 0 here.
        let first = &history[0].0;
        let last = &history[history.len() - 1].0;
        let all: BTreeSet<Key> = last.iter().map(|(k, _)| k).collect();
        let changed = last.changed_since(first).expect("in log");
        prop_assert!(all.is_subset(&changed));
    }
}
