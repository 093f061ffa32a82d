//! Property tests of the store's diff ([`Snapshot::diff`]) and its replay
//! ([`kpng_store::Txn::apply`]).

use std::collections::BTreeMap;

use kpng_model::{Key, Value};
use kpng_store::{MapOp, Snapshot, Store};
use kpng_testkit::history::writes::{history, txns};
use proptest::prelude::*;

fn contents(snapshot: &Snapshot) -> BTreeMap<Key, Value> {
    snapshot.iter().collect()
}

proptest! {
    #[test]
    fn apply_diff_a_b_to_a_gives_b(txns in txns(), log in 1..6usize) {
        // The same history twice: with a short change log (most spans fall
        // back to the structural walk) and with a long one (never).
        let short = history(txns.clone(), log);
        let long = history(txns, 1024);
        for (i, a) in short.iter().enumerate() {
            prop_assert!(a.diff(a).is_empty(), "diff(A, A) is empty");
            for (j, b) in short.iter().enumerate() {
                let ops = a.diff(b);
                // Replay A into a replica, apply the diff: it holds B.
                let mut replica = Store::new();
                let mut txn = replica.begin();
                for (k, v) in a.iter() {
                    txn.set(k, v).expect("kinds match");
                }
                txn.apply(&ops).expect("kinds match");
                txn.commit();
                prop_assert_eq!(contents(&replica.snapshot()), contents(b));
                // Minimal: exactly one op per key whose value differs, in
                // key order; the log and the walk agree.
                let (ca, cb) = (contents(a), contents(b));
                let differing = ca.keys().chain(cb.keys()).filter(|k| ca.get(k) != cb.get(k)).collect::<std::collections::BTreeSet<_>>();
                let keys: Vec<&Key> = ops.iter().map(MapOp::key).collect();
                prop_assert_eq!(keys, differing.into_iter().collect::<Vec<_>>());
                prop_assert_eq!(&ops, &long[i].diff(&long[j]));
            }
        }
    }
}
